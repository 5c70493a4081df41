"""Faults at scale, as numbers: what breaks, what a slow rank costs, how to
catch a corrupted gradient, and what to do about a loss spike.

Pure numbers (no torch): the interruption table of the Llama 3
405B run, a straggler model of a synchronous data-parallel step, the
fingerprints that compare replicas before the optimizer step, a rolling
z-score loss-spike detector with a rewind-and-skip policy, and the summary of
an elastic run's timeline. The torch demos that exercise these live in
``mlbook.faults.experiments``, and the worker scripts torchrun starts in
``mlbook.faults.elastic_script`` and ``mlbook.faults.corruption_script``.

Every function returns numbers or frozen dataclasses; the page words them.

The module imports without numpy, so the planner (which reads the Llama 3
log) and the straggler model run in the reader's browser too. The straggler
integral has two paths with the same results: numpy's, vectorised, where numpy
is installed (the book's build), and the standard library's where it is not
(Pyodide); tests/test_live_stdlib.py holds them to agreement. The functions
that take or make arrays (simulated step times, bit flips, checksums, norms,
the spike detector's history) import numpy when they are called.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from numbers import Integral
from typing import TYPE_CHECKING

from mlbook.cadence.formulas import MTTF_1024_GPUS_S, MTTF_16384_GPUS_PROJECTED_S
from mlbook.common import validate
from mlbook.common.units import DAY_S, HOUR_S

if TYPE_CHECKING:
    import numpy as np


# ---------------------------------------------------------------------------
# What breaks: the Llama 3 405B interruption log
# ---------------------------------------------------------------------------

LLAMA3_SOURCE = (
    "Grattafiori et al. 2024, The Llama 3 Herd of Models, arXiv:2407.21783, "
    "Sec. 3.3.4 and Table 5 (54-day snapshot of 405B pre-training)"
)


@dataclass(frozen=True)
class Interruption:
    """One row of Llama 3's Table 5: a root cause, its category and count.

    ``printed_share`` is the percentage the paper prints beside the count; it
    is kept to show that it does not always equal count / 419.
    """

    component: str
    category: str
    count: int
    printed_share: float


LLAMA3_INTERRUPTIONS = (
    Interruption("Faulty GPU", "GPU", 148, 0.301),
    Interruption("GPU HBM3 memory", "GPU", 72, 0.172),
    Interruption("Software bug", "Dependency", 54, 0.129),
    Interruption("Network switch/cable", "Network", 35, 0.084),
    Interruption("Host maintenance", "Unplanned maintenance", 32, 0.076),
    Interruption("GPU SRAM memory", "GPU", 19, 0.045),
    Interruption("GPU system processor", "GPU", 17, 0.041),
    Interruption("NIC", "Host", 7, 0.017),
    Interruption("NCCL watchdog timeouts", "Unknown", 7, 0.017),
    Interruption("Silent data corruption", "GPU", 6, 0.014),
    Interruption("GPU thermal interface + sensor", "GPU", 6, 0.014),
    Interruption("SSD", "Host", 3, 0.007),
    Interruption("Power supply", "Host", 3, 0.007),
    Interruption("Server chassis", "Host", 2, 0.005),
    Interruption("IO expansion board", "Host", 2, 0.005),
    Interruption("Dependency", "Dependency", 2, 0.005),
    Interruption("CPU", "Host", 2, 0.005),
    Interruption("System memory", "Host", 2, 0.005),
)


@dataclass(frozen=True)
class RunLog:
    """The headline numbers of a published training run's fault log."""

    name: str
    days: float
    interruptions: int
    planned: int
    unexpected: int
    stated_hardware_share: float  # "about 78 %" confirmed or suspected hardware
    stated_gpu_share: float  # "GPU issues ... 58.7 %" of unexpected
    manual_interventions: int
    stated_effective_training_time: float  # "higher than 90 %"
    gpus: int
    source: str


LLAMA3_405B_LOG = RunLog(
    "Llama 3 405B pre-training",
    54,
    466,
    47,
    419,
    0.78,
    0.587,
    3,
    0.90,
    16384,
    LLAMA3_SOURCE,
)


# Other published logbooks (the facts the chapter quotes, each with its source).
OPT_175B_LOG = {
    "gpus": 992,
    "gpu": "A100",
    "manual_restarts_at_least": 35,
    "hosts_cycled_over": 100,
    "months": 2,
    "source": (
        "Zhang et al. 2022, OPT, arXiv:2205.01068 (Sec. 2.5 and the metaseq logbook)"
    ),
}
# Kokolis et al.'s figures live once, in mlbook.cadence.formulas,
# which plans around them.
META_RSC_MTTF = {
    "gpus_measured": 1024,
    "mttf_hours_measured": MTTF_1024_GPUS_S / HOUR_S,
    "gpus_projected": 16384,
    "mttf_hours_projected": MTTF_16384_GPUS_PROJECTED_S / HOUR_S,
    "source": "Kokolis et al. 2024, arXiv:2410.21680",
}
PALM_SPIKES = {
    "spikes": 20,
    "rewind_steps": 100,
    "skip_batches": (200, 500),
    "source": "Chowdhery et al. 2022, PaLM, arXiv:2204.02311, Sec. 5.1",
}


def interruptions_by_category(rows=LLAMA3_INTERRUPTIONS) -> dict[str, int]:
    """Counts summed per category, largest first (ties keep the rows' order)."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise ValueError(f"rows must be a sequence of Interruption rows, got {rows!r}")
    rows = list(rows)
    for i, r in enumerate(rows):
        if not isinstance(r, Interruption):
            raise ValueError(f"rows[{i}] must be an Interruption, got {r!r}")
        validate.non_negative_int(f"rows[{i}].count", r.count)
    totals: dict[str, int] = {}
    for r in rows:
        totals[r.category] = totals.get(r.category, 0) + r.count
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def mean_hours_between(interruptions: int, days: float) -> float:
    """Mean time between interruptions, in hours, for a log of ``days``."""
    validate.positive_int("interruptions", interruptions)
    validate.positive("days", days)
    return days * DAY_S / HOUR_S / interruptions


# ---------------------------------------------------------------------------
# Stragglers: a synchronous step is a barrier, so it lasts as long as its slowest rank
# ---------------------------------------------------------------------------
# Each rank's compute time is lognormal, median ``median_s`` and log-spread
# ``sigma``; one rank is slowed by a factor (1 + delta). The step ends when the
# last rank reaches the all-reduce: T = max_i X_i.

# A table of the normal CDF at z = -12, -11.999, ..., 12, read by linear
# interpolation: exact to ~1e-8 on this grid, 0 and 1 beyond it.
_Z_LO, _Z_HI, _Z_N = -12.0, 12.0, 24001
_GRID = 801  # trapezoid points a window: ~2e-7 relative error
_WINDOW = 9.0  # the max lies within 9 sigma of a rank's median
# Below this spread the max moves by under 1e-8 relative (about sigma * sqrt(2 ln n)),
# less than the grid's own error: it is computed as sigma = 0.
_TINY_SIGMA = 1e-9

# The model's domain. A log-spread of 1 means ranks that differ by a factor e
# from step to step: that is no longer noise around a step time. A rank more
# than 100 times slower than the others has stopped, not straggled.
MAX_SIGMA = 1.0
MAX_DELTA = 100.0


def _numpy():
    """numpy, or None where it is not installed (the browser's Python)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


@lru_cache(maxsize=1)
def _cdf_table() -> tuple[list[float], list[float], list[float]]:
    """z, Phi(z) and the slope to the next entry, as numpy's linspace and
    interp compute them (the same floating-point operations, so the same bits)."""
    step = (_Z_HI - _Z_LO) / (_Z_N - 1)
    z = [i * step + _Z_LO for i in range(_Z_N)]
    z[-1] = _Z_HI
    phi = [0.5 * (1.0 + math.erf(v / math.sqrt(2))) for v in z]
    slope = [(phi[j + 1] - phi[j]) / (z[j + 1] - z[j]) for j in range(_Z_N - 1)]
    return z, phi, slope


def _norm_cdf_stdlib(x: float) -> float:
    """np.interp(x, z, Phi) for one number: the standard library's table read."""
    z, phi, slope = _cdf_table()
    if x >= _Z_HI:
        return phi[-1]
    if x <= _Z_LO:
        return phi[0]
    j = min(int((x - _Z_LO) / (z[1] - z[0])), _Z_N - 2)
    while z[j] > x:
        j -= 1
    while z[j + 1] <= x:
        j += 1
    return slope[j] * (x - z[j]) + phi[j]


@lru_cache(maxsize=1)
def _cdf_arrays():
    np = _numpy()
    z, phi, _ = _cdf_table()
    return np.asarray(z), np.asarray(phi)


def delta_from_speed(speed: float) -> float:
    """A rank running at ``speed`` (0.8 = 80 %) takes 1/speed as long:
    delta = 1/speed - 1."""
    validate.fraction("speed", speed)
    if 1.0 / speed - 1.0 > MAX_DELTA:
        raise ValueError(
            f"speed must be at least 1/(1 + MAX_DELTA) = {1 / (1 + MAX_DELTA):.4g} "
            f"(slower than that a rank has stopped), got {speed!r}"
        )
    return 1.0 / speed - 1.0


def _check_straggler_args(n_ranks, delta, sigma, median_s=1.0):
    validate.positive("median_s", median_s)
    validate.positive_int("n_ranks", n_ranks)
    validate.non_negative("delta", delta)
    validate.non_negative("sigma", sigma)
    if delta > MAX_DELTA:
        raise ValueError(
            f"delta must be at most MAX_DELTA={MAX_DELTA:g} (a rank that slow has "
            f"stopped, not straggled), got {delta!r}"
        )
    if sigma > MAX_SIGMA:
        raise ValueError(
            f"sigma must be at most MAX_SIGMA={MAX_SIGMA:g} (a log-spread beyond "
            f"that is not noise around a step time), got {sigma!r}"
        )


def _tail_integral(
    lo: float, hi: float, n_ranks: int, shift: float, sigma: float
) -> float:
    """Trapezoid rule for the integral of (1 - CDF of the max) e^u du over
    [lo, hi], on _GRID points: with numpy where it is installed, else with the
    standard library (the same sums; they agree to rounding)."""
    np = _numpy()
    if np is None:
        return _tail_integral_stdlib(lo, hi, n_ranks, shift, sigma)
    z, phi = _cdf_arrays()
    u = np.linspace(lo, hi, _GRID)
    cdf = np.interp(u / sigma, z, phi) ** (n_ranks - 1) * np.interp(
        (u - shift) / sigma, z, phi
    )
    tail = (1.0 - cdf) * np.exp(u)
    return float(np.sum((tail[1:] + tail[:-1]) * np.diff(u)) / 2)


def _tail_integral_stdlib(
    lo: float, hi: float, n_ranks: int, shift: float, sigma: float
) -> float:
    """``_tail_integral`` with the standard library: about 20 times slower
    than numpy's, and equal to it to within a few units in the last place."""
    step = (hi - lo) / (_GRID - 1)
    u = [i * step + lo for i in range(_GRID)]  # as np.linspace makes it
    u[-1] = hi
    cdf = _norm_cdf_stdlib
    tail = [
        (1.0 - cdf(v / sigma) ** (n_ranks - 1) * cdf((v - shift) / sigma)) * math.exp(v)
        for v in u
    ]
    total = math.fsum(
        (tail[i + 1] + tail[i]) * (u[i + 1] - u[i]) for i in range(_GRID - 1)
    )
    return total / 2


def expected_step_time(
    n_ranks: int, delta: float = 0.0, sigma: float = 0.05, median_s: float = 1.0
) -> float:
    """Expected synchronous step time E[max_i X_i] (seconds).

    n_ranks - 1 ranks draw X ~ median_s * exp(sigma Z); one rank draws
    (1 + delta) times that. The max has CDF F(t)^(n-1) F(t / (1 + delta)), and
    E[T] = integral of (1 - CDF) dt, done by the trapezoid rule in u = ln t.
    All the CDF's change happens within 9 sigma of the healthy ranks' median
    (u = 0) and of the slow rank's (u = ln(1 + delta)); each window gets its
    own grid, and where they are apart the gap between them, where only the
    slow rank is still running, is integrated exactly.
    sigma = 0 is the deterministic case: every step takes median_s (1 + delta)
    (so is a sigma below 1e-9, which moves the answer less than the grid's error).
    """
    _check_straggler_args(n_ranks, delta, sigma, median_s)
    shift = math.log1p(delta)
    if sigma < _TINY_SIGMA:
        return median_s * (1.0 + delta)
    w = _WINDOW * sigma
    lo, hi = -w, shift + w  # T lies in [e^lo, e^hi] with certainty
    if shift - w <= w:  # the two windows overlap: one grid
        integral = _tail_integral(lo, hi, n_ranks, shift, sigma)
    else:  # healthy window, exact gap, slow window
        integral = (
            _tail_integral(lo, w, n_ranks, shift, sigma)
            + math.exp(shift - w)
            - math.exp(w)
            + _tail_integral(shift - w, hi, n_ranks, shift, sigma)
        )
    return median_s * (math.exp(lo) + integral)


def straggler_slowdown(n_ranks: int, delta: float, sigma: float = 0.05) -> float:
    """How much longer a step takes with the slow rank than without
    it (0.25 = +25 %)."""
    return (
        expected_step_time(n_ranks, delta, sigma)
        / expected_step_time(n_ranks, 0.0, sigma)
        - 1.0
    )


def throughput_lost(n_ranks: int, delta: float, sigma: float = 0.05) -> float:
    """Fraction of the job's tokens/s lost to the slow rank: 1 - T(0) / T(delta)."""
    return 1.0 - expected_step_time(n_ranks, 0.0, sigma) / expected_step_time(
        n_ranks, delta, sigma
    )


def barrier_tax(n_ranks: int, sigma: float = 0.05) -> float:
    """What the barrier costs with no straggler at all: E[max] / E[X] - 1.

    Ranks that are merely noisy already make every step wait for the unluckiest
    one, and the expected max grows with the number of ranks.
    """
    _check_straggler_args(n_ranks, 0.0, sigma)
    return expected_step_time(n_ranks, 0.0, sigma) / math.exp(sigma**2 / 2) - 1.0


def _at_least_two(n_ranks) -> int:
    validate.positive_int("n_ranks", n_ranks)
    if n_ranks < 2:
        raise ValueError(f"n_ranks must be at least 2 to drop one, got {n_ranks}")
    return n_ranks


def drop_step_time(n_ranks: int, sigma: float = 0.05, median_s: float = 1.0) -> float:
    """Step time after draining the slow rank and re-sharding its work.

    The same global batch over n - 1 healthy ranks: each does n / (n - 1) of a
    share, and the barrier waits for the slowest of n - 1 of them.
    """
    _at_least_two(n_ranks)
    return (
        n_ranks / (n_ranks - 1) * expected_step_time(n_ranks - 1, 0.0, sigma, median_s)
    )


def drop_beats_wait(n_ranks: int, delta: float, sigma: float = 0.05) -> bool:
    """True when draining the slow rank gives a shorter step than waiting for it."""
    _at_least_two(n_ranks)
    return drop_step_time(n_ranks, sigma) < expected_step_time(n_ranks, delta, sigma)


def _check_drain_args(n_ranks, sigma, tol) -> None:
    _at_least_two(n_ranks)
    _check_straggler_args(n_ranks, 0.0, sigma)
    validate.positive("tol", tol)


def drain_threshold(n_ranks: int, sigma: float = 0.05, tol: float = 1e-6) -> float:
    """The smallest delta at which draining beats waiting (bisection, to ``tol``).

    With no spread (sigma = 0) this is exactly 1 / (n - 1): a rank that is
    more than 1/(n-1) slower costs more than the 1/n of compute it brings.
    With spread, a slightly slow rank hides inside the noise of the others,
    so the threshold is higher (except at n = 2, where draining leaves one
    rank doing everything and the noise of the pair is what draining saves).
    """
    _check_drain_args(n_ranks, sigma, tol)
    if sigma == 0:
        return 1.0 / (n_ranks - 1)
    target = drop_step_time(n_ranks, sigma)
    lo, hi = 0.0, 1.0
    while (
        expected_step_time(n_ranks, hi, sigma) <= target
    ):  # E[T] grows without bound in delta
        lo, hi = hi, min(2 * hi, MAX_DELTA)
        if lo == MAX_DELTA:
            raise ValueError(
                f"no break-even below MAX_DELTA={MAX_DELTA:g} for n_ranks={n_ranks}, "
                f"sigma={sigma}"
            )
    for _ in range(100):
        if hi - lo <= tol:
            break
        mid = (lo + hi) / 2
        if expected_step_time(n_ranks, mid, sigma) > target:
            hi = mid
        else:
            lo = mid
    return hi


def _check_simulation_args(
    n_ranks, delta, sigma, steps, seed, straggler_rank, median_s
):
    _check_straggler_args(n_ranks, delta, sigma, median_s)
    validate.positive_int("steps", steps)
    validate.non_negative_int("seed", seed)
    if not (
        isinstance(straggler_rank, Integral)
        and not isinstance(straggler_rank, bool)
        and 0 <= straggler_rank < n_ranks
    ):
        raise ValueError(
            f"straggler_rank must be an integer in [0, {n_ranks}), "
            f"got {straggler_rank!r}"
        )


def simulate_step_times(
    n_ranks: int,
    delta: float,
    sigma: float = 0.05,
    steps: int = 1000,
    seed: int = 0,
    straggler_rank: int = 0,
    median_s: float = 1.0,
) -> np.ndarray:
    """Monte Carlo compute times, shape (steps, n_ranks), one rank
    slowed by 1 + delta."""
    import numpy as np

    _check_simulation_args(n_ranks, delta, sigma, steps, seed, straggler_rank, median_s)
    rng = np.random.default_rng(seed)
    times = median_s * np.exp(
        sigma * rng.standard_normal((steps, n_ranks))
    )  # (steps, ranks)
    times[:, straggler_rank] *= 1.0 + delta
    return times


def _step_times_array(times) -> np.ndarray:
    import numpy as np

    try:
        arr = np.asarray(times, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            f"times must be a (steps, ranks) array of seconds, got {times!r}"
        ) from None
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(
            f"times must be a non-empty (steps, ranks) array, got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("times must hold finite seconds at or above 0")
    return arr


def allreduce_wait(times: np.ndarray) -> np.ndarray:
    """Seconds each rank waits at the barrier: the step's max minus its own time."""
    times = _step_times_array(times)
    return times.max(axis=1, keepdims=True) - times


def find_straggler(times: np.ndarray) -> tuple[int, float]:
    """The rank that waits least in the all-reduce, and how many median absolute
    deviations its mean wait sits below the other ranks' median.

    A straggler never waits: everyone else waits for it. That is how it shows in
    per-rank collective timings.
    """
    times = _step_times_array(times)
    if times.shape[1] < 2:
        raise ValueError(
            f"times must hold at least 2 ranks to compare, got shape {times.shape}"
        )
    import numpy as np

    wait = allreduce_wait(times).mean(axis=0)  # (ranks,)
    rank = int(np.argmin(wait))
    others = np.delete(wait, rank)
    mad = float(np.median(np.abs(others - np.median(others)))) or 1e-12
    return rank, float((np.median(others) - wait[rank]) / mad)


# ---------------------------------------------------------------------------
# Silent data corruption: replicas that must agree, compared before the step
# ---------------------------------------------------------------------------


def _float32_values(values) -> np.ndarray:
    import numpy as np

    if isinstance(values, (str, bytes)):
        raise ValueError(f"values must be an array of numbers, got {values!r}")
    try:
        arr = np.array(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(
            f"values must be an array of numbers, got {values!r}"
        ) from None
    if arr.dtype.kind != "f" or np.asarray(values).dtype.kind not in "fiu":
        raise ValueError(
            f"values must be an array of numbers (not bools or objects), got dtype "
            f"{np.asarray(values).dtype}"
        )
    return arr


def flip_bit(values: np.ndarray, index: int, bit: int) -> np.ndarray:
    """A float32 copy of ``values`` with bit ``bit`` (0 = lowest mantissa bit,
    23-30 exponent, 31 sign) of element ``index`` (of the flattened array) flipped."""
    import numpy as np

    arr = _float32_values(values)
    shape = arr.shape
    arr = arr.ravel()
    if not (isinstance(bit, Integral) and not isinstance(bit, bool) and 0 <= bit < 32):
        raise ValueError(f"bit must be an integer in [0, 32), got {bit!r}")
    if not (
        isinstance(index, Integral)
        and not isinstance(index, bool)
        and 0 <= index < arr.size
    ):
        raise ValueError(f"index must be an integer in [0, {arr.size}), got {index!r}")
    bits = arr.view(np.uint32)
    bits[index] ^= np.uint32(1 << int(bit))
    return arr.reshape(shape)


def checksum(values: np.ndarray) -> int:
    """Sum of the float32 bit patterns read as unsigned integers.

    Exact and order-free: two replicas holding the same bits get the same
    number, and any single flipped bit changes it by 2^bit. Below 2^31
    elements the sum stays under 2^63, so it travels as an int64.
    """
    import numpy as np

    arr = np.ascontiguousarray(_float32_values(values)).ravel()
    if arr.size >= 2**31:
        raise ValueError(f"checksum takes fewer than 2**31 elements, got {arr.size}")
    return int(arr.view(np.uint32).sum(dtype=np.uint64))


def _checksum_list(checksums) -> list[int]:
    values = list(checksums)
    for i, c in enumerate(values):
        # numpy's integers are Integral; numpy's bool is not
        if not isinstance(c, Integral) or isinstance(c, bool):
            raise ValueError(f"checksums[{i}] must be an integer, got {c!r}")
    if len(values) < 2:
        raise ValueError(f"need checksums from at least 2 replicas, got {len(values)}")
    return values


def _norm_list(norms) -> list[float]:
    norms = list(norms)
    for i, x in enumerate(norms):
        if not validate.is_real(x) or x < 0:
            raise ValueError(
                f"norms[{i}] must be a number at or above 0 (or nan/inf), got {x!r}"
            )
    if len(norms) < 2:
        raise ValueError(f"need norms from at least 2 replicas, got {len(norms)}")
    return norms


@dataclass(frozen=True)
class CorruptionCheck:
    """Rules for comparing data-parallel replicas before the optimizer step.

    - checksum: after the all-reduce every replica holds the same averaged
      gradient, bit for bit, so their checksums must all be equal. Replicas
      outside the majority are suspects (with two you learn that something is
      wrong, not who: replay the step to find out).
    - norm: before the all-reduce each replica's local gradient differs (its
      own data), so only gross outliers can be flagged: a non-finite norm, or
      one more than ``norm_ratio`` times the median of the replicas.
    """

    norm_ratio: float = 10.0

    def __post_init__(self):
        validate.at_least("norm_ratio", self.norm_ratio, 1.0)

    def compare_checksums(self, checksums) -> Verdict:
        """Alarm unless every replica's checksum is the same; suspect those
        outside the strict majority (everyone, when there is none)."""
        values = _checksum_list(checksums)  # integers, from two replicas or more
        counts = {c: values.count(c) for c in values}
        majority = max(counts, key=counts.get)
        if len(counts) == 1:
            return Verdict(False, ())
        if counts[majority] * 2 <= len(
            values
        ):  # no strict majority: everyone is suspect
            return Verdict(True, tuple(range(len(values))))
        suspects = tuple(i for i, c in enumerate(values) if c != majority)
        return Verdict(True, suspects)

    def compare_norms(self, norms) -> Verdict:
        """Alarm on a non-finite norm or one above ``norm_ratio`` times the
        median of the finite ones; suspect exactly those replicas."""
        import numpy as np

        values = np.asarray(_norm_list(norms), dtype=float)  # two replicas or more
        bad = ~np.isfinite(values)
        finite = values[~bad]
        median = float(np.median(finite)) if finite.size else math.inf
        bad |= values > self.norm_ratio * median
        suspects = tuple(int(i) for i in np.flatnonzero(bad))
        if suspects:
            return Verdict(True, suspects)
        return Verdict(False, ())


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison: did it alarm, and which replicas it suspects."""

    alarm: bool
    suspects: tuple[int, ...]


# ---------------------------------------------------------------------------
# Loss spikes: a rolling z-score, and rewind-and-skip
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SpikeConfig:
    """A value is a spike when it sits more than ``z_threshold`` standard
    deviations above the mean of the last ``window`` accepted values (after at
    least ``min_history`` of them), or is not finite. The std is floored at
    ``rel_floor`` times the mean so that a flat curve does not alarm on noise."""

    window: int = 50
    z_threshold: float = 6.0
    min_history: int = 10
    rel_floor: float = 0.01

    def __post_init__(self):
        validate.positive_int("window", self.window)
        validate.positive("z_threshold", self.z_threshold)
        validate.positive_int("min_history", self.min_history)
        validate.positive("rel_floor", self.rel_floor)
        if self.min_history > self.window:
            raise ValueError(
                f"min_history={self.min_history} must not exceed window={self.window}"
            )


def _as_float(name: str, value) -> float:
    if not validate.is_real(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


class SpikeDetector:
    """Feed it one loss (or gradient norm) a step; ``update`` returns the z-score
    and whether it is a spike. Spikes are kept out of the history, so a long
    spike does not become the new normal."""

    def __init__(self, config: SpikeConfig = SpikeConfig()):
        self.config = config
        self.history: deque = deque(maxlen=config.window)

    def update(self, value: float) -> tuple[float, bool]:
        value = _as_float("value", value)
        if not math.isfinite(value):
            return math.inf, True
        if len(self.history) < self.config.min_history:
            self.history.append(value)
            return 0.0, False
        import numpy as np

        hist = np.asarray(self.history)
        mean = float(hist.mean())
        std = max(float(hist.std()), self.config.rel_floor * abs(mean), 1e-12)
        z = (value - mean) / std
        spike = z > self.config.z_threshold
        if not spike:
            self.history.append(value)
        return z, spike


def detect_spikes(values, config: SpikeConfig = SpikeConfig()) -> list[int]:
    """Indices of the values a fresh SpikeDetector flags (a non-finite value
    is always a spike)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"values must be a sequence of losses, got {values!r}")
    if not isinstance(config, SpikeConfig):
        raise ValueError(f"config must be a SpikeConfig, got {config!r}")
    det = SpikeDetector(config)
    flagged = []
    for i, v in enumerate(values):
        if not validate.is_real(v):
            raise ValueError(f"values[{i}] must be a number, got {v!r}")
        if det.update(v)[1]:
            flagged.append(i)
    return flagged


@dataclass(frozen=True)
class RewindPlan:
    """Resume from the checkpoint at ``resume_step`` and skip data batches
    ``skip_start`` (inclusive) to ``skip_end`` (exclusive)."""

    spike_step: int
    resume_step: int
    skip_start: int
    skip_end: int

    @property
    def skipped(self) -> int:
        return self.skip_end - self.skip_start

    @property
    def redone_steps(self) -> int:
        return self.spike_step - self.resume_step


def _check_steps(**steps) -> None:
    for name, value in steps.items():
        validate.non_negative_int(name, value)


@dataclass(frozen=True)
class RewindPolicy:
    """PaLM's remedy for a loss spike: restart from a checkpoint about
    ``rewind_steps`` before the spike and skip about ``skip_batches`` batches,
    covering those seen before and during it (PaLM: ~100 steps, 200-500 batches).

    Batches are numbered by the step that would have read them in an
    uninterrupted run; after a skip, step t reads batch t + (batches skipped so far).
    """

    rewind_steps: int = 100
    skip_batches: int = 200

    def __post_init__(self):
        validate.positive_int("rewind_steps", self.rewind_steps)
        validate.positive_int("skip_batches", self.skip_batches)

    def plan(
        self, spike_step: int, checkpoint_steps, batch_offset: int = 0
    ) -> RewindPlan:
        """Pick the latest checkpoint at least ``rewind_steps`` before the spike.

        ``batch_offset`` is the number of batches already skipped, so the window
        is in the numbering of the data stream. The window always reaches past
        the spike's own batch."""
        _check_steps(spike_step=spike_step, batch_offset=batch_offset)
        ckpts = sorted(int(c) for c in checkpoint_steps)
        limit = spike_step - self.rewind_steps
        usable = [c for c in ckpts if c <= limit]
        if not usable:
            raise ValueError(
                f"no checkpoint at or before step {limit} "
                f"(spike at {spike_step} minus rewind_steps={self.rewind_steps}); "
                f"checkpoints: {ckpts}"
            )
        resume = usable[-1]
        start = resume + batch_offset
        end = max(start + self.skip_batches, spike_step + batch_offset + 1)
        return RewindPlan(spike_step, resume, start, end)


def batch_for_step(step: int, skips=()) -> int:
    """The data batch a step reads after the skips [(at_step, n_batches), ...]."""
    validate.non_negative_int("step", step)
    total = 0
    for i, skip in enumerate(skips):
        if not (isinstance(skip, tuple) and len(skip) == 2):
            raise ValueError(
                f"skips[{i}] must be an (at_step, n_batches) pair, got {skip!r}"
            )
        at, n = (
            validate.non_negative_int(f"skips[{i}] at_step", skip[0]),
            validate.non_negative_int(f"skips[{i}] n_batches", skip[1]),
        )
        if step >= at:
            total += n
    return step + total


# ---------------------------------------------------------------------------
# The timeline of an elastic run
# ---------------------------------------------------------------------------

EVENT_KINDS = ("start", "resume", "step", "checkpoint", "fail", "done")


@dataclass(frozen=True)
class TimelineSummary:
    """Rank 0's view of an elastic run (steps are counts of completed
    optimizer steps)."""

    attempts: int
    steps_done: int  # optimizer steps executed, counting redone ones
    final_step: int
    failed_at_step: int | None  # last step finished before the first failure
    last_checkpoint_step: int | None  # newest checkpoint written before that failure
    resumed_from_step: int | None  # the checkpoint the next attempt loaded
    redone_steps: int  # work lost: steps between that checkpoint and the failure
    downtime_s: float  # failure to the first step of the next attempt
    wall_s: float
    per_attempt: dict = field(default_factory=dict)  # attempt -> steps completed in it


def _check_events(events) -> list:
    if isinstance(events, (str, bytes, dict)) or not hasattr(events, "__iter__"):
        raise ValueError(f"events must be a sequence of event dicts, got {events!r}")
    events = list(events)
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise ValueError(f"events[{i}] must be a dict, got {e!r}")
        if e.get("kind") not in EVENT_KINDS:
            raise ValueError(
                f"events[{i}]['kind'] must be one of {EVENT_KINDS}, "
                f"got {e.get('kind')!r}"
            )
        validate.non_negative_int(f"events[{i}]['attempt']", e.get("attempt"))
        t = e.get("t")
        if not validate.is_real(t) or not math.isfinite(t):
            raise ValueError(
                f"events[{i}]['t'] must be a finite number of seconds, got {t!r}"
            )
        if e["kind"] in ("step", "checkpoint", "resume"):
            validate.non_negative_int(f"events[{i}]['step']", e.get("step"))
    return events


def summarize_timeline(events) -> TimelineSummary:
    """Summarise rank 0's view of an elastic run.

    ``events`` are dicts with ``kind`` ("start", "resume", "step", "checkpoint",
    "fail", "done"), ``attempt``, ``t`` (wall seconds) and, for steps,
    checkpoints and resumes, ``step`` (steps completed). Only the first
    failure is summarised.
    """
    events = sorted(_check_events(events), key=lambda e: e["t"])
    if not events:
        raise ValueError("events must not be empty")
    steps = [e for e in events if e["kind"] == "step"]
    if not steps:
        raise ValueError("events contain no steps")
    attempts = sorted({e["attempt"] for e in events})
    per_attempt = {a: [e["step"] for e in steps if e["attempt"] == a] for a in attempts}
    failed_at = resumed = last_ckpt = None
    redone, downtime = 0, 0.0
    if len(attempts) > 1:
        first, second = attempts[0], attempts[1]
        failed_at = max(per_attempt[first], default=0)
        ckpts = [
            e["step"]
            for e in events
            if e["kind"] == "checkpoint"
            and e["attempt"] == first
            and e["step"] <= failed_at
        ]
        last_ckpt = max(ckpts, default=None)
        resume_ev = [
            e for e in events if e["kind"] == "resume" and e["attempt"] == second
        ]
        resumed = resume_ev[0]["step"] if resume_ev else 0
        redone = failed_at - resumed
        first_steps = [e["t"] for e in steps if e["attempt"] == first]
        fail_ev = [e["t"] for e in events if e["kind"] == "fail"]
        fail_t = fail_ev[0] if fail_ev else max(first_steps, default=events[0]["t"])
        next_steps = [e["t"] for e in steps if e["attempt"] == second]
        downtime = (min(next_steps) - fail_t) if next_steps else 0.0
    return TimelineSummary(
        attempts=len(attempts),
        steps_done=len(steps),
        final_step=steps[-1]["step"],
        failed_at_step=failed_at,
        last_checkpoint_step=last_ckpt,
        resumed_from_step=resumed,
        redone_steps=redone,
        downtime_s=downtime,
        wall_s=events[-1]["t"] - events[0]["t"],
        per_attempt=per_attempt,
    )
