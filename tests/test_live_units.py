"""Live figures without a browser: the control declarations, clamping and
snapping (log sliders too), ranges that follow other controls, the payload
and its JSON, the three live figures' specs against the formulas computed
here by hand, the HTML the book's renderer writes, the build's archive and
the stripping of widget state, and the vendored script versions against the
ones JupyterLab bundles. The browser runs are tests/test_live.py."""

from __future__ import annotations

import html
import json
import math
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from helpers.live import close, live_figures, live_modules
from mlbook.cadence import live as cadence_live
from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.mfu import live as mfu_live

ROOT = Path(__file__).resolve().parent.parent
STEP = 10 ** (1 / 20)
H100 = 989e12  # H100 SXM dense BF16 (NVIDIA datasheet; test_hardware checks the table)


# --- declarations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: live.slider("1x", "a", 1, 0, 2, 1), "identifier"),
        (lambda: live.slider("x", "", 1, 0, 2, 1), "label"),
        (lambda: live.Control("x", "a", "knob", 1), "kind must be one of"),
        (lambda: live.slider("x", "a", 1, 2, 2, 1), "min must be below max"),
        (lambda: live.slider("x", "a", 1, 0, 2, 0), "step must be above 0"),
        (lambda: live.slider("x", "a", 1, 0, 2.5, 1, on_grid=True), "not on the grid"),
        (lambda: live.slider("x", "a", 1.5, 0, 2, 1), "a whole number"),
        (lambda: live.slider("x", "a", 1.5, 0, 2, 0.5, on_grid=True), None),
        (
            lambda: live.slider("x", "a", 1.2, 0, 2, 0.5, on_grid=True),
            "not on its grid",
        ),
        (lambda: live.dropdown("x", "a", [1, 2], 1, on_grid=True), "TypeError"),
        (
            lambda: live.Control("x", "a", "dropdown", 1, options=(1,), on_grid=True),
            "on_grid",
        ),
        (
            lambda: live.slider("x", "a", 3, 0, 2, 1),
            r"value must be a number in \[0, 2\]",
        ),
        (
            lambda: live.slider("x", "a", 1, 0, 10, 1.5, "log"),
            "log slider needs min above 0",
        ),
        (lambda: live.slider("x", "a", 1, 1, 10, 0.5, "log"), "a factor"),
        (
            lambda: live.slider("x", "a", 1, 1, 9, 2, "log", on_grid=True),
            "not on the grid",
        ),
        (lambda: live.slider("x", "a", 1, 0, 2, 1, "cubic"), "scale must be one of"),
        (lambda: live.dropdown("x", "a", [], 1), "non-empty"),
        (lambda: live.dropdown("x", "a", [1, "1"], 1), "options must differ"),
        (lambda: live.dropdown("x", "a", [1, 2], 3), "not one of its options"),
        (lambda: live.dropdown("x", "a", [True, False], True), "strings or numbers"),
        (lambda: live.Control("x", "a", "checkbox", 1), "True or False"),
        (lambda: live.Control("x", "a", "checkbox", True, min=0), "has no min"),
        (lambda: live.Control("x", "a", "number", 1, 0, 2, 1, "log"), "linear"),
    ],
)
def test_bad_declarations_name_the_rule(make, message):
    if message is None:  # a good one, beside the bad
        make()
        return
    if message == "TypeError":  # a choice takes no on_grid
        with pytest.raises(TypeError):
            make()
        return
    with pytest.raises(ValueError, match=message):
        make()


def test_max_is_the_last_drag_position_on_the_grid_or_not():
    """A slider's grid is for dragging: max need not lie on it (the MFU
    calculator's 100 % MFU does not), and is the drag's last position."""
    c = live.slider("x", "x (m)", 1, 0, 2.5, 1)
    assert c.last_step == 3 and c.clamp(2.4) == 2.4 and c.clamp(9) == 2.5
    g = live.slider("g", "g (s)", 1, 1, 9, 2, "log")
    assert g.last_step == 4 and g.clamp(8.5) == 8.5  # 1, 2, 4, 8, then 9


def test_a_control_on_its_grid_snaps_to_it():
    """Where the grid is the domain (b a power of two, m a multiple of p), a
    value goes to the nearest grid point and the note says so."""
    b = live.slider("b", "b (examples)", 16, 1, 1024, 2, "log", on_grid=True)
    assert b.fit(20) == live.Fitted(16, "on its steps (1 x 2^k): 20 became 16")
    assert b.fit(24.1).value == 32 and b.fit(5000).value == 1024
    m = live.slider("m", "m (count)", 8, 4, 64, 4, on_grid=True)
    assert m.fit(9) == live.Fitted(8, "in steps of 4: 9 became 8")
    assert m.fit(11).value == 12 and m.fit(1).value == 4


def test_json_carries_every_key_null_where_it_does_not_apply():
    controls = [
        live.slider("s", "s (m)", 2, 0, 10, 2),
        live.slider("g", "g (s)", 10, 1, 1000, 10, "log"),
        live.select_slider("q", "q", ["a", "b", "c"], "b"),
        live.dropdown("d", "d (tokens)", [2048, 4096], 4096),
        live.checkbox("c", "c", True),
        live.number("n", "GPUs", 8, 1, 64),
    ]
    keys = [
        "name",
        "label",
        "kind",
        "min",
        "max",
        "step",
        "scale",
        "options",
        "value",
        "on_grid",
        "whole",
    ]
    for c in controls:
        j = c.to_json()
        assert list(j) == keys
        assert live.Control.from_json(json.loads(json.dumps(j))) == c
    s, g, q, d, c, n = (c.to_json() for c in controls)
    assert (s["kind"], s["scale"], s["options"]) == ("slider", "linear", None)
    assert (g["min"], g["max"], g["step"], g["scale"]) == (1, 1000, 10, "log")
    assert q["kind"] == "select-slider" and q["options"] == ["a", "b", "c"]
    assert q["min"] is q["max"] is q["step"] is q["scale"] is None
    assert d["options"] == [2048, 4096] and d["value"] == 4096
    assert c["value"] is True and c["options"] is c["min"] is c["scale"] is None
    assert n["kind"] == "number" and n["scale"] == "linear" and n["options"] is None
    assert (s["whole"], g["whole"], n["whole"], d["whole"]) == (True, False, True, None)


def test_whole_travels_in_the_json_where_a_browser_reads_1e15_as_an_int():
    """A float control whose bounds are whole numbers (1, 1e15) stays a float
    control after a browser's JSON round trip, which writes 1e15 as
    1000000000000000: 2.5 typed is 2.5, not 3."""
    c = live.number("t", "tokens", 15e12, 1.0, 1e15, 1e12)
    assert c.whole is False
    as_js = json.loads(json.dumps(c.to_json()).replace(".0,", ",").replace(".0}", "}"))
    assert as_js["min"] == 1 and type(as_js["min"]) is int
    back = live.Control.from_json(as_js)
    assert back.read("2.5") == 2.5 and back.clamp("2.5") == 2.5
    assert live.number("n", "GPUs", 8, 1, 64).clamp("2.5") in (2, 3)


# --- clamping and snapping ------------------------------------------------------------


def test_linear_keeps_a_value_in_range_and_clamps_the_rest():
    c = live.slider("restart_s", "R (s)", 0, 0, 1800, 30)
    assert c.integral
    # the grid (steps of 30) is for dragging: 44 s typed is 44 s
    assert [c.clamp(v) for v in (-5, 44, 46, 1799, 5000)] == [0, 44, 46, 1799, 1800]
    assert all(type(c.clamp(v)) is int for v in (44.0, "46", 1e9))
    assert c.clamp(44.4) == 44  # a whole number of seconds, the control's domain
    f = live.slider("mfu", "MFU", 0.4, 0.05, 0.8, 0.01)
    assert f.clamp(0.4) == 0.4 and f.clamp(0.123) == 0.123 and f.clamp(0.0) == 0.05
    assert f.clamp(0.81) == 0.8 and f.clamp("0.795") == 0.795
    # a computed range (the MFU calculator's: 0.1 % to 100 % MFU): a value in
    # it as typed, one beyond it at the end to six digits, inside the range
    top = 6171868.759485582
    t = live.slider("t", "t (tokens/s)", top / 1000 * 500, top / 1000, top, top / 1000)
    assert t.clamp(2_400_000) == 2_400_000 and t.clamp("2,400,000") == 2_400_000
    assert t.clamp(top * 2) == 6171860.0 and t.clamp(0) == 6171.87
    assert top / 1000 <= 6171.87 and 6171860.0 <= top


def test_log_keeps_a_value_in_range():
    c = live.slider("c", "C (s)", 30, 3, 3000, STEP, "log")
    assert c.clamp(30) == 30 and c.clamp(5000) == 3000 and c.clamp(1) == 3
    assert c.clamp(3000) == 3000 and c.clamp(3) == 3
    for v in (3.2, 7.7, 31, 34, 99, 450.5, 2999):
        assert c.clamp(v) == v and c.clamp(c.clamp(v)) == v
    assert c.last_step == 60  # 3 x 10^(60/20) = 3000: the slider's drag steps


def test_read_takes_plain_numbers_and_refuses_the_rest_by_name():
    n = live.number("n_gpus", "GPUs", 8, 1, 1_000_000)
    assert [n.read(t) for t in ("16384", " 7.6 ", "-5", "+3", "1e9", ".5")] == [
        16384,
        7.6,
        -5,
        3,
        1e9,
        0.5,
    ]
    assert type(n.read("16384")) is int and type(n.read("1e3")) is float
    # digits grouped as the prose prints them, read as the answer boxes read them
    assert [n.read(t) for t in ("16,384", "2,400,000", "1_000", "10 533")] == [
        16384,
        2_400_000,
        1000,
        10533,
    ]
    refused = {
        "2,5": "Write decimals with a point: 2.5, not 2,5 (a comma only groups "
        "thousands, as in 16,384).",
        "0,490": "Write decimals with a point: 0.490, not 0,490",
        "abc": '"abc" is not a number',
        "": "the box is empty",
        "inf": '"inf" is not a number',
        "12k": '"12k" is not a number',
        "1e308": '"1e308" is too large a number to read here (this control takes '
        "1 to 1,000,000)",
        "9007199254740993": "too large a number",  # 2**53 + 1
    }
    for typed, starts in refused.items():
        with pytest.raises(live.Unreadable) as raised:
            n.read(typed)
        assert raised.value.field == "n_gpus"
        assert starts in raised.value.message, (typed, raised.value.message)
    for value in (float("nan"), float("inf"), 1e308, True, None):
        with pytest.raises(live.Unreadable):
            n.read(value)
    assert n.read(2**53) == 2**53  # the largest whole number a double holds exactly
    d = live.dropdown("s", "s (tokens)", (2048, 4096, 8192), 8192)
    assert d.read("4096") == 4096 and d.read(2048.0) == 2048
    with pytest.raises(live.Unreadable, match='"9" is not one of 2048, 4096, 8192'):
        d.read("9")
    m = live.dropdown("m", "model", ("a", "b"), "a")
    assert m.read("b") == "b"
    with pytest.raises(live.Unreadable):
        m.read("zz")
    b = live.checkbox("on", "on", False)
    assert b.read("true") is True and b.read("on") is True and b.read(False) is False
    with pytest.raises(live.Unreadable):
        b.read(1)


def test_fit_moves_a_value_to_its_range_and_grid_and_names_the_rule():
    n = live.number("n_gpus", "GPUs", 8, 1, 1_000_000)
    assert n.fit("-5") == live.Fitted(1, "at least 1: -5 became 1")
    assert n.fit("1e9") == live.Fitted(
        1_000_000, "at most 1,000,000: 1e9 became 1,000,000"
    )
    assert n.fit("7.6") == live.Fitted(8, "a whole number: 7.6 became 8")
    assert n.fit("4096") == live.Fitted(4096) and n.fit(4096.0) == live.Fitted(4096)
    r = live.number("rate", "failures per GPU-hour", 2e-5, 1e-9, 1e-3, 1e-9)
    # a rate's least value is its step, not 0: 1e-10 goes up to 1e-9, never to 0
    assert r.fit("1e-9") == live.Fitted(1e-9)
    assert r.fit("1e-10") == live.Fitted(1e-9, "at least 1e-9: 1e-10 became 1e-9")
    assert r.fit("0") == live.Fitted(1e-9, "at least 1e-9: 0 became 1e-9")
    f = live.slider("mfu", "MFU", 0.4, 0.05, 0.8, 0.01)
    assert f.fit("0.123") == live.Fitted(0.123)  # steps are for dragging
    assert f.fit("0.9") == live.Fitted(0.8, "at most 0.8: 0.9 became 0.8")
    c = live.slider("c", "C (s)", 30, 3, 3000, STEP, "log")
    assert c.fit(31) == live.Fitted(31)
    assert c.fit(5000).note == "at most 3,000: 5,000 became 3,000"
    assert c.clamp("31") == 31  # clamp is fit's value
    with pytest.raises(live.Unreadable):
        c.clamp("3,5")


def test_a_draw_keeps_an_unreadable_value_and_says_what_it_moved():
    planner = mfu_live.training_days_planner.live
    drawn = planner.draw({"n_gpus": "2,5", "mfu_value": "0.95"})
    assert drawn.values["n_gpus"] == 4096  # kept: the control's value before
    assert drawn.refused == {
        "n_gpus": "Write decimals with a point: 2.5, not 2,5 (a comma only groups "
        "thousands, as in 16,384); it keeps 4,096."
    }
    assert drawn.values["mfu_value"] == 0.8
    assert drawn.notes == {"mfu_value": "at most 0.8: 0.95 became 0.8"}
    again = planner.draw({"n_gpus": "-5"})
    assert again.values["n_gpus"] == 1 and again.refused == {}
    assert again.notes == {"n_gpus": "at least 1: -5 became 1"}
    # the function ran at the kept and fitted values
    assert drawn.spec == mfu_live.training_days_planner(**drawn.values)


def test_a_range_that_follows_another_control_says_it_moved_the_value():
    calc = mfu_live.mfu_calculator.live
    drawn = calc.draw({"gpu": "A100 SXM"})  # 2.4 M tokens/s is past 100 % MFU there
    top = calc.settle({"gpu": "A100 SXM"}).controls[1].max
    # 100 % MFU to six significant digits, inside the range: what a reader reads
    end = float(f"{top:.6g}") if float(f"{top:.6g}") <= top else None
    assert end is not None or top < 1e7  # (the case below when rounding went up)
    got = drawn.values["tokens_per_s"]
    assert got <= top < 2.4e6 and top - got < 10.0 ** (len(str(int(top))) - 6)
    assert got == float(f"{got:.6g}")
    assert drawn.notes == {
        "tokens_per_s": f"at most {live._show(got)}: 2,400,000 became {live._show(got)}"
    }


def test_a_pages_unreadable_starting_value_is_an_error():
    planner = mfu_live.training_days_planner.live
    with pytest.raises(ValueError, match="not a number"):
        planner.with_values(n_gpus="many")
    with pytest.raises(ValueError, match="not a number"):
        planner.payload(values={"n_gpus": "many"})


def test_draw_json_carries_the_notes_and_the_refusals():
    payload = mfu_live.training_days_planner.live.payload()
    out = json.loads(
        live.draw_json(json.dumps(payload), json.dumps({"n_gpus": "1e308"}))
    )
    assert "error" not in out and out["values"]["n_gpus"] == 4096
    assert out["refused"]["n_gpus"].startswith('"1e308" is too large a number')
    assert out["notes"] == {}
    out = json.loads(live.draw_json(json.dumps(payload), json.dumps({"n_gpus": "1e9"})))
    assert out["values"]["n_gpus"] == 1_000_000 and out["refused"] == {}
    assert out["notes"] == {"n_gpus": "at most 1,000,000: 1e9 became 1,000,000"}


# --- a figure: ranges, settle, payload, the browser's entry point ---


def _calculator(**values):
    return mfu_live.mfu_calculator.live.settle(values)


def test_ranges_end_the_throughput_at_100_percent_mfu_and_follow_the_other_controls():
    # Llama-2-7B on one H100 at s=4096 reaches 100 % MFU at 989e12 / 46,084,915,200
    # = 21,460.4 tokens/s (test_mfu works it out); two GPUs double it
    r = mfu_live.calculator_ranges(
        model="Llama-2-7B", seq_len=4096, gpu="H100 SXM", n_gpus=2
    )
    assert r["tokens_per_s"]["max"] == pytest.approx(2 * 21_460.4, abs=0.2)

    # dragged in round steps of about 0.1 % of 100 % MFU: 42.9 tokens/s -> 20
    assert r["tokens_per_s"]["step"] == r["tokens_per_s"]["min"] == 20

    fig = _calculator()  # Llama-3-405B, 16,384 H100s, s = 8192, 2.4e6 tokens/s
    tokens = {c.name: c for c in fig.controls}["tokens_per_s"]
    top = tokens.max
    assert tokens.value == 2_400_000  # as typed: the steps are for dragging
    assert tokens.step == 5000  # 0.1 % of 6,171,869 tokens/s is 6,172: 5,000
    half = _calculator(n_gpus=8192)
    t = {c.name: c for c in half.controls}["tokens_per_s"]
    assert t.max == pytest.approx(top / 2) and t.value == 2_400_000
    one = {c.name: c for c in _calculator(n_gpus=1).controls}["tokens_per_s"]
    # moved to 100 % MFU, 376.70097 tokens/s, as a reader reads it
    assert one.max == pytest.approx(top / 16384) and one.value == 376.7
    small = _calculator(n_gpus=1, model="Llama-2-7B", tokens_per_s=1e12)
    s = {c.name: c for c in small.controls}["tokens_per_s"]
    assert s.max == pytest.approx(21_460.4 * 4096 / 4096 * 989 / 989, rel=0.2)
    drawn = mfu_live.mfu_calculator.live.draw(
        {"n_gpus": 1, "model": "Llama-2-7B", "seq_len": 4096, "tokens_per_s": 1e12}
    )
    # 21,460.38 tokens/s to six digits, inside the range
    assert drawn.values["tokens_per_s"] == 21_460.3
    assert "MFU 100.0%" in drawn.spec["title"]["text"]


def test_a_stray_range_or_an_unknown_control_is_named():
    fig = live.LiveFigure(
        lambda x: {}, (live.slider("x", "x", 1, 0, 2, 1),), lambda x: {"y": {"max": 3}}
    )
    with pytest.raises(ValueError, match="'y', which is not one of the controls"):
        fig.settle()
    with pytest.raises(ValueError, match="has no control named"):
        cadence_live.waste_explorer.live.with_values(C=3)
    with pytest.raises(ValueError, match="takes no argument named"):
        live.LiveFigure(lambda a: {}, (live.slider("x", "x", 1, 0, 2, 1),))


def test_fixed_arguments_reach_the_function_and_the_payload():
    def scaled(x, table):
        return vl.chart([], title=f"{x * table['k']}")

    fig = live.LiveFigure(scaled, (live.slider("x", "x", 1, 0, 4, 1),))
    assert fig.fixed == ("table",)
    with pytest.raises(ValueError, match="needs the fixed arguments"):
        fig.draw()
    drawn = fig.draw({"x": "3"}, {"table": {"k": 2}})
    assert drawn.values == {"x": 3} and drawn.spec["title"]["text"] == "6"
    with pytest.raises(ValueError, match="are controls, not fixed"):
        fig.draw(None, {"x": 1, "table": {}})
    assert fig.payload({"table": {"k": 2}})["fixed"] == {"table": {"k": 2}}
    with pytest.raises(ValueError, match="over 200,000"):
        fig.payload({"table": {"k": 2, "raw": [0.5] * 60_000}})


def test_payload_is_the_contract():
    p = mfu_live.mfu_calculator.live.payload()
    assert p["function"] == "mlbook.mfu.live:mfu_calculator"
    assert p["ranges"] == "mlbook.mfu.live:calculator_ranges" and p["fixed"] == {}
    assert [c["name"] for c in p["controls"]] == [
        "model",
        "tokens_per_s",
        "seq_len",
        "gpu",
        "n_gpus",
    ]
    tokens = p["controls"][1]
    assert tokens["max"] == pytest.approx(
        mfu_live.calculator_ranges("Llama-3-405B", 8192, "H100 SXM", 16384)[
            "tokens_per_s"
        ]["max"]
    )  # the ranges as drawn, not as declared
    assert json.loads(json.dumps(p, allow_nan=False)) == p
    assert live.resolve(p["function"]) is mfu_live.mfu_calculator
    with pytest.raises(ValueError, match="mlbook"):
        live.resolve("os:system")


def test_draw_json_is_the_function_called_in_cpython():
    payload = cadence_live.waste_explorer.live.payload()
    values = {"checkpoint_s": "100", "node_mtbf_h": 5000, "restart_s": 95, "n_nodes": 7}
    out = json.loads(live.draw_json(json.dumps(payload), json.dumps(values)))
    # 95 s is in the range: kept (the slider's 30 s steps are for dragging)
    assert out["values"]["restart_s"] == 95 and out["values"]["n_nodes"] == 7
    assert out["result"] == json.loads(
        json.dumps(cadence_live.waste_explorer(**out["values"]))
    )
    assert [c["name"] for c in out["controls"]] == [
        c["name"] for c in payload["controls"]
    ]


def test_draw_json_returns_the_exception_as_a_message(monkeypatch):
    payload = cadence_live.waste_explorer.live.payload()

    def broken(**_):
        raise ValueError("no such cluster")

    monkeypatch.setattr(cadence_live, "waste_explorer", broken)
    out = json.loads(live.draw_json(json.dumps(payload), "{}"))
    assert out == {"error": "ValueError: no such cluster"}

    def not_a_number(**_):
        return {"layer": [float("nan")]}

    monkeypatch.setattr(cadence_live, "waste_explorer", not_a_number)
    assert (
        "NaN or inf" in json.loads(live.draw_json(json.dumps(payload), "{}"))["error"]
    )


# --- the three live figures against the formulas, computed here ---


def _layer(spec, mark):
    return [lay for lay in spec["layer"] if lay["mark"]["type"] == mark]


def _layers(spec):
    """Every layer of a spec, those of its concatenated views included."""
    for view in spec.get("vconcat", []) + spec.get("hconcat", []):
        yield from _layers(view)
    yield from spec.get("layer", [])


def _all_channels(spec):
    for lay in _layers(spec):
        for name, enc in lay.get("encoding", {}).items():
            if name in ("x", "y"):
                yield enc


def test_every_figure_has_axes_with_units_and_tooltips():
    figures = live_figures()
    assert set(figures) >= {
        "mlbook.cadence.live:waste_explorer",
        "mlbook.mfu.live:mfu_calculator",
        "mlbook.mfu.live:training_days_planner",
    }
    for path, function in figures.items():
        payload = function.live.payload()
        # a form's result is data: what it draws is its view's spec
        spec = payload["display"]["spec"] if payload.get("view") else payload["spec"]
        assert spec["$schema"].endswith("/vega-lite/v5.json"), path
        assert spec["title"]["text"], path
        assert list(_all_channels(spec)), path
        for enc in _all_channels(spec):
            assert "(" in enc["title"] and enc["title"].endswith(")"), (
                path,
                enc["title"],
            )
        for lay in _layers(spec):
            if lay["mark"]["type"] != "text":
                assert lay["encoding"].get("tooltip"), (path, lay["mark"])
            assert lay["data"]["values"], path


def test_waste_explorer_against_young_and_daly_by_hand():
    spec = cadence_live.waste_explorer(30.0, 1000.0, 300.0, 128)
    t = 1000 * 3600 / 128  # cluster MTBF: 28,125 s
    young = math.sqrt(2 * 30 * t)  # 1,299.04 s
    x = 30 / (2 * t)
    daly = young * (1 + math.sqrt(x) / 3 + x / 9) - 30  # 1,279.12 s

    def exact(i):
        return 1 - i / (t * math.exp(300 / t) * math.expm1((i + 30) / t))

    assert young == pytest.approx(1299.04, abs=0.01) and daly == pytest.approx(
        1279.12, abs=0.01
    )
    (star,) = _layer(spec, "point")
    assert star["data"]["values"][0]["I_min"] == pytest.approx(daly / 60, rel=1e-12)
    assert star["data"]["values"][0]["W"] == pytest.approx(exact(daly), rel=1e-12)
    (rule,) = _layer(spec, "rule")
    assert rule["data"]["values"][0]["I_min"] == pytest.approx(young / 60, rel=1e-12)
    (lines,) = _layer(spec, "line")
    rows = lines["data"]["values"]
    assert len(rows) == 160
    for r in rows:
        i = r["I_min"] * 60
        want = (
            exact(i)
            if r["curve"] == cadence_live.EXACT
            else 30 / i + i / (2 * t) + 300 / t
        )
        assert r["W"] == pytest.approx(want, rel=1e-12)
    ends = sorted(r["I_min"] for r in rows if r["curve"] == cadence_live.EXACT)
    assert ends[0] == pytest.approx(young / 8 / 60) and ends[-1] == pytest.approx(
        8 * young / 60
    )
    title = spec["title"]["text"]
    assert (
        "128 nodes x 1,000 h" in title
        and "T = 7.81 h" in title
        and "R = 300 s" in title
    )
    assert f"I* = {daly / 60:.1f} min" in title and f"{exact(daly):.1%} lost" in title


def test_calculator_marks_the_chosen_throughput_at_its_mfu():
    spec = mfu_live.mfu_calculator("Llama-2-7B", 21_460.4 / 2, 4096, "H100 SXM", 1)
    assert "MFU 50.0%" in spec["title"]["text"]
    point = _layer(spec, "point")[0]["data"]["values"][0]
    assert point["MFU"] == pytest.approx(0.5, abs=1e-5)
    line = _layer(spec, "line")[0]["data"]["values"]
    assert (
        line[-1]["tokens_per_s"] == pytest.approx(21_460.4, abs=0.1)
        and line[-1]["MFU"] == 1
    )
    band = _layer(spec, "rect")[0]["data"]["values"][0]
    assert (band["lo"], band["hi"]) == (0.35, 0.50)
    over = mfu_live.mfu_calculator("Llama-2-7B", 1e9, 4096, "H100 SXM", 1)
    assert "above 100 % MFU" in over["title"]["text"] and not _layer(over, "point")
    # The V100 has fp16 tensor cores and no bf16: its 125 TFLOP/s fp16 peak is used.
    assert mfu_live.sixteen_bit_peak("V100 SXM2") == 125e12
    assert (
        "MFU"
        in mfu_live.mfu_calculator("GPT-3 175B", 1e3, 2048, "V100 SXM2", 1024)["title"][
            "text"
        ]
    )


def test_planner_marks_the_chosen_cluster_with_the_attention_term():
    spec = mfu_live.training_days_planner(
        "Llama-3-70B", 15, 8192, "H100 SXM", 4096, 0.4
    )
    rows = _layer(spec, "line")[0]["data"]["values"]
    with_attention = {
        r["GPUs"]: r["days"] for r in rows if r["curve"].startswith("(6N")
    }
    six_nd = {r["GPUs"]: r["days"] for r in rows if r["curve"].startswith("6ND")}
    # 70,553,706,496 parameters (the preset); 6ND at 15T tokens on 4,096 H100s at 40 %
    n = 70_553_706_496
    days_6nd = 6 * n * 15e12 / (4096 * H100 * 0.4 * 86_400)
    point = _layer(spec, "point")[0]["data"]["values"][0]
    assert point["GPUs"] == 4096 and point["days_6nd"] == pytest.approx(
        days_6nd, rel=1e-12
    )
    # The MFU equation's count takes N_matmul, by hand (L = 80, h = 8192, kv 1024,
    # d_ff = 28672, V = 128256): 80 (2 h^2 + 2 h 1024 + 3 h d_ff) + V h
    # = 80 x 855,638,016 + 1,050,673,152 = 69,501,714,432; with 12Lhs =
    # 12 x 80 x 8192 x 8192 = 64,424,509,440 that is 481,434,796,032 FLOPs a
    # token against 6N = 423,322,238,976: 1.137277 times 6ND, 51.5821 days.
    n_mm = 69_501_714_432
    ratio = (6 * n_mm + 12 * 80 * 8192 * 8192) / (6 * n)
    assert ratio == pytest.approx(1.137277, abs=1e-6)
    assert point["days"] == pytest.approx(days_6nd * ratio, rel=1e-12)
    assert point["days"] == pytest.approx(51.5821, abs=1e-4)
    for g in with_attention:
        assert with_attention[g] / six_nd[g] == pytest.approx(ratio, rel=1e-12)
        assert six_nd[g] * g == pytest.approx(
            days_6nd * 4096
        )  # days halve as GPUs double
    assert min(with_attention) == 64 and max(with_attention) == 32768
    wide = mfu_live.training_days_planner(
        "Llama-3-70B", 15, 8192, "H100 SXM", 100_000, 0.4
    )
    assert max(r["GPUs"] for r in _layer(wide, "line")[0]["data"]["values"]) == 100_000
    assert "51.6 days on 4,096 (45.4 by 6ND)" in spec["title"]["text"]


def test_specs_are_json_and_deterministic():
    for function in live_figures().values():
        values = function.live.values()
        a, b = function(**values), function(**values)
        assert json.dumps(a, allow_nan=False) == json.dumps(b)
        assert not close(a, json.loads(json.dumps(a)))


def test_grids_match_numpy():
    np = pytest.importorskip("numpy")
    assert vl.linspace(0.0, 3.0, 7) == pytest.approx(
        list(np.linspace(0.0, 3.0, 7)), rel=1e-15
    )
    assert vl.geomspace(2.0, 2000.0, 9) == pytest.approx(
        list(np.geomspace(2.0, 2000.0, 9)), rel=1e-13
    )
    assert (
        vl.sig3(1000.0) == "1,000"
        and vl.sig3(33.6606) == "33.7"
        and vl.sig3(3.0) == "3"
    )


# --- the HTML the book's renderer writes ---


class _Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def test_the_renderer_writes_one_input_per_control_holding_the_value_itself():
    from bookext import live as ext

    payload = cadence_live.waste_explorer.live.payload()
    parser = _Elements()
    parser.feed(ext.live_html(payload, "fig-1"))
    (root,) = [a for t, a in parser.found if "data-mlbook-live" in a]
    assert json.loads(root["data-mlbook-live"]) == payload
    named = {a["name"]: (t, a) for t, a in parser.found if "name" in a}
    assert set(named) == {c["name"] for c in payload["controls"]}
    tag, c = named["checkpoint_s"]
    assert (
        tag == "input" and c["type"] == "text"
    )  # a log slider: no linear step of the browser's
    assert (float(c["min"]), float(c["max"]), float(c["value"])) == (3, 3000, 30)
    assert float(c["step"]) == pytest.approx(STEP)
    tag, r = named["restart_s"]
    # every number in a text box: a number box would hand the page 25 for "2,5"
    assert r["type"] == "text" and (r["min"], r["max"], r["step"]) == (
        "0",
        "1800",
        "30",
    )
    # each input is named by its label and described by its note and error lines
    labels = {a["for"] for t, a in parser.found if t == "label"}
    assert {a["id"] for _, a in named.values()} <= labels
    ids = {a.get("id") for t, a in parser.found if t == "p"}
    for _, a in named.values():
        assert set(a["aria-describedby"].split()) <= ids
    lines = [(a["class"], a["data-for"]) for t, a in parser.found if "data-for" in a]
    assert lines == [
        (kind, c["name"])
        for c in payload["controls"]
        for kind in ("mlbook-live-note", "mlbook-live-field-error")
    ]
    drags = [a for t, a in parser.found if "mlbook-live-drag" in a.get("class", "")]
    assert len(drags) == 4 and all("name" not in a for a in drags)
    assert (
        next(a for a in drags if a["max"] == "60")["value"] == "20"
    )  # 30 s: k = 20 of 60

    mfu_payload = mfu_live.mfu_calculator.live.payload()
    parser = _Elements()
    parser.feed(ext.live_html(mfu_payload, "fig-2"))
    selects = [a for t, a in parser.found if t == "select"]
    assert [a["name"] for a in selects] == ["model", "seq_len", "gpu"]
    options = [a for t, a in parser.found if t == "option"]
    assert {"value": "8192", "selected": None} in options


def test_the_renderer_is_registered_first_for_its_type():
    from bookext import mime

    assert ("html", live.MIME_TYPE, 0) in mime._priorities()
    assert live.MIME_TYPE in mime.HANDLERS


# --- the build: the archive and the widget state ---


def test_archive_holds_exactly_the_torch_free_modules():
    from test_layering import module_name, torch_free_modules

    from bookbuild import archive

    names = zipfile.ZipFile(
        __import__("io").BytesIO(archive.archive_bytes())
    ).namelist()
    modules = {module_name(ROOT / n) for n in names}
    assert modules == set(torch_free_modules())
    assert "mlbook/common/live.py" in names and "mlbook/plotting/live.py" not in names
    assert set(live_modules()) <= modules
    assert archive.archive_bytes() == archive.archive_bytes()  # deterministic


def _live_notebook():
    import nbformat

    nb = nbformat.v4.new_notebook()
    live_view = {"model_id": "box1", "version_major": 2, "version_minor": 0}
    other_view = {"model_id": "slider9", "version_major": 2, "version_minor": 0}
    cell = nbformat.v4.new_code_cell("show_live(...)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                "application/vnd.jupyter.widget-view+json": live_view,
                live.MIME_TYPE: {"function": "mlbook.x:y"},
                "text/plain": "<live figure>",
            },
        )
    ]
    other = nbformat.v4.new_code_cell("live_figure(...)")
    other.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"application/vnd.jupyter.widget-view+json": other_view},
        )
    ]
    state = {
        "box1": {"state": {"children": ["IPY_MODEL_hbox", "IPY_MODEL_out"]}},
        "hbox": {"state": {"children": ["IPY_MODEL_s1"], "layout": "IPY_MODEL_lay"}},
        "s1": {"state": {"style": "IPY_MODEL_sty", "layout": "IPY_MODEL_lay"}},
        "out": {"state": {"outputs": [{"data": {"text/plain": "x"}}]}},
        "sty": {"state": {}},
        "lay": {"state": {}},
        "slider9": {"state": {"layout": "IPY_MODEL_lay9"}},
        "lay9": {"state": {}},
    }
    nb.metadata["widgets"] = {
        "application/vnd.jupyter.widget-state+json": {
            "state": state,
            "version_major": 2,
        }
    }
    nb.cells = [cell, other]
    return nb


def test_strip_live_widgets_keeps_only_the_other_widgets(tmp_path):
    import nbformat

    from bookbuild import execution

    path = tmp_path / "p.ipynb"
    nbformat.write(_live_notebook(), path)
    execution.strip_live_widgets(path)
    nb = nbformat.read(path, as_version=4)
    data = nb.cells[0].outputs[0]["data"]
    assert (
        "application/vnd.jupyter.widget-view+json" not in data
        and live.MIME_TYPE in data
    )
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert set(state) == {"slider9", "lay9"}

    alone = _live_notebook()
    alone.cells = alone.cells[:1]
    nbformat.write(alone, path)
    execution.strip_live_widgets(path)
    assert (
        "widgets" not in nbformat.read(path, as_version=4).metadata
    )  # no widget state then


# --- vendored scripts ---


def test_vendored_vega_is_what_jupyterlab_bundles():
    """One spec draws the same in JupyterLab and in the book: the versions
    tools/vendor_js.py pins are those JupyterLab's static files list."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import vendor_js

    licenses = (
        Path(sys.prefix)
        / "share"
        / "jupyter"
        / "lab"
        / "static"
        / ("third-party-licenses.json")
    )
    if not licenses.is_file():
        pytest.skip(
            f"JupyterLab's static files are not in this environment ({licenses})"
        )
    bundled = {
        p["name"]: p["versionInfo"]
        for p in json.loads(licenses.read_text())["packages"]
    }
    for name in ("vega", "vega-lite", "vega-embed"):
        assert vendor_js.PACKAGES[name] == bundled[name], name


def test_make_serve_binds_this_machine_only_and_types_what_pyodide_needs(tmp_path):
    import sys
    import urllib.request

    sys.path.insert(0, str(ROOT / "tools"))
    import serve

    for name in ("index.html", "a.wasm", "b.mjs", "c.zip"):
        (tmp_path / name).write_bytes(b"x")
    httpd, base = serve.serve(tmp_path)
    try:
        assert httpd.server_address[0] == "127.0.0.1"
        types = {}
        for name in ("a.wasm", "b.mjs", "c.zip"):
            with urllib.request.urlopen(f"{base}/{name}", timeout=10) as r:
                types[name] = r.headers["Content-Type"]
        assert types == {
            "a.wasm": "application/wasm",
            "b.mjs": "text/javascript",
            "c.zip": "application/zip",
        }
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert serve.main(["--dir", str(tmp_path / "nothing")]) == 2


# --- the JupyterLab host, without a browser ------------------------------------


@pytest.fixture
def quiet(monkeypatch):
    """What the Lab host displays, kept instead of shown."""
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **k: shown.append(obj))
    return shown


def test_lab_host_shows_one_bundle_and_follows_the_ranges(quiet):
    from mlbook.plotting import live as host

    host.show_live(mfu_live.mfu_calculator, n_gpus=16384)
    (bundle,) = [b for b in quiet if "application/vnd.jupyter.widget-view+json" in b]
    assert set(bundle) == {
        "application/vnd.jupyter.widget-view+json",
        live.MIME_TYPE,
        live.VEGALITE_MIME_TYPE,
        "text/plain",
    }
    assert bundle[live.MIME_TYPE]["function"] == "mlbook.mfu.live:mfu_calculator"
    assert bundle[live.VEGALITE_MIME_TYPE] == bundle[live.MIME_TYPE]["spec"]

    view = host.LiveView(mfu_live.mfu_calculator)
    tokens, box = view.drags["tokens_per_s"], view.controls["tokens_per_s"]
    top = tokens.max
    view.controls[
        "n_gpus"
    ].value = "1"  # the end moves down; 2.4e6 is past it: moved to 100 %
    assert tokens.max == pytest.approx(top / 16384) and tokens.value == 376.7
    assert box.value == "376.7"  # the box shows the value drawn, as a reader reads it
    assert "MFU 100.0%" in view.spec["title"]["text"] and view.draws == 2
    assert view.lines["tokens_per_s"].value.startswith(
        '<span class="mlbook-live-note">at most '
    )
    view.controls["model"].value = "Llama-2-7B"  # a smaller model: the end moves up
    assert tokens.max > top / 16384 and view.draws == 3
    log = host.LiveView(cadence_live.waste_explorer).drags["checkpoint_s"]
    assert (log.base, log.min, log.max) == (
        10,
        pytest.approx(math.log10(3)),
        pytest.approx(math.log10(3000)),
    )


def test_lab_host_shows_an_exception_and_keeps_the_last_figure(quiet):
    from mlbook.plotting import live as host

    def fragile(x):
        if x > 5:
            raise ValueError(f"x = {x} is too big")
        return vl.chart([], title=f"x = {x}")

    fragile.live = live.LiveFigure(fragile, (live.slider("x", "x (m)", 1, 0, 10, 1),))
    view = host.LiveView(fragile)
    view.drags["x"].value = 3  # dragged: the box takes it, and it draws
    assert view.controls["x"].value == "3"
    assert view.spec["title"]["text"] == "x = 3" and view.error is None
    view.controls["x"].value = "7"
    assert (
        view.error == "ValueError: x = 7 is too big" and "too big" in view.message.value
    )
    assert view.spec["title"]["text"] == "x = 3"  # the last good figure stays
    view.controls["x"].value = "4"
    assert view.error is None and view.message.value == "" and view.draws == 4


def test_the_lab_host_replaces_its_figure_as_the_output_widgets_state(quiet):
    from mlbook.plan import live as plan_live
    from mlbook.plotting import live as host

    view = host.LiveView(mfu_live.mfu_calculator)
    view.controls["n_gpus"].value = "1"
    (shown,) = view.output.outputs  # replaced, not appended to
    assert shown["data"][live.VEGALITE_MIME_TYPE] == view.spec
    form = host.LiveView(plan_live.planner_form)
    text, *figure = form.output.outputs  # a form: its text, then its figure
    assert text["data"]["text/html"].startswith('<pre class="mlbook-live-text">')
    assert [f["data"][live.VEGALITE_MIME_TYPE] for f in figure] == (
        [form.display["spec"]] if form.display.get("spec") else []
    )


def test_live_figures_under_papermill_send_nothing_back_on_the_shell_socket(
    monkeypatch,
):
    """The hang that set_outputs avoids: where an Output widget captures a
    display, nbclient's stand-in for it sends a state update on the shell
    socket while the cell runs, which can swallow the wake-up of the cell's
    reply (60 live cells before the fix: 60 such sends, 15 replies seen late).
    Executed by nbclient, a live figure and a form make no such send, and
    the stored Output widgets still hold what they show."""
    import nbclient.output_widget as ow
    import nbformat
    from nbclient import NotebookClient

    sends = []
    monkeypatch.setattr(ow.OutputWidget, "send", lambda self, *a, **k: sends.append(a))
    cells = [
        "from mlbook.plotting.live import show_live\n"
        "from mlbook.mfu import live\nfrom mlbook.plan import live as plan_live",
        "show_live(live.mfu_calculator, n_gpus=16384)",
        "show_live(plan_live.planner_form)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    root = Path(__file__).resolve().parent.parent
    NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": root}}
    ).execute()
    assert sends == []
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    held = [
        [o["data"] for o in m["state"]["outputs"]]
        for m in state.values()
        if m["model_name"] == "OutputModel"
    ]
    assert len(held) == 2
    assert "MFU" in held[0][0][live.VEGALITE_MIME_TYPE]["title"]["text"]
    assert "text/html" in held[1][0]


def test_the_lab_host_says_what_it_did_with_each_typed_value(quiet):
    """The MFU chapter's planner in JupyterLab: a number is typed into a text
    box and read by the figure's rules, the box shows the value drawn, and the
    line under it names the rule or why the text was not read."""
    from mlbook.plotting import live as host

    view = host.LiveView(mfu_live.training_days_planner)
    box, line = view.controls["n_gpus"], view.lines["n_gpus"]
    cases = [
        ("-5", "1", "at least 1: -5 became 1"),
        ("1e9", "1000000", "at most 1,000,000: 1e9 became 1,000,000"),
        ("2048", "2048", ""),
        ("2,5", "2048", "Write decimals with a point: 2.5, not 2,5"),
        ("2,048", "2,048", ""),  # digits grouped as the prose prints them: kept
        ("abc", "2048", '"abc" is not a number; it keeps 2,048'),
        ("1e308", "2048", '"1e308" is too large a number to read here'),
        ("1e-9", "1", "at least 1: 1e-9 became 1"),
        ("1000001", "1000000", "at most 1,000,000: 1000001 became 1,000,000"),
    ]
    for typed, shown, said in cases:
        box.value = typed
        assert box.value == shown, typed
        assert view.figure.values()["n_gpus"] == int(shown.replace(",", ""))
        text = html.unescape(line.value)
        assert said in text and bool(said) == bool(text), (typed, text)
        assert view.error is None  # never an exception
