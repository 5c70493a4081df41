"""The torch demos of the faults chapter.

- ``run_elastic``: launch the torchrun job of ``mlbook.faults_elastic`` (two
  gloo workers on CPU, restarts allowed) with or without a worker that dies,
  and collect its timeline and final weights.
- ``run_corruption``: launch ``mlbook.faults_corruption`` (data-parallel
  replicas that compare gradient fingerprints before every optimizer step)
  with bits flipped on purpose.
- ``spike_run``: a small model hit by a window of bad batches, watched by a
  spike detector and, if asked, rescued by rewind-and-skip.
- ``seeded_run`` and ``nondeterministic_op``: bitwise reruns, and an operation
  that is not deterministic unless torch is told to be.

Every launch binds to 127.0.0.1, uses a free port, is bounded in time and
kills its whole process group on the way out.
"""

from __future__ import annotations

from mlbook.common_torch import device as devices

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mlbook.faults import formulas as faults
from mlbook.common_torch import toy_models as faults_train
from mlbook.common import accelerators as hardware
from mlbook.common_torch import timing as measure
from mlbook.common import validate

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# Launching torchrun
# ---------------------------------------------------------------------------

from mlbook.common_torch.launch import Launch, fork_group, free_port, torchrun  # noqa: F401


# Setting up a gloo group on a loaded host now and then fails before training
# starts ("connectFullMesh failed ... Connection refused"). That is not the
# fault a demo injects, so such a launch is run again from scratch.
GLOO_SETUP_ERRORS = ("connectFullMesh failed",)


def _setup_failed(launch: Launch) -> bool:
    return launch.returncode != 0 and any(e in launch.output for e in GLOO_SETUP_ERRORS)


# ---------------------------------------------------------------------------
# Elastic restart
# ---------------------------------------------------------------------------

@dataclass
class ElasticRun:
    launch: Launch
    events: list            # every rank's events, time-ordered
    final_state: dict       # rank 0's weights at the end
    summary: faults.TimelineSummary
    t0: float = 0.0         # wall time of the first event
    setup_retries: int = 0  # launches redone because the gloo group failed to form


def _read_events(workdir: Path) -> list:
    events = []
    for path in sorted(workdir.glob("events-rank*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return sorted(events, key=lambda e: e["t"])


def run_elastic(steps: int = 40, ckpt_every: int = 10, fail_step: int | None = 27,
                fail_rank: int = 1, nproc: int = 2, max_restarts: int = 1, step_s: float = 0.0,
                seed: int = 0, timeout_s: float = 60.0, workdir=None,
                launcher: str = "torchrun", setup_retries: int = 2) -> ElasticRun:
    """Run the elastic job; ``fail_step=None`` runs it uninterrupted.

    ``launcher="torchrun"`` starts it under torchrun, which restarts the group
    up to ``max_restarts`` times; ``"fork"`` runs the same worker code in
    forked processes (no launcher, no restarts, a few seconds faster), which
    is how the chapter makes its uninterrupted reference run.
    """
    validate.one_of("launcher", launcher, ("torchrun", "fork"))
    validate.non_negative("setup_retries", setup_retries)
    if launcher == "fork" and fail_step is not None:
        raise ValueError(f"launcher='fork' cannot restart a failed worker; use fail_step=None, got {fail_step!r}")
    validate.positive_int("steps", steps)
    validate.positive_int("ckpt_every", ckpt_every)
    if fail_step is not None and not (isinstance(fail_step, int) and 0 < fail_step < steps):
        raise ValueError(f"fail_step must be None or an integer in (0, steps={steps}), got {fail_step!r}")
    if not (isinstance(fail_rank, int) and 0 <= fail_rank < nproc):
        raise ValueError(f"fail_rank must be an integer in [0, nproc={nproc}), got {fail_rank!r}")
    with tempfile.TemporaryDirectory(prefix="mlbook-elastic-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        for setup_try in range(1 + setup_retries):
            work = root / f"try{setup_try}"
            work.mkdir(parents=True, exist_ok=True)
            args = ["--workdir", str(work), "--steps", str(steps), "--ckpt-every", str(ckpt_every),
                    "--fail-step", str(-1 if fail_step is None else fail_step),
                    "--fail-rank", str(fail_rank), "--step-s", str(step_s), "--seed", str(seed),
                    "--timeout-s", str(timeout_s)]
            if launcher == "torchrun":
                launch = torchrun("mlbook.faults.elastic_script", args, nproc=nproc, max_restarts=max_restarts,
                                  timeout_s=timeout_s, log_path=work / "torchrun.log")
            else:
                from mlbook.faults import elastic_script as faults_elastic

                launch = fork_group(faults_elastic.main, args, nproc=nproc, timeout_s=timeout_s)
            if not _setup_failed(launch):
                break
        events = _read_events(work)
        final = work / "final.pt"
        if launch.returncode != 0 or not final.exists():
            raise RuntimeError(f"elastic run failed (exit {launch.returncode}); output:\n"
                               f"{launch.output[-4000:]}")
        state = torch.load(final, weights_only=True)
    rank0 = [e for e in events if e["rank"] == 0 or e["kind"] == "fail"]
    return ElasticRun(launch, events, state, faults.summarize_timeline(rank0),
                      t0=events[0]["t"] if events else 0.0, setup_retries=setup_try)


def same_weights(a: dict, b: dict) -> bool:
    """Bitwise equality of two state dicts."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------
# Silent corruption
# ---------------------------------------------------------------------------

def run_corruption(nproc: int = 3, steps: int = 8, flip_step: int = 3, flip_rank: int = 1,
                   seed: int = 0, timeout_s: float = 60.0) -> dict:
    """Run every scenario of ``mlbook.faults_corruption`` in one process group
    of ``nproc`` forked replicas and return rank 0's report: {scenario: {"steps": [...], "replicas_agree": bool}}."""
    validate.positive_int("steps", steps)
    if not (isinstance(flip_step, int) and 0 <= flip_step < steps):
        raise ValueError(f"flip_step must be an integer in [0, steps={steps}), got {flip_step!r}")
    if not (isinstance(flip_rank, int) and 0 <= flip_rank < nproc):
        raise ValueError(f"flip_rank must be an integer in [0, nproc={nproc}), got {flip_rank!r}")
    with tempfile.TemporaryDirectory(prefix="mlbook-sdc-") as tmp:
        out = Path(tmp) / "report.json"
        args = ["--out", str(out), "--steps", str(steps), "--flip-step", str(flip_step),
                "--flip-rank", str(flip_rank), "--seed", str(seed), "--timeout-s", str(timeout_s)]
        from mlbook.faults import corruption_script as faults_corruption

        for setup_try in range(3):
            launch = fork_group(faults_corruption.main, args, nproc=nproc, timeout_s=timeout_s)
            if not _setup_failed(launch):
                break
        if launch.returncode != 0 or not out.exists():
            raise RuntimeError(f"corruption run failed (exit {launch.returncode}):\n{launch.output[-4000:]}")
        report = json.loads(out.read_text())
    report["_wall_s"] = launch.wall_s
    report["_setup_retries"] = setup_try
    return report


# ---------------------------------------------------------------------------
# Loss spikes
# ---------------------------------------------------------------------------

@dataclass
class SpikeRun:
    losses: list            # loss of each optimizer step, in step order
    batches: list           # the data batch each step read
    spikes: list            # steps the detector flagged
    rewinds: list = field(default_factory=list)   # RewindPlans carried out


def spike_run(steps: int = 150, bad: tuple = (60, 64), ckpt_every: int = 10,
              policy: faults.RewindPolicy | None = None,
              detector: faults.SpikeConfig = faults.SpikeConfig(window=30, z_threshold=6.0),
              seed: int = 0, lr: float = 0.1, max_rewinds: int = 3) -> SpikeRun:
    """Train the shared MLP with SGD on batches 0, 1, 2, ...; batches in
    [bad[0], bad[1]) are corrupt. With a ``policy``, a detected spike rewinds
    to a checkpoint and skips a window of batches (at most ``max_rewinds``
    times); without one, training ploughs on."""
    validate.positive_int("steps", steps)
    validate.positive_int("ckpt_every", ckpt_every)
    validate.positive("lr", lr)
    if not (len(bad) == 2 and 0 <= bad[0] <= bad[1]):
        raise ValueError(f"bad must be a (start, end) pair with 0 <= start <= end, got {bad!r}")
    w = faults_train.teacher(seed)
    model = faults_train.make_model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    det = faults.SpikeDetector(detector)
    ckpts = {0: (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))}
    losses, batches, spikes, rewinds, skips = {}, {}, [], [], []
    step = 0
    while step < steps:
        b = faults.batch_for_step(step, skips)
        x, y = faults_train.batch(b, seed=seed, bad=bad[0] <= b < bad[1], w=w)
        loss = faults_train.loss_fn(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        _, is_spike = det.update(value)
        losses[step], batches[step] = value, b
        if is_spike:
            spikes.append(step)
        if is_spike and policy is not None and len(rewinds) < max_rewinds:
            plan = policy.plan(step, ckpts, batch_offset=sum(n for _, n in skips))
            rewinds.append(plan)
            model_sd, opt_sd = ckpts[plan.resume_step]
            model.load_state_dict(model_sd)
            opt.load_state_dict(opt_sd)
            skips.append((plan.resume_step, plan.skipped))
            det = faults.SpikeDetector(detector)       # its history included the spike's lead-up
            for s in range(plan.resume_step):          # re-seed it with the kept history
                det.update(losses[s])
            step = plan.resume_step
            continue
        step += 1
        if step % ckpt_every == 0:
            ckpts[step] = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    order = sorted(losses)
    return SpikeRun([losses[s] for s in order], [batches[s] for s in order], spikes, rewinds)


# ---------------------------------------------------------------------------
# Determinism
# ---------------------------------------------------------------------------

def spike_trio(steps: int, bad: tuple, ckpt_every: int, policy: faults.RewindPolicy,
               seed: int = 0) -> tuple[SpikeRun, SpikeRun, SpikeRun]:
    """The three runs the spike section compares: hit by the ``bad`` batches
    and ploughing on, hit and rescued by ``policy``, and never hit."""
    return (spike_run(steps=steps, bad=bad, ckpt_every=ckpt_every, seed=seed),
            spike_run(steps=steps, bad=bad, ckpt_every=ckpt_every, policy=policy, seed=seed),
            spike_run(steps=steps, bad=(0, 0), ckpt_every=ckpt_every, seed=seed))


def seeded_run(seed: int = 0, steps: int = 20, batch_size: int = 64, device: str = "cpu",
               deterministic: bool = False) -> dict:
    """Train the shared MLP for ``steps`` steps from ``seed`` with dropout and
    shuffled data drawn from seeded generators; return the final weights.
    ``deterministic`` runs it under torch.use_deterministic_algorithms(True)."""
    validate.positive_int("steps", steps)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        return _seeded_run(seed, steps, batch_size, device)
    finally:
        torch.use_deterministic_algorithms(before)


def _seeded_run(seed, steps, batch_size, device):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Dropout(0.1), faults_train.make_model(seed)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = faults_train.dataset(1024, seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size,
                                         shuffle=True, generator=torch.Generator().manual_seed(seed))
    batches = iter(loader)
    for _ in range(steps):
        try:
            xb, yb = next(batches)
        except StopIteration:
            batches = iter(loader)
            xb, yb = next(batches)
        loss = faults_train.loss_fn(model, xb.to(device), yb.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def accumulating_op(device: str) -> str:
    """The name of the accumulating operation ``nondeterministic_op`` runs on
    ``device``: the one torch lists as nondeterministic there."""
    return "index_add_" if device == "cuda" else "index_put_(accumulate=True)"


def _accumulate(idx, src, buckets, device):
    out = torch.zeros(buckets, device=device)
    if device == "cuda":                          # CUDA index_add_ adds with atomics
        return out.index_add_(0, idx, src)
    return out.index_put_((idx,), src, accumulate=True)   # CPU: atomics across threads


def nondeterministic_op(deterministic: bool, n: int = 1_000_000, buckets: int = 100,
                        repeats: int = 8, device: str = "cpu", seed: int = 0) -> dict:
    """Accumulate ``n`` float32 values into ``buckets`` slots with
    ``accumulating_op(device)`` ``repeats`` times, with
    torch.use_deterministic_algorithms set as asked.

    The fast path adds with atomics from many threads (CPU) or many GPU
    threads, in whatever order they arrive; float addition is not associative,
    so the bits change from call to call. Returns the number of distinct
    results, the largest difference between them, and the median seconds a call.
    """
    validate.positive_int("n", n)
    validate.positive_int("buckets", buckets)
    validate.positive_int("repeats", repeats)
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(n, generator=g).to(device)                         # (n,)
    idx = torch.randint(0, buckets, (n,), generator=g).to(device)        # (n,)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        outs, times = [], []
        for _ in range(repeats + 1):                                     # the first call warms up
            measure.sync(device)
            start = time.perf_counter()
            out = _accumulate(idx, src, buckets, device)
            measure.sync(device)
            times.append(time.perf_counter() - start)
            outs.append(out.cpu())
    finally:
        torch.use_deterministic_algorithms(before)
    outs, times = outs[1:], sorted(times[1:])
    distinct = len({o.numpy().tobytes() for o in outs})
    spread = max(float((o - outs[0]).abs().max()) for o in outs)
    return {"distinct": distinct, "max_diff": spread, "median_s": times[len(times) // 2],
            "repeats": repeats}


def time_steps(steps: int, seed: int = 0, batch_size: int = 64, device: str = "cpu",
               threads: int | None = 1) -> dict:
    """Median seconds of one training step of the ``seeded_run`` model, default
    and deterministic.

    One model trains for ``2 * steps`` steps after two warm-up steps, switching
    torch.use_deterministic_algorithms on every step, so both modes see the same
    model, the same warm caches and the same bursts of load from elsewhere on a
    shared machine; the median of each mode's steps ignores the bursts. On the
    CPU it runs on ``threads`` threads (None: as set): a step this small only
    waits for its threads to sync when the CPU is shared."""
    validate.positive_int("steps", steps)
    with measure.cpu_threads(threads, device, name="threads"):
        return _interleaved_step_times(steps, batch_size, seed, device)


def _interleaved_step_times(steps, batch_size, seed, device) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Dropout(0.1), faults_train.make_model(seed)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = faults_train.dataset(batch_size * 4, seed)
    before = torch.are_deterministic_algorithms_enabled()
    times = {False: [], True: []}
    try:
        for i in range(2 * steps + 2):
            det = bool(i % 2)
            torch.use_deterministic_algorithms(det)
            j = (i % 4) * batch_size
            xb, yb = x[j:j + batch_size].to(device), y[j:j + batch_size].to(device)
            measure.sync(device)
            start = time.perf_counter()
            loss = faults_train.loss_fn(model, xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            measure.sync(device)
            if i >= 2:                                        # the first two steps warm up
                times[det].append(time.perf_counter() - start)
        where = devices.device_description(device)
    finally:
        torch.use_deterministic_algorithms(before)
    return {**{det: sorted(t)[len(t) // 2] for det, t in times.items()}, "device": where}


def determinism_demo(n: int = 1_000_000, buckets: int = 10, repeats: int = 12, steps: int = 40,
                     op_device: str = "cpu", seed: int = 0) -> dict:
    """Everything the determinism section measures: two seeded runs with the
    same seed and one with another; the accumulating op on ``op_device`` with
    and without deterministic algorithms; and the per-step time of the MLP
    on the CPU (one thread) in both modes."""
    a, b, c = (seeded_run(seed=s) for s in (seed, seed, seed + 1))
    fast = nondeterministic_op(False, n=n, buckets=buckets, repeats=repeats, device=op_device,
                               seed=seed)
    safe = nondeterministic_op(True, n=n, buckets=buckets, repeats=repeats, device=op_device,
                               seed=seed)
    step_s = time_steps(steps, seed=seed)
    return {"same_seed": same_weights(a, b), "other_seed": same_weights(a, c),
            "op": accumulating_op(op_device), "n": n, "buckets": buckets,
            "fast": fast, "safe": safe, "step_s": step_s, "steps": steps,
            "step_device": step_s["device"], "step_ratio": step_s[True] / step_s[False]}
