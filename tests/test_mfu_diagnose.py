"""The MFU chapter's artifacts to diagnose (mlbook.mfu.diagnose): the same seed
gives the same artifact, the one the page prints and tests/test_keys_mfu.py
works by hand; the buckets' FLOPs add up to the step's; the planted defect is
the one bucket off the healthy rate; each logger's mistake has its factor."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_keys_mfu import DASHBOARD_11, DASHBOARD_28, PROFILE_MS

from conftest import examples
from mlbook.common import transformer
from mlbook.mfu import diagnose, flops

PROPERTY_COVERS = {
    "mlbook.mfu.diagnose.bucket_flops",
    "mlbook.mfu.diagnose.step_profile",
    "mlbook.mfu.diagnose.logged_mfu",
    "mlbook.mfu.diagnose.mfu_dashboard",
}

FEW = examples(40)
MODELS = list(diagnose.DASHBOARD_MODELS)
seeds = st.integers(0, 2**32)


def test_the_pages_profile_is_the_one_worked_by_hand():
    p = diagnose.step_profile("Llama-2-7B", "H100 SXM", 2, 4096, 10)
    assert {b.name: b.ms for b in p.buckets} == PROFILE_MS
    assert p.defect == "attention" and p.largest == "backward_matmuls"
    assert p.step_ms == pytest.approx(758.1, abs=1e-9)


@pytest.mark.parametrize(("seed", "runs"), [(11, DASHBOARD_11), (28, DASHBOARD_28)])
def test_the_pages_dashboards_are_the_ones_worked_by_hand(seed, runs):
    board = diagnose.mfu_dashboard(seed)
    shown = {
        r.run: (r.model, r.gpu, r.n_gpus, r.seq_len, r.tokens_per_s) for r in board.runs
    }
    assert shown == {run: row[:5] for run, row in runs.items()}
    for r in board.runs:  # the logged MFU to the 0.1 % the table prints
        assert round(r.logged_mfu, 3) == runs[r.run][5]
    assert board.cause == {11: "recompute_counted", 28: "one_gpu_peak"}[seed]


def test_bucket_flops_by_hand():
    # Llama-2-7B, 8,192 tokens: see tests/test_keys_mfu.py for the counts
    work = diagnose.bucket_flops(transformer.LLAMA2_7B, 2, 4096)
    assert work == {
        "forward_matmuls": 106_102_872_080_384,
        "backward_matmuls": 212_205_744_160_768,
        "lm_head": 6_442_450_944_000,
        "attention": 52_776_558_133_248,
    }


@FEW
@given(
    st.sampled_from(list(transformer.PRESETS)),
    st.integers(1, 64),
    st.sampled_from([1, 128, 2048, 8192]),
)
def test_the_buckets_add_up_to_the_step(model, batch, seq_len):
    cfg = transformer.PRESETS[model]
    work = diagnose.bucket_flops(cfg, batch, seq_len)
    assert set(work) == set(diagnose.MATMUL_BUCKETS)
    assert sum(work.values()) == flops.flops_per_token(cfg, seq_len) * batch * seq_len
    assert all(v > 0 for v in work.values())


@FEW
@given(st.sampled_from(MODELS), st.sampled_from(["H100 SXM", "A100 SXM"]), seeds)
def test_a_profile_has_one_slow_matmul_bucket(model, gpu, seed):
    p = diagnose.step_profile(model, gpu, 2, 4096, seed)
    assert p == diagnose.step_profile(model, gpu, 2, 4096, seed)  # seeded
    assert [b.name for b in p.buckets] == list(diagnose.BUCKETS)
    assert sum(b.share for b in p.buckets) == pytest.approx(1)
    work = diagnose.bucket_flops(transformer.PRESETS[model], 2, 4096)
    rate = {b: f / p.ms(b) for b, f in work.items()}  # FLOPs a ms
    healthy = p.healthy_flops_per_s / 1e3
    for b, r in rate.items():
        want = healthy / p.slowdown if b == p.defect else healthy
        assert r == pytest.approx(want, rel=0.05 / p.ms(b) + 1e-9)  # 0.1 ms shown
    assert 2 <= p.slowdown <= 4
    # the fix gives back the slow bucket's time less its healthy time
    saved = p.ms(p.defect) * (1 - 1 / p.slowdown)
    assert p.step_ms - p.fixed_step_ms == pytest.approx(saved, abs=0.06)


def test_a_profile_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="model"):
        diagnose.step_profile("GPT-5", "H100 SXM", 2, 4096, 1)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed"):
            diagnose.step_profile("Llama-2-7B", "H100 SXM", 2, 4096, bad)
    with pytest.raises(ValueError, match="batch"):
        diagnose.step_profile("Llama-2-7B", "H100 SXM", 0, 4096, 1)
    with pytest.raises(ValueError, match="name"):
        diagnose.step_profile("Llama-2-7B", "H100 SXM", 2, 4096, 1).ms("idle")


# Each mistake's factor on the right MFU, by hand: one GPU's peak for the job's
# multiplies by G; one GPU's tokens/s divides by G; the forward alone is a
# third; the recomputed forward 4/3; the sparse peak a half.
FACTORS = {
    "one_gpu_peak": lambda g, cfg, s: g,
    "per_gpu_tokens": lambda g, cfg, s: 1 / g,
    "forward_only": lambda g, cfg, s: 1 / 3,
    "recompute_counted": lambda g, cfg, s: 4 / 3,
    "sparse_peak": lambda g, cfg, s: 1 / 2,
    "six_n": lambda g, cfg, s: 6 * flops.n_params(cfg) / flops.flops_per_token(cfg, s),
}


@FEW
@given(
    st.sampled_from(list(diagnose.CAUSES)),
    st.floats(1.0, 1e8),
    st.sampled_from(MODELS),
    st.sampled_from([1024, 4096, 8192]),
    st.floats(1e12, 1e16),
    st.integers(1, 100_000),
)
def test_each_loggers_mistake_has_its_factor(cause, tokens, model, s, peak, g):
    cfg = transformer.PRESETS[model]
    right = tokens * flops.flops_per_token(cfg, s) / (g * peak)
    got = diagnose.logged_mfu(cause, tokens, cfg, s, peak, g)
    assert got == pytest.approx(right * FACTORS[cause](g, cfg, s), rel=1e-12)


@FEW
@given(seeds, st.integers(1, 4))
def test_a_dashboard_is_seeded_and_its_runs_plausible(seed, n_runs):
    board = diagnose.mfu_dashboard(seed, n_runs)
    assert board == diagnose.mfu_dashboard(seed, n_runs)
    assert [r.run for r in board.runs] == list("ABCD"[:n_runs])
    assert len({r.model for r in board.runs}) == n_runs
    for r in board.runs:
        assert r.n_gpus in diagnose.DASHBOARD_MODELS[r.model]
        assert 0.29 < r.mfu < 0.51  # drawn in 30-50 %, tokens/s rounded
        cfg = transformer.PRESETS[r.model]
        peak = {"H100 SXM": 989e12, "A100 SXM": 312e12}[r.gpu]
        again = diagnose.logged_mfu(
            board.cause, r.tokens_per_s, cfg, r.seq_len, peak, r.n_gpus
        )
        assert math.isclose(r.logged_mfu, again, rel_tol=1e-12)
    with pytest.raises(ValueError, match="name"):
        board.run("Z")


def test_a_dashboard_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="n_runs"):
        diagnose.mfu_dashboard(1, 5)
    with pytest.raises(ValueError, match="seed"):
        diagnose.mfu_dashboard(-3)
    with pytest.raises(ValueError, match="cause"):
        diagnose.logged_mfu("typo", 1e5, transformer.LLAMA2_7B, 4096, 989e12, 8)
    with pytest.raises(ValueError, match="n_gpus"):
        diagnose.logged_mfu("six_n", 1e5, transformer.LLAMA2_7B, 4096, 989e12, 0)
