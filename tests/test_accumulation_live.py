"""The accumulation chapter's live figure (mlbook.accumulation.live.cost_explorer)
against the cost model worked out by hand: the chosen k and its step time, the
model's curves, the measured points, the range of b that follows B, the axes
with their units, and the fixed data the page passes (its size too). The browser
runs are tests/test_live.py; the properties are in test_accumulation_properties."""

from __future__ import annotations

import json

import pytest

from mlbook.accumulation import formulas as cost
from mlbook.accumulation import live
from mlbook.common import live as host
from mlbook.common.units import MIB

# A model with numbers that are easy by hand: 5 ms optimizer, 3 ms per micro-batch,
# 0.2 ms per example, 2,048 bytes per example and 100 bytes fixed.
MODEL = cost.StepCostModel(0.005, 0.003, 0.0002, 2048, 100)
MEASURED_KS = (1, 4, 16)


def sweep(model=MODEL, B=16, ks=MEASURED_KS) -> cost.KSweep:
    rows = tuple(
        cost.SweepRow(
            k, B // k, model.step_s(B, k), int(model.activation_bytes(B // k))
        )
        for k in ks
    )
    return cost.KSweep(B, rows, optimizer_s=model.optimizer_s)


FIXED = live.cost_data(MODEL, sweep())


def layers_of(spec, mark, color=None):
    return [
        lay
        for lay in spec["layer"]
        if lay["mark"]["type"] == mark
        and (color is None or lay["mark"].get("color") == color)
    ]


def test_the_choice_is_k_equals_b_over_b_with_the_models_step_time():
    spec = live.cost_explorer(16, 4, **FIXED)
    # by hand: k = 4, step 5 + 4 x 3 + 16 x 0.2 = 20.2 ms; one batch of 16:
    # 5 + 3 + 3.2 = 11.2 ms, so 20.2 / 11.2 = 1.80x; activations 100 + 4 x 2048 bytes
    title = spec["title"]["text"]
    assert "B=16, b=4 -> k=4: 20.2 ms per step (1.80x one batch of 16)" in title
    assert f"{(100 + 4 * 2048) / MIB:,.2f} MiB of activations" in title
    (on_time, on_memory) = layers_of(spec, "point", live.CHOICE_COLOR)
    for lay in (on_time, on_memory):
        row = lay["data"]["values"][0]
        assert (row["k"], row["b"]) == (4, 4)
        assert row["step_ms"] == pytest.approx(20.2)
        assert row["act_mib"] == pytest.approx((100 + 4 * 2048) / MIB)
        assert row["slowdown"] == pytest.approx(20.2 / 11.2)
    assert on_time["encoding"]["y"]["field"] == "step_ms"
    assert on_memory["encoding"]["y"]["field"] == "act_mib"


def test_the_curves_are_the_model_at_every_divisor_of_b():
    spec = live.cost_explorer(16, 4, **FIXED)
    time_line, memory_line = layers_of(spec, "line")
    rows = time_line["data"]["values"]
    assert [r["k"] for r in rows] == [1, 2, 4, 8, 16]
    for r in rows:  # 5 + 3k + 3.2 ms; 100 + 2048 (16 / k) bytes
        assert r["step_ms"] == pytest.approx(5 + 3 * r["k"] + 3.2)
        assert r["act_mib"] == pytest.approx((100 + 2048 * 16 / r["k"]) / MIB)
    assert time_line["encoding"]["y"]["field"] == "step_ms"
    assert memory_line["encoding"]["y"]["field"] == "act_mib"
    assert memory_line["mark"]["color"] == live.MEMORY_COLOR


def test_the_measured_points_are_the_sweep_in_ms_and_mib():
    spec = live.cost_explorer(64, 8, **FIXED)
    measured = layers_of(spec, "point", live.MEASURED_COLOR)
    assert len(measured) == 2  # on the time axis and on the memory axis
    rows = measured[0]["data"]["values"]
    assert [r["k"] for r in rows] == list(MEASURED_KS)
    assert rows[1]["step_ms"] == pytest.approx(5 + 12 + 3.2)  # k = 4 at B = 16
    assert rows[2]["act_mib"] == pytest.approx((100 + 2048) / MIB)  # b = 1
    assert spec["title"]["subtitle"][0].endswith("grey: measured at B=16")


def test_two_y_axes_left_and_right_over_one_k_axis_with_units():
    spec = live.cost_explorer(32, 8, **FIXED)
    assert spec["resolve"] == {"scale": {"y": "independent"}}
    axes = [
        lay["encoding"]["y"] for lay in spec["layer"] if lay["encoding"]["y"]["axis"]
    ]
    assert [(a["title"], a["axis"]["orient"]) for a in axes] == [
        ("step time (ms)", "left"),
        ("activation memory per micro-batch (MiB)", "right"),
    ]
    x = spec["layer"][0]["encoding"]["x"]
    assert x["title"] == "accumulation steps k = B / b (micro-batches)"
    assert x["scale"]["type"] == "log" and x["scale"]["base"] == 2
    assert x["scale"]["domain"] == [1, 32]
    # every layer on one y scale shares that scale's domain, so the marks line up
    for field in ("step_ms", "act_mib"):
        domains = {
            tuple(lay["encoding"]["y"]["scale"]["domain"])
            for lay in spec["layer"]
            if lay["encoding"]["y"]["field"] == field
        }
        assert len(domains) == 1


def test_a_micro_batch_that_does_not_divide_is_flagged_and_not_marked():
    spec = live.cost_explorer(16, 3, **FIXED)
    assert "does not divide" in spec["title"]["text"]
    assert spec["title"]["color"] == live.CHOICE_COLOR
    assert not layers_of(spec, "point", live.CHOICE_COLOR)


def test_b_runs_over_the_powers_of_two_up_to_b():
    figure = live.cost_explorer.live
    b = next(c for c in figure.controls if c.name == "micro_batch")
    assert (b.scale, b.min, b.step) == ("log", 1, 2)  # 1, 2, 4, ...
    settled = figure.settle({"global_batch": 8, "micro_batch": 64}).values()
    assert settled == {"global_batch": 8, "micro_batch": 8}
    settled = figure.settle({"global_batch": 100, "micro_batch": 5}).values()
    assert settled == {"global_batch": 128, "micro_batch": 4}  # snapped to the grid
    drawn = figure.draw({"global_batch": 1024, "micro_batch": 1024}, FIXED)
    assert "k=1:" in drawn.spec["title"]["text"]


def test_the_fixed_data_is_a_small_json_summary_of_the_fit_and_the_sweep():
    data = live.cost_data(MODEL, sweep())
    assert data["model"] == {
        "optimizer_s": 0.005,
        "per_micro_batch_s": 0.003,
        "per_example_s": 0.0002,
        "per_example_bytes": 2048.0,
        "fixed_bytes": 100.0,
    }
    assert data["measured"]["global_batch"] == 16
    assert data["measured"]["rows"][0] == {
        "k": 1,
        "step_ms": pytest.approx(5 + 3 + 3.2),
        "act_mib": (100 + 16 * 2048) / MIB,
    }
    # the page's summary: a reader-size sweep has at most 7 rows
    big = live.cost_data(MODEL, sweep(B=64, ks=(1, 2, 4, 8, 16, 32, 64)))
    assert len(json.dumps(big)) < 1_000
    payload = live.cost_explorer.live.payload(big, {"global_batch": 64})
    assert payload["function"] == "mlbook.accumulation.live:cost_explorer"
    assert payload["ranges"] == "mlbook.accumulation.live:micro_batch_range"
    assert json.loads(json.dumps(payload["fixed"])) == big


def test_the_browser_entry_point_draws_what_cpython_draws():
    payload = live.cost_explorer.live.payload(FIXED, {"global_batch": 16})
    out = json.loads(host.draw_json(json.dumps(payload), '{"micro_batch": 2}'))
    assert out["values"] == {"global_batch": 16, "micro_batch": 2}
    assert out["result"] == live.cost_explorer(16, 2, **FIXED)


def test_without_the_pages_fit_it_draws_the_example_and_says_so():
    spec = live.cost_explorer(64, 16)
    (key,) = spec["title"]["subtitle"]
    assert key.startswith("an example model, not a fit.")
    assert key.endswith("none measured")
    assert not layers_of(spec, "point", live.MEASURED_COLOR)
    m = cost.StepCostModel(**live.EXAMPLE_MODEL)
    (chosen, _) = layers_of(spec, "point", live.CHOICE_COLOR)
    assert chosen["data"]["values"][0]["step_ms"] == pytest.approx(
        m.step_s(64, 4) * 1e3
    )


def test_k_is_ticked_at_the_powers_of_two_and_the_y_axes_read_plainly():
    spec = live.cost_explorer(256, 4, **FIXED)
    x = spec["layer"][0]["encoding"]["x"]
    assert x["axis"]["values"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert x["axis"]["format"] == "d"
    for lay in spec["layer"]:  # 900 reads "900", not "9e+2"
        y = lay["encoding"]["y"]
        assert y["axis"] is None or y["axis"]["format"] == ",.4~g"


def test_a_gpus_peak_is_drawn_as_squares_on_the_memory_axis():
    # on a GPU the sweep carries torch.cuda.max_memory_allocated above the model
    # state: 3 MiB, 1.5 MiB and 1 MiB here; a CPU's rows have none (the others)
    peaks = {1: 3 * MIB, 4: 1.5 * MIB, 16: MIB}
    s = sweep()
    gpu = cost.KSweep(
        s.global_batch,
        tuple(
            cost.SweepRow(
                r.k, r.micro_batch, r.step_s, r.saved_bytes, peak_bytes=peaks[r.k]
            )
            for r in s.rows
        ),
        optimizer_s=s.optimizer_s,
    )
    fixed = live.cost_data(MODEL, gpu, "GPU: test")
    assert [r["peak_mib"] for r in fixed["measured"]["rows"]] == [3.0, 1.5, 1.0]
    spec = live.cost_explorer(16, 4, **fixed)
    (squares,) = layers_of(spec, "point", live.PEAK_COLOR)
    assert squares["mark"]["shape"] == "square"
    assert squares["encoding"]["y"]["field"] == "peak_mib"
    assert [(r["k"], r["peak_mib"]) for r in squares["data"]["values"]] == [
        (1, 3.0),
        (4, 1.5),
        (16, 1.0),
    ]
    # the memory axis reaches the highest square: 1.08 x 3 MiB
    assert squares["encoding"]["y"]["scale"]["domain"] == [0, pytest.approx(3.24)]
    assert spec["title"]["subtitle"][1:] == [
        "measured on GPU: test",
        "purple squares: CUDA peak above the model state",
    ]
    # without a peak (a CPU, FIXED) no squares and no line about them
    cpu = live.cost_explorer(16, 4, **FIXED)
    assert layers_of(cpu, "point", live.PEAK_COLOR) == []
    assert len(cpu["title"]["subtitle"]) == 1
    assert "peak_mib" not in json.dumps(FIXED)
