"""Sliders that redraw a figure, for JupyterLab and for the rendered book.

``live_figure(draw, **controls)`` first shows the figure at the controls'
default values as a plain image (what a reader of the static HTML sees),
then the widget: controls above an output area that ``draw`` redraws on
every change. In the HTML book the widget manager renders the stored widget
state and the CSS hides the duplicate static image.

``draw(**values)`` must return a matplotlib Figure; keep it cheap (the book
aims at 100 ms a redraw; ``redraw_seconds`` measures one, as a benchmark).

A slider's range may depend on the other controls (a tokens/s slider ends at
100 % MFU, which moves with the model and the GPU count): pass
``ranges(**values) -> {control: {"min": .., "max": .., "step": ..}}`` and the
ranges are set before the first draw and again after every change, a value
that falls outside its new range being moved to the nearest end.
"""

from __future__ import annotations

import time

import matplotlib.pyplot as plt

from mlbook.plotting.live import set_outputs


def _show(fig, out=None):
    """Display ``fig`` in the cell, or make it the one output of the Output
    widget ``out`` (as its state: ``set_outputs`` says why)."""
    if out is None:
        from IPython.display import display

        display(fig)
    else:
        from IPython.core.interactiveshell import InteractiveShell

        set_outputs(out, InteractiveShell.instance().display_formatter.format(fig))
    plt.close(fig)


def apply_ranges(controls: dict, ranges) -> None:
    """Set each control's range to what ``ranges(**values)`` returns for the
    current values. Min, max and step change together (traitlets checks them
    once, at the end), so a new range may lie wholly above or below the old one."""
    if ranges is None:
        return
    values = {name: c.value for name, c in controls.items()}
    for name, attrs in ranges(**values).items():
        if name not in controls:
            raise ValueError(
                f"ranges returned {name!r}, which is not one of the controls "
                f"({', '.join(controls)})"
            )
        control = controls[name]
        with control.hold_trait_notifications():
            for attr, value in attrs.items():
                setattr(control, attr, value)


def live_figure(draw, ranges=None, **controls):
    """Show draw(**defaults) statically, then the controls and a live figure.

    ``ranges``, if given, keeps slider ranges within what the other controls
    allow (see the module docstring). Returns the widget box; its
    ``redraw()`` attribute redraws as a change of a control does.
    """
    import ipywidgets as widgets
    from IPython.display import display

    apply_ranges(controls, ranges)
    _show(draw(**{name: c.value for name, c in controls.items()}))
    out = widgets.Output()
    busy = []

    def redraw(_change=None):
        if busy:  # a range change moved a value: one redraw, after it, is enough
            return
        busy.append(True)
        try:
            apply_ranges(controls, ranges)
        finally:
            busy.clear()
        _show(draw(**{name: c.value for name, c in controls.items()}), out)

    for c in controls.values():
        c.style = {"description_width": "initial"}
        c.continuous_update = False
        c.observe(redraw, names="value")
    box = widgets.VBox(
        [widgets.HBox(list(controls.values()), layout={"flex_flow": "row wrap"}), out]
    )
    box.redraw = redraw
    display(box)
    redraw()
    return box


def redraw_seconds(draw, repeats: int = 3, **values) -> float:
    """Best-of-``repeats`` wall time of one draw and render to pixels: a
    benchmark to record, not a test to pass (a busy machine stretches it)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fig = draw(**values)
        fig.canvas.draw()
        plt.close(fig)
        best = min(best, time.perf_counter() - start)
    return best
