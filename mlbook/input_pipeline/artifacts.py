"""Artifacts to diagnose: a training loop's per-step timings (the wait for
data before each step, and the step's compute), as a profiler summary shows
them, made by a seeded simulation of the loader model (``formulas``) with a
known cause. Standard library only: the same seed gives the same trace on
every machine.

``loader_log(seed, workers)`` draws a batch's load time and a step's compute
time from the seed (or takes them) and plays the DataLoader out
batch by batch: with no workers the training process loads each batch
itself, then computes; with ``w`` workers, worker ``i mod w`` loads batch
``i`` as soon as it has finished its previous one, and the step starts when
both the device and the batch are ready. Each load and each step varies by a
log-normal factor of spread ``jitter``. The result carries what the reader
sees (``rows``) and the truth behind it (``load_s``, ``compute_s``,
``workers``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.input_pipeline import formulas


@dataclass(frozen=True)
class StepRow:
    """One training step: the wait for its batch, then its compute."""

    step: int
    wait_s: float
    compute_s: float

    @property
    def step_s(self) -> float:
        return self.wait_s + self.compute_s


@dataclass(frozen=True)
class LoaderLog:
    """A simulated loop's steps and the loader behind them."""

    seed: int
    rows: tuple
    load_s: float  # one worker's time to produce one batch
    compute_s: float  # the device's time for one step
    workers: int
    jitter: float

    @property
    def loader_bound(self) -> bool:
        """Whether, in the steady state, the device waits for data."""
        return (
            formulas.device_idle_fraction(self.load_s, self.compute_s, self.workers) > 0
        )


_COMPUTE_RANGE_S = (0.05, 0.5)  # a step's compute, drawn log-uniform
_LOAD_RATIO_RANGE = (0.005, 4.0)  # a batch's load over (compute x max(1, workers))


def _draw(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def loader_log(
    seed: int,
    workers: int,
    steps: int = 12,
    jitter: float = 0.02,
    load_s: float | None = None,
    compute_s: float | None = None,
) -> LoaderLog:
    """``steps`` steps of a loop fed by ``workers`` DataLoader workers (0: the
    training process loads), each batch costing ``load_s`` of one worker's
    time and each step ``compute_s`` of the device's, give or take
    ``jitter``. Unless given, ``compute_s`` is drawn log-uniform in 50-500 ms
    and ``load_s`` is that times max(1, workers) times a ratio drawn
    log-uniform in 0.005-4, so a seed may make the loader the bottleneck or
    not. The first batch of a fresh loader arrives after a whole load (the
    warm-up)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer at or above 0, got {workers!r}")
    w = workers
    n = validate.positive_int("steps", steps)
    validate.non_negative("jitter", jitter)
    rng = random.Random(seed)
    if compute_s is None:
        compute_s = _draw(rng, *_COMPUTE_RANGE_S)
    if load_s is None:
        load_s = compute_s * max(1, w) * _draw(rng, *_LOAD_RATIO_RANGE)
    validate.positive("load_s", load_s)
    validate.positive("compute_s", compute_s)
    loads = [load_s * math.exp(rng.gauss(0.0, jitter)) for _ in range(n)]
    computes = [compute_s * math.exp(rng.gauss(0.0, jitter)) for _ in range(n)]
    rows, now = [], 0.0
    free = [0.0] * max(w, 1)  # when each worker finished its last batch
    for i in range(n):
        if w == 0:
            wait = loads[i]
        else:
            k = i % w
            ready = free[k] + loads[i]
            free[k] = ready
            wait = max(0.0, ready - now)
        rows.append(StepRow(i + 1, wait, computes[i]))
        now += wait + computes[i]
    return LoaderLog(seed, tuple(rows), load_s, compute_s, w, jitter)
