"""Incidents to diagnose: seeded artifacts built on the chapter's formulas.

Each generator draws from a seed what an engineer meets in practice and
returns it with the truth it was drawn from, so an exercise's key is that
truth run through the chapter's formulas. They take milliseconds, and a seed
gives the same artifact on every machine (NumPy's PCG64 stream).

- ``micro_batch_log``: one optimizer step's micro-batches as a trainer logs
  them (real tokens, the sum of their token losses, the loss it called
  backward on), normalised one of the ways in ``NORMALISATIONS``;
  ``formulas.token_normalised_losses`` is the right one,
  ``formulas.naive_token_losses`` the classic bug.
- ``k_sweep_log``: step time and activation memory against k at one global
  batch, from a ``formulas.StepCostModel`` the seed draws, timed with a
  jitter of up to 1 %.

NumPy is imported inside the generators, so importing this module (and
``mlbook.accumulation``) stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

from mlbook.accumulation import formulas
from mlbook.common import validate
from mlbook.common.units import GIB

# How the k losses that go to backward() can be normalised. Only "sum_over_n"
# gives the whole batch's token mean; the others are the ways trainers got it wrong.
NORMALISATIONS = ("sum_over_n", "mean_over_k", "mean_no_k", "sum_over_k")
STEP_JITTER = 0.01  # k_sweep_log's timed steps scatter by up to 1 %


def _seed(seed) -> int:
    if not isinstance(seed, Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return int(seed)


def _normalised(token_losses, normalisation: str) -> list[float]:
    """The k losses a trainer calls backward on, normalised as named."""
    k = len(token_losses)
    if normalisation == "sum_over_n":
        return formulas.token_normalised_losses(token_losses)
    if normalisation == "mean_over_k":
        return formulas.naive_token_losses(token_losses)
    if normalisation == "mean_no_k":  # each micro-batch's own mean, not divided by k
        return [k * x for x in formulas.naive_token_losses(token_losses)]
    if normalisation == "sum_over_k":  # token sums divided by k
        return [math.fsum(r) / k for r in token_losses]
    raise ValueError(
        f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}"
    )


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a logged step."""

    index: int  # 1 to k, in the order they ran
    tokens: int  # real (non-padding) tokens
    loss_sum: float  # the sum of its token losses, nats
    logged_loss: float  # the loss the trainer called backward on


@dataclass(frozen=True)
class MicroBatchLog:
    """One accumulated step as its trainer logged it, and how that trainer
    normalised the micro-batches' losses (the truth behind the log)."""

    seed: int
    normalisation: str
    micro_batches: tuple[MicroBatch, ...]

    @property
    def k(self) -> int:
        return len(self.micro_batches)

    @property
    def tokens(self) -> int:
        """N: the real tokens of the whole batch."""
        return sum(m.tokens for m in self.micro_batches)

    def token_weight(self, index: int, normalisation: str | None = None) -> float:
        """The weight one token of micro-batch ``index`` (1 to k) gets in the
        accumulated gradient under ``normalisation`` (the log's own when
        None): the losses are linear in the token losses, so it is what they
        add up to when that token's loss is 1 and every other token's is 0."""
        index = validate.positive_int("index", index)
        if index > self.k:
            raise ValueError(f"index must be at most k = {self.k}, got {index}")
        indicator = [[0.0] * m.tokens for m in self.micro_batches]
        indicator[index - 1][0] = 1.0
        how = self.normalisation if normalisation is None else normalisation
        return math.fsum(_normalised(indicator, how))

    @property
    def shortest(self) -> int:
        """The index of the micro-batch with the fewest real tokens."""
        return min(self.micro_batches, key=lambda m: (m.tokens, m.index)).index


def micro_batch_log(
    seed: int,
    k: int = 4,
    sequences: int = 4,
    max_len: int = 512,
    normalisation: str | None = None,
) -> MicroBatchLog:
    """One step of ``k`` micro-batches of ``sequences`` sequences each, their
    lengths drawn from 16 to ``max_len`` tokens and sorted (a length-bucketing
    loader), token losses about 2.6 nats. ``normalisation`` None: the seed
    picks one of the wrong ones."""
    import numpy as np

    k = validate.positive_int("k", k)
    sequences = validate.positive_int("sequences", sequences)
    max_len = validate.positive_int("max_len", max_len)
    if max_len < 16:
        raise ValueError(f"max_len must be at least 16 tokens, got {max_len}")
    rng = np.random.default_rng(_seed(seed))
    how = normalisation
    if how is None:
        how = str(rng.choice(NORMALISATIONS[1:]))
    elif how not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {how!r}")
    lengths = np.sort(rng.integers(16, max_len + 1, k * sequences))
    per_micro = lengths.reshape(k, sequences).sum(axis=1)  # (k,) real tokens
    token_losses = [
        np.clip(rng.normal(2.6, 0.4, int(n)), 0.0, None).tolist() for n in per_micro
    ]
    logged = _normalised(token_losses, how)
    micro = tuple(
        MicroBatch(j + 1, len(t), math.fsum(t), x)
        for j, (t, x) in enumerate(zip(token_losses, logged, strict=True))
    )
    return MicroBatchLog(int(seed), how, micro)


@dataclass(frozen=True)
class SweepIncident:
    """A timed k sweep and the cost model it was drawn from."""

    seed: int
    model: formulas.StepCostModel
    sweep: formulas.KSweep


def k_sweep_log(
    seed: int, global_batch: int = 256, ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
) -> SweepIncident:
    """Median step times and activation bytes for each k in ``ks`` at
    ``global_batch``, from a cost model the seed draws (a large model on a
    GPU: 4 to 12 ms a micro-batch, 0.5 to 1.5 ms an example, 0.15 to 0.4 GiB
    of activations an example over 2 to 6 GiB)."""
    import numpy as np

    global_batch = validate.positive_int("global_batch", global_batch)
    ks = tuple(formulas.check_k(k, global_batch) for k in ks)
    if len(set(ks)) < 2:
        raise ValueError(f"ks must hold at least two different k, got {ks!r}")
    rng = np.random.default_rng(_seed(seed))
    model = formulas.StepCostModel(
        optimizer_s=float(rng.uniform(0.02, 0.06)),
        per_micro_batch_s=float(rng.uniform(0.004, 0.012)),
        per_example_s=float(rng.uniform(0.0005, 0.0015)),
        per_example_bytes=float(rng.uniform(0.15, 0.4)) * GIB,
        fixed_bytes=float(rng.uniform(2.0, 6.0)) * GIB,
    )
    jitter = rng.uniform(-STEP_JITTER, STEP_JITTER, len(ks))
    rows = tuple(
        formulas.SweepRow(
            k=k,
            micro_batch=global_batch // k,
            step_s=model.step_s(global_batch, k) * (1 + float(j)),
            saved_bytes=round(model.activation_bytes(global_batch // k)),
        )
        for k, j in zip(ks, jitter, strict=True)
    )
    sweep = formulas.KSweep(global_batch, rows, model.optimizer_s, device="cuda")
    return SweepIncident(int(seed), model, sweep)
