"""Checkpoint cadence: closed forms, the Monte Carlo, the storage calculator."""

import math

import numpy as np
import pytest

from mlbook.cadence import formulas as c

H = c.HOUR_S


# --- known answers ---------------------------------------------------------------


def test_young_known_answers():
    # sqrt(2 C T): C = 30 s, T = 3 h -> sqrt(648 000) s; C = 1 min -> sqrt(1 296 000) s
    assert c.young_interval(30, 3 * H) == pytest.approx(804.98, abs=0.01)
    assert c.young_interval(60, 3 * H) == pytest.approx(1138.42, abs=0.01)
    assert c.young_interval(50, 100) == pytest.approx(100.0)


def test_daly_known_answer_and_branches():
    # C = 50, T = 100: C/(2T) = 1/4, sqrt(2CT) = 100 -> 100 (1 + 1/6 + 1/36) - 50
    assert c.daly_interval(50, 100) == pytest.approx(100 * (1 + 1 / 6 + 1 / 36) - 50)
    assert c.daly_interval(200, 100) == 100  # C >= 2T: checkpoint every T
    assert c.daly_interval(250, 100) == 100
    # small C/T: sqrt(2CT) sqrt(x)/3 = C/3, so Daly tends to Young minus 2C/3 (the next
    # term, sqrt(2CT) x / 9 = C sqrt(x) / 9, is 1e-4 C here)
    y, d = c.young_interval(1, 1e6), c.daly_interval(1, 1e6)
    assert y - d == pytest.approx(2 / 3, rel=1e-3)


def test_daly_is_the_exact_optimum_to_high_order():
    for cs, t in [(30, 3 * H), (60, 3 * H), (40, 2.5 * H), (600, 3 * H)]:
        opt = c.optimal_interval(cs, t)
        assert c.daly_interval(cs, t) == pytest.approx(opt, rel=2e-3)
        assert abs(c.young_interval(cs, t) - opt) > abs(c.daly_interval(cs, t) - opt)


def test_first_order_waste_minimum_is_sqrt_2c_over_t():
    cs, t = 30, 3 * H
    i = c.young_interval(cs, t)
    assert c.waste_fraction(i, cs, t) == pytest.approx(math.sqrt(2 * cs / t))
    grid = np.linspace(0.3 * i, 3 * i, 2001)
    assert grid[np.argmin(c.waste_fraction(grid, cs, t))] == pytest.approx(i, rel=2e-3)


def test_exact_waste_limits():
    # no failures to speak of: the waste is the checkpoint share C / (I + C)
    assert c.waste_fraction(100, 1, 1e12, exact=True) == pytest.approx(
        1 / 101, rel=1e-6
    )
    # exact and first order agree when C << I << T
    assert c.waste_fraction(100, 0.01, 1e7, exact=True) == pytest.approx(
        c.waste_fraction(100, 0.01, 1e7), rel=1e-3
    )
    # restarts only add waste
    assert c.waste_fraction(800, 30, 3 * H, 300, exact=True) > c.waste_fraction(
        800, 30, 3 * H, exact=True
    )


def test_waste_accepts_arrays():
    out = c.waste_fraction(np.array([100.0, 800.0]), 30, 3 * H, exact=True)
    assert out.shape == (2,)
    assert isinstance(c.waste_fraction(800.0, 30, 3 * H), float)


def test_cluster_mtbf():
    assert c.cluster_mtbf(1000 * H, 1000) == pytest.approx(H)
    assert c.cluster_mtbf(5.0, 1) == 5.0
    # I* falls as the square root of the node count
    ratio = c.young_interval(30, c.cluster_mtbf(1e6, 400)) / c.young_interval(
        30, c.cluster_mtbf(1e6, 100)
    )
    assert ratio == pytest.approx(0.5)


# --- Monte Carlo against the closed form ----------------------------------------


@pytest.mark.parametrize(
    "cs,t,r", [(30, 3 * H, 0.0), (60, 3 * H, 600.0), (40, 2.5 * H, 120.0)]
)
def test_monte_carlo_matches_exact_within_five_standard_errors(cs, t, r):
    for i in (
        c.young_interval(cs, t) / 4,
        c.young_interval(cs, t),
        4 * c.young_interval(cs, t),
    ):
        mc = c.simulate_waste(i, cs, t, restart_s=r, seed=1)
        exact = c.waste_fraction(i, cs, t, r, exact=True)
        se = c.monte_carlo_stderr(i, cs, t, r)
        # 5 standard errors: a normal deviate that large has probability 6e-7, so with
        # nine fixed-seed cases a failure means bias, not bad luck
        assert abs(mc - exact) < 5 * se, (i, mc, exact, se)


def test_monte_carlo_optimum_near_daly():
    cs, t = 30, 3 * H
    grid = np.geomspace(200, 3000, 60)
    mc = c.simulate_waste(grid, cs, t, horizon_s=20000 * t, seed=2)
    best = grid[np.argmin(mc)]
    # the waste curve is flat near its minimum: compare waste, not the argmin
    assert (
        c.waste_fraction(best, cs, t, exact=True)
        - c.waste_fraction(c.daly_interval(cs, t), cs, t, exact=True)
        < 2e-3
    )


def test_monte_carlo_is_seeded_and_vectorised():
    grid = np.array([300.0, 800.0, 2000.0])
    a = c.simulate_waste(grid, 30, 3 * H, seed=5)
    b = c.simulate_waste(grid, 30, 3 * H, seed=5)
    assert np.array_equal(a, b)
    assert a.shape == (3,)
    assert c.simulate_waste(800.0, 30, 3 * H, seed=5) == pytest.approx(a[1])
    assert not np.array_equal(a, c.simulate_waste(grid, 30, 3 * H, seed=6))


def test_monte_carlo_without_failures_wastes_only_checkpoints():
    # horizon far below the MTBF: almost surely no failure
    w = c.simulate_waste(90.0, 10.0, 1e15, horizon_s=1000.0, seed=0)
    assert w == pytest.approx(100 / 1000)  # 10 segments, each 10 s of checkpoint


# --- storage -----------------------------------------------------------------------


def test_checkpoint_bytes_70b():
    total = c.checkpoint_bytes(70e9)
    parts = c.checkpoint_bytes(70e9, breakdown=True)
    assert parts["bf16 weights"] == pytest.approx(140e9)
    assert parts["fp32 master weights"] + parts["Adam m (fp32)"] + parts[
        "Adam v (fp32)"
    ] == pytest.approx(840e9)
    assert total == pytest.approx(980e9)  # "about 1 TB"
    assert not any("gradient" in k for k in parts)


def test_write_time_sharding():
    b = 1e12
    one = c.write_time_s(b, 1, 2e9, 100e9)
    assert one == pytest.approx(500.0)
    assert c.write_time_s(b, 10, 2e9, 100e9) == pytest.approx(50.0)
    assert c.write_time_s(b, 1000, 2e9, 100e9) == pytest.approx(10.0)  # storage-bound


# --- bad input -----------------------------------------------------------------------


def test_other_bad_input():
    """Arrays and seeds (tests/test_cadence_properties.py checks every scalar
    argument of every function)."""
    with pytest.raises(ValueError, match="interval_s"):
        c.waste_fraction(np.array([100.0, 0.0]), 30, 100)
    with pytest.raises(ValueError, match="interval_s"):
        c.simulate_waste(np.array([]), 30, 100)
    with pytest.raises(ValueError, match="seed"):
        c.simulate_waste(100, 30, 100, seed=1.5)


# --- figures --------------------------------------------------------------------------


def test_figures_have_labelled_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlbook.cadence import figures as figs
    from mlbook.cadence.experiments import ModeTiming, ResumeResult, SaveModes

    modes = SaveModes(
        "CPU",
        {
            m: ModeTiming(
                1.0,
                (0.1, 0.2),
                () if m == "none" else (0.05, 0.04),
                () if m == "none" else (0.05, 0.3),
                0,
            )
            for m in ("none", "sync", "async")
        },
    )
    res = ResumeResult(
        resumed_from=2,
        crash_at=3,
        ref_losses=(3.0, 2.9, 2.8, 2.7),
        crashed_losses=(3.0, 2.9, 2.8),
        exact_losses=(2.8, 2.7),
        naive_losses=(2.9, 2.85),
        exact_weights_equal=True,
        exact_max_weight_diff=0.0,
        naive_max_weight_diff=0.1,
        exact_extra=0,
        exact_missing=0,
        naive_extra=4,
        naive_missing=4,
        samples_per_step=4,
    )
    for fig in (
        figs.interval_vs_cluster(1000 * H, [30]),
        figs.save_stall(modes, "CPU"),
        figs.resume_losses(res),
        figs.checkpoint_storage(70e9, "70B", 1e9, 200e9),
    ):
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel()
        plt.close(fig)


def test_storage_figure_shows_the_floor():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlbook.cadence import figures as figs

    for writer_bw in (11.4e6, 1e9):  # saturates past 8192 writers, and well before
        fig = figs.checkpoint_storage(70e9, "70B", writer_bw, 200e9)
        x = fig.axes[1].lines[0].get_xdata()
        assert x.max() >= 4 * 200e9 / writer_bw
        plt.close(fig)


# --- the simulation has no bias -------------------------------------------------------


def test_monte_carlo_is_unbiased_over_seeds():
    """Many independent runs average to the exact waste (the simulation has no bias)."""
    t = 3 * H
    d = c.daly_interval(30.0, t)
    runs = np.array(
        [c.simulate_waste(d, 30.0, t, horizon_s=300 * t, seed=s) for s in range(200)]
    )
    exact = c.waste_fraction(d, 30.0, t, exact=True)
    # The mean of 200 independent runs has standard error sd / sqrt(200); by the central
    # limit theorem a deviation beyond 4 of them has probability 6e-5 for an unbiased
    # simulation. The seeds are fixed, so this either always passes or shows a bias.
    assert abs(runs.mean() - exact) < 4 * runs.std(ddof=1) / math.sqrt(len(runs))
