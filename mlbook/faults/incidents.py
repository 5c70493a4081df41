"""Incidents to diagnose: seeded artifacts built on the chapter's formulas.

Each generator draws from a seed what an engineer meets in practice and
returns it with the truth it was drawn from, so an exercise's key is that
truth run through the chapter's formulas. They take milliseconds, and a seed
gives the same artifact on every machine (NumPy's PCG64 stream).

- ``rank_timings``: per-rank means of a data-parallel job's profile, the
  step time and the time in the gradient all-reduce, with one rank slowed
  (``formulas.simulate_step_times``, ``formulas.allreduce_wait``). The
  barrier gives every rank the same step time, so the slow rank hides there;
  it shows as the rank that waits least.
- ``spike_replay``: a loss curve with a spike, the batch each step read, and
  a deterministic replay from the checkpoint before it with the window's
  batches in another order (``formulas.detect_spikes`` finds the spikes).

NumPy is imported inside the generators, so importing this module (and
``mlbook.faults``) stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from mlbook.common import validate
from mlbook.faults import formulas

SPIKE_CAUSES = ("data", "state")
# The detector the spike artifacts are read with: a 20-step window, 6 sigma.
SPIKE_CONFIG = formulas.SpikeConfig(window=20, z_threshold=6.0, min_history=10)


def _seed(seed) -> int:
    if not isinstance(seed, Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return int(seed)


@dataclass(frozen=True)
class RankProfile:
    """One rank's means over the profiled steps, in milliseconds."""

    rank: int
    step_ms: float  # the whole step: the same on every rank (the barrier)
    allreduce_ms: float  # waiting for the slowest rank, then the transfer

    @property
    def compute_ms(self) -> float:
        """Forward and backward: the step less the time in the all-reduce."""
        return self.step_ms - self.allreduce_ms


@dataclass(frozen=True)
class RankTimings:
    """A job's per-rank profile and the slow rank behind it."""

    seed: int
    straggler: int
    delta: float  # the slow rank takes 1 + delta times a healthy one's compute
    sigma: float
    steps: int
    transfer_ms: float
    ranks: tuple[RankProfile, ...]

    @property
    def measured_delta(self) -> float:
        """How much slower the least-waiting rank's compute is than the
        median of the others', as read off the profile."""
        import numpy as np

        slow = min(self.ranks, key=lambda r: r.allreduce_ms)
        others = [r.compute_ms for r in self.ranks if r.rank != slow.rank]
        return slow.compute_ms / float(np.median(others)) - 1


def rank_timings(
    seed: int,
    n_ranks: int = 8,
    sigma: float = 0.03,
    steps: int = 200,
    compute_ms: float = 400.0,
    transfer_ms: float = 60.0,
) -> RankTimings:
    """A profile of ``steps`` steps of ``n_ranks`` ranks: compute times
    lognormal around ``compute_ms`` with spread ``sigma``, one rank (the seed
    picks it) slowed by 8 to 20 % (the seed draws it), then an all-reduce that
    waits for the slowest rank and moves the gradients in ``transfer_ms``."""
    import numpy as np

    n_ranks = validate.positive_int("n_ranks", n_ranks)
    if n_ranks < 2:
        raise ValueError(f"n_ranks must be at least 2 to compare ranks, got {n_ranks}")
    validate.positive("compute_ms", compute_ms)
    validate.non_negative("transfer_ms", transfer_ms)
    rng = np.random.default_rng(_seed(seed))
    straggler = int(rng.integers(n_ranks))
    delta = float(rng.uniform(0.08, 0.20))
    times = formulas.simulate_step_times(
        n_ranks,
        delta,
        sigma,
        steps=steps,
        seed=int(rng.integers(2**31)),
        straggler_rank=straggler,
        median_s=compute_ms / 1e3,
    )  # (steps, ranks) seconds
    step = times.max(axis=1).mean() * 1e3 + transfer_ms  # the barrier: every rank
    wait = formulas.allreduce_wait(times).mean(axis=0) * 1e3  # (ranks,)
    ranks = tuple(
        RankProfile(r, float(step), float(w + transfer_ms)) for r, w in enumerate(wait)
    )
    return RankTimings(
        int(seed), straggler, delta, float(sigma), int(steps), float(transfer_ms), ranks
    )


@dataclass(frozen=True)
class SpikeReplay:
    """A run's losses with the batch each step read, and a replay of it from
    a checkpoint, the batches of the replayed window in another order."""

    seed: int
    cause: str  # "data": a bad batch; "state": the model's state met the data
    bad_batch: int  # the batch that set the spike off in the run
    checkpoint_every: int
    batches: tuple[int, ...]  # the batch step t read, in the run
    losses: tuple[float, ...]
    replay_from: int  # the checkpoint the replay resumed from
    replay_batches: tuple[int, ...]  # from step replay_from on
    replay_losses: tuple[float, ...]

    @property
    def spike_step(self) -> int:
        """The first step the detector flags in the run."""
        return formulas.detect_spikes(self.losses, SPIKE_CONFIG)[0]

    @property
    def replay_spike_step(self) -> int | None:
        """The first step the detector flags in the replay (run steps), or None."""
        full = self.losses[: self.replay_from] + self.replay_losses
        flagged = [s for s in formulas.detect_spikes(full, SPIKE_CONFIG)]
        after = [s for s in flagged if s >= self.replay_from]
        return after[0] if after else None


def _curve(rng, steps: int):
    """A falling loss with 1 % noise: 2.4 + 1.6 e^(-t / 150) nats."""
    import numpy as np

    t = np.arange(steps)
    return (2.4 + 1.6 * np.exp(-t / 150)) * (1 + 0.01 * rng.standard_normal(steps))


def _spiked(losses, at: int, height: float):
    """Add a spike to the loss of step ``at`` that halves every step after."""
    out = list(losses)
    for j in range(at, len(out)):
        out[j] += height * 0.5 ** (j - at)
    return out


def spike_replay(
    seed: int,
    steps: int = 60,
    checkpoint_every: int = 10,
    cause: str = "data",
) -> SpikeReplay:
    """A run of ``steps`` steps whose batches are a seeded permutation. One
    batch (the seed picks it, read in the second half of the run) makes a bad
    update: the loss of the step after it spikes and decays. The replay
    resumes from the last checkpoint at or before that batch and reads the
    same batches with the next ``checkpoint_every`` in another order; with
    ``cause`` "data" the spike follows the bad batch there too, with "state"
    it does not come back."""
    import numpy as np

    steps = validate.positive_int("steps", steps)
    every = validate.positive_int("checkpoint_every", checkpoint_every)
    if cause not in SPIKE_CAUSES:
        raise ValueError(f"cause must be one of {SPIKE_CAUSES}, got {cause!r}")
    if steps < 4 * every or every < 4:
        raise ValueError(
            f"steps={steps} must be at least 4 checkpoint intervals of at least 4 "
            f"steps (checkpoint_every={every})"
        )
    rng = np.random.default_rng(_seed(seed))
    batches = [int(b) for b in rng.permutation(steps)]
    # the bad batch is read at least two intervals in, not on a checkpoint's step
    # nor the last of its interval, so the next step lies in the same window
    candidates = [
        t for t in range(2 * every, steps - every) if 0 < t % every < every - 1
    ]
    bad_step = int(rng.choice(candidates))
    bad = batches[bad_step]
    height = float(rng.uniform(1.5, 3.0))
    losses = _spiked(_curve(rng, steps), bad_step + 1, height)
    start = bad_step // every * every  # the checkpoint before the bad batch
    window = batches[start : start + every]
    shuffled = [window[i] for i in rng.permutation(every)]
    while shuffled.index(bad) in (window.index(bad), every - 1):
        shuffled = [window[i] for i in rng.permutation(every)]
    replay_batches = shuffled + batches[start + every :]
    noise = _curve(rng, steps)[start:]  # the replay's own noise
    replay = list(noise)
    if cause == "data":
        replay = _spiked(replay, shuffled.index(bad) + 1, height)
    return SpikeReplay(
        seed=int(seed),
        cause=cause,
        bad_batch=bad,
        checkpoint_every=every,
        batches=tuple(batches),
        losses=tuple(float(x) for x in losses),
        replay_from=start,
        replay_batches=tuple(replay_batches),
        replay_losses=tuple(float(x) for x in replay),
    )
