"""Property tests for the faults chapter's calculators (mlbook.faults.formulas):
for any valid input they return finite numbers that move the way the model
says (a slower straggler costs more, a wider barrier taxes more, draining pays
sooner with more ranks), within bounds that follow from the definitions, and
for any bad argument they raise a ValueError that names it."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.faults import formulas as faults

PROPERTY_COVERS = {
    "mlbook.faults.formulas.interruptions_by_category",
    "mlbook.faults.formulas.mean_hours_between",
    "mlbook.faults.formulas.delta_from_speed",
    "mlbook.faults.formulas.expected_step_time",
    "mlbook.faults.formulas.straggler_slowdown",
    "mlbook.faults.formulas.throughput_lost",
    "mlbook.faults.formulas.barrier_tax",
    "mlbook.faults.formulas.drop_step_time",
    "mlbook.faults.formulas.drop_beats_wait",
    "mlbook.faults.formulas.drain_threshold",
    "mlbook.faults.formulas.simulate_step_times",
    "mlbook.faults.formulas.allreduce_wait",
    "mlbook.faults.formulas.find_straggler",
    "mlbook.faults.formulas.flip_bit",
    "mlbook.faults.formulas.checksum",
    "mlbook.faults.formulas.detect_spikes",
    "mlbook.faults.formulas.batch_for_step",
    "mlbook.faults.formulas.summarize_timeline",
}

FEW = examples(50)

# The integral's trapezoid rule is good to about 2e-7 relative (formulas._GRID);
# monotonicity and bounds are checked up to 1e-6 relative so that rounding in the
# last digits cannot fail them, while any real reversal (>= 1e-4 here) would.
REL = 1e-6

ranks = st.integers(1, 100_000)
ranks2 = st.integers(2, 100_000)
deltas = st.floats(0.0, faults.MAX_DELTA)
sigmas = st.floats(0.0, faults.MAX_SIGMA)
pos_sigmas = st.floats(1e-3, faults.MAX_SIGMA)
medians = st.floats(1e-3, 1e3)

NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_NON_NEGATIVE = [-1, -0.5, math.nan, math.inf, -math.inf, True, "0.1", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]
NOT_NON_NEGATIVE_INT = [-1, 1.5, 2.0, math.nan, math.inf, True, "3", None]


def _raises_naming(name, fn, *args, **kw):
    with pytest.raises(ValueError, match=name):
        fn(*args, **kw)


# --- the Llama 3 log ---------------------------------------------------------------

rows = st.lists(
    st.builds(
        faults.Interruption,
        component=st.text(max_size=8),
        category=st.sampled_from(["GPU", "Host", "Network", "Dependency", "Unknown"]),
        count=st.integers(0, 500),
        printed_share=st.floats(0, 1),
    ),
    max_size=30,
)


@FEW
@given(rows)
def test_categories_keep_every_count_largest_first(rs):
    by_cat = faults.interruptions_by_category(rs)
    expected = Counter()  # a different way to add them up
    for r in rs:
        expected[r.category] += r.count
    assert by_cat == dict(expected)
    totals = list(by_cat.values())
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize(
    "bad",
    [
        "GPU",
        7,
        None,
        [("GPU", 3)],
        [faults.Interruption("x", "GPU", -1, 0.1)],
        [faults.Interruption("x", "GPU", True, 0.1)],
    ],
)
def test_categories_refuse_what_is_not_a_row(bad):
    _raises_naming("rows", faults.interruptions_by_category, bad)


@FEW
@given(st.integers(1, 10_000), st.floats(1e-3, 1e4))
def test_mean_hours_between_falls_with_interruptions_and_scales_with_days(n, days):
    h = faults.mean_hours_between(n, days)
    assert math.isfinite(h) and h > 0
    assert faults.mean_hours_between(n + 1, days) < h
    assert faults.mean_hours_between(n, 2 * days) == pytest.approx(2 * h, rel=1e-12)
    # n interruptions in `days` days: n * h hours is the whole log
    assert n * h == pytest.approx(24 * days, rel=1e-12)


@FEW
@given(st.sampled_from(NOT_POSITIVE_INT), st.sampled_from(NOT_POSITIVE))
def test_mean_hours_between_names_bad_arguments(bad_n, bad_days):
    _raises_naming("interruptions", faults.mean_hours_between, bad_n, 54)
    _raises_naming("days", faults.mean_hours_between, 419, bad_days)


# --- stragglers ---------------------------------------------------------------------


@FEW
@given(
    st.floats(1 / (1 + faults.MAX_DELTA), 1.0),
    st.floats(1 / (1 + faults.MAX_DELTA), 1.0),
)
def test_delta_from_speed_is_the_extra_time_and_falls_with_speed(a, b):
    lo, hi = sorted((a, b))
    d_lo, d_hi = faults.delta_from_speed(lo), faults.delta_from_speed(hi)
    assert 0 <= d_hi <= d_lo
    assert (1 + d_lo) * lo == pytest.approx(
        1.0, rel=1e-12
    )  # time x speed = the same work
    assert faults.delta_from_speed(1.0) == 0


@pytest.mark.parametrize(
    "bad", [0, -0.5, 1.5, 1 / 200, math.nan, math.inf, True, "0.8", None]
)
def test_delta_from_speed_names_speed(bad):
    _raises_naming("speed", faults.delta_from_speed, bad)


@FEW
@given(ranks, deltas, sigmas, medians)
def test_expected_step_time_lies_between_its_bounds(n, delta, sigma, median):
    t = faults.expected_step_time(n, delta, sigma, median)
    mean_x = median * math.exp(sigma**2 / 2)  # E[X] of one lognormal rank
    assert math.isfinite(t)
    # the max is at least the slow rank's own time, and at most the
    # sum of all ranks' times
    assert t >= (1 + delta) * mean_x * (1 - REL)
    assert t <= (n - 1 + 1 + delta) * mean_x * (1 + REL)
    # seconds scale with the median
    assert faults.expected_step_time(n, delta, sigma, 2 * median) == pytest.approx(
        2 * t, rel=1e-9
    )


@FEW
@given(ranks, deltas, deltas, pos_sigmas)
def test_step_time_grows_with_the_stragglers_slowness(n, d1, d2, sigma):
    lo, hi = sorted((d1, d2))
    assert faults.expected_step_time(n, hi, sigma) >= faults.expected_step_time(
        n, lo, sigma
    ) * (1 - REL)


@FEW
@given(ranks, ranks, deltas, pos_sigmas)
def test_step_time_grows_with_the_number_of_ranks(n1, n2, delta, sigma):
    lo, hi = sorted((n1, n2))
    assert faults.expected_step_time(hi, delta, sigma) >= faults.expected_step_time(
        lo, delta, sigma
    ) * (1 - REL)


@FEW
@given(ranks, sigmas, sigmas)
def test_step_time_grows_with_the_spread(n, s1, s2):
    lo, hi = sorted((s1, s2))
    assert faults.expected_step_time(n, 0.0, hi) >= faults.expected_step_time(
        n, 0.0, lo
    ) * (1 - REL)


@FEW
@given(ranks, deltas, deltas, sigmas)
def test_slowdown_and_throughput_lost_are_bounded_by_the_slow_rank_and_grow_with_it(
    n, d1, d2, sigma
):
    lo, hi = sorted((d1, d2))
    s_lo, s_hi = (
        faults.straggler_slowdown(n, lo, sigma),
        faults.straggler_slowdown(n, hi, sigma),
    )
    # max(a, (1 + d) b) lies between max(a, b) and (1 + d) max(a, b)
    assert -REL <= s_lo <= lo + REL * (1 + lo)
    assert s_hi >= s_lo - REL * (1 + hi)
    x_lo, x_hi = (
        faults.throughput_lost(n, lo, sigma),
        faults.throughput_lost(n, hi, sigma),
    )
    assert -REL <= x_lo <= lo / (1 + lo) + REL and x_hi < 1
    assert x_hi >= x_lo - REL
    if sigma == 0:  # no noise: the slow rank sets every step
        assert s_hi == pytest.approx(hi, rel=1e-12, abs=1e-12)
        assert x_hi == pytest.approx(hi / (1 + hi), rel=1e-12, abs=1e-12)


@FEW
@given(ranks, ranks, pos_sigmas)
def test_the_barrier_tax_grows_with_n(n1, n2, sigma):
    lo, hi = sorted((n1, n2))
    t_lo, t_hi = faults.barrier_tax(lo, sigma), faults.barrier_tax(hi, sigma)
    assert math.isfinite(t_lo) and t_lo >= -REL  # E[max] >= E[X]
    assert t_hi >= t_lo - REL
    assert faults.barrier_tax(1, sigma) == pytest.approx(0.0, abs=REL)


@FEW
@given(st.integers(2, 100_000), sigmas, sigmas)
def test_the_barrier_tax_grows_with_the_spread(n, s1, s2):
    lo, hi = sorted((s1, s2))
    assert faults.barrier_tax(n, hi) >= faults.barrier_tax(n, lo) - REL
    assert faults.barrier_tax(n, 0.0) == 0.0


@FEW
@given(ranks2, sigmas, medians)
def test_drop_step_time_is_at_least_the_bigger_share(n, sigma, median):
    t = faults.drop_step_time(n, sigma, median)
    share = n / (n - 1) * median  # each of n - 1 ranks does n / (n - 1) of a share
    assert math.isfinite(t)
    assert t >= share * math.exp(sigma**2 / 2) * (1 - REL)
    if sigma == 0:
        assert t == pytest.approx(share, rel=1e-12)


@FEW
@given(ranks2, deltas, deltas, st.floats(0.0, 0.5))
def test_once_draining_wins_it_keeps_winning_as_the_rank_slows(n, d1, d2, sigma):
    lo, hi = sorted((d1, d2))
    assume(hi - lo > 1e-3)  # away from ties within the integral's rounding
    if faults.drop_beats_wait(n, lo, sigma):
        assert faults.drop_beats_wait(n, hi, sigma)


@FEW
@given(st.integers(2, 100_000), st.floats(0.0, 10.0))
def test_without_noise_drain_exactly_when_delta_exceeds_one_over_n_minus_one(n, factor):
    delta = factor / (n - 1)
    assume(abs(factor - 1) > 1e-6)
    assert faults.drop_beats_wait(n, delta, 0.0) == (factor > 1)
    assert faults.drain_threshold(n, 0.0) == 1 / (n - 1)


@FEW
@given(st.integers(2, 100_000), st.integers(2, 100_000), st.floats(1e-3, 0.5))
def test_drain_threshold_is_the_break_even_and_falls_with_n(n1, n2, sigma):
    lo, hi = sorted((n1, n2))
    d = faults.drain_threshold(lo, sigma, tol=1e-7)
    assert math.isfinite(d) and 0 < d <= faults.MAX_DELTA
    assert faults.drop_beats_wait(lo, d * 1.001 + 1e-5, sigma)
    assert not faults.drop_beats_wait(lo, max(0.0, d * 0.999 - 1e-5), sigma)
    assert faults.drain_threshold(hi, sigma, tol=1e-7) <= d + 1e-6


@FEW
@given(st.integers(8, 100_000), st.floats(0.0, 0.3), st.floats(0.0, 0.3))
def test_noise_raises_the_drain_threshold(n, s1, s2):
    # With 8 or more ranks a slow rank hides better in wider noise (at n = 2 and 3 and
    # wide spreads it does not: there draining saves the pair's own noise).
    lo, hi = sorted((s1, s2))
    assert (
        faults.drain_threshold(n, hi, tol=1e-7)
        >= faults.drain_threshold(n, lo, tol=1e-7) - 1e-6
    )


STRAGGLER_FUNCTIONS = {
    "expected_step_time": lambda n=4, delta=0.1, sigma=0.05, median_s=1.0: (
        faults.expected_step_time(n, delta, sigma, median_s)
    ),
    "straggler_slowdown": lambda n=4, delta=0.1, sigma=0.05: faults.straggler_slowdown(
        n, delta, sigma
    ),
    "throughput_lost": lambda n=4, delta=0.1, sigma=0.05: faults.throughput_lost(
        n, delta, sigma
    ),
    "barrier_tax": lambda n=4, sigma=0.05: faults.barrier_tax(n, sigma),
    "drop_step_time": lambda n=4, sigma=0.05, median_s=1.0: faults.drop_step_time(
        n, sigma, median_s
    ),
    "drop_beats_wait": lambda n=4, delta=0.1, sigma=0.05: faults.drop_beats_wait(
        n, delta, sigma
    ),
    "drain_threshold": lambda n=4, sigma=0.05, tol=1e-6: faults.drain_threshold(
        n, sigma, tol
    ),
    "simulate_step_times": lambda n=4, delta=0.1, sigma=0.05, median_s=1.0, steps=3: (
        faults.simulate_step_times(n, delta, sigma, steps=steps, median_s=median_s)
    ),
}
ARG_NAMES = {
    "n": "n_ranks",
    "delta": "delta",
    "sigma": "sigma",
    "median_s": "median_s",
    "tol": "tol",
    "steps": "steps",
}
BAD_FOR = {
    "n": NOT_POSITIVE_INT,
    "delta": NOT_NON_NEGATIVE + [faults.MAX_DELTA * 1.01],
    "sigma": NOT_NON_NEGATIVE + [faults.MAX_SIGMA * 1.01],
    "median_s": NOT_POSITIVE,
    "tol": NOT_POSITIVE,
    "steps": NOT_POSITIVE_INT,
}
BAD_CASES = [
    (fn, arg, bad)
    for fn, f in STRAGGLER_FUNCTIONS.items()
    for arg in f.__code__.co_varnames[: f.__code__.co_argcount]
    for bad in BAD_FOR[arg]
]


@pytest.mark.parametrize(
    "fn,arg,bad", BAD_CASES, ids=[f"{f}-{a}-{b!r}" for f, a, b in BAD_CASES]
)
def test_every_straggler_function_names_each_bad_argument(fn, arg, bad):
    _raises_naming(ARG_NAMES[arg], STRAGGLER_FUNCTIONS[fn], **{arg: bad})


@pytest.mark.parametrize("fn", ["drop_step_time", "drop_beats_wait", "drain_threshold"])
def test_dropping_needs_a_second_rank(fn):
    _raises_naming("at least 2", STRAGGLER_FUNCTIONS[fn], n=1)


@FEW
@given(
    st.integers(1, 64),
    deltas,
    sigmas,
    st.integers(1, 50),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_simulation_slows_exactly_the_chosen_rank(n, delta, sigma, steps, seed, data):
    rank = data.draw(st.integers(0, n - 1))
    t = faults.simulate_step_times(
        n, delta, sigma, steps=steps, seed=seed, straggler_rank=rank
    )
    base = faults.simulate_step_times(
        n, 0.0, sigma, steps=steps, seed=seed, straggler_rank=rank
    )
    assert t.shape == (steps, n) and np.all(np.isfinite(t)) and np.all(t > 0)
    others = np.arange(n) != rank
    assert np.array_equal(t[:, others], base[:, others])
    np.testing.assert_allclose(t[:, rank], (1 + delta) * base[:, rank], rtol=1e-12)


@pytest.mark.parametrize("bad", [-1, 4, 1.0, True, "0", None])
def test_simulation_names_a_bad_straggler_rank(bad):
    _raises_naming(
        "straggler_rank", faults.simulate_step_times, 4, 0.1, straggler_rank=bad
    )


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0"])
def test_simulation_names_a_bad_seed(bad):
    _raises_naming("seed", faults.simulate_step_times, 4, 0.1, seed=bad)


step_times = st.integers(1, 30).flatmap(
    lambda steps: st.integers(2, 30).flatmap(
        lambda n: st.lists(
            st.lists(st.floats(0, 1e3), min_size=n, max_size=n),
            min_size=steps,
            max_size=steps,
        )
    )
)


@FEW
@given(step_times)
def test_allreduce_wait_is_what_each_rank_waits_for_the_last(times):
    times = np.asarray(times)
    wait = faults.allreduce_wait(times)
    assert wait.shape == times.shape and np.all(wait >= 0)
    assert np.all(wait.min(axis=1) == 0)  # the last rank waits for nobody
    np.testing.assert_allclose(
        wait + times, np.broadcast_to(times.max(axis=1, keepdims=True), times.shape)
    )


@FEW
@given(step_times)
def test_find_straggler_returns_a_rank_that_waits_least(times):
    times = np.asarray(times)
    rank, score = faults.find_straggler(times)
    wait = faults.allreduce_wait(times).mean(axis=0)
    assert 0 <= rank < times.shape[1] and wait[rank] == wait.min()
    assert math.isfinite(score) and score >= 0  # at or below the others' median


@FEW
@given(
    st.integers(2, 64),
    st.floats(1e-3, 0.2),
    st.integers(10, 200),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_a_rank_far_slower_than_the_noise_is_found_and_never_waits(
    n, sigma, steps, seed, data
):
    rank = data.draw(st.integers(0, n - 1))
    delta = math.expm1(
        20 * sigma
    )  # 20 standard deviations of log-time: always the last
    times = faults.simulate_step_times(
        n, delta, sigma, steps=steps, seed=seed, straggler_rank=rank
    )
    found, _ = faults.find_straggler(times)
    assert found == rank
    assert np.all(faults.allreduce_wait(times)[:, rank] == 0)


@pytest.mark.parametrize("fn", [faults.allreduce_wait, faults.find_straggler])
@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(3),
        np.zeros((0, 4)),
        [[1.0, math.nan]],
        [[1.0, math.inf]],
        [[1.0, -1.0]],
        "times",
        [["a", "b"]],
    ],
)
def test_timing_functions_name_bad_times(fn, bad):
    _raises_naming("times", fn, bad)


def test_find_straggler_needs_two_ranks():
    _raises_naming("times", faults.find_straggler, np.ones((5, 1)))


# --- silent corruption ---------------------------------------------------------------

float_arrays = st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=64)


@FEW
@given(float_arrays, st.integers(0, 31), st.data())
def test_a_flipped_bit_changes_one_element_and_the_checksum_by_its_weight(
    values, bit, data
):
    index = data.draw(st.integers(0, len(values) - 1))
    x = np.asarray(values, dtype=np.float32)
    y = faults.flip_bit(x, index, bit)
    differs = x.view(np.uint32) != y.view(np.uint32)
    assert y.shape == x.shape and differs.sum() == 1 and differs[index]
    assert abs(faults.checksum(y) - faults.checksum(x)) == 2**bit
    assert (
        faults.flip_bit(y, index, bit).tobytes() == x.tobytes()
    )  # flipping twice restores it


@FEW
@given(float_arrays, st.randoms(use_true_random=False))
def test_checksum_ignores_order_and_sees_only_bits(values, rnd):
    x = np.asarray(values, dtype=np.float32)
    shuffled = x.copy()
    rnd.shuffle(shuffled)
    c = faults.checksum(x)
    assert isinstance(c, int) and 0 <= c < 2**63
    assert faults.checksum(shuffled) == c


@pytest.mark.parametrize("bad", [32, -1, True, 1.5, "3", None])
def test_flip_bit_names_a_bad_bit(bad):
    _raises_naming("bit", faults.flip_bit, np.zeros(4, np.float32), 0, bad)


@pytest.mark.parametrize("bad", [4, -1, True, 1.0, "0", None])
def test_flip_bit_names_a_bad_index(bad):
    _raises_naming("index", faults.flip_bit, np.zeros(4, np.float32), bad, 0)


@pytest.mark.parametrize("fn", [lambda v: faults.flip_bit(v, 0, 0), faults.checksum])
@pytest.mark.parametrize(
    "bad", ["abc", ["a", "b"], [True, False], [None, 1.0], [{"x": 1}]]
)
def test_bit_functions_name_bad_values(fn, bad):
    _raises_naming("values", fn, bad)


# --- loss spikes ----------------------------------------------------------------------

losses = st.lists(st.floats(0.01, 100.0), max_size=80)


@FEW
@given(losses)
def test_detect_spikes_returns_positions_in_order(values):
    flagged = faults.detect_spikes(values)
    assert flagged == sorted(set(flagged)) and all(
        0 <= i < len(values) for i in flagged
    )


@FEW
@given(st.floats(0.01, 100.0), st.integers(10, 60), st.floats(1.0, 1e6))
def test_a_flat_curve_raises_no_alarm_and_a_jump_far_above_it_does(level, n, factor):
    cfg = faults.SpikeConfig()
    assert faults.detect_spikes([level] * n, cfg) == []
    # the std is floored at rel_floor * mean, so a jump of more than
    # z_threshold of those is a spike
    jump = level * (1 + cfg.z_threshold * cfg.rel_floor * (1 + factor))
    assert faults.detect_spikes([level] * n + [jump], cfg) == [n]


@FEW
@given(losses, st.sampled_from([math.nan, math.inf, -math.inf]), st.data())
def test_a_non_finite_loss_is_always_a_spike(values, bad, data):
    i = data.draw(st.integers(0, len(values)))
    assert i in faults.detect_spikes(values[:i] + [bad] + values[i:])


@pytest.mark.parametrize("bad", ["loss", [1.0, "x"], [True], [None], 3.0])
def test_detect_spikes_names_bad_values(bad):
    _raises_naming("values", faults.detect_spikes, bad)


def test_detect_spikes_names_a_bad_config():
    _raises_naming("config", faults.detect_spikes, [1.0], {"window": 5})


skip_lists = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 500)), max_size=5)


@FEW
@given(st.integers(0, 10_000), skip_lists)
def test_batch_for_step_only_moves_forward(step, skips):
    b = faults.batch_for_step(step, skips)
    assert b >= step and faults.batch_for_step(step + 1, skips) >= b + 1
    assert faults.batch_for_step(step) == step
    # a skip still in the future changes nothing yet
    assert faults.batch_for_step(step, skips + [(step + 1, 7)]) == b


@pytest.mark.parametrize("bad", NOT_NON_NEGATIVE_INT)
def test_batch_for_step_names_a_bad_step(bad):
    _raises_naming("step", faults.batch_for_step, bad)


@pytest.mark.parametrize(
    "bad", [[(1,)], [(1, 2, 3)], [(-1, 2)], [(1, -2)], [(1.5, 2)], ["ab"]]
)
def test_batch_for_step_names_a_bad_skip(bad):
    _raises_naming("skips", faults.batch_for_step, 3, bad)


# --- the elastic timeline -------------------------------------------------------------


@st.composite
def timelines(draw):
    """Rank 0's events of a run of `total` steps, checkpointed every `every`,
    killed after `fail` steps and resumed from the newest checkpoint."""
    total = draw(st.integers(2, 60))
    every = draw(st.integers(1, total))
    fail = draw(st.integers(1, total - 1))
    resume = fail // every * every
    t = iter(
        np.cumsum(
            draw(
                st.lists(
                    st.floats(0.001, 10.0),
                    min_size=2 * total + 10,
                    max_size=2 * total + 10,
                )
            )
        )
    )
    ev = [{"kind": "start", "attempt": 0, "t": next(t)}]
    for s in range(1, fail + 1):
        ev.append({"kind": "step", "attempt": 0, "t": next(t), "step": s})
        if s % every == 0:
            ev.append({"kind": "checkpoint", "attempt": 0, "t": next(t), "step": s})
    ev.append({"kind": "fail", "attempt": 0, "t": next(t), "step": fail})
    ev.append({"kind": "start", "attempt": 1, "t": next(t)})
    if resume:
        ev.append({"kind": "resume", "attempt": 1, "t": next(t), "step": resume})
    for s in range(resume + 1, total + 1):
        ev.append({"kind": "step", "attempt": 1, "t": next(t), "step": s})
    return ev, total, every, fail, resume


@FEW
@given(timelines())
def test_the_summary_resumes_from_the_newest_checkpoint_before_the_failure(case):
    ev, total, every, fail, resume = case
    s = faults.summarize_timeline(ev)
    assert s.attempts == 2 and s.final_step == total and s.failed_at_step == fail
    assert s.last_checkpoint_step == (resume or None) and s.resumed_from_step == resume
    assert s.redone_steps == fail - resume and 0 <= s.redone_steps < every
    assert s.steps_done == fail + total - resume
    assert s.downtime_s > 0 and s.wall_s >= s.downtime_s


@FEW
@given(timelines())
def test_a_run_without_failure_has_nothing_to_redo(case):
    ev = [e for e in case[0] if e["attempt"] == 0 and e["kind"] != "fail"]
    s = faults.summarize_timeline(ev)
    assert (
        s.attempts == 1
        and s.redone_steps == 0
        and s.failed_at_step is None
        and s.downtime_s == 0
    )


@pytest.mark.parametrize(
    "bad",
    [
        "events",
        {"kind": "step"},
        5,
        [1],
        [{"kind": "explode", "attempt": 0, "t": 0.0}],
        [{"kind": "step", "attempt": -1, "t": 0.0, "step": 1}],
        [{"kind": "step", "attempt": 0, "t": math.nan, "step": 1}],
        [{"kind": "step", "attempt": 0, "t": 0.0}],
        [],
        [{"kind": "start", "attempt": 0, "t": 0.0}],
    ],
)
def test_summarize_timeline_names_bad_events(bad):
    _raises_naming("events", faults.summarize_timeline, bad)
