"""Property tests for the accumulation chapter's torch-free code: the cost model,
the token normalisation and the loss-scale bounds (mlbook.accumulation.formulas),
and the live figure (mlbook.accumulation.live). For any valid input the
functions return finite numbers that move the way the model says, and any bad
argument raises a ValueError that names it."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.accumulation import formulas as cost
from mlbook.accumulation import live

PROPERTY_COVERS = {
    "mlbook.accumulation.formulas.check_k",
    "mlbook.accumulation.formulas.divisors",
    "mlbook.accumulation.formulas.fit_line",
    "mlbook.accumulation.formulas.fit_cost_model",
    "mlbook.accumulation.formulas.token_normalised_losses",
    "mlbook.accumulation.formulas.naive_token_losses",
    "mlbook.accumulation.formulas.loss_scale_log2",
    "mlbook.accumulation.formulas.largest_unscaled_k",
    "mlbook.accumulation.live.cost_data",
    "mlbook.accumulation.live.micro_batch_range",
    "mlbook.accumulation.live.cost_explorer",
}

FEW = examples(50)

NOT_NUMBERS = [math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = [0, -1, 2.0, 1.5, math.nan, math.inf, True, "4", None]

seconds = st.floats(1e-6, 1.0)
byte_counts = st.floats(1.0, 1e9)


@st.composite
def batch_and_divisor(draw):
    B = draw(st.integers(1, 4096))
    return B, draw(st.sampled_from(cost.divisors(B)))


@st.composite
def cost_models(draw):
    return cost.StepCostModel(
        optimizer_s=draw(seconds),
        per_micro_batch_s=draw(seconds),
        per_example_s=draw(seconds),
        per_example_bytes=draw(byte_counts),
        fixed_bytes=draw(byte_counts),
    )


def synthetic_sweep(model: cost.StepCostModel, B: int) -> cost.KSweep:
    """What a noiseless measurement of ``model`` at global batch B would record."""
    rows = tuple(
        cost.SweepRow(k, B // k, model.step_s(B, k), model.activation_bytes(B // k))
        for k in cost.divisors(B)
    )
    return cost.KSweep(B, rows, optimizer_s=model.optimizer_s)


# --- valid inputs ---------------------------------------------------------------------


@FEW
@given(batch_and_divisor())
def test_check_k_accepts_every_divisor(Bk):
    B, k = Bk
    assert cost.check_k(k, B) == k


@FEW
@given(st.integers(2, 4096), st.integers(2, 4096))
def test_check_k_refuses_a_k_that_does_not_divide(B, k):
    assume(B % k)
    with pytest.raises(ValueError, match=rf"k={k} must divide batch_size={B}"):
        cost.check_k(k, B)


@FEW
@given(st.integers(1, 5000), st.integers(1, 20))
def test_divisors_pair_up_and_grow_with_multiples(n, m):
    ds = cost.divisors(n)
    assert ds[0] == 1 and ds[-1] == n and ds == sorted(set(ds))
    assert all(
        n % d == 0 and n // d in ds for d in ds
    )  # d divides n exactly when n / d does
    assert set(ds) <= set(cost.divisors(n * m))  # every divisor of n divides n m


@FEW
@given(
    st.floats(-1e3, 1e3),
    st.floats(-1e3, 1e3),
    st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=20, unique=True),
    st.floats(0.1, 1e3),
)
def test_fit_line_recovers_a_line_and_follows_a_shift(a, b, xs, c):
    assume(max(xs) - min(xs) > 1e-2)
    ys = [a + b * x for x in xs]
    intercept, slope = cost.fit_line(xs, ys)
    assert math.isfinite(intercept) and math.isfinite(slope)
    # tolerance: the sums of up to 20 products of size 1e6 in float64,
    # relative 1e-12 each
    assert slope == pytest.approx(b, abs=1e-6 * (1 + abs(b)) / (max(xs) - min(xs)))
    shifted, same_slope = cost.fit_line(
        xs, [y + c for y in ys]
    )  # lifting every y lifts the intercept
    assert shifted > intercept and same_slope == pytest.approx(slope, abs=1e-6)


@FEW
@given(cost_models(), st.sampled_from([1, 2, 8, 12, 64, 96]))
def test_fit_cost_model_recovers_the_model_it_measures(model, B):
    assume(len(cost.divisors(B)) >= 2)
    fit = cost.fit_cost_model(synthetic_sweep(model, B))
    scales = {
        "s": (1 + B)
        * max(model.optimizer_s, model.per_micro_batch_s, model.per_example_s),
        "bytes": (1 + B) * max(model.per_example_bytes, model.fixed_bytes),
    }
    for name in (
        "optimizer_s",
        "per_micro_batch_s",
        "per_example_s",
        "per_example_bytes",
        "fixed_bytes",
    ):
        got, want = getattr(fit, name), getattr(model, name)
        assert math.isfinite(got) and got >= 0
        # float64 least squares: relative 1e-6 of the value, or a few thousand ulps
        # (1e-12) of the largest value the same fit sees (a 1-byte intercept under
        # 1e11-byte points comes back as 1.000002)
        scale = scales["bytes" if name.endswith("bytes") else "s"]
        assert got == pytest.approx(
            want, rel=1e-6, abs=1e-9 * (1 + B) + 1e-12 * scale
        ), name


@FEW
@given(cost_models(), batch_and_divisor())
def test_step_cost_model_moves_the_way_the_formula_says(model, Bk):
    B, k = Bk
    t = model.step_s(B, k)
    assert math.isfinite(t) and t > 0
    if B % (2 * k) == 0:  # more micro-batches: one more overhead each
        assert model.step_s(B, 2 * k) > t
    assert model.slowdown(B, k) >= 1  # k micro-batches never beat one batch here
    assert 0 <= model.overhead_share(B, k) < 1
    b = B // k
    assert model.activation_bytes(b + 1) > model.activation_bytes(b)  # memory follows b


@FEW
@given(cost_models())
def test_a_faster_overhead_fits_a_smaller_overhead(model):
    B = 64
    slower = cost.StepCostModel(
        model.optimizer_s,
        2 * model.per_micro_batch_s,
        model.per_example_s,
        model.per_example_bytes,
        model.fixed_bytes,
    )
    assert (
        cost.fit_cost_model(synthetic_sweep(slower, B)).per_micro_batch_s
        > cost.fit_cost_model(synthetic_sweep(model, B)).per_micro_batch_s
    )


@FEW
@given(cost_models(), st.sampled_from([8, 12, 64, 360, 1024]), st.floats(0.0, 1.0))
def test_the_largest_micro_batch_fits_and_the_next_divisor_does_not(model, B, share):
    budget = model.activation_bytes(1) + share * B * model.per_example_bytes
    b = model.largest_micro_batch(B, budget)
    ds = cost.divisors(B)
    assert B % b == 0 and model.activation_bytes(b) <= budget
    bigger = [d for d in ds if d > b]
    assert not bigger or model.activation_bytes(bigger[0]) > budget


# --- token normalisation over micro-batches -------------------------------------------

token_lists = st.lists(
    st.lists(st.floats(0.0, 20.0), min_size=0, max_size=12), min_size=1, max_size=8
).filter(lambda t: any(t))


@FEW
@given(token_lists, st.integers(0, 7))
def test_the_normalised_losses_add_up_to_the_whole_batchs_token_mean(t, cut):
    flat = [v for losses in t for v in losses]
    losses = cost.token_normalised_losses(t)
    assert len(losses) == len(t) and all(math.isfinite(v) and v >= 0 for v in losses)
    assert math.fsum(losses) == pytest.approx(math.fsum(flat) / len(flat), abs=1e-12)
    # splitting a micro-batch in two moves no token's weight: the total is the same
    j = cut % len(t)
    half = len(t[j]) // 2
    split = t[:j] + [t[j][:half], t[j][half:]] + t[j + 1 :]
    assert math.fsum(cost.token_normalised_losses(split)) == pytest.approx(
        math.fsum(losses), abs=1e-12
    )


@FEW
@given(
    st.integers(1, 8),
    st.integers(1, 12),
    st.lists(st.floats(0.0, 20.0), min_size=96, max_size=96),
)
def test_the_naive_mean_is_right_exactly_when_the_micro_batches_are_equal(k, n, pool):
    equal = [pool[j * n : (j + 1) * n] for j in range(k)]
    naive, fixed = cost.naive_token_losses(equal), cost.token_normalised_losses(equal)
    assert naive == pytest.approx(fixed, rel=1e-12, abs=1e-12)
    # one micro-batch one token longer, holding the only non-zero losses: the naive
    # mean gives it 1 / (k + 1) of the loss, the token mean (n + 1) / (k n + n + 1)
    uneven = [[0.0] * n for _ in range(k)] + [[1.0] * (n + 1)]
    assert math.fsum(cost.naive_token_losses(uneven)) == pytest.approx(1 / (k + 1))
    assert math.fsum(cost.token_normalised_losses(uneven)) == pytest.approx(
        (n + 1) / (k * n + n + 1)
    )


# --- the loss scale accumulation needs ------------------------------------------------


@FEW
@given(
    st.floats(1e-12, 1.0),
    st.integers(1, 4096),
    st.sampled_from([2.0**-25, 2.0**-24, 2.0**-14, 2.0**-133]),  # fp16, fp16, bf16
)
def test_the_loss_scale_is_the_smallest_power_of_two_that_keeps_the_gradient(g, k, f):
    g_, f_ = Fraction(g), Fraction(f)  # compared exactly, as the functions do
    e = cost.loss_scale_log2(g, k, f)
    assert e >= 0 and 2**e * g_ / k > f_
    if e > 0:
        assert 2 ** (e - 1) * g_ / k <= f_
    assert cost.loss_scale_log2(g, 2 * k, f) in (e, e + 1)  # twice k: one more at most
    k_max = cost.largest_unscaled_k(g, f)
    assert k_max >= 0 and (k_max == 0 or g_ / k_max > f_) and g_ / (k_max + 1) <= f_
    assert (cost.loss_scale_log2(g, k, f) == 0) == (k <= k_max)


# --- the live figure ------------------------------------------------------------------


@FEW
@given(cost_models(), st.integers(3, 10), st.data())
def test_the_live_figure_marks_the_choice_on_the_models_curves(model, e, data):
    B = 2**e
    b = data.draw(st.sampled_from(cost.divisors(B)))
    fixed = live.cost_data(model, synthetic_sweep(model, 16))
    assert live.micro_batch_range(global_batch=B) == {"micro_batch": {"max": B}}
    spec = live.cost_explorer(B, b, **fixed)
    lines = [lay for lay in spec["layer"] if lay["mark"]["type"] == "line"]
    steps = [r["step_ms"] for r in lines[0]["data"]["values"]]
    acts = [r["act_mib"] for r in lines[0]["data"]["values"]]
    assert len(steps) == e + 1  # the divisors of 2^e: 1, 2, ..., 2^e
    assert all(x <= y for x, y in pairwise(steps)), "more micro-batches, more time"
    assert all(x >= y for x, y in pairwise(acts)), "smaller micro-batches, less memory"
    chosen = [
        lay["data"]["values"][0]
        for lay in spec["layer"]
        if lay["mark"].get("color") == live.CHOICE_COLOR
    ]
    assert len(chosen) == 2 and all(c["k"] == B // b for c in chosen)
    assert chosen[0]["step_ms"] == pytest.approx(model.step_s(B, B // b) * 1e3)
    assert f"B={B}, b={b} -> k={B // b}:" in spec["title"]["text"]
    for lay in spec["layer"]:  # every mark sits inside its axis
        y = lay["encoding"]["y"]
        top = y["scale"]["domain"][1]
        assert all(0 <= r[y["field"]] <= top for r in lay["data"]["values"])


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_bad_integers_are_named(bad):
    with pytest.raises(ValueError, match="k must be an integer above 0"):
        cost.check_k(bad, 8)
    with pytest.raises(ValueError, match="batch_size must be an integer above 0"):
        cost.check_k(1, bad)
    with pytest.raises(ValueError, match="n must be an integer above 0"):
        cost.divisors(bad)


@pytest.mark.parametrize("bad", NOT_NUMBERS)
def test_fit_line_names_the_bad_sequence(bad):
    with pytest.raises(ValueError, match="xs must be a finite number"):
        cost.fit_line([1.0, bad, 3.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="ys must be a finite number"):
        cost.fit_line([1.0, 2.0, 3.0], [1.0, 2.0, bad])


def test_fit_line_needs_two_distinct_xs_and_matching_lengths():
    with pytest.raises(ValueError, match="two distinct"):
        cost.fit_line([1, 1], [2, 3])
    with pytest.raises(ValueError, match="must match"):
        cost.fit_line([1, 2], [2])


def _sweep(**change):
    model = cost.StepCostModel(0.005, 0.003, 0.0002, 2048, 100)
    sweep = synthetic_sweep(model, 8)
    fields = dict(
        global_batch=sweep.global_batch, rows=sweep.rows, optimizer_s=sweep.optimizer_s
    )
    fields.update(change)
    return cost.KSweep(**fields)


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_fit_cost_model_names_a_bad_global_batch(bad):
    with pytest.raises(ValueError, match="global_batch must be an integer above 0"):
        cost.fit_cost_model(_sweep(global_batch=bad))


@pytest.mark.parametrize("bad", [-1.0] + NOT_NUMBERS)
def test_fit_cost_model_names_a_bad_optimizer_time(bad):
    with pytest.raises(
        ValueError, match="optimizer_s must be a finite number at or above 0"
    ):
        cost.fit_cost_model(_sweep(optimizer_s=bad))


@pytest.mark.parametrize(
    "field,bad,match",
    [
        ("step_s", math.nan, "step_s must be a finite number"),
        ("step_s", -1.0, "step_s must be a finite number at or above 0"),
        ("step_s", "fast", "step_s must be a finite number"),
        ("saved_bytes", math.inf, "saved_bytes must be a finite number"),
        ("k", 3, "k=3 must divide batch_size=8"),
        ("k", True, "k must be an integer above 0"),
        ("micro_batch", 5, "micro_batch=5 times k=1 must be global_batch=8"),
    ],
)
def test_fit_cost_model_names_a_bad_row(field, bad, match):
    sweep = _sweep()
    row = sweep.rows[0]
    rows = (cost.SweepRow(**{**row.__dict__, field: bad}),) + sweep.rows[1:]
    with pytest.raises(ValueError, match=match):
        cost.fit_cost_model(_sweep(rows=rows))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: cost.token_normalised_losses([]), "at least one micro-batch"),
        (lambda: cost.token_normalised_losses([[], []]), "holds no token"),
        (lambda: cost.token_normalised_losses("abc"), "list of lists"),
        (lambda: cost.token_normalised_losses(["ab"]), r"token_losses\[0\] must be"),
        (
            lambda: cost.token_normalised_losses([[1.0], [math.nan]]),
            r"token_losses\[1\]\[0\] must be a finite number",
        ),
        (lambda: cost.naive_token_losses([[1.0], []]), r"token_losses\[1\] is empty"),
        (lambda: cost.loss_scale_log2(0.0, 4, 2.0**-25), "grad must be"),
        (lambda: cost.loss_scale_log2(1e-7, 0, 2.0**-25), "k must be an integer"),
        (lambda: cost.loss_scale_log2(1e-7, 4, -1.0), "flush must be"),
        (lambda: cost.largest_unscaled_k(math.inf, 2.0**-25), "grad must be"),
        (
            lambda: cost.StepCostModel(0, 0, 0, 10, 5).largest_micro_batch(8, 4),
            "no micro-batch fits",
        ),
        (
            lambda: cost.StepCostModel(0, 0, 0, 10, 5).largest_micro_batch(0, 100),
            "global_batch must be an integer",
        ),
    ],
)
def test_bad_token_losses_scales_and_budgets_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
