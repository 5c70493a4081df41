import math

import pytest

from mlbook.common_torch import device as devices
from mlbook.common_torch import timing as measure
from mlbook.common_torch.gpt import tiny_config
from mlbook.mfu import experiments as mfu_demo
from mlbook.mfu import flops

CFG = tiny_config(n_layers=1, d_model=64, n_heads=2, vocab_size=128)

# CFG by hand (L=1, h=64, GELU d_ff=256, V=128), at s=32:
#   N_matmul = 4 * 64^2 + 2 * 64 * 256 + 128 * 64 = 16,384 + 32,768 + 8,192 = 57,344
#   6 N_matmul + 12 L h s = 344,064 + 24,576 = 368,640 FLOPs a token
CFG_TRAIN_FLOPS_PER_TOKEN = 368_640


def test_written_out_attention_counts_exactly_and_fused_cpu_attention_is_invisible():
    rows = {(r.attn_impl, r.mode): r for r in mfu_demo.count_vs_formula(CFG, 32, 2)}
    assert rows["math", "forward"].ratio == 1 and rows["math", "train"].ratio == 1
    assert rows["math", "train"].counted == 2 * 32 * CFG_TRAIN_FLOPS_PER_TOKEN
    # On a CPU the fused SDPA kernel has no FLOP formula in the counter: exactly the
    # attention term is missing. By hand: 12 L h s = 24,576 of 368,640 FLOPs a token.
    missing = 1 - rows["sdpa", "train"].ratio
    assert missing == pytest.approx(24_576 / 368_640, abs=1e-12)


def _stub_ceiling(flops_per_s):
    from mlbook.common_torch.mamf import MatmulCeiling, MatmulTiming

    return MatmulCeiling(
        flops_per_s,
        64,
        64,
        64,
        "fp32",
        "cpu",
        (MatmulTiming(64, 64, 64, flops_per_s),),
        1,
        0.0,
    )


def test_measure_mfu_arithmetic_with_stubbed_clocks(monkeypatch):
    """The timing and the ceilings stubbed with round numbers, so the result is
    known by hand: a median step of 0.5 s over b*s = 2*32 = 64 tokens is 128
    tokens/s; 128 * 368,640 = 47,185,920 FLOP/s; against a 1e9 FLOP/s peak that
    is 4.718592 % MFU, against a 2e9 FLOP/s square matmul 2.359296 %, and
    against a 4e9 FLOP/s MAMF ceiling 1.179648 %."""
    from mlbook.common_torch import mamf

    monkeypatch.setattr(
        measure, "time_steps", lambda step, steps, warmup, device: [0.25, 0.5, 1.0]
    )
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)
    monkeypatch.setattr(
        devices, "nominal_peak_flops_per_s", lambda device, dtype: (1e9, "stub")
    )
    monkeypatch.setattr(mamf, "find_ceiling", lambda *a, **k: _stub_ceiling(4e9))
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    lines = []
    m = mfu_demo.measure_mfu(
        CFG, 32, 2, steps=3, device="cpu", gemm_n=128, rounds=1, log=lines.append
    )
    assert m.step_s == 0.5 and m.tokens_per_s == 128
    assert m.mfu_nominal == pytest.approx(0.04718592, rel=1e-12)
    assert m.step_vs_square == pytest.approx(0.02359296, rel=1e-12)
    assert m.step_vs_ceiling == pytest.approx(0.01179648, rel=1e-12) and m.sweeps == 1
    assert (
        "128^3" in lines[0] and len(lines) == 3
    )  # progress goes where the caller says


def test_every_round_starts_with_an_untimed_step(monkeypatch):
    """Three rounds of two timed steps: each round warms up with one untimed
    step (the first step after the round's matmuls is not a warm step), so
    the spread is that of the six warm steps, 0.8 / 0.4 - 1 = 1."""
    from mlbook.common_torch import mamf

    warmups = []
    times = iter([[0.4, 0.5], [0.6, 0.8], [0.5, 0.4]])

    def timed(step, steps, warmup, device):
        warmups.append(warmup)
        return next(times)

    monkeypatch.setattr(measure, "time_steps", timed)
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)
    monkeypatch.setattr(
        devices, "nominal_peak_flops_per_s", lambda device, dtype: (1e9, "stub")
    )
    monkeypatch.setattr(mamf, "find_ceiling", lambda *a, **k: _stub_ceiling(4e9))
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    m = mfu_demo.measure_mfu(CFG, 32, 2, steps=2, device="cpu", gemm_n=128, rounds=3)
    assert warmups == [1, 1, 1]
    assert m.step_spread == pytest.approx(1.0, rel=1e-12)
    assert m.step_s == pytest.approx(0.5, rel=1e-12)  # the median of the six


def test_a_beaten_ceiling_widens_the_sweep(monkeypatch):
    """A step at 47 MFLOP/s against a 10 MFLOP/s 'ceiling': the sweep is widened,
    three times at most, and the result reports it instead of hiding it."""
    from mlbook.common_torch import mamf

    budgets = []
    monkeypatch.setattr(
        measure, "time_steps", lambda step, steps, warmup, device: [0.5]
    )
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)
    monkeypatch.setattr(
        devices, "nominal_peak_flops_per_s", lambda device, dtype: (1e9, "stub")
    )
    monkeypatch.setattr(
        mamf,
        "find_ceiling",
        lambda *a, budget_s, **k: budgets.append(budget_s) or _stub_ceiling(1e7),
    )
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    m = mfu_demo.measure_mfu(
        CFG, 32, 2, steps=1, device="cpu", gemm_n=128, rounds=1, ceiling_budget_s=1.0
    )
    assert m.sweeps == 3 and budgets == [1.0, 2.0, 4.0] and m.step_vs_ceiling > 1


def test_gemm_shapes_cover_forward_and_both_gradients():
    shapes = mfu_demo.gemm_shapes(CFG, 2, 32)
    t, h = 64, CFG.d_model
    assert {
        (t, h, h),
        (h, h, t),
        (t, CFG.vocab_size, h),
        (t, h, CFG.vocab_size),
        (CFG.vocab_size, h, t),
    } <= set(shapes)
    # 2 FLOPs per weight per token, three matmuls per weight: the shapes' FLOPs are
    # 6 x (matmul weights, attention K/V at kv width) x tokens, the LM head included
    assert sum(2 * m * n * k for m, n, k in shapes) >= 6 * t * h * CFG.vocab_size


def test_measure_mfu_is_silent_unless_asked(capsys):
    mfu_demo.measure_mfu(
        CFG,
        32,
        2,
        steps=1,
        device="cpu",
        gemm_n=64,
        min_run_time_s=0.02,
        ceiling_budget_s=0.2,
        rounds=1,
    )
    assert capsys.readouterr().out == ""


def test_measure_mfu_on_cpu():
    m = mfu_demo.measure_mfu(
        CFG,
        32,
        2,
        steps=2,
        device="cpu",
        gemm_n=128,
        min_run_time_s=0.05,
        ceiling_budget_s=0.3,
        rounds=1,
    )
    assert m.device.startswith("CPU") and m.dtype == "fp32"
    # Physical bounds: no step beats the nominal peak (mfu() would have refused it),
    # and none beats the best matmul of the same dtype on the same device.
    assert 0 < m.mfu_nominal <= 1 and m.step_s > 0
    assert 0 < m.step_vs_ceiling < 1 and m.ceiling.flops_per_s < m.peak_flops_per_s
    assert flops.flops_per_token(CFG, 32) == CFG_TRAIN_FLOPS_PER_TOKEN


def test_an_unknown_peak_still_measures_the_step_against_the_ceiling(monkeypatch):
    """A device the table does not know (an ARM CPU, a GPU with no row): no MFU,
    but the step against the measured ceiling, and the spread of its steps
    (slowest 1.0 s / fastest 0.25 s - 1 = 3) that bounds how far a noisy step
    may pass the ceiling."""
    from mlbook.common.accelerators import NominalPeak
    from mlbook.common_torch import mamf

    monkeypatch.setattr(
        measure, "time_steps", lambda step, steps, warmup, device: [0.25, 0.5, 1.0]
    )
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)
    monkeypatch.setattr(
        devices,
        "nominal_peak_flops_per_s",
        lambda device, dtype: NominalPeak(None, "no row", "unknown"),
    )
    monkeypatch.setattr(mamf, "find_ceiling", lambda *a, **k: _stub_ceiling(4e9))
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    m = mfu_demo.measure_mfu(CFG, 32, 2, steps=3, device="cpu", gemm_n=128, rounds=1)
    assert math.isnan(m.mfu_nominal) and math.isnan(m.peak_flops_per_s)
    assert m.peak_basis == "unknown" and m.peak_how == "no row"
    assert m.step_vs_ceiling == pytest.approx(0.01179648, rel=1e-12)
    assert m.step_spread == pytest.approx(3.0, rel=1e-12)


@pytest.mark.parametrize("ratio", [0.01, 0.6, 1.0, 2.2, 9.0])
def test_the_step_against_its_ceiling_on_every_kind_of_machine(monkeypatch, ratio):
    """The MFU page measures an fp32 step on a CPU, so the bf16 / fp32 ratio of
    a machine does not move it: with an fp32 ceiling of 4e9 FLOP/s the same
    step is 1.18 % of it whatever bf16 does, and the bf16 peak is never read."""
    from mlbook.common.accelerators import NominalPeak
    from mlbook.common_torch import mamf

    asked = []
    monkeypatch.setattr(
        measure, "time_steps", lambda step, steps, warmup, device: [0.5]
    )
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)

    def peak(device, dtype):
        asked.append(dtype)
        flops = {"fp32": 1e9, "bf16": 1e9 * max(ratio, 1)}[dtype]
        return NominalPeak(flops, "stub", "upper bound")

    monkeypatch.setattr(devices, "nominal_peak_flops_per_s", peak)
    monkeypatch.setattr(
        mamf,
        "find_ceiling",
        lambda dtype, *a, **k: _stub_ceiling(4e9 * (ratio if dtype == "bf16" else 1)),
    )
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    m = mfu_demo.measure_mfu(CFG, 32, 2, steps=1, device="cpu", gemm_n=128, rounds=1)
    assert asked == ["fp32"] and m.dtype == "fp32" and m.peak_basis == "upper bound"
    assert m.step_vs_ceiling == pytest.approx(0.01179648, rel=1e-12)


def test_a_widened_sweep_covers_a_larger_grid_than_the_first(monkeypatch):
    """A step that beats a ceiling found on small shapes (the step's own
    64-wide GEMMs) is swept again over a grid twice find_ceiling's default
    (2048 on a CPU), then twice that; never one below the grid's 256 floor."""
    from mlbook.common_torch import mamf

    dims = []
    monkeypatch.setattr(
        measure, "time_steps", lambda step, steps, warmup, device: [0.5]
    )
    monkeypatch.setattr(devices, "measure_matmul_flops_per_s", lambda *a, **k: 2e9)
    monkeypatch.setattr(
        mamf,
        "find_ceiling",
        lambda *a, max_dim=None, **k: dims.append(max_dim) or _stub_ceiling(1e7),
    )
    monkeypatch.setattr(mamf, "refine", lambda c, **k: c)
    mfu_demo.measure_mfu(CFG, 32, 2, steps=1, device="cpu", gemm_n=128, rounds=1)
    assert dims == [None, 4096, 8192]
