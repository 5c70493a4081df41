"""Property tests for the MFU chapter's calculators (mlbook.mfu.flops and
mlbook.mfu.formulas): for any valid shape and cluster they return finite
numbers that move the way the formula says, and for any bad argument they
raise a ValueError that names it."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common.transformer import TransformerConfig
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu

PROPERTY_COVERS = {
    "mlbook.mfu.flops.attention_params_per_layer",
    "mlbook.mfu.flops.mlp_params_per_layer",
    "mlbook.mfu.flops.matmul_params",
    "mlbook.mfu.flops.n_params",
    "mlbook.mfu.flops.attention_flops_per_token",
    "mlbook.mfu.flops.flops_per_token",
    "mlbook.mfu.flops.six_nd",
    "mlbook.mfu.flops.attention_share",
    "mlbook.mfu.formulas.mfu",
    "mlbook.mfu.formulas.hfu",
    "mlbook.mfu.formulas.mfu_from_six_nd",
    "mlbook.mfu.formulas.max_tokens_per_s",
    "mlbook.mfu.formulas.training_days",
    "mlbook.mfu.formulas.nanogpt_estimate_mfu",
}

FEW = examples(50)


@st.composite
def configs(draw):
    n_heads = draw(st.integers(1, 128))
    group = draw(
        st.sampled_from([d for d in range(1, n_heads + 1) if n_heads % d == 0])
    )
    return TransformerConfig(
        n_layers=draw(st.integers(1, 200)),
        d_model=n_heads * draw(st.sampled_from([8, 16, 32, 64, 128, 256])),
        n_heads=n_heads,
        n_kv_heads=n_heads // group,
        d_ff=draw(st.integers(1, 100_000)),
        vocab_size=draw(st.integers(1, 300_000)),
        mlp=draw(st.sampled_from(["swiglu", "gelu"])),
        tied_embeddings=draw(st.booleans()),
    )


seq_lens = st.integers(1, 1_000_000)
positive_floats = st.floats(1e-3, 1e15)
peaks = st.floats(1e9, 1e16)
gpu_counts = st.integers(1, 100_000)
fractions = st.floats(1e-6, 1.0)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_POSITIVE_INT = NOT_POSITIVE + [1.5, 2.0]
not_positive = st.sampled_from(NOT_POSITIVE)
not_positive_int = st.sampled_from(NOT_POSITIVE_INT)
not_a_config = st.sampled_from([None, "Llama-2-7B", 7, {"n_layers": 32}])


def _raises_naming(name, fn, *args, **kw):
    with pytest.raises(ValueError, match=name):
        fn(*args, **kw)


# --- parameter counts ---------------------------------------------------------------


@FEW
@given(configs())
def test_parameter_counts_are_positive_and_nested(cfg):
    attn, mlp = flops.attention_params_per_layer(cfg), flops.mlp_params_per_layer(cfg)
    h = cfg.d_model
    # Q, O are h x h; K, V between one head's width and h wide
    assert 2 * h * h + 2 * h * cfg.head_dim <= attn <= 4 * h * h
    assert mlp == (3 if cfg.mlp == "swiglu" else 2) * h * cfg.d_ff
    n_mm = flops.matmul_params(cfg)
    assert n_mm == cfg.n_layers * (attn + mlp) + cfg.vocab_size * h
    assert flops.n_params(cfg) > n_mm  # norm gains, and the embedding unless tied


@FEW
@given(configs())
def test_parameter_counts_grow_with_every_dimension(cfg):
    bigger = [
        cfg.scaled(n_layers=cfg.n_layers + 1),
        cfg.scaled(d_ff=cfg.d_ff + 1),
        cfg.scaled(vocab_size=cfg.vocab_size + 1),
    ]
    for b in bigger:
        assert flops.matmul_params(b) > flops.matmul_params(cfg)
        assert flops.n_params(b) > flops.n_params(cfg)
    assert flops.mlp_params_per_layer(
        cfg.scaled(d_ff=cfg.d_ff + 1)
    ) > flops.mlp_params_per_layer(cfg)
    mha = cfg.scaled(
        n_kv_heads=cfg.n_heads
    )  # grouped-query attention only removes weights
    assert flops.attention_params_per_layer(mha) >= flops.attention_params_per_layer(
        cfg
    )
    assert flops.n_params(cfg.scaled(tied_embeddings=True)) <= flops.n_params(
        cfg.scaled(tied_embeddings=False)
    )


@FEW
@given(
    not_a_config,
    st.sampled_from(
        [
            flops.attention_params_per_layer,
            flops.mlp_params_per_layer,
            flops.matmul_params,
            flops.n_params,
        ]
    ),
)
def test_parameter_counts_need_a_config(bad, fn):
    _raises_naming("cfg", fn, bad)


# --- FLOPs a token ------------------------------------------------------------------


@FEW
@given(configs(), seq_lens)
def test_flops_per_token_grow_with_s_and_train_is_three_forwards(cfg, s):
    fwd = flops.flops_per_token(cfg, s, "forward")
    train = flops.flops_per_token(cfg, s)
    assert train == 3 * fwd and flops.flops_per_token(cfg, s, recompute=True) == 4 * fwd
    assert flops.flops_per_token(cfg, s + 1) > train
    a = flops.attention_flops_per_token(cfg, s)
    assert flops.attention_flops_per_token(cfg, 2 * s) == 2 * a  # linear in s
    assert flops.attention_flops_per_token(cfg.scaled(n_layers=cfg.n_layers + 1), s) > a
    assert fwd == 2 * flops.matmul_params(cfg) + a


@FEW
@given(configs(), seq_lens)
def test_attention_share_is_a_fraction_growing_with_s(cfg, s):
    share = flops.attention_share(cfg, s)
    assert 0 < share < 1
    assert flops.attention_share(cfg, s + 1) > share


@FEW
@given(configs(), not_positive_int)
def test_seq_len_must_be_a_positive_int(cfg, bad):
    for fn in (
        flops.attention_flops_per_token,
        flops.flops_per_token,
        flops.attention_share,
    ):
        _raises_naming("seq_len", fn, cfg, bad)


@FEW
@given(not_a_config, seq_lens)
def test_flops_need_a_config(bad, s):
    for fn in (
        flops.attention_flops_per_token,
        flops.flops_per_token,
        flops.attention_share,
    ):
        _raises_naming("cfg", fn, bad, s)


@FEW
@given(
    configs(),
    st.sampled_from(["backward", "", None, 3]),
    st.sampled_from([1, 0, "yes", None]),
)
def test_mode_and_recompute_are_checked(cfg, bad_mode, bad_flag):
    _raises_naming("mode", flops.flops_per_token, cfg, 128, bad_mode)
    _raises_naming("recompute", flops.flops_per_token, cfg, 128, "train", bad_flag)


@FEW
@given(positive_floats, positive_floats)
def test_six_nd_grows_with_n_and_d(n, d):
    c = flops.six_nd(n, d)
    assert math.isfinite(c) and c > 0
    assert flops.six_nd(2 * n, d) > c and flops.six_nd(n, 2 * d) > c


@FEW
@given(not_positive)
def test_six_nd_names_its_bad_argument(bad):
    _raises_naming("n_params", flops.six_nd, bad, 1e12)
    _raises_naming("tokens", flops.six_nd, 1e9, bad)


# --- MFU, HFU -----------------------------------------------------------------------


@FEW
@given(configs(), seq_lens, peaks, gpu_counts, fractions)
def test_mfu_is_the_fraction_of_the_100_percent_throughput(cfg, s, peak, g, frac):
    top = mfu.max_tokens_per_s(cfg, s, peak, g)
    assert math.isfinite(top) and top > 0
    u = mfu.mfu(frac * top, cfg, s, peak, g)
    assert u == pytest.approx(frac, rel=1e-9)
    assert mfu.mfu(frac * top / 2, cfg, s, peak, g) < u  # grows with tokens/s
    assert mfu.mfu(frac * top, cfg, s, 2 * peak, g) < u  # falls with the peak
    assert mfu.mfu(frac * top, cfg, s, peak, g + 1) < u  # and with the GPU count
    assert mfu.max_tokens_per_s(cfg, s, peak, g + 1) > top
    assert mfu.max_tokens_per_s(cfg, s + 1, peak, g) < top


@FEW
@given(configs(), seq_lens, peaks, gpu_counts, st.floats(1e-6, 0.75))
def test_hfu_is_four_thirds_of_mfu_with_recompute(cfg, s, peak, g, frac):
    tokens = frac * mfu.max_tokens_per_s(cfg, s, peak, g)
    u = mfu.mfu(tokens, cfg, s, peak, g)
    assert mfu.hfu(tokens, cfg, s, peak, g) == pytest.approx(4 / 3 * u, rel=1e-9)
    assert mfu.hfu(tokens, cfg, s, peak, g, recompute=False) == pytest.approx(
        u, rel=1e-12
    )


@FEW
@given(configs(), seq_lens, peaks, gpu_counts, st.floats(1.0001, 100))
def test_mfu_above_one_is_refused(cfg, s, peak, g, over):
    tokens = over * mfu.max_tokens_per_s(cfg, s, peak, g)
    with pytest.raises(mfu.ImpossibleUtilisation):
        mfu.mfu(tokens, cfg, s, peak, g)
    with pytest.raises(mfu.ImpossibleUtilisation):
        mfu.hfu(tokens, cfg, s, peak, g)


MFU_ARGS = dict(tokens_per_s=1000.0, seq_len=4096, peak_flops_per_s=989e12, n_gpus=1)


@FEW
@given(
    st.sampled_from(["tokens_per_s", "peak_flops_per_s", "n_gpus", "seq_len"]),
    not_positive_int,
    st.sampled_from([mfu.mfu, mfu.hfu]),
    configs(),
)
def test_mfu_and_hfu_name_their_bad_argument(name, bad, fn, cfg):
    if name in ("tokens_per_s", "peak_flops_per_s"):
        assume(bad not in (1.5, 2.0))  # fine as a rate
    _raises_naming(name, fn, **(MFU_ARGS | {"cfg": cfg, name: bad}))
    _raises_naming("cfg", fn, **(MFU_ARGS | {"cfg": "7B"}))


@FEW
@given(st.sampled_from([1, 0, "yes", None]))
def test_hfu_recompute_is_a_flag(bad):
    from mlbook.common.transformer import LLAMA2_7B

    _raises_naming(
        "recompute", mfu.hfu, **(MFU_ARGS | {"cfg": LLAMA2_7B, "recompute": bad})
    )


@FEW
@given(st.floats(1e6, 1e12), peaks, gpu_counts, fractions)
def test_mfu_from_six_nd_is_linear_in_tokens(n, peak, g, frac):
    tokens = frac * g * peak / (6 * n)
    assert mfu.mfu_from_six_nd(n, tokens, peak, g) == pytest.approx(frac, rel=1e-9)
    assert mfu.mfu_from_six_nd(n, tokens / 2, peak, g) == pytest.approx(
        frac / 2, rel=1e-9
    )
    assert mfu.mfu_from_six_nd(n / 2, tokens, peak, g) < mfu.mfu_from_six_nd(
        n, tokens, peak, g
    )


@FEW
@given(
    st.sampled_from(["n_params", "tokens_per_s", "peak_flops_per_s", "n_gpus"]),
    not_positive,
)
def test_mfu_from_six_nd_names_its_bad_argument(name, bad):
    args = dict(
        n_params=7e9, tokens_per_s=1000.0, peak_flops_per_s=989e12, n_gpus=1
    ) | {name: bad}
    _raises_naming(name, mfu.mfu_from_six_nd, **args)


@FEW
@given(configs(), not_positive_int, not_positive)
def test_max_tokens_per_s_names_its_bad_argument(cfg, bad_int, bad):
    _raises_naming("n_gpus", mfu.max_tokens_per_s, cfg, 4096, 989e12, bad_int)
    _raises_naming("peak_flops_per_s", mfu.max_tokens_per_s, cfg, 4096, bad, 1)
    _raises_naming("seq_len", mfu.max_tokens_per_s, cfg, bad_int, 989e12, 1)
    _raises_naming("cfg", mfu.max_tokens_per_s, "7B", 4096, 989e12, 1)


# --- days ---------------------------------------------------------------------------


@FEW
@given(
    st.floats(1e6, 1e13),
    st.floats(1e9, 1e14),
    peaks,
    gpu_counts,
    st.floats(0.01, 0.99),
    st.floats(0, 1e13),
)
def test_training_days_move_the_right_way(n, d, peak, g, u, attn):
    days = mfu.training_days(n, d, peak, g, u, attention_flops_per_token=attn)
    assert math.isfinite(days) and days > 0
    assert mfu.training_days(n, d, peak, 2 * g, u, attn) == pytest.approx(
        days / 2, rel=1e-9
    )
    assert mfu.training_days(n, 2 * d, peak, g, u, attn) == pytest.approx(
        2 * days, rel=1e-9
    )
    assert mfu.training_days(n, d, peak, g, min(1.0, 1.01 * u), attn) < days
    assert mfu.training_days(2 * n, d, peak, g, u, attn) > days
    assert mfu.training_days(n, d, peak, g, u) <= days  # attention only adds FLOPs


@FEW
@given(
    st.sampled_from(
        [
            "n_params",
            "tokens",
            "peak_flops_per_s",
            "n_gpus",
            "mfu",
            "attention_flops_per_token",
        ]
    ),
    not_positive_int,
)
def test_training_days_names_its_bad_argument(name, bad):
    if name == "attention_flops_per_token":
        assume(bad not in (0, 1.5, 2.0))  # zero is the 6ND default, a float is fine
    if name in ("n_params", "tokens", "peak_flops_per_s"):
        assume(bad not in (1.5, 2.0))
    args = dict(
        n_params=8e9, tokens=15e12, peak_flops_per_s=989e12, n_gpus=1024, mfu=0.4
    ) | {name: bad}
    _raises_naming(name, mfu.training_days, **args)


# --- nanoGPT's convention -------------------------------------------------------------


@FEW
@given(configs(), seq_lens, fractions)
def test_nanogpt_estimate_is_mfu_on_one_a100(cfg, s, frac):
    a100 = 312e12
    tokens = frac * mfu.max_tokens_per_s(cfg, s, a100)
    est = mfu.nanogpt_estimate_mfu(
        flops.matmul_params(cfg), cfg.n_layers, cfg.n_heads, cfg.head_dim, s, tokens
    )
    assert est == pytest.approx(frac, rel=1e-9)
    assert (
        mfu.nanogpt_estimate_mfu(
            flops.matmul_params(cfg),
            cfg.n_layers,
            cfg.n_heads,
            cfg.head_dim,
            s,
            tokens / 2,
        )
        < est
    )


NANOGPT_ARGS = dict(
    n_params=124e6,
    n_layers=12,
    n_heads=12,
    head_dim=64,
    seq_len=1024,
    tokens_per_s=1e5,
    peak_flops_per_s=312e12,
)


@FEW
@given(st.sampled_from(list(NANOGPT_ARGS)), not_positive_int)
def test_nanogpt_estimate_names_its_bad_argument(name, bad):
    if name in ("n_params", "tokens_per_s", "peak_flops_per_s"):
        assume(bad not in (1.5, 2.0))
    _raises_naming(name, mfu.nanogpt_estimate_mfu, **(NANOGPT_ARGS | {name: bad}))
