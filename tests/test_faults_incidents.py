"""The faults chapter's seeded incidents (mlbook.faults.incidents): for any
seed, a rank profile gives every rank the barrier's step time and shows the
slowed rank as the one that waits least, and a spike replay spikes after the
bad batch in the run and, when the data is to blame, in the replay too; bad
arguments name themselves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.faults import incidents

PROPERTY_COVERS = {
    "mlbook.faults.incidents.rank_timings",
    "mlbook.faults.incidents.spike_replay",
}

seeds = st.integers(0, 2**31)


@examples(30)
@given(seeds, st.integers(2, 32), st.floats(0.0, 0.04))
def test_the_slow_rank_waits_least_and_the_step_hides_it(seed, n_ranks, sigma):
    t = incidents.rank_timings(seed, n_ranks, sigma, steps=200)
    assert t == incidents.rank_timings(seed, n_ranks, sigma, steps=200)
    assert 0 <= t.straggler < n_ranks and 0.08 <= t.delta <= 0.20
    assert len({r.step_ms for r in t.ranks}) == 1  # the barrier
    least = min(t.ranks, key=lambda r: r.allreduce_ms)
    assert least.rank == t.straggler  # 8 % slow beats 4 % of noise over 200 steps
    assert all(r.allreduce_ms >= t.transfer_ms - 1e-9 for r in t.ranks)
    # the profile's estimate of delta lies near the truth: the noise of 200 steps
    assert t.measured_delta == pytest.approx(t.delta, abs=0.02)


@examples(30)
@given(seeds, st.sampled_from(incidents.SPIKE_CAUSES))
def test_a_spike_follows_the_bad_batch(seed, cause):
    r = incidents.spike_replay(seed, 60, 10, cause)
    assert r == incidents.spike_replay(seed, 60, 10, cause)
    assert sorted(r.batches) == list(range(60))
    assert r.batches[r.spike_step - 1] == r.bad_batch
    assert r.replay_from % 10 == 0 and r.replay_from < r.spike_step
    assert sorted(r.replay_batches) == sorted(r.batches[r.replay_from :])
    if cause == "data":
        step = r.replay_spike_step
        assert r.replay_batches[step - 1 - r.replay_from] == r.bad_batch
        assert step != r.spike_step
    else:
        assert r.replay_spike_step is None


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="n_ranks"):
        incidents.rank_timings(0, n_ranks=1)
    with pytest.raises(ValueError, match="compute_ms"):
        incidents.rank_timings(0, compute_ms=0)
    with pytest.raises(ValueError, match="cause"):
        incidents.spike_replay(0, cause="noise")
    with pytest.raises(ValueError, match="steps"):
        incidents.spike_replay(0, steps=20, checkpoint_every=10)
    with pytest.raises(ValueError, match="seed"):
        incidents.spike_replay(None)
