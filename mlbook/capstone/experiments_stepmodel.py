"""The step model's inputs, measured for the capstone's ladder: each rung's
operators counted once (mlbook.common_torch.opcount), bucketed as the
profiler's accounting buckets them, and a calibration of the machine
(mlbook.common.stepmodel.MachineModel) from the ladder's own matmul
sweeps, the fused attention kernel at the rungs' shapes, a triad and the
small-operator benchmark (mlbook.common_torch.opbench)."""

from __future__ import annotations

import statistics

import torch

from mlbook.common import stepmodel
from mlbook.common_torch import opbench
from mlbook.common_torch.bandwidth import triad_bytes_per_s
from mlbook.common_torch.opcount import count_ops


def count_step(step) -> tuple:
    """The Operators of one call of ``step()`` (call it once before, so that
    what a first step creates, an optimizer's moments, exists)."""
    return stepmodel.operators_of(count_ops(step))


def count_loop(loop) -> tuple:
    """The Operators of one step of a reference ``Loop`` that has run. A
    compiled loop is counted as its model runs uncompiled: the operators
    torch.compile fuses, which the step model cannot see inside a graph."""
    if not loop.config.compile:
        return count_step(loop.step)
    compiled, loop.forward = loop.forward, loop.model
    try:
        return count_step(loop.step)
    finally:
        loop.forward = compiled


def calibrate(
    steps_operators,
    ceilings: dict,
    device: str = "cpu",
    clock: str = "wall",
    triad_bytes: int = 64 * 2**20,
    min_run_time_s: float = 0.02,
    timed=(),
) -> stepmodel.MachineModel:
    """A MachineModel for the steps whose Operators are ``steps_operators``
    (one tuple a step), on the current threads and ``clock``.

    A matmul shape's rate is the median of its timings: the sweep's
    (``ceilings`` maps a dtype to its matmul sweep, which times the model's
    own shapes first) and those in ``timed`` ({(m, n, k, dtype): FLOP/s}
    dicts taken in turns with the steps, so that the rates see the load the
    steps saw); a shape with neither is timed now. Fused attention is timed
    now, at every shape; the bandwidth is the triad's median and the fixed
    cost the small-operator benchmark's."""
    ops = [op for step in steps_operators for op in step]
    samples: dict = {}
    for d, ceiling in ceilings.items():
        for t in ceiling.timings:
            samples.setdefault((t.m, t.n, t.k, d), []).append(t.flops_per_s)
    for rates in timed:
        for key, rate in rates.items():
            samples.setdefault(key, []).append(rate)
    untimed = [
        op
        for op in ops
        if op.gemm is not None and op.batch == 1 and op.flops
        and (*op.gemm, op.dtype) not in samples
    ]  # fmt: skip
    with torch.inference_mode():
        now = opbench.gemm_rates(untimed, {}, device, min_run_time_s, clock)
    gemm = {
        (*op.gemm, op.dtype): statistics.median(samples[(*op.gemm, op.dtype)])
        for op in ops
        if op.gemm is not None and op.batch == 1 and op.flops
        and (*op.gemm, op.dtype) in samples
    } | now  # fmt: skip
    attention = opbench.attention_rates(ops, device, clock=clock)
    bandwidth = statistics.median(triad_bytes_per_s(triad_bytes, 5, device, clock))
    cost = opbench.op_cost_s(clock=clock, device=device)
    best = {d: c.flops_per_s for d, c in ceilings.items()}
    return stepmodel.MachineModel(gemm, attention, best, bandwidth, cost)
