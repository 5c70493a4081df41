"""Figures of the MFU chapter."""

from __future__ import annotations

import numpy as np

from mlbook.common import accelerators as hardware
from mlbook.common import transformer as config
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis

# "Good at scale" for BF16 MFU: the range of the large runs in PUBLISHED_MFU
# since PaLM (MT-NLG 30 %, Llama 3 38-43 %, PaLM 46 %), as the BRIEF states it.
GOOD_MFU = (0.35, 0.50)


def attention_share_vs_seq_len(presets=None, seq_lens=None):
    """Share of training FLOPs in the attention term 12Lhs against s."""
    presets = presets or [config.LLAMA2_7B, config.LLAMA3_70B, config.LLAMA3_405B]
    seq_lens = seq_lens if seq_lens is not None else 2 ** np.arange(9, 18)
    fig, ax = new_figure(layout="constrained")
    for cfg in presets:
        share = [flops.attention_share(cfg, int(s)) for s in seq_lens]
        ax.plot(seq_lens, share, marker="o", label=f"{cfg.name} (h={cfg.d_model})")
    plain_log_axis(ax, "x", base=2)
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("attention share of FLOPs")
    percent_axis(ax)
    ax.legend()
    ax.set_title("12Lhs / (6N + 12Lhs): wider models feel long context later")
    return fig


def sixteen_bit_peak(gpu: str) -> float:
    """The GPU's dense bf16 peak, or its fp16 peak where it has no bf16 (V100)."""
    row = hardware.accelerator(gpu)
    return row.peak("bf16" if "bf16" in row.peak_flops_per_s else "fp16")


def calculator_ranges(model: str, seq_len: int, gpu: str, n_gpus: int, **_) -> dict:
    """The tokens/s slider's range for the current choice: from 0.1 % to 100 % MFU,
    in steps of 0.1 % (for ``live_figure(..., ranges=calculator_ranges)``)."""
    top = mfu.max_tokens_per_s(
        config.PRESETS[model], seq_len, sixteen_bit_peak(gpu), n_gpus
    )
    return {"tokens_per_s": {"min": top / 1000, "max": top, "step": top / 1000}}


def mfu_calculator(
    model: str, tokens_per_s: float, seq_len: int, gpu: str, n_gpus: int
):
    """MFU against job throughput for one model and cluster, current point marked."""
    cfg = config.PRESETS[model]
    peak = sixteen_bit_peak(gpu)
    max_tokens = mfu.max_tokens_per_s(
        cfg, seq_len, peak, n_gpus
    )  # the throughput at 100 % MFU
    fig, ax = new_figure()
    xs = np.linspace(0, max_tokens, 200)
    ax.plot(xs, xs / max_tokens, color="C0")
    ax.axhspan(*GOOD_MFU, color="C2", alpha=0.15, label="35-50 %: good at scale")
    if tokens_per_s <= max_tokens:
        u = mfu.mfu(tokens_per_s, cfg, seq_len, peak, n_gpus)
        ax.plot([tokens_per_s], [u], "o", color="C3", ms=9)
        ax.set_title(f"{cfg.name} on {n_gpus:,} x {gpu}, s={seq_len:,}: MFU {u:.1%}")
    else:
        ax.set_title(
            f"{tokens_per_s:,.0f} tokens/s is above 100 % MFU "
            f"({max_tokens:,.0f} tokens/s): check the peak or the FLOPs",
            color="C3",
        )
    ax.set_xlabel("job throughput (tokens/s)")
    ax.set_ylabel("MFU")
    percent_axis(ax)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    return fig


def training_days_planner(
    model: str,
    tokens_trillions: float,
    seq_len: int,
    gpu: str,
    n_gpus: int,
    mfu_value: float,
):
    """Days to train against GPU count at a fixed MFU, chosen cluster marked:
    (6N + 12Lhs) D at the sequence length, and 6ND (MFU without attention) beside it."""
    cfg = config.PRESETS[model]
    n = flops.n_params(cfg)
    attn = 3 * flops.attention_flops_per_token(cfg, seq_len)  # 12 L h s per token
    peak = sixteen_bit_peak(gpu)
    tokens = tokens_trillions * 1e12
    gpus = np.unique(np.logspace(6, 15, 60, base=2).astype(int))
    days_6n = np.array(
        [mfu.training_days(n, tokens, peak, int(g), mfu_value) for g in gpus]
    )
    days_attn = np.array(
        [
            mfu.training_days(
                n, tokens, peak, int(g), mfu_value, attention_flops_per_token=attn
            )
            for g in gpus
        ]
    )
    chosen_6n = mfu.training_days(n, tokens, peak, n_gpus, mfu_value)
    chosen = mfu.training_days(
        n, tokens, peak, n_gpus, mfu_value, attention_flops_per_token=attn
    )
    fig, ax = new_figure()
    ax.plot(gpus, days_attn, color="C0", label=f"(6N + 12Lhs)D, s={seq_len:,}")
    ax.plot(
        gpus,
        days_6n,
        color="C0",
        ls="--",
        alpha=0.7,
        label="6ND (MFU without attention)",
    )
    ax.plot([n_gpus], [chosen], "o", color="C3", ms=9)
    plain_log_axis(ax, "x", base=2)
    plain_log_axis(ax, "y")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days to train")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(
        f"{cfg.name}, {tokens_trillions:g}T tokens, {gpu} at {mfu_value:.0%} MFU: "
        f"{chosen:,.1f} days on {n_gpus:,} ({chosen_6n:,.1f} by 6ND)",
        fontsize=9,
    )
    return fig


def published_mfu():
    """Published MFUs (PaLM Table 3, Llama 3 Table 4) as bars."""
    runs = mfu.PUBLISHED_MFU
    fig, ax = new_figure(size=(7.0, 3.2), layout="constrained")
    labels = [
        f"{r.model}\n"
        + (
            f"{r.n_chips} x {r.hardware}"
            if r.n_chips
            else f"{r.hardware} (count not given)"
        )
        for r in runs
    ]
    ax.barh(labels, [r.mfu for r in runs], color="C0", label="reported MFU")
    ax.axvspan(*GOOD_MFU, color="C2", alpha=0.15, label="35-50 %: good at scale")
    ax.legend(loc="lower right", fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("model FLOPs utilisation")
    percent_axis(ax, "x")
    return fig
