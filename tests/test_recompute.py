"""The recompute chapter's calculators (against Korthikanti et al.'s counts and
hand computations) and its torch experiments (against the formulas)."""

import math

import matplotlib
import pytest

from mlbook.common import memory
from mlbook.common import transformer as config
from mlbook.mfu.flops import n_params
from mlbook.recompute import formulas as recompute

matplotlib.use("Agg")

SHAPES = [  # (s, b, h, a, L)
    (4096, 1, 4096, 32, 32),  # Llama-2-7B at 4k (BRIEF section 4)
    (2048, 4, 1024, 16, 24),
    (512, 8, 768, 12, 12),
    (131072, 1, 16384, 128, 126),
    (16, 1, 64, 4, 1),
]


# --- the plans ---------------------------------------------------------------------


@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_full_plan_is_L_inputs_plus_one_layer(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    A = recompute.activation_bytes_per_layer(s, b, h, a, "none")
    input_bytes = 2 * s * b * h
    assert plans["full"].memory_bytes == L * input_bytes + A
    assert plans["full"].segments == L


@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_none_needs_the_most_memory(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    none = plans["none"].memory_bytes
    assert none == L * recompute.activation_bytes_per_layer(s, b, h, a)
    assert plans["selective"].memory_bytes < none
    if L > 1:
        assert none == max(p.memory_bytes for p in plans.values())
    else:  # one layer: a checkpoint keeps the input on top of everything
        assert (
            plans["full"].memory_bytes
            == plans["sqrt"].memory_bytes
            == none + 2 * s * b * h
        )


@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_selective_and_sqrt_plans(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    assert plans["selective"].memory_bytes == L * 34 * s * b * h
    c = math.ceil(math.sqrt(L))
    A = recompute.activation_bytes_per_layer(s, b, h, a)
    assert plans["sqrt"].segments == c
    assert plans["sqrt"].memory_bytes == c * 2 * s * b * h + math.ceil(L / c) * A


def test_extra_flops_fractions():
    plans = recompute.checkpoint_plans(4096, 1, 4096, 32, 32)
    assert plans["none"].extra_flops_fraction == 0
    assert (
        plans["full"].extra_flops_fraction
        == plans["sqrt"].extra_flops_fraction
        == 1 / 3
    )
    # s = h, d_ff = 4h: core share 4h^2 / (8h^2 + 16h^2 + 4h^2) = 1/7
    assert recompute.attention_core_fraction(4096, 4096) == pytest.approx(1 / 7)
    assert plans["selective"].extra_flops_fraction == pytest.approx(1 / 21)
    assert list(plans) == list(recompute.STRATEGIES)


def test_core_fraction_grows_with_s_and_falls_with_h():
    fr = [
        recompute.attention_core_fraction(s, 4096)
        for s in (512, 2048, 8192, 32768, 2**20)
    ]
    assert fr == sorted(fr) and fr[-1] < 1
    assert recompute.attention_core_fraction(
        8192, 8192
    ) < recompute.attention_core_fraction(8192, 4096)
    # a wider MLP dilutes the core
    assert recompute.attention_core_fraction(
        4096, 4096, 6
    ) < recompute.attention_core_fraction(4096, 4096, 4)


def test_layer_forward_flops():
    s, b, h = 128, 4, 256
    # by hand: per token 8h^2 + 4h(4h) + 4sh = 24 * 65,536 + 4 * 128 * 256 = 1,703,936,
    # times b s = 512 tokens
    assert recompute.layer_forward_flops(s, b, h) == 872_415_232
    core = 4 * b * s * s * h
    assert core / recompute.layer_forward_flops(s, b, h) == pytest.approx(
        recompute.attention_core_fraction(s, h)
    )


def test_seq_len_for_selective_overhead():
    h = 4096
    s_star = recompute.seq_len_for_selective_overhead(h, 0.10)
    assert s_star == pytest.approx(72 * 0.1 * h / 2.8)
    assert recompute.selective_extra_flops_fraction(math.floor(s_star), h) < 0.10
    assert recompute.selective_extra_flops_fraction(math.ceil(s_star), h) > 0.10
    assert recompute.seq_len_for_selective_overhead(2 * h, 0.10) == pytest.approx(
        2 * s_star
    )


def test_optimal_segments():
    L, A, input_bytes = 64, 8.0, 2.0
    c_star = recompute.optimal_segments(L, A, input_bytes)
    assert c_star == pytest.approx(16)

    def cont(c):
        return c * input_bytes + L / c * A

    assert cont(c_star) <= min(cont(c_star * 0.9), cont(c_star * 1.1))
    best = recompute.best_segments(L, A, input_bytes)
    mem = [
        recompute.segments_memory_bytes(c, L, A, input_bytes) for c in range(1, L + 1)
    ]
    assert recompute.segments_memory_bytes(best, L, A, input_bytes) == min(mem)
    # Llama-2-7B at 4k: a layer keeps 97x its input, c* > L, so checkpoint every layer
    A7 = recompute.activation_bytes_per_layer(4096, 1, 4096, 32)
    I7 = recompute.activation_bytes_per_layer(4096, 1, 4096, 32, "full")
    assert (
        recompute.optimal_segments(32, A7, I7) > 32
        and recompute.best_segments(32, A7, I7) == 32
    )
    assert (
        recompute.segments_memory_bytes(32, 32, A7, I7)
        == recompute.checkpoint_plans(4096, 1, 4096, 32, 32)["full"].memory_bytes
    )


def test_selective_vs_sqrt_depends_on_seq_len():
    h, a, L = 4096, 32, 32
    cross = recompute.selective_sqrt_crossover_seq_len(h, a, L)
    below, above = math.floor(cross), math.ceil(cross)
    lo = recompute.checkpoint_plans(below, 1, h, a, L)
    hi = recompute.checkpoint_plans(above, 1, h, a, L)
    assert lo["sqrt"].memory_bytes < lo["selective"].memory_bytes
    assert hi["selective"].memory_bytes < hi["sqrt"].memory_bytes
    assert 2048 < cross < 4096
    assert (
        recompute.selective_sqrt_crossover_seq_len(64, 4, 1) == 0.0
    )  # one layer: sqrt never wins


def test_block_items_reproduce_korthikanti():
    s, b, h, a = 1024, 2, 1024, 16
    items = recompute.block_saved_items(s, b, h, a)
    assert sum(items.values()) == recompute.activation_bytes_per_layer(s, b, h, a)
    square = sum(items[k] for k in recompute.SCORE_ITEMS)
    assert square == 5 * a * s * s * b
    # fp32 without dropout: 4 bytes a value, no masks, probabilities stored once
    fp32 = recompute.block_saved_items(s, b, h, a, act_bytes=4, dropout=False)
    assert sum(fp32.values()) == 4 * 16 * s * b * h + 4 * a * s * s * b


def test_activation_formula_known_values():
    # Korthikanti et al. 2022, Table 2, by hand at s=2048, b=1, h=1024, a=16:
    # sbh = 2,097,152; 5as/h = 5 * 16 * 2048 / 1024 = 160, so A = 194 sbh
    s, b, h, a = 2048, 1, 1024, 16
    assert recompute.activation_bytes_per_layer(s, b, h, a) == 194 * 2_097_152
    assert (
        recompute.activation_bytes_per_layer(s, b, h, a, "selective") == 34 * 2_097_152
    )
    assert recompute.activation_bytes_per_layer(s, b, h, a, "full") == 2 * 2_097_152


def test_llama2_7b_at_4k_reproduces_the_brief():
    # BRIEF section 4 / Korthikanti's formula: 97 GiB none, 17 GiB selective,
    # 18.4 GiB sqrt(L), 4.0 GiB full. By hand, sbh = 2^24, a s^2 b = 2^29:
    # A = 34 * 2^24 + 5 * 2^29 = 3.03125 GiB.
    gib = 2**30
    plans = recompute.checkpoint_plans(4096, 1, 4096, 32, 32)
    assert plans["none"].memory_bytes / gib == 97.0  # 32 * 3.03125
    assert plans["selective"].memory_bytes / gib == 17.0  # 32 * 34 * 2^24
    assert plans["sqrt"].memory_bytes / gib == 18.375  # 6 * 2^25 + 6 * A
    assert plans["full"].memory_bytes / gib == 4.03125  # 32 * 2^25 + A
    # and it is about as much as the model state (16 bytes a parameter,
    # 6,738,415,616 parameters)
    state = memory.model_state_bytes(n_params(config.LLAMA2_7B))
    assert state / gib == pytest.approx(16 * 6_738_415_616 / gib)
    assert 0.9 < plans["none"].memory_bytes / state < 1.1


def test_llama2_own_block_count_by_hand():
    # Llama 2's block: 16-bit, no dropout, SwiGLU of width 11008, fused norms,
    # scores materialised. By hand, in units of sbh: norms 2 + 2, QKV input 2,
    # Q and K 4, V 2, output projection input 2, MLP input 2, and four 11008-wide
    # tensors 4 * 2 * 11008/4096 = 21.5: 37.5 sbh; the softmax output 2 a s^2 b
    # (P V reads it; no dropped-out copy, no masks).
    m = 11008 / 4096
    c = recompute.saved_coefficients(dropout=False, mlp="swiglu", d_ff_mult=m)
    assert (c.linear, c.square) == (37.5, 2)
    lb = recompute.layer_bytes(
        4096, 1, 4096, 32, dropout=False, mlp="swiglu", d_ff_mult=m
    )
    assert lb.none == 37.5 * 2**24 + 2 * 2**29  # 1.5859375 GiB
    assert lb.selective == 37.5 * 2**24 and lb.full == 2 * 2**24
    plans = recompute.checkpoint_plans(
        4096, 1, 4096, 32, 32, d_ff_mult=m, mlp="swiglu", layer=lb
    )
    assert plans["none"].memory_bytes / 2**30 == 50.75
    assert plans["full"].memory_bytes / 2**30 == 32 * 2 * 2**24 / 2**30 + 1.5859375


def test_saved_coefficients_default_is_the_paper():
    assert recompute.saved_coefficients() == recompute.Coefficients(34, 5)
    # fp32 without dropout: 4 bytes a value, no masks, probabilities stored once:
    # (2+2+4+2+2+2+2+8+8) * 2 = 64 sbh and 4 a s^2 b
    assert recompute.saved_coefficients(
        act_bytes=4, dropout=False
    ) == recompute.Coefficients(64, 4)
    assert recompute.layer_bytes(64, 2, 128, 4) == recompute.LayerBytes(
        *(
            recompute.activation_bytes_per_layer(64, 2, 128, 4, m)
            for m in recompute.RECOMPUTE_MODES
        )
    )


def test_swiglu_flops():
    # three h x d_ff matmuls: 6 h d_ff per token, so a SwiGLU MLP of width d equals
    # a GELU MLP of width 1.5 d in FLOPs
    assert recompute.layer_forward_flops(
        8, 1, 64, 2.0, "swiglu"
    ) == recompute.layer_forward_flops(8, 1, 64, 3.0)
    assert recompute.attention_core_fraction(
        4096, 4096, 11008 / 4096, "swiglu"
    ) == pytest.approx(4 * 4096 / (8 * 4096 + 6 * 11008 + 4 * 4096))


# moved from tests/test_memory.py with activation_bytes_per_layer


def test_attention_mlp_norm_split():
    # attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh (the paper's per-part sums)
    s, b, h, a = 512, 3, 256, 8
    sbh = s * b * h
    total = recompute.activation_bytes_per_layer(s, b, h, a)
    assert total == (11 * sbh + 5 * a * s * s * b) + 19 * sbh + 4 * sbh


def test_activation_is_linear_in_b_and_order_of_strategies():
    for s in (128, 1024, 8192):
        none, sel, full = (
            recompute.activation_bytes_per_layer(s, 1, 1024, 16, r)
            for r in ("none", "selective", "full")
        )
        assert none > sel > full
        assert recompute.activation_bytes_per_layer(s, 4, 1024, 16) == 4 * none


def test_score_term_grows_as_s_squared():
    h, a = 1024, 16

    def score(s):
        return recompute.activation_bytes_per_layer(
            s, 1, h, a
        ) - recompute.activation_bytes_per_layer(s, 1, h, a, "selective")

    assert score(2048) == 4 * score(1024)
    assert math.isclose(score(1024), 5 * a * 1024**2)


# --- bad input ------------------------------------------------------------------------


def test_other_bad_input():
    """What the numeric checks (tests/test_recompute_properties.py, every
    argument of every calculator) do not reach: heads that do not divide the
    width, bounds between arguments, records and choices."""
    with pytest.raises(ValueError, match="a=3 must divide h=64"):
        recompute.activation_bytes_per_layer(16, 1, 64, 3)
    with pytest.raises(ValueError, match="a=5 must divide h=64"):
        recompute.checkpoint_plans(16, 1, 64, 5, 2)
    with pytest.raises(ValueError, match="overhead must be below 1/3"):
        recompute.seq_len_for_selective_overhead(4096, 0.4)
    with pytest.raises(ValueError, match="cannot exceed"):
        recompute.segments_memory_bytes(5, 4, 10, 1)
    with pytest.raises(ValueError, match="a=3 must divide h=64"):
        recompute.selective_sqrt_crossover_seq_len(64, 3, 8)
    with pytest.raises(ValueError, match="a=3 must divide"):
        recompute.block_saved_items(16, 1, 64, 3)
    with pytest.raises(ValueError, match="strategy must be one of"):
        recompute.Plan("half", 1.0, 0.0)
    with pytest.raises(ValueError, match="mlp must be one of"):
        recompute.block_saved_items(16, 1, 64, 4, mlp="relu")
    with pytest.raises(ValueError, match="layer must be a LayerBytes"):
        recompute.checkpoint_plans(16, 1, 64, 4, 2, layer=(3, 2, 1))
    with pytest.raises(ValueError, match="full <= selective <= none"):
        recompute.LayerBytes(none=1.0, selective=2.0, full=0.5)


# --- figures --------------------------------------------------------------------------


def test_figures_have_labelled_axes():
    from mlbook.recompute import figures as figs

    for fig in (
        figs.memory_vs_seq_len(4096, 32, 32),
        figs.selective_overhead_vs_seq_len(),
    ):
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel()
        matplotlib.pyplot.close(fig)


# --- measured counterparts (torch, CPU) -----------------------------------------------

torch = pytest.importorskip("torch")
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config  # noqa: E402
from mlbook.recompute import experiments as recompute_demo  # noqa: E402

CFG = tiny_config(n_layers=2, d_model=64, n_heads=4, vocab_size=128)


@pytest.mark.parametrize(
    "dtype,dropout,impl",
    [
        ("fp32", 0.0, "math"),
        ("fp32", 0.1, "math"),
        ("bf16", 0.0, "math"),
        ("bf16", 0.1, "math"),
        ("fp32", 0.0, "sdpa"),
        ("bf16", 0.0, "sdpa"),
    ],
)
def test_saved_bytes_match_formula(dtype, dropout, impl):
    s, b = 32, 2
    r = recompute_demo.compare_block(CFG, s, b, dtype, dropout, "cpu", impl)
    # within the stated tolerance, and exactly once the named extras are taken off
    assert abs(r.ratio - 1) <= recompute_demo.SAVED_BYTES_TOLERANCE
    assert r.residual_bytes == 0
    # two LayerNorms, each a mean and an inverse std per token, in the activation dtype
    assert r.extras["norm statistics"] == 2 * 2 * b * s * r.act_bytes
    if impl == "math":
        assert r.extras["causal mask"] == s * s  # one bool per (query, key)
    else:
        assert "causal mask" not in r.extras


def test_paper_shape_block_agrees_in_bf16():
    # bf16 is the paper's 2 bytes; on a CPU the dropout masks are 2 bytes, not 1
    s, b, h, a = 64, 2, 128, 4
    cfg = tiny_config(n_layers=1, d_model=h, n_heads=a)
    r = recompute_demo.compare_block(cfg, s, b, "bf16", 0.1)
    paper = recompute.activation_bytes_per_layer(s, b, h, a)
    masks = 2 * s * b * h + a * s * s * b  # the three masks, one extra byte a value
    assert r.formula_bytes == paper + masks


def test_dropout_mask_bytes_and_bad_input():
    assert recompute_demo.dropout_mask_bytes("cuda", 2) == 1
    assert recompute_demo.dropout_mask_bytes("cpu", 4) == 4
    with pytest.raises(ValueError, match="device"):
        recompute_demo.dropout_mask_bytes("tpu", 2)
    with pytest.raises(ValueError, match="dtype"):
        recompute_demo.compare_block(CFG, 8, 1, "fp16")
    with pytest.raises(ValueError, match="GELU MLP"):
        recompute_demo.compare_block(
            tiny_config(n_layers=1, d_model=64, n_heads=4, mlp="swiglu"), 8, 1
        )


def test_use_strategy_restores_block_fn_and_rejects_bad_names():
    model = GPT(CFG, max_seq_len=16)
    with recompute_demo.use_strategy(model, "full"):
        assert model.block_fn is recompute_demo.full_block
    assert model.block_fn is None
    with pytest.raises(ValueError, match="strategy must be one of"):
        with recompute_demo.use_strategy(model, "sqrt"):
            pass


def test_recompute_gives_the_same_gradients():
    torch.manual_seed(0)
    model = GPT(CFG, max_seq_len=32)
    idx, tgt = random_batch(CFG, 2, 32)
    grads = {}
    for strategy in recompute_demo.STRATEGIES:
        with recompute_demo.use_strategy(model, strategy):
            model.zero_grad(set_to_none=True)
            model(idx, tgt)[1].backward()
        grads[strategy] = [p.grad.clone() for p in model.parameters()]
    for strategy in ("selective", "full"):
        for g, ref in zip(grads[strategy], grads["none"], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def measured():
    return recompute_demo.measure_strategies(
        CFG, 32, 2, "cpu", rounds=1, log=lambda *a, **k: None
    )


def test_full_recompute_counts_4_3_of_the_blocks(measured):
    s, b, L, h = 32, 2, CFG.n_layers, CFG.d_model
    head = recompute_demo.head_flops(CFG, s, b)
    none, whole = measured["none"].flops, measured.full_whole_forward_flops
    # the checkpointed blocks run exactly one more forward: 4/3 of their FLOPs
    assert (whole - head) * 3 == (none - head) * 4
    blocks_fwd = measured.forward_flops - recompute_demo.head_flops(
        CFG, s, b, backward=False
    )
    assert blocks_fwd == L * recompute.layer_forward_flops(s, b, h)
    assert whole - none == blocks_fwd
    # the head is not recomputed, so the whole step grows a little less than 4/3
    assert 1 < whole / none < 4 / 3


def test_default_full_recompute_skips_each_blocks_last_matmul(measured):
    s, b, L, h = 32, 2, CFG.n_layers, CFG.d_model
    last_mm = 2 * b * s * CFG.d_ff * h
    assert measured["full"].flops == measured.full_whole_forward_flops - L * last_mm


def test_selective_recomputes_exactly_the_attention_core(measured):
    s, b, L, h = 32, 2, CFG.n_layers, CFG.d_model
    assert measured["selective"].flops - measured["none"].flops == L * 4 * b * s * s * h


def test_measured_memory_falls_with_recompute(measured):
    kept = [measured[k].kept_bytes for k in ("none", "selective", "full")]
    assert kept[0] > kept[1] > kept[2] > 0
    assert measured["full"].peak_bytes < measured["none"].peak_bytes
    for k in recompute_demo.STRATEGIES:
        assert len(measured[k].step_s) == 1 and measured[k].median_s > 0


def test_measured_figure(measured):
    from mlbook.recompute import figures as figs

    fig = figs.measured_strategies(measured, "CPU test")
    assert all(ax.get_ylabel() for ax in fig.axes)
    matplotlib.pyplot.close(fig)


def test_measure_strategies_logs_only_where_asked(capsys):
    lines = []
    recompute_demo.measure_strategies(
        CFG, 8, 1, "cpu", rounds=1, log=lambda line, **_: lines.append(line)
    )
    assert any("timing round 1/1" in line for line in lines)
    recompute_demo.measure_strategies(CFG, 8, 1, "cpu", rounds=1)  # no log
    assert capsys.readouterr().out == ""


def test_measure_strategies_rejects_bad_settings_and_restores_threads():
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="rounds"):
        recompute_demo.measure_strategies(CFG, 16, 1, rounds=0)
    with pytest.raises(ValueError, match="cpu_threads"):
        recompute_demo.measure_strategies(CFG, 16, 1, cpu_threads=0)
    assert torch.get_num_threads() == threads


# --- a Llama-shaped block -------------------------------------------------------------

LLAMA_BLK = config.TransformerConfig(
    n_layers=1,
    d_model=64,
    n_heads=4,
    d_ff=172,
    vocab_size=128,
    mlp="swiglu",
    name="Llama-shaped block",
)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_llama_block_saved_bytes_match_its_count(dtype):
    s, b = 32, 2
    r = recompute_demo.compare_llama_block(LLAMA_BLK, s, b, dtype)
    assert abs(r.ratio - 1) <= recompute_demo.SAVED_BYTES_TOLERANCE
    assert r.residual_bytes == 0
    # two RMSNorms, one fp32 inverse RMS per token each; the bool causal mask
    assert r.extras == {"norm statistics": 2 * b * s * 4, "causal mask": s * s}
    # by hand, in values: norms' inputs 2 sbh, QKV input 1, Q and K 2, V 1,
    # output projection input 1, MLP input 1 (8 sbh); four s b d_ff tensors;
    # the softmax output a s^2 b
    act = 2 if dtype == "bf16" else 4
    assert r.formula_bytes == act * (8 * s * b * 64 + 4 * s * b * 172 + 4 * s * s * b)


def test_fused_rmsnorm_matches_the_definition_and_its_gradient():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    norm = recompute_demo.RMSNorm(8, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), want)
    assert torch.autograd.gradcheck(
        lambda x, w: recompute_demo.FusedRMSNormFn.apply(x, w, 1e-6), (x, norm.weight)
    )


def test_llama_block_rejects_a_gelu_config():
    with pytest.raises(ValueError, match="SwiGLU"):
        recompute_demo.compare_llama_block(CFG, 8, 1)
    with pytest.raises(ValueError, match="SwiGLU"):
        recompute_demo.LlamaBlock(CFG, max_seq_len=8)


def test_flop_check_is_exact(measured):
    fc = recompute_demo.flop_check(measured)
    assert fc.exact
    assert fc.blocks_ratio == pytest.approx(4 / 3, rel=1e-12)  # one more forward of 3
    assert 1 < fc.whole_ratio < 4 / 3 and fc.default_ratio < fc.whole_ratio
    # at s = 32, h = 64 (GELU, d_ff = 4h) the core is
    # 4sh / (24h^2 + 4sh) = 8192 / 106496 of a forward; a third of that is selective's
    # share of the blocks' training FLOPs
    assert fc.selective_share == pytest.approx(8192 / 106496 / 3, rel=1e-12)


def test_llama3_405b_block_with_grouped_kv():
    """By hand: Llama 3 405B's block (d_ff = 3.25 h, no
    dropout) keeps 16 + 8 x 3.25 = 42 sbh with K and V at every head; with K
    and V at 8 of 128 heads, Q and K 2 + 2/16 and V 2/16, so 42 - 2 x 2 x 15/16 =
    38.25 sbh; the softmax output 2 a s^2 b either way."""
    llama = dict(dropout=False, mlp="swiglu", d_ff_mult=3.25)
    assert recompute.saved_coefficients(**llama) == recompute.Coefficients(42, 2)
    assert recompute.saved_coefficients(
        **llama, kv_fraction=8 / 128
    ) == recompute.Coefficients(38.25, 2)
    with pytest.raises(ValueError, match="kv_fraction must"):
        recompute.saved_coefficients(kv_fraction=0)
