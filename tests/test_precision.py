"""Mixed precision: formats, casts, the loss scaler against GradScaler, master
weights, fp8 scaling, matmul throughput and the figures. (The page's claims are
in test_precision_page.py, the torch-free calculators' properties in
test_precision_properties.py.)"""

import math
import random

import numpy as np
import pytest
import torch

from mlbook.common_torch.dtypes import DTYPES, dtype_name, torch_dtype
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config
from mlbook.precision import experiments as P
from mlbook.precision import figures as figs
from mlbook.precision import formulas as F

# --- formats: known constants ------------------------------------------------------
# IEEE 754-2008 Table 3.5 (binary32: emax 127, p 24; binary16: emax 15, p 11);
# bfloat16: binary32's exponent with p 8; OCP 8-bit Floating Point Specification
# (OFP8) rev. 1.0, Table 1, and Micikevicius et al. 2022 (arXiv:2209.05433), Table 1:
# E4M3 max 448 = 1.75 x 2^8, min normal 2^-6, min subnormal 2^-9; E5M2 max
# 57344 = 1.75 x 2^15, min normal 2^-14, min subnormal 2^-16.

KNOWN = [
    ("fp32", 8, 23, (2 - 2.0**-23) * 2.0**127, 2.0**-126, 2.0**-149, True),
    ("fp16", 5, 10, 65504.0, 2.0**-14, 2.0**-24, True),
    ("bf16", 8, 7, (2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133, True),
    ("fp8 E4M3", 4, 3, 448.0, 2.0**-6, 2.0**-9, False),
    ("fp8 E5M2", 5, 2, 57344.0, 2.0**-14, 2.0**-16, True),
]


@pytest.mark.parametrize("name,exp,mant,fmax,normal,subnormal,has_inf", KNOWN)
def test_formats_known_values_from_the_bits_and_from_finfo(
    name, exp, mant, fmax, normal, subnormal, has_inf
):
    for f in (F.float_format(name), P.finfo_format(name)):
        assert (f.name, f.exponent_bits, f.mantissa_bits, f.bits) == (
            name,
            exp,
            mant,
            1 + exp + mant,
        )
        assert (f.max, f.smallest_normal, f.smallest_subnormal) == (
            fmax,
            normal,
            subnormal,
        )
        assert f.eps == 2.0**-mant and f.has_inf is has_inf


def test_format_table_order_and_torch_dtypes():
    assert [f.name for f in F.format_table()] == [
        "fp32",
        "fp16",
        "bf16",
        "fp8 E4M3",
        "fp8 E5M2",
    ]
    assert P.finfo_format(torch.float16) == F.float_format("fp16")
    assert list(DTYPES) == list(F.FORMATS)
    assert (
        dtype_name(torch.bfloat16) == "bf16"
        and torch_dtype("fp8 E5M2") is torch.float8_e5m2
    )


@pytest.mark.parametrize("name", list(DTYPES))
def test_smallest_subnormal_is_the_last_value_before_zero(name):
    f = F.float_format(name)
    t = torch.tensor(
        [f.smallest_subnormal, f.smallest_subnormal / 2, f.smallest_subnormal * 0.51],
        dtype=torch.float64,
    )
    back = t.to(DTYPES[name]).to(torch.float64)
    assert back[0] == f.smallest_subnormal
    assert back[1] == 0  # exactly half: ties to the even zero
    assert back[2] == f.smallest_subnormal
    assert F.flush_threshold(name) == f.smallest_subnormal / 2


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8 E5M2"])
def test_overflow_threshold_is_where_the_cast_becomes_inf(name):
    t = F.overflow_threshold(name)
    below = np.nextafter(np.float32(t), np.float32(0))
    cast = (
        torch.tensor([t, below], dtype=torch.float32).to(DTYPES[name]).to(torch.float64)
    )
    assert math.isinf(cast[0]) and cast[1] == F.float_format(name).max
    assert (
        F.overflow_threshold("fp16") == 65520.0
    )  # 65504 + 32 / 2 (the gap at the top is 32)


def test_e4m3_has_no_overflow_threshold_and_saturates():
    with pytest.raises(ValueError, match="has no inf"):
        F.overflow_threshold("fp8 E4M3")
    assert torch.tensor([1000.0]).to(torch.float8_e4m3fn).float().item() == 448.0
    assert F.round_to_format([1000.0, -464.0], "fp8 E4M3").tolist() == [448.0, -448.0]


def test_unknown_dtype():
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.finfo_format("fp64")
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.finfo_format(torch.float64)
    with pytest.raises(ValueError, match="name must be one of"):
        F.float_format("fp64")


# --- rounding without torch against torch's casts ------------------------------------


@pytest.mark.parametrize("name", F.FORMATS)
def test_round_to_format_matches_torch_casts(name):
    """The same rounding by two methods: exponent-and-quantum arithmetic in numpy,
    and torch's cast (on fp32 inputs, which both round once)."""
    rng = np.random.default_rng(1)
    v = np.exp(rng.normal(-5, 12, 100_000)) * rng.choice([-1, 1], 100_000)
    v = v[np.abs(v) < 3e38].astype(np.float32)
    f = F.float_format(name)
    edges = [
        f.max,
        f.smallest_normal,
        f.smallest_subnormal,
        f.smallest_subnormal / 2,
        f.smallest_subnormal * 1.5,
        1 + f.eps / 2,
        1 + 1.5 * f.eps,
        0.0,
    ]
    v = np.concatenate([v, np.float32(edges)])
    ours = F.round_to_format(v, name)
    theirs = torch.tensor(v).to(DTYPES[name]).double().numpy()
    assert np.array_equal(ours, theirs)


def test_bf16_absorbs_matches_torch_bf16_addition():
    rng = random.Random(0)
    for _ in range(500):
        w = rng.uniform(-4, 4)
        u = rng.choice([-1, 1]) * 10 ** rng.uniform(-6, 0)
        wt = torch.tensor(w, dtype=torch.bfloat16)
        moved = bool(wt + torch.tensor(u, dtype=torch.bfloat16) != wt)
        assert F.bf16_absorbs(w, u) is moved, (w, u)
    assert not F.bf16_absorbs(1.0, 1e-4) and not F.bf16_absorbs(
        1.0, 2.0**-8
    )  # 2^-8: the tie, to even
    assert F.bf16_absorbs(1.0, 2.0**-7) and F.bf16_absorbs(1e-2, 1e-4)


# --- underflow and overflow fractions (real casts) ------------------------------------


def test_underflow_fraction_known_values():
    values = [1e-9, 1e-3, 1.0, 0.0]  # the zero is not counted
    assert P.underflow_fraction(values, "fp16") == pytest.approx(1 / 3)
    assert P.underflow_fraction(values, "fp16", scale=1024.0) == 0
    assert P.underflow_fraction(values, "bf16") == 0
    assert P.underflow_fraction(values, "fp8 E4M3") == pytest.approx(1 / 3)
    assert P.underflow_fraction([2.0**-26, 2.0**-24], "fp16") == 0.5


def test_overflow_fraction_known_values():
    assert P.overflow_fraction([70000.0, 1.0], "fp16") == 0.5
    assert P.overflow_fraction([65519.0, 1.0], "fp16") == 0  # rounds down to 65504
    assert P.overflow_fraction([1.0, 2.0], "fp16", scale=40000.0) == 0.5
    assert P.overflow_fraction([500.0, 1.0, 2.0, 3.0], "fp8 E4M3") == 0.25
    assert P.overflow_fraction([1e30], "bf16") == 0


@pytest.mark.parametrize("bad_scale", [0, -1.0, math.nan, math.inf])
def test_fractions_reject_non_positive_scale(bad_scale):
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.underflow_fraction([1.0], "fp16", scale=bad_scale)
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.overflow_fraction([1.0], "fp16", scale=bad_scale)


def test_fractions_reject_bad_values():
    with pytest.raises(ValueError, match="non-zero"):
        P.underflow_fraction([0.0, 0.0], "fp16")
    with pytest.raises(ValueError, match="finite"):
        P.underflow_fraction([1.0, math.nan], "fp16")
    with pytest.raises(ValueError, match="empty"):
        P.underflow_fraction([], "fp16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.underflow_fraction([1.0], "int8")


@pytest.mark.parametrize("seed", range(4))
def test_histogram_zones_match_real_casts(seed):
    rng = np.random.default_rng(seed)
    values = torch.tensor(np.exp(rng.normal(-14, 4, 20000)), dtype=torch.float32)
    hist = F.log2_histogram(values.numpy())
    assert hist.counts.sum() == hist.n == values.numel()
    for log2_scale in (0, 5, 12, 20, 30):
        s = 2.0**log2_scale
        z = F.zone_fractions(hist, "fp16", s)
        assert z.flushed == pytest.approx(
            P.underflow_fraction(values, "fp16", s), abs=1e-12
        )
        assert z.overflow == pytest.approx(
            P.overflow_fraction(values, "fp16", s), abs=1e-12
        )
        assert z.flushed + z.subnormal + z.normal + z.overflow == pytest.approx(1)


def test_max_safe_scale_known_values():
    assert F.max_safe_scale(1.0, "fp16") == 2.0**15  # 65504 / 1 lies in [2^15, 2^16)
    assert (
        F.max_safe_scale(1e-3, "fp16") == 2.0**25
    )  # 65504 / 1e-3 = 6.55e7, 2^25 = 3.4e7
    v = torch.tensor([3e-4, -7e-2])
    s = F.max_safe_scale(float(v.abs().max()), "fp16")
    assert (
        P.overflow_fraction(v, "fp16", s) == 0
        and P.overflow_fraction(v, "fp16", 2 * s) > 0
    )


# --- the dynamic loss scaler against torch.amp.GradScaler -------------------------


def assert_parity(grad_max, **kw):
    ours = P.loss_scaling_run(grad_max, "mlbook", **kw)
    theirs = P.loss_scaling_run(grad_max, "torch", **kw)
    for step, (a, b, sa, sb) in enumerate(
        zip(ours.scales, theirs.scales, ours.skipped, theirs.skipped, strict=True)
    ):
        assert a == b, f"scale differs after step {step}: {a} vs {b}"
        assert sa == sb, f"skip decision differs at step {step}: {sa} vs {sb}"
    assert len(ours.scales) == len(theirs.scales) == len(grad_max)
    return ours


def test_parity_all_finite_grows_every_interval():
    trace = assert_parity([1.0] * 10, growth_interval=3, fp16_grads=False)
    assert (
        list(trace.scales)
        == [65536.0] * 2 + [131072.0] * 3 + [262144.0] * 3 + [524288.0] * 2
    )
    assert trace.n_skipped == 0


def test_parity_inf_backs_off_and_skips():
    seq = F.scripted_grad_max(8, overflow_steps=(1, 2, 6))
    trace = assert_parity(seq, growth_interval=2, fp16_grads=False)
    assert list(trace.skipped) == [False, True, True, False, False, False, True, False]
    assert list(trace.scales) == [
        65536.0,
        32768.0,
        16384.0,
        16384.0,
        32768.0,
        32768.0,
        16384.0,
        16384.0,
    ]


def test_parity_nan_counts_as_non_finite():
    trace = assert_parity([1.0, math.nan, 1.0], growth_interval=5, fp16_grads=False)
    assert list(trace.skipped) == [False, True, False]


@pytest.mark.parametrize("seed", range(5))
def test_parity_random_scripts(seed):
    rnd = random.Random(seed)
    n = 60
    overflow = tuple(t for t in range(n) if rnd.random() < 0.25)
    kw = dict(
        growth_interval=rnd.choice([1, 2, 3, 7]),
        growth_factor=rnd.choice([2.0, 3.0, 1.5]),
        backoff_factor=rnd.choice([0.5, 0.7, 0.25]),
        init_scale=rnd.choice([65536.0, 1000.0, 3.3]),
    )
    assert_parity(F.scripted_grad_max(n, overflow), fp16_grads=False, **kw)


def test_parity_with_fp16_overflow_from_the_scale_itself():
    g = F.drifting_grad_max(400, seed=1, n_spikes=3)
    trace = assert_parity(g, growth_interval=10)
    assert trace.n_skipped > 0
    assert (
        F.simulate_scaler(g, growth_interval=10) == trace
    )  # the tensor-free simulation agrees


def test_parity_scale_never_grows_to_inf():
    trace = assert_parity(
        [1.0] * 4, init_scale=2.0**127, growth_interval=1, fp16_grads=False
    )
    assert list(trace.scales) == [2.0**127] * 4


@pytest.mark.parametrize("seed", range(4))
def test_a_hysteresis_of_one_is_gradscaler_step_for_step(seed):
    """precision-6's reference with hysteresis 1 makes torch.amp.GradScaler's
    decisions, through real backward passes on the same overflow script."""
    rnd = random.Random(seed)
    n, interval = 50, rnd.choice([1, 2, 3, 5])
    overflow = tuple(t for t in range(n) if rnd.random() < 0.3)
    found_inf = [t in overflow for t in range(n)]
    theirs = P.loss_scaling_run(
        F.scripted_grad_max(n, overflow),
        "torch",
        growth_interval=interval,
        fp16_grads=False,
    )
    assert F.scales_with_hysteresis(found_inf, interval, 1) == list(theirs.scales)
    # a hysteresis of 2 never sits below GradScaler's scale: it backs off less often
    ours = F.scales_with_hysteresis(found_inf, interval, 2)
    assert all(a >= b for a, b in zip(ours, theirs.scales, strict=True))


def _bf16_add(w, u):
    """w + u with both stored in bf16 and the sum stored in bf16, by torch."""
    bf = torch.bfloat16
    return float((torch.tensor(w, dtype=bf) + torch.tensor(u, dtype=bf)).to(bf))


def test_the_stagnation_bound_against_torch_bf16_addition():
    # precision-5's numbers: every bf16 weight of [2^-3, 2^-2) ignores 0.0003, and
    # some of [2^-4, 2^-3) take it; a weight of 6 absorbs 2^-6 but not 2^-5
    e = F.stall_log2(0.0003, "bf16")
    assert e == -3
    binade = [2.0**e * (1 + i / 128) for i in range(128)]  # its 128 bf16 numbers
    assert all(_bf16_add(w, 0.0003) == w for w in binade)
    assert all(_bf16_add(w / 2, 0.0003) != w / 2 for w in binade)
    assert _bf16_add(6.0, 2.0**-6) == 6.0 and _bf16_add(6.0, 2.0**-5) != 6.0
    # odd last mantissa bit: the tie of half a gap goes up
    odd = 6.0 + 2.0**-5
    assert _bf16_add(odd, F.absorb_limit(odd)) != odd


def test_absorb_limit_is_where_torch_bf16_addition_stops_rounding_away():
    rnd = random.Random(7)
    for _ in range(300):
        w = float(
            torch.tensor(rnd.uniform(-1, 1) * 2.0 ** rnd.randint(-40, 40)).to(
                torch.bfloat16
            )
        )
        limit = F.absorb_limit(w)
        below = limit * (1 - 2.0**-7)  # the bf16 number just below the limit
        assert (
            _bf16_add(w, below) == w
            and _bf16_add(w, -below) == w
            or abs(w)
            == (
                2.0
                ** (math.frexp(abs(w))[1] - 1)  # at a power of two the gap below halves
            )
        )
        assert _bf16_add(w, math.copysign(2 * limit, w)) != w


def test_the_gaussian_shares_against_a_sample_cast_for_real():
    # 10^6 draws: a share p is measured to within 4 binomial standard deviations
    x = 1e-7 * torch.randn(1_000_000, generator=torch.Generator().manual_seed(3))
    for scale in (1.0, 4.0):
        p = F.gaussian_share_within(F.flush_threshold("fp16") / scale, 1e-7)
        got = P.underflow_fraction(x, "fp16", scale)
        assert abs(got - p) < 4 * math.sqrt(p * (1 - p) / x.numel())
    # E4M3 with a delayed scale from amax 6 and no margin holds |x| <= 6: for
    # N(0, 3^2) the share beyond 2 sigma saturates
    y = 3.0 * torch.randn(1_000_000, generator=torch.Generator().manual_seed(4))
    scale = F.fp8_scale(6.0, "fp8 E4M3")
    p = F.gaussian_share_beyond(448 / scale, 3.0)
    got = P.quant_error(y, "fp8 E4M3", scale).saturated
    assert abs(got - p) < 4 * math.sqrt(p * (1 - p) / y.numel())


def test_defaults_are_gradscalers():
    ref = torch.amp.GradScaler("cpu")
    mine = F.DynamicLossScaler()
    # torch.amp.GradScaler's documented defaults (and the brief's): 65536, 2, 0.5, 2000
    assert mine.scale == ref.get_scale() == 65536.0
    assert mine.growth_factor == ref.get_growth_factor() == 2.0
    assert mine.backoff_factor == ref.get_backoff_factor() == 0.5
    assert mine.growth_interval == ref.get_growth_interval() == 2000


def test_scale_loss_and_unscale():
    s = F.DynamicLossScaler(init_scale=8.0)
    w = torch.ones(3, requires_grad=True)
    s.scale_loss((w * torch.tensor([1.0, 2.0, 3.0])).sum()).backward()
    assert torch.equal(w.grad, torch.tensor([8.0, 16.0, 24.0]))
    assert s.unscale_([w]) is False
    assert torch.equal(w.grad, torch.tensor([1.0, 2.0, 3.0]))
    w.grad[0] = math.inf
    assert s.unscale_([w]) is True


@pytest.mark.parametrize(
    "kw,rule",
    [
        (dict(init_scale=0), "init_scale must be a finite number above 0"),
        (dict(init_scale=-1.0), "init_scale must be a finite number above 0"),
        (dict(init_scale=math.inf), "init_scale must be a finite number above 0"),
        (dict(growth_factor=1.0), "growth_factor must be a finite number above 1"),
        (dict(growth_factor=0.5), "growth_factor must be a finite number above 1"),
        (dict(growth_factor=math.nan), "growth_factor must be a finite number above 1"),
        (dict(backoff_factor=1.0), r"backoff_factor must lie in \(0, 1\)"),
        (dict(backoff_factor=0.0), r"backoff_factor must lie in \(0, 1\)"),
        (dict(growth_interval=0), "growth_interval must be an integer above 0"),
        (dict(growth_interval=2.5), "growth_interval must be an integer above 0"),
    ],
)
def test_scaler_bad_input(kw, rule):
    with pytest.raises(ValueError, match=rule):
        F.DynamicLossScaler(**kw)


def test_update_wants_a_bool_and_runs_want_valid_input():
    with pytest.raises(ValueError, match="found_inf must be a bool"):
        F.DynamicLossScaler().update(1)
    with pytest.raises(ValueError, match="scaler must be one of"):
        P.loss_scaling_run([1.0], "apex")
    with pytest.raises(ValueError, match="at least one step"):
        P.loss_scaling_run([], "torch")
    with pytest.raises(ValueError, match="grad_max entries must be above 0"):
        P.loss_scaling_run([-1.0], "torch")
    with pytest.raises(ValueError, match=r"must be an integer in \[0, 5\)"):
        F.scripted_grad_max(5, overflow_steps=(5,))


def test_tiny_loops_restore_the_thread_count():
    before = torch.get_num_threads()
    P.loss_scaling_run([1.0, 1.0], "mlbook")
    assert torch.get_num_threads() == before


# --- master weights -------------------------------------------------------------


def test_master_weight_experiment_pure_bf16_stalls():
    lr = 3e-4
    r = P.master_weight_experiment(steps=150, lr=lr, n_features=16, batch_size=64)
    fp32, master, pure = (r.runs[m] for m in P.MASTER_MODES)
    # Adam's step is at most lr (1 - beta1) / sqrt(1 - beta2) = 3.2 lr ~ 1e-3 (Kingma
    # and Ba 2015, Sec. 2.1), below half the bf16 gap at weights in
    # [1, 2), 2^-8 = 3.9e-3: every update of a pure-bf16 weight rounds away,
    # and its weights end where they began.
    assert pure.unchanged_updates == 1.0
    assert len(set(pure.weight)) == 1
    assert abs(pure.final_error - r.initial_error) <= 2.0**-8  # w0 rounded to bf16 once
    # fp32 weights (alone or as the master copy) take every update that is not far below
    # fp32's half gap at 1 (6e-8): only steps where Adam's momentum passes through zero.
    for run in (fp32, master):
        assert run.unchanged_updates < 0.05
        assert run.final_error < r.initial_error  # they moved towards the target
    assert len(pure.weight) == 150


def test_master_weight_experiment_bad_input():
    with pytest.raises(ValueError, match="lr must be a finite number above 0"):
        P.master_weight_experiment(lr=0)
    with pytest.raises(ValueError, match="steps must be an integer above 0"):
        P.master_weight_experiment(steps=0)


# --- fp8 --------------------------------------------------------------------------


def rounding_bound(x: torch.Tensor, name: str, scale: float) -> float:
    """An upper bound on the relative RMS error of round to nearest in format
    ``name`` after multiplying by ``scale`` (no value past the max): each value
    moves by at most half a step, eps/2 of itself when it is normal, and at
    most half the subnormal spacing in absolute terms when it is not."""
    f = F.float_format(name)
    x = x.double() * scale
    per_value = torch.maximum(
        x.abs() * f.eps / 2, torch.full_like(x, f.smallest_subnormal / 2)
    )
    return float(per_value.norm() / x.norm())


def test_fp8_scale_maps_amax_to_max():
    assert F.fp8_scale(2.0, "fp8 E4M3") == 224.0
    assert F.fp8_scale(2.0, "fp8 E5M2", margin=1) == 57344.0 / 4
    x = torch.tensor([0.5, -2.0, 1.0])
    q = P.quantize_fp8(x, "fp8 E4M3", F.fp8_scale(2.0))
    assert torch.equal(q, x)  # powers of two survive exactly


def test_quantize_without_scale_flushes_small_tensors():
    x = 1e-6 * torch.randn(1000, generator=torch.Generator().manual_seed(0))
    plain = P.quant_error(x, "fp8 E4M3")
    # E4M3 flushes at or below 2^-10 ~ 1e-3: a thousand sigmas, so every value goes
    assert plain.underflow == 1.0 and plain.rel_rms_error == pytest.approx(1.0)
    scale = F.fp8_scale(float(x.abs().max()))
    scaled = P.quant_error(x, "fp8 E4M3", scale)
    assert scaled.rel_rms_error <= rounding_bound(x, "fp8 E4M3", scale)
    # scaled, a value flushes only below 2^-10 / 448 = 2.2e-6 of amax: none of these do
    assert (
        float((x.abs() * scale).min()) > F.flush_threshold("fp8 E4M3")
        and scaled.underflow == 0
    )
    e5 = P.quant_error(x, "fp8 E5M2", F.fp8_scale(float(x.abs().max()), "fp8 E5M2"))
    assert e5.rel_rms_error <= rounding_bound(
        x, "fp8 E5M2", F.fp8_scale(float(x.abs().max()), "fp8 E5M2")
    )
    # one mantissa bit fewer doubles the step: over 1000 values the RMS error follows
    assert e5.rel_rms_error > scaled.rel_rms_error


def test_quantize_saturates_at_max():
    q = P.quantize_fp8(torch.tensor([1e6, -1e6, 1.0]), "fp8 E5M2")
    assert q.tolist() == [57344.0, -57344.0, 1.0]
    err = P.quant_error(torch.tensor([1000.0, 1.0]), "fp8 E4M3")
    assert err.saturated == 0.5


def test_fp8_bad_input():
    with pytest.raises(ValueError, match="dtype must be one of fp8 E4M3, fp8 E5M2"):
        P.quantize_fp8(torch.ones(2), "fp16")
    with pytest.raises(ValueError, match="amax must be a finite number above 0"):
        F.fp8_scale(0.0)
    with pytest.raises(ValueError, match="margin must be an integer at or above 0"):
        F.fp8_scale(1.0, margin=-1)
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.quantize_fp8(torch.ones(2), scale=-2.0)
    with pytest.raises(ValueError, match="history_len must be an integer above 0"):
        P.DelayedScaler(history_len=0)


def test_delayed_scaler_uses_history_and_lags_a_jump():
    d = P.DelayedScaler("fp8 E4M3", history_len=3)
    assert d.scale == 1.0  # no history yet
    for amax in (1.0, 4.0, 2.0):
        d.quantize(torch.tensor([amax, -amax / 2]))
    assert d.scale == 448.0 / 4.0
    d.quantize(torch.tensor([0.5]))  # pushes 1.0 out, 4.0 stays
    assert d.history == [4.0, 2.0, 0.5] and d.scale == 448.0 / 4.0
    _, err = d.quantize(torch.tensor([64.0, 1.0]))  # a jump: saturates this step
    assert err.saturated == 0.5
    _, err = d.quantize(torch.tensor([64.0, 1.0]))  # the history has caught up
    # 64 and 1 at scale 7: 448 exactly, and 7 exactly (E4M3 holds 1.75 x 2^2): no error
    assert err.saturated == 0 and err.rel_rms_error == 0


def _gaussian_tail(threshold: float, sigma: float) -> float:
    """P(|X| > threshold) for X ~ N(0, sigma^2)."""
    return math.erfc(threshold / (sigma * math.sqrt(2)))


def test_scaling_run_policies_against_the_gaussian():
    n, start, growth, jump_at, jump, hist = 512, 1e-3, 1.02, 30, 8.0, 8
    run = P.scaling_run(
        P.drifting_tensors(
            40, size=n, start=start, growth=growth, jump_at=jump_at, jump=jump
        ),
        "fp8 E4M3",
        history_len=hist,
    )
    sigma = [start * growth**t * (jump if t >= jump_at else 1) for t in range(40)]
    # Each count is a binomial over n values; 5 standard deviations plus one value of
    # slack makes a seeded draw that lands outside an event of probability < 1e-6.
    tol = lambda p: 5 * math.sqrt(p * (1 - p) / n) + 1 / n  # noqa: E731
    # step 0, no scale: E4M3 flushes |x| <= 2^-10 (half its smallest subnormal)
    p0 = 1 - _gaussian_tail(F.flush_threshold("fp8 E4M3"), sigma[0])
    assert run.none[0].underflow == pytest.approx(p0, abs=tol(p0))
    # at the jump and one step later, delayed scaling saturates what lies past the
    # largest amax of the history, which the run recorded
    for t in (jump_at, jump_at + 1):
        past = max(run.amax[max(0, t - hist) : t])
        p = _gaussian_tail(past, sigma[t])
        assert run.delayed[t].saturated == pytest.approx(p, abs=tol(p)), t
    # a scale from the tensor itself: only rounding, at most eps/2 of
    # each value (normal ones)
    assert (
        max(e.rel_rms_error for e in run.current) <= F.float_format("fp8 E4M3").eps / 2
    )


def test_fp8_error_sweep_within_the_rounding_bound_when_scaled():
    sweep = P.fp8_error_sweep([1e-8, 1e-2, 1e4], size=512)
    for name in F.FP8_FORMATS:
        assert max(sweep[name].scaled) <= F.float_format(name).eps / 2
        assert sweep[name].none[0] == 1.0  # sigma 1e-8: every value flushes to zero


# --- gradients of a real network ------------------------------------------------------


def test_capture_gradients_shapes_and_sampling():
    torch.manual_seed(0)
    cfg = tiny_config(n_layers=2, d_model=32, n_heads=2, vocab_size=64)
    model = GPT(cfg, max_seq_len=16)
    idx, tgt = random_batch(cfg, 2, 16)
    g = P.capture_gradients(model, idx, tgt, max_values=None)
    n_params = sum(p.numel() for p in model.parameters())
    assert g.weights.numel() == g.n_weights == n_params
    assert g.n_activations == 2 * (2 * 16 * 32)  # two block outputs (b, s, h)
    assert g.n_logits == g.logits.numel() == 2 * 16 * 64  # (b, s, V)
    small = P.capture_gradients(model, idx, tgt, max_values=100)
    assert small.logits.numel() == 100 and small.n_logits == g.n_logits
    assert small.activations.numel() == 100
    # the logit gradient of a mean cross-entropy is (softmax - onehot) / (b s)
    probs = model(idx).softmax(-1).detach()
    want = (probs - torch.nn.functional.one_hot(tgt, 64)) / (2 * 16)
    assert torch.allclose(g.logits, want.flatten(), atol=1e-7)


# --- figures --------------------------------------------------------------------------
# (the live figures, which replaced the slider figures, are test_precision_live.py's)


def test_static_figures_have_labelled_axes():
    figures = [
        figs.format_ranges(),
        figs.master_weights(
            P.master_weight_experiment(steps=20, n_features=8, batch_size=16)
        ),
        figs.fp8_error_vs_magnitude(
            [1e-3, 1.0], P.fp8_error_sweep([1e-3, 1.0], size=64)
        ),
        figs.delayed_scaling(P.scaling_run(P.drifting_tensors(10, size=64))),
        figs.matmul_throughput(
            {"fp32": P.MatmulRate(1e11, 1024), "fp16": P.MatmulRate(1e9, 128)},
            "CPU: test",
        ),
    ]
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlabel()


# --- matmul throughput ----------------------------------------------------------------


def test_matmul_throughput_probes_fp16_on_cpu():
    slow = P.matmul_throughput_by_dtype(
        "cpu", 64, probe_n=16, min_run_time_s=0.01, max_call_s=1e-12
    )
    assert [r.n for r in slow.values()] == [64, 64, 16]  # fp16 kept at the probe size
    fast = P.matmul_throughput_by_dtype(
        "cpu", 64, probe_n=16, min_run_time_s=0.01, max_call_s=1e6
    )
    assert [r.n for r in fast.values()] == [64, 64, 64]
    assert all(r.flops_per_s > 0 for r in fast.values())


def test_matmul_throughput_bad_input():
    with pytest.raises(ValueError, match="n must be an integer above 0"):
        P.matmul_throughput_by_dtype("cpu", 0)
    with pytest.raises(ValueError, match="max_call_s must be a finite number above 0"):
        P.matmul_throughput_by_dtype("cpu", 8, max_call_s=0)


@pytest.mark.parametrize(
    "name,count",
    [
        # by hand from the bit layouts: a NaN is the all-ones exponent with a
        # non-zero mantissa (IEEE 754), times two signs; E4M3 (OCP FP8 spec,
        # Table 1) keeps only S.1111.111
        ("fp16", 2 * (2**10 - 1)),
        ("bf16", 2 * (2**7 - 1)),
        ("fp8 E5M2", 2 * (2**2 - 1)),
        ("fp8 E4M3", 2),
    ],
)
def test_nan_bit_patterns(name, count):
    assert P.nan_bit_patterns(name) == count


def test_nan_bit_patterns_rejects_wide_formats():
    with pytest.raises(ValueError, match="8- or 16-bit float"):
        P.nan_bit_patterns("fp32")
