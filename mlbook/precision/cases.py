"""Seeded artifacts for the chapter's diagnosis exercises: what a reader
would meet in a real run, made from the chapter's tested formulas, the same
on every machine (the standard library's ``random``, seeded; no numpy, no
torch).

- ``loss_scale_case``: gradient magnitudes of one step under an fp16 loss
  scale, as the histogram a monitoring tool shows (counts per power of two
  of |g| x S) and the largest scaled value. Too small a scale flushes the
  left tail to zero; too large a one overflows the right one.
- ``stalled_run``: the log of a run whose weights are bf16 and updated in
  place (no fp32 master copy): the gradients and the optimizer's updates are
  there, the loss does not move, because every update is below half the gap
  between bf16 numbers around the weights (formulas.absorb_limit).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.precision import formulas

CAUSES = ("underflow", "overflow", "healthy")  # of a loss-scale histogram
FLUSH_LIMIT = 0.01  # a share of flushed gradients a run can bear


def _check_seed(seed) -> int:
    """A seed is a whole number at or above 0 (a ValueError names it)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return seed


@dataclass(frozen=True, eq=False)
class LossScaleCase:
    """One step's gradient magnitudes under the loss scale 2^scale_log2.

    ``bins`` are (k, count): how many values have 2^k <= |g| x S < 2^(k+1);
    ``magnitudes`` are the unscaled |g| themselves, from which every key is
    read exactly."""

    seed: int
    fmt: str
    scale_log2: int
    magnitudes: tuple
    bins: tuple
    amax_scaled: float

    @property
    def n_values(self) -> int:
        return len(self.magnitudes)


def loss_scale_case(seed: int, n_values: int = 20_000) -> LossScaleCase:
    """A step's gradients under an fp16 loss scale that is wrong one way or
    the other (which way, the seed decides): log2|g| is Gaussian around a
    centre between 2^-34 and 2^-26 with a spread of 2 to 3 binades, and the
    scale either leaves the median at most 2 to 4 binades above fp16's flush
    threshold 2^-25 (too small: with a spread of 2 binades or more, over 2 %
    of the left tail flushes) or puts the largest
    value 1 to 3 binades past fp16's max (too large: it overflows)."""
    _check_seed(seed)
    validate.positive_int("n_values", n_values)
    return _loss_scale_case(seed, n_values)


@functools.lru_cache(maxsize=16)  # a case is frozen: keys and mistakes share it
def _loss_scale_case(seed: int, n_values: int) -> LossScaleCase:
    rng = random.Random(seed)
    centre, spread = rng.uniform(-34, -26), rng.uniform(2.0, 3.0)
    logs = [rng.gauss(centre, spread) for _ in range(n_values)]
    magnitudes = tuple(2.0**x for x in logs)
    amax = max(magnitudes)
    if rng.random() < 0.5:  # too small
        k = math.floor(-25 + rng.randint(2, 4) - centre)
    else:  # too large: amax x 2^k past 65,504 by 1 to 3 binades
        k = math.floor(math.log2(65504 / amax)) + rng.randint(1, 3)
    scale = 2.0**k
    counts: dict[int, int] = {}
    for m in magnitudes:
        b = math.frexp(m * scale)[1] - 1  # floor(log2 |g| S), exact
        counts[b] = counts.get(b, 0) + 1
    bins = tuple(sorted(counts.items()))
    return LossScaleCase(seed, "fp16", k, magnitudes, bins, amax * scale)


def flushed_count(case: LossScaleCase, scale_log2: int) -> int:
    """How many of the case's gradients become zero in fp16 at the scale
    2^scale_log2: |g| x S at or below half the smallest subnormal."""
    threshold = formulas.flush_threshold(case.fmt)
    scale = 2.0**scale_log2
    return sum(m * scale <= threshold for m in case.magnitudes)


def overflow_count(case: LossScaleCase, scale_log2: int) -> int:
    """How many overflow to inf at the scale 2^scale_log2."""
    limit = formulas.overflow_threshold(case.fmt)
    scale = 2.0**scale_log2
    return sum(m * scale >= limit for m in case.magnitudes)


def diagnosis(case: LossScaleCase) -> str:
    """What is wrong at the case's own scale: "overflow" if any value
    overflows, else "underflow" if at least FLUSH_LIMIT of them flush, else
    "healthy"."""
    if overflow_count(case, case.scale_log2):
        return "overflow"
    if flushed_count(case, case.scale_log2) >= FLUSH_LIMIT * case.n_values:
        return "underflow"
    return "healthy"


def safe_scale_log2(case: LossScaleCase) -> int:
    """log2 of the largest power-of-two scale at which nothing overflows
    (formulas.max_safe_scale of the unscaled amax): where a dynamic scaler
    settles."""
    amax = max(case.magnitudes)
    return math.frexp(formulas.max_safe_scale(amax, case.fmt))[1] - 1


# --- a bf16 run that stopped learning ---------------------------------------------


@dataclass(frozen=True)
class RunLogRow:
    """One logged step of stalled_run."""

    step: int
    loss: float
    grad_norm: float
    lr: float
    update_median: float  # the median |update| the optimizer computed
    changed: float  # share of the weights whose stored value changed this step


@dataclass(frozen=True)
class StalledRun:
    """A run whose weights are stored in bf16 and updated in place."""

    seed: int
    n_weights: int
    weight_median: float  # median |w| of the stored bf16 weights
    lr: float
    rows: tuple  # RunLogRow, every log_every steps
    cause: str = "no_master"  # what the generator planted


def stalled_run(
    seed: int, steps: int = 200, n_weights: int = 64, log_every: int = 25
) -> StalledRun:
    """Fit weights that start in the binade [2^E, 2^(E+1)) (E from -1 to 1,
    by the seed) to targets about 0.02 away, with Adam-sized updates (lr
    times the gradient's sign) at a learning rate of 1e-4 to 5e-4, the
    weights stored in bf16: each step computes w - u and stores it in bf16,
    which rounds it back to w (every update is below half the gap,
    formulas.absorb_limit). The log shows what a monitoring tool would."""
    _check_seed(seed)
    for name, v in (("steps", steps), ("n_weights", n_weights)):
        validate.positive_int(name, v)
    validate.positive_int("log_every", log_every)
    return _stalled_run(seed, steps, n_weights, log_every)


@functools.lru_cache(maxsize=16)  # a run is frozen: keys and mistakes share it
def _stalled_run(seed, steps, n_weights, log_every) -> StalledRun:
    import numpy as np

    rng = random.Random(seed)
    binade, lr = rng.choice((-1, 0, 1)), rng.choice((1e-4, 2e-4, 3e-4, 5e-4))

    def bf16(x):
        return formulas.round_to_format(np.asarray(x, dtype=np.float64), "bf16")

    w = bf16([2.0**binade * rng.uniform(1.0, 2.0) for _ in range(n_weights)])
    target = w + np.array([rng.gauss(0.0, 0.02) for _ in range(n_weights)])
    rows = []
    for step in range(1, steps + 1):
        err = w - target
        grads = 2 * err / n_weights
        updates = lr * np.sign(grads)  # Adam's size: lr times the gradient's sign
        new = bf16(w - bf16(updates))
        if step == 1 or step % log_every == 0:
            rows.append(
                RunLogRow(
                    step,
                    float(np.mean(err * err)),
                    float(np.sqrt(np.sum(grads * grads))),
                    lr,
                    float(np.median(np.abs(updates))),
                    float(np.mean(new != w)),
                )
            )
        w = new
    median = float(np.median(np.abs(w)))
    return StalledRun(seed, n_weights, median, lr, tuple(rows))


def absorbed_log2(run: StalledRun) -> int:
    """log2 of the largest update a weight of the run's median magnitude
    absorbs in bf16: half the gap around it (formulas.absorb_limit)."""
    return math.frexp(formulas.absorb_limit(run.weight_median, "bf16"))[1] - 1


def updates_per_bf16_step(run: StalledRun) -> float:
    """With an fp32 master copy, how many updates of the run's size add up
    to one gap between the bf16 numbers around its median weight: how often
    the bf16 copy the next forward reads moves by one step."""
    return 2 * formulas.absorb_limit(run.weight_median, "bf16") / run.lr
