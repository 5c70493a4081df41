"""The faults chapter's live figure, mlbook.faults.live.straggler_explorer,
without a browser: its controls are those of the matplotlib slider it
replaces, its curves are the straggler integral and the drained step, the
chosen point and the break-even sit where the formulas put them (checked
against hand values: no spread, delta = 1/(N - 1)), the title carries the
values drawn, and for any setting of the controls it draws valid JSON whose
numbers move as the formulas say."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.faults import formulas as faults
from mlbook.faults import live

PROPERTY_COVERS = {
    "mlbook.faults.live.delta_grid",
    "mlbook.faults.live.straggler_explorer",
}
FEW = examples(20)  # each draw is ~40 straggler integrals


def layers(spec):
    """The spec's layers by mark type: lines, the rule, the marker."""
    out = {}
    for layer in spec["layer"]:
        out.setdefault(layer["mark"]["type"], []).append(layer)
    return out


def curve(spec, name):
    (lines,) = layers(spec)["line"]
    return [r for r in lines["data"]["values"] if r["curve"] == name]


def test_the_controls_keep_the_old_sliders_ranges():
    # the matplotlib slider: N 2..16384, delta 0..1 by 0.01, sigma 0..0.3 by 0.01;
    # N now moves by factors of 2 (2, 4, ..., 16384 = 2^14)
    c = {x.name: x for x in live.straggler_explorer.live.controls}
    assert (c["n_ranks"].min, c["n_ranks"].max, c["n_ranks"].value) == (2, 16384, 1024)
    assert c["n_ranks"].scale == "log" and c["n_ranks"].step == 2
    assert (c["delta"].min, c["delta"].max, c["delta"].step) == (0, 1, 0.01)
    assert (c["sigma"].min, c["sigma"].max, c["sigma"].step) == (0, 0.3, 0.01)
    assert all("(" in x.label for x in c.values())  # each label says its unit


def test_no_spread_is_the_hand_computation():
    # sigma = 0: waiting costs exactly 1 + delta, draining N/(N - 1), and the
    # break-even is delta = 1/(N - 1): at N = 64, 1/63 = 1.587 %
    spec = live.straggler_explorer(64, 0.25, 0.0)
    wait = curve(spec, live.WAIT)
    assert all(r["ratio"] == pytest.approx(1 + r["delta"], rel=1e-12) for r in wait)
    drained = [r["ratio"] for r in curve(spec, live.DRAIN)]
    assert drained == pytest.approx([64 / 63] * len(drained), rel=1e-12)
    (rule,) = layers(spec)["rule"]
    assert rule["data"]["values"][0]["delta"] == pytest.approx(1 / 63, rel=1e-12)
    (star,) = layers(spec)["point"]
    chosen = star["data"]["values"][0]
    assert chosen["delta"] == 0.25 and chosen["ratio"] == pytest.approx(1.25)
    assert "N=64" in spec["title"]["text"] and "delta=25%" in spec["title"]["text"]
    assert (
        "+25.00%" in spec["title"]["text"] and "drain it" in spec["title"]["subtitle"]
    )


def test_the_default_marks_the_integral_and_the_break_even():
    # what the matplotlib slider showed at its default: the marker at
    # 1 + straggler_slowdown, the break-even within the bisection's 1e-4
    n, delta, sigma = 1024, 0.1, 0.05
    spec = live.straggler_explorer(n, delta, sigma)
    (star,) = layers(spec)["point"]
    chosen = star["data"]["values"][0]
    assert chosen["ratio"] == pytest.approx(
        1 + faults.straggler_slowdown(n, delta, sigma), rel=1e-12
    )
    (rule,) = layers(spec)["rule"]
    assert math.isclose(
        rule["data"]["values"][0]["delta"],
        faults.drain_threshold(n, sigma),
        abs_tol=2e-4,
    )
    assert spec["title"]["text"].startswith("N=1,024, sigma=5%, delta=10%")


@pytest.mark.parametrize(
    "n,delta,sigma", [(2, 0.0, 0.0), (16384, 1.0, 0.3), (2, 1.0, 0.3), (16384, 0, 0)]
)
def test_draws_at_the_ends_of_its_ranges(n, delta, sigma):
    spec = live.straggler_explorer(n, delta, sigma)
    json.dumps(spec, allow_nan=False)
    x = layers(spec)["line"][0]["encoding"]["x"]
    assert x["scale"]["domain"][1] >= delta  # the chosen delta is on the axis


def test_the_break_even_is_left_out_when_it_is_off_the_axis():
    # N = 2, no spread: draining leaves one rank doing twice the work, so the
    # break-even is delta = 1, beyond the axis's 0.5 when delta = 0.1
    spec = live.straggler_explorer(2, 0.1, 0.0)
    assert "rule" not in layers(spec)
    assert "break-even delta = 100.00%" in spec["title"]["subtitle"]


@FEW
@given(st.floats(0.0, 1.0))
def test_delta_grid_covers_the_chosen_delta(delta):
    grid = live.delta_grid(delta)
    assert grid[0] == 0 and grid[-1] >= max(0.5, delta)
    assert len(grid) == live.POINTS and grid == sorted(grid)


@FEW
@given(
    st.integers(1, 14).map(lambda k: 2**k),
    st.integers(0, 100).map(lambda k: k / 100),
    st.integers(0, 30).map(lambda k: k / 100),
)
def test_the_wait_curve_rises_from_one_and_the_verdict_follows_it(n, delta, sigma):
    spec = live.straggler_explorer(n, delta, sigma)
    json.dumps(spec, allow_nan=False)
    wait = [r["ratio"] for r in curve(spec, live.WAIT)]
    assert wait[0] == pytest.approx(1, abs=1e-9)
    assert all(b >= a - 1e-9 for a, b in zip(wait, wait[1:], strict=False))
    chosen = layers(spec)["point"][0]["data"]["values"][0]
    drain = faults.drop_step_time(n, sigma) / faults.expected_step_time(n, 0, sigma)
    assert chosen["drain"] == pytest.approx(drain, rel=1e-12)
    verdict = "drain it" if drain < chosen["ratio"] else "wait for it"
    assert spec["title"]["subtitle"].endswith(verdict)


def test_moving_delta_alone_costs_one_integral(monkeypatch):
    # the curves, the drained step and the break-even do not depend on the
    # chosen delta (below a third): they are kept, and a drag of the delta
    # slider draws the same figure a fresh computation would
    n, sigma = 1000, 0.04  # settings no other test draws, so nothing is kept yet
    live.straggler_explorer(n, 0.1, sigma)
    calls = []
    integral = faults.expected_step_time
    monkeypatch.setattr(
        faults,
        "expected_step_time",
        lambda *a, **k: calls.append(a) or integral(*a, **k),
    )
    kept = live.straggler_explorer(n, 0.2, sigma)
    assert len(calls) == 1  # the chosen point's
    live._curves.cache_clear()
    assert live.straggler_explorer(n, 0.2, sigma) == kept
    assert len(calls) > 20  # the curve's 25 points, and the bisection's
