"""The checkpoint chapter's experiments: a small GPT trained, saved, killed and resumed.

``compare_save_modes`` times the same run without saves, with synchronous
saves and with ``async_save``; ``resume_experiment`` crashes a run and resumes
it exactly (full training state) and naively (weights only). Both return
frozen dataclasses of numbers; the page words them. The checkpointer and the
sampler they use live in mlbook.common_torch.checkpoint.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlbook.common import validate
from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler, directory_bytes
from mlbook.common_torch.timing import cpu_threads

# --- the chapter's experiments: a small GPT trained with checkpoints -----------------


@dataclass(frozen=True)
class RunSpec:
    """A small training run: the book's GPT on a synthetic token stream.

    ``dropout`` is on, so a resume is exact only if the torch RNG is restored
    too; the LR schedule (linear warm-up, then cosine) makes the scheduler
    state matter as well.
    """

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 2
    vocab_size: int = 256
    seq_len: int = 32
    batch_size: int = 8
    n_samples: int = 512
    steps: int = 40
    lr: float = 3e-3
    warmup: int = 5
    dropout: float = 0.1
    seed: int = 0

    def __post_init__(self):
        for name in (
            "n_layers",
            "d_model",
            "n_heads",
            "vocab_size",
            "seq_len",
            "batch_size",
            "n_samples",
            "steps",
            "warmup",
        ):
            validate.positive_int(name, getattr(self, name))
        validate.positive("lr", self.lr)
        validate.fraction("dropout", self.dropout, allow_zero=True, allow_one=False)
        if self.batch_size > self.n_samples:
            raise ValueError(
                f"batch_size={self.batch_size} must not exceed "
                f"n_samples={self.n_samples}"
            )

    @property
    def config(self):
        from mlbook.common_torch.gpt import tiny_config

        return tiny_config(
            n_layers=self.n_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            vocab_size=self.vocab_size,
        )


def token_dataset(spec: RunSpec) -> torch.utils.data.TensorDataset:
    """(sample id, inputs, targets): arithmetic sequences mod V with a random
    start and stride per sample, so the loss has something to learn."""
    g = torch.Generator().manual_seed(10_000 + spec.seed)
    start = torch.randint(0, spec.vocab_size, (spec.n_samples, 1), generator=g)
    stride = torch.randint(1, 8, (spec.n_samples, 1), generator=g)
    t = torch.arange(spec.seq_len + 1)
    ids = (start + stride * t) % spec.vocab_size  # (n, s + 1)
    return torch.utils.data.TensorDataset(
        torch.arange(spec.n_samples), ids[:, :-1], ids[:, 1:]
    )


@dataclass
class Run:
    """Everything a training run owns; ``done`` counts completed steps."""

    spec: RunSpec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    sampler: ShardedSampler
    dataset: torch.utils.data.TensorDataset
    device: str = "cpu"
    done: int = 0
    _it: object = None

    def next_batch(self):
        """The next batch of the sampler's stream, moving to the next
        epoch when one ends."""
        for _ in range(2):
            if self._it is None:
                # A DataLoader draws a base seed from the global torch RNG each
                # time an iterator starts, which a resume would make one extra
                # draw; its own generator keeps the global stream untouched.
                loader = torch.utils.data.DataLoader(
                    self.dataset,
                    batch_size=self.spec.batch_size,
                    sampler=self.sampler,
                    drop_last=True,
                    generator=torch.Generator().manual_seed(self.spec.seed),
                )
                self._it = iter(loader)
            try:
                return next(self._it)
            except StopIteration:
                self._it = None
        raise RuntimeError("the sampler produced no batch in two epochs")


def build_run(spec: RunSpec, device: str = "cpu") -> Run:
    """A fresh run: every RNG seeded from ``spec.seed``, model, AdamW,
    schedule, sampler."""
    from mlbook.common_torch.gpt import GPT

    random.seed(spec.seed)
    np.random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    model = GPT(spec.config, max_seq_len=spec.seq_len, dropout=spec.dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr)

    def lr_factor(step: int) -> float:
        if step < spec.warmup:
            return (step + 1) / spec.warmup
        frac = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    sampler = ShardedSampler(spec.n_samples, seed=spec.seed)
    return Run(spec, model, opt, sched, sampler, token_dataset(spec), device)


@dataclass(frozen=True)
class TrainLog:
    """What ``train`` did: the step numbers it completed, each step's loss,
    the sample ids of each step's batch, each step's compute time (saves
    excluded) and each save's SaveStats."""

    steps: tuple
    losses: tuple
    seen: tuple
    step_s: tuple
    saves: tuple


def train(
    run: Run,
    until: int,
    ckpt: Checkpointer | None = None,
    save_every: int = 0,
    async_: bool = False,
    log=None,
) -> TrainLog:
    """Train ``run`` until ``until`` steps are done, saving every ``save_every`` steps.

    A step's time excludes its save, whose stall is ``SaveStats.blocking_s``.
    ``log``, if given, receives a progress line every 10 steps.
    """
    until = validate.positive_int("until", until)
    if until < run.done:
        raise ValueError(f"until={until} is before the run's current step {run.done}")
    if (
        not isinstance(save_every, int)
        or isinstance(save_every, bool)
        or save_every < 0
    ):
        raise ValueError(
            f"save_every must be an integer at or above 0, got {save_every!r}"
        )
    if save_every and ckpt is None:
        raise ValueError("save_every > 0 needs a Checkpointer")
    steps, losses, seen, step_s, saves = [], [], [], [], []
    sync = torch.cuda.synchronize if run.device == "cuda" else (lambda: None)
    run.model.train()
    while run.done < until:
        ids, x, y = run.next_batch()
        start = time.perf_counter()
        x, y = x.to(run.device), y.to(run.device)
        run.optimizer.zero_grad(set_to_none=True)
        _, loss = run.model(x, y)
        loss.backward()
        run.optimizer.step()
        run.scheduler.step()
        loss_value = loss.item()
        sync()
        step_s.append(time.perf_counter() - start)
        run.done += 1
        steps.append(run.done)
        losses.append(loss_value)
        seen.append(tuple(ids.tolist()))
        if save_every and run.done % save_every == 0:
            saves.append(
                ckpt.save(
                    run.done,
                    run.model,
                    run.optimizer,
                    run.scheduler,
                    run.sampler,
                    async_=async_,
                )
            )
        if log is not None and (run.done % 10 == 0 or run.done == until):
            log(f"  step {run.done}/{until}: loss {loss_value:.3f}", flush=True)
    if ckpt is not None:
        ckpt.wait()
    return TrainLog(
        tuple(steps), tuple(losses), tuple(seen), tuple(step_s), tuple(saves)
    )


def weights(run: Run) -> dict:
    """A CPU copy of the model's weights."""
    return {k: v.detach().to("cpu").clone() for k, v in run.model.state_dict().items()}


# --- synchronous against asynchronous saves ------------------------------------------


@dataclass(frozen=True)
class ModeTiming:
    """One run of compare_save_modes: ``wall_s`` the whole loop, ``step_s``
    each step's compute, ``blocking_s`` each save's training stall,
    ``total_s`` each save from its start to its publication, and the bytes of
    the last checkpoint on disk (0 without saves)."""

    wall_s: float
    step_s: tuple
    blocking_s: tuple
    total_s: tuple
    checkpoint_bytes: int

    @property
    def median_step_s(self) -> float:
        return statistics.median(self.step_s)

    @property
    def median_stall_s(self) -> float:
        """Median training stall per save, in seconds."""
        return statistics.median(self.blocking_s)


@dataclass(frozen=True)
class SaveModes:
    """compare_save_modes' three runs, by mode: "none", "sync" and "async"."""

    device: str
    modes: dict

    def __getitem__(self, mode: str) -> ModeTiming:
        return self.modes[mode]


SAVE_MODES = ("none", "sync", "async")


def compare_save_modes(
    spec: RunSpec,
    root,
    save_every: int,
    device: str = "cpu",
    log=None,
    threads: int | None = 1,
) -> SaveModes:
    """Train the same run without saves, with synchronous saves and with
    async_save, every ``save_every`` steps, and time each. On a CPU the runs
    use ``threads`` threads (None: torch's setting). ``log``, if given,
    receives progress lines."""
    save_every = validate.positive_int("save_every", save_every)
    with cpu_threads(threads if device == "cpu" else None, name="threads"):
        return _compare_save_modes(spec, root, save_every, device, log)


def _compare_save_modes(spec, root, save_every, device, log) -> SaveModes:
    from mlbook.common_torch.device import device_description

    # One untimed step and save first: the first step and the first save of a
    # process pay one-off costs (allocator, lazy imports) no mode should carry.
    warm = build_run(spec, device)
    train(warm, 1, Checkpointer(Path(root) / "warmup", keep_last=1), save_every=1)
    del warm
    modes = {}
    for mode in SAVE_MODES:
        if log is not None:
            log(
                f"{mode}: {spec.steps} steps, saving every "
                f"{save_every if mode != 'none' else '-'}",
                flush=True,
            )
        run = build_run(spec, device)
        ckpt = None if mode == "none" else Checkpointer(Path(root) / mode, keep_last=2)
        start = time.perf_counter()
        out = train(
            run, spec.steps, ckpt, save_every if ckpt else 0, async_=(mode == "async")
        )
        wall = time.perf_counter() - start
        modes[mode] = ModeTiming(
            wall,
            out.step_s,
            tuple(s.blocking_s for s in out.saves),
            tuple(s.total_s for s in out.saves),
            directory_bytes(ckpt.latest()) if ckpt else 0,
        )
    return SaveModes(device_description(device), modes)


# --- one writer's streaming rate ------------------------------------------------------


@dataclass(frozen=True)
class SequentialWrite:
    """One writer streaming a large file: ``nbytes`` written once per entry of
    ``seconds``, each time into a new file and ending with fsync."""

    nbytes: int
    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def bytes_per_s(self) -> float:
        return self.nbytes / self.median_s


def _write_sizes(nbytes, repeats, chunk_bytes) -> tuple[int, int, int]:
    """Each a whole number above 0, or a ValueError naming it."""
    return (
        validate.positive_int("nbytes", nbytes),
        validate.positive_int("repeats", repeats),
        validate.positive_int("chunk_bytes", chunk_bytes),
    )


def sequential_write(
    path, nbytes: int, repeats: int = 3, chunk_bytes: int = 16 * 2**20, seed: int = 0
) -> SequentialWrite:
    """Time writing ``nbytes`` random bytes into a new file at ``path``,
    ``chunk_bytes`` a call, flushed and fsynced, ``repeats`` times (the file is
    removed after each).

    A write of a few megabytes mostly times creating the file; one of hundreds
    of megabytes is mostly bytes, so its rate is the one a writer streams a big
    checkpoint shard at. The bytes are random, made before the clock starts, so
    a file system that compresses or deduplicates cannot shorten the write.
    """
    nbytes, repeats, chunk_bytes = _write_sizes(nbytes, repeats, chunk_bytes)
    path = Path(path)
    data = memoryview(np.random.default_rng(seed).bytes(nbytes))
    seconds = []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            with open(path, "wb") as f:
                for at in range(0, nbytes, chunk_bytes):
                    f.write(data[at : at + chunk_bytes])
                f.flush()
                os.fsync(f.fileno())
            seconds.append(time.perf_counter() - start)
            path.unlink()
    finally:
        path.unlink(missing_ok=True)
    return SequentialWrite(nbytes, tuple(seconds))


# --- exact against naive resume -------------------------------------------------------


def _multiset_gap(history: list[int], reference: list[int]) -> tuple[int, int]:
    """(extra, missing): sample visits beyond the reference's, and visits it lacks."""
    h, r = Counter(history), Counter(reference)
    return sum((h - r).values()), sum((r - h).values())


@dataclass(frozen=True)
class ResumeResult:
    """An uninterrupted run against a crashed one resumed exactly and naively.

    The losses are per step: ``ref_losses`` for all steps, ``crashed_losses``
    up to the crash, ``exact_losses`` and ``naive_losses`` from the resume
    point on. Weight differences are the largest absolute difference from the
    uninterrupted run's final weights. ``*_extra`` counts sample visits beyond
    the uninterrupted run's, ``*_missing`` visits it made that the resumed
    run did not.
    """

    resumed_from: int
    crash_at: int
    ref_losses: tuple
    crashed_losses: tuple
    exact_losses: tuple
    naive_losses: tuple
    exact_weights_equal: bool
    exact_max_weight_diff: float
    naive_max_weight_diff: float
    exact_extra: int
    exact_missing: int
    naive_extra: int
    naive_missing: int
    samples_per_step: int

    @property
    def lost_steps(self) -> int:
        """Steps done after the last checkpoint and lost to the crash."""
        return self.crash_at - self.resumed_from

    @property
    def exact_losses_equal(self) -> bool:
        """The exact resume's losses equal the uninterrupted run's, bit for bit."""
        return self.exact_losses == self.ref_losses[self.resumed_from :]

    @property
    def naive_max_loss_diff(self) -> float:
        return max(
            abs(a - b)
            for a, b in zip(
                self.naive_losses, self.ref_losses[self.resumed_from :], strict=True
            )
        )


def resume_experiment(
    spec: RunSpec,
    root,
    save_every: int,
    crash_at: int,
    log=None,
    threads: int | None = 1,
) -> ResumeResult:
    """An uninterrupted run against one that crashes and resumes, exactly or naively.

    The interrupted run saves every ``save_every`` steps and dies after
    ``crash_at`` steps (its unsaved steps are lost). The exact resume builds a
    fresh run, scrambles every RNG (a new process would not share the old
    one's state) and loads the full training state; the naive resume loads
    the weights only and restarts the data stream, the optimizer and the
    schedule. Both then train to ``spec.steps``. Runs on the CPU, where every
    kernel is deterministic, so equality can be bitwise.
    """
    for name, value in (("save_every", save_every), ("crash_at", crash_at)):
        validate.positive_int(name, value)
    if not save_every <= crash_at < spec.steps:
        raise ValueError(
            f"need 0 < save_every={save_every} <= crash_at={crash_at} "
            f"< steps={spec.steps}"
        )
    with cpu_threads(threads, name="threads"):
        return _resume_experiment(
            spec, root, save_every, crash_at, log or (lambda *a, **k: None)
        )


def _resume_experiment(spec, root, save_every, crash_at, say) -> ResumeResult:
    say(f"uninterrupted: {spec.steps} steps", flush=True)
    ref_run = build_run(spec)
    ref = train(ref_run, spec.steps)
    ref_weights = weights(ref_run)

    say(
        f"interrupted: saves every {save_every}, crashes after step {crash_at}",
        flush=True,
    )
    ckpt = Checkpointer(Path(root), keep_last=2)
    crashed = build_run(spec)
    before = train(crashed, crash_at, ckpt, save_every)
    del crashed  # the process died here

    def scramble():
        random.seed(12345)
        np.random.seed(12345)
        torch.manual_seed(12345)

    say("exact resume: full training state", flush=True)
    exact_run = build_run(spec)
    scramble()
    loaded = ckpt.load(
        exact_run.model, exact_run.optimizer, exact_run.scheduler, exact_run.sampler
    )
    exact_run.done = loaded.step
    exact = train(exact_run, spec.steps)
    exact_weights = weights(exact_run)

    say("naive resume: weights only", flush=True)
    naive_run = build_run(spec)
    scramble()
    ckpt.load_model(naive_run.model)
    naive_run.done = loaded.step
    naive = train(naive_run, spec.steps)
    naive_weights = weights(naive_run)

    resumed_from = loaded.step
    committed = [
        ids
        for s, ids in zip(before.steps, before.seen, strict=True)
        if s <= resumed_from
    ]
    flat = lambda batches: [i for b in batches for i in b]  # noqa: E731
    ref_seen = flat(ref.seen)
    naive_extra, naive_missing = _multiset_gap(
        flat(committed + list(naive.seen)), ref_seen
    )
    exact_extra, exact_missing = _multiset_gap(
        flat(committed + list(exact.seen)), ref_seen
    )
    max_diff = lambda w: max((w[k] - ref_weights[k]).abs().max().item() for k in w)  # noqa: E731
    return ResumeResult(
        resumed_from=resumed_from,
        crash_at=crash_at,
        ref_losses=ref.losses,
        crashed_losses=before.losses,
        exact_losses=exact.losses,
        naive_losses=naive.losses,
        exact_weights_equal=all(
            torch.equal(exact_weights[k], ref_weights[k]) for k in ref_weights
        ),
        exact_max_weight_diff=max_diff(exact_weights),
        naive_max_weight_diff=max_diff(naive_weights),
        exact_extra=exact_extra,
        exact_missing=exact_missing,
        naive_extra=naive_extra,
        naive_missing=naive_missing,
        samples_per_step=spec.batch_size,
    )
