"""Property tests for the capstone chapter's calculators (mlbook.capstone.formulas):
for any valid input they return finite numbers that move the way the accounting
implies, and for any bad argument they raise a ValueError that names it."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import formulas as cf
from mlbook.common.transformer import TransformerConfig

PROPERTY_COVERS = {
    "mlbook.common.reference_loop.bucket_of",
    "mlbook.capstone.formulas.account",
    "mlbook.capstone.formulas.residual_fraction",
    "mlbook.common.reference_loop.padded_vocab",
    "mlbook.common.transformer.gemm_shapes",
    "mlbook.capstone.formulas.rung_rates",
    "mlbook.capstone.formulas.fix_savings",
    "mlbook.capstone.formulas.exposed_fraction",
    "mlbook.common.reference_loop.ladder_fixes",
    "mlbook.common.reference_loop.ladder_sizes",
    "mlbook.capstone.formulas.waterfall",
    "mlbook.capstone.formulas.fix_effects",
    "mlbook.capstone.formulas.mfu_after_fix",
    "mlbook.capstone.formulas.idle_s",
    "mlbook.capstone.formulas.ceiling_reach",
    "mlbook.capstone.formulas.saving_verdict",
}

FEW = examples(50)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]
NOT_BOOL = [0, 1, None, "yes", 1.0]
times = st.floats(1e-6, 1e3)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# --- bucket_of ------------------------------------------------------------------------


@FEW
@given(st.text(min_size=1), st.sampled_from((None,) + cf.SCOPES))
def test_every_name_lands_in_a_bucket_and_scopes_decide_first(name, scope):
    b = cf.bucket_of(name, scope)
    assert b in cf.BUCKETS
    if scope in cf.SCOPE_BUCKETS:
        assert b == cf.SCOPE_BUCKETS[scope]


@pytest.mark.parametrize("bad", ["", None, 3, b"aten::mm", True])
def test_bucket_of_rejects_a_bad_name(bad):
    with pytest.raises(ValueError, match="name"):
        cf.bucket_of(bad)


@pytest.mark.parametrize("bad", ["training", "ladder/step", 1, ""])
def test_bucket_of_rejects_a_bad_scope(bad):
    with pytest.raises(ValueError, match="scope"):
        cf.bucket_of("aten::mm", bad)


# --- account --------------------------------------------------------------------------


@st.composite
def windows_and_items(draw):
    window = draw(st.floats(1e-3, 10.0))
    n = draw(st.integers(0, 12))
    items = []
    for _ in range(n):
        a = draw(st.floats(-0.5 * window, 1.5 * window))
        d = draw(st.floats(0, window))
        items.append(
            (a, a + d, draw(st.sampled_from(cf.BUCKETS)), draw(st.integers(0, 3)))
        )
    return window, items


@FEW
@given(windows_and_items(), st.data())
def test_buckets_add_up_to_the_window_and_more_items_leave_less_idle(wi, data):
    window, items = wi
    out = cf.account(window, items)
    assert set(out) == set(cf.BUCKETS)
    assert all(_finite(v) and v >= 0 for v in out.values())
    assert sum(out.values()) == pytest.approx(window, rel=1e-9, abs=1e-12)
    extra = (
        data.draw(st.floats(0, window)),
        window,
        data.draw(st.sampled_from(cf.BUCKETS[:-1])),
        0,
    )
    more = cf.account(window, items + [extra])
    assert more["idle"] <= out["idle"] + 1e-12
    # the top priority owns its whole (clipped) interval
    top = (0.0, window / 2, "comm", 99)
    assert cf.account(window, items + [top])["comm"] >= window / 2 - 1e-12


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_account_rejects_a_bad_window(bad):
    with pytest.raises(ValueError, match="window_s"):
        cf.account(bad, [])


@pytest.mark.parametrize(
    "item,match",
    [
        ((math.nan, 1.0, "matmul", 1), r"items\[0\] start_s"),
        ((0.0, "1", "matmul", 1), r"items\[0\] end_s"),
        ((0.0, 1.0, "gemm", 1), "bucket"),
        ((0.0, 1.0, "matmul", True), "priority"),
        ((1.0, 0.5, "matmul", 1), "before it starts"),
        ((0.0, 1.0), r"items\[0\]"),
    ],
)
def test_account_rejects_a_bad_item(item, match):
    with pytest.raises(ValueError, match=match):
        cf.account(1.0, [item])


# --- residual, exposure, savings ------------------------------------------------------


@FEW
@given(times, times)
def test_residual_falls_as_the_buckets_grow(step, acc):
    r = cf.residual_fraction(step, acc)
    assert _finite(r) and r < 1
    assert cf.residual_fraction(step, acc * 1.5) < r
    assert cf.residual_fraction(step, step) == 0


@FEW
@given(times, times)
def test_exposed_share_grows_with_the_step(step, compute):
    e = cf.exposed_fraction(step, compute)
    assert _finite(e) and e < 1
    assert cf.exposed_fraction(step * 2, compute) > e


@pytest.mark.parametrize("bad", NOT_POSITIVE)
@pytest.mark.parametrize(
    "fn,names",
    [
        (cf.residual_fraction, ("step_s", "accounted_s")),
        (cf.exposed_fraction, ("step_s", "compute_s")),
    ],
)
def test_ratios_reject_bad_times(fn, names, bad):
    for i, name in enumerate(names):
        args = [1.0, 1.0]
        args[i] = bad
        with pytest.raises(ValueError, match=name):
            fn(*args)


@FEW
@given(st.lists(times, min_size=2, max_size=12))
def test_savings_telescope_to_first_minus_last(ts):
    s = cf.fix_savings(ts)
    assert len(s) == len(ts) - 1 and all(_finite(x) for x in s)
    assert sum(s) == pytest.approx(ts[0] - ts[-1], abs=1e-9 * max(ts))


@pytest.mark.parametrize(
    "bad,match",
    [
        ([1.0], "at least two"),
        ("12", "sequence"),
        (None, "sequence"),
        ([1.0, 0.0], r"step_times_s\[1\]"),
        ([math.inf, 1.0], r"step_times_s\[0\]"),
        ([1.0, True], r"step_times_s\[1\]"),
    ],
)
def test_savings_reject_bad_times(bad, match):
    with pytest.raises(ValueError, match=match):
        cf.fix_savings(bad)


# --- vocab and GEMM shapes ------------------------------------------------------------


@FEW
@given(st.integers(1, 10**6), st.sampled_from([1, 8, 64, 128]))
def test_padded_vocab_is_the_next_multiple(v, m):
    p = cf.padded_vocab(v, m)
    assert p % m == 0 and v <= p < v + m
    assert cf.padded_vocab(v + 1, m) >= p


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_padded_vocab_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="vocab_size"):
        cf.padded_vocab(bad)
    with pytest.raises(ValueError, match="multiple"):
        cf.padded_vocab(100, bad)


@st.composite
def configs(draw):
    a = draw(st.integers(1, 16))
    h = a * draw(st.sampled_from([8, 16, 64]))
    kv = draw(st.sampled_from([d for d in range(1, a + 1) if a % d == 0]))
    return TransformerConfig(
        n_layers=draw(st.integers(1, 4)),
        d_model=h,
        n_heads=a,
        n_kv_heads=kv,
        d_ff=draw(st.integers(1, 4096)),
        vocab_size=draw(st.integers(1, 60000)),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])),
    )


@FEW
@given(configs(), st.integers(1, 8192))
def test_gemm_shapes_are_positive_and_scale_with_tokens(cfg, tokens):
    shapes = cf.gemm_shapes(cfg, tokens)
    assert shapes and all(isinstance(d, int) and d > 0 for s in shapes for d in s)
    assert len(set(shapes)) == len(shapes)
    vols = [m * n * k for m, n, k in shapes]
    assert vols == sorted(vols, reverse=True)
    assert (tokens, cfg.vocab_size, cfg.d_model) in shapes  # the LM head, forward
    doubled = cf.gemm_shapes(cfg, 2 * tokens)
    assert sum(m * n * k for m, n, k in doubled) > sum(vols)


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_gemm_shapes_reject_bad_tokens(bad):
    cfg = TransformerConfig(n_layers=1, d_model=64, n_heads=1, d_ff=256, vocab_size=100)
    with pytest.raises(ValueError, match="tokens"):
        cf.gemm_shapes(cfg, bad)
    with pytest.raises(ValueError, match="cfg"):
        cf.gemm_shapes({"d_model": 64}, 8)


# --- rates ----------------------------------------------------------------------------


@FEW
@given(st.integers(1, 10**6), times, st.floats(1.0, 1e12), st.floats(1.0, 1e3))
def test_rates_fall_with_step_time_and_stay_below_the_peak(
    tokens, step, per_token, headroom
):
    achieved = tokens / step * per_token
    peak = achieved * headroom  # a peak at or above what the step achieved
    r = cf.rung_rates(tokens, step, per_token, peak, achieved)
    assert all(
        _finite(x)
        for x in (r.tokens_per_s, r.achieved_flops_per_s, r.mfu, r.vs_ceiling)
    )
    assert 0 < r.mfu <= 1 + 1e-9
    assert r.vs_ceiling == pytest.approx(1.0)
    slower = cf.rung_rates(tokens, step * 2, per_token, peak, achieved)
    assert slower.tokens_per_s < r.tokens_per_s and slower.mfu < r.mfu
    assert (
        cf.rung_rates(tokens, step, per_token, peak, achieved * 2).vs_ceiling
        < r.vs_ceiling
    )


def test_rates_refuse_an_mfu_above_one():
    with pytest.raises(ValueError, match="above 100 %"):
        cf.rung_rates(1000, 1.0, 1e9, 1e11, 1e11)


@pytest.mark.parametrize("bad", NOT_POSITIVE)
@pytest.mark.parametrize(
    "i,name",
    [
        (0, "tokens_per_step"),
        (1, "step_s"),
        (2, "flops_per_token"),
        (3, "peak_flops_per_s"),
        (4, "ceiling_flops_per_s"),
    ],
)
def test_rates_reject_bad_inputs(i, name, bad):
    args = [100, 1.0, 1e6, 1e12, 1e11]
    if i == 3 and bad is None:  # an unknown peak: no MFU, not an error
        args[i] = None
        assert math.isnan(cf.rung_rates(*args).mfu)
        return
    args[i] = bad
    with pytest.raises(ValueError, match=name):
        cf.rung_rates(*args)


# --- the ladder's fixes and sizes -----------------------------------------------------


@FEW
@given(st.booleans(), st.booleans())
def test_fixes_are_the_checklist_in_order_with_the_optional_rungs(bf16, compile_on):
    fixes = cf.ladder_fixes(bf16, compile_on)
    names = [f.name for f in fixes]
    assert names == [n for n in cf.FIX_NAMES if n in names]  # the brief's order
    assert ("bf16" in names) == bf16 and ("compile" in names) == compile_on
    assert set(fixes) <= set(cf.ladder_fixes(True, True)) and all(
        f.bucket in cf.BUCKETS for f in fixes
    )
    assert len(cf.ladder_fixes(bf16, compile_on)) <= len(
        cf.ladder_fixes(True, compile_on)
    )


@pytest.mark.parametrize("bad", NOT_BOOL)
def test_fixes_reject_non_flags(bad):
    with pytest.raises(ValueError, match="bf16_fast"):
        cf.ladder_fixes(bad, False)
    with pytest.raises(ValueError, match="compile_on"):
        cf.ladder_fixes(False, bad)


@FEW
@given(st.sampled_from(["cpu", "cuda"]))
def test_sizes_keep_the_defects_and_test_sizes_are_smaller(device):
    big, small = cf.ladder_sizes(device, False), cf.ladder_sizes(device, True)
    for s in (big, small):
        fields = [v for k, v in vars(s).items() if k != "cpu_threads"]
        assert all(_finite(v) and v > 0 for v in fields)
        assert s.vocab_size % 64  # the vocabulary defect is there to fix
        assert s.batch % s.small_micro_batch == 0 and s.accumulation > 1
        assert s.d_model % s.n_heads == 0 and s.tokenizer_vocab <= s.vocab_size
    work = lambda s: s.n_layers * s.d_model**2 * s.batch * s.seq_len  # noqa: E731
    assert work(small) < work(big)
    assert (big.cpu_threads is None) == (device == "cuda")


@pytest.mark.parametrize("bad", ["gpu", "CUDA", None, 0])
def test_sizes_reject_a_bad_device(bad):
    with pytest.raises(ValueError, match="device"):
        cf.ladder_sizes(bad, False)


@pytest.mark.parametrize("bad", NOT_BOOL)
def test_sizes_reject_a_non_flag(bad):
    with pytest.raises(ValueError, match="small"):
        cf.ladder_sizes("cpu", bad)


# --- the waterfall --------------------------------------------------------------------


@st.composite
def waterfalls(draw):
    names = draw(
        st.lists(
            st.sampled_from(cf.FIX_NAMES),
            min_size=1,
            max_size=len(cf.FIX_NAMES),
            unique=True,
        )
    )
    savings = {n: draw(st.floats(0.0, 1.0)) for n in names}
    fixed = draw(st.floats(1e-3, 1.0))
    peak = draw(st.floats(1e9, 1e15))
    flops = peak * fixed * draw(st.floats(0.01, 0.9))  # the fixed step below the peak
    ceiling = peak * draw(st.floats(0.1, 1.0))
    applied = draw(st.lists(st.sampled_from(names), unique=True))
    return peak, ceiling, flops, fixed, savings, applied


@FEW
@given(waterfalls())
def test_the_waterfall_runs_from_the_peak_and_more_fixes_end_higher(w):
    peak, ceiling, flops, fixed, savings, applied = w
    bars, final = cf.waterfall(peak, ceiling, flops, fixed, savings, applied)
    assert bars[0].top == 1 and bars[0].bottom == pytest.approx(ceiling / peak)
    assert all(_finite(b.top) and _finite(b.bottom) for b in bars)
    assert all(
        a.bottom == b.top for a, b in itertools.pairwise(bars)
    )  # each bar starts where the last ended
    unapplied = sum(s for n, s in savings.items() if n not in applied)
    assert final == pytest.approx(flops / ((fixed + unapplied) * peak))
    _, all_fixed = cf.waterfall(peak, ceiling, flops, fixed, savings, list(savings))
    assert all_fixed >= final


@pytest.mark.parametrize("bad", NOT_POSITIVE)
@pytest.mark.parametrize(
    "i,name",
    [
        (0, "peak_flops_per_s"),
        (1, "ceiling_flops_per_s"),
        (2, "flops_per_step"),
        (3, "fixed_step_s"),
    ],
)
def test_waterfall_rejects_bad_numbers(i, name, bad):
    args = [1e12, 5e11, 1e9, 0.1, {"sdpa": 0.01}, []]
    args[i] = bad
    with pytest.raises(ValueError, match=name):
        cf.waterfall(*args)


@pytest.mark.parametrize(
    "savings,applied,match",
    [
        ({}, [], "savings_s"),
        ({"sdpa": math.nan}, [], r"savings_s\['sdpa'\]"),
        ({"sdpa": "1"}, [], "savings_s"),
        ({"sdpa": 0.1}, "sdpa", "applied"),
        ({"sdpa": 0.1}, ["bf16"], "lacks"),
        ({"sdpa": -1.0}, [], "additive"),
    ],
)
def test_waterfall_rejects_bad_fixes(savings, applied, match):
    with pytest.raises(ValueError, match=match):
        cf.waterfall(1e12, 5e11, 1e9, 0.1, savings, applied)


# --- fix_effects, mfu_after_fix, idle_s -----------------------------------------------


@st.composite
def ladders(draw):
    names = draw(st.lists(st.sampled_from(cf.FIX_NAMES), min_size=1, unique=True))
    steps = [draw(times) for _ in range(len(names) + 1)]
    buckets = [{b: draw(st.floats(0.0, 1.0)) for b in cf.BUCKETS} for _ in steps]
    return names, steps, buckets


@FEW
@given(ladders())
def test_fix_effects_read_each_rung_against_the_one_before(ladder):
    names, steps, buckets = ladder
    effects = cf.fix_effects(names, steps, buckets)
    assert [e.fix for e in effects] == names
    by_name = {f.name: f for f in cf.FIXES}
    for i, e in enumerate(effects):
        assert e.bucket == by_name[e.fix].bucket
        assert e.bucket_before_s == buckets[i][e.bucket]
        assert e.bucket_after_s == buckets[i + 1][e.bucket]
        assert e.saved_s == steps[i] - steps[i + 1]
        assert e.saved_share == pytest.approx((steps[i] - steps[i + 1]) / steps[i])
        assert e.bucket_share == pytest.approx(buckets[i][e.bucket] / steps[i])


def test_fix_effects_by_hand_and_bad_input():
    b0 = dict.fromkeys(cf.BUCKETS, 0.0) | {"attention": 0.05}
    b1 = dict.fromkeys(cf.BUCKETS, 0.0) | {"attention": 0.01}
    (e,) = cf.fix_effects(["sdpa"], [0.2, 0.15], [b0, b1])
    # SDPA's defect lives in attention: 50 of 200 ms before, 10 after; 50 ms saved
    assert (e.bucket, e.bucket_share, e.bucket_after_s) == ("attention", 0.25, 0.01)
    assert e.saved_share == pytest.approx(0.25)
    with pytest.raises(ValueError, match="2 step times"):
        cf.fix_effects(["sdpa"], [0.2, 0.1, 0.05], [b0, b1, b1])
    with pytest.raises(ValueError, match=r"fixes\[0\]"):
        cf.fix_effects(["warp"], [0.2, 0.1], [b0, b1])
    with pytest.raises(ValueError, match="finite"):
        cf.fix_effects(["sdpa"], [0.2, 0.1], [b0 | {"attention": math.nan}, b1])


@FEW
@given(st.floats(0.001, 1.0), st.floats(0.0, 0.99))
def test_removing_a_bucket_divides_the_mfu_by_what_is_left(u, f):
    if u / (1 - f) > 1 + 1e-12:
        with pytest.raises(ValueError, match="above 100"):
            cf.mfu_after_fix(u, f)
        return
    after = cf.mfu_after_fix(u, f)
    assert after == pytest.approx(u / (1 - f)) and after >= u
    # a step of any length t: same FLOPs in (1 - f) t
    assert after * (1 - f) == pytest.approx(u)


@pytest.mark.parametrize(
    "u,f,match",
    [
        (0.0, 0.1, "mfu"),
        (1.5, 0.1, "mfu"),
        (0.1, 1.0, "bucket_share"),
        (0.1, -0.1, "bucket_share"),
    ],
)
def test_mfu_after_fix_rejects_bad_numbers(u, f, match):
    with pytest.raises(ValueError, match=match):
        cf.mfu_after_fix(u, f)


def _merged_idle(window, intervals):
    """Idle time by brute force on a fine grid of the window (the test's own way)."""
    n = 20_000
    dt = window / n
    idle = 0
    for k in range(n):
        t = (k + 0.5) * dt
        idle += not any(a <= t < b for a, b in intervals)
    return idle * dt


@FEW
@given(
    st.floats(1.0, 20.0),
    st.lists(
        st.tuples(st.integers(-5, 25), st.integers(0, 10)).map(
            lambda p: (float(p[0]), float(p[0] + p[1]))
        ),
        max_size=5,
    ),
)
def test_idle_is_the_window_no_interval_covers(window, intervals):
    idle = cf.idle_s(window, intervals)
    assert 0 <= idle <= window + 1e-12
    # a sample point per grid cell: off by at most one cell per interval end
    assert idle == pytest.approx(
        _merged_idle(window, intervals), abs=2 * len(intervals) * window / 20_000 + 1e-9
    )
    # the order of the intervals does not matter
    assert cf.idle_s(window, intervals[::-1]) == pytest.approx(idle)


def test_idle_by_hand_and_bad_input():
    # 10 ms with (1, 3), (2, 4), (8, 12): covered 1-4 and 8-10, so 5 ms idle
    assert cf.idle_s(10.0, [(1.0, 3.0), (2.0, 4.0), (8.0, 12.0)]) == 5.0
    assert cf.idle_s(10.0, []) == 10.0
    with pytest.raises(ValueError, match=r"intervals\[0\]"):
        cf.idle_s(10.0, [(1.0, 2.0, 3.0)])
    with pytest.raises(ValueError, match="before it starts"):
        cf.idle_s(10.0, [(3.0, 1.0)])


# --- ceiling_reach and saving_verdict -------------------------------------------------


bucket_dicts = st.dictionaries(
    st.sampled_from(cf.BUCKETS), st.floats(0.0, 10.0), min_size=1
).filter(lambda b: b.get("matmul", 0) + b.get("attention", 0) > 1e-6)


@FEW
@given(bucket_dicts, st.floats(1e-4, 1.5))
def test_a_step_s_share_of_the_ceiling_is_time_share_times_own(buckets, step):
    reach = cf.ceiling_reach(buckets, step)
    total = sum(buckets.values())
    matmul = buckets.get("matmul", 0.0) + buckets.get("attention", 0.0)
    assert reach.matmul_time_share == pytest.approx(matmul / total, rel=1e-12)
    assert reach.matmul_time_share * reach.matmul_vs_ceiling == pytest.approx(step)
    assert 0 < reach.matmul_time_share <= 1 + 1e-12
    # at most the matmuls' share of the time, while they run below the ceiling
    if reach.matmul_vs_ceiling <= 1:
        assert reach.step_vs_ceiling <= reach.matmul_time_share + 1e-12


@FEW
@given(st.floats(-0.9, 0.99), st.floats(0.0, 1.0), st.floats(0.0, 0.5))
def test_a_saving_s_verdict_follows_the_spread_and_the_bucket(saved, bucket, spread):
    verdict = cf.saving_verdict(saved, bucket, spread)
    assert verdict in cf.SAVING_VERDICTS
    if abs(saved) <= spread:
        assert verdict == "within the run's noise"
    elif saved > bucket + spread:
        assert verdict == "more than its bucket held"
    else:
        assert verdict == "above the run's noise"


@pytest.mark.parametrize(
    "args,match",
    [
        ((1.0, 0.1, 0.1), "saved_share"),
        ((math.nan, 0.1, 0.1), "saved_share"),
        ((0.1, 1.5, 0.1), "bucket_share"),
        ((0.1, 0.1, -0.1), "spread"),
    ],
)
def test_saving_verdict_names_a_bad_argument(args, match):
    with pytest.raises(ValueError, match=match):
        cf.saving_verdict(*args)
