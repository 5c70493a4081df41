"""Figures of the MFU chapter."""

from __future__ import annotations

import numpy as np

from mlbook.common import transformer as config
from mlbook.mfu import flops
from mlbook.common import accelerators as hardware
from mlbook.mfu import formulas as mfu
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis

GOOD_MFU = (0.35, 0.50)  # "good at scale" band for BF16 MFU (BRIEF, PaLM and Llama 3 reports)


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


def mfu_calculator(model: str, tokens_per_s: float, seq_len: int, gpu: str, n_gpus: int):
    """MFU against job throughput for one model and cluster, current point marked."""
    cfg = config.PRESETS[model]
    peak = hardware.peak_flops_per_s(gpu, "bf16")
    per_token = flops.flops_per_token(cfg, seq_len)
    max_tokens = n_gpus * peak / per_token               # the throughput at 100 % MFU
    fig, ax = new_figure()
    xs = np.linspace(0, max_tokens, 200)
    ax.plot(xs, xs / max_tokens, color="C0")
    ax.axhspan(*GOOD_MFU, color="C2", alpha=0.15, label="35-50 %: good at scale")
    if tokens_per_s <= max_tokens:
        u = mfu.mfu(tokens_per_s, cfg, seq_len, peak, n_gpus)
        ax.plot([tokens_per_s], [u], "o", color="C3", ms=9)
        ax.set_title(f"{cfg.name} on {n_gpus} x {gpu}, s={seq_len}: MFU {u:.1%}")
    else:
        ax.set_title(f"{tokens_per_s:,.0f} tokens/s is above 100 % MFU "
                     f"({max_tokens:,.0f} tokens/s): check the peak or the FLOPs", color="C3")
    ax.set_xlabel("job throughput (tokens/s)")
    ax.set_ylabel("MFU")
    percent_axis(ax)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    return fig


def training_days_planner(model: str, tokens_trillions: float, gpu: str, n_gpus: int, mfu_value: float):
    """Days to train against GPU count at a fixed MFU, chosen cluster marked."""
    cfg = config.PRESETS[model]
    n = flops.n_params(cfg)
    peak = hardware.peak_flops_per_s(gpu, "bf16")
    tokens = tokens_trillions * 1e12
    gpus = np.unique(np.logspace(6, 15, 60, base=2).astype(int))
    days = [mfu.training_days(n, tokens, peak, int(g), mfu_value) for g in gpus]
    chosen = mfu.training_days(n, tokens, peak, n_gpus, mfu_value)
    fig, ax = new_figure()
    ax.plot(gpus, days, color="C0")
    ax.plot([n_gpus], [chosen], "o", color="C3", ms=9)
    plain_log_axis(ax, "x", base=2)
    plain_log_axis(ax, "y")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days to train (6ND)")
    ax.set_title(f"{cfg.name}, {tokens_trillions:g}T tokens, {gpu} at {mfu_value:.0%} MFU: "
                 f"{chosen:,.1f} days on {n_gpus:,}")
    return fig


def published_mfu():
    """Published MFUs (PaLM Table 3, Llama 3 Table 4) as bars."""
    runs = mfu.PUBLISHED_MFU
    fig, ax = new_figure(size=(7.0, 3.2), layout="constrained")
    labels = [f"{r.model}\n" + (f"{r.n_chips} x {r.hardware}" if r.n_chips else f"{r.hardware} (count not given)")
              for r in runs]
    ax.barh(labels, [r.mfu for r in runs], color="C0", label="reported MFU")
    ax.axvspan(*GOOD_MFU, color="C2", alpha=0.15, label="35-50 %: good at scale")
    ax.legend(loc="lower right", fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("model FLOPs utilisation")
    percent_axis(ax, "x")
    return fig
