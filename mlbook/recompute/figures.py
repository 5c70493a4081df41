"""Figures of the activation-recompute chapter."""

from __future__ import annotations

import numpy as np

from mlbook.common.units import GIB, MIB
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis
from mlbook.recompute import formulas as recompute

COLORS = {"none": "C0", "selective": "C1", "sqrt": "C2", "full": "C3"}
LABELS = {
    "none": "none",
    "selective": "selective",
    "sqrt": "sqrt(L) segments",
    "full": "full",
}


def memory_vs_seq_len(
    h: int, a: int, L: int, b: int = 1, seq_lens=None, name: str = ""
):
    """Memory of the four strategies against s, with the sequence length where
    selective and sqrt(L) cross marked."""
    seq_lens = seq_lens if seq_lens is not None else 2 ** np.arange(9, 16)
    fig, ax = new_figure()
    for strategy in recompute.STRATEGIES:
        mem = [
            recompute.checkpoint_plans(int(s), b, h, a, L)[strategy].memory_bytes / GIB
            for s in seq_lens
        ]
        ax.plot(
            seq_lens,
            mem,
            marker="o",
            ms=4,
            color=COLORS[strategy],
            label=LABELS[strategy],
        )
    cross = recompute.selective_sqrt_crossover_seq_len(h, a, L)
    if cross > 0:
        ax.axvline(
            cross, color="0.4", ls=":", label=f"selective = sqrt(L) at s = {cross:,.0f}"
        )
    plain_log_axis(ax, "x", base=2)
    plain_log_axis(ax, "y")
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("activation memory (GiB)")
    ax.set_title(
        f"{name} (h={h}, a={a}, L={L}, b={b}), 16-bit activations".strip(), fontsize=10
    )
    ax.legend(fontsize=8)
    return fig


def measured_strategies(res, device_name: str):
    """Measured activation memory, step time and counted FLOPs of the small
    GPT under each strategy (a MeasuredStrategies), relative to no recompute."""
    results = res.strategies
    names = [k for k in ("none", "selective", "full") if k in results]
    base = results["none"]
    fig, (mem_ax, rel_ax) = new_figure(2, size=(9.0, 3.6), layout="constrained")
    x = np.arange(len(names))
    kept = [results[k].kept_bytes / MIB for k in names]
    peak = [results[k].peak_bytes / MIB for k in names]
    mem_ax.bar(x - 0.2, kept, 0.4, label="kept after forward", color="C0")
    mem_ax.bar(x + 0.2, peak, 0.4, label="peak during the step", color="C1")
    mem_ax.set_xticks(x, names)
    mem_ax.set_ylabel("tensor memory beyond weights (MiB)")
    time_ratio = [results[k].best_s / base.best_s for k in names]
    flop_ratio = [results[k].flops / base.flops for k in names]
    rel_ax.bar(x - 0.2, time_ratio, 0.4, label="step time (fastest)", color="C2")
    rel_ax.bar(x + 0.2, flop_ratio, 0.4, label="counted FLOPs", color="C3")
    rel_ax.axhline(4 / 3, color="0.3", ls="--", lw=1, label="4/3")
    rel_ax.set_xticks(x, names)
    rel_ax.set_ylabel("relative to no recompute")
    # One legend row in headroom above the tallest bar, so it covers no bar.
    for ax, top, ncol in (
        (mem_ax, max(kept + peak), 2),
        (rel_ax, max(time_ratio + flop_ratio + [4 / 3]), 3),
    ):
        ax.set_ylim(0, top * 1.3)
        ax.legend(fontsize=8, loc="upper center", ncol=ncol, frameon=False)
    fig.suptitle(f"small GPT measured on {device_name}", fontsize=10)
    return fig


def selective_overhead_vs_seq_len(
    widths=(1024, 4096, 8192), target: float = 0.10, seq_lens=None
):
    """Selective recompute's extra FLOPs against s for a few widths (d_ff = 4h),
    with ``target`` and the crossing for each width marked."""
    seq_lens = seq_lens if seq_lens is not None else 2 ** np.arange(8, 18.01, 0.25)
    fig, ax = new_figure()
    for i, h in enumerate(widths):
        frac = [recompute.selective_extra_flops_fraction(int(s), h) for s in seq_lens]
        ax.plot(seq_lens, frac, color=f"C{i}", label=f"h = {h}")
        s_star = recompute.seq_len_for_selective_overhead(h, target)
        ax.plot([s_star], [target], "o", color=f"C{i}")
    ax.axhline(target, color="0.4", ls=":")
    ax.axhline(1 / 3, color="C3", ls="--", lw=1, label="full recompute (1/3)")
    plain_log_axis(ax, "x", base=2)
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("selective's extra FLOPs")
    percent_axis(ax)
    ax.legend(fontsize=8)
    return fig
