"""Incidents to diagnose: seeded artifacts built on the chapter's formulas.

Each generator draws from a seed what an engineer meets in practice (a run's
failure log, a sweep of checkpoint write times) and returns it with the
truth it was drawn from, so an exercise's key is that truth run through the
chapter's formulas. They take milliseconds, and a seed gives the same
artifact on every machine (NumPy's PCG64 stream, float64 arithmetic).

- ``failure_log``: a run that checkpoints every ``interval_s`` seconds of
  work on a cluster whose MTBF the seed draws (and does not tell). Failures
  arrive as a Poisson process while the job trains, as in
  ``formulas.simulate_waste``; each failure throws away the work since the
  last committed checkpoint, then the job restarts for ``restart_s``.
- ``write_sweep``: the write time of one checkpoint against the number of
  ranks writing it, ``formulas.write_time_s`` with a seeded per-rank
  bandwidth, a seeded storage ceiling and a jitter of up to 1.5 %.

NumPy is imported inside the generators, so importing this module (and
``mlbook.cadence``) stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

from mlbook.cadence import formulas
from mlbook.common import validate
from mlbook.common.units import HOUR_S

# The range the seed draws a failure log's hidden cluster MTBF from, in hours.
FAILURE_LOG_MTBF_H = (2.0, 5.0)
# write_sweep: a rank's own write bandwidth (bytes/s), and the storage ceiling as
# 2^(e + u) ranks' worth, e one of these exponents and u in [0.3, 0.7], so the
# saturating writer count never sits on a power of two the sweep tries.
WRITER_BYTES_PER_S = (0.5e9, 2.0e9)
SATURATION_EXPONENTS = (5, 6, 7)
WRITE_JITTER = 0.015  # the sweep's timings scatter by up to 1.5 %
SWEEP_WRITERS = (8, 16, 32, 64, 128, 256, 512, 1024)


def _seed(seed) -> int:
    if not isinstance(seed, Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return int(seed)


@dataclass(frozen=True)
class Failure:
    """One line of a failure log: the failure's number, when it struck and
    when the checkpoint it resumed from was committed (hours since the run
    started; a restart counts as a commit of the state it reloaded)."""

    number: int
    failed_at_h: float
    committed_at_h: float

    @property
    def redone_h(self) -> float:
        """Work since the last commit: lost, and done again after the restart."""
        return self.failed_at_h - self.committed_at_h


@dataclass(frozen=True)
class FailureLog:
    """A run's failures, with the settings that produced them.

    ``mtbf_s`` is the cluster's MTBF the seed drew: the truth behind the log,
    which an operator estimates as ``run_h`` over the number of failures."""

    seed: int
    run_h: float
    checkpoint_s: float
    interval_s: float
    restart_s: float
    mtbf_s: float
    failures: tuple[Failure, ...]

    @property
    def observed_mtbf_s(self) -> float:
        """The run's wall time over its failures, as read off the log."""
        if not self.failures:
            raise ValueError(f"the log of seed {self.seed} has no failures")
        return self.run_h * HOUR_S / len(self.failures)

    @property
    def redone_h(self) -> float:
        """Hours of work lost to failures and done again."""
        return sum(f.redone_h for f in self.failures)


def _check_log_args(run_h, checkpoint_s, interval_s, restart_s):
    validate.positive("run_h", run_h)
    validate.positive("checkpoint_s", checkpoint_s)
    validate.positive("interval_s", interval_s)
    validate.non_negative("restart_s", restart_s)


def failure_log(
    seed: int,
    checkpoint_s: float,
    interval_s: float,
    restart_s: float,
    run_h: float = 48.0,
) -> FailureLog:
    """A run of ``run_h`` hours that writes a checkpoint (``checkpoint_s``)
    after every ``interval_s`` seconds of work, on a cluster whose MTBF the
    seed draws from ``FAILURE_LOG_MTBF_H``. Failures strike while the job
    trains or writes (exponential gaps counted from each restart's end); each
    loses the time since the last committed checkpoint and costs a restart."""
    import numpy as np

    _check_log_args(run_h, checkpoint_s, interval_s, restart_s)
    rng = np.random.default_rng(_seed(seed))
    lo, hi = FAILURE_LOG_MTBF_H
    mtbf_s = float(rng.uniform(lo, hi)) * HOUR_S
    horizon_s, segment_s = run_h * HOUR_S, interval_s + checkpoint_s
    failures, up_s = [], 0.0  # up_s: when training last (re)started
    while up_s < horizon_s:
        failed_s = up_s + float(rng.exponential(mtbf_s))
        if failed_s >= horizon_s:
            break
        committed_s = up_s + math.floor((failed_s - up_s) / segment_s) * segment_s
        failures.append(
            Failure(len(failures) + 1, failed_s / HOUR_S, committed_s / HOUR_S)
        )
        up_s = failed_s + restart_s
    return FailureLog(
        seed=int(seed),
        run_h=float(run_h),
        checkpoint_s=float(checkpoint_s),
        interval_s=float(interval_s),
        restart_s=float(restart_s),
        mtbf_s=mtbf_s,
        failures=tuple(failures),
    )


@dataclass(frozen=True)
class WriteTiming:
    """One point of a write sweep: ranks writing, seconds the write took."""

    writers: int
    write_s: float


@dataclass(frozen=True)
class WriteSweep:
    """Checkpoint write times against the number of writers, with the two
    bandwidths the seed drew (the truth the timings scatter around)."""

    seed: int
    checkpoint_bytes: float
    writer_bytes_per_s: float
    storage_bytes_per_s: float
    timings: tuple[WriteTiming, ...]

    @property
    def saturating_writers(self) -> float:
        """Writers whose bandwidths add up to the storage's ceiling."""
        return self.storage_bytes_per_s / self.writer_bytes_per_s

    def write_s(self, writers: int) -> float:
        """The write time the model gives (no jitter) for ``writers`` ranks."""
        return formulas.write_time_s(
            self.checkpoint_bytes,
            writers,
            self.writer_bytes_per_s,
            self.storage_bytes_per_s,
        )


def write_sweep(
    seed: int, n_params: float, writers: tuple[int, ...] = SWEEP_WRITERS
) -> WriteSweep:
    """Timed writes of one checkpoint of an ``n_params`` model (14 bytes a
    parameter, ``formulas.checkpoint_bytes``) by each count in ``writers``."""
    import numpy as np

    nbytes = formulas.checkpoint_bytes(validate.positive("n_params", n_params))
    counts = [validate.positive_int("writers", w) for w in writers]
    if not counts:
        raise ValueError("writers must name at least one writer count")
    rng = np.random.default_rng(_seed(seed))
    writer = float(rng.uniform(*WRITER_BYTES_PER_S))
    exponent = int(rng.choice(SATURATION_EXPONENTS)) + float(rng.uniform(0.3, 0.7))
    storage = writer * 2.0**exponent
    jitter = rng.uniform(-WRITE_JITTER, WRITE_JITTER, len(counts))
    timings = tuple(
        WriteTiming(n, formulas.write_time_s(nbytes, n, writer, storage) * (1 + j))
        for n, j in zip(counts, jitter, strict=True)
    )
    return WriteSweep(int(seed), nbytes, writer, storage, timings)
