"""The accumulation chapter's seeded incidents (mlbook.accumulation.incidents):
for any seed, a micro-batch log's losses are its token losses normalised the
way it names (the right way adds up to the token mean), a token's weight is
that normalisation's coefficient, and a k sweep is its cost model within the
jitter; bad arguments name themselves."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.accumulation import incidents

PROPERTY_COVERS = {
    "mlbook.accumulation.incidents.micro_batch_log",
    "mlbook.accumulation.incidents.k_sweep_log",
}

seeds = st.integers(0, 2**31)
WEIGHT = {  # a token of micro-batch j, by hand: k micro-batches, N_j, N tokens
    "sum_over_n": lambda k, n_j, n: 1 / n,
    "mean_over_k": lambda k, n_j, n: 1 / (k * n_j),
    "mean_no_k": lambda k, n_j, n: 1 / n_j,
    "sum_over_k": lambda k, n_j, n: 1 / k,
}
LOGGED = {  # micro-batch j's logged loss from its token-loss sum, by hand
    "sum_over_n": lambda s, k, n_j, n: s / n,
    "mean_over_k": lambda s, k, n_j, n: s / (k * n_j),
    "mean_no_k": lambda s, k, n_j, n: s / n_j,
    "sum_over_k": lambda s, k, n_j, n: s / k,
}


@examples(40)
@given(
    seeds,
    st.integers(1, 8),
    st.integers(1, 4),
    st.integers(16, 256),
    st.sampled_from((None, *incidents.NORMALISATIONS)),
)
def test_a_micro_batch_log_is_normalised_as_it_says(seed, k, seqs, max_len, how):
    log = incidents.micro_batch_log(seed, k, seqs, max_len, how)
    assert log == incidents.micro_batch_log(seed, k, seqs, max_len, how)
    assert log.k == k and log.normalisation in incidents.NORMALISATIONS
    if how is None:
        assert log.normalisation != "sum_over_n"  # the seed picks a wrong one
    tokens = [m.tokens for m in log.micro_batches]
    assert tokens == sorted(tokens) and all(16 * seqs <= t for t in tokens)
    n = log.tokens
    for m in log.micro_batches:
        expected = LOGGED[log.normalisation](m.loss_sum, k, m.tokens, n)
        assert math.isclose(m.logged_loss, expected, rel_tol=1e-9)
        for way, weight in WEIGHT.items():
            got = log.token_weight(m.index, way)
            assert math.isclose(got, weight(k, m.tokens, n), rel_tol=1e-12)
    assert log.micro_batches[log.shortest - 1].tokens == min(tokens)


@examples(30)
@given(seeds, st.sampled_from((64, 128, 256, 512)))
def test_a_k_sweep_is_its_model_within_the_jitter(seed, batch):
    incident = incidents.k_sweep_log(seed, batch, ks=(1, 2, 4, 8, 16))
    assert incident == incidents.k_sweep_log(seed, batch, ks=(1, 2, 4, 8, 16))
    m = incident.model
    for r in incident.sweep.rows:
        assert r.micro_batch * r.k == batch
        assert abs(r.step_s / m.step_s(batch, r.k) - 1) <= incidents.STEP_JITTER
        assert r.saved_bytes == round(m.activation_bytes(r.micro_batch))
    steps = [r.step_s for r in incident.sweep.rows]
    assert steps[-1] > steps[0]  # 15 more fixed costs beat a 1 % jitter


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="normalisation"):
        incidents.micro_batch_log(0, normalisation="mean")
    with pytest.raises(ValueError, match="max_len"):
        incidents.micro_batch_log(0, max_len=8)
    with pytest.raises(ValueError, match="seed"):
        incidents.micro_batch_log(-3)
    with pytest.raises(ValueError, match="index"):
        incidents.micro_batch_log(0, k=2).token_weight(3)
    with pytest.raises(ValueError, match="k"):
        incidents.k_sweep_log(0, 256, ks=(1, 3))
    with pytest.raises(ValueError, match="two different k"):
        incidents.k_sweep_log(0, 256, ks=(4, 4))
