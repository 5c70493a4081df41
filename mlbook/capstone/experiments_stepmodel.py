"""The step model's inputs, measured for the capstone's ladder: each rung's
operators counted once (mlbook.common_torch.opcount), bucketed as the
profiler's accounting buckets them, and a calibration of the machine
(mlbook.capstone.stepmodel.MachineModel) from the ladder's own matmul
sweeps, the fused attention kernel at the rungs' shapes, a triad and the
small-operator benchmark (mlbook.common_torch.opbench)."""

from __future__ import annotations

import statistics

import torch

from mlbook.capstone import stepmodel
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
) -> stepmodel.MachineModel:
    """A MachineModel for the steps whose Operators are ``steps_operators``
    (one tuple a step): rates at their shapes, the triad's median bandwidth
    and the small-operator benchmark's cost, on the current threads and
    ``clock``. ``ceilings`` maps a dtype to its matmul sweep."""
    ops = [op for step in steps_operators for op in step]
    with torch.inference_mode():
        gemm = opbench.gemm_rates(ops, ceilings, device, min_run_time_s, clock)
    attention = opbench.attention_rates(ops, device, clock=clock)
    bandwidth = statistics.median(triad_bytes_per_s(triad_bytes, 5, device, clock))
    cost = opbench.op_cost_s(clock=clock, device=device)
    best = {d: c.flops_per_s for d, c in ceilings.items()}
    return stepmodel.MachineModel(gemm, attention, best, bandwidth, cost)
