"""Property tests for the recompute chapter's calculators (mlbook.recompute.formulas):
for any valid shape they return finite numbers that move the way the formulas say,
and for any bad argument they raise a ValueError that names it."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.recompute import formulas as rc

PROPERTY_COVERS = {
    "mlbook.recompute.formulas.activation_bytes_per_layer",
    "mlbook.recompute.formulas.layer_forward_flops",
    "mlbook.recompute.formulas.attention_core_fraction",
    "mlbook.recompute.formulas.selective_extra_flops_fraction",
    "mlbook.recompute.formulas.seq_len_for_selective_overhead",
    "mlbook.recompute.formulas.block_saved_items",
    "mlbook.recompute.formulas.saved_coefficients",
    "mlbook.recompute.formulas.layer_bytes",
    "mlbook.recompute.formulas.segments_memory_bytes",
    "mlbook.recompute.formulas.optimal_segments",
    "mlbook.recompute.formulas.sqrt_segments",
    "mlbook.recompute.formulas.best_segments",
    "mlbook.recompute.formulas.checkpoint_plans",
    "mlbook.recompute.formulas.selective_sqrt_crossover_seq_len",
}

FEW = examples(50)

seq_lens = st.integers(1, 1 << 17)
batches = st.integers(1, 64)
layers = st.integers(1, 200)
mults = st.floats(0.25, 16)
mlps = st.sampled_from(rc.MLP_KINDS)
byte_sizes = st.sampled_from([1, 2, 4, 8])
sizes = st.floats(1.0, 1e15)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]


@st.composite
def heads_and_width(draw):
    a = draw(st.integers(1, 128))
    return a, a * draw(st.sampled_from([8, 16, 32, 64, 128]))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# --- valid inputs: finite and monotone ------------------------------------------------


@FEW
@given(seq_lens, batches, heads_and_width())
def test_activation_bytes_order_and_growth(s, b, ah):
    a, h = ah
    none, sel, full = (
        rc.activation_bytes_per_layer(s, b, h, a, m) for m in rc.RECOMPUTE_MODES
    )
    assert full < sel < none and all(_finite(x) for x in (none, sel, full))
    assert rc.activation_bytes_per_layer(s + 1, b, h, a) > none  # grows with s
    assert rc.activation_bytes_per_layer(s, 2 * b, h, a) == 2 * none  # linear in b


@FEW
@given(seq_lens, batches, st.integers(1, 1 << 15), mults, mlps)
def test_layer_flops_grow_and_the_core_share_rises_with_s(s, b, h, m, mlp):
    f = rc.layer_forward_flops(s, b, h, m, mlp)
    assert _finite(f) and f > 0
    assert rc.layer_forward_flops(s + 1, b, h, m, mlp) > f
    assert rc.layer_forward_flops(s, b, h + 1, m, mlp) > f
    assert rc.layer_forward_flops(s, b, h, m * 2, mlp) > f
    share = rc.attention_core_fraction(s, h, m, mlp)
    assert 0 < share < 1
    assert rc.attention_core_fraction(s + 1, h, m, mlp) > share
    extra = rc.selective_extra_flops_fraction(s, h, m, mlp)
    assert extra == pytest.approx(share / 3) and 0 < extra < 1 / 3
    assert rc.attention_core_fraction(s, h, m, "swiglu") < rc.attention_core_fraction(
        s, h, m, "gelu"
    )


@FEW
@given(st.integers(1, 1 << 15), st.floats(1e-4, 0.33), mults)
def test_seq_len_for_overhead_inverts_the_share_and_grows(h, t, m):
    s = rc.seq_len_for_selective_overhead(h, t, m)
    assert _finite(s) and s > 0
    assert rc.seq_len_for_selective_overhead(h, min(t * 1.01, 0.333), m) >= s
    if s >= 1:  # the share at the returned (real) s is the target
        core = 4 * s * h
        assert core / (8 * h * h + 4 * h * m * h + core) / 3 == pytest.approx(
            t, rel=1e-9
        )


@FEW
@given(
    st.integers(1, 4096),
    batches,
    heads_and_width(),
    byte_sizes,
    byte_sizes,
    st.booleans(),
    mults,
    mlps,
)
def test_items_coefficients_and_layer_bytes_agree(s, b, ah, act, mask, dropout, m, mlp):
    a, h = ah
    items = rc.block_saved_items(s, b, h, a, act, mask, dropout, m, mlp)
    assert all(_finite(v) and v >= 0 for v in items.values())
    c = rc.saved_coefficients(act, mask, dropout, m, mlp)
    assert c.linear > 0 and c.square > 0
    assert sum(items.values()) == pytest.approx(
        c.linear * s * b * h + c.square * a * s * s * b
    )
    lb = rc.layer_bytes(s, b, h, a, act, mask, dropout, m, mlp)
    assert lb.full < lb.selective < lb.none == pytest.approx(sum(items.values()))
    assert rc.layer_bytes(s, b, h, a, 2 * act, mask, dropout, m, mlp).none > lb.none
    if not dropout:  # no masks: their size does not matter
        assert rc.block_saved_items(s, b, h, a, act, 2 * mask, dropout, m, mlp) == items


@FEW
@given(
    byte_sizes,
    st.booleans(),
    mults,
    mlps,
    st.floats(min_value=1 / 128, max_value=1.0),
)
def test_grouped_kv_keeps_less_k_and_v_only(act, dropout, m, mlp, kv):
    # K (for Q K^T) and V (for P V) are act bytes a value each at full width:
    # keeping them at a share kv of it saves 2 act (1 - kv) sbh, nothing else
    full = rc.saved_coefficients(act, 1, dropout, m, mlp)
    grouped = rc.saved_coefficients(act, 1, dropout, m, mlp, kv)
    assert grouped.square == full.square
    assert grouped.linear == pytest.approx(full.linear - 2 * act * (1 - kv))
    assert rc.saved_coefficients(act, 1, dropout, m, mlp, 1.0) == full


@FEW
@given(layers, sizes, sizes, st.data())
def test_segments(L, A, input_bytes, data):
    c = data.draw(st.integers(1, L))
    mem = rc.segments_memory_bytes(c, L, A, input_bytes)
    assert _finite(mem) and mem >= c * input_bytes
    assert (
        rc.segments_memory_bytes(c, L, 2 * A, input_bytes) >= mem
    )  # (>=: A may vanish beside c I in floats)
    c_star = rc.optimal_segments(L, A, input_bytes)
    assert c_star > 0 and rc.optimal_segments(L, 2 * A, input_bytes) > c_star
    best = rc.best_segments(L, A, input_bytes)
    assert 1 <= best <= L and rc.segments_memory_bytes(best, L, A, input_bytes) <= mem
    sq = rc.sqrt_segments(L)
    assert sq * sq >= L > (sq - 1) ** 2 and rc.sqrt_segments(L + 1) >= sq


@FEW
@given(seq_lens, batches, heads_and_width(), layers, mults, mlps)
def test_plans(s, b, ah, L, m, mlp):
    a, h = ah
    plans = rc.checkpoint_plans(s, b, h, a, L, m, mlp)
    assert list(plans) == list(rc.STRATEGIES)
    assert all(
        _finite(p.memory_bytes) and 0 <= p.extra_flops_fraction <= 1 / 3
        for p in plans.values()
    )
    assert plans["selective"].memory_bytes < plans["none"].memory_bytes
    if L > 1:
        assert plans["full"].memory_bytes < plans["none"].memory_bytes
    longer = rc.checkpoint_plans(s + 1, b, h, a, L, m, mlp)
    assert all(longer[k].memory_bytes > plans[k].memory_bytes for k in plans)


@FEW
@given(heads_and_width(), layers)
def test_crossover(ah, L):
    a, h = ah
    cross = rc.selective_sqrt_crossover_seq_len(h, a, L)
    assert _finite(cross) and cross >= 0
    assume(cross > 2)
    lo, hi = math.floor(cross) - 1, math.ceil(cross) + 1
    below, above = (
        rc.checkpoint_plans(lo, 1, h, a, L),
        rc.checkpoint_plans(hi, 1, h, a, L),
    )
    assert below["sqrt"].memory_bytes < below["selective"].memory_bytes
    assert above["selective"].memory_bytes < above["sqrt"].memory_bytes


# --- bad inputs: a ValueError that names the argument ---------------------------------

GOOD = dict(
    s=64,
    b=2,
    h=128,
    a=4,
    L=8,
    A=1e6,
    I=1e4,
    c=2,
    overhead=0.1,
    d_ff_mult=4.0,
    act_bytes=2,
    mask_bytes=1,
)
CALLS = {
    "activation_bytes_per_layer": (
        lambda k: rc.activation_bytes_per_layer(k["s"], k["b"], k["h"], k["a"]),
        ("s", "b", "h", "a"),
    ),
    "layer_forward_flops": (
        lambda k: rc.layer_forward_flops(k["s"], k["b"], k["h"], k["d_ff_mult"]),
        ("s", "b", "h", "d_ff_mult"),
    ),
    "attention_core_fraction": (
        lambda k: rc.attention_core_fraction(k["s"], k["h"], k["d_ff_mult"]),
        ("s", "h", "d_ff_mult"),
    ),
    "selective_extra_flops_fraction": (
        lambda k: rc.selective_extra_flops_fraction(k["s"], k["h"], k["d_ff_mult"]),
        ("s", "h", "d_ff_mult"),
    ),
    "seq_len_for_selective_overhead": (
        lambda k: rc.seq_len_for_selective_overhead(
            k["h"], k["overhead"], k["d_ff_mult"]
        ),
        ("h", "overhead", "d_ff_mult"),
    ),
    "block_saved_items": (
        lambda k: rc.block_saved_items(
            k["s"],
            k["b"],
            k["h"],
            k["a"],
            k["act_bytes"],
            k["mask_bytes"],
            d_ff_mult=k["d_ff_mult"],
        ),
        ("s", "b", "h", "a", "act_bytes", "mask_bytes", "d_ff_mult"),
    ),
    "saved_coefficients": (
        lambda k: rc.saved_coefficients(
            k["act_bytes"], k["mask_bytes"], d_ff_mult=k["d_ff_mult"]
        ),
        ("act_bytes", "mask_bytes", "d_ff_mult"),
    ),
    "layer_bytes": (
        lambda k: rc.layer_bytes(k["s"], k["b"], k["h"], k["a"], k["act_bytes"]),
        ("s", "b", "h", "a", "act_bytes"),
    ),
    "segments_memory_bytes": (
        lambda k: rc.segments_memory_bytes(k["c"], k["L"], k["A"], k["I"]),
        ("c", "L", "A", "I"),
    ),
    "optimal_segments": (
        lambda k: rc.optimal_segments(k["L"], k["A"], k["I"]),
        ("L", "A", "I"),
    ),
    "sqrt_segments": (lambda k: rc.sqrt_segments(k["L"]), ("L",)),
    "best_segments": (
        lambda k: rc.best_segments(k["L"], k["A"], k["I"]),
        ("L", "A", "I"),
    ),
    "checkpoint_plans": (
        lambda k: rc.checkpoint_plans(
            k["s"], k["b"], k["h"], k["a"], k["L"], k["d_ff_mult"]
        ),
        ("s", "b", "h", "a", "L", "d_ff_mult"),
    ),
    "selective_sqrt_crossover_seq_len": (
        lambda k: rc.selective_sqrt_crossover_seq_len(k["h"], k["a"], k["L"]),
        ("h", "a", "L"),
    ),
}
INTEGER_ARGS = {"s", "b", "h", "a", "L", "c", "act_bytes", "mask_bytes"}


@pytest.mark.parametrize("func", sorted(CALLS))
def test_every_numeric_argument_is_checked(func):
    call, args = CALLS[func]
    call(GOOD)  # the good values are good
    for arg in args:
        for bad in NOT_POSITIVE_INT if arg in INTEGER_ARGS else NOT_POSITIVE:
            with pytest.raises(ValueError, match=f"^{arg}[ =]"):
                call(GOOD | {arg: bad})


@FEW
@given(st.text(max_size=8).filter(lambda t: t not in rc.MLP_KINDS + rc.RECOMPUTE_MODES))
def test_choices_are_checked(bad):
    with pytest.raises(ValueError, match="^mlp must be one of"):
        rc.layer_forward_flops(8, 1, 64, mlp=bad)
    with pytest.raises(ValueError, match="^recompute must be one of"):
        rc.activation_bytes_per_layer(8, 1, 64, 4, recompute=bad)
    with pytest.raises(ValueError, match="^dropout must be True or False"):
        rc.block_saved_items(8, 1, 64, 4, dropout=bad)
