"""Property tests for the step model (mlbook.common.stepmodel): for any
operators and any machine the prediction is the sum of its operators' times,
each no less than its roofline, and the comparisons add up."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import formulas as cf
from mlbook.common import stepmodel as sm

PROPERTY_COVERS = {
    "mlbook.common.stepmodel.operators_of",
    "mlbook.common.stepmodel.machine_model_from_json",
    "mlbook.common.stepmodel.operators_to_json",
    "mlbook.common.stepmodel.operators_from_json",
    "mlbook.common.stepmodel.operator_time_s",
    "mlbook.common.stepmodel.predict_step",
    "mlbook.common.stepmodel.compare",
    "mlbook.common.stepmodel.largest_excess",
    "mlbook.common.stepmodel.step_ratio",
}

FEW = examples(50)
dims = st.integers(1, 4096)


@st.composite
def machines(draw):
    shapes = draw(st.lists(st.tuples(dims, dims, dims), max_size=4))
    return sm.MachineModel(
        {(*s, "fp32"): draw(st.floats(1e6, 1e13)) for s in shapes},
        {},
        {"fp32": draw(st.floats(1e6, 1e13))},
        draw(st.floats(1e6, 1e12)),
        draw(st.floats(0, 1e-3)),
    )


@st.composite
def operator_lists(draw):
    out = []
    for _ in range(draw(st.integers(0, 8))):
        gemm = draw(st.none() | st.tuples(dims, dims, dims))
        flops = 2 * gemm[0] * gemm[1] * gemm[2] if gemm else 0
        out.append(
            sm.Operator(
                draw(st.sampled_from(cf.BUCKETS)),
                draw(st.sampled_from(["aten::mm", "aten::add", "aten::view"])),
                "fp32",
                draw(st.integers(1, 100)),
                flops,
                draw(st.floats(0, 1e9)),
                gemm,
            )
        )
    return out


@FEW
@given(operator_lists(), machines())
def test_the_step_is_the_sum_of_its_operators_each_above_its_roofline(ops, machine):
    got = sm.predict_step(ops, machine)
    assert [b.bucket for b in got.buckets] == list(cf.BUCKETS)
    total = sum(sm.operator_time_s(o, machine) for o in ops)
    assert got.step_s == pytest.approx(total, rel=1e-9, abs=1e-15)
    assert got.operators == sum(o.count for o in ops)
    ceiling = machine.ceiling_flops_per_s["fp32"]
    for o in ops:
        t = sm.operator_time_s(o, machine)
        assert t >= o.count * (o.bytes / machine.bandwidth_bytes_per_s) * (1 - 1e-12)
        assert t >= o.count * machine.op_cost_s * (1 - 1e-12)
        if o.gemm and (*o.gemm, "fp32") not in machine.gemm_flops_per_s:
            assert t >= o.count * o.flops / ceiling * (1 - 1e-12)


@FEW
@given(operator_lists(), machines(), st.floats(1.0, 4.0))
def test_a_faster_machine_never_predicts_a_slower_step(ops, machine, speedup):
    faster = sm.MachineModel(
        {k: v * speedup for k, v in machine.gemm_flops_per_s.items()},
        {},
        {d: v * speedup for d, v in machine.ceiling_flops_per_s.items()},
        machine.bandwidth_bytes_per_s * speedup,
        machine.op_cost_s / speedup,
    )
    slow, fast = sm.predict_step(ops, machine), sm.predict_step(ops, faster)
    assert fast.step_s <= slow.step_s * (1 + 1e-12)
    assert fast.step_s == pytest.approx(slow.step_s / speedup, rel=1e-9, abs=1e-15)


@FEW
@given(machines(), operator_lists())
def test_json_round_trip(machine, ops):
    import json

    assert sm.machine_model_from_json(machine.to_json()) == machine
    rows = json.loads(json.dumps(sm.operators_to_json(ops)))
    assert sm.operators_from_json(rows) == tuple(ops)


@pytest.mark.parametrize("bad", [None, {}, [{"bucket": "matmul"}], [3]])
def test_operators_from_json_refuses_what_is_not_a_list_of_operators(bad):
    with pytest.raises(ValueError, match="operators"):
        sm.operators_from_json(bad)


@FEW
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["aten::mm", "aten::add"]),
            st.sampled_from(["ladder/forward", "ladder/optimizer", "ladder/data"]),
        ),
        max_size=30,
    )
)
def test_operators_keep_every_call(calls):
    counted = [
        SimpleNamespace(
            name=n,
            flops=0,
            bytes=8,
            dtype="fp32",
            scopes=("ladder/step", s),
            top=n,
            gemm=None,
            batch=1,
            attention=None,
            backward=False,
        )
        for n, s in calls
    ]
    ops = sm.operators_of(counted)
    assert sum(o.count for o in ops) == len(calls)
    assert len({o.key for o in ops}) == len(ops)
    for o in ops:
        if o.bucket in ("optimizer", "data"):
            assert o.bucket in cf.SCOPE_BUCKETS.values()


@FEW
@given(
    operator_lists(),
    machines(),
    st.dictionaries(st.sampled_from(cf.BUCKETS), st.floats(0, 10)),
)
def test_comparisons_add_up_and_the_largest_excess_is_largest(ops, machine, measured):
    pred = sm.predict_step(ops, machine)
    rows = sm.compare(pred, measured)
    assert sum(r.measured_s for r in rows) == pytest.approx(sum(measured.values()))
    assert sum(r.predicted_s for r in rows) == pytest.approx(pred.step_s)
    if rows:
        top = sm.largest_excess(rows)
        assert all(top.excess_s >= r.excess_s for r in rows)
    if pred.step_s > 0:
        assert sm.step_ratio(2.0, pred) == pytest.approx(2.0 / pred.step_s)


@pytest.mark.parametrize("bad", [0, -1, math.nan, True, None, "1"])
def test_step_ratio_refuses_a_bad_time(bad):
    pred = sm.predict_step([], sm.MachineModel({}, {}, {}, 1.0, 1.0))
    with pytest.raises(ValueError, match="measured_s"):
        sm.step_ratio(bad, pred)


@pytest.mark.parametrize("bad", [None, [], {"gemm_flops_per_s": [[1]]}])
def test_machine_model_from_json_refuses_what_is_not_one(bad):
    with pytest.raises(ValueError, match="step model"):
        sm.machine_model_from_json(bad)


def test_operators_refuses_what_is_not_counted():
    with pytest.raises(ValueError, match=r"counted\[0\]"):
        sm.operators_of([object()])
