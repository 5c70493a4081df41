"""Measuring a real training step: wall time, throughput, counted FLOPs.

Torch is imported here, never by the calculators.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from mlbook.common import validate


@contextmanager
def cpu_threads(n: int | None, device: str = "cpu", name: str = "cpu_threads"):
    """Run torch's CPU kernels on ``n`` threads inside the block, then restore
    the previous count. None, or a device other than the CPU, changes nothing.

    Small models gain nothing from more threads, and on a busy shared CPU a
    second thread that must be woken for every microsecond-long op made the
    book's timing loops ten times slower and tenfold noisier. ``name`` is the
    argument the caller calls it, for the error message.
    """
    if n is not None:
        n = validate.positive_int(name, n)
    if n is None or device != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sync(device: str) -> None:
    """Wait for queued GPU work so that a timer measures it (no-op on CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(step, steps: int, warmup: int = 1, device: str = "cpu") -> list[float]:
    """Wall seconds of each of ``steps`` calls of ``step()`` after ``warmup``
    untimed calls, synchronising the device around each one."""
    validate.positive_int("steps", steps)
    for _ in range(warmup):
        step()
    sync(device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def median_s(times: list[float]) -> float:
    return statistics.median(times)


@dataclass(frozen=True)
class Measured:
    """What measure_until kept: the pooled ``value``, how many measurements
    it pools, and the seconds spent measuring again (after the first)."""

    value: object
    attempts: int
    again_s: float


def measure_until(
    measure,
    settled,
    pool,
    max_attempts: int,
    budget_s: float = math.inf,
    log=None,
) -> Measured:
    """Measure once with ``measure()``; while ``settled(value)`` is False,
    measure again and ``pool(value, more)`` the samples, up to
    ``max_attempts`` measurements in all, and while ``budget_s`` seconds still
    cover one more measurement as long as the last one took. Interference from
    other processes only adds time, and the median of more samples settles, so
    more samples can only help; a number that does not settle in that many is
    kept as it is, and the page states it. ``log`` (for example ``print``) is
    told why each measurement is taken again, and why the last one stays."""
    validate.positive_int("max_attempts", max_attempts)
    if budget_s != math.inf:
        validate.non_negative("budget_s", budget_s)
    log = log or (lambda *_: None)
    start = time.perf_counter()
    value = measure()
    last_s, again_s, attempts = time.perf_counter() - start, 0.0, 1
    while not settled(value):
        if attempts >= max_attempts:
            log(f"kept after {attempts} measurements, the most allowed")
            break
        if last_s > budget_s - again_s:
            left = max(budget_s - again_s, 0)
            log(f"kept after {attempts} measurements: {left:.1f} s left, too few")
            break
        log(f"measuring again ({attempts + 1} of at most {max_attempts}) ...")
        start = time.perf_counter()
        value = pool(value, measure())
        last_s = time.perf_counter() - start
        again_s += last_s
        attempts += 1
    return Measured(value, attempts, again_s)


def counted_flops(model, idx, targets=None, backward: bool = True) -> dict:
    """FLOPs that torch.utils.flop_counter counts for one forward (and, with
    backward=True, the backward too), in total and per aten operator."""
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        out = model(idx, targets) if targets is not None else model(idx)
        if backward:
            loss = out[1] if isinstance(out, tuple) else out.float().mean()
            loss.backward()
    per_op = {
        str(op).removeprefix("aten."): n
        for op, n in counter.get_flop_counts()["Global"].items()
    }
    return {"total": counter.get_total_flops(), "per_op": per_op}
