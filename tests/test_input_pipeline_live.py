"""The input-pipeline chapter's live figure (mlbook.input_pipeline.live
.loader_explorer) against the loader model worked out by hand: the chosen
point, the curves, the measured squares, the other settings and Bekman's
published run, the title, the axes with their units, and the size of the
fixed data the page passes. The browser runs are tests/test_live.py."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.input_pipeline import live

PROPERTY_COVERS = {
    "mlbook.input_pipeline.live.loader_curves",
    "mlbook.input_pipeline.live.loader_explorer",
    "mlbook.input_pipeline.live.published_rows",
}
FEW = examples(60)


def layers(spec, panel, mark):
    return [
        lay for lay in spec["hconcat"][panel]["layer"] if lay["mark"]["type"] == mark
    ]


def chosen(spec, panel=0):
    (point,) = [
        lay
        for lay in layers(spec, panel, "point")
        if lay["mark"].get("shape") == "circle"
    ]
    return point["data"]["values"][0]


def test_the_chosen_point_by_hand():
    """20 items of 5 ms: a batch loads in 100 ms; compute 40 ms.
    3 workers: max(40, 100 / 3) = 40 ms a step, idle 0; ceil(100 / 40) = 3.
    2 workers: max(40, 50) = 50 ms, idle 1 - 40 / 50 = 20 %.
    0 workers: 100 + 40 = 140 ms, idle 100 / 140."""
    three = live.loader_explorer(3, 5.0, 40, batch_size=20)
    assert chosen(three)["step_ms"] == pytest.approx(40)
    assert chosen(three)["idle"] == 0 and chosen(three)["need"] == 3
    two = live.loader_explorer(2, 5.0, 40, batch_size=20)
    assert chosen(two)["step_ms"] == pytest.approx(50)
    assert chosen(two, 1)["idle"] == pytest.approx(0.2)
    none = live.loader_explorer(0, 5.0, 40, batch_size=20)
    assert chosen(none)["step_ms"] == pytest.approx(140)
    assert chosen(none)["idle"] == pytest.approx(100 / 140)
    title = two["title"]["text"]
    assert "load 100 ms/batch (20 x 5 ms)" in title and "compute 40 ms" in title
    assert "2 workers -> 50 ms/step, idle 20%; 3 keep the device busy" in title


def test_the_curves_by_hand():
    """10 batches of 100 ms load, 40 ms compute. Steady state with w workers:
    140 ms at 0, then 100, 50, 40, 40, ...; the epoch mean with 2 workers is
    (100 + 9 x 50 + 40) / 10 = 59 ms, with none 140 ms."""
    spec = live.loader_explorer(2, 5.0, 40, batch_size=20, n_batches=10)
    (line,) = layers(spec, 0, "line")
    rows = line["data"]["values"]
    steady = {r["workers"]: r["step_ms"] for r in rows if r["curve"] == live.STEADY}
    epoch = {
        r["workers"]: r["step_ms"]
        for r in rows
        if r["curve"] == "model, mean over 10 batches"
    }
    assert steady[0] == pytest.approx(140) and steady[1] == pytest.approx(100)
    assert steady[2] == pytest.approx(50) and steady[16] == pytest.approx(40)
    assert epoch[0] == pytest.approx(140) and epoch[2] == pytest.approx(59)
    flat = [r for r in rows if r["curve"] == live.COMPUTE]
    assert [r["step_ms"] for r in flat] == [40, 40]
    assert sorted(steady) == list(range(live.MAX_WORKERS + 1))
    (idle_line,) = layers(spec, 1, "line")
    idle = {
        r["workers"]: r["idle"]
        for r in idle_line["data"]["values"]
        if r["curve"] == live.STEADY
    }
    assert idle[1] == pytest.approx(0.6) and idle[3] == 0


def test_measured_squares_and_their_label():
    seen = [{"workers": 0, "step_ms": 150.0, "idle": 0.73}]
    spec = live.loader_explorer(
        2, 5.0, 40, measured=seen, measured_label="measured here"
    )
    for panel in (0, 1):
        (squares,) = [
            lay
            for lay in layers(spec, panel, "point")
            if lay["mark"]["shape"] == "square"
        ]
        assert squares["data"]["values"] == [{**seen[0], "label": "measured here"}]
    # the step axis reaches above the highest measured point
    top = spec["hconcat"][0]["layer"][0]["encoding"]["y"]["scale"]["domain"][1]
    assert top >= 150
    assert not [
        lay
        for lay in layers(live.loader_explorer(2, 5.0, 40), 0, "point")
        if lay["mark"]["shape"] == "square"
    ]


def test_axes_have_units_and_the_defaults_match_the_old_sliders():
    spec = live.loader_explorer.live.payload()["spec"]
    for panel in spec["hconcat"]:
        for lay in panel["layer"]:
            for name in ("x", "y"):
                title = lay["encoding"][name]["title"]
                assert title.endswith(")") and "(" in title
            assert lay["encoding"]["tooltip"]
    controls = {c.name: c for c in live.loader_explorer.live.controls}
    # the matplotlib sliders: workers 0-16, 0.5-50 ms an item by 0.5, 1-1000 ms
    assert (controls["workers"].min, controls["workers"].max) == (0, 16)
    assert (controls["item_cost_ms"].min, controls["item_cost_ms"].max) == (0.5, 50)
    assert controls["item_cost_ms"].step == 0.5
    assert (controls["compute_ms"].min, controls["compute_ms"].max) == (1, 1000)


def test_the_pages_fixed_data_is_small():
    """The page passes five or so measured rows: far under the 200 KB cap."""
    rows = [{"workers": w, "step_ms": 40.0 + w, "idle": 0.5} for w in range(8)]
    fixed = {"batch_size": 20, "n_batches": 10, "measured": rows, "measured_label": "m"}
    assert len(json.dumps(fixed)) < 1000
    payload = live.loader_explorer.live.payload(fixed=fixed)
    assert len(json.dumps(payload)) < 50_000


@FEW
@given(
    st.integers(0, live.MAX_WORKERS),
    st.sampled_from([0.5 * k for k in range(1, 101)]),
    st.integers(1, 1000),
    st.integers(1, 200),
    st.integers(1, 50),
)
def test_properties_of_the_model_curves(w, item_ms, compute_ms, batch, n_batches):
    rows = live.loader_curves(item_ms, compute_ms, batch, n_batches)
    steady = [r for r in rows if r["curve"] == live.STEADY]
    # more workers never slow a step; a step never beats its compute
    steps = [r["step_ms"] for r in steady]
    assert all(a >= b - 1e-9 for a, b in zip(steps, steps[1:], strict=False))
    assert all(s >= compute_ms - 1e-9 for s in steps)
    assert all(0 <= r["idle"] < 1 for r in rows)
    # the epoch mean includes the warm-up: never below the steady state
    by = {(r["curve"], r["workers"]): r["step_ms"] for r in rows}
    epoch = f"model, mean over {n_batches} batches"
    assert all(by[(epoch, k)] >= by[(live.STEADY, k)] - 1e-9 for k in range(17))
    spec = live.loader_explorer(w, item_ms, compute_ms, batch_size=batch)
    point = chosen(spec)
    assert point["step_ms"] == pytest.approx(by[(live.STEADY, w)])
    need = math.ceil(batch * item_ms / compute_ms * (1 - 1e-9))
    assert point["need"] == max(1, need)
    json.dumps(spec, allow_nan=False)  # JSON without NaN or inf


# --- the other settings and the published run (the page's fixed data) -----------------


def marks(spec, panel, shape):
    return [
        lay for lay in layers(spec, panel, "point") if lay["mark"]["shape"] == shape
    ]


def test_published_rows_by_hand():
    """Bekman's run (10 batches of 0.2 s compute) at 1/4 of his batch: compute
    0.05 s a step; with no workers he measured 5.388 s of overhead an epoch, so
    5.388 / 4 / 10 = 0.1347 s a step on top: 184.7 ms, idle 1 - 50 / 184.7 =
    72.9291 %. With 3 workers: 0.839 / 40 = 20.975 ms on top: 70.975 ms."""
    rows = live.published_rows({3: 0.839, 0: 5.388}, 10, 0.2, 4)
    assert [r["workers"] for r in rows] == [0, 3]
    assert rows[0]["step_ms"] == pytest.approx(184.7)
    assert rows[0]["idle"] == pytest.approx(0.729291, abs=1e-6)
    assert rows[1]["step_ms"] == pytest.approx(70.975)
    with pytest.raises(ValueError, match="at least one worker count"):
        live.published_rows({}, 10, 0.2)


def test_variants_as_diamonds_and_the_published_run_as_crosses():
    variants = [{"workers": 2, "step_ms": 55.0, "idle": 0.27, "setting": "w=2 pin"}]
    published = live.published_rows({0: 5.388, 2: 1.333}, 10, 0.2, 4)
    spec = live.loader_explorer(
        2, 5.0, 50, batch_size=25, variants=variants, published=published
    )
    for panel in (0, 1):
        (diamonds,) = marks(spec, panel, "diamond")
        assert diamonds["data"]["values"] == variants
        (crosses,) = marks(spec, panel, "cross")
        assert [r["workers"] for r in crosses["data"]["values"]] == [0, 2]
        assert {r["label"] for r in crosses["data"]["values"]} == {live.PUBLISHED}
    # the step axis reaches above the highest: 1.1 x 184.7 ms
    top = spec["hconcat"][0]["layer"][0]["encoding"]["y"]["scale"]["domain"][1]
    assert top == pytest.approx(1.1 * 184.7)
    assert spec["title"]["subtitle"] == (
        "diamonds: the other settings measured; "
        "crosses: Bekman's run, scaled to this batch"
    )


def test_without_fixed_data_no_points_and_no_subtitle():
    spec = live.loader_explorer.live.payload()["spec"]
    assert "subtitle" not in spec["title"]
    for shape in ("square", "diamond", "cross"):
        assert marks(spec, 0, shape) == [] == marks(spec, 1, shape)


@FEW
@given(
    st.dictionaries(st.integers(0, 16), st.floats(0, 100), min_size=1),
    st.integers(1, 100),
    st.floats(0.001, 10),
    st.sampled_from([1, 2, 4, 10]),
)
def test_published_rows_are_steps_no_shorter_than_compute(over, n, compute_s, scale):
    rows = live.published_rows(over, n, compute_s, scale)
    assert [r["workers"] for r in rows] == sorted(over)
    for r in rows:
        assert r["step_ms"] >= compute_s / scale * 1e3 * (1 - 1e-12)
        assert 0 <= r["idle"] < 1
        # back to the published overhead: (step - compute) x n x scale
        back = (r["step_ms"] / 1e3 - compute_s / scale) * n * scale
        assert back == pytest.approx(over[r["workers"]], rel=1e-9, abs=1e-9)
