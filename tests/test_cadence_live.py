"""The cadence chapter's live figure (mlbook.cadence.live.waste_explorer) as
the page draws it: its starting point, read back by hand, for any cluster the
rule that a bigger cluster checkpoints more often, and the page's Monte Carlo
run drawn as dots where it was simulated."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.cadence import live

PROPERTY_COVERS = {"mlbook.cadence.live.monte_carlo_data"}

FEW = examples(40)


def _point(spec, mark):
    return next(lay for lay in spec["layer"] if lay["mark"]["type"] == mark)


def test_the_pages_start_is_the_1024_gpu_rate_as_it_is():
    # The page passes node_mtbf_h = 7.9 h x 128 nodes = 1,011.2 h (Kokolis et al.
    # 2024, 1,024-GPU jobs, 8 GPUs a node). It lies inside the slider's range,
    # so it is kept as it is (the slider's 10^(1/20) steps are for dragging).
    drawn = live.waste_explorer.live.draw({"node_mtbf_h": 7.9 * 128})
    assert drawn.values == {
        "checkpoint_s": 30.0,
        "node_mtbf_h": pytest.approx(1011.2, rel=1e-12),
        "restart_s": 0,
        "n_nodes": 128,
    }
    # T = 1,011.2 h / 128 = 7.9 h = 28,440 s; Daly at C = 30 s:
    # sqrt(2 x 30 x 28,440) = 1,306.292 s, x = 30 / 56,880:
    # 1,306.292 x (1 + 0.00765525 + 0.0000586029) - 30 = 1,286.37 s = 21.44 min
    star = _point(drawn.spec, "point")["data"]["values"][0]
    assert star["I_min"] * 60 == pytest.approx(1286.37, abs=0.01)
    assert star["T_h"] == pytest.approx(7.9, rel=1e-12)
    assert "T = 7.90 h" in drawn.spec["title"]["text"]
    assert "I* = 21.4 min" in drawn.spec["title"]["text"]


def test_the_fixed_data_is_small():
    # without the page's run the payload is the declaration and the default spec
    payload = live.waste_explorer.live.payload()
    assert len(json.dumps(payload)) < 200_000


@FEW
@given(
    st.floats(3, 3000), st.floats(100, 100_000), st.integers(1, 2048), st.integers(2, 4)
)
def test_more_nodes_checkpoint_more_often_and_lose_more(c, node_h, n, factor):
    # T = node MTBF / n falls by the factor, so Young's sqrt(2CT) shrinks by
    # sqrt(factor) and the optimum's loss grows
    small = live.waste_explorer(c, node_h, 0, n)
    big = live.waste_explorer(c, node_h, 0, n * factor)
    rule = [_point(s, "rule")["data"]["values"][0]["I_min"] for s in (small, big)]
    assert rule[1] == pytest.approx(rule[0] / math.sqrt(factor), rel=1e-9)
    w = [_point(s, "point")["data"]["values"][0]["W"] for s in (small, big)]
    assert w[1] >= w[0]


# --- the Monte Carlo dots (the page's fixed data) -------------------------------------

H = 3600.0
# A made-up run at the page's start (1,000 h x 128 nodes: T = 28,125 s, C = 30 s,
# R = 0): three intervals and their simulated waste.
SIMULATED = live.monte_carlo_data(
    [600.0, 1200.0, 2400.0], [0.03, 0.025, 0.04], 30, 28_125
)


def _dots(spec):
    return [
        row
        for lay in spec["layer"]
        if lay["mark"]["type"] == "point" and "color" in lay["encoding"]
        for row in lay["data"]["values"]
    ]


def test_the_dots_are_the_simulated_points_at_the_simulated_cluster():
    spec = live.waste_explorer(30.0, 1000.0, 0, 128, simulated=SIMULATED)
    assert _dots(spec) == [
        {"curve": live.MONTE_CARLO, "I_min": 10.0, "W": 0.03},
        {"curve": live.MONTE_CARLO, "I_min": 20.0, "W": 0.025},
        {"curve": live.MONTE_CARLO, "I_min": 40.0, "W": 0.04},
    ]
    # the legend names them: the curves' colour scale holds the label
    curves = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "line")
    assert live.MONTE_CARLO in curves["encoding"]["color"]["scale"]["domain"]
    assert "T = 7.81 h" in spec["title"]["subtitle"]


@pytest.mark.parametrize(
    "values", [(60.0, 1000.0, 0, 128), (30.0, 1000.0, 300, 128), (30.0, 1000.0, 0, 64)]
)
def test_another_cluster_draws_no_dots_and_says_where_they_were(values):
    spec = live.waste_explorer(*values, simulated=SIMULATED)
    assert _dots(spec) == []
    assert spec["title"]["subtitle"] == (
        "Monte Carlo dots: simulated at C = 30 s, T = 7.81 h, R = 0 s only"
    )


def test_without_a_run_the_figure_draws_its_curves_alone():
    # the function's own default: no dots, no subtitle, no Monte Carlo in the legend
    spec = live.waste_explorer(30.0, 1000.0, 0, 128)
    assert _dots(spec) == [] and "subtitle" not in spec["title"]
    curves = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "line")
    assert live.MONTE_CARLO not in curves["encoding"]["color"]["scale"]["domain"]
    assert _dots(live.waste_explorer.live.payload()["spec"]) == []


def test_the_payload_carries_the_run_as_json_numbers():
    payload = live.waste_explorer.live.payload({"simulated": SIMULATED})
    assert payload["fixed"]["simulated"]["mtbf_s"] == 28_125.0
    assert len(_dots(payload["spec"])) == 3
    assert len(json.dumps(payload["fixed"])) < 1_000


def test_monte_carlo_data_wants_one_waste_per_interval():
    with pytest.raises(ValueError, match="one waste per interval"):
        live.monte_carlo_data([600.0, 1200.0], [0.03], 30, 28_125)


@FEW
@given(
    st.lists(st.floats(1, 1e6), min_size=1, max_size=20),
    st.floats(0, 1),
    st.floats(3, 3000),
    st.floats(60, 1e7),
    st.floats(0, 1800),
)
def test_monte_carlo_data_keeps_every_point_in_minutes(intervals, w, c, t, r):
    data = live.monte_carlo_data(intervals, [w] * len(intervals), c, t, r)
    assert [p["I_min"] * 60 for p in data["points"]] == pytest.approx(intervals)
    assert (data["checkpoint_s"], data["mtbf_s"], data["restart_s"]) == (c, t, r)
    json.dumps(data, allow_nan=False)
