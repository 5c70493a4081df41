"""Finding lost MFU, measured: a deliberately slow training loop, the
profiler's account of its step, and the ladder of fixes.

The loop is the book's small GPT with seven defects that can each be
switched off (``LoopConfig``): raw text tokenised inside the loop, a
``.item()`` and a print on every micro-step, written-out attention, a
vocabulary that is not a multiple of 64, a for-loop AdamW, full activation
recompute, and a micro-batch of one sequence. bf16 autocast and
torch.compile are two more rungs where the device rewards them.

Each step is wrapped in ``record_function`` scopes (``ladder/step``,
``ladder/data``, ``ladder/forward``, ``ladder/backward``, ``ladder/log``,
``ladder/optimizer``, ``ladder/recompute``); ``account_step`` reads one
profiled step back into the buckets of ``formulas.BUCKETS``.

Timing convention: a step's time is the median of several steps, on the
wall clock on a GPU and, for a CPU step on one thread, on that thread's CPU
time, so that the time another process held the core is not counted as the
step's (a profiled step's buckets are scaled by its CPU over wall time alike).
Profiled and unprofiled steps alternate, so a machine that drifts drifts
under both.
"""

from __future__ import annotations

import gc
import io
import json
import os
import resource
import statistics
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.checkpoint import checkpoint

from mlbook.capstone import formulas as cf
from mlbook.common import validate
from mlbook.common.accelerators import NominalPeak, usable_cores
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch import mamf
from mlbook.common_torch.device import device_description, nominal_peak_flops_per_s
from mlbook.common_torch.gpt import GPT, tiny_config
from mlbook.common_torch.timing import cpu_threads, measure_until, sync
from mlbook.mfu import flops

P = cf.SCOPE_PREFIX


# --- the loop and its defects -----------------------------------------------------


@dataclass(frozen=True)
class LoopConfig:
    """Which defects are on. The defaults are the slow loop: every one."""

    tokenise_in_loop: bool = True  # raw text -> BPE ids inside the step
    sync_every_micro_step: bool = True  # loss.item() and a print on every micro-step
    attn_impl: str = "math"  # written-out attention; "sdpa" is the fused kernel
    pad_vocab: bool = False  # vocabulary padded to a multiple of 64
    fused_optimizer: bool = (
        False  # False: AdamW's for-loop over parameters (foreach=False)
    )
    recompute: bool = True  # full activation recompute of every block
    micro_batch: int = 1  # sequences per micro-batch (the step's batch is fixed)
    bf16: bool = False  # bf16 autocast
    compile: bool = False  # torch.compile

    def __post_init__(self):
        for name in (
            "tokenise_in_loop",
            "sync_every_micro_step",
            "pad_vocab",
            "fused_optimizer",
            "recompute",
            "bf16",
            "compile",
        ):
            validate.boolean(name, getattr(self, name))
        validate.one_of("attn_impl", self.attn_impl, ("math", "sdpa"))
        validate.positive_int("micro_batch", self.micro_batch)

    @property
    def dtype(self) -> str:
        return "bf16" if self.bf16 else "fp32"


def slow_loop(sizes: cf.LadderSizes) -> LoopConfig:
    """Every defect on: the ladder's rung 0."""
    return LoopConfig(micro_batch=sizes.small_micro_batch)


def apply_fix(config: LoopConfig, fix: str, sizes: cf.LadderSizes) -> LoopConfig:
    """``config`` with one defect fixed (``fix`` one of formulas.FIX_NAMES)."""
    validate.one_of("fix", fix, cf.FIX_NAMES)
    change = {
        "pretokenise": dict(tokenise_in_loop=False),
        "log_every_n": dict(sync_every_micro_step=False),
        "sdpa": dict(attn_impl="sdpa"),
        "pad_vocab": dict(pad_vocab=True),
        "fused_adamw": dict(fused_optimizer=True),
        "no_recompute": dict(recompute=False),
        "bigger_micro_batch": dict(micro_batch=sizes.batch),
        "bf16": dict(bf16=True),
        "compile": dict(compile=True),
    }[fix]
    return replace(config, **change)


def model_config(sizes: cf.LadderSizes, pad_vocab: bool = False) -> TransformerConfig:
    v = cf.padded_vocab(sizes.vocab_size) if pad_vocab else sizes.vocab_size
    return tiny_config(
        n_layers=sizes.n_layers,
        d_model=sizes.d_model,
        n_heads=sizes.n_heads,
        vocab_size=v,
        name=f"GPT L={sizes.n_layers} h={sizes.d_model}",
    )


# --- text: tokenised once, or inside the loop ---------------------------------------


class TextData:
    """Python sources as training text, with a byte-level BPE trained on them
    at run time (the input-pipeline chapter's tokenizer).

    ``batch(b, in_loop=False)`` cuts b windows of s+1 tokens from the corpus
    tokenised once up front. ``in_loop=True`` is the slow loader: for each
    sequence it reads ``raw_chars`` characters of raw text from a random place
    (about one source file's worth) and tokenises all of them to keep the
    first s+1 tokens, as a loader that tokenises whole documents does. The
    amount read is fixed, so every step pays the same.
    """

    def __init__(self, sizes: cf.LadderSizes, seed: int = 0, raw_chars: int = 16_384):
        from mlbook.input_pipeline.tokenizer import (
            EOS,
            encode_documents,
            python_sources,
            train_bpe,
        )

        corpus = python_sources(sizes.corpus_bytes)
        self.tok = train_bpe(corpus.texts, sizes.tokenizer_vocab)
        self.eos = self.tok.token_to_id(EOS)
        self.texts = corpus.texts
        self.n_bytes = corpus.n_bytes
        self.raw = EOS.join(corpus.texts)
        self.raw_chars = validate.positive_int("raw_chars", raw_chars)
        ids = []
        for doc in encode_documents(self.tok, corpus.texts):
            ids.extend(doc)
            ids.append(self.eos)
        self.stream = torch.tensor(ids, dtype=torch.long)  # (n_tokens,)
        self.seq_len = sizes.seq_len
        self.gen = torch.Generator().manual_seed(seed)
        if len(self.stream) <= self.seq_len + 1 or len(self.raw) <= raw_chars:
            raise ValueError(
                f"corpus_bytes={sizes.corpus_bytes} gives {len(self.stream)} tokens "
                f"and {len(self.raw)} characters: too few for seq_len={self.seq_len} "
                f"and raw_chars={raw_chars}"
            )

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def batch(self, b: int, in_loop: bool = False):
        s = self.seq_len
        if in_loop:
            rows = []
            for _ in range(b):
                start = int(
                    torch.randint(
                        len(self.raw) - self.raw_chars, (1,), generator=self.gen
                    )
                )
                ids = self.tok.encode(self.raw[start : start + self.raw_chars]).ids
                if len(ids) < s + 1:
                    raise ValueError(
                        f"raw_chars={self.raw_chars} gave {len(ids)} tokens, "
                        f"fewer than s+1 = {s + 1}"
                    )
                rows.append(ids[: s + 1])
            rows = torch.tensor(rows, dtype=torch.long)  # (b, s+1)
        else:
            starts = torch.randint(len(self.stream) - s - 1, (b,), generator=self.gen)
            rows = torch.stack(
                [self.stream[j : j + s + 1] for j in starts.tolist()]
            )  # (b, s+1)
        return rows[:, :-1], rows[:, 1:]


class Loop:
    """One model, optimizer and data source set up as ``config`` says; ``step()``
    runs one optimizer step over ``sizes.batch`` sequences."""

    def __init__(
        self,
        config: LoopConfig,
        sizes: cf.LadderSizes,
        data: TextData,
        device: str = "cpu",
        seed: int = 0,
        lr: float = 3e-4,
    ):
        validate.divides("micro_batch", config.micro_batch, "batch", sizes.batch)
        self.config, self.sizes, self.data, self.device = config, sizes, data, device
        torch.manual_seed(seed)
        self.cfg = model_config(sizes, config.pad_vocab)
        self.model = GPT(
            self.cfg, max_seq_len=sizes.seq_len, attn_impl=config.attn_impl
        ).to(device)
        if config.recompute:
            self.model.block_fn = self._checkpointed
        if config.fused_optimizer:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, fused=True)
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, foreach=False)
        self.forward = torch.compile(self.model) if config.compile else self.model
        self.sink = io.StringIO()  # the log: the point is the sync, not the text
        self.phase = "forward"
        self.steps_done = 0
        self.running_loss = torch.zeros((), device=device)

    def _block(self, block, x):
        if self.phase == "backward":  # the recomputed forward, inside backward
            with record_function(P + "recompute"):
                return block(x)
        return block(x)

    def _checkpointed(self, block, x):
        return checkpoint(self._block, block, x, use_reentrant=False)

    def step(self) -> None:
        c, k = self.config, self.sizes.batch // self.config.micro_batch
        with record_function(P + "step"):
            for _ in range(k):
                with record_function(P + "data"):
                    idx, tgt = self.data.batch(
                        c.micro_batch, in_loop=c.tokenise_in_loop
                    )
                    idx, tgt = idx.to(self.device), tgt.to(self.device)  # (b, s)
                self.phase = "forward"
                with (
                    record_function(P + "forward"),
                    torch.autocast(self.device, torch.bfloat16, enabled=c.bf16),
                ):
                    _, loss = self.forward(idx, tgt)
                self.phase = "backward"
                with record_function(P + "backward"):
                    (loss / k).backward()
                self.phase = "forward"
                with record_function(P + "log"):
                    if c.sync_every_micro_step:
                        print(
                            f"step {self.steps_done} loss {loss.item():.4f}",
                            file=self.sink,
                        )
                    else:
                        self.running_loss += loss.detach()
            with record_function(P + "optimizer"):
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
            self.steps_done += 1
            if (
                not c.sync_every_micro_step
                and self.steps_done % self.sizes.log_every == 0
            ):
                with record_function(P + "log"):
                    mean = self.running_loss.item() / (k * self.sizes.log_every)
                    print(f"step {self.steps_done} loss {mean:.4f}", file=self.sink)
                    self.running_loss.zero_()
            sync(self.device)


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


def step_clock(device: str, threads: int | None) -> str:
    """ "thread" (CPU time) for a CPU step on one thread, else "wall"."""
    return "thread" if device == "cpu" and threads == 1 else "wall"


# --- the ceiling ---------------------------------------------------------------------


def probe_ceilings(
    sizes: cf.LadderSizes,
    device: str,
    budget_s: float | None = None,
    min_run_time_s: float = 0.02,
) -> dict:
    """The MAMF ceiling for fp32 and bf16 on ``device``, each swept for
    ``budget_s`` (default sizes.probe_budget_s) with the model's own GEMM
    shapes first.

    On a CPU bf16 may be emulated (fifty times slower): a 256^3 bf16 matmul
    is timed first, and where it is slower than fp32 the sweep stays at
    small shapes (up to 512) rather than spend minutes proving it. Every
    timing is on the clock the ladder times its steps by (step_clock: the
    thread's CPU time on one CPU thread), so a busy machine lowers neither
    alone."""
    budget_s = sizes.probe_budget_s if budget_s is None else budget_s
    shapes = cf.gemm_shapes(
        model_config(sizes, pad_vocab=True), sizes.batch * sizes.seq_len
    )
    out = {}
    clock = step_clock(device, sizes.cpu_threads)
    with torch.inference_mode(), cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        for dtype in ("fp32", "bf16"):
            max_dim = None
            include = shapes
            if device == "cpu" and dtype == "bf16":
                quick = {
                    d: mamf.time_matmul(256, 256, 256, d, device, 0.01)
                    for d in ("fp32", "bf16")
                }
                if quick["bf16"] < quick["fp32"]:
                    max_dim, include = 512, ()
            out[dtype] = mamf.find_ceiling(
                dtype,
                device,
                budget_s,
                include=include,
                max_dim=max_dim,
                min_run_time_s=min_run_time_s,
                clock=clock,
            )
    return out


def widen_ceiling(
    ceiling: mamf.MatmulCeiling, budget_s: float, min_run_time_s: float = 0.05
) -> mamf.MatmulCeiling:
    """A second, longer sweep (the shapes timed so far again, then more of
    the grid) merged with the first: for a ceiling that a step beat."""
    more = mamf.find_ceiling(
        ceiling.dtype,
        ceiling.device,
        budget_s,
        include=tuple((t.m, t.n, t.k) for t in ceiling.timings[:8]),
        min_run_time_s=min_run_time_s,
        clock=ceiling.clock,
    )
    return mamf.merge(ceiling, more)


def nominal_peak(
    device: str, dtype: str, cpu_threads_used: int | None = None
) -> NominalPeak:
    """The nominal peak of what the ladder runs on, where it came from and its
    basis: a GPU's table row, or on a CPU the cores x clock x vector width of
    mlbook.common.accelerators, scaled to the cores the ladder's threads
    occupy (one thread keeps one core busy, not two). Unknown (None) where
    the device's is."""
    peak = nominal_peak_flops_per_s(device, dtype)
    cores = usable_cores()
    used = cpu_threads_used
    if device == "cpu" and peak.known and used is not None and used < cores:
        return NominalPeak(
            peak.flops_per_s * used / cores,
            f"{peak.how}, x {used}/{cores} cores used",
            peak.basis,
        )
    return peak


# --- the ladder ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    fix: str  # the fix this rung applied ("slow loop" for rung 0)
    label: str
    config: LoopConfig
    dtype: str
    times: StepTimes
    # measurements pooled (more were taken while the residual was above tolerance)
    attempts: int
    tokens_per_step: int
    flops_per_token: float  # the model's 6N + 12Lhs, the unpadded vocabulary
    rates: (
        cf.RungRates
    )  # against the datasheet peak and the final ceiling of the rung's dtype

    @property
    def step_s(self) -> float:
        return self.times.step_s

    @property
    def residual(self) -> float:
        return self.times.residual

    @property
    def buckets(self) -> dict:
        return self.times.account.buckets


@dataclass(frozen=True)
class Ladder:
    rungs: tuple
    ceilings: (
        dict  # dtype -> MatmulCeiling, refined between rungs (and widened if beaten)
    )
    peaks: dict  # dtype -> NominalPeak (FLOP/s or None, how, basis)
    mfu_dtype: str  # every rung's MFU divides by this dtype's peak (the final rung's)
    device: str  # who measured
    widened: tuple = field(
        default=()
    )  # dtypes whose ceiling a rung beat, so they were swept again
    widenings: int = 0  # how many sweeps that took, all dtypes together
    again_s: float = 0.0  # seconds spent measuring rungs again, all rungs together


# A rung whose residual is above the bar is measured again, this many times in all
# at most; a ceiling that a rung beats is swept again, each time twice as long, this
# many times at most (the page glues how many it took of each).
LADDER_MAX_ATTEMPTS = 4
LADDER_MAX_WIDENINGS = 3
LADDER_RESIDUAL_GOAL = 0.05  # a rung whose residual is above it is measured again


def run_ladder(
    sizes: cf.LadderSizes,
    device: str,
    data: TextData,
    ceilings: dict,
    fixes: tuple,
    seed: int = 0,
    log=None,
    min_run_time_s: float = 0.05,
    residual_tol: float = LADDER_RESIDUAL_GOAL,
    max_attempts: int = LADDER_MAX_ATTEMPTS,
) -> Ladder:
    """Measure the slow loop, then each fix in ``fixes`` (formulas.Fix) applied on
    top of the ones before. Between rungs the ceiling of the next rung's dtype is
    re-timed (mamf.refine), so the ceiling is probed while the machine runs as it runs
    for the step. A rung whose residual is above ``residual_tol`` is measured again, up
    to ``max_attempts`` times in all, and the samples pooled (the median of more steps
    is a better estimate; a residual the profiler itself causes does not go away, and
    stays), while ``sizes.again_budget_s`` seconds, for all rungs together, still
    cover one more measurement as long as the rung's last: after that a rung keeps
    what it has, and its residual is what the page shows. A ceiling that a rung
    still beats is swept again, twice as long each time (widen_ceiling), up to
    LADDER_MAX_WIDENINGS sweeps: a short sweep on a busy machine can miss the best
    shape, while the step's own clock skips the time other processes held the
    core.

    Every rung's MFU divides by the nominal peak of the final rung's dtype (the
    fastest the device trains in), so that MFU moves with tokens/s along the
    ladder; each rung's share of the ceiling is against its own dtype's."""
    validate.positive("residual_tol", residual_tol)
    validate.positive_int("max_attempts", max_attempts)
    validate.non_negative("sizes.again_budget_s", sizes.again_budget_s)
    with cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        return _run_ladder(
            sizes,
            device,
            data,
            dict(ceilings),
            fixes,
            seed,
            log or (lambda *_: None),
            min_run_time_s,
            residual_tol,
            max_attempts,
        )


def _run_ladder(
    sizes,
    device,
    data,
    ceilings,
    fixes,
    seed,
    log,
    min_run_time_s,
    residual_tol,
    max_attempts,
) -> Ladder:
    config = slow_loop(sizes)
    plan = [("slow loop", "slow loop (all defects)", config)]
    for fix in fixes:
        config = apply_fix(config, fix.name, sizes)
        plan.append((fix.name, fix.label, config))
    measured, again_s = [], 0.0
    tokens = sizes.batch * sizes.seq_len
    per_token = flops.flops_per_token(model_config(sizes), sizes.seq_len)
    for i, (name, label, config) in enumerate(plan):
        ceilings[config.dtype] = mamf.refine(
            ceilings[config.dtype], top=2, min_run_time_s=min_run_time_s
        )
        log(f"rung {i}: {label} ...")
        loop = Loop(config, sizes, data, device, seed)
        warmup = 2 if config.compile else 1
        start = time.perf_counter()
        clock = step_clock(device, sizes.cpu_threads)
        warm = [warmup]  # the first measurement warms the loop up, the rest not

        def measure(loop=loop, clock=clock, warm=warm):
            w, warm[0] = warm[0], 0
            return time_and_profile(
                loop.step, sizes.steps, sizes.profiled_steps, device, w, clock
            )

        got = measure_until(
            measure,
            lambda t: abs(t.residual) <= residual_tol,
            lambda t, more: t.pooled(more),
            max_attempts,
            max(0.0, sizes.again_budget_s - again_s),
            lambda line, i=i: log(f"rung {i}: {line}"),
        )
        times, attempts, again_s = got.value, got.attempts, again_s + got.again_s
        log(
            f"rung {i}: {label}: {times.step_s * 1e3:,.0f} ms a step, residual "
            f"{times.residual:+.1%} ({time.perf_counter() - start:.1f} s)"
        )
        measured.append((name, label, config, times, attempts))
        del loop
    widened, widenings = [], 0
    for dtype in sorted({c.dtype for _, _, c, _, _ in measured}):
        best = max(
            tokens / t.step_s * per_token
            for _, _, c, t, _ in measured
            if c.dtype == dtype
        )
        budget_s = 2 * sizes.probe_budget_s
        while best > ceilings[dtype].flops_per_s and widenings < LADDER_MAX_WIDENINGS:
            log(f"a rung beat the {dtype} ceiling: sweeping again, {budget_s:g} s ...")
            ceilings[dtype] = widen_ceiling(ceilings[dtype], budget_s)
            budget_s *= 2
            widenings += 1
            if dtype not in widened:
                widened.append(dtype)
    peaks = {d: nominal_peak(device, d, sizes.cpu_threads) for d in ceilings}
    mfu_dtype = measured[-1][2].dtype
    rungs = tuple(
        Rung(
            name,
            label,
            config,
            config.dtype,
            times,
            attempts,
            tokens,
            per_token,
            cf.rung_rates(
                tokens,
                times.step_s,
                per_token,
                peaks[mfu_dtype].flops_per_s,
                ceilings[config.dtype].flops_per_s,
            ),
        )
        for name, label, config, times, attempts in measured
    )
    return Ladder(
        rungs,
        ceilings,
        peaks,
        mfu_dtype,
        device_description(device),
        tuple(sorted(widened)),
        widenings,
        again_s,
    )


def measure_config(
    config: LoopConfig,
    sizes: cf.LadderSizes,
    data: TextData,
    device: str,
    seed: int = 0,
) -> StepTimes:
    """Time and profile one loop set up as ``config`` says (the exercise's
    mystery step)."""
    with cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        loop = Loop(config, sizes, data, device, seed)
        return time_and_profile(
            loop.step,
            sizes.steps,
            sizes.profiled_steps,
            device,
            2 if config.compile else 1,
            step_clock(device, sizes.cpu_threads),
        )


def mystery_config(sizes: cf.LadderSizes, device: str) -> LoopConfig:
    """A step with two defects back in (which two is the exercise's question:
    formulas.MYSTERY_DEFECTS): every fix of the fp32 ladder but those two."""
    config = slow_loop(sizes)
    for fix in cf.ladder_fixes(bf16_fast=False, compile_on=False):
        if fix.name not in cf.MYSTERY_DEFECTS:
            config = apply_fix(config, fix.name, sizes)
    return config


# --- two processes: exposed communication and a straggler -----------------------------


@dataclass(frozen=True)
class CommRun:
    """Per-mode, per-rank step times (seconds) of a two-process gloo DDP run."""

    ranks: int
    steps: int
    delay_s: float  # the extra time the slow rank spent each straggler step
    slow_rank: int
    step_s: dict  # mode -> (steps, ranks) nested tuples: wall time of the whole step
    compute_s: (
        dict  # mode -> (steps, ranks): time before the rank waited on the collective
    )
    grad_bytes: int
    device: str

    def median(self, mode: str, what: str = "step_s") -> float:
        """The median over steps of the slowest rank's time: a step ends when
        the last rank ends."""
        rows = getattr(self, what)[mode]
        return statistics.median(max(r) for r in rows)

    def waits_s(self, mode: str) -> tuple:
        """Per rank, the median over steps of the time it waited at the
        collective (its step minus its own work; of an even count, the upper
        of the two middle values)."""
        out = []
        for r in range(self.ranks):
            waits = sorted(
                s[r] - c[r]
                for s, c in zip(self.step_s[mode], self.compute_s[mode], strict=True)
            )
            out.append(waits[len(waits) // 2])
        return tuple(out)


COMM_MODES = ("local", "overlap", "no_overlap", "straggler")


def _ddp_worker(argv):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    opts = json.loads(argv[0])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    cfg = tiny_config(**opts["model"])
    model = GPT(cfg, max_seq_len=opts["seq_len"], attn_impl="sdpa")
    ddp = DDP(model, bucket_cap_mb=opts["bucket_cap_mb"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(rank)
    ids = torch.randint(
        cfg.vocab_size, (opts["batch"], opts["seq_len"] + 1), generator=g
    )
    idx, tgt = ids[:, :-1], ids[:, 1:]
    params = [p for p in model.parameters() if p.requires_grad]
    out = {
        "step_s": {},
        "compute_s": {},
        "delay_s": 0.0,
        "grad_bytes": sum(p.numel() * p.element_size() for p in params),
    }

    def run(mode, delay):
        dist.barrier()
        start = time.perf_counter()
        if mode == "overlap":  # DDP: buckets all-reduced while backward runs
            _, loss = ddp(idx, tgt)
            loss.backward()
            computed = time.perf_counter()  # the last bucket's wait is inside backward
        else:
            with ddp.no_sync():
                _, loss = ddp(idx, tgt)
                loss.backward()
            if mode == "straggler" and rank == opts["slow_rank"]:
                time.sleep(delay)
            computed = time.perf_counter()
            if mode != "local":  # one all-reduce after backward: nothing overlaps it
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                dist.all_reduce(flat)
                flat /= dist.get_world_size()
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = time.perf_counter()
        return end - start, computed - start

    # The local step first (it sets the straggler's delay), then every
    # mode in turn, round after round, so that a machine whose speed drifts
    # drifts under all four alike.
    local = [run("local", 0.0)[0] for _ in range(opts["warmup"] + 2)][opts["warmup"] :]
    t = torch.tensor([min(local)])
    dist.broadcast(t, 0)
    delay = opts["delay_fraction"] * float(t)
    out["delay_s"] = delay
    for mode in COMM_MODES:
        out["step_s"][mode], out["compute_s"][mode] = [], []
        for _ in range(opts["warmup"]):
            run(mode, delay)
    for _ in range(opts["steps"]):
        for mode in COMM_MODES:
            total, computed = run(mode, delay)
            out["step_s"][mode].append(total)
            out["compute_s"][mode].append(computed)
    Path(opts["out"], f"rank{rank}.json").write_text(json.dumps(out))
    # DDP's reducer holds work of the process group: it goes first. Left to
    # the return, after the group was destroyed, a rank once sat in that
    # teardown (its stacks: at the worker's call of this function, no frame
    # below) past fork_group's 120 s limit, at reader sizes here.
    ddp = opt = None  # (run() holds them too: its cells are cleared with these)
    gc.collect()
    dist.destroy_process_group()


def comm_run(
    steps: int = 9,
    warmup: int = 1,
    slow_rank: int = 1,
    delay_fraction: float = 1.0,
    model: dict | None = None,
    seq_len: int = 64,
    batch: int = 4,
    bucket_cap_mb: float = 0.25,
    timeout_s: float = 120.0,
) -> CommRun:
    """Two forked processes train the small GPT with DDP over gloo (one
    thread each) in four modes: ``local`` (no all-reduce: compute alone),
    ``overlap`` (DDP's buckets all-reduced during backward), ``no_overlap``
    (one all-reduce after backward), ``straggler`` (as no_overlap, with
    ``slow_rank`` sleeping ``delay_fraction`` of the fastest local step
    before it). The modes take turns, one step each, ``steps`` rounds."""
    from mlbook.common_torch.launch import fork_group

    validate.positive_int("steps", steps)
    validate.fraction("delay_fraction", delay_fraction)
    model = model or dict(n_layers=2, d_model=128, n_heads=2, vocab_size=512)
    with tempfile.TemporaryDirectory(prefix="mlbook-comm-") as tmp:
        opts = dict(
            steps=steps,
            warmup=warmup,
            slow_rank=slow_rank,
            delay_fraction=delay_fraction,
            model=model,
            seq_len=seq_len,
            batch=batch,
            bucket_cap_mb=bucket_cap_mb,
            out=tmp,
        )
        launch = fork_group(
            _ddp_worker, [json.dumps(opts)], nproc=2, timeout_s=timeout_s
        )
        if launch.returncode != 0:
            raise RuntimeError(
                f"the gloo run failed (exit {launch.returncode}):\n"
                f"{launch.output[-3000:]}"
            )
        per_rank = [
            json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)
        ]
    step_s = {
        m: tuple(zip(*(r["step_s"][m] for r in per_rank), strict=True))
        for m in COMM_MODES
    }
    compute_s = {
        m: tuple(zip(*(r["compute_s"][m] for r in per_rank), strict=True))
        for m in COMM_MODES
    }
    with cpu_threads(1):
        who = device_description("cpu") + " per process"
    return CommRun(
        2,
        steps,
        per_rank[0]["delay_s"],
        slow_rank,
        step_s,
        compute_s,
        per_rank[0]["grad_bytes"],
        who,
    )
