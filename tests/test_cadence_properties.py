"""Property tests for the cadence chapter's calculators (mlbook.cadence.formulas):
for any valid times they return finite numbers that move the way the formulas say
(the Young interval grows with C and T, the waste with C, a bigger cluster fails
sooner, more writers write faster), and for any bad argument they raise a
ValueError that names it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.cadence import formulas as cad

PROPERTY_COVERS = {
    "mlbook.cadence.formulas.young_interval",
    "mlbook.cadence.formulas.daly_interval",
    "mlbook.cadence.formulas.waste_fraction",
    "mlbook.cadence.formulas.optimal_interval",
    "mlbook.cadence.formulas.cluster_mtbf",
    "mlbook.cadence.formulas.simulate_waste",
    "mlbook.cadence.formulas.monte_carlo_stderr",
    "mlbook.cadence.formulas.checkpoint_bytes",
    "mlbook.cadence.formulas.write_time_s",
    "mlbook.cadence.formulas.checkpoint_plan",
}

FEW = examples(50)

checkpoints = st.floats(0.01, 3600.0)
mtbfs = st.floats(60.0, 1e7)
intervals = st.floats(1.0, 1e6)
restarts = st.floats(0.0, 3600.0)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]


@FEW
@given(checkpoints, mtbfs, st.floats(1.01, 4.0))
def test_young_and_daly_grow_with_c_and_t(c, t, k):
    y, d = cad.young_interval(c, t), cad.daly_interval(c, t)
    assert math.isfinite(y) and math.isfinite(d) and 0 < d
    assert cad.young_interval(k * c, t) > y and cad.young_interval(c, k * t) > y
    # Daly's formula is nondecreasing in C (its derivative is 1/(2u) - 2/3 + u/6 >= 0
    # for u = sqrt(C/2T) <= 1, and the C >= 2T branch returns T) and in T
    assert cad.daly_interval(k * c, t) >= d * (1 - 1e-12)
    assert cad.daly_interval(c, k * t) >= d * (1 - 1e-12)


@FEW
@given(
    st.floats(1e-3, 5.0),
    st.floats(1e-5, 0.5),
    mtbfs,
    st.floats(0.0, 1.0),
    st.floats(1.01, 4.0),
)
def test_waste_grows_with_c_and_r_and_falls_with_t(fi, fc, t, fr, k):
    # I, C and R in proportion to T, where the waste is a meaningful
    # fraction (far beyond that, e.g. I = 1e4 T, nothing is ever committed and
    # the exact waste is 1 throughout)
    i, c, r = fi * t, fc * t, fr * t
    for exact in (False, True):
        w = cad.waste_fraction(i, c, t, r, exact=exact)
        assert math.isfinite(w) and w > 0
        assert cad.waste_fraction(i, k * c, t, r, exact=exact) > w
        assert cad.waste_fraction(i, c, t, r + 60.0, exact=exact) > w
        assert cad.waste_fraction(i, c, k * t, r, exact=exact) < w
    assert cad.waste_fraction(i, c, t, r, exact=True) < 1


@FEW
@given(st.floats(1e-5, 0.1), mtbfs, st.floats(0.0, 1.0))
def test_optimal_interval_minimises_the_exact_waste(fc, t, fr):
    c, r = (
        fc * t,
        fr * t,
    )  # a write much shorter than the MTBF, where the optimum is sqrt(2CT)-like
    opt = cad.optimal_interval(c, t, r)
    assert math.isfinite(opt) and opt > 0
    w = cad.waste_fraction(opt, c, t, r, exact=True)
    for f in (0.9, 1.1):
        assert cad.waste_fraction(opt * f, c, t, r, exact=True) >= w * (1 - 1e-9)
    # R scales the exact waste's denominator, so it does not move the optimum.
    # The waste is flat at its minimum, so a float64 search pins the waste (compared
    # here to 1e-12), not the interval, to near machine precision.
    other = cad.optimal_interval(c, t, 0.0)
    assert cad.waste_fraction(other, c, t, r, exact=True) == pytest.approx(w, rel=1e-12)
    # a longer write moves the optimum out (by about sqrt 2 for twice the C;
    # 1 % is room enough)
    assert cad.optimal_interval(2 * c, t, r) > opt * 1.01


@FEW
@given(mtbfs, st.integers(1, 100_000))
def test_cluster_mtbf_falls_with_nodes(node, n):
    t = cad.cluster_mtbf(node, n)
    assert t == pytest.approx(node / n) and cad.cluster_mtbf(node, n + 1) < t


@FEW
@given(
    st.lists(intervals, min_size=1, max_size=5),
    checkpoints,
    st.floats(600.0, 1e5),
    restarts,
    st.integers(0, 2**31),
)
def test_simulated_waste_is_a_fraction_and_grows_with_c(ints, c, t, r, seed):
    grid = np.asarray(ints)
    horizon = 50 * t
    w = cad.simulate_waste(grid, c, t, r, horizon_s=horizon, seed=seed)
    assert (
        w.shape == grid.shape and np.all(np.isfinite(w)) and np.all((w >= 0) & (w <= 1))
    )
    # one failure trace (same seed): a longer write commits no more work by any moment
    assert np.all(
        cad.simulate_waste(grid, 2 * c, t, r, horizon_s=horizon, seed=seed) >= w - 1e-12
    )


@FEW
@given(intervals, checkpoints, mtbfs, restarts)
def test_monte_carlo_stderr_shrinks_with_the_horizon(i, c, t, r):
    se = cad.monte_carlo_stderr(i, c, t, r, horizon_s=100 * t)
    assert math.isfinite(se) and se > 0
    # four times the run, half the noise
    assert cad.monte_carlo_stderr(i, c, t, r, horizon_s=400 * t) == pytest.approx(
        se / 2
    )


@FEW
@given(
    st.floats(1.0, 1e13),
    st.integers(1, 100_000),
    st.floats(1e6, 1e11),
    st.floats(1e8, 1e13),
)
def test_storage(n_params, writers, writer_bw, storage_bw):
    total = cad.checkpoint_bytes(n_params)
    assert total == pytest.approx(14 * n_params)
    assert sum(
        cad.checkpoint_bytes(n_params, breakdown=True).values()
    ) == pytest.approx(total)
    c = cad.write_time_s(total, writers, writer_bw, storage_bw)
    assert math.isfinite(c) and c > 0
    assert cad.write_time_s(total, writers + 1, writer_bw, storage_bw) <= c
    assert cad.write_time_s(2 * total, writers, writer_bw, storage_bw) == pytest.approx(
        2 * c
    )
    assert c >= total / storage_bw * (1 - 1e-12)  # never faster than the storage


@FEW
@given(
    st.floats(1e6, 1e13),
    st.integers(1, 100_000),
    st.floats(1e5, 1e11),
    st.floats(1e8, 1e13),
    mtbfs,
    restarts,
)
def test_checkpoint_plan(total, writers, writer_bw, storage_bw, t, r):
    plan = cad.checkpoint_plan(total, writers, writer_bw, storage_bw, t, r)
    c = cad.write_time_s(total, writers, writer_bw, storage_bw)
    assert plan.write_s == c and plan.mtbf_s == t
    assert plan.interval_s == cad.daly_interval(c, t)
    assert 0 < plan.waste <= 1
    assert plan.waste == cad.waste_fraction(plan.interval_s, c, t, r, exact=True)
    # the job finishes exactly when it keeps at least 1 % of its time for training
    assert plan.finishes == (1 - plan.waste >= 0.01)
    # more writers never make it worse
    more = cad.checkpoint_plan(total, writers + 1, writer_bw, storage_bw, t, r)
    assert more.write_s <= c and (more.finishes or not plan.finishes)


# --- bad inputs: a ValueError that names the argument ---------------------------------

GOOD = dict(
    interval_s=600.0,
    checkpoint_s=30.0,
    mtbf_s=3 * 3600.0,
    restart_s=60.0,
    node_mtbf_s=1e6,
    n_nodes=8,
    horizon_s=1e6,
    n_params=7e9,
    checkpoint_bytes_total=1e12,
    n_writers=4,
    writer_bytes_per_s=1e9,
    storage_bytes_per_s=1e11,
)
CALLS = {
    "young_interval": (
        lambda k: cad.young_interval(k["checkpoint_s"], k["mtbf_s"]),
        ("checkpoint_s", "mtbf_s"),
    ),
    "daly_interval": (
        lambda k: cad.daly_interval(k["checkpoint_s"], k["mtbf_s"]),
        ("checkpoint_s", "mtbf_s"),
    ),
    "waste_fraction": (
        lambda k: cad.waste_fraction(
            k["interval_s"], k["checkpoint_s"], k["mtbf_s"], k["restart_s"], exact=True
        ),
        ("interval_s", "checkpoint_s", "mtbf_s", "restart_s"),
    ),
    "optimal_interval": (
        lambda k: cad.optimal_interval(k["checkpoint_s"], k["mtbf_s"], k["restart_s"]),
        ("checkpoint_s", "mtbf_s", "restart_s"),
    ),
    "cluster_mtbf": (
        lambda k: cad.cluster_mtbf(k["node_mtbf_s"], k["n_nodes"]),
        ("node_mtbf_s", "n_nodes"),
    ),
    "simulate_waste": (
        lambda k: cad.simulate_waste(
            k["interval_s"],
            k["checkpoint_s"],
            k["mtbf_s"],
            k["restart_s"],
            k["horizon_s"],
        ),
        ("interval_s", "checkpoint_s", "mtbf_s", "restart_s", "horizon_s"),
    ),
    "monte_carlo_stderr": (
        lambda k: cad.monte_carlo_stderr(
            k["interval_s"],
            k["checkpoint_s"],
            k["mtbf_s"],
            k["restart_s"],
            k["horizon_s"],
        ),
        ("interval_s", "checkpoint_s", "mtbf_s", "restart_s", "horizon_s"),
    ),
    "checkpoint_bytes": (lambda k: cad.checkpoint_bytes(k["n_params"]), ("n_params",)),
    "checkpoint_plan": (
        lambda k: cad.checkpoint_plan(
            k["checkpoint_bytes_total"],
            k["n_writers"],
            k["writer_bytes_per_s"],
            k["storage_bytes_per_s"],
            k["mtbf_s"],
            k["restart_s"],
        ),
        (
            "checkpoint_bytes_total",
            "n_writers",
            "writer_bytes_per_s",
            "storage_bytes_per_s",
            "mtbf_s",
            "restart_s",
        ),
    ),
    "write_time_s": (
        lambda k: cad.write_time_s(
            k["checkpoint_bytes_total"],
            k["n_writers"],
            k["writer_bytes_per_s"],
            k["storage_bytes_per_s"],
        ),
        (
            "checkpoint_bytes_total",
            "n_writers",
            "writer_bytes_per_s",
            "storage_bytes_per_s",
        ),
    ),
}
INTEGER_ARGS = {"n_nodes", "n_writers"}
MAY_BE_ZERO = {"restart_s"}
MAY_BE_NONE = {"horizon_s"}  # None is the documented default (2000 T)


@pytest.mark.parametrize("func", sorted(CALLS))
def test_every_numeric_argument_is_checked(func):
    call, args = CALLS[func]
    call(GOOD)  # the good values are good
    for arg in args:
        bads = NOT_POSITIVE_INT if arg in INTEGER_ARGS else NOT_POSITIVE
        for bad in bads:
            if arg in MAY_BE_ZERO and bad == 0 and bad is not True:
                continue  # a restart may cost nothing
            if arg in MAY_BE_NONE and bad is None:
                continue
            with pytest.raises(ValueError, match=f"^{arg} must"):
                call(GOOD | {arg: bad})
