"""The cadence chapter's seeded incidents (mlbook.cadence.incidents): for any
seed and settings, a failure log is a run that obeys the chapter's model
(failures in order, the work lost at each within one segment since the last
restart, the same log from the same seed), and a write sweep is
formulas.write_time_s within its jitter; bad arguments name themselves."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.cadence import formulas, incidents

PROPERTY_COVERS = {
    "mlbook.cadence.incidents.failure_log",
    "mlbook.cadence.incidents.write_sweep",
}

seeds = st.integers(0, 2**31)


@examples(40)
@given(
    seeds,
    st.floats(10.0, 1800.0),  # C
    st.floats(600.0, 6 * 3600.0),  # I
    st.floats(0.0, 1800.0),  # R
    st.floats(1.0, 96.0),  # run hours
)
def test_a_failure_log_follows_the_model(seed, c, i, r, run_h):
    log = incidents.failure_log(seed, c, i, r, run_h)
    assert log == incidents.failure_log(seed, c, i, r, run_h)  # the same draw
    lo, hi = incidents.FAILURE_LOG_MTBF_H
    assert lo * 3600 <= log.mtbf_s <= hi * 3600
    previous_end = 0.0  # when training last (re)started, hours
    for n, f in enumerate(log.failures, start=1):
        assert f.number == n
        assert previous_end - 1e-9 <= f.committed_at_h <= f.failed_at_h < run_h
        # the commit is the restart's end plus whole segments of I + C
        segments = (f.committed_at_h - previous_end) * 3600 / (i + c)
        assert math.isclose(segments, round(segments), abs_tol=1e-6)
        assert f.redone_h < (i + c) / 3600 + 1e-9  # at most one segment lost
        previous_end = f.failed_at_h + r / 3600
    assert log.redone_h == pytest.approx(sum(f.redone_h for f in log.failures))
    if log.failures:
        assert log.observed_mtbf_s == pytest.approx(run_h * 3600 / len(log.failures))


@examples(40)
@given(seeds, st.floats(1e8, 2e12))
def test_a_write_sweep_is_the_write_time_within_its_jitter(seed, n_params):
    sweep = incidents.write_sweep(seed, n_params)
    assert sweep == incidents.write_sweep(seed, n_params)
    assert sweep.checkpoint_bytes == formulas.checkpoint_bytes(n_params)
    assert [t.writers for t in sweep.timings] == list(incidents.SWEEP_WRITERS)
    lo, hi = incidents.WRITER_BYTES_PER_S
    assert lo <= sweep.writer_bytes_per_s <= hi
    # the storage fills between two of the powers of two the sweep tries
    exponent = math.log2(sweep.saturating_writers)
    assert 0.3 - 1e-9 <= exponent % 1 <= 0.7 + 1e-9
    for t in sweep.timings:
        model = sweep.write_s(t.writers)
        assert isinstance(t.write_s, float)
        assert abs(t.write_s / model - 1) <= incidents.WRITE_JITTER + 1e-12


@pytest.mark.parametrize(
    "bad",
    [
        dict(seed=-1),
        dict(seed=1.5),
        dict(seed=True),
        dict(checkpoint_s=0),
        dict(interval_s=-1),
        dict(restart_s=-1),
        dict(run_h=math.nan),
    ],
)
def test_a_failure_log_names_a_bad_argument(bad):
    args = dict(seed=0, checkpoint_s=60.0, interval_s=3600.0, restart_s=60.0)
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        incidents.failure_log(**{**args, **bad})


def test_a_write_sweep_names_a_bad_argument():
    with pytest.raises(ValueError, match="n_params"):
        incidents.write_sweep(0, -1.0)
    with pytest.raises(ValueError, match="writers"):
        incidents.write_sweep(0, 1e9, writers=(8, 0))
    with pytest.raises(ValueError, match="writers"):
        incidents.write_sweep(0, 1e9, writers=())
    with pytest.raises(ValueError, match="seed"):
        incidents.write_sweep("1", 1e9)


def test_an_empty_log_has_no_mtbf_to_read():
    log = incidents.failure_log(0, 60.0, 3600.0, 60.0, run_h=1e-6)
    assert log.failures == ()
    with pytest.raises(ValueError, match="no failures"):
        _ = log.observed_mtbf_s
