"""The step model on a synthetic machine: known rates, a known bandwidth and
a known cost per operator give a step worked out by hand here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from mlbook.capstone import stepmodel as sm

MS = 1e-3
# A machine that runs a 512^3 fp32 matmul at 100 GFLOP/s, any other fp32
# matmul at its 200 GFLOP/s ceiling, fused attention forward at 10 GFLOP/s,
# moves 10 GB/s and pays 5 us an operator.
MACHINE = sm.MachineModel(
    gemm_flops_per_s={(512, 512, 512, "fp32"): 100e9},
    attention_flops_per_s={(8, 4, 64, 64, 128, "forward", "fp32"): 10e9},
    ceiling_flops_per_s={"fp32": 200e9},
    bandwidth_bytes_per_s=10e9,
    op_cost_s=5e-6,
)


def op(bucket, name, count=1, flops=0, n_bytes=0, **kw):
    return sm.Operator(bucket, name, "fp32", count, flops, n_bytes, **kw)


def test_a_known_step_by_hand():
    ops = [
        # 3 matmuls of 512^3: 2*512^3 = 268,435,456 FLOPs at 100 GFLOP/s
        # (2.684 ms) against 3 MiB at 10 GB/s (0.315 ms): compute, 3 x 2.684 ms
        op(
            "matmul", "aten::mm", 3, 2 * 512**3, 3 * 512 * 512 * 4, gemm=(512, 512, 512)
        ),
        # a 1024^3 matmul nobody timed: the ceiling, 2*1024^3 / 200e9 = 10.737 ms
        op("matmul", "aten::mm", 1, 2 * 1024**3, 12 * 2**20, gemm=(1024, 1024, 1024)),
        # 10 adds of 4 MB each: memory, 0.4 ms each
        op("elementwise", "aten::add", 10, 0, 4e6),
        # a fused attention forward of 67,108,864 FLOPs at 10 GFLOP/s: 6.711 ms
        op(
            "attention", "aten::sdpa", 1, 67_108_864, 1e6, attention=(8, 4, 64, 64, 128)
        ),
        # 100 views: no work, only the cost of each
        op("elementwise", "aten::view", 100),
    ]
    got = sm.predict_step(ops, MACHINE)
    matmul = 3 * 2 * 512**3 / 100e9 + 2 * 1024**3 / 200e9 + 4 * 5e-6
    elementwise = 10 * 4e6 / 10e9 + 110 * 5e-6
    attention = 67_108_864 / 10e9 + 5e-6
    assert got.seconds("matmul") == pytest.approx(matmul)
    assert got.seconds("elementwise") == pytest.approx(elementwise)
    assert got.seconds("attention") == pytest.approx(attention)
    assert got.step_s == pytest.approx(matmul + elementwise + attention)
    assert got.operators == 115
    parts = {b.bucket: b for b in got.buckets}
    assert parts["matmul"].compute_s == pytest.approx(matmul - 4 * 5e-6)
    assert parts["elementwise"].memory_s == pytest.approx(10 * 4e6 / 10e9)
    assert parts["elementwise"].fixed_s == pytest.approx(110 * 5e-6)
    assert parts["optimizer"].seconds == 0


def test_a_thin_matmul_is_bound_by_its_bytes():
    # 2 tokens through 4096 x 4096 at 100 GFLOP/s would take 0.67 ms, but its
    # 64 MiB of weights take 6.7 ms at 10 GB/s: the bytes win
    flops, n_bytes = 2 * 2 * 4096 * 4096, 4 * (2 * 4096 + 4096 * 4096 + 2 * 4096)
    m = sm.MachineModel({(2, 4096, 4096, "fp32"): 100e9}, {}, {"fp32": 1e12}, 10e9, 0)
    got = sm.predict_step(
        [op("matmul", "aten::mm", 1, flops, n_bytes, gemm=(2, 4096, 4096))], m
    )
    assert got.step_s == pytest.approx(n_bytes / 10e9)
    assert got.buckets[0].memory_s == pytest.approx(n_bytes / 10e9)


def test_operators_merge_identical_calls_and_bucket_them_as_the_profiler_does():
    def counted(name, top, scopes, flops=0, n_bytes=0, gemm=None, backward=False):
        return SimpleNamespace(
            name=name,
            flops=flops,
            bytes=n_bytes,
            dtype="fp32",
            scopes=scopes,
            top=top,
            gemm=gemm,
            batch=1,
            attention=None,
            backward=backward,
        )

    fwd = ("ladder/step", "ladder/forward")
    ops = sm.operators_of(
        [
            counted("aten::mm", "aten::linear", fwd, 10, 20, (1, 5, 1)),
            counted("aten::mm", "aten::linear", fwd, 10, 20, (1, 5, 1)),
            counted("aten::view", "aten::linear", fwd),
            counted("aten::add", "aten::add", fwd, 0, 12),
            counted(
                "aten::mm",
                "autograd::engine::evaluate_function: MmBackward0",
                ("ladder/step", "ladder/backward"),
                10,
                20,
                (1, 5, 1),
                True,
            ),
            counted(
                "aten::_fused_adamw_",
                "aten::fused_adamw",
                ("ladder/step", "ladder/optimizer", "Optimizer.step#AdamW.step"),
                0,
                800,
            ),
            counted("aten::add", "aten::add", ("ladder/step", "ladder/data")),
        ]
    )
    assert [(o.bucket, o.name, o.count) for o in ops] == [
        ("matmul", "aten::mm", 2),
        ("matmul", "aten::view", 1),
        ("elementwise", "aten::add", 1),
        ("matmul", "aten::mm", 1),
        ("optimizer", "aten::_fused_adamw_", 1),
        ("data", "aten::add", 1),
    ]


def test_compare_and_where_the_step_lost_most():
    pred = sm.predict_step(
        [op("matmul", "aten::mm", 1, 2e9, 0, gemm=(1, 1, 1))], MACHINE
    )
    # the matmul predicted 10 ms at the ceiling, measured 12 ms; 30 ms of data
    # loading that no operator predicted
    rows = sm.compare(pred, {"matmul": 12 * MS, "data": 30 * MS, "idle": 0.0})
    assert [r.bucket for r in rows] == ["matmul", "data"]
    assert rows[0].ratio == pytest.approx(12 / (10 + 0.005))
    assert rows[1].ratio == math.inf and rows[1].excess_s == pytest.approx(30 * MS)
    assert sm.largest_excess(rows).bucket == "data"
    assert sm.step_ratio(42 * MS, pred) == pytest.approx(42 / 10.005)


def test_the_machine_survives_json():
    import json

    again = sm.machine_model_from_json(json.loads(json.dumps(MACHINE.to_json())))
    assert again == MACHINE


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: op("nowhere", "aten::mm"), "bucket"),
        (lambda: op("matmul", "aten::mm", 0), "count"),
        (lambda: op("matmul", "aten::mm", gemm=(1, 2)), "gemm"),
        (lambda: sm.MachineModel({}, {}, {}, 0, 0), "bandwidth"),
        (lambda: sm.MachineModel({(1, 1, 1, "fp32"): -1}, {}, {}, 1, 0), "gemm_flops"),
        (lambda: sm.machine_model_from_json({"gemm_flops_per_s": []}), "step model"),
        (
            lambda: sm.predict_step(
                [op("matmul", "aten::mm", 1, 1)], sm.MachineModel({}, {}, {}, 1, 0)
            ),
            "no rate",
        ),
        (lambda: sm.largest_excess([]), "at least one"),
    ],
)
def test_bad_input_is_refused(call, words):
    with pytest.raises(ValueError, match=words):
        call()
