"""Figures of the "Your machine" page. Each returns a matplotlib Figure."""

from __future__ import annotations

import math

from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis

# What each kind of comparison (Comparison.check) is, in a reader's words, and
# its marker; a kind not named here is drawn as an estimate.
KINDS = {
    "lower bound": ("a floor the step cannot beat", "^", "C3"),
    "exact": ("an exact count of bytes", "s", "C2"),
    "stated": ("an estimate", "o", "C0"),
}


def predicted_vs_measured(rows, device: str):
    """One row per comparison: its measurement over its prediction, on a log
    axis, against the line at 1 where the two agree. Right of the line the
    machine took longer (or kept more bytes) than the chapter's formula
    predicted, left of it less; each dot is labelled with its ratio."""
    fig, ax = new_figure(size=(7.0, 0.42 * len(rows) + 1.9), layout="constrained")
    ratios = [r.ratio for r in rows]
    seen = set()
    for i, (r, ratio) in enumerate(zip(rows, ratios, strict=True)):
        words, marker, colour = KINDS.get(r.check, KINDS["stated"])
        label = None if words in seen else words
        seen.add(words)
        ax.scatter(ratio, i, marker=marker, s=45, color=colour, label=label, zorder=3)
        ax.annotate(
            f"{ratio:.2f}",
            (ratio, i),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.axvline(1, ls="--", color="0.35", label="measured = predicted")
    names = [f"{r.key} ({r.chapter.replace('_', ' ')})" for r in rows]
    ax.set_yticks(range(len(rows)), names)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    plain_log_axis(ax, "x", base=2)
    reach = max(2.0, *(max(x, 1 / x) for x in ratios if x > 0))
    ax.set_xlim(1 / (1.6 * reach), 1.6 * reach)
    ax.set_xlabel(
        "measured / predicted (log scale): right of 1 the machine took longer, "
        "or kept more bytes",
        fontsize=8,
    )
    ax.set_title(
        f"Each chapter's prediction against this machine\n{device}", fontsize=9
    )
    fig.legend(loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    return fig


# One colour per kind of peak (mlbook.common.accelerators.PEAK_BASES)
BASIS_COLOURS = {
    "datasheet": "C1",
    "upper bound": "C0",
    "assumed clock": "C2",
    "unknown": "0.6",
}


def mamf_shares(rows):
    """Bars of each machine's MAMF ceiling as a share of its nominal peak:
    ``rows`` of (label, dtype, share, basis), coloured by the peak's basis (a
    share of a datasheet peak is an efficiency; of an upper bound or an
    assumed clock, a lower limit on one; an unknown peak gives no bar)."""
    from matplotlib.patches import Patch

    fig, ax = new_figure(size=(7.0, 0.45 * len(rows) + 1.4), layout="constrained")
    labels = [f"{label}, {dtype}" for label, dtype, _, _ in rows]
    shares = [0.0 if s is None or math.isnan(s) else s for _, _, s, _ in rows]
    colours = [BASIS_COLOURS.get(basis, "0.6") for *_, basis in rows]
    ax.barh(range(len(rows)), shares, color=colours)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    percent_axis(ax, "x")
    ax.set_xlabel("MAMF ceiling / nominal peak")
    shown = [b for b in BASIS_COLOURS if b in {basis for *_, basis in rows}]
    handles = [Patch(color=BASIS_COLOURS[b], label=f"peak: {b}") for b in shown]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    return fig
