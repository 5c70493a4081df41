"""The mixed-precision chapter's live figures (mlbook.precision.live) against
what they are drawn from, worked out here: the fp16 zone edges from IEEE 754
binary16, the zone fractions of made-up gradients counted by hand, a loss
scaler's run stepped through by hand (and GradScaler's measured scale drawn
on it), and the 16 bytes per parameter of
mixed-precision Adam (ZeRO, Rajbhandari et al. 2020, Sec. 3.1). The summary
the histogram figure carries is checked against real fp16 casts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import live as live_core
from mlbook.precision import experiments as P
from mlbook.precision import formulas as F
from mlbook.precision import live

PROPERTY_COVERS = {"mlbook.precision.live.measured_scales"}

# IEEE 754 binary16: values at or below half the smallest subnormal 2^-24 round to
# zero, the normals start at 2^-14, and the largest finite 65,504 plus half the top
# gap (2^(15-10) / 2 = 16) rounds to inf: log2(65,520)
FLUSH_LOG2, NORMAL_LOG2, INF_LOG2 = -25.0, -14.0, math.log2(65_520)


def _layers(spec, mark):
    return [lay for lay in spec["layer"] if lay["mark"]["type"] == mark]


@pytest.fixture(scope="module")
def made_up():
    """100 logit gradients: 10 at 2^-26 (flush), 30 at 2^-20 (subnormal), 60 at
    2^-10 (normal); 100 weight gradients at 2^10 (normal until a scale of 2^5
    takes them to 2^15; 2^6 takes them to 2^16 = 65,536, past 65,520)."""
    logits = np.array([2.0**-26] * 10 + [2.0**-20] * 30 + [2.0**-10] * 60)
    weights = np.full(100, 2.0**10)
    hists = {
        "logit gradients": F.log2_histogram(logits),
        "weight gradients": F.log2_histogram(weights),
    }
    return F.histogram_summary(hists, "fp16", range(0, 31))


def test_the_summary_holds_the_hand_counted_zone_fractions(made_up):
    logits, weights = made_up["groups"]
    # k = 0: 10 % flushed, 30 % subnormal, 60 % normal
    assert logits["zones"][0] == pytest.approx([0.1, 0.3, 0.6, 0.0])
    # k = 2: 2^-24 is the smallest subnormal, kept -> 0 flushed, 40 % subnormal
    assert logits["zones"][2] == pytest.approx([0.0, 0.4, 0.6, 0.0])
    # k = 6: 2^-26 x 2^6 = 2^-20 is subnormal, 2^-20 x 2^6 = 2^-14 a normal
    assert logits["zones"][6] == pytest.approx([0.0, 0.1, 0.9, 0.0])
    # k = 12: 2^-26 x 2^12 = 2^-14, every logit gradient is a normal
    assert logits["zones"][12] == pytest.approx([0.0, 0.0, 1.0, 0.0])
    assert weights["zones"][5] == pytest.approx([0.0, 0.0, 1.0, 0.0])
    assert weights["zones"][6] == pytest.approx([0.0, 0.0, 0.0, 1.0])
    for g in made_up["groups"]:
        assert sum(g["shares"]) == pytest.approx(1.0)
        assert all(sum(z) == pytest.approx(1.0) for z in g["zones"])
    assert made_up["bin_width"] == 0.25 and made_up["log2_scales"] == list(range(31))


def test_the_summary_is_kilobytes_and_agrees_with_real_casts():
    rng = np.random.default_rng(0)
    g = torch.tensor(np.exp(rng.normal(-17, 3, 1_000_000)), dtype=torch.float32)
    summary = F.histogram_summary({"gradients": F.log2_histogram(g.numpy())})
    assert len(json.dumps(summary)) < 20_000  # 4 MB of magnitudes, < 20 kB of summary
    for k in (0, 8, 16, 24):
        flushed, *_, overflow = summary["groups"][0]["zones"][k]
        assert flushed == pytest.approx(
            P.underflow_fraction(g, "fp16", 2.0**k), abs=1e-12
        )
        assert overflow == pytest.approx(
            P.overflow_fraction(g, "fp16", 2.0**k), abs=1e-12
        )


def test_the_histogram_figure_draws_the_summary_at_the_scale(made_up):
    spec = live.gradient_histogram(6, made_up)
    # the title reads the first group's fractions at 2^6: none flushed, 10 %
    # (those from 2^-26) subnormal
    assert spec["title"]["text"] == (
        "scale 2^6: logit gradients 0.0% flushed to zero, 10.0% subnormal, "
        "0.00% overflow"
    )
    flush, subnormal, overflow = _layers(spec, "rect")
    assert flush["data"]["values"][0]["to"] == FLUSH_LOG2
    assert subnormal["data"]["values"][0]["from"] == FLUSH_LOG2
    assert subnormal["data"]["values"][0]["to"] == NORMAL_LOG2
    assert overflow["data"]["values"][0]["from"] == pytest.approx(INF_LOG2, rel=1e-15)
    # the overflow band's tooltip: all of the weight gradients overflow at 2^6
    assert overflow["data"]["values"][0]["g1"] == 1.0
    assert overflow["data"]["values"][0]["g0"] == 0.0
    (line,) = _layers(spec, "line")
    assert line["mark"]["interpolate"] == "step-after"
    rows = [r for r in line["data"]["values"] if r["curve"] == "weight gradients"]
    # the weight gradients' one bin [10, 10.25) slides right by k = 6
    peak = max(rows, key=lambda r: r["share"])
    assert (peak["log2"], peak["share"]) == (16.0, 1.0)
    unscaled = live.gradient_histogram(0, made_up)
    assert "10.0% flushed to zero, 30.0% subnormal" in unscaled["title"]["text"]


def test_the_histogram_figure_keeps_its_axes_fixed_and_refuses_other_scales(made_up):
    a, b = live.gradient_histogram(0, made_up), live.gradient_histogram(30, made_up)
    x_a, x_b = (_layers(s, "line")[0]["encoding"]["x"] for s in (a, b))
    assert x_a["scale"]["domain"] == x_b["scale"]["domain"]
    lo, hi = x_a["scale"]["domain"]
    assert lo <= -27 and hi >= 10 + 30 + 2  # the weights' bin at 2^30
    assert x_a["axis"]["labelExpr"] == "'2^' + datum.value"
    with pytest.raises(ValueError, match="not among the summary's scales"):
        live.gradient_histogram(31, made_up)
    with pytest.raises(ValueError, match="draws fp16"):
        live.gradient_histogram(0, {**made_up, "format": "bf16"})


def test_the_histogram_figure_without_data_draws_its_example():
    spec = live.gradient_histogram.live.payload()["spec"]
    assert "(example)" in spec["title"]["text"]
    example = live._example_summary()
    for g in example["groups"]:
        assert sum(g["shares"]) == pytest.approx(1.0, abs=1e-6)  # +-5 spreads
        assert all(sum(z) == pytest.approx(1.0) for z in g["zones"])
    # log2|g| ~ N(-25, 2) unscaled: half sits at or below the flush threshold -25
    assert example["groups"][0]["zones"][0][0] == pytest.approx(0.5)


def test_the_scaler_figure_steps_through_a_run_worked_by_hand():
    """Largest gradient 1.0 at every step, growth interval 10. 65,536 x 1.0 is past
    fp16's 65,504: step 1 overflows (skipped, scale 32,768); 10 good steps grow it
    back to 65,536 after step 11; step 12 overflows again, and so on: steps 1, 12
    and 23 of 25 are skipped."""
    spec = live.scaler_run(10, 0.5, grad_max=[1.0] * 25)
    assert (
        spec["title"]["text"]
        == "growth interval 10, backoff 0.5: 3 of 25 steps skipped"
    )
    (skips,) = _layers(spec, "point")
    assert [r["step"] for r in skips["data"]["values"]] == [1, 12, 23]
    assert all(r["log2"] == 15 for r in skips["data"]["values"])
    ceiling, scale = _layers(spec, "line")
    # the ceiling: log2(65,504) = 16 + log2(1 - 32 / 65,536) = 15.99930 at every step
    assert {r["log2"] for r in ceiling["data"]["values"]} == {15.9993}
    # the scale as a step function: where it changes, and the last step
    assert [(r["step"], r["log2"]) for r in scale["data"]["values"]] == [
        (1, 15),
        (11, 16),
        (12, 15),
        (22, 16),
        (23, 15),
        (25, 15),
    ]


def test_the_scaler_figure_is_the_simulation():
    g = F.drifting_grad_max(2000)
    spec = live.scaler_run(100, 0.5, grad_max=[float(v) for v in g])
    trace = F.simulate_scaler(g, growth_interval=100)
    assert f"{trace.n_skipped} of 2000 steps skipped" in spec["title"]["text"]
    (skips,) = _layers(spec, "point")
    assert [r["step"] - 1 for r in skips["data"]["values"]] == [
        t for t, s in enumerate(trace.skipped) if s
    ]
    assert len(json.dumps(g.tolist())) < 200_000  # the fixed data a page passes
    assert "(example)" not in live.scaler_run.live.payload()["spec"]["title"]["text"]


def test_the_state_figure_is_sixteen_bytes_a_parameter():
    # 70e9 parameters x 16 bytes = 1.12e12 bytes = 1,043.08 GiB
    spec = live.state_bytes(70.0)
    assert spec["title"]["text"] == "70B parameters x 16 bytes = 1,043 GiB"
    (bars,) = spec["layer"]
    rows = bars["data"]["values"]
    assert [r["bytes"] for r in rows] == [2, 2, 4, 4, 4]
    assert sum(r["GiB"] for r in rows) == pytest.approx(1043.08, abs=0.005)
    assert rows[-1]["to"] == pytest.approx(1043.08, abs=0.005)
    assert all(a["to"] == b["from"] for a, b in zip(rows, rows[1:], strict=False))


def test_the_state_slider_lands_on_the_book_s_model_sizes():
    control = live.state_bytes.live.controls[0]
    assert control.scale == "log" and control.value == 7
    # 0.07 x 10^(k/20): 0.7, 7 and 70 are on the grid (k = 20, 40, 60)
    assert [control.clamp(v) for v in (0.7, 7, 70, 700)] == [0.7, 7, 70, 700]


def test_the_page_defaults_are_on_the_grids():
    # the page starts the scaler figure at its growth interval (20 small, 100 reader)
    c = live.scaler_run.live.controls[0]
    assert c.clamp(20) == 20 and c.clamp(100) == 100
    drawn = live.scaler_run.live.draw({"growth_interval": 20}, {"grad_max": [1.0] * 5})
    assert drawn.values == {"growth_interval": 20, "backoff_factor": 0.5}
    assert isinstance(live_core.LiveFigure.payload, object)


def test_the_scaler_figure_draws_a_long_ceiling_as_its_lower_envelope():
    """2000 steps are drawn as 500 points, each the lowest ceiling of 4 steps (a
    redraw costs its rows); the spikes, the ceiling's dips, stay."""
    g = F.drifting_grad_max(2000, n_spikes=4)
    spec = live.scaler_run(100, 0.5, grad_max=[float(v) for v in g])
    ceiling = _layers(spec, "line")[0]["data"]["values"]
    assert len(ceiling) == 500 and [r["step"] for r in ceiling[:3]] == [1, 5, 9]
    full = [math.log2(65_504 / v) for v in g]
    for r in ceiling:
        window = full[r["step"] - 1 : r["step"] + 3]
        assert r["log2"] == pytest.approx(min(window), abs=5e-5)  # 4 decimals
    spikes = np.argsort(g)[-4:]
    lowest = sorted(ceiling, key=lambda r: r["log2"])[:4]
    assert sorted((r["step"] - 1) // 4 for r in lowest) == sorted(spikes // 4)


# --- the measured GradScaler (the page's fixed data) ----------------------------------


def _circles(spec):
    return [
        (r["step"], r["log2"])
        for lay in _layers(spec, "point")
        if "color" in lay["encoding"]
        for r in lay["data"]["values"]
    ]


def test_the_measured_scale_is_kept_where_it_changed():
    # the run worked by hand above: 2^15 after step 1, 2^16 after 11, 2^15 after 12,
    # ...; kept where it changed and at the first and last steps
    scales = [2.0**15] * 10 + [2.0**16] + [2.0**15] * 10 + [2.0**16] + [2.0**15] * 3
    data = live.measured_scales(scales, 10, 0.5, "CPU: test")
    assert (data["step"], data["log2"]) == (
        [1, 11, 12, 22, 23, 25],
        [15, 16, 15, 16, 15, 15],
    )
    assert (data["growth_interval"], data["backoff_factor"]) == (10, 0.5)
    with pytest.raises(ValueError, match="positive numbers"):
        live.measured_scales([], 10, 0.5, "CPU: test")


def test_the_measured_circles_sit_on_the_simulations_corners_at_its_settings():
    g = [1.0] * 25
    trace = F.simulate_scaler(g, growth_interval=10)
    measured = live.measured_scales(list(trace.scales), 10, 0.5, "CPU: test")
    spec = live.scaler_run(10, 0.5, grad_max=g, measured=measured)
    scale = _layers(spec, "line")[1]["data"]["values"]
    assert _circles(spec) == [(r["step"], r["log2"]) for r in scale]
    # named in the legend, on the curves' colour scale; the subtitle says where it ran
    assert (
        live.MEASURED
        in (_layers(spec, "line")[1]["encoding"]["color"]["scale"]["domain"])
    )
    assert spec["title"]["subtitle"] == (
        "circles: torch.amp.GradScaler on CPU: test, growth interval 10, "
        "backoff 0.5, where its scale changed"
    )
    # other settings move the line, not the circles
    other = live.scaler_run(30, 0.25, grad_max=g, measured=measured)
    assert _circles(other) == _circles(spec)


def test_without_a_measurement_no_circles_and_no_subtitle():
    spec = live.scaler_run(10, 0.5, grad_max=[1.0] * 25)
    assert _circles(spec) == [] and "subtitle" not in spec["title"]
    assert (
        live.MEASURED
        not in (_layers(spec, "line")[1]["encoding"]["color"]["scale"]["domain"])
    )
    assert _circles(live.scaler_run.live.payload()["spec"]) == []


@examples(40)
@given(
    st.lists(st.integers(-10, 24), min_size=1, max_size=200),
    st.integers(10, 500),
    st.floats(0.1, 0.9),
)
def test_measured_scales_drops_only_repeats(exponents, interval, backoff):
    data = live.measured_scales([2.0**e for e in exponents], interval, backoff, "x")
    # stepping through the kept points gives back every step's scale
    back = [
        data["log2"][max(i for i, s in enumerate(data["step"]) if s <= t + 1)]
        for t in range(len(exponents))
    ]
    assert back == exponents
    assert data["step"][0] == 1 and data["step"][-1] == len(exponents)
    json.dumps(data, allow_nan=False)
