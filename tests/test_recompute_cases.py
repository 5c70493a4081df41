"""The recompute chapter's new pieces: what a layer keeps under each strategy
(the block diagram, its bars and totals against Korthikanti's count worked
out here), when a checkpoint at every layer is best, and the seeded artifacts
of the diagnosis exercises (property tests for every public function)."""

from __future__ import annotations

import math

import matplotlib
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common.units import GIB
from mlbook.recompute import cases, figures
from mlbook.recompute import formulas as rc

matplotlib.use("Agg")

PROPERTY_COVERS = {
    "mlbook.recompute.formulas.kept_items",
    "mlbook.recompute.formulas.every_layer_ratio",
    "mlbook.recompute.cases.memory_bill",
    "mlbook.recompute.cases.fix",
    "mlbook.recompute.cases.extra_flops",
    "mlbook.recompute.cases.headroom_gib",
    "mlbook.recompute.cases.unwrapped_layers",
    "mlbook.recompute.cases.checkpoint_trace",
    "mlbook.recompute.cases.wrapping_saves_gib",
}

shapes = st.tuples(
    st.integers(1, 8192),
    st.integers(1, 8),
    st.sampled_from([64, 128, 4096]),
    st.sampled_from([1, 2, 32]),
)


@given(shapes, st.booleans(), st.sampled_from(rc.MLP_KINDS))
@examples(40)
def test_kept_items_sum_to_the_layers_bytes(shape, dropout, mlp):
    s, b, h, a = shape
    items = rc.block_saved_items(s, b, h, a, dropout=dropout, mlp=mlp)
    lb = rc.layer_bytes(s, b, h, a, dropout=dropout, mlp=mlp)
    for mode in rc.RECOMPUTE_MODES:
        kept = rc.kept_items(items, mode)
        assert sum(kept.values()) == getattr(lb, mode)
        assert set(kept) <= set(items)
    assert set(rc.kept_items(items, "selective")) == set(items) - set(rc.SCORE_ITEMS)


def test_kept_items_rejects_bad_input():
    with pytest.raises(ValueError, match="mode"):
        rc.kept_items(rc.block_saved_items(1, 1, 1, 1), "sqrt")
    with pytest.raises(ValueError, match="items"):
        rc.kept_items({"a": 1})


def test_the_block_diagram_by_hand():
    """Llama-2-7B's shape at s = 4096, b = 1 (h = 4096, a = 32): sbh = 2^24
    bytes-units and a s^2 b = 2^29. Without recompute a layer keeps
    34 * 2^24 + 5 * 2^29 bytes = 3.03125 GiB, selective 34 * 2^24 = 0.53125 GiB,
    full the input 2 * 2^24 = 0.03125 GiB: the totals the diagram writes.
    Korthikanti's 14 items are all drawn for every strategy; selective hatches
    the three s x s ones, full all but the layer's input."""
    fig = figures.block_saved(4096, 1, 4096, 32)
    bars = [p.get_gid().split("|") for p in fig.axes[0].patches if p.get_gid()]
    assert len(bars) == 3 * 14
    kept = {
        m: {i for mm, i, k in bars if mm == m and k == "kept"} for m in figures.MODES
    }
    assert len(kept["none"]) == 14
    assert kept["none"] - kept["selective"] == set(rc.SCORE_ITEMS)
    assert kept["full"] == {"norm 1 input"}
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"3.03 GiB", "0.531 GiB", "0.0312 GiB"} <= set(texts)
    assert "softmax output: 2 a s²b" in texts and "GELU input: 8 sbh" in texts


def test_the_block_diagram_of_a_llama_block_leaves_out_empty_items():
    fig = figures.block_saved(64, 1, 64, 2, dropout=False, mlp="swiglu", d_ff_mult=2)
    items = {p.get_gid().split("|")[1] for p in fig.axes[0].patches if p.get_gid()}
    assert not any("dropout" in i or "dropped-out" in i for i in items)
    assert "SiLU output" in items


@pytest.mark.parametrize(("L", "ratio"), [(1, 0.0), (2, 1.0), (32, 16.0), (105, 52.0)])
def test_every_layer_ratio_known_values(L, ratio):
    # L = 32: c = 16 with two-layer segments, (32 - 16) / 1 = 16; L = 105: c = 53,
    # (105 - 53) / 1 = 52 (the exercise's hand computation)
    assert rc.every_layer_ratio(L) == ratio


@given(st.integers(1, 120), st.floats(0.01, 200.0))
@examples(50)
def test_every_layer_ratio_is_where_best_segments_switches(L, r):
    threshold = rc.every_layer_ratio(L)
    assert (rc.best_segments(L, r, 1.0) == L) == (r > threshold or L == 1)
    assert threshold <= L / 2 + 1


# --- the diagnosis artifacts -------------------------------------------------------


@given(st.integers(0, 5000))
@examples(20)
def test_a_memory_bill_overflows_and_its_fix_fits(seed):
    bill = cases.memory_bill(seed)
    assert bill.total_gib > bill.hbm_gib >= bill.total_with("full")
    strategy = cases.fix(bill)
    assert strategy in ("selective", "full")
    assert cases.headroom_gib(bill) == bill.hbm_gib - bill.total_with(strategy) >= 0
    if strategy == "full":
        assert bill.total_with("selective") > bill.hbm_gib
        assert cases.extra_flops(bill) == 1 / 3
    else:
        assert 0 < cases.extra_flops(bill) < 1 / 3
    # the bill's own rows, by hand: 16 bytes a parameter over the shards, fp32 logits
    assert bill.state_gib == 16 * bill.n_params / bill.shards / GIB
    assert (
        bill.logits_gib == 4 * bill.micro_batch * bill.seq_len * bill.vocab_size / GIB
    )
    sbh = bill.seq_len * bill.micro_batch * bill.d_model
    A = sbh * (34 + 5 * bill.n_heads * bill.seq_len / bill.d_model)
    assert bill.activations_gib == pytest.approx(bill.n_layers * A / GIB, rel=1e-12)


@given(st.integers(0, 5000))
@examples(20)
def test_a_checkpoint_trace_adds_a_or_i_a_layer(seed):
    trace = cases.checkpoint_trace(seed)
    lb = trace.layer
    missed = set(cases.unwrapped_layers(trace.pattern, trace.n_layers))
    added = [
        b - a for a, b in zip((0.0, *trace.kept_gib), trace.kept_gib, strict=False)
    ]
    for i, x in enumerate(added):
        want = (lb.none if i in missed else lb.full) / GIB
        assert x == pytest.approx(want, rel=1e-9)
    assert cases.wrapping_saves_gib(trace) == pytest.approx(
        len(missed) * (lb.none - lb.full) / GIB
    )


@given(st.sampled_from(cases.PATTERNS), st.integers(1, 64))
@examples(30)
def test_unwrapped_layers(pattern, L):
    layers = cases.unwrapped_layers(pattern, L)
    assert set(layers) <= set(range(L)) and len(layers) >= (L > 1)
    if pattern in ("even", "odd"):
        assert all(i % 2 == (pattern == "odd") for i in layers)
    else:
        assert len(layers) == max(1, L // 4)


def test_the_trace_figure_draws_one_bar_a_layer():
    trace = cases.checkpoint_trace(2)
    fig = figures.checkpoint_trace(trace)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert len(heights) == trace.n_layers
    assert math.isclose(sum(heights), trace.kept_gib[-1], rel_tol=1e-9)


@pytest.mark.parametrize("bad", [-1, 2.5, "1", None, True])
def test_the_generators_reject_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        cases.memory_bill(bad)
    with pytest.raises(ValueError, match="seed"):
        cases.checkpoint_trace(bad)
