"""The gradient-accumulation chapter's live figure (mlbook.common.live): step
time and activation memory against k = B / b, from the cost model fitted on
the page, with the reader's choice of B and b marked and the measured points
drawn on it. Standard library and mlbook's torch-free modules only: the HTML
book runs it in the reader's browser.

The page fits ``StepCostModel`` to its own sweep and passes both, as a compact
summary (``cost_data``: the model's five numbers, the device, and one row per
measured k, with the CUDA peak where a GPU measured one; well under a
kilobyte of JSON), as the figure's fixed data.
"""

from __future__ import annotations

from mlbook.accumulation import formulas as cost
from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.units import MIB

TIME_COLOR, MEMORY_COLOR = vl.C[0], vl.C[1]
MEASURED_COLOR, CHOICE_COLOR, PEAK_COLOR = "#666666", vl.C[3], vl.C[4]
MODEL_FIELDS = (
    "optimizer_s",
    "per_micro_batch_s",
    "per_example_s",
    "per_example_bytes",
    "fixed_bytes",
)
# What the figure draws when it is called without the page's fit (its title then
# says "example model"): round numbers of the size a small GPT's CPU sweep finds.
EXAMPLE_MODEL = {
    "optimizer_s": 0.002,
    "per_micro_batch_s": 0.003,
    "per_example_s": 0.001,
    "per_example_bytes": 2.0 * MIB,
    "fixed_bytes": 0.5 * MIB,
}


def cost_data(
    model: cost.StepCostModel, sweep: cost.KSweep, device: str | None = None
) -> dict:
    """The figure's fixed data: the fitted model's numbers, and the measured
    sweep as one row per k (step time in ms, activations in MiB, and
    ``peak_mib``, the CUDA peak above the model state, where it was measured),
    with the ``device`` it ran on."""
    rows = []
    for r in sweep.rows:
        row = {"k": int(r.k), "step_ms": r.step_s * 1e3, "act_mib": r.saved_bytes / MIB}
        if r.peak_bytes is not None:
            row["peak_mib"] = r.peak_bytes / MIB
        rows.append(row)
    measured = {"global_batch": int(sweep.global_batch), "rows": rows}
    if device is not None:
        measured["device"] = str(device)
    return {
        "model": {name: float(getattr(model, name)) for name in MODEL_FIELDS},
        "measured": measured,
    }


def micro_batch_range(global_batch: float, **_) -> dict:
    """b runs over the powers of two up to B, so k = B / b is a whole number."""
    return {"micro_batch": {"max": global_batch}}


def _line(rows, x, y, color, tooltip) -> dict:
    return {
        "data": {"values": rows},
        "mark": {
            "type": "line",
            "color": color,
            "clip": True,
            "point": {"size": 14, "filled": True, "color": color},
        },
        "encoding": {"x": x, "y": y, "tooltip": tooltip},
    }


def _points(rows, x, y, tooltip, color=MEASURED_COLOR, shape="circle") -> dict:
    return vl.points(rows, x, y, tooltip=tooltip, color=color, shape=shape, clip=False)


def _y(field, title, top, color, orient) -> tuple[dict, dict]:
    """A y channel with its axis (left or right, titled in the curve's colour)
    and the same channel without an axis, for the other layers on that scale."""
    shown = vl.channel(
        field, title, domain=[0, top], nice=False, zero=True, format=",.4~g"
    )
    shown["axis"].update(orient=orient, titleColor=color)
    return shown, {**shown, "axis": None}


@live.figure(
    live.slider(
        "global_batch", "global batch B (examples)", 64, 8, 1024, 2, "log", on_grid=True
    ),
    live.slider(
        "micro_batch", "micro-batch b (examples)", 16, 1, 1024, 2, "log", on_grid=True
    ),
    ranges=micro_batch_range,
)
def cost_explorer(
    global_batch: float,
    micro_batch: float,
    model: dict | None = None,
    measured: dict | None = None,
) -> dict:
    """The fitted cost model at global batch B against k: step time on the
    left axis, one micro-batch's activation memory on the right, the choice
    k = B / b marked, and the measured points (at their own B) in grey.
    ``model`` and ``measured`` are ``cost_data``'s; without them the figure
    draws EXAMPLE_MODEL and no measurements, and its title says so."""
    B, b = int(global_batch), int(micro_batch)
    m = cost.StepCostModel(**(model or EXAMPLE_MODEL))
    mine = [
        {
            "k": k,
            "b": B // k,
            "step_ms": m.step_s(B, k) * 1e3,
            "act_mib": m.activation_bytes(B // k) / MIB,
        }
        for k in cost.divisors(B)
    ]
    seen = measured["rows"] if measured else []
    peaks = [r for r in seen if "peak_mib" in r]
    k_top = max([B] + [r["k"] for r in seen])
    x = vl.channel(
        "k",
        vl.title_of("accumulation steps k = B / b", "micro-batches"),
        scale="log",
        base=2,
        domain=[1, k_top],
        nice=False,
        format="d",
    )
    x["axis"]["values"] = [2**e for e in range(k_top.bit_length())]  # 1, 2, 4, ...
    top_t = 1.08 * max(r["step_ms"] for r in mine + seen)
    top_m = 1.08 * max(
        [r["act_mib"] for r in mine + seen] + [r["peak_mib"] for r in peaks]
    )
    t_axis, t_same = _y(
        "step_ms", vl.title_of("step time", "ms"), top_t, TIME_COLOR, "left"
    )
    m_axis, m_same = _y(
        "act_mib",
        vl.title_of("activation memory per micro-batch", "MiB"),
        top_m,
        MEMORY_COLOR,
        "right",
    )
    k_tip = vl.tip("k", "k", "d")
    model_tip = [
        k_tip,
        vl.tip("b", "b", "d"),
        vl.tip("step_ms", "model step (ms)"),
        vl.tip("act_mib", "model activations (MiB)"),
    ]
    seen_tip = [
        k_tip,
        vl.tip("step_ms", "measured step (ms)"),
        vl.tip("act_mib", "measured activations (MiB)"),
    ]
    layers = [
        _line(mine, x, t_axis, TIME_COLOR, model_tip),
        _line(mine, x, m_axis, MEMORY_COLOR, model_tip),
    ]
    if seen:
        layers += [
            _points(seen, x, t_same, seen_tip),
            _points(seen, x, m_same, seen_tip),
        ]
    if peaks:
        peak_tip = [k_tip, vl.tip("peak_mib", "CUDA peak above model state (MiB)")]
        peak_y = {**m_same, "field": "peak_mib"}
        layers.append(_points(peaks, x, peak_y, peak_tip, PEAK_COLOR, "square"))
    key = "blue: step time, left axis; orange: activations, right axis; grey: "
    key += f"measured at B={measured['global_batch']}" if seen else "none measured"
    lines = [key]  # the subtitle's lines: the key, then where it was measured
    if seen and "device" in measured:
        lines.append(f"measured on {measured['device']}")
    if peaks:
        lines.append("purple squares: CUDA peak above the model state")
    if model is None:
        lines[0] = f"an example model, not a fit. {key}"
    if b <= B and B % b == 0:
        k = B // b
        chosen = {
            "k": k,
            "b": b,
            "step_ms": m.step_s(B, k) * 1e3,
            "act_mib": m.activation_bytes(b) / MIB,
            "slowdown": m.slowdown(B, k),
        }
        tip = [
            k_tip,
            vl.tip("b", "b", "d"),
            vl.tip("step_ms", "step (ms)"),
            vl.tip("act_mib", "activations (MiB)"),
            vl.tip("slowdown", "x one batch of B"),
        ]
        for y in (t_same, m_same):
            layers.append(
                vl.marker(
                    chosen,
                    x,
                    y,
                    tooltip=tip,
                    shape="circle",
                    color=CHOICE_COLOR,
                    size=110,
                )
            )
        title = (
            f"B={B}, b={b} -> k={k}: {chosen['step_ms']:,.1f} ms per step "
            f"({chosen['slowdown']:.2f}x one batch of {B}), "
            f"{chosen['act_mib']:,.2f} MiB of activations"
        )
        spec = vl.chart(layers, title=title)
    else:
        title = f"b={b} does not divide B={B}: no whole number of micro-batches"
        spec = vl.chart(layers, title=title, title_color=CHOICE_COLOR)
    spec["title"]["subtitle"] = lines
    spec["title"]["subtitleColor"] = "#555555"
    # two y scales over one k axis: step time left, memory right
    spec["resolve"] = {"scale": {"y": "independent"}}
    return spec
