import math

import matplotlib
import pytest

from mlbook.common import transformer as config
from mlbook.common import memory
from mlbook.recompute import formulas as recompute

matplotlib.use("Agg")

SHAPES = [  # (s, b, h, a, L)
    (4096, 1, 4096, 32, 32),     # Llama-2-7B at 4k (BRIEF section 4)
    (2048, 4, 1024, 16, 24),
    (512, 8, 768, 12, 12),
    (131072, 1, 16384, 128, 126),
    (16, 1, 64, 4, 1),
]


# --- the plans ---------------------------------------------------------------------

@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_full_plan_is_L_inputs_plus_one_layer(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    A = memory.activation_bytes_per_layer(s, b, h, a, "none")
    I = 2 * s * b * h
    assert plans["full"].memory_bytes == L * I + A
    assert plans["full"].segments == L


@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_none_needs_the_most_memory(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    none = plans["none"].memory_bytes
    assert none == L * memory.activation_bytes_per_layer(s, b, h, a)
    assert plans["selective"].memory_bytes < none
    if L > 1:
        assert none == max(p.memory_bytes for p in plans.values())
    else:  # one layer: a checkpoint keeps the input on top of everything
        assert plans["full"].memory_bytes == plans["sqrt"].memory_bytes == none + 2 * s * b * h


@pytest.mark.parametrize("s,b,h,a,L", SHAPES)
def test_selective_and_sqrt_plans(s, b, h, a, L):
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    assert plans["selective"].memory_bytes == L * 34 * s * b * h
    c = math.ceil(math.sqrt(L))
    A = memory.activation_bytes_per_layer(s, b, h, a)
    assert plans["sqrt"].segments == c
    assert plans["sqrt"].memory_bytes == c * 2 * s * b * h + math.ceil(L / c) * A


def test_extra_flops_fractions():
    plans = recompute.checkpoint_plans(4096, 1, 4096, 32, 32)
    assert plans["none"].extra_flops_fraction == 0
    assert plans["full"].extra_flops_fraction == plans["sqrt"].extra_flops_fraction == 1 / 3
    # s = h, d_ff = 4h: core share 4h^2 / (8h^2 + 16h^2 + 4h^2) = 1/7
    assert recompute.attention_core_fraction(4096, 4096) == pytest.approx(1 / 7)
    assert plans["selective"].extra_flops_fraction == pytest.approx(1 / 21)
    assert list(plans) == list(recompute.STRATEGIES)


def test_core_fraction_grows_with_s_and_falls_with_h():
    fr = [recompute.attention_core_fraction(s, 4096) for s in (512, 2048, 8192, 32768, 2**20)]
    assert fr == sorted(fr) and fr[-1] < 1
    assert recompute.attention_core_fraction(8192, 8192) < recompute.attention_core_fraction(8192, 4096)
    # a wider MLP dilutes the core
    assert recompute.attention_core_fraction(4096, 4096, 6) < recompute.attention_core_fraction(4096, 4096, 4)


def test_layer_forward_flops():
    s, b, h = 128, 4, 256
    assert recompute.layer_forward_flops(s, b, h) == b * s * (24 * h * h + 4 * s * h)
    core = 4 * b * s * s * h
    assert core / recompute.layer_forward_flops(s, b, h) == pytest.approx(recompute.attention_core_fraction(s, h))


def test_seq_len_for_selective_overhead():
    h = 4096
    s_star = recompute.seq_len_for_selective_overhead(h, 0.10)
    assert s_star == pytest.approx(72 * 0.1 * h / 2.8)
    assert recompute.selective_extra_flops_fraction(math.floor(s_star), h) < 0.10
    assert recompute.selective_extra_flops_fraction(math.ceil(s_star), h) > 0.10
    assert recompute.seq_len_for_selective_overhead(2 * h, 0.10) == pytest.approx(2 * s_star)


def test_optimal_segments():
    L, A, I = 64, 8.0, 2.0
    c_star = recompute.optimal_segments(L, A, I)
    assert c_star == pytest.approx(16)
    def cont(c):
        return c * I + L / c * A
    assert cont(c_star) <= min(cont(c_star * 0.9), cont(c_star * 1.1))
    best = recompute.best_segments(L, A, I)
    mem = [recompute.segments_memory_bytes(c, L, A, I) for c in range(1, L + 1)]
    assert recompute.segments_memory_bytes(best, L, A, I) == min(mem)
    # Llama-2-7B at 4k: a layer keeps 97x its input, c* > L, so checkpoint every layer
    A7 = memory.activation_bytes_per_layer(4096, 1, 4096, 32)
    I7 = memory.activation_bytes_per_layer(4096, 1, 4096, 32, "full")
    assert recompute.optimal_segments(32, A7, I7) > 32 and recompute.best_segments(32, A7, I7) == 32
    assert recompute.segments_memory_bytes(32, 32, A7, I7) == recompute.checkpoint_plans(4096, 1, 4096, 32, 32)["full"].memory_bytes


def test_selective_vs_sqrt_depends_on_seq_len():
    h, a, L = 4096, 32, 32
    cross = recompute.selective_sqrt_crossover_seq_len(h, a, L)
    below, above = math.floor(cross), math.ceil(cross)
    lo = recompute.checkpoint_plans(below, 1, h, a, L)
    hi = recompute.checkpoint_plans(above, 1, h, a, L)
    assert lo["sqrt"].memory_bytes < lo["selective"].memory_bytes
    assert hi["selective"].memory_bytes < hi["sqrt"].memory_bytes
    assert 2048 < cross < 4096
    assert recompute.selective_sqrt_crossover_seq_len(64, 4, 1) == 0.0   # one layer: sqrt never wins


def test_block_items_reproduce_korthikanti():
    s, b, h, a = 1024, 2, 1024, 16
    items = recompute.block_saved_items(s, b, h, a)
    assert sum(items.values()) == memory.activation_bytes_per_layer(s, b, h, a)
    square = sum(items[k] for k in recompute.SCORE_ITEMS)
    assert square == 5 * a * s * s * b
    # fp32 without dropout: 4 bytes a value, no masks, probabilities stored once
    fp32 = recompute.block_saved_items(s, b, h, a, act_bytes=4, dropout=False)
    assert sum(fp32.values()) == 4 * 16 * s * b * h + 4 * a * s * s * b


# --- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize("args,match", [
    ((0, 1, 64, 4, 2), "s must"), ((16, 0, 64, 4, 2), "b must"), ((16, 1, -64, 4, 2), "h must"),
    ((16, 1, 64, 0, 2), "a must"), ((16, 1, 64, 4, 0), "L must"), ((16, 1, 64, 5, 2), "a=5 must divide h=64"),
    ((16.0, 1, 64, 4, 2), "s must"),
])
def test_plans_reject_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        recompute.checkpoint_plans(*args)


def test_other_bad_input():
    with pytest.raises(ValueError, match="h must"):
        recompute.attention_core_fraction(16, 0)
    with pytest.raises(ValueError, match="d_ff_mult"):
        recompute.attention_core_fraction(16, 64, d_ff_mult=0)
    with pytest.raises(ValueError, match="overhead must be below 1/3"):
        recompute.seq_len_for_selective_overhead(4096, 0.4)
    with pytest.raises(ValueError, match="overhead"):
        recompute.seq_len_for_selective_overhead(4096, 0)
    with pytest.raises(ValueError, match="cannot exceed"):
        recompute.segments_memory_bytes(5, 4, 10, 1)
    with pytest.raises(ValueError, match="A must"):
        recompute.optimal_segments(4, 0, 1)
    with pytest.raises(ValueError, match="a=3 must divide h=64"):
        recompute.selective_sqrt_crossover_seq_len(64, 3, 8)
    with pytest.raises(ValueError, match="a=3 must divide"):
        recompute.block_saved_items(16, 1, 64, 3)
    with pytest.raises(ValueError, match="act_bytes"):
        recompute.block_saved_items(16, 1, 64, 4, act_bytes=0)
    with pytest.raises(ValueError, match="strategy must be one of"):
        recompute.Plan("half", 1.0, 0.0)




# --- figures --------------------------------------------------------------------------

def test_figures_have_labelled_axes():
    from mlbook.recompute import figures as figs
    for fig in (figs.strategy_tradeoff(4096, 4096, 32, 32, 1), figs.segments_memory(4096, 4096, 32, 32, 1),
                figs.memory_vs_seq_len(4096, 32, 32), figs.selective_overhead_vs_seq_len()):
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel()
        matplotlib.pyplot.close(fig)


# --- measured counterparts (torch, CPU) ----------------------------------------------------

torch = pytest.importorskip("torch")
from mlbook.recompute import experiments as recompute_demo  # noqa: E402
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config  # noqa: E402

CFG = tiny_config(n_layers=2, d_model=64, n_heads=4, vocab_size=128)


@pytest.mark.parametrize("dtype,dropout,impl", [
    ("fp32", 0.0, "math"), ("fp32", 0.1, "math"), ("bf16", 0.0, "math"), ("bf16", 0.1, "math"),
    ("fp32", 0.0, "sdpa"), ("bf16", 0.0, "sdpa"),
])
def test_saved_bytes_match_formula(dtype, dropout, impl):
    s, b = 32, 2
    r = recompute_demo.compare_block(CFG, s, b, dtype, dropout, "cpu", impl)
    # within the stated tolerance, and exactly once the named extras are taken off
    assert abs(r["measured_bytes"] / r["formula_bytes"] - 1) <= recompute_demo.SAVED_BYTES_TOLERANCE
    assert r["residual_bytes"] == 0
    assert r["extras"]["LayerNorm statistics"] == 2 * 2 * b * s * r["act_bytes"]
    if impl == "math":
        assert r["extras"]["causal mask"] == s * s
    else:
        assert "causal mask" not in r["extras"]


def test_paper_shape_block_agrees_in_bf16():
    # bf16 is the paper's 2 bytes; on a CPU the dropout masks are 2 bytes, not 1
    s, b, h, a = 64, 2, 128, 4
    cfg = tiny_config(n_layers=1, d_model=h, n_heads=a)
    r = recompute_demo.compare_block(cfg, s, b, "bf16", 0.1)
    paper = memory.activation_bytes_per_layer(s, b, h, a)
    masks = 2 * s * b * h + a * s * s * b          # the three masks, one extra byte a value
    assert r["formula_bytes"] == paper + masks


def test_dropout_mask_bytes_and_bad_input():
    assert recompute_demo.dropout_mask_bytes("cuda", 2) == 1
    assert recompute_demo.dropout_mask_bytes("cpu", 4) == 4
    with pytest.raises(ValueError, match="device"):
        recompute_demo.dropout_mask_bytes("tpu", 2)
    with pytest.raises(ValueError, match="dtype"):
        recompute_demo.compare_block(CFG, 8, 1, "fp16")
    with pytest.raises(ValueError, match="GELU MLP"):
        recompute_demo.compare_block(tiny_config(n_layers=1, d_model=64, n_heads=4, mlp="swiglu"), 8, 1)


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
        for g, ref in zip(grads[strategy], grads["none"]):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def measured():
    return recompute_demo.measure_strategies(CFG, 32, 2, "cpu", rounds=1, log=lambda *a, **k: None)


def test_full_recompute_counts_4_3_of_the_blocks(measured):
    s, b, L, h = 32, 2, CFG.n_layers, CFG.d_model
    head = recompute_demo.head_flops(CFG, s, b)
    none, whole = measured["none"].flops, measured["full_whole_forward_flops"]
    # the checkpointed blocks run exactly one more forward: 4/3 of their FLOPs
    assert (whole - head) * 3 == (none - head) * 4
    blocks_fwd = measured["forward_flops"] - recompute_demo.head_flops(CFG, s, b, backward=False)
    assert blocks_fwd == L * recompute.layer_forward_flops(s, b, h)
    assert whole - none == blocks_fwd
    # the head is not recomputed, so the whole step grows a little less than 4/3
    assert 1 < whole / none < 4 / 3


def test_default_full_recompute_skips_each_blocks_last_matmul(measured):
    s, b, L, h = 32, 2, CFG.n_layers, CFG.d_model
    last_mm = 2 * b * s * CFG.d_ff * h
    assert measured["full"].flops == measured["full_whole_forward_flops"] - L * last_mm


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


def test_measure_strategies_rejects_bad_settings_and_restores_threads():
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="rounds"):
        recompute_demo.measure_strategies(CFG, 16, 1, rounds=0)
    with pytest.raises(ValueError, match="cpu_threads"):
        recompute_demo.measure_strategies(CFG, 16, 1, cpu_threads=0)
    assert torch.get_num_threads() == threads


# --- page helpers ----------------------------------------------------------------------

def test_comparison_words():
    assert recompute.comparison(97, 100) == "about as much as"
    assert recompute.comparison(120, 100) == "more than"
    assert recompute.comparison(80, 100) == "less than"
    with pytest.raises(ValueError, match="y"):
        recompute.comparison(1, 0)


def test_page_reports_glue_the_computed_numbers():
    items = recompute.item_coefficients(1024, 1, 1024, 16)
    assert items.values["coef_linear"] == (34, ".0f") and items.values["coef_square"] == (5, ".0f")
    ref = recompute.reference_case(config.LLAMA2_7B, 4096)
    g = ref.values
    # 97.0 GiB of activations against 100 GiB of model state: "about as much as", not "more"
    assert g["l7_none_gib"][0] == pytest.approx(97.0)
    assert g["l7_vs_state"][0] == "about as much as"
    assert g["l7_vs_state_mem"][0] == "about as much memory as"
    assert g["l7_best_c"][0] == 32 and g["l7_cstar"][0] > 32
    ex = recompute.selective_overhead_table(4096, 0.10)
    assert ex.values["ex_s_star"][0] == pytest.approx(recompute.seq_len_for_selective_overhead(4096, 0.10))
    for rep in (items, ref, ex):
        assert all(len(line) <= 90 for line in rep.lines)


def test_page_tables_fit_90_columns_and_time_sentences_follow_the_result(measured):
    rep = recompute_demo.flop_check(measured, CFG, 32, 2, rounds=1)
    assert all(len(line) <= 90 for line in rep.lines + recompute_demo.strategies_table(measured).lines)
    faster = measured["selective"].best_s < measured["full"].best_s
    assert ("faster of the two" in rep.values["time_order"][0]) == faster
    assert recompute_demo._time_vs_flops({"selective": 0.5, "full": 0.5},
                                         {"selective": 0.05, "full": 0.3}) == "both took more extra time"
    assert recompute_demo._time_vs_flops({"selective": 0.05, "full": 0.1},
                                         {"selective": 0.05, "full": 0.3}) == (
        "selective recompute took about as much extra time and full recompute less")


def test_block_checks_report():
    rep, checks = recompute_demo.block_checks(CFG, 16, 1, "cpu", "CPU test")
    assert set(checks) == {c[0] for c in recompute_demo.BLOCK_CASES}
    assert rep.values["all_residual_zero"][0] == "zero"
    assert rep.values["fp32_vs_twice"][0] == ("less than" if rep.values["fp32_vs_paper"][0] < 2
                                             else "more than")
    assert all(len(line) <= 90 for line in rep.lines)
