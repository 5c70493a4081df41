"""Tests of the faults chapter's torch demos: real multi-process runs on CPU (gloo)."""

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mlbook.faults import formulas as faults
from mlbook.faults import experiments as faults_demos

MULTIPROCESS_BUDGET_S = 60


def _alive_with(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(proc.name))
    return pids


def test_elastic_restart_ends_identical_to_uninterrupted_run():
    start = time.perf_counter()
    kw = dict(steps=12, ckpt_every=4, seed=0, timeout_s=MULTIPROCESS_BUDGET_S)
    ref = faults_demos.run_elastic(fail_step=None, launcher="fork", **kw)
    run = faults_demos.run_elastic(fail_step=6, fail_rank=1, max_restarts=1, **kw)
    elapsed = time.perf_counter() - start
    s = run.summary
    assert s.attempts == 2                                   # torchrun restarted the group once
    assert s.failed_at_step == 6 and s.resumed_from_step == 4 and s.redone_steps == 2
    assert s.final_step == 12 and s.steps_done == 12 + 2
    assert any(e["kind"] == "fail" and e["rank"] == 1 and e["attempt"] == 0 for e in run.events)
    assert all(e["attempt"] == 0 for e in ref.events)
    assert faults_demos.same_weights(ref.final_state, run.final_state)
    # and the check can fail: a different seed gives different weights
    other = {k: v + 1e-7 for k, v in ref.final_state.items()}
    assert not faults_demos.same_weights(ref.final_state, other)
    assert elapsed < MULTIPROCESS_BUDGET_S, f"took {elapsed:.1f} s"


def test_torchrun_timeout_kills_every_process(tmp_path):
    marker = str(tmp_path / "slow")
    Path(marker).mkdir()
    with pytest.raises(TimeoutError, match="timeout_s"):
        faults_demos.torchrun("mlbook.faults.elastic_script",
                              ["--workdir", marker, "--steps", "1000", "--step-s", "1.0"],
                              nproc=2, timeout_s=8)
    time.sleep(0.5)
    assert _alive_with(marker) == []


def test_corruption_caught_before_the_step_and_clean_runs_silent():
    start = time.perf_counter()
    rep = faults_demos.run_corruption(nproc=3, steps=6, flip_step=3, flip_rank=1, seed=0,
                                      timeout_s=MULTIPROCESS_BUDGET_S)
    elapsed = time.perf_counter() - start

    def alarms(name, key):
        return [r["step"] for r in rep[name]["steps"] if r[key]]

    assert alarms("clean", "norm_alarm") == [] and alarms("clean", "checksum_alarm") == []
    assert rep["clean"]["replicas_agree"] and rep["clean"]["max_weight_gap"] == 0.0
    # exponent flip before the all-reduce: the norm check names rank 1; checksums agree
    assert alarms("exponent_before", "norm_alarm") == [3]
    assert alarms("exponent_before", "checksum_alarm") == []
    assert rep["exponent_before"]["steps"][3]["norm_suspects"] == [1]
    assert rep["exponent_before"]["steps"][3]["skipped"]
    # mantissa flip after the all-reduce: invisible to norms, caught by the checksum
    assert alarms("mantissa_after", "norm_alarm") == []
    assert alarms("mantissa_after", "checksum_alarm") == [3]
    assert rep["mantissa_after"]["steps"][3]["checksum_suspects"] == [1]
    assert rep["mantissa_after"]["replicas_agree"]           # the step was skipped everywhere
    # with the checks off the replicas silently fork
    assert not rep["mantissa_after_unchecked"]["replicas_agree"]
    assert rep["mantissa_after_unchecked"]["max_weight_gap"] > 0
    assert elapsed < MULTIPROCESS_BUDGET_S, f"took {elapsed:.1f} s"


def test_loss_spike_is_detected_and_rewind_and_skip_recovers():
    bad = (60, 64)
    plain = faults_demos.spike_run(steps=110, bad=bad)
    rescued = faults_demos.spike_run(steps=110, bad=bad,
                                     policy=faults.RewindPolicy(rewind_steps=5, skip_batches=15))
    never = faults_demos.spike_run(steps=110, bad=(0, 0))
    assert plain.spikes[0] == bad[0]
    assert never.spikes == []
    assert len(rescued.rewinds) == 1
    plan = rescued.rewinds[0]
    assert plan.resume_step == 50 and (plan.skip_start, plan.skip_end) == (50, 65)
    assert rescued.spikes == [bad[0]]                        # no second spike after the skip
    assert not any(bad[0] <= b < bad[1] for b in rescued.batches)
    assert rescued.batches[50] == 65                         # step 50 reads batch 65 after the skip
    tail = lambda r: float(np.mean(r.losses[-20:]))
    assert tail(rescued) < 1.5 * tail(never) and tail(plain) > 2 * tail(never)


def test_spike_run_bad_input():
    with pytest.raises(ValueError, match="bad"):
        faults_demos.spike_run(steps=10, bad=(5, 2))
    with pytest.raises(ValueError, match="steps"):
        faults_demos.spike_run(steps=0)


def test_seeded_runs_are_bitwise_identical():
    a, b = faults_demos.seeded_run(seed=3, steps=10), faults_demos.seeded_run(seed=3, steps=10)
    c = faults_demos.seeded_run(seed=4, steps=10)
    assert faults_demos.same_weights(a, b)
    assert not faults_demos.same_weights(a, c)


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs two threads to race")
def test_nondeterministic_op_and_deterministic_mode():
    fast = faults_demos.nondeterministic_op(False, n=1_000_000, repeats=8)
    safe = faults_demos.nondeterministic_op(True, n=1_000_000, repeats=8)
    assert fast["distinct"] > 1 and fast["max_diff"] > 0
    assert safe["distinct"] == 1 and safe["max_diff"] == 0
    assert not torch.are_deterministic_algorithms_enabled()   # the setting is restored


def test_demo_bad_input():
    with pytest.raises(ValueError, match="fail_step"):
        faults_demos.run_elastic(steps=10, fail_step=10)
    with pytest.raises(ValueError, match="fail_rank"):
        faults_demos.run_elastic(fail_rank=2, nproc=2)
    with pytest.raises(ValueError, match="launcher"):
        faults_demos.run_elastic(fail_step=5, launcher="fork")
    with pytest.raises(ValueError, match="launcher"):
        faults_demos.run_elastic(fail_step=None, launcher="mpi")
    with pytest.raises(ValueError, match="flip_rank"):
        faults_demos.run_corruption(nproc=3, flip_rank=3)
    with pytest.raises(ValueError, match="flip_step"):
        faults_demos.run_corruption(steps=4, flip_step=4)
    with pytest.raises(ValueError, match="nproc"):
        faults_demos.torchrun("mlbook.faults.elastic_script", [], nproc=0)
    with pytest.raises(ValueError, match="repeats"):
        faults_demos.nondeterministic_op(True, repeats=0)


def test_time_steps_interleaves_and_restores_settings():
    threads = torch.get_num_threads()
    s = faults_demos.time_steps(5)
    assert s[False] > 0 and s[True] > 0 and "1 thread" in s["device"]
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(ValueError, match="steps"):
        faults_demos.time_steps(0)
    with pytest.raises(ValueError, match="threads"):
        faults_demos.time_steps(5, threads=0)


def test_determinism_demo_reruns_bitwise():
    d = faults_demos.determinism_demo(n=50_000, repeats=3, steps=5)
    assert d["same_seed"] and not d["other_seed"]
    assert d["safe"]["distinct"] == 1
    assert d["op"] == faults_demos.accumulating_op("cpu")
