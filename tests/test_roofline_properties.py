"""Property tests for the roofline (mlbook.mfu.roofline): for any valid
shape and machine the intensity, the attainable rate and the least time move
the way the roofline says, and a bad argument is refused by name."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.mfu import roofline

PROPERTY_COVERS = {
    "mlbook.mfu.roofline.matmul_flops",
    "mlbook.mfu.roofline.matmul_bytes",
    "mlbook.mfu.roofline.matmul_intensity",
    "mlbook.mfu.roofline.elementwise_intensity",
    "mlbook.mfu.roofline.adamw_intensity",
    "mlbook.mfu.roofline.ridge_point",
    "mlbook.mfu.roofline.attainable_flops_per_s",
    "mlbook.mfu.roofline.roofline_time_s",
    "mlbook.mfu.roofline.tokens_to_ridge",
}

FEW = examples(50)
dims = st.integers(1, 1 << 16)
widths = st.sampled_from([1, 2, 4])
peaks = st.floats(1e6, 1e16)
bandwidths = st.floats(1e6, 1e14)


@FEW
@given(dims, dims, dims, widths)
def test_matmul_intensity_is_flops_over_bytes_and_below_its_smallest_dim(m, n, k, e):
    flops = roofline.matmul_flops(m, n, k)
    got = roofline.matmul_intensity(m, n, k, e)
    assert got == pytest.approx(flops / roofline.matmul_bytes(m, n, k, e))
    # 2mnk / (e (mk + kn + mn)) < 2 min(m, n, k) / e: each term of the
    # denominator is at least min * (the product of the other two)
    assert 0 < got <= 2 * min(m, n, k) / e


@FEW
@given(dims, dims, dims, widths)
def test_more_tokens_never_lower_a_matmuls_intensity(m, n, k, e):
    assert roofline.matmul_intensity(m + 1, n, k, e) >= roofline.matmul_intensity(
        m, n, k, e
    )


@FEW
@given(st.floats(1e-3, 1e3), st.integers(1, 10), widths)
def test_elementwise_intensity_scales_with_flops_and_falls_with_operands(f, ops, e):
    got = roofline.elementwise_intensity(f, ops, e)
    assert got == pytest.approx(f / (ops * e))
    assert roofline.elementwise_intensity(2 * f, ops, e) == pytest.approx(2 * got)
    assert roofline.elementwise_intensity(f, ops + 1, e) < got


@FEW
@given(widths)
def test_adamw_intensity_halves_when_values_double(e):
    assert roofline.adamw_intensity(e) == pytest.approx(
        2 * roofline.adamw_intensity(2 * e)
    )


@FEW
@given(st.floats(1e-3, 1e6), peaks, bandwidths)
def test_attainable_is_min_of_the_roofs_and_the_ridge_is_where_they_meet(i, p, bw):
    got = roofline.attainable_flops_per_s(i, p, bw)
    assert got == pytest.approx(min(p, i * bw))
    ridge = roofline.ridge_point(p, bw)
    assert roofline.attainable_flops_per_s(ridge, p, bw) == pytest.approx(p)
    if i < ridge:
        assert got < p
    t = roofline.roofline_time_s(i * 1e9, 1e9, p, bw)
    assert t == pytest.approx(i * 1e9 / got)  # the time is the work at the roof


@FEW
@given(st.integers(1, 20_000), st.integers(1, 20_000), st.floats(0.1, 1000), widths)
def test_tokens_to_ridge_is_the_first_count_that_gets_there(d_in, d_out, ridge, e):
    t = roofline.tokens_to_ridge(d_in, d_out, ridge, e)
    if math.isinf(t):
        # the intensity's limit for ever more tokens stays at or below the ridge
        assert 2 * d_in * d_out / (e * (d_in + d_out)) <= ridge * (1 + 1e-9)
        return
    assert roofline.matmul_intensity(int(t), d_out, d_in, e) >= ridge * (1 - 1e-9)
    if t > 1:
        assert roofline.matmul_intensity(int(t) - 1, d_out, d_in, e) < ridge


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "2", None])
def test_every_calculator_refuses_a_bad_number_by_name(bad):
    calls = [
        (lambda: roofline.matmul_flops(bad, 1, 1), "m"),
        (lambda: roofline.matmul_bytes(1, 1, 1, bad), "bytes_per_value"),
        (lambda: roofline.matmul_intensity(1, bad, 1, 2), "n"),
        (lambda: roofline.elementwise_intensity(bad, 3, 4), "flops_per_element"),
        (lambda: roofline.adamw_intensity(bad), "bytes_per_value"),
        (lambda: roofline.ridge_point(bad, 1), "peak_flops_per_s"),
        (lambda: roofline.attainable_flops_per_s(bad, 1, 1), "intensity"),
        (lambda: roofline.roofline_time_s(1, 1, 1, bad), "bytes_per_s"),
        (lambda: roofline.tokens_to_ridge(bad, 1, 1, 2), "d_in"),
    ]
    for call, name in calls:
        with pytest.raises(ValueError, match=name):
            call()
