"""Figures of the "Your machine" page. Each returns a matplotlib Figure."""

from __future__ import annotations

import math

from mlbook.calibrate import formulas as cal
from mlbook.plotting.style import new_figure, percent_axis


def predicted_vs_measured(rows, device: str):
    """Each comparison's prediction (x) against its measurement (y), both in
    the row's own unit on log axes, with the diagonal where they agree: above
    it the machine was slower (or kept more bytes) than predicted."""
    fig, ax = new_figure(size=(7.0, 4.2))
    shown = [cal.display(r.predicted, r.unit) + (r,) for r in rows]
    for i, (x, unit, r) in enumerate(shown):
        y = cal.display(r.measured, r.unit)[0]
        marker = {"lower bound": "^", "exact": "s"}.get(r.check, "o")
        ax.loglog(x, y, marker, color=f"C{i}", label=f"{r.key} ({unit}, {r.check})")
    values = [v for x, _, r in shown for v in (x, cal.display(r.measured, r.unit)[0])]
    lo, hi = min(values) / 2, max(values) * 2
    ax.loglog([lo, hi], [lo, hi], "--", color="0.4", label="measured = predicted")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted (the row's unit)")
    ax.set_ylabel("measured (the row's unit)")
    ax.set_title(f"Predicted against measured, {device}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
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
