from mlbook.mfu import flops
from mlbook.mfu import experiments as mfu_demo
from mlbook.common_torch.gpt import tiny_config

CFG = tiny_config(n_layers=1, d_model=64, n_heads=2, vocab_size=128)


def test_written_out_attention_counts_exactly_and_fused_cpu_attention_is_invisible():
    rows = {(r.attn_impl, r.mode): r for r in mfu_demo.count_vs_formula(CFG, 32, 2)}
    assert rows["math", "forward"].ratio == 1 and rows["math", "train"].ratio == 1
    # On a CPU the fused SDPA kernel has no FLOP formula in the counter: exactly
    # the attention term is missing.
    missing = 1 - rows["sdpa", "train"].ratio
    assert abs(missing - flops.attention_share(CFG, 32)) < 1e-12


def test_measure_mfu_on_cpu():
    m = mfu_demo.measure_mfu(CFG, 32, 2, steps=2, device="cpu", gemm_n=128, min_run_time_s=0.05, log=lambda *_: None)
    assert m.device.startswith("CPU") and m.dtype == "fp32"
    assert 0 < m.mfu_nominal < m.mfu_gemm < 1
    assert m.tokens_per_s == 64 / m.step_s
