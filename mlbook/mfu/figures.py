"""Figures of the MFU chapter."""

from __future__ import annotations

import numpy as np

from mlbook.common import transformer as config
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu
from mlbook.mfu.live import GOOD_LABEL, GOOD_MFU
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis

# The chapter's slider figures are live figures: mlbook/mfu/live.py.


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
    ax.set_title("12Lhs / (6N_matmul + 12Lhs): wider models feel long context later")
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
    ax.axvspan(*GOOD_MFU, color="C2", alpha=0.15, label=GOOD_LABEL)
    ax.legend(loc="lower right", fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("model FLOPs utilisation")
    percent_axis(ax, "x")
    return fig
