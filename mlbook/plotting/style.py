"""One look for every figure in the book."""

import matplotlib.pyplot as plt
from matplotlib.ticker import PercentFormatter

SIZE = (7.0, 3.6)


def new_figure(ncols: int = 1, size=SIZE, layout=None, **kw):
    """A figure with ``ncols`` axes side by side and the book's defaults.

    Margins are fixed rather than computed (layout="constrained" costs more
    than the 100 ms a slider redraw may take); pass layout="constrained" for
    static figures with crowded labels.
    """
    fig, axes = plt.subplots(1, ncols, figsize=size, layout=layout, **kw)
    if layout is None:
        fig.subplots_adjust(left=0.1, right=0.97, bottom=0.15, top=0.88, wspace=0.3)
    for ax in axes if ncols > 1 else [axes]:
        ax.grid(True, alpha=0.3)
    return fig, axes


def plain_log_axis(ax, axis: str = "x", base: int = 10):
    """A log axis whose tick labels are plain numbers (1,024 not 2^10).

    Plain labels also skip mathtext parsing, which costs tens of ms a redraw.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
    target.set_major_locator(LogLocator(base=base))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(
        FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    )


def percent_axis(ax, axis: str = "y"):
    """Show a 0..1 axis as percentages."""
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0))
