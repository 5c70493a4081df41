"""Sliders that redraw a figure, for JupyterLab and for the rendered book.

``live_figure(draw, **controls)`` first shows the figure at the controls'
default values as a plain image (what a reader of the static HTML sees),
then the widget: controls above an output area that ``draw`` redraws on
every change. In the HTML book the widget manager renders the stored widget
state and the CSS hides the duplicate static image.

``draw(**values)`` must return a matplotlib Figure; keep it cheap (the book's
budget is 100 ms a redraw).
"""

from __future__ import annotations

import time

import matplotlib.pyplot as plt


def _show(fig):
    from IPython.display import display

    display(fig)
    plt.close(fig)


def live_figure(draw, **controls):
    """Show draw(**defaults) statically, then the controls and a live figure."""
    import ipywidgets as widgets
    from IPython.display import display

    _show(draw(**{name: c.value for name, c in controls.items()}))
    out = widgets.Output()

    def redraw(_change=None):
        with out:
            out.clear_output(wait=True)
            _show(draw(**{name: c.value for name, c in controls.items()}))

    for c in controls.values():
        c.style = {"description_width": "initial"}
        c.continuous_update = False
        c.observe(redraw, names="value")
    box = widgets.VBox([widgets.HBox(list(controls.values()), layout={"flex_flow": "row wrap"}), out])
    display(box)
    redraw()
    return box


REDRAW_BUDGET_S = 0.1  # the book's budget for one slider redraw on an idle laptop


def _bare_figure(panels: int = 1):
    from mlbook.plotting.style import new_figure

    fig, axes = new_figure(ncols=panels)
    for ax in (axes if panels > 1 else [axes]):
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_title("t")
    return fig


def redraw_budget_s(panels: int = 1) -> float:
    """The redraw budget a slider figure of ``panels`` axes is tested against.

    REDRAW_BUDGET_S, stretched to 2.5 bare figures of as many panels with one
    line each where that is more: on a slow or busy machine a bare figure
    alone can take 40 ms, and a bare two-panel one about 100 ms on the 2-core
    machine this book is built on. A test against it catches a slow figure,
    not a slow machine.
    """
    return max(REDRAW_BUDGET_S, 2.5 * redraw_seconds(_bare_figure, repeats=5, panels=panels))


def redraw_seconds(draw, repeats: int = 3, **values) -> float:
    """Best-of-``repeats`` wall time of one draw and render to pixels."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fig = draw(**values)
        fig.canvas.draw()
        plt.close(fig)
        best = min(best, time.perf_counter() - start)
    return best
