"""Validation messages and live_figure's ranges (matplotlib slider figures,
on the pages not yet converted to live figures): what a redraw draws, not
how long it takes (redraw times are benchmarks, see ``redraw_benchmarks_ms``).
The live figures' own tests are in test_live_units.py."""

import math

import ipywidgets as W
import pytest

from mlbook.common import validate
from mlbook.plotting import widgets
from mlbook.plotting.widgets import redraw_seconds


def test_validate_messages_name_value_and_rule():
    with pytest.raises(
        ValueError, match=r"rate must be a finite number above 0, got -1"
    ):
        validate.positive("rate", -1)
    with pytest.raises(ValueError, match=r"k=3 must divide batch=8"):
        validate.divides("k", 3, "batch", 8)
    with pytest.raises(ValueError, match=r"p must lie in \(0, 1\]"):
        validate.fraction("p", 0)
    for bad in (math.nan, math.inf, "3", None, True):
        with pytest.raises(ValueError):
            validate.positive("x", bad)
    assert validate.positive_int("n", 3) == 3
    assert validate.fraction("p", 0, allow_zero=True) == 0


def test_divides_refuses_zero_instead_of_dividing_by_it():
    with pytest.raises(ValueError, match="k must be an integer above 0, got 0"):
        validate.divides("k", 0, "batch", 8)


# --- live_figure ------------------------------------------------------------------


def _toy_ranges(n: int, **_) -> dict:
    """x runs from 0 to n (the shape of the MFU calculator's ranges: the end
    of one slider follows another control)."""
    return {"x": {"min": 0.0, "max": float(n), "step": n / 100}}


def _toy_draw(n: int, x: float):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title(f"n={n} x={x:g}")
    return fig


def toy_controls(n=100):
    return dict(
        n=W.BoundedIntText(value=n, min=1, max=1000),
        x=W.FloatSlider(value=60.0, min=0, max=1000),
    )


@pytest.fixture
def shown(monkeypatch):
    """The figures live_figure shows (their titles), instead of displaying them."""
    titles = []
    monkeypatch.setattr(
        widgets, "_show", lambda fig, out=None: titles.append(fig.axes[0].get_title())
    )
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    return titles


def test_live_figure_slider_end_follows_the_other_controls(shown):
    c = toy_controls()
    widgets.live_figure(_toy_draw, ranges=_toy_ranges, **c)
    assert c["x"].max == 100 and c["x"].value == 60
    assert len(shown) == 2 and shown[0] == shown[1] == "n=100 x=60"
    c["n"].value = 200  # the end moves up; 60 stays
    assert c["x"].max == 200 and shown[-1] == "n=200 x=60"
    c["n"].value = 10  # now 60 is out of range: moved to the end
    assert c["x"].value == 10 and shown[-1] == "n=10 x=10"


def test_live_figure_redraws_once_per_change(shown):
    c = toy_controls()
    widgets.live_figure(_toy_draw, ranges=_toy_ranges, **c)
    before = len(shown)
    c["n"].value = 1  # clips x too: still a single redraw
    assert len(shown) == before + 1


def test_redraw_seconds_times_a_draw():
    import matplotlib

    matplotlib.use("Agg")
    seconds = redraw_seconds(_toy_draw, repeats=1, n=3, x=1.0)
    assert math.isfinite(seconds) and seconds > 0


def test_live_figure_names_a_stray_range():
    c = toy_controls()
    with pytest.raises(ValueError, match="'tokens', which is not one of the controls"):
        widgets.apply_ranges(c, lambda **_: {"tokens": {"max": 1.0}})


# --- redraw times: a benchmark to record, not a pass/fail -------------------------


def redraw_benchmarks_ms(repeats: int = 3) -> dict:
    """Best-of-``repeats`` time of each live figure's function in CPython (the
    spec, without drawing it), in ms, for the timings record; the browser's
    redraw times come from tests/test_live.py."""
    import inspect
    import time

    from helpers.live import live_figures

    out = {}
    for name, function in live_figures().items():
        values = function.live.values()
        needs = [
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.default is p.empty and p.name not in values
        ]
        if needs:  # build-time data the page passes; timed in the browser instead
            continue
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            function(**values)
            best = min(best, time.perf_counter() - start)
        out[name] = 1e3 * best
    return out


def test_redraw_benchmarks_are_measurable():
    times = redraw_benchmarks_ms(repeats=1)
    print("live figure spec ms:", {k: round(v, 1) for k, v in times.items()})
    assert times and all(math.isfinite(t) and t > 0 for t in times.values())
