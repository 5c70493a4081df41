"""Property tests for the scaling chapter's calculators (mlbook.scaling.formulas,
mlbook.scaling.pipeline) and the link table's lookup: for any valid input they
return finite numbers that move the way the formulas say, and for any bad
argument they raise a ValueError that names it."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import accelerators
from mlbook.scaling import formulas as sc
from mlbook.scaling import pipeline

PROPERTY_COVERS = {
    "mlbook.scaling.formulas.ring_allreduce_s",
    "mlbook.scaling.formulas.reduce_scatter_s",
    "mlbook.scaling.formulas.all_gather_s",
    "mlbook.scaling.formulas.ring_allreduce_bytes_per_rank",
    "mlbook.scaling.formulas.zero_state",
    "mlbook.scaling.formulas.zero_state_bytes",
    "mlbook.scaling.formulas.zero_comm_bytes",
    "mlbook.scaling.formulas.bubble_fraction",
    "mlbook.scaling.formulas.micro_batches_for_bubble",
    "mlbook.scaling.formulas.tp_bytes_per_layer",
    "mlbook.scaling.formulas.tp_comm_s_per_layer",
    "mlbook.scaling.formulas.fit_alpha_beta",
    "mlbook.scaling.pipeline.device_order",
    "mlbook.scaling.pipeline.simulate",
    "mlbook.common.accelerators.interconnect",
    "mlbook.scaling.formulas.fsdp_gathered_bytes",
    "mlbook.scaling.formulas.crossover_bytes",
    "mlbook.scaling.formulas.bus_bytes_per_s",
    "mlbook.scaling.formulas.published_link_rows",
    "mlbook.scaling.ring.ring_allreduce_steps",
    "mlbook.scaling.ring.start_state",
    "mlbook.scaling.ring.bytes_sent_per_rank",
    "mlbook.scaling.artifacts.allreduce_log",
    "mlbook.scaling.artifacts.bucket_allreduce_s",
}

FEW = examples(50)
CAUSES_ARGS = [(None, "healthy"), (50e9, "healthy"), (50e9, "slow_link")]

sizes = st.floats(1.0, 1e13)
ranks = st.integers(1, 100_000)
bandwidths = st.floats(1e6, 1e13)
latencies = st.floats(0.0, 1e-2)
params = st.floats(1.0, 1e13)
stages = st.sampled_from(sc.ZERO_STAGES)
small = st.integers(1, 64)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]
NOT_NON_NEGATIVE = [-1e-9, -1, math.nan, math.inf, True, "0", None]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _raises_naming(name, fn, *args, **kw):
    with pytest.raises(ValueError, match=name):
        fn(*args, **kw)


# --- the ring -----------------------------------------------------------------------

RING = (sc.ring_allreduce_s, sc.reduce_scatter_s, sc.all_gather_s)


@FEW
@given(sizes, ranks, bandwidths, latencies)
def test_ring_times_are_finite_and_move_as_the_formula_says(s, n, bw, lat):
    for fn in RING:
        t = fn(s, n, bw, lat)
        assert _finite(t) and t >= 0
        assert fn(2 * s, n, bw, lat) >= t  # more bytes, no faster
        assert fn(s, n, 2 * bw, lat) <= t  # faster link, no slower
        assert fn(s, n + 1, bw, lat) >= t  # a longer ring, no faster
        assert fn(s, n, bw, lat + 1e-6) >= t
    # the two halves make the whole
    whole = sc.ring_allreduce_s(s, n, bw, lat)
    assert sc.reduce_scatter_s(s, n, bw, lat) + sc.all_gather_s(
        s, n, bw, lat
    ) == pytest.approx(whole, rel=1e-12)
    sent = sc.ring_allreduce_bytes_per_rank(s, n)
    assert 0 <= sent < 2 * s  # almost 2S, never more
    assert sc.ring_allreduce_bytes_per_rank(s, n + 1) >= sent


@pytest.mark.parametrize("fn", RING)
@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_ring_bad_arguments_are_named(fn, bad):
    _raises_naming("n_bytes", fn, bad, 4, 1e9)
    _raises_naming("link_bytes_per_s", fn, 1e6, 4, bad)
    _raises_naming("n_ranks", fn, 1e6, bad, 1e9)


@pytest.mark.parametrize("bad", NOT_NON_NEGATIVE)
def test_ring_latency_must_be_non_negative(bad):
    _raises_naming("latency_s", sc.ring_allreduce_s, 1e6, 4, 1e9, bad)


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_ring_bytes_bad_ranks(bad):
    _raises_naming("n_ranks", sc.ring_allreduce_bytes_per_rank, 1e6, bad)


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_ring_bytes_bad_sizes(bad):
    _raises_naming("n_bytes", sc.ring_allreduce_bytes_per_rank, bad, 4)


# --- ZeRO ---------------------------------------------------------------------------


@FEW
@given(params, ranks, stages, st.floats(1, 32), st.floats(1, 8), st.floats(1, 8))
def test_zero_state_shrinks_with_stage_and_ranks(n, d, stage, k, wb, gb):
    parts = sc.zero_state(n, d, stage, k, wb, gb)
    total = sc.zero_state_bytes(n, d, stage, k, wb, gb)
    assert all(
        _finite(x) and x > 0
        for x in (parts.weights, parts.grads, parts.optimizer, total)
    )
    assert total == parts.total
    assert total <= (wb + gb + k) * n * (1 + 1e-12)  # never more than unsharded
    assert total * d >= (wb + gb + k) * n * (
        1 - 1e-12
    )  # never less than a perfect shard
    if stage < 3:
        assert sc.zero_state_bytes(n, d, stage + 1, k, wb, gb) <= total * (1 + 1e-12)
    assert sc.zero_state_bytes(n, d + 1, stage, k, wb, gb) <= total * (1 + 1e-12)
    assert sc.zero_state_bytes(2 * n, d, stage, k, wb, gb) == pytest.approx(
        2 * total, rel=1e-12
    )
    assert sc.zero_state_bytes(n, d, stage, k + 1, wb, gb) > total


@FEW
@given(params, stages, st.integers(1, 100_000), st.sampled_from([1, 2, 4]))
def test_zero_comm_grows_with_stage_and_ranks(n, stage, d, vb):
    c = sc.zero_comm_bytes(n, stage, d, vb)
    limit = sc.zero_comm_bytes(n, stage, None, vb)
    assert _finite(c) and 0 <= c < limit + 1e-9 * limit  # (N-1)/N of the large-N limit
    assert sc.zero_comm_bytes(n, stage, d + 1, vb) >= c
    assert sc.zero_comm_bytes(n, 3, d, vb) >= sc.zero_comm_bytes(n, stage, d, vb)


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_zero_bad_arguments_are_named(bad):
    _raises_naming("n_params", sc.zero_state_bytes, bad, 8, 1)
    _raises_naming("k", sc.zero_state_bytes, 1e9, 8, 1, k=bad)
    _raises_naming("weight_bytes", sc.zero_state, 1e9, 8, 1, weight_bytes=bad)
    _raises_naming("grad_bytes", sc.zero_state, 1e9, 8, 1, grad_bytes=bad)
    _raises_naming("n_params", sc.zero_comm_bytes, bad, 1)
    _raises_naming("value_bytes", sc.zero_comm_bytes, 1e9, 1, value_bytes=bad)


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_zero_bad_ranks_are_named(bad):
    _raises_naming("n_dp", sc.zero_state_bytes, 1e9, bad, 1)
    if bad is not None:  # None asks zero_comm_bytes for the large-N_d limit
        _raises_naming("n_dp", sc.zero_comm_bytes, 1e9, 1, bad)


@pytest.mark.parametrize("bad", [4, -1, 1.0, True, "1", None, 2.5])
def test_zero_stage_must_be_0_to_3(bad):
    with pytest.raises(
        ValueError, match=r"stage must be one of the ZeRO stages 0, 1, 2, 3"
    ):
        sc.zero_state_bytes(1e9, 8, bad)
    with pytest.raises(ValueError, match="stage"):
        sc.zero_comm_bytes(1e9, bad)


# --- the bubble ---------------------------------------------------------------------


@FEW
@given(small, st.integers(1, 4096), st.integers(1, 16))
def test_bubble_is_a_share_that_shrinks_with_m_and_v_and_grows_with_p(p, m, v):
    b = sc.bubble_fraction(p, m, v)
    assert _finite(b) and 0 <= b < 1
    assert sc.bubble_fraction(p, m + 1, v) <= b
    assert sc.bubble_fraction(p, m, v + 1) <= b
    assert sc.bubble_fraction(p + 1, m, v) > b


@FEW
@given(small, st.floats(0.001, 0.999), st.integers(1, 8))
def test_micro_batches_for_bubble_is_the_smallest_that_fits(p, bubble, v):
    m = sc.micro_batches_for_bubble(p, bubble, v)
    assert isinstance(m, int) and m >= 1
    assert sc.bubble_fraction(p, m, v) <= bubble
    if m > 1:
        assert sc.bubble_fraction(p, m - 1, v) > bubble
    assert (
        sc.micro_batches_for_bubble(p, bubble / 2, v) >= m
    )  # a smaller bubble needs more


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_bubble_bad_arguments_are_named(bad):
    _raises_naming("p", sc.bubble_fraction, bad, 8)
    _raises_naming("m", sc.bubble_fraction, 4, bad)
    _raises_naming("v", sc.bubble_fraction, 4, 8, bad)
    _raises_naming("p", sc.micro_batches_for_bubble, bad, 0.05)
    _raises_naming("v", sc.micro_batches_for_bubble, 4, 0.05, bad)


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, math.nan, True, "0.1", None])
def test_bubble_target_must_lie_strictly_between_0_and_1(bad):
    _raises_naming("bubble", sc.micro_batches_for_bubble, 4, bad)


# --- tensor parallelism -------------------------------------------------------------


@FEW
@given(
    small,
    st.integers(1, 1 << 17),
    st.integers(1, 1 << 15),
    st.integers(1, 64),
    bandwidths,
    latencies,
)
def test_tp_traffic_grows_with_the_activations(b, s, h, t, bw, lat):
    sent = sc.tp_bytes_per_layer(b, s, h, t)
    assert (
        _finite(sent) and 0 <= sent < 4 * 2 * b * s * h * 2
    )  # below 4 all-reduces of 2 x the tensor
    assert sc.tp_bytes_per_layer(b + 1, s, h, t) >= sent
    assert sc.tp_bytes_per_layer(b, s + 1, h, t) >= sent
    assert sc.tp_bytes_per_layer(b, s, h, t + 1) >= sent
    secs = sc.tp_comm_s_per_layer(b, s, h, t, bw, lat)
    assert _finite(secs) and secs >= 0
    assert sc.tp_comm_s_per_layer(b, s, h, t, 2 * bw, lat) <= secs
    assert sc.tp_comm_s_per_layer(b, 2 * s, h, t, bw, lat) >= secs


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_tp_bad_arguments_are_named(bad):
    for name, args in (
        ("b", (bad, 8, 8, 2)),
        ("s", (1, bad, 8, 2)),
        ("h", (1, 8, bad, 2)),
        ("t", (1, 8, 8, bad)),
    ):
        _raises_naming(name, sc.tp_bytes_per_layer, *args)
        _raises_naming(
            name if name != "t" else "n_ranks", sc.tp_comm_s_per_layer, *args, 1e9
        )


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_tp_bad_bandwidth_and_value_bytes_are_named(bad):
    _raises_naming("link_bytes_per_s", sc.tp_comm_s_per_layer, 1, 8, 8, 2, bad)
    _raises_naming("value_bytes", sc.tp_bytes_per_layer, 1, 8, 8, 2, bad)
    _raises_naming(
        "value_bytes", sc.tp_comm_s_per_layer, 1, 8, 8, 2, 1e9, value_bytes=bad
    )


# --- the alpha-beta fit -------------------------------------------------------------


@FEW
@given(st.integers(2, 64), st.floats(1e-7, 1e-3), st.floats(1e7, 1e12))
def test_fit_recovers_an_exact_ring(n, alpha, bw):
    xs = [1024 * 4**i for i in range(9)]
    # T = 2 (N - 1) alpha + 2 (N - 1) / N * S / B, typed out here
    ts = [2 * (n - 1) * alpha + 2 * (n - 1) / n * x / bw for x in xs]
    fit = sc.fit_alpha_beta(xs, ts, n)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(1 / bw, rel=1e-6)
    slower = sc.fit_alpha_beta(xs, [2 * t for t in ts], n)  # everything twice as slow
    assert slower.link_bytes_per_s == pytest.approx(bw / 2, rel=1e-6)


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_fit_bad_points_are_named(bad):
    _raises_naming(
        r"n_bytes\[1\]", sc.fit_alpha_beta, [1024, bad, 4096], [1e-3, 2e-3, 3e-3], 2
    )
    _raises_naming(
        r"seconds\[2\]", sc.fit_alpha_beta, [1024, 2048, 4096], [1e-3, 2e-3, bad], 2
    )


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT + [1])
def test_fit_needs_two_ranks(bad):
    _raises_naming("n_ranks", sc.fit_alpha_beta, [1024, 4096], [1e-3, 2e-3], bad)


def test_fit_refuses_what_cannot_be_fitted():
    with pytest.raises(ValueError, match="same length"):
        sc.fit_alpha_beta([1024, 4096], [1e-3], 2)
    with pytest.raises(ValueError, match="two different message sizes"):
        sc.fit_alpha_beta([1024, 1024], [1e-3, 2e-3], 2)
    with pytest.raises(ValueError, match="do not grow"):
        sc.fit_alpha_beta([1024, 4096, 16384], [3e-3, 2e-3, 1e-3], 2)
    with pytest.raises(ValueError, match="sequences"):
        sc.fit_alpha_beta(5, [1e-3], 2)


# --- the pipeline simulation --------------------------------------------------------


@st.composite
def schedules(draw):
    schedule = draw(st.sampled_from(pipeline.SCHEDULES))
    p = draw(st.integers(1, 8))
    if schedule == "interleaved":
        v, m = draw(st.integers(1, 4)), p * draw(st.integers(1, 4))
    else:
        v, m = 1, draw(st.integers(1, 24))
    return schedule, p, m, v


@FEW
@given(schedules(), st.integers(1, 5), st.integers(1, 5))
def test_simulated_bubble_is_the_formula_for_any_durations(case, f, b):
    schedule, p, m, v = case
    t = pipeline.simulate(schedule, p, m, v, forward_s=f, backward_s=b)
    assert t.bubble == Fraction(p - 1, v * m + p - 1)
    assert t.busy == m * (f + b) * p  # every op ran, once
    assert len(t.ops) == 2 * m * v * p
    order = pipeline.device_order(schedule, p, m, v)
    assert all(sorted(o) == sorted(set(o)) for o in order)  # no op twice on a device
    assert max(t.peak_in_flight) <= m * v


@pytest.mark.parametrize("bad", NOT_POSITIVE_INT)
def test_pipeline_bad_arguments_are_named(bad):
    for fn in (pipeline.simulate, pipeline.device_order):
        _raises_naming("p", fn, "1f1b", bad, 4)
        _raises_naming("m", fn, "1f1b", 2, bad)
        _raises_naming("v", fn, "interleaved", 2, 4, bad)


@pytest.mark.parametrize("bad", NOT_POSITIVE)
def test_pipeline_bad_durations_are_named(bad):
    _raises_naming("forward_s", pipeline.simulate, "gpipe", 2, 2, forward_s=bad)
    _raises_naming("backward_s", pipeline.simulate, "gpipe", 2, 2, backward_s=bad)


def test_pipeline_rules():
    with pytest.raises(ValueError, match="schedule must be one of"):
        pipeline.simulate("zero-bubble", 2, 2)
    with pytest.raises(ValueError, match=r"m=6 must be a multiple of p=4"):
        pipeline.simulate("interleaved", 4, 6, 2)
    with pytest.raises(ValueError, match="only the 'interleaved' schedule"):
        pipeline.simulate("1f1b", 4, 8, 2)


# --- the link table -----------------------------------------------------------------


@FEW
@given(
    st.sampled_from(
        sorted(set(accelerators.INTERCONNECTS) | {"H100", "H200", "A100", "V100"})
    )
)
def test_every_link_row_is_positive_and_nvlink_is_faster(name):
    row = accelerators.interconnect(name)
    assert _finite(row.nvlink_bytes_per_s) and _finite(row.ib_bytes_per_s)
    assert row.nvlink_bytes_per_s > row.ib_bytes_per_s > 0


@pytest.mark.parametrize("bad", ["H100 PCIe", "B200", "", 100, None, True])
def test_interconnect_refuses_unknown_devices(bad):
    with pytest.raises(ValueError):
        accelerators.interconnect(bad)


# --- the ring step by step, the crossover, the artifacts ---------------------------


@FEW
@given(st.integers(2, 12), sizes)
def test_ring_steps_end_with_every_sum_everywhere(n, s):
    from mlbook.scaling import ring

    start = ring.start_state(n)
    assert all(start[r][c] == {r} for r in range(n) for c in range(n))
    steps = ring.ring_allreduce_steps(n, s)
    everyone = frozenset(range(n))
    assert all(c == everyone for row in steps[-1].held for c in row)
    halfway = steps[n - 2].held  # after the reduce-scatter
    assert all(halfway[r][(r + 1) % n] == everyone for r in range(n))
    sent = ring.bytes_sent_per_rank(steps)
    assert sent == pytest.approx([sc.ring_allreduce_bytes_per_rank(s, n)] * n)


@FEW
@given(st.integers(2, 1000), latencies, bandwidths)
def test_at_the_crossover_latency_and_bandwidth_cost_the_same(n, alpha, bw):
    s_star = sc.crossover_bytes(n, alpha, bw)
    assert s_star == pytest.approx(n * alpha * bw)
    if s_star > 0:
        t = sc.ring_allreduce_s(s_star, n, bw, alpha)
        assert t == pytest.approx(4 * (n - 1) * alpha, rel=1e-9)
        busbw = sc.bus_bytes_per_s(s_star, n, t)
        assert busbw == pytest.approx(bw / 2, rel=1e-9)  # half the link at S*


@FEW
@given(params, st.integers(1, 200), st.floats(0.5, 8))
def test_fsdp_gathers_one_units_weights(n, units, wb):
    g = sc.fsdp_gathered_bytes(n, units, wb)
    assert g == pytest.approx(wb * n / units)
    assert g <= sc.fsdp_gathered_bytes(n, 1, wb)


@FEW
@given(st.lists(st.sampled_from(sorted(accelerators.INTERCONNECTS)), max_size=4))
def test_published_link_rows_name_their_sources(gpus):
    rows = sc.published_link_rows(tuple(gpus))
    assert len(rows) == 1 + len(sc.PUBLISHED_BUS_BANDWIDTH) + len(gpus)
    assert all(r.source and r.bus_bytes_per_s > 0 for r in rows)
    assert all("nominal" in r.system for r in rows[-len(gpus) :]) if gpus else True


@FEW
@given(st.integers(0, 10_000), st.integers(2, 64), st.sampled_from(CAUSES_ARGS))
def test_a_sweep_is_the_ring_model_within_its_noise(seed, n, how):
    from mlbook.scaling import artifacts

    rated, cause = how
    log = artifacts.allreduce_log(seed, n, rated, cause, noise=0.02)
    for r in log.rows:
        ratio = r.time_s / log.predict_s(r.size_bytes)
        assert math.exp(-0.2) < ratio < math.exp(0.2)  # ten standard deviations
        assert r.busbw_bytes_per_s == pytest.approx(
            2 * (n - 1) / n * r.algbw_bytes_per_s
        )
    grads = 1e9
    one = artifacts.bucket_allreduce_s(log, grads, grads)
    assert one == pytest.approx(log.predict_s(grads))
    assert artifacts.bucket_allreduce_s(log, grads, grads / 10) > one  # more alpha
