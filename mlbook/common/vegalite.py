"""Small builders of Vega-Lite v5 specs, for live figures (mlbook.common.live).

Standard library only, like every live figure, so the same code runs in
CPython and in the reader's browser (Pyodide). A spec is a plain dict with
its data inline; the builders return pieces to put together:

    vegalite.chart(
        [vegalite.lines(rows, x, y, styles={"first order": {"color": vegalite.C[0]}}),
         vegalite.marker({"I_min": 10, "W": 0.02}, x, y, tooltip=[...])],
        title="...",
    )

``x`` and ``y`` are encoding channels from ``channel`` (axis titles carry
their units: ``title_of("checkpoint interval I", "min")``); ``tip`` makes a
tooltip field that shows the value exactly as the data holds it (a format
with enough digits, never the axis's rounding). ``linspace`` and
``geomspace`` make the grids that numpy would.
"""

from __future__ import annotations

import math

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
WIDTH, HEIGHT = 560, 300  # px; about the book's 7 x 3.6 inch matplotlib figures
# matplotlib's default colour cycle (C0, C1, ...), so live and static figures match
C = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
DASHED = [6, 4]
# a five-pointed star in Vega's unit square (Vega has no "star" shape)
STAR = (
    "M0,-1L0.2245,-0.309L0.9511,-0.309L0.3633,0.118L0.5878,0.809L0,0.382"
    "L-0.5878,0.809L-0.3633,0.118L-0.9511,-0.309L-0.2245,-0.309Z"
)
EXACT = ",.6~g"  # tooltips: six significant digits, thousands separated


def linspace(start: float, stop: float, n: int) -> list[float]:
    """``n`` evenly spaced numbers from ``start`` to ``stop`` (both exact)."""
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n!r}")
    step = (stop - start) / (n - 1)
    return [start] + [start + i * step for i in range(1, n - 1)] + [stop]


def geomspace(start: float, stop: float, n: int) -> list[float]:
    """``n`` numbers from ``start`` to ``stop`` (both above 0, both exact),
    evenly spaced on a log scale."""
    if start <= 0 or stop <= 0:
        raise ValueError(f"geomspace needs ends above 0, got {start!r} and {stop!r}")
    lo, hi = math.log(start), math.log(stop)
    return [start] + [math.exp(v) for v in linspace(lo, hi, n)[1:-1]] + [stop]


def title_of(quantity: str, unit: str | None = None) -> str:
    """An axis title with its unit: ``title_of("days to train", "days")``;
    a quantity that is its unit is named once ("days", not "days (days)")."""
    return f"{quantity} ({unit})" if unit and unit != quantity else quantity


def channel(
    field: str,
    title: str,
    *,
    scale: str = "linear",
    base: float | None = None,
    domain: list | None = None,
    format: str | None = None,
    percent: bool = False,
    zero: bool | None = None,
    nice: bool | None = None,
) -> dict:
    """A quantitative x or y encoding: ``scale`` "linear" or "log" (``base``
    for log), an optional fixed ``domain``, tick labels in ``format`` (d3
    format), or as percentages of a fraction with ``percent``."""
    s: dict = {"type": scale}
    if base is not None:
        s["base"] = base
    if domain is not None:
        s["domain"] = list(domain)
    if zero is not None:
        s["zero"] = zero
    if nice is not None:
        s["nice"] = nice
    axis: dict = {"format": ".0%" if percent else (format or "~g")}
    return {
        "field": field,
        "type": "quantitative",
        "title": title,
        "scale": s,
        "axis": axis,
    }


def tip(field: str, title: str, format: str | None = EXACT, nominal=False) -> dict:
    """A tooltip entry showing ``field`` under ``title``, exactly (``format``
    with enough digits; ".2%" and the like for fractions)."""
    out = {
        "field": field,
        "type": "nominal" if nominal else "quantitative",
        "title": title,
    }
    if format and not nominal:
        out["format"] = format
    return out


def lines(
    rows: list[dict],
    x: dict,
    y: dict,
    *,
    series: str = "curve",
    styles: dict[str, dict],
    tooltip: list[dict] = (),
    legend: str | None = "top",
) -> dict:
    """One line per value of ``rows[i][series]``, styled by ``styles``
    (label -> {"color": .., "dash": [..]}; the order of ``styles`` is the
    legend's), with a small point per row that carries the tooltip."""
    labels = list(styles)
    stray = {r[series] for r in rows} - set(labels)
    if stray:
        raise ValueError(f"rows name curves without a style: {sorted(stray)}")
    # colour and dash share one legend (the same field, the same legend spec)
    key = (
        None
        if legend is None
        else {
            "title": None,
            "orient": legend,
            "symbolType": "stroke",
            "symbolSize": 400,
        }
    )
    color = {
        "field": series,
        "type": "nominal",
        "scale": {"domain": labels, "range": [styles[k]["color"] for k in labels]},
        "legend": key,
    }
    dash = {
        "field": series,
        "type": "nominal",
        "scale": {
            "domain": labels,
            "range": [styles[k].get("dash", [1, 0]) for k in labels],
        },
        "legend": key,
    }
    return {
        "data": {"values": rows},
        "mark": {"type": "line", "clip": True, "point": {"size": 12, "filled": True}},
        "encoding": {
            "x": x,
            "y": y,
            "color": color,
            "strokeDash": dash,
            "tooltip": [tip(series, "curve", nominal=True), *tooltip],
        },
    }


def points(
    rows: list[dict],
    x: dict,
    y: dict,
    *,
    tooltip: list[dict],
    color: str | dict = "black",
    shape: str = "circle",
    size: float = 30,
    filled: bool = True,
    clip: bool = True,
) -> dict:
    """A layer of points (measured values, a chosen setting) with their
    tooltip. ``color`` is a colour, or a colour encoding (the curves' scale,
    so that the legend names the points)."""
    mark = {"type": "point", "shape": shape, "filled": filled, "size": size}
    encoding = {"x": x, "y": y, "tooltip": tooltip}
    if isinstance(color, dict):
        encoding["color"] = color
    else:
        mark["color"] = color
    if clip:
        mark["clip"] = True
    return {"data": {"values": rows}, "mark": mark, "encoding": encoding}


def marker(
    row: dict,
    x: dict,
    y: dict,
    *,
    tooltip: list[dict],
    shape: str = STAR,
    color: str = "black",
    size: float = 260,
) -> dict:
    """One marked point (the chosen setting, an optimum) with its tooltip."""
    return points([row], x, y, tooltip=tooltip, color=color, shape=shape, size=size)


def vrule(
    row: dict, x: dict, *, tooltip: list[dict], color: str = C[0], dash=DASHED
) -> dict:
    """A vertical line at ``row[x["field"]]`` (a reference value)."""
    return {
        "data": {"values": [row]},
        "mark": {
            "type": "rule",
            "color": color,
            "strokeDash": dash,
            "strokeWidth": 1.5,
        },
        "encoding": {"x": x, "tooltip": tooltip},
    }


def hband(
    lo: float,
    hi: float,
    y: dict,
    *,
    label: str,
    color: str = C[2],
    opacity: float = 0.15,
) -> list[dict]:
    """A horizontal band from ``lo`` to ``hi`` on ``y``, with ``label`` in it
    (two layers: the band and its label)."""
    field = y["field"]
    band_y = {**y, "field": "lo"}
    row = {"lo": lo, "hi": hi, "label": label}
    tooltip = [
        tip("label", "band", nominal=True),
        tip("lo", f"{field} from"),
        tip("hi", "to"),
    ]
    return [
        {
            "data": {"values": [row]},
            "mark": {"type": "rect", "color": color, "opacity": opacity},
            "encoding": {"y": band_y, "y2": {"field": "hi"}, "tooltip": tooltip},
        },
        {
            "data": {"values": [row]},
            "mark": {
                "type": "text",
                "align": "right",
                "baseline": "bottom",
                "dx": -4,
                "dy": -2,
                "x": "width",
                "color": "#2a6b2a",
                "fontSize": 10,
            },
            "encoding": {"y": {**band_y, "field": "lo"}, "text": {"field": "label"}},
        },
    ]


def chart(
    layers: list[dict],
    *,
    title: str,
    title_color: str | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> dict:
    """The spec: the layers over shared axes, with a title (which carries the
    values the figure was drawn for)."""
    heading: dict = {"text": title, "fontSize": 12, "fontWeight": "normal"}
    if title_color:
        heading["color"] = title_color
    return {
        "$schema": SCHEMA,
        "width": width,
        "height": height,
        "title": heading,
        "layer": layers,
        "config": config(),
    }


def config() -> dict:
    """The book's look for a chart: light grid, small labels, grey frame (a
    fresh dict each call, so a figure may change its own copy)."""
    return {
        "axis": {
            "grid": True,
            "gridOpacity": 0.5,
            "labelFontSize": 10,
            "titleFontSize": 11,
        },
        "legend": {"labelFontSize": 10, "labelLimit": 320},
        "view": {"stroke": "#888"},
    }


def sig3(x: float) -> str:
    """``x`` to three significant digits, written plainly (1,000 not 1e+03):
    how a title states a log slider's value."""
    r = float(f"{x:.3g}")
    if r == 0:
        return "0"
    text = f"{r:,.{max(0, 2 - math.floor(math.log10(abs(r))))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
