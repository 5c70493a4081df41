"""The MFU chapter's live figures (mlbook.common.live): the roofline with a
model's operators on it, an MFU calculator whose throughput control ends at
100 % MFU, and a planner of days to train against the GPU count. Standard
library and mlbook's torch-free modules only: the HTML book runs them in the
reader's browser."""

from __future__ import annotations

import math

from mlbook.common import accelerators as hardware
from mlbook.common import live, validate
from mlbook.common import transformer as config
from mlbook.common import vegalite as vl
from mlbook.mfu import flops, roofline
from mlbook.mfu import formulas as mfu

GOOD_MFU = mfu.GOOD_MFU  # the band of large runs, shaded
GOOD_LABEL = f"{GOOD_MFU[0] * 100:.0f}-{GOOD_MFU[1] * 100:.0f} %: good at scale"
SEQ_LENS = (2048, 4096, 8192, 32768, 131072)
MODELS = tuple(config.PRESETS)
GPUS = tuple(hardware.ACCELERATORS)


def sixteen_bit_peak(gpu: str) -> float:
    """The GPU's dense bf16 peak, or its fp16 peak where it has no bf16 (V100)."""
    row = hardware.accelerator(gpu)
    return row.peak("bf16" if "bf16" in row.peak_flops_per_s else "fp16")


def _round_step(x: float) -> float:
    """The largest 1, 2 or 5 times a power of ten at or below ``x``: a step a
    reader reads (5,000 tokens/s, not 6,171.868759)."""
    power = 10.0 ** math.floor(math.log10(x))
    lead = max(d for d in (1, 2, 5) if d * power <= x * (1 + 1e-12))
    return float(f"{lead * power:.1g}")


def calculator_ranges(model: str, seq_len: int, gpu: str, n_gpus: int, **_) -> dict:
    """The tokens/s control's range for the current choice: up to 100 % MFU
    (more is impossible), dragged in round steps of about 0.1 % of it (1, 2
    or 5 times a power of ten), from one step. A typed value in the range is
    kept as typed."""
    top = mfu.max_tokens_per_s(
        config.PRESETS[model], seq_len, sixteen_bit_peak(gpu), n_gpus
    )
    step = _round_step(top / 1000)
    return {"tokens_per_s": {"min": step, "max": top, "step": step}}


@live.figure(
    live.dropdown("model", "model", MODELS, "Llama-3-405B"),
    live.slider("tokens_per_s", "tokens/s (whole job)", 2.4e6, 1e3, 1e7, 1e3),
    live.dropdown("seq_len", "sequence length s (tokens)", SEQ_LENS, 8192),
    live.dropdown("gpu", "GPU", GPUS, "H100 SXM"),
    live.number("n_gpus", "GPUs", 16384, 1, 1_000_000),
    ranges=calculator_ranges,
)
def mfu_calculator(
    model: str, tokens_per_s: float, seq_len: int, gpu: str, n_gpus: int
) -> dict:
    """MFU against job throughput for one model and cluster, the current
    point marked; the band of large runs (GOOD_MFU) shaded."""
    cfg = config.PRESETS[model]
    peak = sixteen_bit_peak(gpu)
    top = mfu.max_tokens_per_s(cfg, seq_len, peak, n_gpus)  # tokens/s at 100 % MFU
    rows = [
        {"curve": "MFU", "tokens_per_s": t, "MFU": t / top}
        for t in vl.linspace(0.0, top, 41)
    ]
    x = vl.channel(
        "tokens_per_s", vl.title_of("job throughput", "tokens/s"), format="~s"
    )
    y = vl.channel("MFU", vl.title_of("MFU", "% of peak"), domain=[0, 1], percent=True)
    layers = [
        *vl.hband(*GOOD_MFU, y, label=GOOD_LABEL),
        vl.lines(
            rows,
            x,
            y,
            styles={"MFU": {"color": vl.C[0]}},
            tooltip=[vl.tip("tokens_per_s", "tokens/s"), vl.tip("MFU", "MFU", ".2%")],
            legend=None,
        ),
    ]
    if tokens_per_s <= top:
        u = mfu.mfu(tokens_per_s, cfg, seq_len, peak, n_gpus)
        point = {
            "tokens_per_s": tokens_per_s,
            "MFU": u,
            "per_gpu": tokens_per_s / n_gpus,
        }
        tooltip = [
            vl.tip("tokens_per_s", "tokens/s (job)"),
            vl.tip("per_gpu", "tokens/s per GPU"),
            vl.tip("MFU", "MFU", ".2%"),
        ]
        layers.append(
            vl.marker(
                point, x, y, tooltip=tooltip, shape="circle", color=vl.C[3], size=120
            )
        )
        return vl.chart(
            layers,
            title=f"{cfg.name} on {n_gpus:,} x {gpu}, s={seq_len:,}: MFU {u:.1%}",
        )
    return vl.chart(
        layers,
        title=(
            f"{tokens_per_s:,.0f} tokens/s is above 100 % MFU "
            f"({top:,.0f} tokens/s): check the peak or the FLOPs"
        ),
        title_color=vl.C[3],
    )


def _gpu_grid(n_gpus: int) -> list[int]:
    """64 to 32,768 GPUs in 60 log steps, widened to take in ``n_gpus``."""
    lo, hi = math.log2(min(64, n_gpus)), math.log2(max(32768, n_gpus))
    return sorted({max(1, int(2**e)) for e in vl.linspace(lo, hi, 60)} | {n_gpus})


SIX_ND = "6ND, N = all parameters (MFU without attention)"


@live.figure(
    live.dropdown("model", "model", MODELS, "Llama-3-70B"),
    live.slider("tokens_trillions", "tokens D (trillions)", 15, 0.5, 30, 0.5),
    live.dropdown("seq_len", "sequence length s (tokens)", SEQ_LENS, 8192),
    live.dropdown("gpu", "GPU", GPUS, "H100 SXM"),
    live.number("n_gpus", "GPUs", 4096, 1, 1_000_000),
    live.slider("mfu_value", "MFU (fraction of peak)", 0.4, 0.05, 0.8, 0.01),
)
def training_days_planner(
    model: str,
    tokens_trillions: float,
    seq_len: int,
    gpu: str,
    n_gpus: int,
    mfu_value: float,
) -> dict:
    """Days to train against GPU count at a fixed MFU, the chosen cluster
    marked: (6 N_matmul + 12Lhs) D at the sequence length, the MFU equation's
    count, and beside it the rule of thumb 6ND (MFU counted without
    attention) with N = all the preset's parameters."""
    cfg = config.PRESETS[model]
    n_all, n_mm = flops.n_params(cfg), flops.matmul_params(cfg)
    attn = 3 * flops.attention_flops_per_token(cfg, seq_len)  # 12 L h s per token
    peak = sixteen_bit_peak(gpu)
    tokens = tokens_trillions * 1e12
    with_attention = f"(6N_matmul + 12Lhs)D, s={seq_len:,}"

    def days(g: int, n: float, attention: float) -> float:
        return mfu.training_days(n, tokens, peak, g, mfu_value, attention)

    rows = [
        {"curve": curve, "GPUs": g, "days": days(g, n, a)}
        for curve, n, a in ((with_attention, n_mm, attn), (SIX_ND, n_all, 0.0))
        for g in _gpu_grid(n_gpus)
    ]
    chosen, chosen_6n = days(n_gpus, n_mm, attn), days(n_gpus, n_all, 0.0)
    x = vl.channel(
        "GPUs", vl.title_of("GPUs", "count"), scale="log", base=2, format=","
    )
    y = vl.channel(
        "days", vl.title_of("days to train", "days"), scale="log", format=",~g"
    )
    styles = {
        with_attention: {"color": vl.C[0]},
        SIX_ND: {"color": vl.C[0], "dash": vl.DASHED},
    }
    point = {"GPUs": n_gpus, "days": chosen, "days_6nd": chosen_6n}
    title = (
        f"{cfg.name}, {tokens_trillions:g}T tokens, {gpu} at {mfu_value:.0%} MFU: "
        f"{chosen:,.1f} days on {n_gpus:,} ({chosen_6n:,.1f} by 6ND)"
    )
    return vl.chart(
        [
            vl.lines(
                rows,
                x,
                y,
                styles=styles,
                tooltip=[vl.tip("GPUs", "GPUs", ","), vl.tip("days", "days")],
            ),
            vl.marker(
                point,
                x,
                y,
                tooltip=[
                    vl.tip("GPUs", "GPUs", ","),
                    vl.tip("days", "days, (6N_matmul + 12Lhs)D"),
                    vl.tip("days_6nd", "days, 6ND (N all parameters)"),
                ],
                shape="circle",
                color=vl.C[3],
                size=120,
            ),
        ],
        title=title,
    )


# --- the roofline --------------------------------------------------------------------

ROOF_GPUS = ("H100 SXM", "A100 SXM")  # drawn from the table, in bf16
ROOF_DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
INTENSITY_RANGE = (0.01, 10_000.0)  # FLOPs a byte, the x axis
# The elementwise operators placed on the roofline, FLOPs an element and the
# tensors read or written (mlbook.mfu.roofline): an add, and AdamW's update.
ADD = "add (1 FLOP, 3 values)"
ADAMW = "AdamW update (14 FLOPs, 7 values)"
PROJECTION = "h x h matmul (Q, K, V, O)"
MLP_MATMUL = "h x 4h matmul (MLP)"
MEASURED = "measured here (the step's own matmuls)"


def roofline_data(
    name: str,
    dtype: str,
    ceiling_flops_per_s: float,
    bytes_per_s: float,
    measured=(),
    tokens: int | None = None,
    d_model: int | None = None,
) -> dict:
    """The figure's fixed data: this machine's roofline (its measured matmul
    ceiling, in ``dtype``, and its measured bandwidth) and ``measured``,
    (m, n, k, FLOP/s) of the step's own matmuls, which belong to the model
    of ``tokens`` tokens a matmul and width ``d_model``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must name the machine, got {name!r}")
    live_dtype = validate.one_of("dtype", dtype, tuple(ROOF_DTYPE_BYTES))
    roofline.ridge_point(ceiling_flops_per_s, bytes_per_s)  # checks both
    rows = []
    for i, row in enumerate(measured):
        if len(row) != 4:
            raise ValueError(f"measured[{i}] must be (m, n, k, FLOP/s), got {row!r}")
        m, n, k, rate = row
        roofline.matmul_flops(m, n, k)
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "flops_per_s": validate.positive(f"measured[{i}] FLOP/s", rate),
            }
        )
    if rows and (tokens is None or d_model is None):
        raise ValueError("measured matmuls need the tokens and d_model they ran at")
    return {
        "name": name,
        "dtype": live_dtype,
        "ceiling_flops_per_s": float(ceiling_flops_per_s),
        "bytes_per_s": float(bytes_per_s),
        "measured": rows,
        "tokens": tokens,
        "d_model": d_model,
    }


def _roof(label, peak, bw, dtype) -> dict:
    return {"label": label, "peak": peak, "bw": bw, "dtype": dtype}


@live.figure(
    live.slider("tokens", "tokens a matmul T (b x s)", 2048, 1, 65536, 2, "log"),
    live.slider("d_model", "model width h", 256, 64, 16384, 2, "log"),
)
def roofline_explorer(tokens: int, d_model: int, machine: dict | None = None) -> dict:
    """Attainable FLOP/s against arithmetic intensity, log-log: the rooflines
    of an H100 SXM and an A100 SXM in bf16 from the table and, where
    ``machine`` (``roofline_data``) is given, this machine's from its
    measurements; on each, a weight matmul of T tokens through h x h and
    h x 4h weights, an add and AdamW's update, in that roofline's dtype; and
    this machine's measured matmuls where T and h are the ones they ran at."""
    tokens, d_model = int(tokens), int(d_model)
    roofs = []
    if machine:
        roofs.append(
            _roof(
                f"this machine, {machine['dtype']} ({machine['name']})",
                machine["ceiling_flops_per_s"],
                machine["bytes_per_s"],
                machine["dtype"],
            )
        )
    for gpu in ROOF_GPUS:
        row = hardware.accelerator(gpu)
        roofs.append(
            _roof(f"{gpu}, bf16", row.peak("bf16"), row.hbm_bytes_per_s, "bf16")
        )
    colours = {r["label"]: vl.C[i] for i, r in enumerate(roofs)}
    lo, hi = INTENSITY_RANGE
    lines, points = [], []
    for r in roofs:
        ridge = roofline.ridge_point(r["peak"], r["bw"])
        grid = sorted(
            set(vl.geomspace(lo, hi, 40)) | ({ridge} if lo < ridge < hi else set())
        )
        lines += [
            {
                "curve": r["label"],
                "intensity": i,
                "flops_per_s": roofline.attainable_flops_per_s(i, r["peak"], r["bw"]),
            }
            for i in grid
        ]
        e = ROOF_DTYPE_BYTES[r["dtype"]]
        placed = {
            PROJECTION: roofline.matmul_intensity(tokens, d_model, d_model, e),
            MLP_MATMUL: roofline.matmul_intensity(tokens, 4 * d_model, d_model, e),
            ADD: roofline.elementwise_intensity(1, 3, e),
            ADAMW: roofline.adamw_intensity(e),
        }
        points += [
            {
                "curve": r["label"],
                "operator": op,
                "intensity": i,
                "ridge": ridge,
                "flops_per_s": roofline.attainable_flops_per_s(i, r["peak"], r["bw"]),
            }
            for op, i in placed.items()
        ]
    x = vl.channel(
        "intensity",
        vl.title_of("arithmetic intensity", "FLOPs/byte"),
        scale="log",
        domain=list(INTENSITY_RANGE),
        nice=False,
    )
    y = vl.channel(
        "flops_per_s",
        vl.title_of("attainable rate", "FLOP/s"),
        scale="log",
        format="~s",
    )
    curves = vl.lines(
        lines,
        x,
        y,
        styles={k: {"color": c} for k, c in colours.items()},
        tooltip=[vl.tip("intensity", "FLOPs/byte"), vl.tip("flops_per_s", "FLOP/s")],
    )
    shapes = [PROJECTION, MLP_MATMUL, ADD, ADAMW]
    placed_layer = {
        "data": {"values": points},
        "mark": {"type": "point", "filled": True, "size": 70, "clip": True},
        "encoding": {
            "x": x,
            "y": y,
            "color": curves["encoding"]["color"],
            "shape": {
                "field": "operator",
                "type": "nominal",
                "scale": {
                    "domain": shapes,
                    "range": ["circle", "square", "triangle-up", "diamond"],
                },
                "legend": {"title": None, "orient": "bottom", "columns": 2},
            },
            "tooltip": [
                vl.tip("operator", "operator", nominal=True),
                vl.tip("curve", "roofline", nominal=True),
                vl.tip("intensity", "FLOPs/byte"),
                vl.tip("flops_per_s", "attainable FLOP/s"),
                vl.tip("ridge", "ridge point (FLOPs/byte)"),
            ],
        },
    }
    layers = [curves, placed_layer]
    note = ""
    if machine and machine.get("measured"):
        here = (machine["tokens"], machine["d_model"])
        if (tokens, d_model) == tuple(here):
            e = ROOF_DTYPE_BYTES[machine["dtype"]]
            dots = [
                {
                    "operator": MEASURED,
                    "shape": f"{d['m']} x {d['n']} x {d['k']}",
                    "intensity": roofline.matmul_intensity(d["m"], d["n"], d["k"], e),
                    "flops_per_s": d["flops_per_s"],
                }
                for d in machine["measured"]
            ]
            layers.append(
                vl.points(
                    dots,
                    x,
                    y,
                    color="black",
                    shape="cross",
                    size=60,
                    tooltip=[
                        vl.tip("operator", "", nominal=True),
                        vl.tip("shape", "m x n x k", nominal=True),
                        vl.tip("intensity", "FLOPs/byte"),
                        vl.tip("flops_per_s", "measured FLOP/s"),
                    ],
                )
            )
            note = "black crosses: the step's own matmuls as measured here"
        else:
            note = f"measured matmuls shown at T = {here[0]:,}, h = {here[1]:,} only"
    ridges = ", ".join(
        f"{r['label'].split(',')[0]} {roofline.ridge_point(r['peak'], r['bw']):,.0f}"
        for r in roofs
    )
    spec = vl.chart(
        layers,
        title=f"T = {tokens:,} tokens, h = {d_model:,}; ridge points (FLOPs/byte): "
        f"{ridges}",
    )
    if note:
        spec["title"]["subtitle"] = note
        spec["title"]["subtitleColor"] = "#555555"
    return spec
