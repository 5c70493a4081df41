"""How often to checkpoint: the waste of a run that fails, in closed form and simulated.

Symbols as in book/notation.md: interval I (useful work between two
checkpoints, seconds), checkpoint write time C, mean time between failures T,
restart cost R (detect, reschedule, reload). Failures arrive as a Poisson
process (exponential gaps with mean T).

First order (Young 1974): per interval you pay C, and a failure throws away on
average half an interval, so the wasted fraction of time is about
C/I + I/(2T), smallest at I* = sqrt(2CT), where it is sqrt(2C/T).

Exact for this failure model (Daly 2006): a segment of I work
plus C checkpoint, with failures possible anywhere (also while writing or
restarting), takes T e^{R/T} (e^{(I+C)/T} - 1) seconds on average, so the
waste is 1 - I / that. Daly's higher-order optimum
sqrt(2CT) [1 + (1/3) sqrt(C/(2T)) + (1/9) C/(2T)] - C (for C < 2T, else T)
approximates its minimum. ``simulate_waste`` checks both with a Monte Carlo
run. No torch here: everything is numbers.

The closed forms take plain numbers with the standard library alone, so the
planner and the chapter's live figure run where there is no numpy (the
reader's browser); numpy is imported where arrays are made (an array of
intervals, the Monte Carlo run).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import TYPE_CHECKING

from mlbook.common import validate
from mlbook.common.memory import ADAM_MIXED_STATE_BYTES, model_state_bytes
from mlbook.common.units import HOUR_S

if TYPE_CHECKING:
    import numpy as np

# Kokolis et al. 2024 (arXiv:2410.21680), Meta's research clusters: measured
# mean time to failure of 1,024-GPU jobs, and their projection for 16,384 GPUs
# (itself a linear extrapolation: one per-node failure rate times the node count).
MTTF_1024_GPUS_S = 7.9 * HOUR_S
MTTF_16384_GPUS_PROJECTED_S = 1.8 * HOUR_S

# Grattafiori et al. 2024 (arXiv:2407.21783), Sec. 3.3.1: Llama 3's checkpoints went
# to Tectonic, Meta's distributed file system: 240 PB on 7,500 SSD servers, 2 TB/s
# sustained and 7 TB/s at peak. Decimal bytes.
LLAMA3_STORAGE_SUSTAINED_BYTES_PER_S = 2e12
LLAMA3_STORAGE_PEAK_BYTES_PER_S = 7e12

# Pasqualin et al. 2024 (PyTorch blog, "Reducing Model Checkpointing Times by Over
# 10x with PyTorch Distributed Asynchronous Checkpointing"), IBM Research's FSDP
# runs on GPUs: a 7B model's checkpoint "down time" averaged 148.8 s with a
# synchronous save and 6.3 s with async_save.
ASYNC_SAVE_7B_SYNC_S = 148.8
ASYNC_SAVE_7B_ASYNC_S = 6.3

# Not a measurement: an aggregate bandwidth for a shared parallel file system,
# chosen to illustrate where sharded writes stop scaling. Change it freely.
ASSUMED_STORAGE_BYTES_PER_S = 200e9


_UNSET = object()


def _check(interval_s=_UNSET, checkpoint_s=_UNSET, mtbf_s=_UNSET, restart_s=_UNSET):
    """Times must be finite and above 0 (a restart may cost 0)."""
    if interval_s is not _UNSET:
        validate.positive("interval_s", interval_s)
    if checkpoint_s is not _UNSET:
        validate.positive("checkpoint_s", checkpoint_s)
    if mtbf_s is not _UNSET:
        validate.positive("mtbf_s", mtbf_s)
    if restart_s is not _UNSET:
        validate.non_negative("restart_s", restart_s)


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum interval sqrt(2 C T), in seconds."""
    _check(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum interval, in seconds.

    sqrt(2CT) [1 + (1/3) sqrt(C/(2T)) + (1/9) C/(2T)] - C when C < 2T,
    else T (Daly 2006).
    """
    _check(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    c, t = checkpoint_s, mtbf_s
    if c >= 2 * t:
        return t
    x = c / (2 * t)
    return math.sqrt(2 * c * t) * (1 + math.sqrt(x) / 3 + x / 9) - c


def waste_fraction(
    interval_s,
    checkpoint_s: float,
    mtbf_s: float,
    restart_s: float = 0.0,
    exact: bool = False,
):
    """Fraction of wall time that does not advance training.

    exact=False: Young's first-order C/I + I/(2T) (+ R/T for restarts).
    exact=True: 1 - I / (T e^{R/T} (e^{(I+C)/T} - 1)), the expectation under
    exponential failures that may also strike during a write or a restart.
    ``interval_s`` may be a number (a float back, computed with the standard
    library) or a NumPy array of numbers (an array back).
    """
    _check(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s, restart_s=restart_s)
    c, t, r = checkpoint_s, mtbf_s, restart_s
    if isinstance(interval_s, Real):
        i = float(validate.positive("interval_s", interval_s))
        if exact:
            try:
                grown = math.expm1((i + c) / t)
            except OverflowError:  # numpy's expm1 gives inf here: all time is lost
                grown = math.inf
            return 1 - i / (t * math.exp(r / t) * grown)
        return c / i + i / (2 * t) + r / t
    import numpy as np

    i = _intervals(interval_s)
    if exact:
        out = 1 - i / (t * math.exp(r / t) * np.expm1((i + c) / t))
    else:
        out = c / i + i / (2 * t) + r / t
    return float(out) if np.ndim(interval_s) == 0 else out


def _intervals(interval_s) -> np.ndarray:
    import numpy as np

    if np.ndim(interval_s) == 0 and not isinstance(interval_s, np.ndarray):
        return np.asarray(float(validate.positive("interval_s", interval_s)))
    i = np.asarray(interval_s)
    if i.dtype.kind not in "iuf":
        raise ValueError(f"interval_s must be numbers, got {interval_s!r}")
    i = i.astype(float)
    if i.size == 0 or not np.all(np.isfinite(i)) or np.any(i <= 0):
        raise ValueError(
            f"interval_s must be finite numbers above 0, got {interval_s!r}"
        )
    return i


def optimal_interval(
    checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
    """The interval that minimises the exact waste (golden-section search), in seconds.

    R scales the exact waste's denominator by e^{R/T} and so does not move the
    optimum; it is accepted for symmetry with ``waste_fraction``.
    """
    _check(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s, restart_s=restart_s)
    f = lambda i: waste_fraction(i, checkpoint_s, mtbf_s, restart_s, exact=True)  # noqa: E731
    lo, hi = 1e-9 * mtbf_s, 20 * mtbf_s
    lo, hi = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(math.exp(a)), f(math.exp(b))
    for _ in range(200):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(math.exp(b))
    return math.exp((lo + hi) / 2)


def cluster_mtbf(node_mtbf_s: float, n_nodes: int) -> float:
    """MTBF of a job that stops when any of ``n_nodes`` independent nodes fails.

    The minimum of n exponential failure times is exponential with n times
    the rate, so T_cluster = T_node / n: double the cluster, halve the MTBF.
    """
    validate.positive("node_mtbf_s", node_mtbf_s)
    n = validate.positive_int("n_nodes", n_nodes)
    return node_mtbf_s / n


def simulate_waste(
    interval_s,
    checkpoint_s: float,
    mtbf_s: float,
    restart_s: float = 0.0,
    horizon_s: float | None = None,
    seed: int = 0,
):
    """Monte Carlo waste fraction of a run of ``horizon_s`` wall seconds.

    Failures arrive with exponential gaps of mean ``mtbf_s``. After each
    failure the job restarts (``restart_s``, during which it can fail again)
    from its last checkpoint; between failures it completes
    floor(uptime / (I + C)) segments, each committing I seconds of work, and
    the rest of the uptime is lost. The last window is cut by the horizon,
    not by a failure, so its partial work counts. All intervals share one
    failure trace (common random numbers), so a curve over ``interval_s`` is
    smooth. Default horizon: 2000 T. Vectorised; returns a float for a
    scalar interval, else an array.
    """
    import numpy as np

    _check(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s, restart_s=restart_s)
    i = np.atleast_1d(_intervals(interval_s))
    horizon_s = (
        2000 * mtbf_s
        if horizon_s is None
        else validate.positive("horizon_s", horizon_s)
    )
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    expected = horizon_s / mtbf_s
    n_draw = int(expected + 10 * math.sqrt(expected) + 10)
    times = np.cumsum(rng.exponential(mtbf_s, n_draw))
    while times[-1] < horizon_s:  # rare: draw more gaps
        times = np.concatenate(
            [times, times[-1] + np.cumsum(rng.exponential(mtbf_s, n_draw))]
        )
    times = times[times < horizon_s]
    starts = np.concatenate([[0.0], times])  # each window starts at t=0 or a failure
    ends = np.concatenate([times, [horizon_s]])
    # the first window starts fresh; every later one first pays the restart
    restart = np.full(starts.shape, float(restart_s))
    restart[0] = 0.0
    up = np.maximum(ends - starts - restart, 0.0)  # (windows,) time spent training
    seg = (i + checkpoint_s)[:, None]  # (intervals, 1)
    committed = np.floor(up[None, :] / seg) * i[:, None]  # (intervals, windows)
    tail = np.minimum(
        up[-1] - np.floor(up[-1] / seg[:, 0]) * seg[:, 0], i
    )  # last window's open work
    useful = committed.sum(axis=1) + tail
    out = 1 - useful / horizon_s
    return float(out[0]) if np.ndim(interval_s) == 0 else out


def monte_carlo_stderr(
    interval_s: float,
    checkpoint_s: float,
    mtbf_s: float,
    restart_s: float = 0.0,
    horizon_s: float | None = None,
) -> float:
    """Rough standard error of ``simulate_waste``: failure count noise plus
    the spread of the lost work per failure (uniform over a segment)."""
    _check(
        interval_s=interval_s,
        checkpoint_s=checkpoint_s,
        mtbf_s=mtbf_s,
        restart_s=restart_s,
    )
    horizon_s = (
        2000 * mtbf_s
        if horizon_s is None
        else validate.positive("horizon_s", horizon_s)
    )
    n = horizon_s / mtbf_s
    seg = interval_s + checkpoint_s
    per_failure_mean = seg / 2 + restart_s
    per_failure_sd = seg / math.sqrt(12)
    return math.sqrt(n * (per_failure_mean**2 + per_failure_sd**2)) / horizon_s


# --- what a checkpoint holds -------------------------------------------------------

# Gradients are recomputed by the next step, so a checkpoint stores every
# item of mixed-precision Adam's state except them.
CHECKPOINT_ITEMS = tuple(k for k in ADAM_MIXED_STATE_BYTES if "gradient" not in k)


def checkpoint_bytes(n_params: float, breakdown: bool = False):
    """Bytes a training checkpoint of an ``n_params`` model holds.

    Mixed-precision Adam (mlbook.common.memory): bf16 weights 2 + fp32 master
    weights 4 + Adam m 4 + Adam v 4 = 14 bytes per parameter; the bf16
    gradients (2 bytes) are not saved. RNG states and the data position are
    bytes, not gigabytes, and are left out.
    """
    items = model_state_bytes(n_params, breakdown=True)
    kept = {k: v for k, v in items.items() if k in CHECKPOINT_ITEMS}
    return kept if breakdown else sum(kept.values())


def write_time_s(
    checkpoint_bytes_total: float,
    n_writers: int,
    writer_bytes_per_s: float,
    storage_bytes_per_s: float,
) -> float:
    """Seconds to write a checkpoint split evenly over ``n_writers`` ranks.

    Each rank writes its shard at up to ``writer_bytes_per_s``; together they
    cannot exceed the storage's aggregate ``storage_bytes_per_s``. One writer
    (an unsharded checkpoint) gives C = bytes / writer bandwidth; sharding
    divides C by the number of writers until storage saturates.
    """
    validate.positive("checkpoint_bytes_total", checkpoint_bytes_total)
    n = validate.positive_int("n_writers", n_writers)
    validate.positive("writer_bytes_per_s", writer_bytes_per_s)
    validate.positive("storage_bytes_per_s", storage_bytes_per_s)
    return checkpoint_bytes_total / min(n * writer_bytes_per_s, storage_bytes_per_s)
