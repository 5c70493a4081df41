"""One look for every figure in the book."""

import matplotlib.pyplot as plt
from matplotlib.ticker import PercentFormatter

SIZE = (7.0, 3.6)


def new_figure(ncols: int = 1, size=SIZE, **kw):
    """A figure with ``ncols`` axes side by side and the book's defaults."""
    fig, axes = plt.subplots(1, ncols, figsize=size, layout="constrained", **kw)
    for ax in (axes if ncols > 1 else [axes]):
        ax.grid(True, alpha=0.3)
    return fig, axes


def percent_axis(ax, axis: str = "y"):
    """Show a 0..1 axis as percentages."""
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0))
