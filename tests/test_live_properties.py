"""Property tests for live figures (mlbook.common.live, mlbook.common.vegalite
and the chapters' live.py): for any valid declaration a value inside its
range stays as typed, one outside goes to the nearest end, and either stays
put when fitted again; the browser's entry
point returns what the function returns; the spec builders give JSON; and the
live figures' numbers move as their formulas say, for any setting of their
controls."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.cadence import live as cadence_live
from mlbook.common import accelerators, live, transformer
from mlbook.common import vegalite as vl
from mlbook.mfu import flops
from mlbook.mfu import live as mfu_live

PROPERTY_COVERS = {
    "mlbook.common.live.slider",
    "mlbook.common.live.select_slider",
    "mlbook.common.live.dropdown",
    "mlbook.common.live.checkbox",
    "mlbook.common.live.number",
    "mlbook.common.live.figure",
    "mlbook.common.live.resolve",
    "mlbook.common.live.draw_json",
    "mlbook.common.vegalite.linspace",
    "mlbook.common.vegalite.geomspace",
    "mlbook.common.vegalite.title_of",
    "mlbook.common.vegalite.channel",
    "mlbook.common.vegalite.tip",
    "mlbook.common.vegalite.lines",
    "mlbook.common.vegalite.marker",
    "mlbook.common.vegalite.points",
    "mlbook.common.vegalite.vrule",
    "mlbook.common.vegalite.hband",
    "mlbook.common.vegalite.chart",
    "mlbook.common.vegalite.config",
    "mlbook.common.vegalite.sig3",
    "mlbook.cadence.live.waste_explorer",
    "mlbook.mfu.live.sixteen_bit_peak",
    "mlbook.mfu.live.calculator_ranges",
    "mlbook.mfu.live.mfu_calculator",
    "mlbook.mfu.live.training_days_planner",
}

FEW = examples(60)
values = st.floats(-1e9, 1e9, allow_nan=False) | st.integers(-(10**9), 10**9)


@st.composite
def linear_sliders(draw):
    lo = draw(st.integers(-1000, 1000) | st.floats(-1e3, 1e3))
    step = draw(st.sampled_from([1, 2, 5, 30, 0.5, 0.01, 0.25, 1e-3]))
    n = draw(st.integers(1, 400))
    hi = lo + n * step
    k = draw(st.integers(0, n))
    return live.slider("x", "x (m)", lo + k * step if k < n else hi, lo, hi, step)


@st.composite
def log_sliders(draw):
    lo = draw(st.floats(1e-3, 1e3))
    step = draw(st.sampled_from([10 ** (1 / 20), 10**0.05, 2.0, 1.5, 10.0]))
    n = draw(st.integers(1, 80))
    hi = lo * step**n
    return live.slider("g", "g (s)", lo, lo, hi, step, "log")


@FEW
@given(linear_sliders() | log_sliders(), values)
def test_a_value_in_range_stays_as_typed_and_one_outside_goes_to_the_end(c, v):
    """A slider's grid is for dragging: a value inside [min, max] is kept as
    it is; one outside goes to the nearest end, written to six significant
    digits inside the range; either stays put when fitted again."""
    got = c.clamp(v)
    assert c.min <= got <= c.max
    if c.min <= v <= c.max:
        assert got == (round(v) if c.integral else v)
        assert c.fit(v).note is None or c.integral
    else:
        end = c.max if v > c.max else c.min
        assert math.isclose(got, end, rel_tol=1e-5, abs_tol=0)
        assert got == float(f"{got:.6g}")  # a reader's precision
        assert c.fit(v).note.endswith(f"became {live._show(got)}")
    assert c.clamp(got) == got
    # and a declaration may start there
    assert live.slider(c.name, c.label, got, c.min, c.max, c.step, c.scale).value == got


@FEW
@given(st.integers(1, 100), st.integers(1, 10**6), values)
def test_a_number_is_an_integer_in_range(lo, span, v):
    n = live.number("n", "n (GPUs)", lo, lo, lo + span)
    got = n.clamp(v)
    assert type(got) is int and lo <= got <= lo + span
    assert n.clamp(str(got)) == got


@FEW
@given(
    st.lists(
        st.text(min_size=1, max_size=8) | st.integers(),
        min_size=1,
        max_size=6,
        unique_by=str,
    ),
    st.data(),
)
def test_choices_clamp_to_an_option(options, data):
    assume(len({live._option_key(o) for o in options}) == len(options))
    value = data.draw(st.sampled_from(options))
    for make in (live.dropdown, live.select_slider):
        c = make("q", "q", options, value)
        other = data.draw(st.sampled_from(options))
        assert c.clamp(other) == other
        assert c.clamp(live._option_key(other)) == other  # as a <select> sends it
        with pytest.raises(live.Unreadable):  # not an option: refused, not guessed
            c.clamp(object())
    b = live.checkbox("b", "b", data.draw(st.booleans()))
    switch = data.draw(st.booleans() | st.text())
    try:
        assert b.clamp(switch) in (True, False)
    except live.Unreadable as exc:
        assert exc.field == "b" and not isinstance(switch, bool)


@FEW
@given(linear_sliders() | log_sliders(), st.text(max_size=12) | values.map(str))
def test_a_typed_text_is_read_as_the_number_it_writes_or_refused(c, text):
    """Never a guess: what is read is float(text) of a decimal, its digits
    grouped or not (no decimal comma, no inf), and what is not raises
    Unreadable naming the control."""
    try:
        got = c.read(text)
    except live.Unreadable as exc:
        assert exc.field == c.name and exc.message
        return
    plain = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"  # digits, a point, an exponent
    bare = re.sub(r"[\s_]", "", text)
    grouped = r"[+-]?[1-9]\d{0,2}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?"
    assert re.fullmatch(plain, bare, re.ASCII) or re.fullmatch(grouped, bare, re.ASCII)
    assert got == float(bare.replace(",", "")) and math.isfinite(got)
    fitted = c.fit(text)
    assert fitted.value == c.clamp(got)
    # a note exactly when the value moved, and it names the value it became
    moved = not math.isclose(fitted.value, got, rel_tol=1e-9)
    assert (fitted.note is not None) == moved
    if moved:
        assert fitted.note.endswith(f"became {live._show(fitted.value)}")


def _toy(x, g, label):
    rows = [{"curve": "y", "x": x, "y": g}]
    xs = vl.channel("x", vl.title_of("x", "m"))
    ys = vl.channel("y", vl.title_of("y", "s"), scale="log")
    return vl.chart(
        [vl.lines(rows, xs, ys, styles={"y": {"color": vl.C[0]}})], title=label
    )


@FEW
@given(linear_sliders(), log_sliders(), values, values)
def test_a_draw_is_the_function_at_the_clamped_values(xs, gs, x, g):
    declaration = live.figure(xs, gs)(lambda x, g, label: _toy(x, g, label)).live
    raw = {"x": str(x), "g": g}
    drawn = declaration.draw(raw, {"label": "t"})
    assert drawn.values == {"x": xs.clamp(str(x)), "g": gs.clamp(g)}
    assert drawn.spec == _toy(**drawn.values, label="t")


@FEW
@given(
    st.sampled_from(
        ["mlbook.cadence.live:waste_explorer", "mlbook.mfu.live:mfu_calculator"]
    )
)
def test_resolve_finds_the_function_and_draw_json_runs_it(path):
    function = live.resolve(path)
    payload = function.live.payload()
    out = json.loads(live.draw_json(json.dumps(payload), "{}"))
    assert out["result"] == json.loads(json.dumps(function(**out["values"])))


@FEW
@given(st.text(max_size=20).filter(lambda s: not s.startswith("mlbook.")))
def test_resolve_refuses_what_is_not_mlbooks(path):
    with pytest.raises(ValueError, match="mlbook"):
        live.resolve(path + ":f")


@FEW
@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.integers(2, 500))
def test_linspace_ends_exact_and_even(a, b, n):
    xs = vl.linspace(a, b, n)
    assert len(xs) == n and xs[0] == a and xs[-1] == b
    gaps = [y - x for x, y in itertools.pairwise(xs)]
    assert all(
        math.isclose(g, (b - a) / (n - 1), rel_tol=1e-6, abs_tol=1e-6) for g in gaps
    )


@FEW
@given(st.floats(1e-6, 1e6), st.floats(1e-6, 1e6), st.integers(2, 300))
def test_geomspace_ends_exact_and_even_in_log(a, b, n):
    xs = vl.geomspace(a, b, n)
    assert len(xs) == n and xs[0] == a and xs[-1] == b
    ratios = [math.log(y / x) for x, y in itertools.pairwise(xs)]
    assert all(math.isclose(r, math.log(b / a) / (n - 1), abs_tol=1e-9) for r in ratios)


@FEW
@given(st.floats(1e-3, 1e12))
def test_sig3_is_three_digits_written_plainly(x):
    text = vl.sig3(x)
    assert "e" not in text
    assert float(text.replace(",", "")) == pytest.approx(x, rel=5e-3)


@FEW
@given(
    st.lists(st.floats(0.1, 1e4), min_size=2, max_size=30),
    st.text(min_size=1, max_size=10),
    st.sampled_from(["m", "s", None]),
)
def test_the_builders_give_json_specs(ys, name, unit):
    rows = [{"curve": "a", "x": i + 1.0, "y": y} for i, y in enumerate(ys)]
    x = vl.channel("x", vl.title_of(name, unit), scale="log")
    y = vl.channel("y", vl.title_of("y", unit), percent=True, domain=[0, 1])
    spec = vl.chart(
        [
            *vl.hband(0.2, 0.3, y, label="band"),
            vl.lines(rows, x, y, styles={"a": {"color": vl.C[1], "dash": vl.DASHED}}),
            vl.vrule({"x": 2.0}, x, tooltip=[vl.tip("x", "x")]),
            vl.marker({"x": 1.0, "y": ys[0]}, x, y, tooltip=[vl.tip("y", "y", ".1%")]),
        ],
        title=name,
    )
    assert json.loads(json.dumps(spec, allow_nan=False)) == spec
    assert len(spec["layer"]) == 5 and spec["title"]["text"] == name
    assert x["title"] == (f"{name} ({unit})" if unit and unit != name else name)
    # a quantity that is its own unit is named once: "days", not "days (days)"
    assert vl.title_of("days", "days") == "days"
    with pytest.raises(ValueError, match="without a style"):
        vl.lines(rows, x, y, styles={"b": {"color": "red"}})


@FEW
@given(
    st.lists(st.floats(0.1, 1e4), min_size=1, max_size=30),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["circle", "square", "diamond", "cross"]),
)
def test_points_carry_every_row_and_colour_by_value_or_by_scale(
    ys, by_scale, clip, shape
):
    rows = [{"curve": "a", "x": i + 1.0, "y": y} for i, y in enumerate(ys)]
    x, y = vl.channel("x", "x"), vl.channel("y", "y")
    scale = {"field": "curve", "type": "nominal"}
    color = scale if by_scale else "red"
    layer = vl.points(rows, x, y, tooltip=[], color=color, shape=shape, clip=clip)
    assert layer["data"]["values"] == rows and layer["mark"]["shape"] == shape
    assert ("color" in layer["encoding"]) == by_scale == ("color" not in layer["mark"])
    assert layer["mark"].get("clip", False) == clip
    assert json.loads(json.dumps(layer, allow_nan=False)) == layer


@FEW
@given(st.data())
def test_waste_explorer_marks_an_interval_where_the_exact_waste_is_near_its_least(data):
    figure = cadence_live.waste_explorer.live
    raw = {c.name: data.draw(st.floats(c.min, c.max)) for c in figure.controls}
    drawn = figure.draw(raw)
    spec = drawn.spec
    star = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "point")
    best = star["data"]["values"][0]
    rows = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "line")
    exact = [r for r in rows["data"]["values"] if r["curve"] == cadence_live.EXACT]
    assert all(0 < r["W"] <= 1 for r in exact)
    # Daly's interval approximates the exact optimum: within 1 % of the least waste
    # on the plotted grid (or at the cap, where the waste is 1 everywhere)
    assert best["W"] <= min(r["W"] for r in exact) * 1.01 + 1e-12
    assert f"{drawn.values['n_nodes']:,} nodes" in spec["title"]["text"]


@FEW
@given(
    st.sampled_from(list(transformer.PRESETS)),
    st.sampled_from(list(accelerators.ACCELERATORS)),
    st.sampled_from(mfu_live.SEQ_LENS),
    st.integers(1, 100_000),
    st.floats(0.001, 1.0),
)
def test_the_calculator_reads_back_the_mfu_it_was_given(model, gpu, s, g, f):
    peak = mfu_live.sixteen_bit_peak(gpu)
    assert peak in accelerators.ACCELERATORS[gpu].peak_flops_per_s.values()
    top = mfu_live.calculator_ranges(model, s, gpu, g)["tokens_per_s"]["max"]
    spec = mfu_live.mfu_calculator(model, f * top, s, gpu, g)
    point = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "point")
    assert point["data"]["values"][0]["MFU"] == pytest.approx(f, rel=1e-9)
    assert f"MFU {f:.1%}" in spec["title"]["text"]


@FEW
@given(
    st.sampled_from(list(transformer.PRESETS)),
    st.floats(0.5, 30),
    st.sampled_from(mfu_live.SEQ_LENS),
    st.integers(1, 200_000),
    st.floats(0.05, 0.8),
)
def test_planner_days_fall_as_one_over_the_gpus(model, d, s, g, u):
    spec = mfu_live.training_days_planner(model, d, s, "H100 SXM", g, u)
    rows = next(lay for lay in spec["layer"] if lay["mark"]["type"] == "line")
    six = [r for r in rows["data"]["values"] if r["curve"].startswith("6ND")]
    attn = {
        r["GPUs"]: r["days"]
        for r in rows["data"]["values"]
        if r["curve"].startswith("(6N")
    }
    assert any(r["GPUs"] == g for r in six)
    ratio = {attn[r["GPUs"]] / r["days"] for r in six}
    # (6 N_matmul + 12Lhs) / 6N, N all parameters: the same at every GPU count
    cfg = transformer.PRESETS[model]
    n_mm, n_all = flops.matmul_params(cfg), flops.n_params(cfg)
    want = (6 * n_mm + 12 * cfg.n_layers * cfg.d_model * s) / (6 * n_all)
    assert max(ratio) == pytest.approx(min(ratio), rel=1e-9)
    assert min(ratio) == pytest.approx(want, rel=1e-9)
    assert all(
        r["days"] * r["GPUs"] == pytest.approx(six[0]["days"] * six[0]["GPUs"])
        for r in six
    )


@FEW
@given(st.text(max_size=30), st.integers(1, 10))
def test_every_chart_has_the_books_config_each_its_own_copy(title, n):
    """One look for every chart (the single-panel ones through chart, the
    two-panel ones through config), and a figure that changes its copy
    changes no other."""
    spec = vl.chart([], title=title)
    assert spec["config"] == vl.config()
    copies = [vl.config() for _ in range(n)]
    copies[0]["axis"]["grid"] = False
    assert all(c["axis"]["grid"] is True for c in copies[1:])
    assert vl.config()["axis"] == {
        "grid": True,
        "gridOpacity": 0.5,
        "labelFontSize": 10,
        "titleFontSize": 11,
    }
