"""What gradient accumulation costs: a two-line model of step time and
activation memory, fitted to measurements. Pure Python, no torch.

At a fixed global batch B split into k micro-batches of b = B / k examples:

    step_s(B, k)        = optimizer_s + k * per_micro_batch_s + B * per_example_s
    activation_bytes(b) = fixed_bytes + b * per_example_bytes

per_micro_batch_s is the fixed cost every forward and backward pays however
small the micro-batch (kernel launches, Python, layers too small to fill the
device): accumulation pays it k times. Activations live for one micro-batch
at a time, so their memory follows b, not B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from mlbook.common import validate


def check_k(k: int, batch_size: int) -> int:
    """k must be a positive integer that divides the batch exactly."""
    validate.positive_int("k", k)
    validate.positive_int("batch_size", batch_size)
    return validate.divides("k", k, "batch_size", batch_size)


def divisors(n: int) -> list[int]:
    """Every k that splits a batch of n into equal micro-batches."""
    validate.positive_int("n", n)
    return [d for d in range(1, n + 1) if n % d == 0]


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares intercept and slope of ys against xs."""
    xs, ys = list(xs), list(ys)
    for name, values in (("xs", xs), ("ys", ys)):
        for v in values:
            validate.at_least(name, v, -math.inf)  # finite numbers, no bools or strings
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys):
        raise ValueError(
            f"xs has {len(xs)} values but ys has {len(ys)}; they must match"
        )
    if len(set(xs)) < 2:
        raise ValueError(f"a line needs at least two distinct x values, got {xs!r}")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


@dataclass(frozen=True)
class StepCostModel:
    """Step time and activation memory of an accumulated step (see module doc)."""

    optimizer_s: float
    per_micro_batch_s: float
    per_example_s: float
    per_example_bytes: float
    fixed_bytes: float = 0.0

    def __post_init__(self):
        for name in (
            "optimizer_s",
            "per_micro_batch_s",
            "per_example_s",
            "per_example_bytes",
            "fixed_bytes",
        ):
            validate.non_negative(name, getattr(self, name))

    def step_s(self, global_batch: int, k: int) -> float:
        check_k(k, global_batch)
        return (
            self.optimizer_s
            + k * self.per_micro_batch_s
            + global_batch * self.per_example_s
        )

    def activation_bytes(self, micro_batch: int) -> float:
        validate.positive_int("micro_batch", micro_batch)
        return self.fixed_bytes + micro_batch * self.per_example_bytes

    def slowdown(self, global_batch: int, k: int) -> float:
        """Step time at k over the step time of one true large batch."""
        return self.step_s(global_batch, k) / self.step_s(global_batch, 1)

    def overhead_share(self, global_batch: int, k: int) -> float:
        """The share of the step at k that is the fixed per-micro-batch cost."""
        step = self.step_s(global_batch, k)
        return k * self.per_micro_batch_s / step if step > 0 else 0.0

    def largest_micro_batch(self, global_batch: int, budget_bytes: float) -> int:
        """The largest b that divides the global batch and whose activations
        fit in ``budget_bytes``: the micro-batch to run, k = B / b."""
        validate.positive_int("global_batch", global_batch)
        validate.non_negative("budget_bytes", budget_bytes)
        fits = [
            b
            for b in divisors(global_batch)
            if self.activation_bytes(b) <= budget_bytes
        ]
        if not fits:
            raise ValueError(
                f"budget_bytes={budget_bytes!r} is below the activations of one "
                f"example ({self.activation_bytes(1)!r} bytes): no micro-batch fits"
            )
        return fits[-1]


@dataclass(frozen=True)
class SweepRow:
    """One k of a measured sweep at a fixed global batch."""

    k: int
    micro_batch: int  # b = B / k
    step_s: float  # median wall time of an optimizer step
    saved_bytes: int  # bytes one micro-batch saves for backward
    times_s: tuple = ()  # every timed step
    peak_bytes: int | None = (
        None  # CUDA only: peak allocated during a step above what was there
    )


@dataclass(frozen=True)
class KSweep:
    """Step time and activation memory against k at one global batch."""

    global_batch: int
    rows: tuple  # SweepRow per k, in the order measured
    optimizer_s: float  # the optimizer step alone
    device: str = "cpu"
    threads: int | None = None  # CPU threads torch used


def fit_cost_model(sweep: KSweep) -> StepCostModel:
    """Fit StepCostModel to a measured sweep at one global batch.

    The slope of step time against k is the per-micro-batch overhead; what is
    left of the intercept after the optimizer step, divided by B, is the
    per-example cost. The slope of saved bytes against b is the per-example
    activation memory. Negative fitted values (noise) are clipped to zero.
    """
    rows = sweep.rows
    B = validate.positive_int("global_batch", sweep.global_batch)
    opt_s = validate.non_negative("optimizer_s", sweep.optimizer_s)
    for r in rows:
        check_k(r.k, B)
        validate.non_negative("step_s", r.step_s)
        validate.non_negative("saved_bytes", r.saved_bytes)
        if r.micro_batch * r.k != B:
            raise ValueError(
                f"micro_batch={r.micro_batch} times k={r.k} must be global_batch={B}"
            )
    intercept, per_micro = fit_line([r.k for r in rows], [r.step_s for r in rows])
    fixed, per_example_bytes = fit_line(
        [r.micro_batch for r in rows], [r.saved_bytes for r in rows]
    )
    return StepCostModel(
        optimizer_s=opt_s,
        per_micro_batch_s=max(per_micro, 0.0),
        per_example_s=max(intercept - opt_s, 0.0) / B,
        per_example_bytes=max(per_example_bytes, 0.0),
        fixed_bytes=max(fixed, 0.0),
    )


# --- token-level losses over micro-batches of different lengths --------------------


def _token_losses(token_losses) -> list[list[float]]:
    """The per-token losses of each micro-batch, as lists of finite floats."""
    if isinstance(token_losses, (str, bytes)):
        raise ValueError(f"token_losses must be a list of lists, got {token_losses!r}")
    out = []
    for j, losses in enumerate(token_losses):
        if isinstance(losses, (str, bytes)):
            raise ValueError(f"token_losses[{j}] must be a list, got {losses!r}")
        row = list(losses)
        for t, v in enumerate(row):
            validate.at_least(f"token_losses[{j}][{t}]", v, -math.inf)
        out.append([float(v) for v in row])
    if not out:
        raise ValueError("token_losses is empty; it needs at least one micro-batch")
    return out


def token_normalised_losses(token_losses) -> list[float]:
    """The loss each of k micro-batches calls backward on so that the sum of
    their gradients is the gradient of the whole batch's token mean:

        loss_j = (sum of micro-batch j's token losses) / N

    with N the real tokens of the whole batch, counted before the first
    micro-batch. ``token_losses[j]`` lists micro-batch j's per-token losses
    (its real tokens only; an all-padding micro-batch is an empty list, whose
    loss is 0). The losses add up to the full batch's token mean."""
    rows = _token_losses(token_losses)
    n_tokens = sum(len(r) for r in rows)
    if n_tokens == 0:
        raise ValueError("token_losses holds no token: every micro-batch is empty")
    return [math.fsum(r) / n_tokens for r in rows]


def naive_token_losses(token_losses) -> list[float]:
    """The bug: each micro-batch's own token mean, divided by k. A token of
    micro-batch j weighs 1 / (k N_j) instead of 1 / N."""
    rows = _token_losses(token_losses)
    for j, r in enumerate(rows):
        if not r:
            raise ValueError(
                f"token_losses[{j}] is empty: its own token mean is undefined"
            )
    k = len(rows)
    return [math.fsum(r) / len(r) / k for r in rows]


# --- fp16 loss scaling inside accumulation -------------------------------------------


def loss_scale_log2(grad: float, k: int, flush: float) -> int:
    """The exponent e of the smallest power-of-two loss scale S = 2^e (e >= 0)
    at which one micro-batch's share of a gradient survives: scaling each
    micro-batch's loss by S / k makes its backward produce S grad / k, which a
    format that rounds magnitudes at or below ``flush`` to zero keeps when

        S grad / k > flush,   so   S > k flush / grad.

    ``grad`` is the gradient's magnitude for the mean loss (each micro-batch
    sees about the same); compared exactly, in rationals."""
    validate.positive("grad", grad)
    validate.positive_int("k", k)
    validate.positive("flush", flush)
    bound = Fraction(k) * Fraction(flush) / Fraction(grad)
    e = 0
    while Fraction(2) ** e <= bound:
        e += 1
    return e


def largest_unscaled_k(grad: float, flush: float) -> int:
    """The most micro-batches k for which grad / k stays above ``flush`` with
    no loss scale (S = 1): the largest k below grad / flush, compared exactly.
    0 when the gradient flushes even at k = 1."""
    validate.positive("grad", grad)
    validate.positive("flush", flush)
    ratio = Fraction(grad) / Fraction(flush)
    return math.ceil(ratio) - 1
