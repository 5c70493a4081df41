"""Figures of the activation-recompute chapter: a block with what it keeps for
backward under each strategy, memory against sequence length, the measured
strategies, selective's overhead, and a diagnosis exercise's memory trace."""

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


# The operation of a block whose backward reads each saved item, in the
# forward's order (block_saved_items' names; GELU and SwiGLU MLPs).
SAVED_BY = {
    "norm 1 input": "LayerNorm 1",
    "QKV matmul input": "Q, K, V projections",
    "Q and K (for Q K^T)": "scores Q K^T",
    "softmax output": "softmax",
    "softmax dropout mask": "dropout",
    "dropped-out probabilities (for P V)": "P V",
    "V (for P V)": "P V",
    "output projection input": "output projection",
    "attention dropout mask": "dropout",
    "norm 2 input": "LayerNorm 2",
    "MLP input": "MLP up",
    "GELU input": "GELU",
    "MLP second matmul input": "MLP down",
    "gate output (SiLU input)": "SiLU",
    "SiLU output": "SiLU(gate) x up",
    "up output": "SiLU(gate) x up",
    "down matmul input": "MLP down",
    "MLP dropout mask": "dropout",
}
MODES = ("none", "selective", "full")


def block_saved(s: int, b: int, h: int, a: int, **knobs):
    """One transformer layer as the list of what its backward reads, in
    forward order: the operation, the tensor and its bytes (a multiple of sbh
    or a s^2 b), and for each strategy (none, selective, full) a bar as long
    as its bytes, filled where the strategy keeps it and hatched where it
    recomputes it; each column's total per layer in GiB below
    (recompute.kept_items, which sum to recompute.layer_bytes). ``knobs``
    are block_saved_items' (storage sizes, dropout, MLP). Each bar's gid is
    "mode|item|kept" or "mode|item|recomputed"."""
    items = recompute.block_saved_items(s, b, h, a, **knobs)
    unit = recompute.block_saved_items(1, 1, 1, 1, **knobs)
    rows = [k for k, v in items.items() if v]
    kept = {m: recompute.kept_items(items, m) for m in MODES}
    fig, ax = new_figure(size=(8.4, 0.34 * len(rows) + 1.4), layout="constrained")
    ax.grid(False)
    left = {m: 5.4 + 1.3 * j for j, m in enumerate(MODES)}
    biggest = max(items.values())
    for i, item in enumerate(rows):
        y = -i
        term = "a s²b" if item in recompute.SCORE_ITEMS else "sbh"
        op = SAVED_BY.get(item, "")
        if item == "MLP input" and knobs.get("mlp") == "swiglu":
            op = "gate and up projections"
        ax.text(0.0, y, op, va="center", fontsize=8.5)
        ax.text(1.75, y, f"{item}: {unit[item]:g} {term}", va="center", fontsize=8.5)
        for j, m in enumerate(MODES):
            keep = item in kept[m]
            ax.barh(
                y,
                1.1 * items[item] / biggest,
                left=left[m],
                height=0.6,
                color=f"C{j}" if keep else "none",
                edgecolor=f"C{j}",
                hatch=None if keep else "////",
                lw=0.8,
                gid=f"{m}|{item}|{'kept' if keep else 'recomputed'}",
            )
    for j, m in enumerate(MODES):
        total = sum(kept[m].values()) / GIB
        ax.text(left[m], 1.0, m, fontsize=8.5, weight="bold", color=f"C{j}")
        ax.text(left[m], -len(rows), f"{total:.3g} GiB", fontsize=8, va="center")
    ax.text(0.0, 1.0, "backward of", fontsize=8.5, weight="bold")
    ax.text(1.75, 1.0, "reads this tensor", fontsize=8.5, weight="bold")
    ax.text(1.75, -len(rows), "kept per layer", fontsize=8, va="center")
    ax.set_xlim(-0.1, left[MODES[-1]] + 1.3)
    ax.set_ylim(-len(rows) - 0.7, 1.7)
    ax.set_axis_off()
    ax.set_title(
        f"One layer at s={s:,}, b={b}, h={h:,}, a={a}: filled = kept for "
        "backward, hatched = recomputed",
        fontsize=9,
    )
    return fig


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


def checkpoint_trace(trace):
    """What each layer's forward added to the activation memory a run keeps
    (a cases.CheckpointTrace), one bar a layer, with the run's total."""
    kept = list(trace.kept_gib)
    added = [kept[0]] + [b - a for a, b in zip(kept, kept[1:], strict=False)]
    fig, ax = new_figure(size=(7.0, 3.0))
    ax.bar(range(len(added)), added, color="C0")
    ax.set_xticks(range(len(added)), [str(i) for i in range(len(added))], fontsize=7)
    ax.set_xlabel("layer (0 is the first)")
    ax.set_ylabel("kept by its forward (GiB)")
    ax.set_title(
        f"full recompute configured; h={trace.d_model:,}, a={trace.n_heads}, "
        f"s={trace.seq_len:,}, b={trace.micro_batch}, 16-bit: {kept[-1]:.2f} GiB "
        "kept after the forward",
        fontsize=8.5,
    )
    return fig
