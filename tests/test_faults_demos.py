"""Tests of the faults chapter's torch demos: real multi-process runs on CPU
(gloo), checked by what they do, never by how long they take."""

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mlbook.common_torch import toy_models
from mlbook.common_torch.checkpoint import Checkpointer
from mlbook.common_torch.launch import fork_group, torchrun
from mlbook.faults import experiments
from mlbook.faults import formulas as faults
from tests.helpers import stuck

# A hang guard, not a speed test: a launch still running after this long is
# killed and the test fails. On the 2-core machine these runs take 5-30 s.
HANG_GUARD_S = 180


def _alive_with(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (
                (proc / "cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if text in cmd:
            pids.append(int(proc.name))
    return pids


# The restart that ends identical to the uninterrupted run is the faults
# page's own demo at test sizes; its glued outcome is checked in
# tests/test_faults_page.py (a third torchrun here took 23 s of every run).


def test_same_weights_tells_weights_one_float_step_apart():
    ref = toy_models.make_model(0).state_dict()
    assert experiments.same_weights(ref, {k: v.clone() for k, v in ref.items()})
    assert experiments.max_abs_difference(ref, ref) == 0.0
    other = {k: torch.nextafter(v, v + 1) for k, v in ref.items()}
    assert not experiments.same_weights(ref, other)
    assert experiments.max_abs_difference(ref, other) > 0


@pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled"
)  # DCP's single-process notice
def test_exhausted_restarts_fail_clearly_and_leave_the_last_checkpoint_loadable(
    tmp_path,
):
    # The one rank dies after step 6 in every attempt; --max-restarts 1 allows two
    # attempts. One rank, not two: each worker is an interpreter that imports
    # torch and torch._dynamo (about 3.5 core-s), and what is checked here (the
    # attempts counted, the checkpoint named, and that it loads) does not
    # depend on how many ranks saved it. Two ranks, the healthy one torn down
    # when its peer dies, run in the faults page's restart demo
    # (tests/test_faults_page.py).
    with pytest.raises(experiments.RestartsExhausted, match="max_restarts=1") as info:
        experiments.run_elastic(
            steps=12,
            ckpt_every=4,
            fail_step=6,
            fail_rank=0,
            nproc=1,
            max_restarts=1,
            fail_attempts=None,
            workdir=tmp_path,
            timeout_s=HANG_GUARD_S,
        )
    err = info.value
    assert err.max_restarts == 1 and err.attempts == 2
    assert err.last_checkpoint_step == 4  # the newest checkpoint before step 6
    assert "exhausted" in str(err) and "step 4" in str(err)
    # The checkpoint it names loads, in a fresh single process, into the same model.
    ckpt = Checkpointer(err.checkpoint_dir)
    model = toy_models.make_model(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loaded = ckpt.load(model, opt)
    assert loaded.step == 4 and ckpt.steps()[-1] == 4
    assert not experiments.same_weights(
        before, model.state_dict()
    )  # trained weights came back
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())
    assert opt.state_dict()["state"]  # and the Adam moments


def test_fail_attempts_counts_attempts():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="fail_attempts"):
            experiments.run_elastic(fail_attempts=bad)


def test_torchrun_timeout_kills_every_process(tmp_path):
    # the agent and its worker, which torchrun starts in a session of its own
    # (what killing the agent's process group alone would miss); one worker: a
    # second is another interpreter importing torch, killed the same way
    marker = str(tmp_path / "slow")
    Path(marker).mkdir()
    with pytest.raises(TimeoutError, match="timeout_s"):
        torchrun(
            experiments.ELASTIC_MODULE,
            ["--workdir", marker, "--steps", "1000", "--step-s", "1.0"],
            nproc=1,
            timeout_s=8,
        )
    time.sleep(0.5)
    assert _alive_with(marker) == []


def test_fork_group_timeout_names_where_each_rank_was_stuck(tmp_path):
    # the fork server first, so that the 5 s below are the ranks' (its start
    # took over 5 s once, with three test workers on this 2-core machine)
    fork_group(stuck.returns, [], nproc=1, timeout_s=HANG_GUARD_S)
    with pytest.raises(TimeoutError, match="timeout_s") as err:
        fork_group(stuck.stuck_forever, [str(tmp_path)], nproc=2, timeout_s=5)
    text = str(err.value)
    # each rank's stack, written by SIGUSR1 before the kill, names
    # the function it was in
    assert text.count("stuck_forever") >= 2 and "--- rank 1 ---" in text
    # the workers were children of the fork server, not forks of this (threaded) process
    pids, parents = zip(
        *(map(int, Path(tmp_path, f"rank{r}").read_text().split()) for r in range(2)),
        strict=True,
    )
    assert len(set(parents)) == 1 and os.getpid() not in parents
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # killed and reaped


def test_corruption_caught_before_the_step_and_clean_runs_silent():
    rep = experiments.run_corruption(
        nproc=3, steps=6, flip_step=3, flip_rank=1, seed=0, timeout_s=HANG_GUARD_S
    )
    clean, expo = rep.scenarios["clean"], rep.scenarios["exponent_before"]
    mant, off = (
        rep.scenarios["mantissa_after"],
        rep.scenarios["mantissa_after_unchecked"],
    )
    assert list(rep.scenarios) == [
        "clean",
        "exponent_before",
        "mantissa_after",
        "mantissa_after_unchecked",
    ]
    assert clean.alarm_steps("norm") == () and clean.alarm_steps("checksum") == ()
    assert clean.replicas_agree and clean.max_weight_gap == 0.0
    # exponent flip before the all-reduce: the norm check names rank 1; checksums agree
    assert expo.alarm_steps("norm") == (3,) and expo.alarm_steps("checksum") == ()
    assert expo.suspects("norm") == (1,) and expo.steps[3].skipped
    assert expo.steps[3].norms[1] == float("inf")
    # mantissa flip after the all-reduce: invisible to norms, caught by the checksum
    assert mant.alarm_steps("norm") == () and mant.alarm_steps("checksum") == (3,)
    assert mant.suspects("checksum") == (1,)
    assert mant.replicas_agree  # the step was skipped everywhere
    # with the checks off the replicas silently fork
    assert not off.replicas_agree and off.max_weight_gap > 0
    assert not any(s.skipped for s in off.steps)


def test_corruption_flags_whichever_rank_is_hit():
    rep = experiments.run_corruption(
        nproc=3, steps=3, flip_step=1, flip_rank=2, seed=1, timeout_s=HANG_GUARD_S
    )
    assert rep.scenarios["exponent_before"].suspects("norm") == (2,)
    assert rep.scenarios["mantissa_after"].suspects("checksum") == (2,)
    assert rep.scenarios["mantissa_after"].alarm_steps("checksum") == (1,)


def test_loss_spike_is_detected_and_rewind_and_skip_recovers():
    bad = (60, 64)
    plain = experiments.spike_run(steps=110, bad=bad)
    rescued = experiments.spike_run(
        steps=110, bad=bad, policy=faults.RewindPolicy(rewind_steps=5, skip_batches=15)
    )
    never = experiments.spike_run(steps=110, bad=(0, 0))
    assert plain.spikes[0] == bad[0]
    assert never.spikes == ()
    assert len(rescued.rewinds) == 1
    plan = rescued.rewinds[0]
    assert plan.resume_step == 50 and (plan.skip_start, plan.skip_end) == (50, 65)
    assert rescued.spikes == (bad[0],)  # no second spike after the skip
    assert not any(bad[0] <= b < bad[1] for b in rescued.batches)
    assert rescued.batches[50] == 65  # step 50 reads batch 65 after the skip
    # The rescued run ends nearer the clean run than the run that ploughed on.
    assert abs(rescued.mean_loss(20) - never.mean_loss(20)) < abs(
        plain.mean_loss(20) - never.mean_loss(20)
    )


def test_spike_run_restores_the_thread_count():
    threads = torch.get_num_threads()
    experiments.spike_run(steps=5)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(bad=(5, 2)), "bad"),
        (dict(bad=[1, 2]), "bad"),
        (dict(steps=0), "steps"),
        (dict(max_rewinds=-1), "max_rewinds"),
        (dict(policy="rewind"), "policy"),
        (dict(threads=0), "threads"),
        (dict(detector={}), "detector"),
        (dict(lr=0), "lr"),
    ],
)
def test_spike_run_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        experiments.spike_run(**{"steps": 10, **kw})


def test_seeded_runs_are_bitwise_identical():
    a, b = (
        experiments.seeded_run(seed=3, steps=10),
        experiments.seeded_run(seed=3, steps=10),
    )
    c = experiments.seeded_run(seed=4, steps=10)
    assert experiments.same_weights(a, b)
    assert not experiments.same_weights(a, c)
    d = experiments.seeded_run(seed=3, steps=10, deterministic=True)
    assert experiments.same_weights(
        a, d
    )  # on the CPU the mode changes none of these kernels


def test_deterministic_mode_gives_one_result_and_restores_the_setting():
    # Whether the default path's threads race in a given run depends on the machine's
    # load; what the mode guarantees does not: one result, every call.
    fast = experiments.nondeterministic_op(False, n=200_000, repeats=4)
    safe = experiments.nondeterministic_op(True, n=200_000, repeats=4)
    assert safe.distinct == 1 and safe.max_diff == 0
    assert 1 <= fast.distinct <= fast.repeats and (fast.max_diff == 0) == (
        fast.distinct == 1
    )
    assert not torch.are_deterministic_algorithms_enabled()
    # The deterministic result is the float32 sum per slot that a fixed order gives,
    # close to the exact (float64) sums.
    g = torch.Generator().manual_seed(0)
    src, idx = (
        torch.randn(200_000, generator=g),
        torch.randint(0, 100, (200_000,), generator=g),
    )
    out = torch.zeros(100).index_put_((idx,), src, accumulate=True)
    exact = torch.zeros(100, dtype=torch.float64).index_add_(0, idx, src.double())
    # float32 rounding of ~2,000 adds per slot: at most 2,000 x 2^-24 x partial sums
    # under 150 = 1.8e-2 (typically a hundred times less)
    assert torch.allclose(out.double(), exact, rtol=0, atol=1.8e-2)


def test_float_addition_depends_on_the_order():
    # Why an atomic accumulation can change its bits: the same values summed in
    # another order give another float32 result.
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    forward = np.float32(0)
    for v in x:
        forward += v
    backward = np.float32(0)
    for v in x[::-1]:
        backward += v
    assert forward != backward


def test_deterministic_env_sets_cublas_workspace_only_for_cuda():
    assert experiments.deterministic_env("cpu", environ={}) == {}
    assert experiments.deterministic_env("cuda", environ={}) == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8"
    }
    # an accepted value the user chose is kept
    assert (
        experiments.deterministic_env(
            "cuda", environ={"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
        )
        == {}
    )
    assert (
        experiments.deterministic_env(
            "cuda", environ={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        )
        == {}
    )
    with pytest.raises(ValueError, match="CUBLAS_WORKSPACE_CONFIG"):
        experiments.deterministic_env(
            "cuda", environ={"CUBLAS_WORKSPACE_CONFIG": ":0:0"}
        )
    with pytest.raises(ValueError, match="device"):
        experiments.deterministic_env("tpu", environ={})


def test_set_deterministic_env_writes_the_environment_before_cuda(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert experiments.set_deterministic_env("cpu") == {}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert experiments.set_deterministic_env("cuda") == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8"
    }
    import os

    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert experiments.set_deterministic_env("cuda") == {}  # already set: nothing to do
    # too late once CUDA has started: cuBLAS has read its setting
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="before any CUDA work"):
        experiments.set_deterministic_env("cuda")


def test_demo_bad_input():
    with pytest.raises(ValueError, match="fail_step"):
        experiments.run_elastic(steps=10, fail_step=10)
    with pytest.raises(ValueError, match="fail_rank"):
        experiments.run_elastic(fail_rank=2, nproc=2)
    with pytest.raises(ValueError, match="launcher"):
        experiments.run_elastic(fail_step=5, launcher="fork")
    with pytest.raises(ValueError, match="launcher"):
        experiments.run_elastic(fail_step=None, launcher="mpi")
    with pytest.raises(ValueError, match="max_restarts"):
        experiments.run_elastic(max_restarts=-1)
    with pytest.raises(ValueError, match="flip_rank"):
        experiments.run_corruption(nproc=3, flip_rank=3)
    with pytest.raises(ValueError, match="flip_step"):
        experiments.run_corruption(steps=4, flip_step=4)
    with pytest.raises(ValueError, match="nproc"):
        experiments.run_corruption(nproc=1, flip_rank=0)
    with pytest.raises(ValueError, match="nproc"):
        torchrun(experiments.ELASTIC_MODULE, [], nproc=0)
    with pytest.raises(ValueError, match="repeats"):
        experiments.nondeterministic_op(True, repeats=0)
    with pytest.raises(ValueError, match="deterministic"):
        experiments.nondeterministic_op("yes")
    with pytest.raises(ValueError, match="device"):
        experiments.determinism_demo(device="tpu")


def test_time_steps_interleaves_and_restores_settings():
    threads = torch.get_num_threads()
    s = experiments.time_steps(5)
    assert s.default_s > 0 and s.deterministic_s > 0 and "1 thread" in s.device
    assert s.ratio == s.deterministic_s / s.default_s
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(ValueError, match="steps"):
        experiments.time_steps(0)
    with pytest.raises(ValueError, match="threads"):
        experiments.time_steps(5, threads=0)


def test_determinism_demo_reruns_bitwise():
    d = experiments.determinism_demo(n=50_000, repeats=3, steps=5)
    assert d.same_seed_equal and d.same_seed_max_diff == 0 and d.other_seed_max_diff > 0
    assert d.safe.distinct == 1
    assert d.op == experiments.accumulating_op("cpu") and d.device.startswith("CPU:")


def test_what_the_installed_torch_says_about_the_cublas_check():
    """State only what the installed torch shows. Its CPU
    build cannot run a cuBLAS call, but its headers and docs can be read: older
    releases declared at::Context::alertCuBLASConfigNotDeterministic in
    ATen/Context.h (the function that raised when CUBLAS_WORKSPACE_CONFIG was
    missing) and named the variable in use_deterministic_algorithms's docs.
    The faults page says torch 2.13 does neither; this holds it to that."""
    from pathlib import Path

    import torch

    assert torch.__version__.startswith("2.13")
    header = Path(torch.__file__).parent / "include" / "ATen" / "Context.h"
    text = header.read_text()
    assert "alertNotDeterministic" in text  # the header is the right one
    assert "alertCuBLASConfigNotDeterministic" not in text
    assert "CUBLAS_WORKSPACE_CONFIG" not in (torch.use_deterministic_algorithms.__doc__)
    # and on the CPU, deterministic mode runs a matmul with the variable unset
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        x = torch.ones(4, 4)
        assert torch.equal(x @ x, torch.full((4, 4), 4.0))
    finally:
        torch.use_deterministic_algorithms(before)
    page = (
        Path(__file__).resolve().parent.parent / "notebooks" / "faults.md"
    ).read_text()
    page = " ".join(page.split())
    assert (
        "newer releases, the one this book pins among them, no longer check" not in page
    )
    assert "alertCuBLASConfigNotDeterministic" in page
