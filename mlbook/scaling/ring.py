"""The ring all-reduce step by step: who sends which piece to whom, and what
each rank holds after every step. Plain Python, no torch.

The buffer of S bytes is cut into N pieces ("chunks"), one per rank. Rank r
sends only to rank r + 1 (mod N):

- reduce-scatter, steps 1 .. N - 1: at step k rank r sends the running sum of
  chunk (r - k + 1) mod N, which the next rank adds to its own copy. After
  N - 1 steps rank r holds the sum over all ranks of chunk (r + 1) mod N.
- all-gather, steps 1 .. N - 1: at step k rank r forwards the finished chunk
  (r - k + 2) mod N, which the next rank stores. After N - 1 more steps every
  rank holds every finished chunk.

Each step every rank sends one chunk, S / N bytes, so over the 2 (N - 1) steps
a rank sends 2 (N - 1) / N * S bytes: ``formulas.ring_allreduce_bytes_per_rank``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbook.common import validate

PHASES = ("reduce-scatter", "all-gather")


@dataclass(frozen=True)
class Send:
    """One transfer of one step: ``src`` sends chunk ``chunk`` to ``dst``."""

    src: int
    dst: int
    chunk: int


@dataclass(frozen=True)
class RingStep:
    """One step of the ring: its phase, its number within the phase (from 1),
    the transfers (one per rank), the bytes each rank sends in it, and what
    every rank holds afterwards: ``held[r][c]`` is the set of ranks whose
    values chunk c of rank r's buffer sums."""

    phase: str
    step: int
    sends: tuple
    bytes_per_rank: float
    held: tuple


def _check(n_ranks, n_bytes) -> int:
    n = validate.positive_int("n_ranks", n_ranks)
    if n < 2:
        raise ValueError(
            f"n_ranks must be at least 2 (one rank has nothing to send), got {n}"
        )
    validate.positive("n_bytes", n_bytes)
    return n


def ring_allreduce_steps(n_ranks: int, n_bytes: float) -> tuple:
    """The 2 (N - 1) steps of a ring all-reduce of ``n_bytes`` over ``n_ranks``,
    each with its transfers and the state every rank holds after it (the
    state before the first step: ``start_state``)."""
    n = _check(n_ranks, n_bytes)
    held = [list(row) for row in start_state(n)]
    steps = []
    for phase in PHASES:
        for k in range(1, n):
            offset = 1 - k if phase == "reduce-scatter" else 2 - k
            sends = tuple(Send(r, (r + 1) % n, (r + offset) % n) for r in range(n))
            before = [list(row) for row in held]  # every rank sends at once
            for s in sends:
                if phase == "reduce-scatter":  # the receiver adds the piece
                    held[s.dst][s.chunk] = (
                        before[s.dst][s.chunk] | before[s.src][s.chunk]
                    )
                else:  # the receiver stores the finished piece
                    held[s.dst][s.chunk] = before[s.src][s.chunk]
            frozen = tuple(tuple(row) for row in held)
            steps.append(RingStep(phase, k, sends, n_bytes / n, frozen))
    return tuple(steps)


def start_state(n_ranks: int) -> tuple:
    """What each rank holds before the ring starts: every chunk of its own
    buffer holds its own values only."""
    n = validate.positive_int("n_ranks", n_ranks)
    return tuple(tuple(frozenset({r}) for _ in range(n)) for r in range(n))


def bytes_sent_per_rank(steps) -> list[float]:
    """Bytes each rank sends over all the steps (2 (N - 1) / N * S each)."""
    steps = tuple(steps)
    n = len(steps[0].sends)
    total = [0.0] * n
    for step in steps:
        for s in step.sends:
            total[s.src] += step.bytes_per_rank
    return total
