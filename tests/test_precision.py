import math
import random

import numpy as np
import pytest
import torch

from mlbook.precision import experiments as P
from mlbook.precision import figures as figs
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config
from mlbook.plotting.widgets import redraw_budget_s, redraw_seconds


# --- formats: known constants (IEEE 754 binary16/binary32, bfloat16, and the
# FP8 formats paper, Micikevicius et al. 2022, Table 1) ------------------------

@pytest.mark.parametrize("name,exp,mant,fmax,normal,subnormal", [
    ("fp32", 8, 23, 3.4028234663852886e38, 2.0**-126, 2.0**-149),
    ("fp16", 5, 10, 65504.0, 2.0**-14, 2.0**-24),
    ("bf16", 8, 7, 3.3895313892515355e38, 2.0**-126, 2.0**-133),
    ("fp8 E4M3", 4, 3, 448.0, 2.0**-6, 2.0**-9),
    ("fp8 E5M2", 5, 2, 57344.0, 2.0**-14, 2.0**-16),
])
def test_format_table_known_values(name, exp, mant, fmax, normal, subnormal):
    f = {row.name: row for row in P.format_table()}[name]
    assert (f.exponent_bits, f.mantissa_bits) == (exp, mant)
    assert f.max == fmax
    assert f.smallest_normal == normal
    assert f.smallest_subnormal == subnormal
    assert f.eps == 2.0**-mant
    assert f.bits == 1 + exp + mant


def test_format_table_order_and_torch_dtypes():
    assert [f.name for f in P.format_table()] == ["fp32", "fp16", "bf16", "fp8 E4M3", "fp8 E5M2"]
    assert P.float_format(torch.float16) == P.float_format("fp16")


@pytest.mark.parametrize("name", list(P.DTYPES))
def test_smallest_subnormal_is_the_last_value_before_zero(name):
    f = P.float_format(name)
    dt = P.DTYPES[name]
    t = torch.tensor([f.smallest_subnormal, f.smallest_subnormal / 2, f.smallest_subnormal * 0.51],
                     dtype=torch.float64)
    back = t.to(dt).to(torch.float64)
    assert back[0] == f.smallest_subnormal
    assert back[1] == 0                     # exactly half: ties to the even zero
    assert back[2] == f.smallest_subnormal


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8 E5M2"])
def test_overflow_threshold_is_where_the_cast_becomes_inf(name):
    t = P.overflow_threshold(name)
    below = np.nextafter(np.float32(t), np.float32(0))
    cast = torch.tensor([t, below], dtype=torch.float32).to(P.DTYPES[name]).to(torch.float64)
    assert math.isinf(cast[0]) and cast[1] == P.float_format(name).max
    assert P.overflow_threshold("fp16") == 65520.0


def test_e4m3_has_no_overflow_threshold():
    with pytest.raises(ValueError, match="E4M3 has no inf"):
        P.overflow_threshold("fp8 E4M3")


def test_unknown_dtype():
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.float_format("fp64")
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.float_format(torch.float64)


# --- underflow and overflow fractions ------------------------------------------

def test_underflow_fraction_known_values():
    values = [1e-9, 1e-3, 1.0, 0.0]          # the zero is not counted
    assert P.underflow_fraction(values, "fp16") == pytest.approx(1 / 3)
    assert P.underflow_fraction(values, "fp16", scale=1024.0) == 0
    assert P.underflow_fraction(values, "bf16") == 0
    assert P.underflow_fraction(values, "fp8 E4M3") == pytest.approx(1 / 3)
    assert P.underflow_fraction([2.0**-26, 2.0**-24], "fp16") == 0.5


def test_overflow_fraction_known_values():
    assert P.overflow_fraction([70000.0, 1.0], "fp16") == 0.5
    assert P.overflow_fraction([65519.0, 1.0], "fp16") == 0          # rounds down to 65504
    assert P.overflow_fraction([1.0, 2.0], "fp16", scale=40000.0) == 0.5
    assert P.overflow_fraction([500.0, 1.0, 2.0, 3.0], "fp8 E4M3") == 0.25
    assert P.overflow_fraction([1e30], "bf16") == 0


@pytest.mark.parametrize("bad_scale", [0, -1.0, math.nan, math.inf])
def test_fractions_reject_non_positive_scale(bad_scale):
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.underflow_fraction([1.0], "fp16", scale=bad_scale)
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.overflow_fraction([1.0], "fp16", scale=bad_scale)


def test_fractions_reject_bad_values():
    with pytest.raises(ValueError, match="non-zero"):
        P.underflow_fraction([0.0, 0.0], "fp16")
    with pytest.raises(ValueError, match="finite"):
        P.underflow_fraction([1.0, math.nan], "fp16")
    with pytest.raises(ValueError, match="empty"):
        P.underflow_fraction([], "fp16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.underflow_fraction([1.0], "int8")


@pytest.mark.parametrize("seed", range(4))
def test_histogram_fractions_match_real_casts(seed):
    rng = np.random.default_rng(seed)
    values = torch.tensor(np.exp(rng.normal(-14, 4, 20000)), dtype=torch.float32)
    hist = P.log2_histogram(values)
    for log2_scale in (0, 5, 12, 20, 30):
        s = 2.0**log2_scale
        fr = P.fp16_fractions(hist, s)
        assert fr["flushed"] == pytest.approx(P.underflow_fraction(values, "fp16", s), abs=1e-12)
        assert fr["overflow"] == pytest.approx(P.overflow_fraction(values, "fp16", s), abs=1e-12)
        assert sum(fr.values()) == pytest.approx(1)
        assert hist["counts"].sum() == hist["n"] == values.numel()


def test_log2_histogram_rejects_bin_width_that_does_not_divide_one():
    with pytest.raises(ValueError, match="bin_width must divide 1"):
        P.log2_histogram([1.0, 2.0], bin_width=0.3)


def test_max_safe_scale():
    assert P.max_safe_scale([1.0, -0.5], "fp16") == 2.0**15
    assert P.max_safe_scale([1e-3], "fp16") == 2.0**25
    v = torch.tensor([3e-4, -7e-2])
    s = P.max_safe_scale(v, "fp16")
    assert P.overflow_fraction(v, "fp16", s) == 0 and P.overflow_fraction(v, "fp16", 2 * s) > 0


# --- the dynamic loss scaler against torch.amp.GradScaler -------------------------

def assert_parity(grad_max, **kw):
    ours = P.loss_scaling_run(grad_max, "mlbook", **kw)
    theirs = P.loss_scaling_run(grad_max, "torch", **kw)
    for step, (a, b, sa, sb) in enumerate(zip(ours.scales, theirs.scales, ours.skipped, theirs.skipped)):
        assert a == b, f"scale differs after step {step}: {a} vs {b}"
        assert sa == sb, f"skip decision differs at step {step}: {sa} vs {sb}"
    assert len(ours.scales) == len(theirs.scales) == len(grad_max)
    return ours


def test_parity_all_finite_grows_every_interval():
    trace = assert_parity([1.0] * 10, growth_interval=3, fp16_grads=False)
    assert trace.scales == [65536.0] * 2 + [131072.0] * 3 + [262144.0] * 3 + [524288.0] * 2
    assert trace.n_skipped == 0


def test_parity_inf_backs_off_and_skips():
    seq = P.scripted_grad_max(8, overflow_steps=(1, 2, 6))
    trace = assert_parity(seq, growth_interval=2, fp16_grads=False)
    assert trace.skipped == [False, True, True, False, False, False, True, False]
    assert trace.scales == [65536.0, 32768.0, 16384.0, 16384.0, 32768.0, 32768.0, 16384.0, 16384.0]


def test_parity_nan_counts_as_non_finite():
    trace = assert_parity([1.0, math.nan, 1.0], growth_interval=5, fp16_grads=False)
    assert trace.skipped == [False, True, False]


@pytest.mark.parametrize("seed", range(5))
def test_parity_random_scripts(seed):
    rnd = random.Random(seed)
    n = 60
    overflow = tuple(t for t in range(n) if rnd.random() < 0.25)
    kw = dict(growth_interval=rnd.choice([1, 2, 3, 7]), growth_factor=rnd.choice([2.0, 3.0, 1.5]),
              backoff_factor=rnd.choice([0.5, 0.7, 0.25]), init_scale=rnd.choice([65536.0, 1000.0, 3.3]))
    assert_parity(P.scripted_grad_max(n, overflow), fp16_grads=False, **kw)


def test_parity_with_fp16_overflow_from_the_scale_itself():
    g = P.drifting_grad_max(400, seed=1, n_spikes=3)
    trace = assert_parity(g, growth_interval=10)
    assert trace.n_skipped > 0
    sim = P.simulate_scaler(g, growth_interval=10)
    assert sim.scales == trace.scales and sim.skipped == trace.skipped


def test_parity_scale_never_grows_to_inf():
    trace = assert_parity([1.0] * 4, init_scale=2.0**127, growth_interval=1, fp16_grads=False)
    assert trace.scales == [2.0**127] * 4


def test_defaults_are_gradscalers():
    ref = torch.amp.GradScaler("cpu")
    mine = P.DynamicLossScaler()
    assert mine.scale == ref.get_scale() == 65536.0
    assert mine.growth_factor == ref.get_growth_factor() == 2.0
    assert mine.backoff_factor == ref.get_backoff_factor() == 0.5
    assert mine.growth_interval == ref.get_growth_interval() == 2000


def test_scale_loss_and_unscale():
    s = P.DynamicLossScaler(init_scale=8.0)
    w = torch.ones(3, requires_grad=True)
    s.scale_loss((w * torch.tensor([1.0, 2.0, 3.0])).sum()).backward()
    assert torch.equal(w.grad, torch.tensor([8.0, 16.0, 24.0]))
    assert s.unscale_([w]) is False
    assert torch.equal(w.grad, torch.tensor([1.0, 2.0, 3.0]))
    w.grad[0] = math.inf
    assert s.unscale_([w]) is True


@pytest.mark.parametrize("kw,rule", [
    (dict(init_scale=0), "init_scale must be a finite number above 0"),
    (dict(init_scale=-1.0), "init_scale must be a finite number above 0"),
    (dict(init_scale=math.inf), "init_scale must be a finite number above 0"),
    (dict(growth_factor=1.0), "growth_factor must be a finite number above 1"),
    (dict(growth_factor=0.5), "growth_factor must be a finite number above 1"),
    (dict(growth_factor=math.nan), "growth_factor must be a finite number above 1"),
    (dict(backoff_factor=1.0), r"backoff_factor must lie in \(0, 1\)"),
    (dict(backoff_factor=0.0), r"backoff_factor must lie in \(0, 1\)"),
    (dict(growth_interval=0), "growth_interval must be an integer above 0"),
    (dict(growth_interval=2.5), "growth_interval must be an integer above 0"),
])
def test_scaler_bad_input(kw, rule):
    with pytest.raises(ValueError, match=rule):
        P.DynamicLossScaler(**kw)


def test_update_wants_a_bool_and_runs_want_valid_input():
    with pytest.raises(ValueError, match="found_inf must be a bool"):
        P.DynamicLossScaler().update(1)
    with pytest.raises(ValueError, match="scaler must be one of"):
        P.loss_scaling_run([1.0], "apex")
    with pytest.raises(ValueError, match="at least one step"):
        P.loss_scaling_run([], "torch")
    with pytest.raises(ValueError, match="grad_max entries must be above 0"):
        P.loss_scaling_run([-1.0], "torch")
    with pytest.raises(ValueError, match=r"must be an integer in \[0, 5\)"):
        P.scripted_grad_max(5, overflow_steps=(5,))


# --- master weights -------------------------------------------------------------

def test_bf16_cannot_absorb_small_updates():
    assert not P.bf16_absorbs(1.0, 1e-4)
    assert not P.bf16_absorbs(1.0, 2.0**-9)
    assert P.bf16_absorbs(1.0, 2.0**-7)
    assert P.bf16_absorbs(1e-2, 1e-4)        # the same update moves a small weight


def test_master_weight_experiment_pure_bf16_stalls():
    r = P.master_weight_experiment(steps=150, lr=3e-4, n_features=16, batch_size=64)
    pure, master, fp32 = r["pure bf16"], r["bf16 + fp32 master"], r["fp32"]
    assert pure["unchanged_updates"] > 0.99
    assert pure["loss"][-1] > 0.9 * pure["loss"][0]
    assert fp32["loss"][-1] < 0.5 * fp32["loss"][0]
    assert master["loss"][-1] < 0.5 * master["loss"][0]
    assert master["unchanged_updates"] < 0.05
    assert len(pure["weight"]) == 150


def test_master_weight_experiment_bad_input():
    with pytest.raises(ValueError, match="lr must be a finite number above 0"):
        P.master_weight_experiment(lr=0)
    with pytest.raises(ValueError, match="steps must be an integer above 0"):
        P.master_weight_experiment(steps=0)


# --- fp8 --------------------------------------------------------------------------

def test_fp8_scale_maps_amax_to_max():
    assert P.fp8_scale(2.0, "fp8 E4M3") == 224.0
    assert P.fp8_scale(2.0, "fp8 E5M2", margin=1) == 57344.0 / 4
    x = torch.tensor([0.5, -2.0, 1.0])
    q = P.quantize_fp8(x, "fp8 E4M3", P.fp8_scale(2.0))
    assert torch.equal(q, x)                 # powers of two survive exactly


def test_quantize_without_scale_flushes_small_tensors():
    x = 1e-6 * torch.randn(1000, generator=torch.Generator().manual_seed(0))
    plain = P.quant_error(x, "fp8 E4M3")
    assert plain.underflow == 1.0 and plain.rel_rms_error == pytest.approx(1.0)
    scaled = P.quant_error(x, "fp8 E4M3", P.fp8_scale(float(x.abs().max())))
    assert scaled.underflow < 0.01 and scaled.rel_rms_error < 0.05
    assert P.quant_error(x, "fp8 E5M2", P.fp8_scale(float(x.abs().max()), "fp8 E5M2")).rel_rms_error \
        > scaled.rel_rms_error                # fewer mantissa bits, more error


def test_quantize_saturates_at_max():
    q = P.quantize_fp8(torch.tensor([1e6, -1e6, 1.0]), "fp8 E5M2")
    assert q.tolist() == [57344.0, -57344.0, 1.0]
    err = P.quant_error(torch.tensor([1000.0, 1.0]), "fp8 E4M3")
    assert err.saturated == 0.5


def test_fp8_bad_input():
    with pytest.raises(ValueError, match="dtype must be one of fp8 E4M3, fp8 E5M2"):
        P.quantize_fp8(torch.ones(2), "fp16")
    with pytest.raises(ValueError, match="amax must be a finite number above 0"):
        P.fp8_scale(0.0)
    with pytest.raises(ValueError, match="margin must be an integer at or above 0"):
        P.fp8_scale(1.0, margin=-1)
    with pytest.raises(ValueError, match="scale must be a finite number above 0"):
        P.quantize_fp8(torch.ones(2), scale=-2.0)
    with pytest.raises(ValueError, match="history_len must be an integer above 0"):
        P.DelayedScaler(history_len=0)


def test_delayed_scaler_uses_history_and_lags_a_jump():
    d = P.DelayedScaler("fp8 E4M3", history_len=3)
    assert d.scale == 1.0                                  # no history yet
    for amax in (1.0, 4.0, 2.0):
        d.quantize(torch.tensor([amax, -amax / 2]))
    assert d.scale == 448.0 / 4.0
    d.quantize(torch.tensor([0.5]))                        # pushes 1.0 out, 4.0 stays
    assert d.history == [4.0, 2.0, 0.5] and d.scale == 448.0 / 4.0
    _, err = d.quantize(torch.tensor([64.0, 1.0]))         # a jump: saturates this step
    assert err.saturated == 0.5
    _, err = d.quantize(torch.tensor([64.0, 1.0]))         # the history has caught up
    assert err.saturated == 0 and err.rel_rms_error < 0.01


def test_scaling_run_policies():
    run = P.scaling_run(P.drifting_tensors(40, size=512, jump_at=30), "fp8 E4M3", history_len=8)
    cur = [e.rel_rms_error for e in run["current"]]
    assert max(cur) < 0.05
    assert run["delayed"][30].saturated > 0.3 and run["delayed"][31].saturated == 0
    assert run["none"][0].underflow > 0.3


def test_fp8_error_sweep_flat_when_scaled():
    sweep = P.fp8_error_sweep([1e-8, 1e-2, 1e4], size=512)
    for name in P.FP8_DTYPES:
        assert max(sweep[name]["scaled"]) < 0.1
        assert sweep[name]["none"][0] == pytest.approx(1.0)


# --- gradients of a real network ------------------------------------------------------

def test_capture_gradients_shapes_and_sampling():
    torch.manual_seed(0)
    cfg = tiny_config(n_layers=2, d_model=32, n_heads=2, vocab_size=64)
    model = GPT(cfg, max_seq_len=16)
    idx, tgt = random_batch(cfg, 2, 16)
    g = P.capture_gradients(model, idx, tgt, max_values=None)
    n_params = sum(p.numel() for p in model.parameters())
    assert g["weights"].numel() == g["n_weights"] == n_params
    assert g["n_activations"] == 2 * (2 * 16 * 32)                   # two block outputs (b, s, h)
    assert g["n_logits"] == g["logits"].numel() == 2 * 16 * 64       # (b, s, V)
    small = P.capture_gradients(model, idx, tgt, max_values=100)
    assert small["logits"].numel() == 100 and small["n_logits"] == g["n_logits"]
    assert small["activations"].numel() == 100
    # the logit gradient of a mean cross-entropy is (softmax - onehot) / (b s)
    probs = model(idx).softmax(-1).detach()
    want = (probs - torch.nn.functional.one_hot(tgt, 64)) / (2 * 16)
    assert torch.allclose(g["logits"], want.flatten(), atol=1e-7)


# --- figures --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hists():
    rng = np.random.default_rng(0)
    values = torch.tensor(np.exp(rng.normal(-16, 3, 200_000)), dtype=torch.float32)
    return {"activation gradients": P.log2_histogram(values)}


def test_static_figures_have_labelled_axes(hists):
    g = P.drifting_grad_max(100)
    figures = [
        figs.format_ranges(),
        figs.gradient_histogram(hists, 10),
        figs.scaler_trace(g, P.simulate_scaler(g, growth_interval=10)),
        figs.master_weights(P.master_weight_experiment(steps=20, n_features=8, batch_size=16)),
        figs.fp8_error_vs_magnitude([1e-3, 1.0], P.fp8_error_sweep([1e-3, 1.0], size=64)),
        figs.delayed_scaling(P.scaling_run(P.drifting_tensors(10, size=64))),
        figs.matmul_throughput({"fp32": (1e11, 1024), "fp16": (1e9, 128)}, "CPU: test"),
        figs.state_bytes(7),
    ]
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_xlabel()


def test_state_bytes_figure_says_16_bytes():
    assert "x 16 bytes" in figs.state_bytes(7).axes[0].get_title()


@pytest.mark.parametrize("which", ["histogram", "scaler", "state"])
def test_slider_redraw_under_100_ms(which, hists):
    """The budget is 100 ms a redraw (stretched on a busy machine, see redraw_budget_s)."""
    budget = redraw_budget_s()
    g = P.drifting_grad_max(2000)
    draw, values = {
        "histogram": (lambda log2_scale: figs.gradient_histogram(hists, log2_scale), dict(log2_scale=12)),
        "scaler": (lambda gi, bf: figs.scaler_run(g, gi, bf), dict(gi=100, bf=0.5)),
        "state": (figs.state_bytes, dict(n_params_billions=70.0)),
    }[which]
    assert redraw_seconds(draw, repeats=5, **values) < budget


# --- matmul throughput ----------------------------------------------------------------

def test_matmul_throughput_probes_fp16_on_cpu():
    slow = P.matmul_throughput_by_dtype("cpu", 64, probe_n=16, min_run_time_s=0.01, max_call_s=1e-12)
    assert [n for _, n in slow.values()] == [64, 64, 16]       # fp16 kept at the probe size
    fast = P.matmul_throughput_by_dtype("cpu", 64, probe_n=16, min_run_time_s=0.01, max_call_s=1e6)
    assert [n for _, n in fast.values()] == [64, 64, 64]
    assert all(rate > 0 for rate, _ in fast.values())


def test_matmul_throughput_bad_input():
    with pytest.raises(ValueError, match="n must be an integer above 0"):
        P.matmul_throughput_by_dtype("cpu", 0)
    with pytest.raises(ValueError, match="max_call_s must be a finite number above 0"):
        P.matmul_throughput_by_dtype("cpu", 8, max_call_s=0)


def test_tiny_loops_restore_the_thread_count():
    before = torch.get_num_threads()
    P.loss_scaling_run([1.0, 1.0], "mlbook")
    assert torch.get_num_threads() == before


# --- page helpers ----------------------------------------------------------------

@pytest.mark.parametrize("fraction,text", [
    (0.0, "0%"), (1.0, "100.0%"), (0.5037, "50.4%"), (0.0013545, "0.1%"),
    (0.00019, "0.019%"), (1.4e-6, "0.00014%"),
])
def test_percent_shows_small_nonzero_fractions(fraction, text):
    assert P.percent(fraction) == text


def test_percent_never_prints_zero_for_a_nonzero_fraction():
    for k in range(3, 12):
        assert P.percent(10.0**-k).strip("0.%e+-") != ""


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_percent_bad_input(bad):
    with pytest.raises(ValueError, match="fraction"):
        P.percent(bad)


def test_format_texts_and_table_text():
    table = P.format_table()
    texts = P.format_texts(table)
    assert texts["fp16_max"] == "65,504"
    assert texts["fp16_sub_pow"] == "2^-24"
    assert texts["bf16_sig_bits"] == "8"
    assert texts["e4m3_max"] == "448"
    text = P.format_table_text(table)
    assert len(text.splitlines()) == len(table) + 1
    assert max(len(line) for line in text.splitlines()) <= 90


def _fake_grads(logit_scale):
    gen = torch.Generator().manual_seed(0)
    return {"logits": logit_scale * (0.5 + torch.rand(10_000, generator=gen)),
            "activations": 1e-3 * torch.rand(1000, generator=gen) + 1e-9,
            "weights": 1e-4 * torch.rand(1000, generator=gen) + 1e-9,
            "n_logits": 10_000, "n_activations": 1000, "n_weights": 1000}


def test_gradient_texts_follow_the_result():
    cfg = tiny_config(n_layers=1, d_model=16, n_heads=2, vocab_size=P.LLAMA2_VOCAB)
    # logits around 1e-8: well below the flush threshold (2^-25 ~ 3e-8)
    low = P.gradient_texts(P.gradient_study(_fake_grads(2e-8)), cfg, 2, 512)
    assert low["g_logits_verdict"].startswith("That is at or below the threshold")
    assert low["g_vocab_whose"] == "the size of Llama 2's"
    # logits around 1e-5: none flush
    high = P.gradient_texts(P.gradient_study(_fake_grads(2e-5)), cfg, 2, 64)
    assert "none of them becomes zero" in high["g_logits_verdict"]
    assert high["g_logits_zero"] == "0%"
    small_v = tiny_config(n_layers=1, d_model=16, n_heads=2, vocab_size=4096)
    assert "smaller than" in P.gradient_texts(P.gradient_study(_fake_grads(2e-5)),
                                              small_v, 2, 64)["g_vocab_whose"]


def test_gradient_study_bad_input():
    with pytest.raises(ValueError, match="missing"):
        P.gradient_study({"logits": torch.ones(3)})


def test_gradient_report_lines_fit():
    report = P.gradient_report(P.gradient_study(_fake_grads(2e-8)))
    assert max(len(line) for line in report.splitlines()) <= 90


def test_scaler_comparison_agrees():
    grad_max = P.drifting_grad_max(60, seed=0, spike=1e3)
    cmp = P.scaler_comparison(grad_max, 10)
    assert cmp["same_scale"] == cmp["same_skip"] == 60 and cmp["sim_agrees"]
    assert cmp["texts"]["sc_steps"] == "60"
