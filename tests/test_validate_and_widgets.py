"""Validation messages, and the live figures' redraw times in CPython (a
benchmark recorded by tests/conftest.py, see ``redraw_benchmarks_ms``).
The live figures' own tests are in test_live_units.py."""

import math

import pytest

from mlbook.common import validate


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
