"""The torch demos of the faults chapter.

- ``run_elastic``: launch the torchrun job of ``mlbook.faults.elastic_script``
  (two gloo workers on CPU, restarts allowed) with or without a worker that
  dies, and collect its timeline and final weights. When every attempt fails
  and torchrun runs out of ``--max-restarts``, it raises ``RestartsExhausted``.
- ``run_corruption``: fork ``mlbook.faults.corruption_script`` (data-parallel
  replicas that compare gradient fingerprints before every optimizer step)
  with bits flipped on purpose.
- ``spike_run``: a small model hit by a window of bad batches, watched by a
  spike detector and, if asked, rescued by rewind-and-skip.
- ``determinism_demo``: bitwise reruns, an operation that is not
  deterministic unless torch is told to be, and what the mode costs a step.
  ``deterministic_env`` / ``set_deterministic_env`` give CUDA's cuBLAS the
  workspace setting it needs for reproducible results.

Every launch binds to 127.0.0.1, uses a free port, is bounded in time and
kills its whole process group on the way out. Results are frozen dataclasses.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mlbook.common import validate
from mlbook.common_torch import device as devices
from mlbook.common_torch import timing, toy_models
from mlbook.common_torch.launch import (
    Launch,
    fork_group,
    fork_group_formed,
    group_failed_to_form,
    torchrun,
)
from mlbook.faults import formulas as faults

ELASTIC_MODULE = "mlbook.faults.elastic_script"
# A hang guard, not a speed bound: the launches take 5-30 s on two idle cores, but
# every process they start imports torch, which takes tens of seconds on a loaded
# machine (a 60 s guard timed out there with nothing wrong).
HANG_GUARD_S = 300.0


# ---------------------------------------------------------------------------
# Elastic restart
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ElasticRun:
    launch: Launch
    events: tuple  # every rank's events, time-ordered
    final_state: dict  # rank 0's weights at the end
    summary: faults.TimelineSummary
    t0: float = 0.0  # wall time of the first event
    setup_retries: int = 0  # launches redone because the gloo group failed to form


class RestartsExhausted(RuntimeError):
    """torchrun gave up: every one of the 1 + max_restarts attempts failed.

    ``last_checkpoint_step`` is the newest complete checkpoint the workers
    left (None if none), under ``checkpoint_dir``.
    """

    def __init__(
        self,
        max_restarts: int,
        attempts: int,
        last_checkpoint_step: int | None,
        checkpoint_dir: Path,
        output: str,
    ):
        self.max_restarts, self.attempts = max_restarts, attempts
        self.last_checkpoint_step, self.checkpoint_dir = (
            last_checkpoint_step,
            checkpoint_dir,
        )
        self.output = output
        super().__init__(
            f"torchrun exhausted its restarts: all {attempts} attempts failed "
            f"(max_restarts={max_restarts}); the newest complete checkpoint is step "
            f"{last_checkpoint_step} under {checkpoint_dir}"
        )


def _read_events(workdir: Path) -> list:
    events = []
    for path in sorted(workdir.glob("events-rank*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return sorted(events, key=lambda e: e["t"])


def _newest_checkpoint(ckpt_dir: Path) -> int | None:
    """The newest complete checkpoint's step, read the way the Checkpointer
    reads it, without starting a process group."""
    from mlbook.common_torch.checkpoint import Checkpointer

    if not ckpt_dir.is_dir():
        return None
    steps = [
        int(p.name.split("-")[-1])
        for p in ckpt_dir.glob("step-*")
        if Checkpointer.is_complete(p)
    ]
    return max(steps, default=None)


def run_elastic(
    steps: int = 40,
    ckpt_every: int = 10,
    fail_step: int | None = 27,
    fail_rank: int = 1,
    nproc: int = 2,
    max_restarts: int = 1,
    step_s: float = 0.0,
    seed: int = 0,
    timeout_s: float = HANG_GUARD_S,
    workdir=None,
    launcher: str = "torchrun",
    setup_retries: int = 2,
    fail_attempts: int | None = 1,
) -> ElasticRun:
    """Run the elastic job; ``fail_step=None`` runs it uninterrupted.

    ``launcher="torchrun"`` starts it under torchrun, which restarts the group
    up to ``max_restarts`` times; ``"fork"`` runs the same worker code in
    forked processes (no launcher, no restarts, a few seconds faster), which
    is how the chapter makes its uninterrupted reference run.
    Rank ``fail_rank`` dies once ``fail_step`` steps are done in each of the
    first ``fail_attempts`` attempts (None: in every attempt). When every
    attempt fails, torchrun gives up and this raises ``RestartsExhausted``;
    pass ``workdir`` to keep the checkpoints it left.
    """
    validate.one_of("launcher", launcher, ("torchrun", "fork"))
    validate.positive_int("nproc", nproc)
    if (
        not isinstance(max_restarts, int)
        or isinstance(max_restarts, bool)
        or max_restarts < 0
    ):
        raise ValueError(
            f"max_restarts must be an integer at or above 0, got {max_restarts!r}"
        )
    if (
        not isinstance(setup_retries, int)
        or isinstance(setup_retries, bool)
        or setup_retries < 0
    ):
        raise ValueError(
            f"setup_retries must be an integer at or above 0, got {setup_retries!r}"
        )
    if launcher == "fork" and fail_step is not None:
        raise ValueError(
            "launcher='fork' cannot restart a failed worker; use fail_step=None, "
            f"got {fail_step!r}"
        )
    validate.positive_int("steps", steps)
    validate.positive_int("ckpt_every", ckpt_every)
    validate.non_negative("step_s", step_s)
    validate.positive("timeout_s", timeout_s)
    if fail_step is not None and not (
        isinstance(fail_step, int)
        and not isinstance(fail_step, bool)
        and 0 < fail_step < steps
    ):
        raise ValueError(
            f"fail_step must be None or an integer in (0, steps={steps}), "
            f"got {fail_step!r}"
        )
    if not (
        isinstance(fail_rank, int)
        and not isinstance(fail_rank, bool)
        and 0 <= fail_rank < nproc
    ):
        raise ValueError(
            f"fail_rank must be an integer in [0, nproc={nproc}), got {fail_rank!r}"
        )
    if fail_attempts is not None:
        validate.positive_int("fail_attempts", fail_attempts)
    with tempfile.TemporaryDirectory(prefix="mlbook-elastic-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        for setup_try in range(1 + setup_retries):
            work = root / f"try{setup_try}"
            work.mkdir(parents=True, exist_ok=True)
            args = [
                "--workdir",
                str(work),
                "--steps",
                str(steps),
                "--ckpt-every",
                str(ckpt_every),
                "--fail-step",
                str(-1 if fail_step is None else fail_step),
                "--fail-rank",
                str(fail_rank),
                "--fail-attempts",
                str(-1 if fail_attempts is None else fail_attempts),
                "--step-s",
                str(step_s),
                "--seed",
                str(seed),
                "--timeout-s",
                str(timeout_s),
            ]
            if launcher == "torchrun":
                launch = torchrun(
                    ELASTIC_MODULE,
                    args,
                    nproc=nproc,
                    max_restarts=max_restarts,
                    timeout_s=timeout_s,
                    log_path=work / "torchrun.log",
                )
            else:
                from mlbook.faults import elastic_script

                launch = fork_group(
                    elastic_script.main, args, nproc=nproc, timeout_s=timeout_s
                )
            if not group_failed_to_form(
                launch
            ):  # not the fault the demo injects: launch again
                break
        events = _read_events(work)
        final = work / "final.pt"
        if launch.returncode != 0 or not final.exists():
            failed = {e["attempt"] for e in events if e["kind"] == "fail"}
            if launcher == "torchrun" and failed == set(range(max_restarts + 1)):
                raise RestartsExhausted(
                    max_restarts,
                    len(failed),
                    _newest_checkpoint(work / "ckpt"),
                    work / "ckpt",
                    launch.output[-4000:],
                )
            raise RuntimeError(
                f"elastic run failed (exit {launch.returncode}); output:\n"
                f"{launch.output[-4000:]}"
            )
        state = torch.load(final, weights_only=True)
    rank0 = [e for e in events if e["rank"] == 0 or e["kind"] == "fail"]
    return ElasticRun(
        launch,
        tuple(events),
        state,
        faults.summarize_timeline(rank0),
        t0=events[0]["t"] if events else 0.0,
        setup_retries=setup_try,
    )


def max_abs_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts with the same
    keys and shapes (0.0 when they are bitwise equal, up to the sign of zero)."""
    if a.keys() != b.keys():
        raise ValueError(f"state dicts differ in keys: {sorted(set(a) ^ set(b))}")
    return max(
        (float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel()),
        default=0.0,
    )


def same_weights(a: dict, b: dict) -> bool:
    """Bitwise equality of two state dicts."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------
# Silent corruption
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedStep:
    """One step of one scenario, as every replica saw it."""

    step: int
    norms: tuple[
        float, ...
    ]  # each replica's local gradient norm, before the all-reduce
    checksums: tuple[int, ...]  # each replica's checksum of the averaged gradient
    norm_alarm: bool
    norm_suspects: tuple[int, ...]
    checksum_alarm: bool
    checksum_suspects: tuple[int, ...]
    skipped: bool  # the optimizer step was skipped on every replica


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: tuple[CheckedStep, ...]
    replicas_agree: bool  # identical weights at the end (weight checksums)
    max_weight_gap: float  # largest difference between replicas' weights at the end

    def alarm_steps(self, check: str) -> tuple[int, ...]:
        """Steps at which ``check`` ("norm" or "checksum") alarmed."""
        validate.one_of("check", check, ("norm", "checksum"))
        return tuple(s.step for s in self.steps if getattr(s, f"{check}_alarm"))

    def suspects(self, check: str) -> tuple[int, ...]:
        """Every replica ``check`` ever suspected, sorted."""
        validate.one_of("check", check, ("norm", "checksum"))
        return tuple(
            sorted({r for s in self.steps for r in getattr(s, f"{check}_suspects")})
        )


@dataclass(frozen=True)
class CorruptionRun:
    nproc: int
    flip_step: int
    flip_rank: int
    scenarios: dict  # name -> Scenario, in the order they ran
    wall_s: float
    setup_retries: int


def _scenario(name: str, rep: dict) -> Scenario:
    steps = tuple(
        CheckedStep(
            step=r["step"],
            norms=tuple(r["norms"]),
            checksums=tuple(r["checksums"]),
            norm_alarm=r["norm_alarm"],
            norm_suspects=tuple(r["norm_suspects"]),
            checksum_alarm=r["checksum_alarm"],
            checksum_suspects=tuple(r["checksum_suspects"]),
            skipped=r["skipped"],
        )
        for r in rep["steps"]
    )
    return Scenario(name, steps, rep["replicas_agree"], rep["max_weight_gap"])


def run_corruption(
    nproc: int = 3,
    steps: int = 8,
    flip_step: int = 3,
    flip_rank: int = 1,
    seed: int = 0,
    timeout_s: float = HANG_GUARD_S,
) -> CorruptionRun:
    """Run every scenario of ``mlbook.faults.corruption_script`` in one process
    group of ``nproc`` forked replicas."""
    validate.positive_int("nproc", nproc)
    validate.positive_int("steps", steps)
    validate.positive("timeout_s", timeout_s)
    if nproc < 2:
        raise ValueError(f"nproc must be at least 2 replicas to compare, got {nproc}")
    if not (
        isinstance(flip_step, int)
        and not isinstance(flip_step, bool)
        and 0 <= flip_step < steps
    ):
        raise ValueError(
            f"flip_step must be an integer in [0, steps={steps}), got {flip_step!r}"
        )
    if not (
        isinstance(flip_rank, int)
        and not isinstance(flip_rank, bool)
        and 0 <= flip_rank < nproc
    ):
        raise ValueError(
            f"flip_rank must be an integer in [0, nproc={nproc}), got {flip_rank!r}"
        )
    from mlbook.faults import corruption_script

    with tempfile.TemporaryDirectory(prefix="mlbook-sdc-") as tmp:
        out = Path(tmp) / "report.json"
        args = [
            "--out",
            str(out),
            "--steps",
            str(steps),
            "--flip-step",
            str(flip_step),
            "--flip-rank",
            str(flip_rank),
            "--seed",
            str(seed),
            "--timeout-s",
            str(timeout_s),
        ]
        launch, setup_try = fork_group_formed(
            corruption_script.main, args, nproc=nproc, timeout_s=timeout_s
        )
        if launch.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"corruption run failed (exit {launch.returncode}):\n"
                f"{launch.output[-4000:]}"
            )
        report = json.loads(out.read_text())
    scenarios = {
        name: _scenario(name, rep)
        for name, rep in report.items()
        if not name.startswith("_")
    }
    return CorruptionRun(
        nproc, flip_step, flip_rank, scenarios, launch.wall_s, setup_try
    )


# ---------------------------------------------------------------------------
# Loss spikes
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SpikeRun:
    losses: tuple  # loss of each optimizer step, in step order
    batches: tuple  # the data batch each step read
    spikes: tuple  # steps the detector flagged
    rewinds: tuple = ()  # RewindPlans carried out

    def mean_loss(self, last: int) -> float:
        """Mean loss over the last ``last`` steps."""
        validate.positive_int("last", last)
        tail = self.losses[-last:]
        return sum(tail) / len(tail)


# spike_run's default detector: a frozen dataclass, so every call can share it.
SPIKE_DETECTOR = faults.SpikeConfig(window=30, z_threshold=6.0)


def spike_run(
    steps: int = 150,
    bad: tuple = (60, 64),
    ckpt_every: int = 10,
    policy: faults.RewindPolicy | None = None,
    detector: faults.SpikeConfig = SPIKE_DETECTOR,
    seed: int = 0,
    lr: float = 0.1,
    max_rewinds: int = 3,
    threads: int | None = 1,
) -> SpikeRun:
    """Train the shared MLP with SGD on batches 0, 1, 2, ...; batches in
    [bad[0], bad[1]) are corrupt. With a ``policy``, a detected spike rewinds
    to a checkpoint and skips a window of batches (at most ``max_rewinds``
    times); without one, training ploughs on. Runs on the CPU on ``threads``
    threads (None: as set): a model this small only waits for a second thread
    when the CPU is shared."""
    with timing.cpu_threads(threads, "cpu", name="threads"):
        return _spike_run(
            steps, bad, ckpt_every, policy, detector, seed, lr, max_rewinds
        )


def _spike_run(
    steps, bad, ckpt_every, policy, detector, seed, lr, max_rewinds
) -> SpikeRun:
    validate.positive_int("steps", steps)
    validate.positive_int("ckpt_every", ckpt_every)
    validate.positive("lr", lr)
    if (
        not isinstance(max_rewinds, int)
        or isinstance(max_rewinds, bool)
        or max_rewinds < 0
    ):
        raise ValueError(
            f"max_rewinds must be an integer at or above 0, got {max_rewinds!r}"
        )
    if policy is not None:
        validate.instance_of("policy", policy, faults.RewindPolicy)
    validate.instance_of("detector", detector, faults.SpikeConfig)
    if not (
        isinstance(bad, tuple)
        and len(bad) == 2
        and all(isinstance(b, int) for b in bad)
        and 0 <= bad[0] <= bad[1]
    ):
        raise ValueError(
            "bad must be a (start, end) pair of integers with 0 <= start "
            f"<= end, got {bad!r}"
        )
    w = toy_models.teacher(seed)
    model = toy_models.make_model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    det = faults.SpikeDetector(detector)
    ckpts = {0: (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))}
    losses, batches, spikes, rewinds, skips = {}, {}, [], [], []
    step = 0
    while step < steps:
        b = faults.batch_for_step(step, skips)
        x, y = toy_models.batch(b, seed=seed, bad=bad[0] <= b < bad[1], w=w)
        loss = toy_models.loss_fn(model, x, y)
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
            det = faults.SpikeDetector(
                detector
            )  # its history included the spike's lead-up
            for s in range(plan.resume_step):  # re-seed it with the kept history
                det.update(losses[s])
            step = plan.resume_step
            continue
        step += 1
        if step % ckpt_every == 0:
            ckpts[step] = (
                copy.deepcopy(model.state_dict()),
                copy.deepcopy(opt.state_dict()),
            )
    order = sorted(losses)
    return SpikeRun(
        tuple(losses[s] for s in order),
        tuple(batches[s] for s in order),
        tuple(spikes),
        tuple(rewinds),
    )


def spike_trio(
    steps: int, bad: tuple, ckpt_every: int, policy: faults.RewindPolicy, seed: int = 0
) -> tuple[SpikeRun, SpikeRun, SpikeRun]:
    """The three runs the spike section compares: hit by the ``bad`` batches
    and ploughing on, hit and rescued by ``policy``, and never hit."""
    return (
        spike_run(steps=steps, bad=bad, ckpt_every=ckpt_every, seed=seed),
        spike_run(
            steps=steps, bad=bad, ckpt_every=ckpt_every, policy=policy, seed=seed
        ),
        spike_run(steps=steps, bad=(0, 0), ckpt_every=ckpt_every, seed=seed),
    )


# ---------------------------------------------------------------------------
# Determinism
# ---------------------------------------------------------------------------

# cuBLAS gives the same bits run to run only when each stream has a workspace
# of its own; CUBLAS_WORKSPACE_CONFIG=:4096:8 (eight 4 MiB buffers) or :16:8
# (eight 16 KiB ones) makes sure of it (NVIDIA, cuBLAS docs, "Results
# reproducibility"). PyTorch reads it when its first cuBLAS handle is made.
# Releases raised under torch.use_deterministic_algorithms(True) at the first
# cuBLAS call without it (pytorch/pytorch#41377); #161749 proposed dropping the
# check, PyTorch having kept a workspace per handle and stream since #85447.
# torch 2.13's ATen/Context.h no longer declares alertCuBLASConfigNotDeterministic
# (tests/test_faults_demos.py reads it); a CUDA build's behaviour is not
# checked here, so the variable is set on a GPU either way.
CUBLAS_WORKSPACE_CONFIGS = (":4096:8", ":16:8")


def deterministic_env(device: str, environ=None) -> dict:
    """The environment variables to set before any CUDA work so that a run
    on ``device`` can be bitwise reproducible: {} on the CPU or when
    ``environ`` (default os.environ) already holds an accepted cuBLAS
    workspace setting, else CUBLAS_WORKSPACE_CONFIG=:4096:8."""
    validate.one_of("device", device, ("cpu", "cuda"))
    environ = os.environ if environ is None else environ
    if device == "cpu":
        return {}
    current = environ.get("CUBLAS_WORKSPACE_CONFIG")
    if current is None:
        return {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE_CONFIGS[0]}
    if current not in CUBLAS_WORKSPACE_CONFIGS:
        raise ValueError(
            f"CUBLAS_WORKSPACE_CONFIG is {current!r}; deterministic cuBLAS needs "
            f"one of {CUBLAS_WORKSPACE_CONFIGS}"
        )
    return {}


def set_deterministic_env(device: str) -> dict:
    """Put ``deterministic_env(device)`` into os.environ and return what was set.

    cuBLAS reads the setting when its first handle is created, so this must
    run before any CUDA work: if CUDA is already initialised and the variable
    is missing, it raises rather than pretend.
    """
    env = deterministic_env(device)
    if env and torch.cuda.is_initialized():
        raise RuntimeError(
            f"set {env} before any CUDA work: CUDA is already initialised "
            "in this process"
        )
    os.environ.update(env)
    return env


def seeded_run(
    seed: int = 0,
    steps: int = 20,
    batch_size: int = 64,
    device: str = "cpu",
    deterministic: bool = False,
) -> dict:
    """Train the shared MLP for ``steps`` steps from ``seed`` with dropout and
    shuffled data drawn from seeded generators; return the final weights.
    ``deterministic`` runs it under torch.use_deterministic_algorithms(True)."""
    validate.positive_int("steps", steps)
    validate.positive_int("batch_size", batch_size)
    validate.one_of("device", device, ("cpu", "cuda"))
    validate.boolean("deterministic", deterministic)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        return _seeded_run(seed, steps, batch_size, device)
    finally:
        torch.use_deterministic_algorithms(before)


def _seeded_run(seed, steps, batch_size, device):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Dropout(0.1), toy_models.make_model(seed)).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = toy_models.dataset(1024, seed)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    batches = iter(loader)
    for _ in range(steps):
        try:
            xb, yb = next(batches)
        except StopIteration:
            batches = iter(loader)
            xb, yb = next(batches)
        loss = toy_models.loss_fn(model, xb.to(device), yb.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def accumulating_op(device: str) -> str:
    """The name of the accumulating operation ``nondeterministic_op`` runs on
    ``device``: the one torch lists as nondeterministic there."""
    validate.one_of("device", device, ("cpu", "cuda"))
    return "index_add_" if device == "cuda" else "index_put_(accumulate=True)"


def _accumulate(idx, src, buckets, device):
    out = torch.zeros(buckets, device=device)
    if device == "cuda":  # CUDA index_add_ adds with atomics
        return out.index_add_(0, idx, src)
    return out.index_put_((idx,), src, accumulate=True)  # CPU: atomics across threads


@dataclass(frozen=True)
class Accumulation:
    """``repeats`` calls of the accumulating op on the same inputs."""

    distinct: int  # how many different results (bitwise) the calls gave
    max_diff: float  # largest difference between any result and the first
    median_s: float  # median seconds a call
    repeats: int


def nondeterministic_op(
    deterministic: bool,
    n: int = 1_000_000,
    buckets: int = 100,
    repeats: int = 8,
    device: str = "cpu",
    seed: int = 0,
) -> Accumulation:
    """Accumulate ``n`` float32 values into ``buckets`` slots with
    ``accumulating_op(device)`` ``repeats`` times, with
    torch.use_deterministic_algorithms set as asked.

    The fast path adds with atomics from many threads (CPU) or many GPU
    threads, in whatever order they arrive; float addition is not associative,
    so the bits can change from call to call (whether they do in a given run
    depends on how the threads overlap).
    """
    validate.boolean("deterministic", deterministic)
    validate.positive_int("n", n)
    validate.positive_int("buckets", buckets)
    validate.positive_int("repeats", repeats)
    validate.one_of("device", device, ("cpu", "cuda"))
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(n, generator=g).to(device)  # (n,)
    idx = torch.randint(0, buckets, (n,), generator=g).to(device)  # (n,)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        outs, times = [], []
        for _ in range(repeats + 1):  # the first call warms up
            timing.sync(device)
            start = time.perf_counter()
            out = _accumulate(idx, src, buckets, device)
            timing.sync(device)
            times.append(time.perf_counter() - start)
            outs.append(out.cpu())
    finally:
        torch.use_deterministic_algorithms(before)
    outs, times = outs[1:], sorted(times[1:])
    distinct = len({o.numpy().tobytes() for o in outs})
    spread = max(float((o - outs[0]).abs().max()) for o in outs)
    return Accumulation(distinct, spread, times[len(times) // 2], repeats)


@dataclass(frozen=True)
class StepTimes:
    """Median seconds of a training step in each mode, and where they were measured."""

    default_s: float
    deterministic_s: float
    device: str

    @property
    def ratio(self) -> float:
        return self.deterministic_s / self.default_s


def time_steps(
    steps: int,
    seed: int = 0,
    batch_size: int = 64,
    device: str = "cpu",
    threads: int | None = 1,
) -> StepTimes:
    """Median seconds of one training step of the ``seeded_run`` model, default
    and deterministic.

    One model trains for ``2 * steps`` steps after two warm-up steps, switching
    torch.use_deterministic_algorithms on every step, so both modes see the same
    model, the same warm caches and the same bursts of load from elsewhere on a
    shared machine; the median of each mode's steps ignores the bursts. On the
    CPU it runs on ``threads`` threads (None: as set): a step this small only
    waits for its threads to sync when the CPU is shared."""
    validate.positive_int("steps", steps)
    validate.positive_int("batch_size", batch_size)
    validate.one_of("device", device, ("cpu", "cuda"))
    with timing.cpu_threads(threads, device, name="threads"):
        return _interleaved_step_times(steps, batch_size, seed, device)


def _interleaved_step_times(steps, batch_size, seed, device) -> StepTimes:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Dropout(0.1), toy_models.make_model(seed)).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = toy_models.dataset(batch_size * 4, seed)
    before = torch.are_deterministic_algorithms_enabled()
    times = {False: [], True: []}
    try:
        for i in range(2 * steps + 2):
            det = bool(i % 2)
            torch.use_deterministic_algorithms(det)
            j = (i % 4) * batch_size
            xb, yb = x[j : j + batch_size].to(device), y[j : j + batch_size].to(device)
            timing.sync(device)
            start = time.perf_counter()
            loss = toy_models.loss_fn(model, xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            timing.sync(device)
            if i >= 2:  # the first two steps warm up
                times[det].append(time.perf_counter() - start)
        where = devices.device_description(device)
    finally:
        torch.use_deterministic_algorithms(before)
    median = {det: sorted(t)[len(t) // 2] for det, t in times.items()}
    return StepTimes(median[False], median[True], where)


@dataclass(frozen=True)
class DeterminismResult:
    """What the determinism section measures."""

    device: str  # where the seeded runs and the accumulating op ran
    same_seed_max_diff: (
        float  # two runs, same seed, deterministic mode: largest weight difference
    )
    same_seed_equal: bool  # ... bitwise equal
    other_seed_max_diff: float  # a run with another seed against the first
    op: str
    n: int
    buckets: int
    fast: Accumulation  # the op, default mode
    safe: Accumulation  # the op, deterministic mode
    step: StepTimes  # a training step in both modes (CPU, one thread)
    steps: int


def determinism_demo(
    n: int = 1_000_000,
    buckets: int = 10,
    repeats: int = 12,
    steps: int = 40,
    device: str = "cpu",
    seed: int = 0,
) -> DeterminismResult:
    """Everything the determinism section measures: two seeded runs with the
    same seed and one with another, on ``device`` under deterministic
    algorithms (on CUDA this sets CUBLAS_WORKSPACE_CONFIG first, see
    ``set_deterministic_env``); the accumulating op on ``device`` with and
    without deterministic algorithms; and the per-step time of the MLP on the
    CPU (one thread) in both modes."""
    validate.one_of("device", device, ("cpu", "cuda"))
    set_deterministic_env(device)
    a, b, c = (
        seeded_run(seed=s, device=device, deterministic=True)
        for s in (seed, seed, seed + 1)
    )
    fast = nondeterministic_op(
        False, n=n, buckets=buckets, repeats=repeats, device=device, seed=seed
    )
    safe = nondeterministic_op(
        True, n=n, buckets=buckets, repeats=repeats, device=device, seed=seed
    )
    return DeterminismResult(
        device=devices.device_description(device),
        same_seed_max_diff=max_abs_difference(a, b),
        same_seed_equal=same_weights(a, b),
        other_seed_max_diff=max_abs_difference(a, c),
        op=accumulating_op(device),
        n=n,
        buckets=buckets,
        fast=fast,
        safe=safe,
        step=time_steps(steps, seed=seed),
        steps=steps,
    )
