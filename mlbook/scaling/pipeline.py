"""The pipeline schedules as timelines: who computes what, when, and how long
each device waits. Plain Python with exact fractions, no torch.

A model cut into ``p`` stages runs on ``p`` devices; a step's batch is cut
into ``m`` micro-batches. Each device runs a fixed order of forward (F) and
backward (B) operations, each one as soon as its device is free and the
operation it waits for is done:

- F of micro-batch i on stage s needs F of i on stage s - 1 (its input);
- B of i on stage s needs B of i on stage s + 1 (its output's gradient), and
  on the last stage, F of i on that stage.

Three orders:

- ``"gpipe"`` (Huang et al. 2019): every forward, then every backward;
- ``"1f1b"`` (PipeDream-Flush, used by Megatron-LM): ``p - d - 1`` warm-up
  forwards on device d, then one forward, one backward, and so on, then the
  remaining backwards. Same idle time as GPipe, but a device holds at most
  ``p - d`` micro-batches' activations instead of ``m``;
- ``"interleaved"`` (Narayanan et al. 2021, Sec. 2.2.2): each device holds
  ``v`` model chunks (device d holds virtual stages d, d + p, ...), each
  ``1/v`` of its layers, in Megatron-LM's order
  (``forward_backward_pipelining_with_interleaving``), which needs ``m`` to be
  a multiple of ``p``.

Point-to-point transfers take no time here: the timeline isolates the bubble.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from mlbook.common import validate

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Op:
    """One operation of the timeline: F or B of micro-batch ``micro`` on model
    chunk ``chunk`` of ``device``, from ``start`` to ``end`` (exact fractions of
    the unit the durations were given in)."""

    device: int
    kind: str  # "F" or "B"
    micro: int
    chunk: int
    start: Fraction
    end: Fraction

    @property
    def stage(self) -> tuple:
        return (self.chunk, self.device)


@dataclass(frozen=True)
class Timeline:
    """A simulated pipeline step: its operations, how long it took, and the
    share of device time spent idle (exact)."""

    schedule: str
    p: int
    m: int
    v: int
    ops: tuple
    makespan: Fraction
    busy: Fraction  # compute time summed over devices
    bubble: Fraction  # idle share: 1 - busy / (p * makespan)
    peak_in_flight: (
        tuple  # per device: most micro-batches whose activations it held at once
    )


def _check(schedule, p, m, v):
    validate.one_of("schedule", schedule, SCHEDULES)
    p = validate.positive_int("p", p)
    m = validate.positive_int("m", m)
    v = validate.positive_int("v", v)
    if schedule != "interleaved" and v != 1:
        raise ValueError(
            f"v={v}: only the 'interleaved' schedule has more than one chunk per device"
        )
    if schedule == "interleaved" and m % p:
        raise ValueError(
            f"m={m} must be a multiple of p={p} for the interleaved schedule "
            "(Megatron-LM's rule: micro-batches go round in groups of p)"
        )
    return p, m, v


def device_order(schedule: str, p: int, m: int, v: int = 1) -> tuple:
    """Each device's operations in the order it runs them: a tuple (one per
    device) of tuples of (kind, micro-batch, chunk)."""
    p, m, v = _check(schedule, p, m, v)
    orders = []
    for d in range(p):
        if schedule == "gpipe":
            order = [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
        elif schedule == "1f1b":
            warm = min(p - d - 1, m)
            order = [("F", i, 0) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i, 0), ("B", i, 0)]
            order += [("B", i, 0) for i in range(m - warm, m)]
        else:
            total = m * v

            def micro(k):  # k-th op of a kind -> micro-batch
                return (k // (p * v)) * p + k % p

            def chunk(k, forward):
                c = (k % (p * v)) // p
                return c if forward else v - 1 - c

            if m == p:
                warm = total
            else:
                warm = min((p - d - 1) * 2 + (v - 1) * p, total)
            order = [("F", micro(k), chunk(k, True)) for k in range(warm)]
            for k in range(total - warm):
                order += [
                    ("F", micro(warm + k), chunk(warm + k, True)),
                    ("B", micro(k), chunk(k, False)),
                ]
            order += [
                ("B", micro(k), chunk(k, False)) for k in range(total - warm, total)
            ]
        orders.append(tuple(order))
    return tuple(orders)


def _fraction(name, value) -> Fraction:
    validate.positive(name, value)
    return Fraction(value)


def simulate(
    schedule: str, p: int, m: int, v: int = 1, forward_s=1, backward_s=2
) -> Timeline:
    """Run the schedule's timeline. ``forward_s`` and ``backward_s`` are one
    micro-batch's forward and backward time through one device's whole share
    of the model (so a chunk takes 1/v of them); backward costs twice the
    forward by default. Times are kept as exact fractions."""
    p, m, v = _check(schedule, p, m, v)
    f = _fraction("forward_s", forward_s) / v
    b = _fraction("backward_s", backward_s) / v
    orders = device_order(schedule, p, m, v)
    last = v * p - 1  # the last virtual stage
    done: dict = {}  # (kind, micro, virtual stage) -> end time
    free = [Fraction(0)] * p
    nxt = [0] * p
    ops = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(p):
            while nxt[d] < len(orders[d]):
                kind, i, c = orders[d][nxt[d]]
                s = c * p + d
                if kind == "F":
                    dep = ("F", i, s - 1) if s > 0 else None
                else:
                    dep = ("B", i, s + 1) if s < last else ("F", i, s)
                if dep is not None and dep not in done:
                    break
                start = max(free[d], done[dep]) if dep is not None else free[d]
                end = start + (f if kind == "F" else b)
                done[(kind, i, s)] = end
                free[d] = end
                ops.append(Op(d, kind, i, c, start, end))
                nxt[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"{schedule} schedule deadlocked at p={p}, m={m}, v={v}")
    makespan = max(free)
    busy = sum((op.end - op.start for op in ops), Fraction(0))
    in_flight = []
    for d in range(p):
        held, most = 0, 0
        for kind, _, _ in orders[d]:
            held += 1 if kind == "F" else -1
            most = max(most, held)
        in_flight.append(most)
    return Timeline(
        schedule,
        p,
        m,
        v,
        tuple(sorted(ops, key=lambda o: (o.start, o.device))),
        makespan,
        busy,
        1 - busy / (p * makespan),
        tuple(in_flight),
    )
