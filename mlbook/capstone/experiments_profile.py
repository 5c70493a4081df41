"""Reading a step back from the profiler: one profiled step accounted for in
the buckets of ``formulas.BUCKETS``, and a loop's steps timed with the
profiler on and off, alternating.

``account_step`` reads one profiled step (its ``ladder/`` scopes, recorded by
``mlbook.common_torch.reference_loop.Loop``) back into buckets.

Timing convention: a step's time is the median of several steps, on the
wall clock on a GPU and, for a CPU step on one thread, on that thread's CPU
time, so that the time another process held the core is not counted as the
step's (a profiled step's buckets are scaled by its CPU over wall time alike).
Profiled and unprofiled steps alternate, so a machine that drifts drifts
under both.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
import warnings
from collections import Counter
from dataclasses import dataclass, replace

from torch.profiler import ProfilerActivity, profile, schedule

from mlbook.capstone import formulas as cf
from mlbook.common import validate
from mlbook.common_torch.timing import sync

P = cf.SCOPE_PREFIX


# --- reading one profiled step back ---------------------------------------------------


@dataclass(frozen=True)
class StepAccount:
    """One profiled step, accounted for."""

    window_s: float  # the step's scope, as the profiler timed it
    buckets: dict  # bucket -> seconds; they add up to window_s
    timeline: (
        tuple  # (start_s, end_s, bucket), top-level intervals from the window's start
    )
    calls: dict  # operator name -> calls in the step (every recorded operator)
    scope_calls: (
        dict  # innermost ladder scope ("none" outside them) -> operators recorded in it
    )

    def scaled(self, factor: float) -> StepAccount:
        """Every duration times ``factor``: the step's CPU time over its wall
        time removes the time the thread spent descheduled (a preemption is as
        likely at any instant, so it lands in each bucket in proportion)."""
        validate.positive("factor", factor)
        return replace(
            self,
            window_s=self.window_s * factor,
            buckets={k: v * factor for k, v in self.buckets.items()},
            timeline=tuple((a * factor, b * factor, k) for a, b, k in self.timeline),
        )


@dataclass
class Ev:
    """One event of a trace: an operator, a scope, or (on CUDA) a kernel or copy."""

    name: str
    start_us: float
    end_us: float
    thread: int = 0
    device: str = "cpu"  # "cpu" for host events, "cuda" for kernels and copies
    id: int = 0  # correlation id of a host operator
    linked_id: int = 0  # a kernel's link to the host operator that launched it
    parent: Ev | None = (
        None  # the innermost host event enclosing this one on its thread
    )


def nest(events: list) -> list:
    """Set each host event's ``parent``: the innermost event on the same
    thread whose interval encloses it (events of one thread nest, as the
    profiler's ranges do). Returns the events."""
    by_thread: dict = {}
    for e in events:
        if e.device == "cpu":
            by_thread.setdefault(e.thread, []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_us, -e.end_us))
        stack: list = []
        for e in evs:
            while stack and stack[-1].end_us < e.end_us:
                stack.pop()
            e.parent = stack[-1] if stack else None
            stack.append(e)
    return events


def trace_events(prof) -> list:
    """The events of a finished torch.profiler trace, nested. Read from the
    raw kineto results: building the profiler's own FunctionEvent tree
    (``prof.events()``) costs half a second for a few thousand operators."""
    from torch.autograd import DeviceType

    out = []
    for k in prof.profiler.kineto_results.events():
        if k.is_hidden_event() if hasattr(k, "is_hidden_event") else False:
            continue
        device = "cpu" if k.device_type() == DeviceType.CPU else "cuda"
        if device == "cuda" and (
            k.is_user_annotation() or k.name().startswith((P, "ProfilerStep"))
        ):
            # on CUDA each record_function range is mirrored as a GPU annotation
            continue
        out.append(
            Ev(
                k.name(),
                k.start_ns() / 1e3,
                k.end_ns() / 1e3,
                k.start_thread_id(),
                device,
                k.correlation_id(),
                k.linked_correlation_id(),
            )
        )
    return nest(out)


def _scope_name(e: Ev) -> str | None:
    return e.name[len(P) :] if e.name.startswith(P) else None


def _is_marker(e: Ev) -> bool:
    return e.name.startswith(P) or e.name.startswith("ProfilerStep")


def _lineage(e: Ev):
    """(innermost ladder scope, whether an operator encloses e, topmost
    operator above it)."""
    scope, top, enclosed = None, None, False
    p = e.parent
    while p is not None:
        name = _scope_name(p)
        if name is not None:
            if name == "step":
                break
            scope = scope or name
        elif not p.name.startswith("ProfilerStep"):
            enclosed, top = True, p
        p = p.parent
    return scope, enclosed, top


def account_step(events: list, device: str = "cpu") -> StepAccount:
    """Account for the one ``ladder/step`` scope among ``events`` (``Ev``,
    nested, as ``trace_events`` returns them).

    On a CPU, the intervals are the ``data``, ``log``, ``optimizer``,
    ``recompute`` and ``comm`` scopes (priority 2: their whole time is that
    bucket) and the top-level operators (those no other operator encloses;
    priority 1, bucketed by name and scope). On CUDA they are the GPU's
    kernels and copies, each bucketed by the top-level operator that launched
    it (and its scope), so host-side work shows as idle time of the GPU.
    """
    validate.one_of("device", device, ("cpu", "cuda"))
    steps = [e for e in events if e.name == P + "step" and e.device == "cpu"]
    if len(steps) != 1:
        raise ValueError(
            f"events must hold exactly one {P}step scope, got {len(steps)}"
        )
    step = steps[0]
    t0, t1 = step.start_us, step.end_us
    inside = [
        e for e in events if e.start_us >= t0 and e.end_us <= t1 and e is not step
    ]
    items, calls, scope_calls = [], Counter(), Counter()
    for e in inside:
        if e.device != "cpu" or e.thread != step.thread and device == "cpu":
            continue
        scope = _scope_name(e)
        if scope is not None:
            if device == "cpu" and scope in cf.SCOPE_BUCKETS:
                items.append((e.start_us, e.end_us, cf.SCOPE_BUCKETS[scope], 2))
            continue
        if e.name.startswith("ProfilerStep"):
            continue
        calls[e.name] += 1
        inner, enclosed, _ = _lineage(e)
        scope_calls[inner or "none"] += 1
        if device == "cpu" and not enclosed:
            items.append((e.start_us, e.end_us, cf.bucket_of(e.name, inner), 1))
    if device == "cuda":
        # a kernel links to the operator that launched it (not to the runtime call),
        # as torch's own parser has it
        host = {
            e.id: e for e in events if e.device == "cpu" and e.id and not e.linked_id
        }
        for e in inside:
            if e.device != "cuda":
                continue
            launcher = host.get(e.linked_id)
            name, scope = e.name, None
            if launcher is not None:
                scope, _, top = _lineage(launcher)
                if _scope_name(launcher) is None:
                    name = (top or launcher).name
            items.append((e.start_us, e.end_us, cf.bucket_of(name, scope), 1))
    window_s = (t1 - t0) * 1e-6
    rel = [
        ((a - t0) * 1e-6, (b - t0) * 1e-6, bucket, prio) for a, b, bucket, prio in items
    ]
    buckets = cf.account(window_s, rel)
    timeline = tuple(sorted((a, b, bucket) for a, b, bucket, _ in rel))
    return StepAccount(window_s, buckets, timeline, dict(calls), dict(scope_calls))


def profiler_activities(device: str) -> list:
    """What the profiler records: the CPU's operators, and on CUDA the GPU's kernels."""
    validate.one_of("device", device, ("cpu", "cuda"))
    return [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if device == "cuda" else []
    )


@dataclass(frozen=True)
class StepTimes:
    unprofiled_s: tuple  # each unprofiled step, on ``clock``
    profiled: tuple  # StepAccount of each profiled step, on ``clock``
    wall_s: tuple  # each unprofiled step's wall time
    clock: str  # "wall" or "thread" (the step's thread's CPU time)
    attempts: int = 1  # measurements pooled here (pooled() adds them up)

    @property
    def step_s(self) -> float:
        """The median unprofiled step."""
        return statistics.median(self.unprofiled_s)

    @property
    def fastest_step_s(self) -> float:
        return min(self.unprofiled_s)

    @property
    def spread(self) -> float:
        """The unprofiled steps' relative spread: slowest / fastest - 1."""
        return max(self.unprofiled_s) / min(self.unprofiled_s) - 1

    @property
    def account(self) -> StepAccount:
        """The median profiled step (by its window; the lower middle of
        an even count)."""
        ranked = sorted(self.profiled, key=lambda a: a.window_s)
        return ranked[(len(ranked) - 1) // 2]

    @property
    def residual(self) -> float:
        """One measurement: the fastest unprofiled step against the buckets
        of the fastest profiled one. At their fastest, the steps other
        processes disturbed least, so the comparison keeps the profiler's own
        cost and sheds most of the contention (compared by their medians,
        single measurements on a busy 2-core machine spread over -13 % to
        +7 %; by their fastest, -5 % to +4 %).

        Several pooled: the median unprofiled step against the median
        profiled step's buckets. Pooling is how a rung is measured until
        sure, and only the medians settle as samples are added: the fastest
        of each side keeps its one outlier however many steps follow. In one
        test build a rung measured four times stayed at
        +13.0 % by its fastest steps; in four ladders timed here, a rung
        pooled over four measurements was -7.7 % by its fastest steps and
        -0.1 % by its medians."""
        if self.attempts == 1:
            fastest = min(self.profiled, key=lambda a: a.window_s)
            accounted = sum(fastest.buckets.values())
            return cf.residual_fraction(self.fastest_step_s, accounted)
        accounted = statistics.median(sum(a.buckets.values()) for a in self.profiled)
        return cf.residual_fraction(self.step_s, accounted)

    def pooled(self, more: StepTimes) -> StepTimes:
        """These steps and ``more`` together: more samples of the same loop."""
        return StepTimes(
            self.unprofiled_s + more.unprofiled_s,
            self.profiled + more.profiled,
            self.wall_s + more.wall_s,
            self.clock,
            self.attempts + more.attempts,
        )


CLOCKS = ("wall", "thread")


def time_and_profile(
    step,
    steps: int,
    profiled_steps: int,
    device: str = "cpu",
    warmup: int = 1,
    clock: str = "wall",
) -> StepTimes:
    """``warmup`` untimed calls of ``step()``, then unprofiled and profiled
    steps alternating (one of each while both last, then the rest of the
    unprofiled ones). A profiled step is accounted for at once, outside the
    timed region.

    ``clock="thread"`` times each step by its thread's CPU time (right for a
    CPU step on one thread: the time another process held the core is not
    the step's), and scales each profiled step's buckets by its CPU over wall
    time, less the system time it spent beyond the median unprofiled step's:
    the profiler's event buffers fault in fresh memory pages on every
    profiled step (thousands of minor faults, tens of ms on a 2-core machine,
    while an unprofiled step faults in next to none), which is the
    profiler's cost, not the step's. ``"wall"`` times by the wall clock
    (GPUs, several threads)."""
    validate.positive_int("steps", steps)
    validate.positive_int("profiled_steps", profiled_steps)
    validate.one_of("clock", clock, CLOCKS)
    for _ in range(warmup):
        step()
    sync(device)
    # Kineto prints start/stop notices to stderr, which would land in the page;
    # the level is read when the profiler first starts, and 6 is above all of its
    # levels (as the input-pipeline chapter does).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    unprofiled, walls, accounts, raw, unprofiled_sys = [], [], [], [], []
    on_gpu = device == "cuda"
    # Each cycle: one untimed step that settles the machine after the last profiled
    # step's trace was read (its Python work leaves caches cold and memory freed,
    # which the step after it would pay for), one timed unprofiled step, (on a GPU,
    # where CUPTI wants it, one warm-up step whose trace is dropped,) one profiled step;
    # after the cycles, one more settling step and the remaining unprofiled steps.
    cycle = 4 if on_gpu else 3
    rest = max(0, steps - profiled_steps)
    total = cycle * profiled_steps + (1 + rest if rest else 0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
        plan = schedule(wait=2, warmup=cycle - 3, active=1, repeat=profiled_steps)
        with profile(
            activities=profiler_activities(device),
            schedule=plan,
            record_shapes=False,
            with_stack=False,
            profile_memory=False,
            on_trace_ready=lambda p: accounts.append(
                account_step(trace_events(p), device)
            ),
        ) as prof:
            for i in range(total):
                wall0, cpu0, sys0 = time.perf_counter(), time.thread_time(), _sys_s()
                step()
                wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
                system = _sys_s() - sys0
                on_clock = cpu if clock == "thread" else wall
                in_cycles = i < cycle * profiled_steps
                if (in_cycles and i % cycle == 1) or (
                    not in_cycles and i > cycle * profiled_steps
                ):
                    unprofiled.append(on_clock)
                    unprofiled_sys.append(system)
                    walls.append(wall)
                before = len(accounts)
                prof.step()
                if len(accounts) > before:  # this step was the one recorded
                    raw.append((accounts[-1], cpu, wall, system))
    if clock == "thread":
        base = statistics.median(unprofiled_sys) if unprofiled_sys else 0.0
        scaled = [
            a.scaled(min(1.0, (cpu - max(0.0, system - base)) / wall))
            for a, cpu, wall, system in raw
        ]
    else:
        scaled = [a for a, *_ in raw]
    if len(scaled) != profiled_steps or len(unprofiled) < steps:
        raise RuntimeError(
            f"expected {profiled_steps} profiled and {steps} unprofiled steps, "
            f"got {len(scaled)} and {len(unprofiled)}"
        )
    return StepTimes(
        tuple(unprofiled[:steps]), tuple(scaled), tuple(walls[:steps]), clock
    )


def _sys_s() -> float:
    """This thread's system (kernel) CPU time so far, in seconds."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_stime
