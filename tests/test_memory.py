"""Model-state bytes (activation bytes are the recompute chapter's:
tests/test_recompute.py)."""

import pytest

from mlbook.common import memory

# --- model state ---------------------------------------------------------------------


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    assert sum(memory.ADAM_MIXED_STATE_BYTES.values()) == 16
    assert memory.model_state_bytes(1) == 16
    assert memory.model_state_bytes(7e9) == 16 * 7e9


def test_model_state_breakdown_sums_to_total():
    parts = memory.model_state_bytes(1000, breakdown=True)
    assert parts["fp32 master weights"] == 4000 and parts["bf16 weights"] == 2000
    assert sum(parts.values()) == memory.model_state_bytes(1000)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "7e9", True])
def test_model_state_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="n_params"):
        memory.model_state_bytes(bad)
