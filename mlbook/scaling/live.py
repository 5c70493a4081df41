"""The scaling chapter's live figures (mlbook.common.live): model state per
GPU against the data-parallel size for ZeRO stages 0-3, with the GPU's usable
HBM as a line; the pipeline bubble against the number of micro-batches; and
one pipeline step's schedule, device by device, with its idle time shaded.
Standard library and mlbook's torch-free modules only: the HTML book runs
them in the reader's browser."""

from __future__ import annotations

from mlbook.common import accelerators, live, transformer
from mlbook.common import vegalite as vl
from mlbook.common.units import GIB
from mlbook.mfu import flops
from mlbook.scaling import formulas, pipeline

DP_SIZES = tuple(2**i for i in range(15))  # 1 .. 16384
STAGE_COLOURS = {0: "#444444", 1: vl.C[0], 2: vl.C[2], 3: vl.C[3]}
HBM_COLOUR = "#000000"
MODELS = tuple(transformer.PRESETS)
GPUS = tuple(accelerators.ACCELERATORS)
BUBBLE_PS = (2, 4, 8, 16, 32, 64)
BUBBLE_VS = (1, 2, 4, 8)
M_MAX = 256
OTHER_P = "#bbbbbb"  # the other stage counts, at the chosen v


@live.figure(
    live.dropdown("model", "model", MODELS, "Llama-3-70B"),
    live.dropdown("gpu", "GPU", GPUS, "H100 SXM"),
    live.select_slider("n_dp", "data-parallel ranks N_d (GPUs)", DP_SIZES, 64),
    live.slider("k", "K, optimizer state (bytes per parameter)", 12, 4, 16, 2),
)
def zero_memory(model: str, gpu: str, n_dp: int, k: int = 12) -> dict:
    """Model-state GiB per GPU against the data-parallel size for ZeRO
    stages 0-3 (mixed-precision Adam, 2 + 2 + K bytes per parameter), with the
    HBM the GPU's driver makes usable as a dashed line and the chosen N_d
    marked on every stage's curve."""
    cfg = transformer.PRESETS[model]
    n = flops.n_params(cfg)
    hbm_gib = accelerators.accelerator(gpu).hbm_usable_bytes / GIB
    names = formulas.ZERO_STAGE_NAMES
    hbm_label = f"{gpu} usable HBM, {hbm_gib:,.1f} GiB"

    def gib(d: int, stage: int) -> float:
        return formulas.zero_state_bytes(n, d, stage, k) / GIB

    rows = [
        {"curve": names[s], "N_d": d, "GiB": gib(d, s)}
        for s in formulas.ZERO_STAGES
        for d in DP_SIZES
    ]
    rows += [{"curve": hbm_label, "N_d": d, "GiB": hbm_gib} for d in DP_SIZES[::14]]
    styles = {names[s]: {"color": STAGE_COLOURS[s]} for s in formulas.ZERO_STAGES}
    styles[hbm_label] = {"color": HBM_COLOUR, "dash": vl.DASHED}
    x = vl.channel(
        "N_d",
        vl.title_of("data-parallel ranks N_d", "GPUs"),
        scale="log",
        base=2,
        format=",",
    )
    y = vl.channel(
        "GiB", vl.title_of("model state per GPU", "GiB"), scale="log", format=",~g"
    )
    tips = [vl.tip("N_d", "N_d", ","), vl.tip("GiB", "GiB per GPU")]
    markers = [
        vl.marker(
            {"N_d": n_dp, "GiB": gib(n_dp, s), "stage": names[s]},
            x,
            y,
            tooltip=[vl.tip("stage", "stage", nominal=True), *tips],
            shape="circle",
            color=STAGE_COLOURS[s],
            size=90,
        )
        for s in formulas.ZERO_STAGES
    ]
    fits = [s for s in formulas.ZERO_STAGES if gib(n_dp, s) <= hbm_gib]
    verdict = f"fits from stage {fits[0]}" if fits else "no stage fits"
    title = (
        f"{model} ({n / 1e9:.1f} B parameters), K = {k:g}, N_d = {n_dp:,}: "
        f"{verdict} in {hbm_gib:,.1f} GiB (activations come on top)"
    )
    return vl.chart(
        [vl.lines(rows, x, y, styles=styles, tooltip=tips), *markers], title=title
    )


def bubble_ranges(p: int, v: int, **_) -> dict:
    """Interleaving needs m to be a multiple of p (Megatron-LM's rule): with
    v > 1 the m slider steps in multiples of p."""
    if v > 1:
        return {"m": {"min": p, "max": M_MAX // p * p, "step": p}}
    return {"m": {"min": 1, "max": M_MAX, "step": 1}}


def micro_batch_grid(m: int) -> list[int]:
    """The m at which the curves are drawn: 1 to 256 in about 40 log steps,
    and ``m`` itself."""
    return sorted({round(2 ** (i / 6)) for i in range(49)} | {m})


def _bubble_label(p: int, v: int) -> str:
    return f"p={p}, v={v}"


@live.figure(
    live.select_slider("p", "pipeline stages p (devices)", BUBBLE_PS, 8),
    live.slider("m", "micro-batches per step m (count)", 32, 1, M_MAX, 1, on_grid=True),
    live.select_slider("v", "model chunks per device v (count)", BUBBLE_VS, 1),
    ranges=bubble_ranges,
)
def bubble_share(p: int, m: int, v: int) -> dict:
    """Idle share against micro-batches m: for the chosen p, one curve per v
    (the chosen one solid, the others dashed), grey curves for the other p at
    the chosen v, and the chosen m marked."""
    ms = micro_batch_grid(m)
    curves = [(p, vv) for vv in BUBBLE_VS] + [(q, v) for q in BUBBLE_PS if q != p]
    rows = [
        {
            "curve": _bubble_label(q, vv),
            "m": x,
            "idle": formulas.bubble_fraction(q, x, vv),
        }
        for q, vv in curves
        for x in ms
    ]
    styles = {}
    for i, vv in enumerate(BUBBLE_VS):
        dash = {} if vv == v else {"dash": vl.DASHED}
        styles[_bubble_label(p, vv)] = {"color": vl.C[i], **dash}
    for q in BUBBLE_PS:
        if q != p:
            styles[_bubble_label(q, v)] = {"color": OTHER_P}
    here = formulas.bubble_fraction(p, m, v)
    x = vl.channel(
        "m",
        vl.title_of("micro-batches per step m", "count"),
        scale="log",
        base=2,
        format=",",
    )
    y = vl.channel(
        "idle", vl.title_of("idle share of the step", "%"), domain=[0, 1], percent=True
    )
    tips = [vl.tip("m", "m", ","), vl.tip("idle", "idle", ".2%")]
    point = {"m": m, "idle": here, "label": _bubble_label(p, v)}
    return vl.chart(
        [
            vl.lines(rows, x, y, styles=styles, tooltip=tips),
            vl.marker(
                point,
                x,
                y,
                tooltip=[vl.tip("label", "curve", nominal=True), *tips],
                shape="circle",
                color="black",
                size=90,
            ),
        ],
        title=(f"Pipeline bubble (p-1)/(vm+p-1): p={p}, m={m}, v={v}: {here:.1%} idle"),
    )


# --- one pipeline step, device by device -------------------------------------------

SCHEDULE_PS = (1, 2, 3, 4, 6, 8)
SCHEDULE_VS = (1, 2, 4)
SCHEDULE_M_MAX = 32
SLOT_COLOURS = {"forward": "#9ecae1", "backward": "#2171b5", "idle": "#f4a582"}


def schedule_ranges(p: int, v: int, **_) -> dict:
    """With v > 1 chunks the interleaved schedule needs m to be a multiple
    of p (Megatron-LM's rule): the m slider steps in multiples of p."""
    if v > 1:
        return {"m": {"min": p, "max": SCHEDULE_M_MAX // p * p, "step": p}}
    return {"m": {"min": 1, "max": SCHEDULE_M_MAX, "step": 1}}


def idle_slots(timeline: pipeline.Timeline) -> list[tuple]:
    """Each device's idle spans in a step, (device, start, end), exact: the
    gaps between its operations and up to the step's end."""
    spans = []
    for d in range(timeline.p):
        at = 0
        for op in sorted(
            (o for o in timeline.ops if o.device == d), key=lambda o: o.start
        ):
            if op.start > at:
                spans.append((d, at, op.start))
            at = op.end
        if timeline.makespan > at:
            spans.append((d, at, timeline.makespan))
    return spans


@live.figure(
    live.select_slider("p", "pipeline stages p (devices)", SCHEDULE_PS, 4),
    live.slider(
        "m", "micro-batches per step m (count)", 8, 1, SCHEDULE_M_MAX, 1, on_grid=True
    ),
    live.select_slider("v", "model chunks per device v (count)", SCHEDULE_VS, 1),
    ranges=schedule_ranges,
)
def pipeline_schedule(p: int, m: int, v: int) -> dict:
    """One training step of a pipeline of p devices and m micro-batches: 1F1B
    for v = 1, Megatron-LM's interleaved 1F1B for v > 1 chunks per device.
    Each device's forwards (light), backwards (dark, twice as long) and idle
    time (shaded), simulated by ``pipeline.simulate``; the title gives the
    idle share, equation (p - 1) / (v m + p - 1)."""
    schedule = "1f1b" if v == 1 else "interleaved"
    tl = pipeline.simulate(schedule, p, m, v)
    label = "abcd"
    rows = [
        {
            "device": op.device,
            "lo": op.device - 0.4,
            "hi": op.device + 0.4,
            "start": float(op.start),
            "end": float(op.end),
            "slot": "forward" if op.kind == "F" else "backward",
            "micro": f"{op.micro + 1}" + (label[op.chunk] if v > 1 else ""),
        }
        for op in tl.ops
    ]
    rows += [
        {
            "device": d,
            "lo": d - 0.4,
            "hi": d + 0.4,
            "start": float(a),
            "end": float(b),
            "slot": "idle",
            "micro": "-",
        }
        for d, a, b in idle_slots(tl)
    ]
    x = {
        "field": "start",
        "type": "quantitative",
        "title": vl.title_of("time", "forward passes of one micro-batch on one device"),
        "scale": {"domain": [0, float(tl.makespan)], "nice": False},
        "axis": {"format": "~g"},
    }
    y = {
        "field": "lo",
        "type": "quantitative",
        "title": vl.title_of("pipeline device", "rank"),
        "scale": {"domain": [-0.5, p - 0.5], "reverse": True, "nice": False},
        "axis": {"values": list(range(p)), "format": "d", "grid": False},
    }
    colour = {
        "field": "slot",
        "type": "nominal",
        "scale": {"domain": list(SLOT_COLOURS), "range": list(SLOT_COLOURS.values())},
        "legend": {"title": None, "orient": "top"},
    }
    bars = {
        "data": {"values": rows},
        "mark": {"type": "rect", "stroke": "white", "strokeWidth": 0.5},
        "encoding": {
            "x": x,
            "x2": {"field": "end"},
            "y": y,
            "y2": {"field": "hi"},
            "color": colour,
            "tooltip": [
                vl.tip("device", "device", "d"),
                vl.tip("slot", "what", nominal=True),
                vl.tip("micro", "micro-batch", nominal=True),
                vl.tip("start", "from"),
                vl.tip("end", "to"),
            ],
        },
    }
    layers = [bars]
    if len(tl.ops) <= 96:  # the micro-batch in each box, while they are wide enough
        layers.append(
            {
                "data": {"values": [r for r in rows if r["slot"] != "idle"]},
                "transform": [
                    {"calculate": "(datum.start + datum.end) / 2", "as": "mid"}
                ],
                "mark": {"type": "text", "fontSize": 8, "color": "black"},
                "encoding": {
                    "x": {**x, "field": "mid"},
                    "y": {**y, "field": "device"},
                    "text": {"field": "micro"},
                },
            }
        )
    name = "1F1B" if v == 1 else f"interleaved 1F1B, v={v}"
    bubble = formulas.bubble_fraction(p, m, v)
    return vl.chart(
        layers,
        title=(
            f"{name}: p={p}, m={m}: idle {bubble:.1%} of the step, "
            f"(p-1)/(vm+p-1) = {p - 1}/{v * m + p - 1}"
        ),
        height=max(60, 34 * p),
    )
