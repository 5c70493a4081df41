"""The step model in the machine file: a version 2 file keeps its inputs and
its ``step`` row is the model's prediction, worked out here by hand; a
version 1 file (the kept calibrations made before the model) is still read,
holds its step against the lower bound alone, and says it has no model."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_calibrate import m, synthetic

from conftest import examples
from mlbook.calibrate import formulas as cal

PROPERTY_COVERS = {"mlbook.calibrate.formulas.step_model_ratio"}


def version_2(gemm_rate=100e9, bandwidth=10e9, cost=5e-6) -> dict:
    """The synthetic file with a step model: one 2 GFLOP matmul of 40 MB and
    100 views, an fp32 machine of 100 GFLOP/s at that shape."""
    d = copy.deepcopy(synthetic())
    d["schema_version"] = 2
    d["measurements"] |= {
        "step_bandwidth": m(bandwidth, unit="bytes/s"),
        "op_cost": m(cost),
    }
    d["reference"]["step_model"] = {
        "gemm_flops_per_s": [[1000, 1000, 1000, "fp32", gemm_rate]],
        "attention_flops_per_s": [],
        "ceiling_flops_per_s": {"fp32": 110e9},
        "operators": [
            {
                "bucket": "matmul", "name": "aten::mm", "dtype": "fp32",
                "count": 1, "flops": 2e9, "bytes": 40e6, "gemm": [1000, 1000, 1000],
                "batch": 1, "attention": None, "backward": False,
            },
            {
                "bucket": "elementwise", "name": "aten::view", "dtype": "fp32",
                "count": 100, "flops": 0, "bytes": 0, "gemm": None,
                "batch": 1, "attention": None, "backward": False,
            },
        ],
    }  # fmt: skip
    return d


def test_the_step_row_is_the_models_prediction_by_hand():
    machine = cal.from_dict(version_2())
    assert machine.has_step_model and machine.schema_version == 2
    rows = {c.key: c for c in cal.predictions(machine)}
    # 2e9 FLOPs at 100 GFLOP/s = 20 ms (above 40 MB at 10 GB/s = 4 ms), plus
    # 101 operators at 5 us: 20.505 ms, against a measured 50 ms
    assert rows["step"].predicted == pytest.approx(0.020505)
    assert rows["step"].ratio == pytest.approx(0.05 / 0.020505)
    assert rows["step"].check == "stated" and rows["step"].chapter == "capstone"
    assert cal.step_model_ratio(machine) == pytest.approx(0.05 / 0.020505)
    # the bound has a row of its own: 2e9 FLOPs at the 110 GFLOP/s ceiling
    assert rows["step_bound"].predicted == pytest.approx(2e9 / 110e9)
    assert rows["step_bound"].check == "lower bound"


def test_a_version_1_file_is_read_and_has_no_step_model():
    machine = cal.from_dict(synthetic())
    assert machine.schema_version == 1 and not machine.has_step_model
    keys = [c.key for c in cal.predictions(machine)]
    assert "step" not in keys and keys[0] == "step_bound"
    assert cal.step_model_ratio(machine) is None
    with pytest.raises(ValueError, match="keeps no step model"):
        machine.step_model()


def test_the_kept_calibrations_are_read_and_say_they_have_no_model():
    kept = cal.kept()
    assert kept and all(m.schema_version in cal.READ_VERSIONS for m in kept.values())
    old = [k for k, m in kept.items() if m.schema_version == 1]
    assert all(cal.step_model_ratio(kept[k]) is None for k in old)


def test_a_file_round_trips_with_its_step_model():
    import json

    machine = cal.from_dict(version_2())
    again = cal.from_dict(json.loads(cal.dumps(machine)))
    assert cal.step_model_ratio(again) == cal.step_model_ratio(machine)


@examples(30)
@given(
    st.floats(1e9, 1e13), st.floats(1e8, 1e12), st.floats(0, 1e-3), st.floats(1.5, 4)
)
def test_a_faster_machine_gives_a_larger_ratio(rate, bandwidth, cost, speedup):
    slow = cal.step_model_ratio(cal.from_dict(version_2(rate, bandwidth, cost)))
    fast = cal.step_model_ratio(
        cal.from_dict(version_2(rate * speedup, bandwidth * speedup, cost / speedup))
    )
    assert fast == pytest.approx(slow * speedup, rel=1e-9)


def test_step_model_ratio_refuses_what_is_not_a_machine():
    with pytest.raises(ValueError, match="Machine"):
        cal.step_model_ratio({"reference": {}})
