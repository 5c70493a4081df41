"""Artifacts to diagnose: all-reduce sweeps as nccl-tests prints them, made by
a seeded simulation of the ring model (``formulas.ring_allreduce_s``) with a
known cause. Standard library only: the same seed gives the same sweep on
every machine, in milliseconds.

``allreduce_log(seed, n_ranks, ...)`` draws the ring's latency alpha and link
bandwidth B from the seed (or takes the link's rated speed and a planted
defect), times every message size with the model, and adds a little
measurement noise. The result carries what the reader sees (``rows``) and
the truth the exercise keys are computed from (``alpha_s``,
``link_bytes_per_s``, ``cause``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.scaling import formulas

_LOG_SIZES = tuple(1024 * 4**i for i in range(11))  # 1 KiB to 1 GiB
CAUSES = ("healthy", "slow_link")
_ALPHA_RANGE_S = (2e-6, 20e-6)  # per ring step
_LINK_RANGE = (20e9, 400e9)  # bytes/s, when no rated speed is given
_HEALTHY_SHARE = (0.75, 0.85)  # of the rated speed (NCCL: ~370 of 450 GB/s)
_SLOW_SHARE = (0.3, 0.45)  # a ring through one degraded link


@dataclass(frozen=True)
class SweepRow:
    """One line of the sweep: a message size, its time, and nccl-tests'
    algorithm and bus bandwidths (algbw = S / T, busbw = 2 (N - 1) / N S / T)."""

    size_bytes: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class SweepLog:
    """A simulated all-reduce sweep and the truth behind it."""

    seed: int
    n_ranks: int
    rows: tuple
    alpha_s: float  # the ring's latency per step
    link_bytes_per_s: float  # the ring's B: its slowest link's speed
    cause: str  # "healthy" or "slow_link"
    noise: float  # relative spread of the measured times

    def predict_s(self, n_bytes: float) -> float:
        """The noiseless time of an all-reduce of ``n_bytes``."""
        return formulas.ring_allreduce_s(
            n_bytes, self.n_ranks, self.link_bytes_per_s, self.alpha_s
        )


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def allreduce_log(
    seed: int,
    n_ranks: int,
    rated_bytes_per_s: float | None = None,
    cause: str = "healthy",
    sizes_bytes=_LOG_SIZES,
    noise: float = 0.02,
) -> SweepLog:
    """An all-reduce sweep over ``n_ranks`` ranks, as nccl-tests would print
    it. alpha is drawn log-uniform in 2-20 us a step; B log-uniform in
    20-400 GB/s, or, given the links' ``rated_bytes_per_s``, 75-85 % of it
    for a healthy ring and 30-45 % for a ring through one degraded link
    (``cause="slow_link"``: a ring runs at its slowest link). Each time is the
    ring model's times a log-normal factor of spread ``noise``."""
    seed = validate.non_negative("seed", seed)
    if not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    n = validate.positive_int("n_ranks", n_ranks)
    if n < 2:
        raise ValueError(f"n_ranks must be at least 2, got {n}")
    validate.one_of("cause", cause, CAUSES)
    validate.non_negative("noise", noise)
    sizes = tuple(
        validate.positive_int(f"sizes_bytes[{i}]", s) for i, s in enumerate(sizes_bytes)
    )
    rng = random.Random(seed)
    alpha = _log_uniform(rng, *_ALPHA_RANGE_S)
    if rated_bytes_per_s is None:
        if cause != "healthy":
            raise ValueError("a slow link needs the links' rated_bytes_per_s")
        link = _log_uniform(rng, *_LINK_RANGE)
    else:
        validate.positive("rated_bytes_per_s", rated_bytes_per_s)
        share = _HEALTHY_SHARE if cause == "healthy" else _SLOW_SHARE
        link = rated_bytes_per_s * rng.uniform(*share)
    rows = []
    for s in sizes:
        t = formulas.ring_allreduce_s(s, n, link, alpha) * math.exp(
            rng.gauss(0.0, noise)
        )
        rows.append(SweepRow(s, t, s / t, formulas.bus_bytes_per_s(s, n, t)))
    return SweepLog(seed, n, tuple(rows), alpha, link, cause, noise)


def bucket_allreduce_s(log: SweepLog, grad_bytes: float, bucket_bytes: float) -> float:
    """Seconds to all-reduce ``grad_bytes`` of gradients in buckets of
    ``bucket_bytes`` (the last one partly full), one ring all-reduce each,
    with the sweep's true alpha and B."""
    validate.positive("grad_bytes", grad_bytes)
    validate.positive("bucket_bytes", bucket_bytes)
    full, rest = divmod(grad_bytes, bucket_bytes)
    t = int(full) * log.predict_s(bucket_bytes)
    return t + (log.predict_s(rest) if rest > 0 else 0.0)
