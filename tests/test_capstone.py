"""The capstone chapter's machinery: the bucket rules against named operators and
kernels, the accounting against a hand-worked timeline, the loop's defects as the
profiler sees them, the CUDA branches chosen by device (with a synthetic trace, no
GPU needed), the gloo run's straggler, and tools/gpu_check.py's refusal and layout."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from mlbook.capstone import experiments as ex
from mlbook.capstone import experiments_comm as comm
from mlbook.capstone import experiments_profile as prof
from mlbook.capstone import formulas as cf
from mlbook.common_torch import mamf
from mlbook.common_torch import reference_loop as rl

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def tiny_sizes(**kw) -> cf.LadderSizes:
    """A ladder small enough for a unit test (seconds, not tens of them)."""
    base = dict(
        n_layers=1,
        d_model=64,
        n_heads=2,
        vocab_size=300,
        seq_len=16,
        batch=2,
        small_micro_batch=1,
        steps=2,
        profiled_steps=2,
        probe_budget_s=0.05,
        tokenizer_vocab=300,
        corpus_bytes=60_000,
        log_every=20,
        cpu_threads=1,
        again_budget_s=5.0,
    )
    return cf.LadderSizes(**{**base, **kw})


@pytest.fixture(scope="module")
def data():
    return rl.TextData(tiny_sizes())


# --- bucket rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,scope,bucket",
    [
        ("aten::linear", "forward", "matmul"),
        ("autograd::engine::evaluate_function: MmBackward0", "backward", "matmul"),
        ("autograd::engine::evaluate_function: BmmBackward0", "backward", "attention"),
        ("aten::matmul", "forward", "attention"),  # a bare @: Q K^T or P V in this GPT
        ("aten::softmax", "forward", "attention"),
        ("aten::_log_softmax", "forward", "elementwise"),  # the loss, not attention
        (
            "autograd::engine::evaluate_function: LogSoftmaxBackward0",
            "backward",
            "elementwise",
        ),
        ("aten::scaled_dot_product_attention", "forward", "attention"),
        (
            "autograd::engine::evaluate_function: "
            "ScaledDotProductFlashAttentionForCpuBackward0",
            None,
            "attention",
        ),
        ("aten::layer_norm", "forward", "elementwise"),
        ("aten::gelu", None, "elementwise"),
        ("aten::embedding", "forward", "elementwise"),
        ("aten::mul_", "optimizer", "optimizer"),  # the scope decides
        ("aten::copy_", "data", "data"),
        ("aten::item", "log", "sync"),
        ("aten::linear", "recompute", "recompute"),
        ("gloo:all_reduce", None, "comm"),
        # CUDA kernel names, for a GPU trace whose launcher is unknown
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", None, "matmul"),
        (
            "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>",
            None,
            "attention",
        ),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", None, "comm"),
        ("Memcpy HtoD (Pageable -> Device)", None, "data"),
        (
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::GeluCUDAKernelImpl>",
            None,
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::"
            "multi_tensor_apply_kernel<FusedAdamMathFunctor>",
            None,
            "optimizer",
        ),
    ],
)
def test_bucket_rules(name, scope, bucket):
    assert cf.bucket_of(name, scope) == bucket


def test_account_by_hand():
    # window 10 s: a matmul 0-4 with a recompute scope 2-3 inside it (priority 2 wins),
    # a data scope 5-6 over an elementwise op 5.5-7, an op sticking out
    # of the window at 9-12.
    items = [
        (0, 4, "matmul", 1),
        (2, 3, "recompute", 2),
        (5, 6, "data", 2),
        (5.5, 7, "elementwise", 1),
        (9, 12, "optimizer", 1),
    ]
    out = cf.account(10.0, items)
    # by hand: matmul 0-2 and 3-4 = 3; recompute 1; data 5-6 = 1; elementwise 6-7 = 1;
    # optimizer 9-10 = 1; idle 4-5 and 7-9 = 3; total 10.
    assert out == {
        "matmul": 3.0,
        "attention": 0.0,
        "elementwise": 1.0,
        "optimizer": 1.0,
        "data": 1.0,
        "sync": 0.0,
        "comm": 0.0,
        "recompute": 1.0,
        "idle": 3.0,
    }


# --- reading a trace: CPU and CUDA branches on synthetic events -----------------------


def _cpu_trace():
    # one step 0-100 us on thread 1: forward (linear 10-40 with its mm 12-38),
    # a data scope 45-55, an optimizer scope 60-90 holding two ops;
    # nothing runs 40-45, 55-60, 90-100.
    P = cf.SCOPE_PREFIX
    evs = [
        prof.Ev(P + "step", 0, 100, 1),
        prof.Ev(P + "forward", 5, 42, 1),
        prof.Ev("aten::linear", 10, 40, 1),
        prof.Ev("aten::mm", 12, 38, 1),
        prof.Ev(P + "data", 45, 55, 1),
        prof.Ev("aten::copy_", 46, 50, 1),
        prof.Ev(P + "optimizer", 60, 90, 1),
        prof.Ev("aten::mul_", 61, 70, 1),
        prof.Ev("aten::add_", 71, 80, 1),
        prof.Ev("aten::mm", 200, 300, 2),
    ]  # another thread, another time: ignored
    return prof.nest(evs)


def test_cpu_account_of_a_synthetic_step():
    acc = prof.account_step(_cpu_trace(), "cpu")
    us = {k: round(v * 1e6, 6) for k, v in acc.buckets.items()}
    assert acc.window_s == pytest.approx(100e-6)
    assert us == {
        "matmul": 30.0,
        "attention": 0.0,
        "elementwise": 0.0,
        "optimizer": 30.0,
        "data": 10.0,
        "sync": 0.0,
        "comm": 0.0,
        "recompute": 0.0,
        "idle": 30.0,
    }
    assert acc.calls == {
        "aten::linear": 1,
        "aten::mm": 1,
        "aten::copy_": 1,
        "aten::mul_": 1,
        "aten::add_": 1,
    }
    assert acc.scope_calls == {"forward": 2, "data": 1, "optimizer": 2}


def test_cuda_account_buckets_kernels_by_their_launcher():
    # Host: step 0-100; forward launches aten::linear -> aten::mm (id 7);
    # the optimizer scope launches aten::_fused_adamw_ (id 9); a data copy_ (id 11).
    # GPU: the gemm kernel 20-50 (linked to 7), the adam kernel 70-80 (linked to 9), a
    # copy 2-6 (linked to 11). Host-side time is GPU idle time.
    P = cf.SCOPE_PREFIX
    evs = [
        prof.Ev(P + "step", 0, 100, 1),
        prof.Ev(P + "data", 1, 8, 1),
        prof.Ev("aten::copy_", 1, 7, 1, id=11),
        prof.Ev(P + "forward", 10, 30, 1),
        prof.Ev("aten::linear", 10, 20, 1, id=6),
        prof.Ev("aten::mm", 11, 19, 1, id=7),
        prof.Ev(
            "cudaLaunchKernel", 12, 13, 1, id=7, linked_id=7
        ),  # the runtime call: not the launcher
        prof.Ev(P + "optimizer", 60, 65, 1),
        prof.Ev("aten::_fused_adamw_", 60, 64, 1, id=9),
        prof.Ev("sm90_xmma_gemm_f32", 20, 50, 7, "cuda", linked_id=7),
        prof.Ev("void fused_adam_kernel", 70, 80, 7, "cuda", linked_id=9),
        prof.Ev("Memcpy HtoD (Pageable -> Device)", 2, 6, 7, "cuda", linked_id=11),
    ]
    acc = prof.account_step(prof.nest(evs), "cuda")
    us = {k: round(v * 1e6, 6) for k, v in acc.buckets.items()}
    assert us == {
        "matmul": 30.0,
        "attention": 0.0,
        "elementwise": 0.0,
        "optimizer": 10.0,
        "data": 4.0,
        "sync": 0.0,
        "comm": 0.0,
        "recompute": 0.0,
        "idle": 56.0,
    }


def test_the_device_picks_the_cuda_branches(monkeypatch):
    from torch.profiler import ProfilerActivity

    from mlbook.common_torch.device import pick_device

    assert prof.profiler_activities("cuda") == [
        ProfilerActivity.CPU,
        ProfilerActivity.CUDA,
    ]
    assert prof.profiler_activities("cpu") == [ProfilerActivity.CPU]
    assert rl.step_clock("cuda", None) == "wall" and rl.step_clock("cpu", 1) == "thread"
    assert (
        rl.step_clock("cpu", 2) == "wall"
    )  # other threads' CPU time is not the caller's
    gpu, cpu = cf.ladder_sizes("cuda", False), cf.ladder_sizes("cpu", False)
    assert (
        gpu.n_layers * gpu.d_model**2 > 10 * cpu.n_layers * cpu.d_model**2
    )  # a larger model on a GPU
    assert (
        gpu.vocab_size == 50257 and cf.padded_vocab(gpu.vocab_size) == 50304
    )  # nanoGPT's padding
    page_fixes = cf.ladder_fixes(
        bf16_fast=True, compile_on=True
    )  # what the page passes on CUDA
    assert [f.name for f in page_fixes][-2:] == ["bf16", "compile"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto") == "cuda"


def test_time_and_profile_takes_the_gpu_schedule_on_cuda(monkeypatch):
    """On CUDA each profiled step follows a warm-up step whose trace is dropped (a
    cycle of 4, with the settling step and the timed one); run here on the CPU with the
    sync and CUDA activity stubbed out."""
    monkeypatch.setattr(prof, "sync", lambda device: None)
    monkeypatch.setattr(
        prof,
        "profiler_activities",
        lambda device: [torch.profiler.ProfilerActivity.CPU],
    )
    calls = []

    def step():
        calls.append(1)
        with torch.profiler.record_function(cf.SCOPE_PREFIX + "step"):
            torch.ones(64, 64) @ torch.ones(64, 64)

    st = prof.time_and_profile(step, steps=2, profiled_steps=2, device="cuda", warmup=1)
    assert (
        len(calls) == 1 + 4 * 2
    )  # warm-up, then (settle, timed, warm-up, active) twice
    assert len(st.unprofiled_s) == 2 and len(st.profiled) == 2 and st.clock == "wall"


def test_the_residual_compares_the_fastest_steps():
    """One unprofiled and one profiled step slowed by another process do not
    move the residual: it compares the fastest of each (hand computation)."""

    def account(window_s):
        buckets = dict.fromkeys(cf.BUCKETS, 0.0) | {"matmul": window_s}
        return prof.StepAccount(window_s, buckets, (), {}, {})

    st = prof.StepTimes(
        (0.100, 0.300, 0.120),  # the 0.3 s step shared its core
        (account(0.105), account(0.500), account(0.110)),
        (0.100, 0.300, 0.120),
        "thread",
    )
    assert st.residual == pytest.approx((0.100 - 0.105) / 0.100)
    assert st.step_s == 0.120  # reported step times stay medians


def test_pooled_measurements_compare_the_medians():
    """Measured again and pooled, a rung's residual is median against median
    (hand computation): one outlier-fast profiled step, which would pin the
    fastest-against-fastest residual however many steps came after, moves it
    no more than any other step."""

    def account(window_s):
        buckets = dict.fromkeys(cf.BUCKETS, 0.0) | {"matmul": window_s}
        return prof.StepAccount(window_s, buckets, (), {}, {})

    def measured(unprofiled, profiled):
        return prof.StepTimes(
            unprofiled, tuple(map(account, profiled)), unprofiled, "thread"
        )

    first = measured((0.100, 0.102, 0.101), (0.087, 0.101, 0.103))  # 0.087: outlier
    assert first.residual == pytest.approx((0.100 - 0.087) / 0.100)  # +13 %
    pooled = first.pooled(measured((0.099, 0.103, 0.100), (0.100, 0.102, 0.104)))
    assert pooled.attempts == 2
    # medians of (0.099 0.100 0.100 0.101 0.102 0.103) and of
    # (0.087 0.100 0.101 0.102 0.103 0.104): 0.1005 and 0.1015
    assert pooled.residual == pytest.approx((0.1005 - 0.1015) / 0.1005)
    assert pooled.step_s == pytest.approx(0.1005)


def test_time_and_profile_times_no_step_right_after_a_profiled_one(monkeypatch):
    """CPU cycle: settle (untimed), timed, profiled; then one settling step
    and the rest. Call n advances a fake clock by n seconds, so the times say
    which calls were timed, and records a scope named for it, so the
    profiled steps say which calls they were (neither depends on how busy
    the machine is)."""
    now = [0.0]

    class FakeTime:  # the module's clock: perf_counter and thread_time alike
        @staticmethod
        def perf_counter():
            return now[0]

        thread_time = perf_counter

    monkeypatch.setattr(prof, "time", FakeTime)
    calls = []

    def step():
        n = len(calls) - 1  # the warm-up call is -1; after it, from 0
        calls.append(n)
        with torch.profiler.record_function(cf.SCOPE_PREFIX + "step"):
            with torch.profiler.record_function(f"call {n}"):
                now[0] += n + 1

    st = prof.time_and_profile(
        step, steps=4, profiled_steps=2, device="cpu", warmup=1, clock="wall"
    )
    assert len(calls) == 1 + 3 * 2 + 1 + 2
    # calls after the warm-up, from 0: timed 1, 4, 7, 8; profiled 2, 5
    # (never 0, 3, 6: settling)
    timed = [round(t) - 1 for t in st.unprofiled_s]
    profiled = [
        [int(name.split()[1]) for name in a.calls if name.startswith("call ")]
        for a in st.profiled
    ]
    assert (timed, profiled) == ([1, 4, 7, 8], [[2], [5]])
    assert st.wall_s == st.unprofiled_s  # the wall clock, as asked


# --- the loop and its defects ---------------------------------------------------------


def test_each_fix_changes_one_thing(data):
    sizes = tiny_sizes()
    slow = rl.slow_loop(sizes)
    assert slow.tokenise_in_loop and slow.sync_every_micro_step and slow.recompute
    assert (
        slow.attn_impl == "math" and not slow.fused_optimizer and slow.micro_batch == 1
    )
    config = slow
    for fix in cf.FIX_NAMES:
        new = rl.apply_fix(config, fix, sizes)
        changed = [k for k in vars(new) if getattr(new, k) != getattr(config, k)]
        assert len(changed) == 1, (fix, changed)
        config = new
    assert config.micro_batch == sizes.batch and config.bf16 and config.compile
    assert (
        rl.model_config(sizes, pad_vocab=True).vocab_size == 320
    )  # 300 -> next multiple of 64
    with pytest.raises(ValueError, match="fix"):
        rl.apply_fix(slow, "faster", sizes)


def test_the_profile_shows_each_defect(data):
    """The slow loop's profile has a data, sync and recompute bucket and many optimizer
    operators; the fixed loop's has none of them."""
    sizes = tiny_sizes()
    slow = ex.measure_config(rl.slow_loop(sizes), sizes, data, "cpu")
    fixed_config = rl.slow_loop(sizes)
    for fix in cf.ladder_fixes(bf16_fast=False, compile_on=False):
        fixed_config = rl.apply_fix(fixed_config, fix.name, sizes)
    fixed = ex.measure_config(fixed_config, sizes, data, "cpu")
    for st in (slow, fixed):
        for acc in st.profiled:
            assert sum(acc.buckets.values()) == pytest.approx(acc.window_s)
        assert len(st.unprofiled_s) == sizes.steps and st.clock == "thread"
    s, f = slow.account, fixed.account
    assert s.buckets["recompute"] > 0 and f.buckets["recompute"] == 0
    assert s.scope_calls["recompute"] > 0 and "recompute" not in f.scope_calls
    # the slow loop logs (one .item() and a print) on every micro-step,
    # the fixed one every 20 steps
    slow_loop, fixed_loop = (
        rl.Loop(rl.slow_loop(sizes), sizes, data),
        rl.Loop(fixed_config, sizes, data),
    )
    for _ in range(3):
        slow_loop.step()
        fixed_loop.step()
    assert len(slow_loop.sink.getvalue().splitlines()) == 3 * sizes.accumulation
    assert fixed_loop.sink.getvalue() == ""
    assert (
        "aten::scaled_dot_product_attention" in f.calls and "aten::softmax" in s.calls
    )
    assert (
        s.scope_calls["optimizer"] > 3 * f.scope_calls["optimizer"]
    )  # a for-loop over parameters
    assert s.scope_calls["data"] > 0 and s.buckets["data"] > 0


def test_the_mystery_has_two_defects_back():
    sizes = tiny_sizes()
    fixed = rl.slow_loop(sizes)
    for fix in cf.ladder_fixes(False, False):
        fixed = rl.apply_fix(fixed, fix.name, sizes)
    mystery = ex.mystery_config(sizes, "cpu")
    assert {k for k in vars(mystery) if getattr(mystery, k) != getattr(fixed, k)} == {
        "recompute",
        "fused_optimizer",
    }


@pytest.fixture(scope="module")
def probed():
    """The fp32 and bf16 ceilings at test sizes (what each ladder starts from)."""
    return ex.probe_ceilings(tiny_sizes(), "cpu", budget_s=0.02, min_run_time_s=0.005)


@pytest.fixture(scope="module")
def tiny_ladder(data, probed):
    """The whole ladder at test sizes with no seconds for measuring again:
    every rung is over the residual bar (1e-12) and may be measured 3 times,
    and each is measured once. Three tests read it (a ladder of every rung
    is about 3 core-s)."""
    return ex.run_ladder(
        tiny_sizes(again_budget_s=0.0),
        "cpu",
        data,
        probed,
        cf.ladder_fixes(False, False),
        min_run_time_s=0.005,
        residual_tol=1e-12,
        max_attempts=3,
    )


def test_a_tiny_ladder_reports_every_rung(tiny_ladder, probed):
    sizes, ladder, ceilings = tiny_sizes(), tiny_ladder, probed
    assert [r.fix for r in ladder.rungs] == ["slow loop"] + [
        f.name for f in cf.ladder_fixes(False, False)
    ]
    assert ladder.device.endswith("1 thread")
    for r in ladder.rungs:
        assert 0 < r.rates.mfu <= 1 and r.attempts == 1 and r.dtype == "fp32"
        assert r.rates.tokens_per_s == pytest.approx(
            sizes.batch * sizes.seq_len / r.step_s
        )
    # the ceiling was re-probed between rungs: refine never lowers it
    assert ladder.ceilings["fp32"].flops_per_s >= ceilings["fp32"].flops_per_s


def test_measuring_again_stops_when_its_seconds_run_out(data, probed, tiny_ladder):
    """A rung over the residual bar (here every rung: a bar of 1e-12) is
    measured again up to max_attempts times while the ladder's seconds for
    measuring again last; with none, each rung keeps its first measurement."""

    def ladder(again_budget_s):
        return ex.run_ladder(
            tiny_sizes(again_budget_s=again_budget_s),
            "cpu",
            data,
            probed,
            cf.ladder_fixes(False, False)[:1],
            min_run_time_s=0.005,
            residual_tol=1e-12,
            max_attempts=3,
        )

    none = tiny_ladder  # that bar and 3 attempts, with no seconds to measure again
    assert [r.attempts for r in none.rungs] == [1] * len(none.rungs)
    assert none.again_s == 0
    plenty = ladder(60.0)
    assert [r.attempts for r in plenty.rungs] == [3, 3]
    assert [r.times.attempts for r in plenty.rungs] == [3, 3]  # pooled
    assert 0 < plenty.again_s < 60
    with pytest.raises(ValueError, match="again_budget_s"):
        ladder(-1.0)


def test_every_rung_s_mfu_divides_by_the_final_dtype_s_peak(tiny_ladder):
    """One denominator for the whole ladder: the nominal peak of the final
    rung's dtype, so MFU is tokens/s times a constant along the ladder, and
    the faster rung always has the higher MFU whatever dtypes the rungs use."""
    ladder = tiny_ladder
    assert ladder.mfu_dtype == ladder.rungs[-1].dtype
    peak = ladder.peaks[ladder.mfu_dtype]
    for r in ladder.rungs:
        by_hand = r.tokens_per_step / r.step_s * r.flops_per_token / peak.flops_per_s
        assert r.rates.mfu == pytest.approx(by_hand, rel=1e-12)
    assert all(r.attempts == 1 for r in ladder.rungs)  # nothing pooled


def test_a_beaten_ceiling_is_swept_again_and_never_lowered():
    """A ceiling that a step beat (here: one recorded far too low)
    is widened by a longer sweep that re-times its shapes and adds more;
    the result is the best of both."""
    low = mamf.MatmulCeiling(
        1e6,
        128,
        128,
        128,
        "fp32",
        "cpu",
        (mamf.MatmulTiming(128, 128, 128, 1e6),),
        1,
        0.0,
    )
    wide = ex.widen_ceiling(low, budget_s=0.05, min_run_time_s=0.005)
    assert wide.flops_per_s > low.flops_per_s
    assert (128, 128, 128) in [
        (t.m, t.n, t.k) for t in wide.timings
    ]  # its shapes were timed again
    assert wide.flops_per_s == max(t.flops_per_s for t in wide.timings)


def test_a_ceiling_still_beaten_is_swept_again_a_bounded_number_of_times(
    data, monkeypatch
):
    """Measure until sure, within a bound: a ceiling every rung beats (here one
    that widening cannot raise) is swept LADDER_MAX_WIDENINGS times, each for
    twice as long as the last, and the ladder then ends, reporting the count
    (the page asserts what is left)."""
    sizes = tiny_sizes()
    low = mamf.MatmulCeiling(
        1.0,
        128,
        128,
        128,
        "fp32",
        "cpu",
        (mamf.MatmulTiming(128, 128, 128, 1.0),),
        1,
        0.0,
    )
    budgets = []

    def no_better(ceiling, budget_s, min_run_time_s=0.05):
        budgets.append(budget_s)
        return ceiling

    monkeypatch.setattr(ex, "widen_ceiling", no_better)
    monkeypatch.setattr(mamf, "refine", lambda c, **kw: c)
    ladder = ex.run_ladder(
        sizes, "cpu", data, {"fp32": low, "bf16": low}, (), max_attempts=1
    )
    assert ladder.widenings == ex.LADDER_MAX_WIDENINGS == len(budgets)
    assert budgets == [2 * sizes.probe_budget_s * 2**i for i in range(len(budgets))]
    assert ladder.widened == ("fp32",) and ladder.rungs[0].rates.vs_ceiling > 1


def test_the_probe_times_on_the_steps_threads(monkeypatch):
    """benchmark.Timer runs on one thread unless told: the probe must
    pass torch's count."""
    seen = []
    real = mamf.benchmark.Timer

    def spy(*args, **kw):
        seen.append(kw.get("num_threads"))
        return real(*args, **kw)

    monkeypatch.setattr(mamf.benchmark, "Timer", spy)
    from mlbook.common_torch.timing import cpu_threads

    with cpu_threads(2):
        mamf.time_matmul(64, 64, 64, min_run_time_s=0.001)
    with cpu_threads(1):
        mamf.time_matmul(64, 64, 64, min_run_time_s=0.001)
    assert seen == [2, 1]


def test_the_gloo_run_names_the_slowed_rank():
    from mlbook.faults.formulas import find_straggler

    # the slowed rank sleeps a whole local step: more than a busy machine's noise
    run = comm.comm_run(steps=3, warmup=1, slow_rank=1, delay_fraction=1.0)
    assert set(run.step_s) == set(comm.COMM_MODES) and run.delay_s > 0
    assert all(
        len(rows) == 3 and all(len(r) == 2 for r in rows)
        for rows in run.step_s.values()
    )
    assert find_straggler(run.compute_s["straggler"])[0] == 1
    # the step ends when the last rank ends: at least the slow rank's own work
    assert run.median("straggler") >= run.median("straggler", "compute_s")


def test_figures_draw(data):
    import matplotlib

    matplotlib.use("Agg")
    from mlbook.capstone import figures as figs

    buckets = [dict.fromkeys(cf.BUCKETS, 0.01), dict.fromkeys(cf.BUCKETS, 0.005)]
    fig = figs.ladder_buckets(["a", "b"], buckets, [0.1, 0.04], [0.3, 0.7], "CPU: test")
    assert fig.axes[0].get_ylabel() == "step time (ms)"
    fig = figs.step_timeline(
        [("a", 0.1, ((0.0, 0.05, "matmul"), (0.06, 0.1, "optimizer")))], "CPU: test"
    )
    assert "ms" in fig.axes[0].get_xlabel()


# --- tools/gpu_check.py ---------------------------------------------------------------


def _gpu_check(*args, **kw):
    return subprocess.run(
        [sys.executable, str(TOOLS / "gpu_check.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        **kw,
    )


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="this checks the refusal on a machine without CUDA",
)
def test_gpu_check_refuses_without_cuda(tmp_path):
    out = _gpu_check("--dest", str(tmp_path / "gpu"), "--no-install")
    assert out.returncode == 2
    assert (
        "needs a CUDA GPU" in out.stderr
        and "torch" in out.stderr
        and "cu126" in out.stderr
    )
    assert not (tmp_path / "gpu" / "summary.json").exists()


def test_gpu_check_layout_with_a_stub_runner(tmp_path, monkeypatch):
    sys.path.insert(0, str(TOOLS))
    import gpu_check

    ran = []

    def runner(page, out_dir, parameters, env):
        ran.append((page.stem, parameters["DEVICE"]))
        import nbformat
        from nbformat.v4 import new_code_cell, new_notebook, new_output

        out = new_output(
            "display_data",
            data={"application/papermill.record/text/plain": "0.5"},
            metadata={
                "scrapbook": {
                    "name": "x",
                    "mime_prefix": "application/papermill.record/",
                }
            },
        )
        cell = new_code_cell("glue('x', 0.5)", outputs=[out])
        nbformat.write(new_notebook(cells=[cell]), out_dir / f"{page.stem}.ipynb")
        return 1.5, None

    summary = gpu_check.run_check(
        tmp_path, ["capstone"], "cuda", False, runner, {"torch": "x", "gpu": "fake"}
    )
    pages = list(summary["pages"])
    assert "capstone" in pages and ("capstone", "cuda") in ran
    assert all(d == "cuda" for _, d in ran)
    for page in pages:
        assert json.loads((tmp_path / "values" / f"{page}.json").read_text()) == {
            "x": 0.5
        }
        assert (tmp_path / "notebooks" / f"{page}.ipynb").exists()
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["gpu"] == "fake" and saved["pages"]["capstone"] == {
        "seconds": 1.5,
        "error": None,
        "values": {"x": 0.5},
    }
    assert not (tmp_path / "inputs").exists()


def test_gpu_check_dry_run_on_the_cpu(tmp_path):
    out = _gpu_check(
        "--device", "cpu", "--dry-run", "--only", "capstone", "--dest", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["device"] == "cpu"
        and summary["torch"] == torch.__version__
        and "capstone" in summary["pages"]
    )
    assert (tmp_path / "notebooks" / "capstone.ipynb").exists() and (
        tmp_path / "values" / "capstone.json"
    ).exists()


def test_carried_wheels_reach_a_child_interpreter(tmp_path):
    """--wheels: a wheel installed with no index into a target folder is importable by a
    process started with the PYTHONPATH gpu_check gives its kernels."""
    sys.path.insert(0, str(TOOLS))
    import gpu_check

    wheels = tmp_path / "whl"
    wheels.mkdir()
    dist = "carried_probe-0.1.dist-info"
    with zipfile.ZipFile(wheels / "carried_probe-0.1-py3-none-any.whl", "w") as z:
        z.writestr("carried_probe/__init__.py", "VALUE = 42\n")
        z.writestr(
            f"{dist}/METADATA",
            "Metadata-Version: 2.1\nName: carried-probe\nVersion: 0.1\n",
        )
        z.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
        )
        z.writestr(f"{dist}/RECORD", "")
    target = gpu_check.install_wheels(sys.executable, wheels, tmp_path / "site")
    env = gpu_check.with_paths({"PATH": "/usr/bin:/bin"}, target, ROOT)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import carried_probe, mlbook; print(carried_probe.VALUE)",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.stdout.strip() == "42", out.stderr
    with pytest.raises(SystemExit, match="no .whl"):
        gpu_check.install_wheels(sys.executable, tmp_path, tmp_path / "site2")


def test_gpu_check_drops_options_it_has_acted_on():
    sys.path.insert(0, str(TOOLS))
    import gpu_check

    args = [
        "--python",
        "/x/python3",
        "--wheels=.whl",
        "--only",
        "mfu",
        "--wheels",
        ".whl",
    ]
    assert gpu_check._drop_option(
        gpu_check._drop_option(args, "--python"), "--wheels"
    ) == ["--only", "mfu"]
    assert "papermill==" in "\n".join(gpu_check.wheel_list())


def test_comm_waits_are_each_ranks_median_wait_by_hand():
    # three steps of two ranks: rank 0 waits 5, 7 and 6 ms, rank 1 waits 0, 1, 0
    step = ((0.010, 0.010), (0.012, 0.012), (0.011, 0.011))
    compute = ((0.005, 0.010), (0.005, 0.011), (0.005, 0.011))
    run = comm.CommRun(
        2, 3, 0.005, 1, {"straggler": step}, {"straggler": compute}, 1, "x"
    )
    waits = run.waits_s("straggler")
    assert waits == pytest.approx((0.006, 0.0), abs=1e-12)
    # of an even count, the upper of the two middle values
    two = comm.CommRun(
        1, 2, 0.0, 0, {"m": ((0.004,), (0.009,))}, {"m": ((0.0,), (0.0,))}, 1, "x"
    )
    assert two.waits_s("m") == (0.009,)
