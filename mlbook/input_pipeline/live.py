"""The input-pipeline chapter's live figure (mlbook.common.live): the loader
model's step time and device idle share against the number of workers, the
chosen count marked, the page's measured sweep drawn on it. Standard library
and mlbook's torch-free modules only: the HTML book runs it in the reader's
browser.

The page passes its measured sweep as fixed data: one row per worker count
(workers, step time in ms, idle share), with the batch size and batches an
epoch it was measured at; the other settings it measured (persistent
workers, prefetch depth, pinned memory) as ``variants``, rows that also name
their setting; and Bekman's published run scaled to the same batch as
``published``. Well under a kilobyte of JSON.
"""

from __future__ import annotations

from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.input_pipeline import formulas

MAX_WORKERS = 16  # the slider's and the curves' range of workers
STEADY = "model, steady state"
COMPUTE = "compute alone"
CHOICE_COLOR, MEASURED_COLOR = vl.C[3], vl.C[0]
VARIANT_COLOR, PUBLISHED_COLOR = vl.C[1], vl.C[4]
PUBLISHED = "Bekman's run, scaled to this batch"
PANEL_WIDTH, PANEL_HEIGHT = 270, 260


def _epoch_label(n_batches: int) -> str:
    return f"model, mean over {n_batches} batches"


def loader_curves(
    item_cost_ms: float, compute_ms: float, batch_size: int, n_batches: int
) -> list[dict]:
    """One row per (curve, workers) for workers 0..MAX_WORKERS: the steady
    state and the epoch mean (warm-up included) of the loader model, with
    step time (ms) and the device's idle share of a step."""
    load_s, compute_s = batch_size * item_cost_ms / 1e3, compute_ms / 1e3
    rows = []
    for w in range(MAX_WORKERS + 1):
        steady = formulas.loader_step_s(load_s, compute_s, w)
        epoch = formulas.loader_epoch_s(n_batches, load_s, compute_s, w) / n_batches
        for curve, step in ((STEADY, steady), (_epoch_label(n_batches), epoch)):
            rows.append(
                {
                    "curve": curve,
                    "workers": w,
                    "step_ms": step * 1e3,
                    "idle": max(0.0, 1 - compute_s / step),
                }
            )
    return rows


def _points(rows, x, y, tooltip, shape="square", color=MEASURED_COLOR) -> dict:
    return vl.points(
        rows, x, y, tooltip=tooltip, color=color, shape=shape, size=70, filled=False
    )


def published_rows(
    overhead_s: dict, n_batches: int, compute_s: float, scale: float = 1.0
) -> list[dict]:
    """A published loader benchmark (epoch time minus compute, per worker
    count, over ``n_batches`` steps of ``compute_s``) as the figure's rows,
    scaled to a batch ``scale`` times smaller (every per-batch time shrinks
    with it): step time = compute + overhead / n_batches, and the idle share
    of that step."""
    if not overhead_s:
        raise ValueError("overhead_s must name at least one worker count")
    step = compute_s / scale
    rows = []
    for w, over in sorted(overhead_s.items(), key=lambda kv: int(kv[0])):
        step_s = step + over / scale / n_batches
        rows.append(
            {"workers": int(w), "step_ms": step_s * 1e3, "idle": 1 - step / step_s}
        )
    return rows


def _panel(layers: list[dict], title: str) -> dict:
    return {
        "title": {"text": title, "fontSize": 11, "fontWeight": "normal"},
        "width": PANEL_WIDTH,
        "height": PANEL_HEIGHT,
        "layer": layers,
    }


@live.figure(
    live.slider("workers", "num_workers (processes)", 2, 0, MAX_WORKERS, 1),
    live.slider("item_cost_ms", "cost of one item (ms)", 5.0, 0.5, 50, 0.5),
    live.slider("compute_ms", "compute a step (ms)", 40, 1, 1000, 1),
)
def loader_explorer(
    workers: int,
    item_cost_ms: float,
    compute_ms: float,
    batch_size: int = 20,
    n_batches: int = 10,
    measured: list | None = None,
    measured_label: str = "measured",
    variants: list | None = None,
    published: list | None = None,
) -> dict:
    """The loader model for batches of ``batch_size`` items of
    ``item_cost_ms`` each and ``compute_ms`` of compute a step: step time
    (left) and the device's idle share (right) against workers, in the
    steady state and averaged over an epoch of ``n_batches`` (what a measured
    epoch gives), the chosen count marked. ``measured`` rows
    ({"workers", "step_ms", "idle"}) are drawn as squares, ``variants``
    (the same, with a "setting" label) as diamonds, and ``published``
    (``published_rows``'s) as crosses; the subtitle says which is which."""
    w, batch_size, n_batches = int(workers), int(batch_size), int(n_batches)
    load_s, compute_s = batch_size * item_cost_ms / 1e3, compute_ms / 1e3
    rows = loader_curves(item_cost_ms, compute_ms, batch_size, n_batches)
    seen, others, theirs = list(measured or []), variants or [], published or []
    step = formulas.loader_step_s(load_s, compute_s, w)
    idle = formulas.device_idle_fraction(load_s, compute_s, w)
    need = formulas.workers_needed(load_s, compute_s)
    styles = {
        STEADY: {"color": "black"},
        _epoch_label(n_batches): {"color": "black", "dash": vl.DASHED},
        COMPUTE: {"color": vl.C[2], "dash": [2, 3]},
    }
    flat = [
        {"curve": COMPUTE, "workers": k, "step_ms": compute_ms, "idle": 0.0}
        for k in (0, MAX_WORKERS)
    ]
    top = 1.1 * max(r["step_ms"] for r in rows + seen + others + theirs)
    x = vl.channel(
        "workers",
        vl.title_of("num_workers", "processes"),
        domain=[-0.5, MAX_WORKERS + 0.5],  # the end points drawn whole
        nice=False,
        format="d",
    )
    t = vl.channel(
        "step_ms", vl.title_of("step time", "ms"), domain=[0, top], format=",.4~g"
    )
    i = vl.channel(
        "idle", vl.title_of("device idle share of a step", "%"), domain=[0, 1]
    )
    i["axis"]["format"] = ".0%"
    tips = [
        vl.tip("workers", "workers", "d"),
        vl.tip("step_ms", "step (ms)"),
        vl.tip("idle", "idle", ".2%"),
    ]
    chosen = {"workers": w, "step_ms": step * 1e3, "idle": idle, "need": need}
    chosen_tips = [*tips, vl.tip("need", "workers that keep the device busy", "d")]
    left = [
        vl.lines(rows + flat, x, t, styles=styles, tooltip=tips),
        vl.marker(
            chosen, x, t, tooltip=chosen_tips, shape="circle", color=CHOICE_COLOR
        ),
    ]
    # the panels share the colour and dash scales, so the right one declares
    # the same styles and legend as the left (vega-lite warns on each
    # difference, six times a draw) though it draws no compute line; the one
    # legend is the left's
    right = [
        vl.lines(rows, x, i, styles=styles, tooltip=tips),
        vl.marker(
            chosen, x, i, tooltip=chosen_tips, shape="circle", color=CHOICE_COLOR
        ),
    ]
    if seen:
        seen_tips = [vl.tip("label", "", nominal=True), *tips]
        seen = [{**r, "label": measured_label} for r in seen]
        left.append(_points(seen, x, t, seen_tips))
        right.append(_points(seen, x, i, seen_tips))
    key = [f"squares: {measured_label}"] if seen else []
    if others:
        tips_of = [vl.tip("setting", "setting", nominal=True), *tips]
        for panel, y in ((left, t), (right, i)):
            panel.append(_points(others, x, y, tips_of, "diamond", VARIANT_COLOR))
        key.append("diamonds: the other settings measured")
    if theirs:
        pub = [{**r, "label": PUBLISHED} for r in theirs]
        pub_tips = [vl.tip("label", "", nominal=True), *tips]
        for panel, y in ((left, t), (right, i)):
            panel.append(_points(pub, x, y, pub_tips, "cross", PUBLISHED_COLOR))
        key.append(f"crosses: {PUBLISHED}")
    title = (
        f"load {load_s * 1e3:,.0f} ms/batch ({batch_size} x {item_cost_ms:g} ms), "
        f"compute {compute_ms:g} ms: {w} workers -> {step * 1e3:,.0f} ms/step, "
        f"idle {idle:.0%}; {need} keep the device busy"
    )
    heading = {"text": title, "fontSize": 12, "fontWeight": "normal"}
    if key:
        heading |= {"subtitle": "; ".join(key), "subtitleColor": "#555555"}
    return {
        "$schema": vl.SCHEMA,
        "title": heading,
        "hconcat": [
            _panel(left, "step time"),
            _panel(right, "device idle share"),
        ],
        "config": vl.config(),
    }
