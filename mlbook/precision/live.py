"""The mixed-precision chapter's live figures (mlbook.common.live): gradient
histograms against fp16's zones at a loss scale, the dynamic loss scaler's
run at a growth interval and backoff, and the 16 bytes per parameter of
mixed-precision Adam. Standard library and mlbook's torch-free modules only:
the HTML book runs them in the reader's browser.

Their build-time data are summaries: the histogram figure takes the share of
values per bin and the zone fractions per loss scale
(``formulas.histogram_summary``), not the gradients; the scaler figure takes
the largest gradient of each step, which its simulation replays, and the
scale torch.amp.GradScaler measured on the page (``measured_scales``: the
steps where it changed). Without them (``payload()`` with no fixed data)
each draws a small example of its own, made here with the standard
library, and no measured scale."""

from __future__ import annotations

import math
import random

from mlbook.common import live, memory
from mlbook.common import vegalite as vl
from mlbook.common.units import GIB
from mlbook.precision import formulas

POW2_LABELS = "'2^' + datum.value"  # tick labels of an axis in log2 units
FORMAT = "fp16"
ZONE_BANDS = (  # (zone, fill, opacity): matplotlib's C3 and C1, as the static figure
    ("flushes to 0", vl.C[3], 0.12),
    ("subnormal", vl.C[1], 0.12),
    ("overflows to inf", vl.C[3], 0.25),
)
CEILING_POINTS = 500
SCALER_CURVES = {
    "loss scale": {"color": vl.C[0]},
    "fp16 max / largest gradient": {"color": "#999999"},
}
MEASURED = "torch.amp.GradScaler, measured"
MEASURED_STYLE = {"color": vl.C[1]}


def _pow2_channel(field: str, title: str, domain: list) -> dict:
    """A linear axis over log2 values, its ticks labelled 2^k at integers."""
    enc = vl.channel(field, title, domain=domain, nice=False, zero=False)
    enc["axis"] = {"format": "d", "labelExpr": POW2_LABELS, "tickMinStep": 1}
    return enc


# --- gradient histograms against fp16's zones ---------------------------------------


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _example_summary() -> dict:
    """A stand-in for measured gradients: three log-normal groups (log2|g|
    normal), in the shape of ``formulas.histogram_summary``, computed from
    the normal CDF (exact shares and zone fractions, no sample)."""
    flush = math.log2(formulas.flush_threshold(FORMAT))
    normal = math.log2(formulas.float_format(FORMAT).smallest_normal)
    top = math.log2(formulas.overflow_threshold(FORMAT))
    width, ks = 0.25, list(range(0, 31))
    groups = []
    for label, centre, spread in (
        ("logit gradients (example)", -25.0, 2.0),
        ("hidden-state gradients (example)", -20.0, 2.5),
        ("weight gradients (example)", -14.0, 3.0),
    ):
        first = math.floor(centre - 5 * spread)
        edges = [first + i * width for i in range(int(10 * spread / width) + 1)]

        def cdf(x, centre=centre, spread=spread):
            return _normal_cdf((x - centre) / spread)

        shares = [cdf(b) - cdf(a) for a, b in zip(edges, edges[1:], strict=False)]
        zones = []
        for k in ks:
            flushed, below = cdf(flush - k), cdf(normal - k)
            kept = cdf(top - k)
            zones.append([flushed, below - flushed, kept - below, 1 - kept])
        groups.append(
            {
                "label": label,
                "first_edge_log2": float(first),
                "shares": shares,
                "zones": zones,
            }
        )
    return {"format": FORMAT, "bin_width": width, "log2_scales": ks, "groups": groups}


def _check_summary(summary: dict) -> None:
    if summary.get("format") != FORMAT:
        raise ValueError(
            f"the summary is of {summary.get('format')!r}; this figure draws {FORMAT}"
        )
    if not summary.get("groups"):
        raise ValueError("the summary holds no groups of gradients")


@live.figure(
    live.slider("log2_scale", "loss scale S = 2^k: k (log2)", 0, 0, 30, 1),
)
def gradient_histogram(log2_scale: int, summary: dict | None = None) -> dict:
    """Histograms of log2(|gradient| x S) for each group against fp16's
    zones (flushed to zero, subnormal, overflow); the title gives the first
    group's fractions in each zone at this scale, read from the summary's
    exact zone fractions. ``summary`` is ``formulas.histogram_summary``'s
    (None: a log-normal example)."""
    summary = summary or _example_summary()
    _check_summary(summary)
    k = int(log2_scale)
    if k not in summary["log2_scales"]:
        raise ValueError(
            f"log2_scale={k} is not among the summary's scales "
            f"{summary['log2_scales'][0]}..{summary['log2_scales'][-1]}"
        )
    at = summary["log2_scales"].index(k)
    width, groups = summary["bin_width"], summary["groups"]
    ks = summary["log2_scales"]
    lo = min(g["first_edge_log2"] for g in groups) + min(ks) - 2
    hi = max(g["first_edge_log2"] + width * len(g["shares"]) for g in groups)
    domain = [min(math.floor(lo), -27), max(math.ceil(hi + max(ks) + 2), 18)]
    styles = {g["label"]: {"color": vl.C[i]} for i, g in enumerate(groups)}
    rows = []
    for g in groups:
        left = g["first_edge_log2"] + k
        shares = g["shares"] + g["shares"][-1:]  # the last bin's right edge
        rows += [
            {"curve": g["label"], "log2": left + i * width, "share": s}
            for i, s in enumerate(shares)
        ]
    x = _pow2_channel("log2", "|gradient| x S (log2 scale, powers of two)", domain)
    y = vl.channel("share", vl.title_of("share of values per bin", "%"), percent=True)
    flush = math.log2(formulas.flush_threshold(FORMAT))
    normal = math.log2(formulas.float_format(FORMAT).smallest_normal)
    top = math.log2(formulas.overflow_threshold(FORMAT))
    spans = ((domain[0], flush), (flush, normal), (top, domain[1]))
    zone_of_band = ("flushed", "subnormal", "overflow")
    layers = []
    for (zone, colour, opacity), (a, b), field in zip(
        ZONE_BANDS, spans, zone_of_band, strict=True
    ):
        column = formulas.ZONES.index(field)
        row = {"zone": zone, "from": a, "to": b}
        row.update({f"g{i}": g["zones"][at][column] for i, g in enumerate(groups)})
        tips = [vl.tip("zone", "zone", nominal=True)]
        tips += [vl.tip(f"g{i}", g["label"], ".3%") for i, g in enumerate(groups)]
        layers.append(
            {
                "data": {"values": [row]},
                "mark": {"type": "rect", "color": colour, "opacity": opacity},
                "encoding": {"x": {**x, "field": "from"}, "x2": {"field": "to"}},
            }
        )
        layers[-1]["encoding"]["tooltip"] = tips
    line = vl.lines(
        rows,
        x,
        y,
        styles=styles,
        tooltip=[
            vl.tip("log2", "bin's left edge, log2 of |g| x S"),
            vl.tip("share", "share of the group", ".3%"),
        ],
    )
    line["mark"]["interpolate"] = "step-after"
    line["mark"]["point"]["size"] = 6
    layers.append(line)
    labels = [
        {"label": zone, "at": (a + b) / 2}
        for (zone, _, _), (a, b) in zip(ZONE_BANDS, spans, strict=True)
    ]
    layers.append(
        {
            "data": {"values": labels},
            "mark": {"type": "text", "y": 10, "fontSize": 10, "color": "#555555"},
            "encoding": {"x": {**x, "field": "at"}, "text": {"field": "label"}},
        }
    )
    first = groups[0]
    flushed, sub, _, over = first["zones"][at]
    title = (
        f"scale 2^{k}: {first['label']} {flushed:.1%} flushed to zero, "
        f"{sub:.1%} subnormal, {over:.2%} overflow"
    )
    return vl.chart(layers, title=title)


# --- the dynamic loss scaler's run ------------------------------------------------


def _example_grad_max(n_steps: int = 600, seed: int = 0) -> list[float]:
    """A stand-in script of largest gradients: a drift from 0.5 to 0.05 with
    lognormal noise and four spikes of 1000x (as drifting_grad_max draws
    with numpy), from the standard library's generator."""
    rng = random.Random(seed)
    out = [
        0.5 * 0.1 ** (t / (n_steps - 1)) * math.exp(0.3 * rng.gauss(0.0, 1.0))
        for t in range(n_steps)
    ]
    for t in rng.sample(range(n_steps // 10, n_steps), 4):
        out[t] *= 1e3
    return out


@live.figure(
    live.slider("growth_interval", "growth interval (steps)", 100, 10, 500, 10),
    live.slider("backoff_factor", "backoff factor (x scale)", 0.5, 0.1, 0.9, 0.05),
)
def scaler_run(
    growth_interval: int,
    backoff_factor: float,
    grad_max: list | None = None,
    measured: dict | None = None,
) -> dict:
    """The scaler's decisions on a script of largest gradients (one per step;
    None: an example script), simulated without tensors
    (``formulas.simulate_scaler``, GradScaler's rules): the loss scale per
    step, the skipped steps, and the largest scale fp16 could hold at each
    step (over long runs the lowest of every few steps), all in log2.
    ``measured`` (``measured_scales``'s) adds the scale a real GradScaler
    kept on the same script, as dots where it changed, and says in the
    subtitle where and at which settings it ran."""
    grad_max = grad_max or _example_grad_max()
    trace = formulas.simulate_scaler(
        grad_max, backoff_factor=backoff_factor, growth_interval=int(growth_interval)
    )
    fmax = formulas.float_format(FORMAT).max
    n = len(trace.scales)
    ceiling = [round(math.log2(fmax / g), 4) for g in grad_max]
    # drawn as the lowest ceiling of each run of `every` steps (at most
    # CEILING_POINTS points: a redraw's cost is its rows), which keeps the dips
    # the scale must stay under
    every = max(1, math.ceil(n / CEILING_POINTS))
    envelope = [(t, min(ceiling[t : t + every])) for t in range(0, n, every)]
    scales = [math.log2(s) for s in trace.scales]
    # the scale is a step function: a row where it changes, and the last step
    changes = [t for t in range(n) if t == 0 or scales[t] != scales[t - 1]]
    rows = [
        {"curve": "loss scale", "step": t + 1, "log2": scales[t]}
        for t in [*changes, n - 1]
    ]
    dots = (
        [
            {"curve": MEASURED, "step": t, "log2": v}
            for t, v in zip(measured["step"], measured["log2"], strict=True)
        ]
        if measured
        else []
    )
    seen = [r["log2"] for r in dots]
    lo = math.floor(min(min(scales), min(ceiling), *seen)) - 1
    hi = math.ceil(max(max(scales), max(ceiling), *seen)) + 1
    x = vl.channel(
        "step", vl.title_of("training step", "steps"), domain=[1, n], format=",.4~g"
    )
    y = _pow2_channel("log2", "loss scale (log2 scale, powers of two)", [lo, hi])
    styles = {**SCALER_CURVES, MEASURED: MEASURED_STYLE} if dots else SCALER_CURVES
    scale_line = vl.lines(
        rows,
        x,
        y,
        styles=styles,
        tooltip=[vl.tip("step", "from step"), vl.tip("log2", "log2 of the scale")],
    )
    scale_line["mark"]["interpolate"] = "step-after"
    ceiling_line = {
        "data": {
            "values": [
                {"curve": "fp16 max / largest gradient", "step": t + 1, "log2": c}
                for t, c in envelope
            ]
        },
        "mark": {"type": "line", "clip": True, "strokeWidth": 0.8},
        "encoding": {
            "x": x,
            "y": y,
            "color": scale_line["encoding"]["color"],
            "strokeDash": scale_line["encoding"]["strokeDash"],
            "tooltip": [
                vl.tip("curve", "curve", nominal=True),
                vl.tip("step", "step"),
                vl.tip("log2", "log2 of fp16 max / largest gradient"),
            ],
        },
    }
    skipped = [
        {"step": t + 1, "log2": scales[t], "label": "skipped step"}
        for t in range(n)
        if trace.skipped[t]
    ]
    layers = [ceiling_line, scale_line]
    if skipped:
        layers.append(
            vl.marker(
                skipped[0],
                x,
                y,
                shape="triangle-down",
                color=vl.C[3],
                size=40,
                tooltip=[
                    vl.tip("label", "", nominal=True),
                    vl.tip("step", "step"),
                    vl.tip("log2", "log2 of the scale after it"),
                ],
            )
        )
        layers[-1]["data"]["values"] = skipped
    if dots:  # on the curves' colour scale, so the legend names them
        tips = [
            vl.tip("curve", "", nominal=True),
            vl.tip("step", "from step"),
            vl.tip("log2", "log2 of the scale"),
        ]
        color = scale_line["encoding"]["color"]
        layers.append(
            vl.points(dots, x, y, tooltip=tips, color=color, size=45, filled=False)
        )
    title = (
        f"growth interval {int(growth_interval)}, backoff {backoff_factor:g}: "
        f"{trace.n_skipped} of {n} steps skipped"
    )
    spec = vl.chart(layers, title=title)
    if dots:
        spec["title"]["subtitle"] = (
            f"circles: torch.amp.GradScaler on {measured['device']}, growth "
            f"interval {measured['growth_interval']}, backoff "
            f"{measured['backoff_factor']:g}, where its scale changed"
        )
        spec["title"]["subtitleColor"] = "#555555"
    return spec


def measured_scales(
    scales: list, growth_interval: int, backoff_factor: float, device: str
) -> dict:
    """The scaler figure's ``measured``: a real scaler's scale after each
    step, kept where it changed (and at the first and last steps, as the
    figure draws its own), in log2, with the settings and the device it ran
    on. Scales are powers of two, so a few hundred bytes hold a long run."""
    if not scales or any(not s > 0 for s in scales):
        raise ValueError(
            f"scales must be a non-empty list of positive numbers, got {scales!r:.80}"
        )
    log2 = [math.log2(float(s)) for s in scales]
    n = len(log2)
    keep = [t for t in range(n) if t in (0, n - 1) or log2[t] != log2[t - 1]]
    return {
        "device": str(device),
        "growth_interval": int(growth_interval),
        "backoff_factor": float(backoff_factor),
        "step": [t + 1 for t in keep],
        "log2": [log2[t] for t in keep],
    }


# --- the memory bill ----------------------------------------------------------------


@live.figure(
    live.slider(
        "n_params_billions",
        "parameters (billions)",
        7,
        0.07,
        700,
        10 ** (1 / 20),
        "log",
    ),
)
def state_bytes(n_params_billions: float) -> dict:
    """The model state of mixed-precision Adam, item by item, in GiB, for a
    model of ``n_params_billions`` billion parameters (activations come on
    top)."""
    items = memory.model_state_bytes(n_params_billions * 1e9, breakdown=True)
    rows, left = [], 0.0
    for name, nbytes in items.items():
        gib = nbytes / GIB
        rows.append(
            {
                "item": f"{name}: {gib:,.0f} GiB",
                "bytes": memory.ADAM_MIXED_STATE_BYTES[name],
                "GiB": gib,
                "from": left,
                "to": left + gib,
                "row": "model state",
            }
        )
        left += gib
    styles = [r["item"] for r in rows]
    x = vl.channel(
        "from",
        vl.title_of("model state", "GiB"),
        domain=[0, left * 1.02],
        nice=False,
        format=",.4~g",
    )
    bars = {
        "data": {"values": rows},
        "mark": {"type": "bar", "height": 40},
        "encoding": {
            "x": x,
            "x2": {"field": "to"},
            "color": {
                "field": "item",
                "type": "nominal",
                "scale": {"domain": styles, "range": list(vl.C[: len(styles)])},
                "legend": {"title": None, "orient": "bottom", "columns": 3},
            },
            "tooltip": [
                vl.tip("item", "item", nominal=True),
                vl.tip("bytes", "bytes per parameter"),
                vl.tip("GiB", "GiB"),
            ],
        },
    }
    per_param = sum(memory.ADAM_MIXED_STATE_BYTES.values())
    title = (
        f"{vl.sig3(n_params_billions)}B parameters x {per_param} bytes "
        f"= {left:,.0f} GiB"
    )
    return vl.chart([bars], title=title, height=80)
