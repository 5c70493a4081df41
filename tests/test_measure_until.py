"""measure_until: measuring again until a number settles, bounded in count and
in seconds, with synthetic measurements whose outcome is known by hand."""

import types

import pytest

from mlbook.common_torch import timing
from mlbook.common_torch.timing import measure_until


class Clock:
    """A perf_counter that moves only when a synthetic measurement takes
    time: a sleep on a loaded machine can overrun by more than the margins
    these tests check (a 50 ms sleep measured over 80 ms once)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(
        timing, "time", types.SimpleNamespace(perf_counter=c.perf_counter)
    )
    return c


def sequence(*values, pause_s=0.0, clock=None):
    """A measure() that returns each of ``values`` in turn (lists, so that
    pooling is concatenation), taking ``pause_s`` on ``clock``."""
    it = iter(values)

    def measure():
        if clock is not None:
            clock.now += pause_s
        return [next(it)]

    return measure


def settled_below(bar):
    return lambda samples: min(samples) < bar


def test_a_settled_first_measurement_is_kept_alone():
    got = measure_until(sequence(1.0), settled_below(2), list.__add__, 4)
    assert (got.value, got.attempts, got.again_s) == ([1.0], 1, 0.0)


def test_measures_again_and_pools_until_settled():
    lines = []
    got = measure_until(
        sequence(5.0, 4.0, 1.0, 9.0),
        settled_below(2),
        list.__add__,
        4,
        log=lines.append,
    )
    assert got.value == [5.0, 4.0, 1.0] and got.attempts == 3
    assert got.again_s >= 0 and len(lines) == 2


def test_stops_at_the_count_and_says_so():
    lines = []
    got = measure_until(
        sequence(5.0, 4.0, 3.0), settled_below(2), list.__add__, 2, log=lines.append
    )
    assert got.value == [5.0, 4.0] and got.attempts == 2
    assert lines[-1].startswith("kept after 2 measurements")


def test_stops_when_the_seconds_would_not_cover_one_more(clock):
    # each measurement takes 50 ms; 80 ms of budget covers one more, not two
    measure = sequence(5.0, 4.0, 3.0, pause_s=0.05, clock=clock)
    got = measure_until(measure, settled_below(2), list.__add__, 10, 0.08)
    assert got.value == [5.0, 4.0] and got.attempts == 2
    assert got.again_s == pytest.approx(0.05)
    once = sequence(5.0, pause_s=0.05, clock=clock)
    none = measure_until(once, settled_below(2), list.__add__, 10, 0.0)
    assert none.attempts == 1 and none.again_s == 0.0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_attempts"):
        measure_until(sequence(1.0), settled_below(2), list.__add__, 0)
    with pytest.raises(ValueError, match="budget_s"):
        measure_until(sequence(1.0), settled_below(2), list.__add__, 2, -1.0)
