import math

import pytest

from mlbook.common import transformer as config


# --- model state ---------------------------------------------------------------------
from mlbook.mfu import flops


# --- model state ---------------------------------------------------------------------
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


# --- activations (Korthikanti et al. 2022, Table 2) -------------------------------------------

def test_activation_formula_known_values():
    s, b, h, a = 2048, 1, 1024, 16
    sbh = s * b * h
    assert memory.activation_bytes_per_layer(s, b, h, a) == sbh * (34 + 5 * a * s / h)
    assert memory.activation_bytes_per_layer(s, b, h, a, "selective") == 34 * sbh
    assert memory.activation_bytes_per_layer(s, b, h, a, "full") == 2 * sbh


def test_attention_mlp_norm_split():
    # attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh (the paper's per-part sums)
    s, b, h, a = 512, 3, 256, 8
    sbh = s * b * h
    total = memory.activation_bytes_per_layer(s, b, h, a)
    assert total == (11 * sbh + 5 * a * s * s * b) + 19 * sbh + 4 * sbh


def test_llama2_7b_at_4k():
    c = config.LLAMA2_7B
    per_layer = memory.activation_bytes_per_layer(4096, 1, c.d_model, c.n_heads)
    # sbh(34 + 5 a s / h) with s = h = 4096, a = 32: 4096^2 (34 + 160) bytes
    assert per_layer == 4096 * 4096 * 194
    assert per_layer * c.n_layers / memory.GIB == pytest.approx(97.0)
    # activations at b=1 are about as large as the 16 bytes/parameter of model state
    state = memory.model_state_bytes(flops.n_params(c))
    assert 0.9 < per_layer * c.n_layers / state < 1.1


def test_activation_is_linear_in_b_and_order_of_strategies():
    for s in (128, 1024, 8192):
        none, sel, full = (memory.activation_bytes_per_layer(s, 1, 1024, 16, r)
                           for r in ("none", "selective", "full"))
        assert none > sel > full
        assert memory.activation_bytes_per_layer(s, 4, 1024, 16) == 4 * none


def test_score_term_grows_as_s_squared():
    h, a = 1024, 16
    def score(s):
        return (memory.activation_bytes_per_layer(s, 1, h, a)
                - memory.activation_bytes_per_layer(s, 1, h, a, "selective"))
    assert score(2048) == 4 * score(1024)
    assert math.isclose(score(1024), 5 * a * 1024**2)


@pytest.mark.parametrize("kw,match", [
    (dict(s=0), "s must"), (dict(b=-1), "b must"), (dict(h=0), "h must"),
    (dict(a=0), "a must"), (dict(s=1.5), "s must"), (dict(h=True), "h must"),
    (dict(a=3), "a=3 must divide h=64"), (dict(recompute="sqrt"), "recompute must be one of"),
])
def test_activation_rejects_bad_input(kw, match):
    args = dict(s=16, b=1, h=64, a=4, recompute="none") | kw
    with pytest.raises(ValueError, match=match):
        memory.activation_bytes_per_layer(**args)
