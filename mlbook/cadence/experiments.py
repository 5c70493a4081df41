"""The checkpoint chapter's experiments: a small GPT trained, saved, killed and resumed."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import random
import shutil
import statistics
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from mlbook.common import validate
from mlbook.common_torch.timing import cpu_threads  # noqa: F401  (part of this module's API: ck.cpu_threads)

from mlbook.common_torch.checkpoint import (Checkpointer, ShardedSampler, directory_bytes,  # noqa: F401
    _rng_state, _set_rng_state)

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
        for name in ("n_layers", "d_model", "n_heads", "vocab_size", "seq_len", "batch_size",
                     "n_samples", "steps", "warmup"):
            validate.positive_int(name, getattr(self, name))
        validate.positive("lr", self.lr)
        validate.fraction("dropout", self.dropout, allow_zero=True, allow_one=False)
        if self.batch_size > self.n_samples:
            raise ValueError(f"batch_size={self.batch_size} must not exceed n_samples={self.n_samples}")

    @property
    def config(self):
        from mlbook.common_torch.gpt import tiny_config

        return tiny_config(n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
                           vocab_size=self.vocab_size)


def token_dataset(spec: RunSpec) -> torch.utils.data.TensorDataset:
    """(sample id, inputs, targets): arithmetic sequences mod V with a random
    start and stride per sample, so the loss has something to learn."""
    g = torch.Generator().manual_seed(10_000 + spec.seed)
    start = torch.randint(0, spec.vocab_size, (spec.n_samples, 1), generator=g)
    stride = torch.randint(1, 8, (spec.n_samples, 1), generator=g)
    t = torch.arange(spec.seq_len + 1)
    ids = (start + stride * t) % spec.vocab_size                     # (n, s + 1)
    return torch.utils.data.TensorDataset(torch.arange(spec.n_samples), ids[:, :-1], ids[:, 1:])


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
        """The next batch of the sampler's stream, moving to the next epoch when one ends."""
        for _ in range(2):
            if self._it is None:
                # A DataLoader draws a base seed from the global torch RNG each
                # time an iterator starts, which a resume would make one extra
                # draw; its own generator keeps the global stream untouched.
                loader = torch.utils.data.DataLoader(
                    self.dataset, batch_size=self.spec.batch_size, sampler=self.sampler,
                    drop_last=True, generator=torch.Generator().manual_seed(self.spec.seed))
                self._it = iter(loader)
            try:
                return next(self._it)
            except StopIteration:
                self._it = None
        raise RuntimeError("the sampler produced no batch in two epochs")


def build_run(spec: RunSpec, device: str = "cpu") -> Run:
    """A fresh run: every RNG seeded from ``spec.seed``, model, AdamW, schedule, sampler."""
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


def train(run: Run, until: int, ckpt: Checkpointer | None = None, save_every: int = 0,
          async_: bool = False, progress: bool = False) -> dict:
    """Train ``run`` until ``until`` steps are done, saving every ``save_every`` steps.

    Returns per-step losses, the sample ids of each step, each step's compute
    time and each save's SaveStats; a step's time excludes its save, whose
    stall is ``SaveStats.blocking_s``.
    """
    until = validate.positive_int("until", until)
    if until < run.done:
        raise ValueError(f"until={until} is before the run's current step {run.done}")
    if not isinstance(save_every, int) or save_every < 0:
        raise ValueError(f"save_every must be an integer at or above 0, got {save_every!r}")
    if save_every and ckpt is None:
        raise ValueError("save_every > 0 needs a Checkpointer")
    out = {"steps": [], "losses": [], "seen": [], "step_s": [], "saves": []}
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
        out["step_s"].append(time.perf_counter() - start)
        run.done += 1
        out["steps"].append(run.done)
        out["losses"].append(loss_value)
        out["seen"].append(ids.tolist())
        if save_every and run.done % save_every == 0:
            out["saves"].append(ckpt.save(run.done, run.model, run.optimizer, run.scheduler,
                                          run.sampler, async_=async_))
        if progress and (run.done % 10 == 0 or run.done == until):
            print(f"  step {run.done}/{until}: loss {loss_value:.3f}", flush=True)
    if ckpt is not None:
        ckpt.wait()
    return out


def weights(run: Run) -> dict:
    """A CPU copy of the model's weights."""
    return {k: v.detach().to("cpu").clone() for k, v in run.model.state_dict().items()}


def compare_save_modes(spec: RunSpec, root, save_every: int, device: str = "cpu",
                       progress: bool = False, threads: int | None = 1) -> dict:
    """Train the same run without saves, with synchronous saves and with
    async_save, every ``save_every`` steps; returns each mode's timings.

    For each mode: ``wall_s`` (the whole loop), ``step_s`` (compute of each
    step), ``blocking_s`` (training stall of each save) and ``total_s`` (each
    save from start to published), plus ``checkpoint_bytes`` on disk.
    """
    with cpu_threads(threads if device == "cpu" else None):
        return _compare_save_modes(spec, root, save_every, device, progress)


def _compare_save_modes(spec, root, save_every, device, progress) -> dict:
    from mlbook.common_torch.device import device_description

    results = {"device": device_description(device)}
    # One untimed step and save first: the first step and the first save of a
    # process pay one-off costs (allocator, lazy imports) no mode should carry.
    warm = build_run(spec, device)
    train(warm, 1, Checkpointer(Path(root) / "warmup", keep_last=1), save_every=1)
    del warm
    for mode in ("none", "sync", "async"):
        if progress:
            print(f"{mode}: {spec.steps} steps, saving every {save_every if mode != 'none' else '-'}",
                  flush=True)
        run = build_run(spec, device)
        ckpt = None if mode == "none" else Checkpointer(Path(root) / mode, keep_last=2)
        start = time.perf_counter()
        out = train(run, spec.steps, ckpt, save_every if ckpt else 0, async_=(mode == "async"))
        wall = time.perf_counter() - start
        results[mode] = {
            "wall_s": wall, "step_s": out["step_s"],
            "blocking_s": [s.blocking_s for s in out["saves"]],
            "total_s": [s.total_s for s in out["saves"]],
            "checkpoint_bytes": directory_bytes(ckpt.latest()) if ckpt else 0,
        }
    return results


def _multiset_gap(history: list[int], reference: list[int]) -> tuple[int, int]:
    """(extra, missing): sample visits beyond the reference's, and visits it lacks."""
    from collections import Counter

    h, r = Counter(history), Counter(reference)
    extra = sum((h - r).values())
    missing = sum((r - h).values())
    return extra, missing


def resume_experiment(spec: RunSpec, root, save_every: int, crash_at: int,
                      progress: bool = False, threads: int | None = 1) -> dict:
    """An uninterrupted run against one that crashes and resumes, exactly or naively.

    The interrupted run saves every ``save_every`` steps and dies after
    ``crash_at`` steps (its unsaved steps are lost). The exact resume builds a
    fresh run, scrambles every RNG (a new process would not share the old
    one's state) and loads the full training state; the naive resume loads
    the weights only and restarts the data stream, the optimizer and the
    schedule. Both then train to ``spec.steps``. Runs on the CPU, where every
    kernel is deterministic, so equality can be bitwise.
    """
    if not 0 < save_every <= crash_at < spec.steps:
        raise ValueError(f"need 0 < save_every={save_every} <= crash_at={crash_at} < steps={spec.steps}")
    with cpu_threads(threads):
        return _resume_experiment(spec, root, save_every, crash_at, progress)


def _resume_experiment(spec, root, save_every, crash_at, progress) -> dict:
    say = print if progress else (lambda *a, **k: None)
    say(f"uninterrupted: {spec.steps} steps", flush=True)
    ref_run = build_run(spec)
    ref = train(ref_run, spec.steps)
    ref_weights = weights(ref_run)

    say(f"interrupted: saves every {save_every}, crashes after step {crash_at}", flush=True)
    ckpt = Checkpointer(Path(root), keep_last=2)
    crashed = build_run(spec)
    before = train(crashed, crash_at, ckpt, save_every)
    del crashed                                               # the process died here

    def scramble():
        random.seed(12345)
        np.random.seed(12345)
        torch.manual_seed(12345)

    say("exact resume: full training state", flush=True)
    exact_run = build_run(spec)
    scramble()
    loaded = ckpt.load(exact_run.model, exact_run.optimizer, exact_run.scheduler, exact_run.sampler)
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
    committed = [ids for s, ids in zip(before["steps"], before["seen"]) if s <= resumed_from]
    flat = lambda batches: [i for b in batches for i in b]  # noqa: E731
    ref_seen = flat(ref["seen"])
    exact_seen = flat(committed + exact["seen"])
    naive_seen = flat(committed + naive["seen"])
    ref_tail = ref["losses"][resumed_from:]
    naive_extra, naive_missing = _multiset_gap(naive_seen, ref_seen)
    exact_extra, exact_missing = _multiset_gap(exact_seen, ref_seen)
    max_diff = lambda w: max((w[k] - ref_weights[k]).abs().max().item() for k in w)  # noqa: E731
    return {
        "resumed_from": resumed_from, "crash_at": crash_at, "lost_steps": crash_at - resumed_from,
        "ref_losses": ref["losses"], "exact_losses": exact["losses"], "naive_losses": naive["losses"],
        "crashed_losses": before["losses"],
        "exact_losses_equal": exact["losses"] == ref_tail,
        "exact_weights_equal": all(torch.equal(exact_weights[k], ref_weights[k]) for k in ref_weights),
        "exact_max_weight_diff": max_diff(exact_weights),
        "naive_max_weight_diff": max_diff(naive_weights),
        "naive_max_loss_diff": max(abs(a - b) for a, b in zip(naive["losses"], ref_tail)),
        "exact_extra": exact_extra, "exact_missing": exact_missing,
        "naive_extra": naive_extra, "naive_missing": naive_missing,
        "samples_per_step": spec.batch_size,
    }


# --- the chapter's tables ------------------------------------------------------------
# Each report prints a short table and returns {glue key: (value, format)}; a
# format of None glues a string as it is.

def median_stall_s(modes: dict, mode: str) -> float:
    """Median training stall per save of ``mode`` ("sync" or "async"), in seconds."""
    return statistics.median(modes[mode]["blocking_s"])


def save_modes_report(modes: dict, spec: RunSpec, save_every: int) -> dict:
    """Print the three modes' timings; return the values the page quotes.

    Whether async_save changed the step time is judged against the spread
    (interquartile range over median) of the steps of the run without saves.
    """
    for m in ("none", "sync", "async"):
        r = modes[m]
        stall = (f", stall per save {statistics.median(r['blocking_s']) * 1e3:,.0f} ms"
                 if r["blocking_s"] else "")
        print(f"{m:>5}: loop {r['wall_s']:.2f} s, "
              f"median step {statistics.median(r['step_s']) * 1e3:,.1f} ms{stall}")
    sync_c, async_c = median_stall_s(modes, "sync"), median_stall_s(modes, "async")
    async_total = statistics.median(modes["async"]["total_s"])
    nbytes = modes["sync"]["checkpoint_bytes"]
    print(f"checkpoint on disk: {nbytes / 1e6:,.1f} MB; "
          f"async save published after {async_total * 1e3:,.0f} ms")
    step_none = statistics.median(modes["none"]["step_s"])
    step_async = statistics.median(modes["async"]["step_s"])
    q1, _, q3 = statistics.quantiles(modes["none"]["step_s"], n=4)
    spread, change = (q3 - q1) / step_none, step_async / step_none - 1
    word = "slower" if change > 0 else "faster"
    if abs(change) <= spread:
        verdict = "inside that spread, so here it is noise"
    elif change > 0:
        verdict = "more than that spread, so here the background write did slow the steps"
    else:
        verdict = ("more than that spread but in the other direction, so the background "
                   "write cost nothing visible here")
    return {
        "stall_device": (modes["device"], None),
        "stall_steps": (spec.steps, "d"),
        "stall_every": (save_every, "d"),
        "ckpt_mb": (nbytes / 1e6, ",.1f"),
        "sync_ms": (sync_c * 1e3, ",.0f"),
        "async_ms": (async_c * 1e3, ",.0f"),
        "async_total_ms": (async_total * 1e3, ",.0f"),
        "async_vs_sync": (async_c / sync_c, ".0%"),
        "write_mb_s": (nbytes / sync_c / 1e6, ",.0f" if nbytes / sync_c >= 1e7 else ".2g"),
        "step_none_ms": (step_none * 1e3, ",.1f"),
        "step_async_ms": (step_async * 1e3, ",.1f"),
        "step_spread": (spread, ".0%"),
        "step_async_change": (f"{abs(change):.0%} {word}", None),
        "step_async_verdict": (verdict, None),
    }


def resume_report(res: dict, spec: RunSpec, save_every: int, crash_at: int) -> dict:
    """Print the resume experiment's outcome; return the values the page quotes."""
    print(f"resumed from step {res['resumed_from']}; {res['lost_steps']} steps lost to the crash")
    print(f"exact resume: losses identical: {res['exact_losses_equal']}, weights identical: "
          f"{res['exact_weights_equal']} (max |diff| {res['exact_max_weight_diff']:.1e})")
    print(f"naive resume: max loss difference {res['naive_max_loss_diff']:.3f}, "
          f"max weight difference {res['naive_max_weight_diff']:.2e}")
    print(f"sample visits beyond the uninterrupted run's: exact {res['exact_extra']}, "
          f"naive {res['naive_extra']}")
    print(f"sample visits missing: exact {res['exact_missing']}, naive {res['naive_missing']}")
    exact_ok = res["exact_losses_equal"] and res["exact_weights_equal"]
    naive_end, ref_end = res["naive_losses"][-1], res["ref_losses"][-1]
    return {
        "res_steps": (spec.steps, "d"),
        "res_every": (save_every, "d"),
        "res_crash": (crash_at, "d"),
        "res_from": (res["resumed_from"], "d"),
        "res_lost": (res["lost_steps"], "d"),
        "res_exact": ("identical" if exact_ok else "NOT identical", None),
        "res_exact_diff": (res["exact_max_weight_diff"], ".1e"),
        "res_naive_extra": (res["naive_extra"], ",d"),
        "res_naive_missing": (res["naive_missing"], ",d"),
        "res_naive_steps": (res["naive_extra"] // spec.batch_size, "d"),
        "res_naive_loss": (res["naive_max_loss_diff"], ".2f"),
        "res_exact_gap": (res["exact_extra"] + res["exact_missing"], "d"),
        "res_naive_end": (naive_end, ".2f"),
        "res_ref_end": (ref_end, ".2f"),
        "res_naive_why": ("lower, because the replayed samples are ones the model has already fitted"
                          if naive_end < ref_end else "higher", None),
    }
