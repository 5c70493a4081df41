"""Property tests for the mixed-precision chapter's torch-free calculators
(mlbook.precision.formulas): for any valid input they return finite numbers
that move the way the formulas say, and any bad argument raises a ValueError
that names it."""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.precision import formulas as F
from mlbook.precision import live

PROPERTY_COVERS = {
    "mlbook.precision.formulas.float_format",
    "mlbook.precision.formulas.format_table",
    "mlbook.precision.formulas.flush_threshold",
    "mlbook.precision.formulas.overflow_threshold",
    "mlbook.precision.formulas.round_to_format",
    "mlbook.precision.formulas.bf16_absorbs",
    "mlbook.precision.formulas.fp16_overflows",
    "mlbook.precision.formulas.simulate_scaler",
    "mlbook.precision.formulas.scripted_grad_max",
    "mlbook.precision.formulas.drifting_grad_max",
    "mlbook.precision.formulas.max_safe_scale",
    "mlbook.precision.formulas.fp8_scale",
    "mlbook.precision.formulas.log2_histogram",
    "mlbook.precision.formulas.fraction_below",
    "mlbook.precision.formulas.zone_fractions",
    "mlbook.precision.formulas.absorb_limit",
    "mlbook.precision.formulas.stall_log2",
    "mlbook.precision.formulas.gaussian_share_within",
    "mlbook.precision.formulas.gaussian_share_beyond",
    "mlbook.precision.formulas.scales_with_hysteresis",
    "mlbook.precision.formulas.histogram_summary",
    "mlbook.precision.live.gradient_histogram",
    "mlbook.precision.live.scaler_run",
    "mlbook.precision.live.state_bytes",
}

FEW = examples(50)

NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_FINITE = [math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = [0, -1, 1.5, 2.0, math.nan, math.inf, True, "4", None]
NOT_A_NAME = ["fp64", "int8", "", 16, None, True]

names = st.sampled_from(F.FORMATS)
inf_names = st.sampled_from([n for n in F.FORMATS if F.float_format(n).has_inf])
fp8_names = st.sampled_from(F.FP8_FORMATS)
magnitudes = st.floats(1e-30, 1e30)
finite = st.floats(-1e37, 1e37, allow_nan=False)
scales = st.floats(1e-6, 1e6)
value_lists = st.lists(
    st.floats(-1e6, 1e6).filter(lambda x: abs(x) > 1e-20), min_size=1, max_size=200
)


def _assert_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# --- the formats ---------------------------------------------------------------------


@FEW
@given(names)
def test_float_format_orders_its_limits(name):
    f = F.float_format(name)
    values = (f.max, f.smallest_normal, f.smallest_subnormal, f.eps)
    assert all(math.isfinite(x) and x > 0 for x in values)
    assert f.smallest_subnormal < f.smallest_normal < 1 < f.max
    assert (
        f.eps == 2.0**-f.mantissa_bits
        and f.bits == 1 + f.exponent_bits + f.mantissa_bits
    )
    assert (
        f.smallest_subnormal == f.smallest_normal * f.eps
    )  # the last mantissa bit, lowest exponent
    assert F.flush_threshold(name) == f.smallest_subnormal / 2


def test_more_exponent_bits_more_range_more_mantissa_bits_less_eps():
    table = F.format_table()
    assert [f.name for f in table] == list(F.FORMATS)
    for a in table:
        for b in table:
            if a.has_inf == b.has_inf and a.exponent_bits > b.exponent_bits:
                assert a.max > b.max and a.smallest_normal < b.smallest_normal
            if a.mantissa_bits > b.mantissa_bits:
                assert a.eps < b.eps


@FEW
@given(inf_names)
def test_overflow_threshold_sits_between_max_and_inf(name):
    t = F.overflow_threshold(name)
    f = F.float_format(name)
    assert math.isfinite(t) and t > f.max
    assert F.round_to_format(t, name) == math.inf  # the tie goes to the even neighbour
    assert F.round_to_format(np.nextafter(t, 0), name) == f.max


@FEW
@given(names, st.lists(finite, min_size=2, max_size=50))
def test_round_to_format_is_monotone_idempotent_odd_and_within_half_a_step(name, xs):
    f = F.float_format(name)
    x = np.sort(np.asarray(xs))
    r = F.round_to_format(x, name)
    assert np.all(r[:-1] <= r[1:])  # rounding keeps the order
    kept = r[np.isfinite(r)]
    assert kept.size == 0 or np.array_equal(
        F.round_to_format(kept, name), kept
    )  # idempotent
    assert np.array_equal(F.round_to_format(-x, name), -r)
    inside = np.abs(x) <= f.max
    err = np.abs(r[inside] - x[inside])
    bound = np.maximum(np.abs(x[inside]) * f.eps / 2, f.smallest_subnormal / 2)
    assert np.all(err <= bound * (1 + 1e-15))  # 1e-15: the float64 product
    if not f.has_inf:
        assert np.all(np.isfinite(r))  # E4M3 saturates


@FEW
@given(st.floats(-8, 8).filter(lambda w: abs(w) > 1e-3), st.floats(1e-8, 1.0))
def test_bf16_absorbs_is_monotone_in_the_update(w, u):
    took = F.bf16_absorbs(w, u)
    assert isinstance(took, bool)
    if took:
        assert F.bf16_absorbs(w, 2 * u)  # a larger step moves it too
    if u < abs(w) * 2.0**-9:  # below a quarter step: always lost
        assert not took


@FEW
@given(scales, magnitudes)
def test_fp16_overflows_is_monotone(scale, g):
    over = F.fp16_overflows(scale, g)
    assert isinstance(over, bool)
    if over:
        assert F.fp16_overflows(2 * scale, g) and F.fp16_overflows(scale, 2 * g)
    if scale * g < 65504 * (1 - 1e-3):  # well inside fp16 (fp32 product)
        assert not over
    assert F.fp16_overflows(scale, math.inf) and F.fp16_overflows(scale, math.nan)


# --- the scaler -----------------------------------------------------------------------


@FEW
@given(
    st.lists(st.floats(1e-8, 1e3), min_size=1, max_size=300),
    st.integers(1, 50),
    st.floats(0.1, 0.9),
    st.floats(1.1, 4.0),
)
def test_simulate_scaler_keeps_a_finite_scale_and_halves_on_overflow(
    grad_max, interval, backoff, growth
):
    trace = F.simulate_scaler(
        grad_max, growth_interval=interval, backoff_factor=backoff, growth_factor=growth
    )
    assert len(trace.scales) == len(trace.skipped) == len(grad_max)
    assert all(math.isfinite(s) and s > 0 for s in trace.scales)
    previous = 65536.0
    for s, skipped in zip(trace.scales, trace.skipped, strict=True):
        if skipped:
            assert s < previous  # every skip backs off
        else:
            assert s >= previous  # a good step never shrinks it
        previous = s


@FEW
@given(st.integers(1, 200), st.data())
def test_scripted_and_injected_overflows_are_all_skipped(n, data):
    steps = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    g = F.scripted_grad_max(n, tuple(sorted(steps)))
    assert len(g) == n and sum(math.isinf(x) for x in g) == len(steps)
    trace = F.simulate_scaler(g, init_scale=1.0, growth_interval=10**6)
    assert {
        t for t, s in enumerate(trace.skipped) if s
    } == steps  # 1 x 1 never overflows fp16


@FEW
@given(
    st.integers(1, 2000), st.integers(0, 2**31), st.floats(1.0, 1e4), st.integers(0, 10)
)
def test_drifting_grad_max_is_positive_and_spikes_grow_with_spike(
    n, seed, spike, n_spikes
):
    g = F.drifting_grad_max(n, seed=seed, spike=spike, n_spikes=n_spikes)
    assert g.shape == (n,) and np.all(np.isfinite(g)) and np.all(g > 0)
    bigger = F.drifting_grad_max(n, seed=seed, spike=2 * spike, n_spikes=n_spikes)
    assert np.all(bigger >= g)  # the same steps, lifted more


@FEW
@given(magnitudes, st.sampled_from(["fp16", "bf16", "fp8 E4M3", "fp8 E5M2"]))
def test_max_safe_scale_is_the_largest_power_of_two_that_fits(amax, name):
    fmax = F.float_format(name).max
    assume(amax < fmax * 2.0**100 and fmax / amax < 2.0**1000)
    s = F.max_safe_scale(amax, name)
    assert math.log2(s) == int(math.log2(s))
    assert amax * s <= fmax < amax * 2 * s
    assert (
        F.max_safe_scale(2 * amax, name) == s / 2
    )  # twice the gradient, half the scale


@FEW
@given(st.floats(1e-20, 1e20), fp8_names, st.integers(0, 8))
def test_fp8_scale_maps_amax_below_the_max(amax, name, margin):
    s = F.fp8_scale(amax, name, margin)
    assert math.isfinite(s) and s > 0
    assert amax * s == pytest.approx(F.float_format(name).max / 2**margin, rel=1e-12)
    assert (
        F.fp8_scale(2 * amax, name, margin) < s
        and F.fp8_scale(amax, name, margin + 1) < s
    )


# --- histograms and zones -------------------------------------------------------------


@FEW
@given(value_lists, st.sampled_from([1.0, 0.5, 0.25, 0.125]))
def test_log2_histogram_counts_every_nonzero_value(values, width):
    h = F.log2_histogram(values + [0.0], width)  # zeros are not counted
    assert h.n == len(values) == h.counts.sum()
    assert np.allclose(np.diff(h.edges_log2), width)
    assert np.all(np.diff(h.sorted_abs) >= 0)


@FEW
@given(value_lists, magnitudes, scales, st.booleans())
def test_fraction_below_is_a_fraction_and_grows_with_threshold_and_scale(
    values, t, s, inclusive
):
    h = F.log2_histogram(values)
    f = F.fraction_below(h, t, s, inclusive)
    assert 0 <= f <= 1
    assert F.fraction_below(h, 2 * t, s, inclusive) >= f
    assert F.fraction_below(h, t, s / 2, inclusive) >= f  # a smaller scale, more below
    assert F.fraction_below(h, t, s, True) >= F.fraction_below(h, t, s, False)


@FEW
@given(value_lists, names, st.integers(-40, 40))
def test_zone_fractions_sum_to_one_and_slide_with_the_scale(values, name, log2_scale):
    h = F.log2_histogram(values)
    z = F.zone_fractions(h, name, 2.0**log2_scale)
    parts = (z.flushed, z.subnormal, z.normal, z.overflow)
    assert all(-1e-12 <= p <= 1 + 1e-12 for p in parts) and sum(parts) == pytest.approx(
        1
    )
    up = F.zone_fractions(h, name, 2.0 ** (log2_scale + 1))
    assert (
        up.flushed <= z.flushed and up.overflow >= z.overflow
    )  # scaling up slides right


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", NOT_A_NAME)
def test_bad_format_names_are_named(bad):
    for call in (F.float_format, F.flush_threshold, F.overflow_threshold):
        _assert_named(functools.partial(call, bad), "name must be one of")
    _assert_named(lambda: F.round_to_format([1.0], bad), "name must be one of")
    _assert_named(lambda: F.max_safe_scale(1.0, bad), "name must be one of")
    _assert_named(lambda: F.fp8_scale(1.0, bad), "name must be one of")
    _assert_named(
        lambda: F.zone_fractions(F.log2_histogram([1.0]), bad), "name must be one of"
    )


def test_fp8_scale_wants_an_fp8_name():
    _assert_named(lambda: F.fp8_scale(1.0, "fp16"), "name must be one of")


@pytest.mark.parametrize(
    "bad", NOT_FINITE + ["abc", [], [1.0, math.nan], [True, False]]
)
def test_bad_values_are_named(bad):
    _assert_named(lambda: F.round_to_format(bad, "fp16"), "values must")
    _assert_named(lambda: F.log2_histogram(bad), "values must")


@pytest.mark.parametrize("bad", NOT_FINITE)
def test_bf16_absorbs_names_its_arguments(bad):
    _assert_named(lambda: F.bf16_absorbs(bad, 1e-3), "weight")
    _assert_named(lambda: F.bf16_absorbs(1.0, bad), "update")


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_positive_arguments_are_named(bad):
    _assert_named(lambda: F.fp16_overflows(bad, 1.0), "scale")
    _assert_named(lambda: F.max_safe_scale(bad), "amax")
    _assert_named(lambda: F.fp8_scale(bad), "amax")
    _assert_named(lambda: F.log2_histogram([1.0], bad), "bin_width")
    h = F.log2_histogram([1.0, 2.0])
    _assert_named(lambda: F.fraction_below(h, bad), "threshold")
    _assert_named(lambda: F.fraction_below(h, 1.0, bad), "scale")
    _assert_named(lambda: F.zone_fractions(h, "fp16", bad), "scale")
    _assert_named(lambda: F.scripted_grad_max(3, base=bad), "base")
    for arg in ("start", "end", "spike"):
        _assert_named(functools.partial(F.drifting_grad_max, 10, **{arg: bad}), arg)
    _assert_named(lambda: F.simulate_scaler([1.0], init_scale=bad), "init_scale")


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_positive_integers_are_named(bad):
    _assert_named(lambda: F.scripted_grad_max(bad), "n_steps")
    _assert_named(lambda: F.drifting_grad_max(bad), "n_steps")
    _assert_named(
        lambda: F.simulate_scaler([1.0], growth_interval=bad), "growth_interval"
    )


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_counts_and_margins_are_named(bad):
    _assert_named(lambda: F.fp8_scale(1.0, margin=bad), "margin")
    _assert_named(lambda: F.drifting_grad_max(10, n_spikes=bad), "n_spikes")


@pytest.mark.parametrize(
    "bad", [[], "abc", 3.0, [1.0, -1.0], [1.0, 0.0], [True], ["1"]]
)
def test_simulate_scaler_names_bad_gradients(bad):
    _assert_named(lambda: F.simulate_scaler(bad), "grad_max")


@pytest.mark.parametrize("bad", [1, 0, None, "yes", math.nan])
def test_fp16_overflows_and_fraction_below_name_non_numbers_and_non_bools(bad):
    if not isinstance(bad, (int, float)) or isinstance(bad, bool):
        _assert_named(lambda: F.fp16_overflows(1.0, bad), "grad_max")
    _assert_named(
        lambda: F.fraction_below(F.log2_histogram([1.0]), 1.0, 1.0, bad), "inclusive"
    )


@FEW
@given(st.sampled_from(list(F.FORMATS)))
def test_format_table_lists_each_format_once_with_ordered_limits(name):
    """The table is the formats in their fixed order, each one float_format's
    answer; every format orders its limits 0 < subnormal < normal < 1 < max
    and has 1 + sign + exponent + mantissa bits."""
    table = F.format_table()
    assert [f.name for f in table] == list(F.FORMATS)
    f = table[list(F.FORMATS).index(name)]
    assert f == F.float_format(name)
    assert 0 < f.smallest_subnormal < f.smallest_normal < 1 < f.max and 0 < f.eps < 1
    assert f.bits == 1 + f.exponent_bits + f.mantissa_bits


# --- the bf16 stagnation bound --------------------------------------------------------

bf16_weights = st.builds(  # every positive bf16 normal in 2^-100 .. 2^100
    lambda i, e: (1 + i / 128) * 2.0**e, st.integers(0, 127), st.integers(-100, 100)
)


@FEW
@given(bf16_weights, st.booleans())
def test_an_update_below_the_absorb_limit_rounds_away_and_twice_it_does_not(w, neg):
    w = -w if neg else w
    limit = F.absorb_limit(w)
    assert limit == 2.0 ** (math.frexp(abs(w))[1] - 1) * 2.0**-8  # half of 2^(E-7)
    below = math.copysign(limit * (1 - 2.0**-8), w)  # bf16: 0.11111111b x limit
    assert not F.bf16_absorbs(w, below)  # away from zero: the gap is the binade's
    assert F.bf16_absorbs(w, math.copysign(2 * limit, w))
    # at exactly the limit the tie goes to the even neighbour
    even = (abs(w) / 2.0 ** (math.frexp(abs(w))[1] - 1) * 128) % 2 == 0
    assert F.bf16_absorbs(w, math.copysign(limit, w)) is (not even)


@FEW
@given(st.floats(1e-30, 1e3), st.integers(0, 127))
def test_every_weight_from_the_stall_binade_on_ignores_the_update(u, i):
    e = F.stall_log2(u)
    assert isinstance(e, int)
    assert not F.bf16_absorbs((1 + i / 128) * 2.0**e, u)  # any weight of the binade
    assert not F.bf16_absorbs((1 + i / 128) * 2.0 ** (e + 3), u)  # and above it
    # one binade down, the weight with an odd last bit takes it
    assert F.bf16_absorbs((2 - 2.0**-7) * 2.0 ** (e - 1), u)


@pytest.mark.parametrize("bad", [0, 0.0, math.nan, math.inf, True, "1", None])
def test_the_stagnation_functions_name_their_arguments(bad):
    _assert_named(lambda: F.absorb_limit(bad), "weight")
    _assert_named(lambda: F.stall_log2(bad), "update")
    _assert_named(lambda: F.stall_log2(1e-50), "rounds to zero")


# --- Gaussian shares ------------------------------------------------------------------


@FEW
@given(st.floats(1e-12, 1e12), st.floats(1e-12, 1e12), st.floats(0.5, 2.0))
def test_gaussian_shares_are_complementary_monotone_and_scale_free(t, sigma, c):
    within, beyond = (
        F.gaussian_share_within(t, sigma),
        F.gaussian_share_beyond(t, sigma),
    )
    assert 0 <= within <= 1 and 0 <= beyond <= 1
    assert within + beyond == pytest.approx(1.0, abs=1e-15)
    assert F.gaussian_share_within(t * c, sigma) >= within if c > 1 else True
    assert F.gaussian_share_within(t * c, sigma * c) == pytest.approx(
        within, rel=1e-12, abs=1e-300
    )


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_gaussian_shares_name_their_arguments(bad):
    for share in (F.gaussian_share_within, F.gaussian_share_beyond):
        _assert_named(lambda f=share: f(bad, 1.0), "threshold")
        _assert_named(lambda f=share: f(1.0, bad), "sigma")


# --- the loss scaler with a hysteresis ------------------------------------------------

overflow_runs = st.lists(st.booleans(), min_size=1, max_size=80)


@FEW
@given(overflow_runs, st.integers(1, 8), st.integers(1, 5))
def test_a_longer_hysteresis_backs_off_less_and_grows_at_the_same_steps(
    found_inf, interval, h
):
    one = F.scales_with_hysteresis(found_inf, interval, 1)
    mine = F.scales_with_hysteresis(found_inf, interval, h)
    more = F.scales_with_hysteresis(found_inf, interval, h + 1)
    assert all(a <= b <= c for a, b, c in zip(one, mine, more, strict=True))
    # hysteresis 1 is GradScaler's rule, as the plain scaler makes it
    plain = F.DynamicLossScaler(growth_interval=interval)
    assert one == [(plain.update(f), plain.scale)[1] for f in found_inf]
    for a, b in zip([65536.0, *mine], mine, strict=False):
        assert b / a in (0.5, 1.0, 2.0)  # one factor a step at most
    assert all(math.log2(s) == int(math.log2(s)) for s in mine)


@pytest.mark.parametrize("bad", [[1, 0], "yes", 3, [None]])
def test_scales_with_hysteresis_names_bad_steps(bad):
    _assert_named(lambda: F.scales_with_hysteresis(bad, 2, 2), "found_inf")
    _assert_named(lambda: F.scales_with_hysteresis([True], 2, 0), "hysteresis")


# --- the histogram summary and the live figures ---------------------------------------

log_normal = st.tuples(st.floats(-40, 0), st.floats(0.1, 4), st.integers(0, 2**16))


def _histogram(centre, spread, seed):
    rng = np.random.default_rng(seed)
    return F.log2_histogram(np.exp2(rng.normal(centre, spread, 2000)))


def _summary(centre, spread, seed):
    return F.histogram_summary({"g": _histogram(centre, spread, seed)}, "fp16")


@FEW
@given(log_normal)
def test_the_summary_s_zones_sum_to_one_and_slide_with_the_scale(params):
    hist = _histogram(*params)
    summary = F.histogram_summary({"g": hist}, "fp16", range(0, 31))
    assert summary["groups"][0]["zones"][7] == list(
        dataclasses.astuple(F.zone_fractions(hist, "fp16", 2.0**7))
    )
    (g,) = summary["groups"]
    assert sum(g["shares"]) == pytest.approx(1.0)
    zones = g["zones"]
    assert all(sum(z) == pytest.approx(1.0) for z in zones)
    flushed = [z[0] for z in zones]
    overflow = [z[3] for z in zones]
    assert flushed == sorted(flushed, reverse=True) and overflow == sorted(overflow)
    json.dumps(summary, allow_nan=False)


@FEW
@given(log_normal, st.integers(0, 30))
def test_the_histogram_figure_slides_by_the_scale_and_titles_its_zones(params, k):
    summary = _summary(*params)
    spec = live.gradient_histogram(k, summary)
    json.dumps(spec, allow_nan=False)
    flushed, sub, _, over = summary["groups"][0]["zones"][k]
    assert (
        f"scale 2^{k}: g {flushed:.1%} flushed to zero, {sub:.1%}"
        in (spec["title"]["text"])
    )
    (line,) = [lay for lay in spec["layer"] if lay["mark"]["type"] == "line"]
    first = line["data"]["values"][0]["log2"]
    assert first == summary["groups"][0]["first_edge_log2"] + k


@FEW
@given(
    st.lists(st.floats(1e-3, 1e3), min_size=2, max_size=300),
    st.sampled_from(range(10, 510, 10)),
    st.sampled_from([0.1 + 0.05 * i for i in range(17)]),
)
def test_the_scaler_figure_marks_every_skipped_step(grad_max, interval, backoff):
    spec = live.scaler_run(interval, backoff, grad_max=grad_max)
    trace = F.simulate_scaler(
        grad_max, backoff_factor=backoff, growth_interval=interval
    )
    points = [lay for lay in spec["layer"] if lay["mark"]["type"] == "point"]
    marked = [r["step"] for lay in points for r in lay["data"]["values"]]
    assert marked == [t + 1 for t, s in enumerate(trace.skipped) if s]
    assert (
        f"{trace.n_skipped} of {len(grad_max)} steps skipped" in (spec["title"]["text"])
    )
    json.dumps(spec, allow_nan=False)


@FEW
@given(st.floats(0.07, 700))
def test_the_state_figure_stacks_sixteen_bytes_a_parameter(n_billions):
    spec = live.state_bytes(n_billions)
    rows = spec["layer"][0]["data"]["values"]
    assert sum(r["bytes"] for r in rows) == 16
    assert rows[-1]["to"] == pytest.approx(16 * n_billions * 1e9 / 2**30, rel=1e-12)
