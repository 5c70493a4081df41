"""The MFU chapter's live figures (mlbook.common.live): an MFU calculator
whose throughput control ends at 100 % MFU, and a planner of days to train
against the GPU count. Standard library and mlbook's torch-free modules
only: the HTML book runs them in the reader's browser."""

from __future__ import annotations

import math

from mlbook.common import accelerators as hardware
from mlbook.common import live
from mlbook.common import transformer as config
from mlbook.common import vegalite as vl
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu

# "Good at scale" for BF16 MFU: the range of the large runs in PUBLISHED_MFU
# since PaLM (MT-NLG 30 %, Llama 3 38-43 %, PaLM 46 %), as the BRIEF states it.
GOOD_MFU = (0.35, 0.50)
GOOD_LABEL = "35-50 %: good at scale"
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
    point marked; the 35-50 % band of large runs shaded."""
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
