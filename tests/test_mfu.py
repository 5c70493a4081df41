"""MFU, HFU and the days of a run, against the numbers their sources print and
against hand computations written out in the comments."""

import pytest

from mlbook.common import accelerators as hardware
from mlbook.common import transformer as config
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu

A100 = hardware.peak_flops_per_s("A100", "bf16")  # 312e12, checked in test_hardware
H100 = hardware.peak_flops_per_s("H100", "bf16")  # 989e12, checked in test_hardware

# Llama-2-7B by hand (L=32, h=4096, d_ff=11008, V=32000, untied):
#   N_matmul = 32 (4 * 4096^2 + 3 * 4096 * 11008) + 32000 * 4096
#            = 32 * 202,375,168 + 131,072,000 = 6,607,077,376
#   N        = N_matmul + 32000 * 4096 (embedding) + 65 * 4096 (norm gains)
#            = 6,738,415,616
#   12Lhs at s=4096 = 12 * 32 * 4096 * 4096 = 6,442,450,944
#   6 N_matmul + 12Lhs = 39,642,464,256 + 6,442,450,944 = 46,084,915,200 FLOPs a token
L7_TRAIN_FLOPS_PER_TOKEN = 46_084_915_200
L7_N = 6_738_415_616


def test_palm_mt_nlg_without_attention():
    # PaLM App. B: MT-NLG 530B at 65.43K tokens/s on 2240 A100s -> 29.7 % (6N only).
    n = flops.matmul_params(config.MT_NLG_530B)
    assert round(mfu.mfu_from_six_nd(n, 65.43e3, A100, 2240), 3) == 0.297


def test_palm_mt_nlg_with_attention_matches_table3():
    # PaLM Table 3 lists MT-NLG at 30.2 % MFU (with the attention term, s = 2048).
    assert round(mfu.mfu(65.43e3, config.MT_NLG_530B, 2048, A100, 2240), 3) == 0.302


def test_hfu_is_four_thirds_of_mfu_with_full_recompute():
    # Full recompute runs one more forward: 4 passes' worth instead of 3 (PaLM App. B).
    args = (1000.0, config.LLAMA2_7B, 4096, H100)
    assert mfu.hfu(*args) / mfu.mfu(*args) == pytest.approx(4 / 3, rel=1e-12)
    assert mfu.hfu(*args, recompute=False) == pytest.approx(mfu.mfu(*args))


def test_nanogpt_convention_agrees():
    # A second implementation, written the way nanoGPT's estimate_mfu writes it.
    c = config.LLAMA2_7B
    ours = mfu.mfu(4000, c, 2048, A100)
    theirs = mfu.nanogpt_estimate_mfu(
        flops.matmul_params(c), c.n_layers, c.n_heads, c.head_dim, 2048, 4000
    )
    assert theirs == pytest.approx(ours, rel=1e-12)


def test_exercise_7b_at_12k_tokens():
    # With attention: 12,000 * 46,084,915,200
    # (L7_TRAIN_FLOPS_PER_TOKEN) / 989e12 = 0.559170... 6N only (all parameters):
    # 12,000 * 6 * 6,738,415,616 / 989e12 = 0.490562...
    assert mfu.mfu(12_000, config.LLAMA2_7B, 4096, H100) == pytest.approx(
        0.559170, abs=1e-6
    )
    assert mfu.mfu_from_six_nd(L7_N, 12_000, H100) == pytest.approx(0.490562, abs=1e-6)
    assert flops.n_params(config.LLAMA2_7B) == L7_N


def test_max_tokens_per_s_is_100_percent_mfu():
    # One H100: 989e12 / 46,084,915,200 = 21,460.4 tokens/s.
    top = mfu.max_tokens_per_s(config.LLAMA2_7B, 4096, H100)
    assert top == pytest.approx(21_460.4, abs=0.1)
    assert mfu.max_tokens_per_s(
        config.LLAMA2_7B, 4096, H100, n_gpus=8
    ) == pytest.approx(8 * top)
    assert mfu.mfu(top, config.LLAMA2_7B, 4096, H100) == pytest.approx(
        1.0
    )  # exactly 100 %, rounding allowed
    with pytest.raises(mfu.ImpossibleUtilisation):
        mfu.mfu(top * 1.001, config.LLAMA2_7B, 4096, H100)


def test_mfu_above_one_is_refused():
    with pytest.raises(
        mfu.ImpossibleUtilisation,
        match="peak FLOP/s .* or the FLOPs convention must be wrong",
    ):
        mfu.mfu(1e6, config.LLAMA2_7B, 4096, H100)
    with pytest.raises(ValueError):  # it is a ValueError too
        mfu.mfu_from_six_nd(7e9, 1e6, H100)


def test_training_days_known_case():
    # BRIEF, planning arithmetic: 6 * 8e9 * 15e12 = 7.2e23 FLOPs;
    # 1024 * 989e12 * 0.4 * 86400 = 3.50002e22 FLOP a day -> 20.5713 days.
    assert mfu.training_days(8e9, 15e12, H100, 1024, 0.4) == pytest.approx(
        20.5713, abs=1e-4
    )


def test_training_days_with_the_attention_term():
    # At s = 8192 the attention term adds about 15 % for 70B,
    # 8 % for 405B.
    # 70B: 12 * 80 * 8192 * 8192 = 64,424,509,440 FLOPs a token, over 6 * 70e9 = 420e9:
    #      +15.34 %.
    #      6ND days: 6 * 70e9 * 15e12 / (4096 * 989e12 * 0.4 * 86400) = 44.9998 days,
    #      so 51.902 days.
    attn70 = 3 * flops.attention_flops_per_token(config.LLAMA3_70B, 8192)
    assert attn70 == 64_424_509_440
    assert mfu.training_days(70e9, 15e12, H100, 4096, 0.4) == pytest.approx(
        44.9998, abs=1e-4
    )
    assert mfu.training_days(
        70e9, 15e12, H100, 4096, 0.4, attention_flops_per_token=attn70
    ) == pytest.approx(51.9024, abs=1e-4)
    # 405B: 12 * 126 * 16384 * 8192 = 202,937,204,736 over 6 * 405e9 = 2.43e12: +8.35 %.
    attn405 = 3 * flops.attention_flops_per_token(config.LLAMA3_405B, 8192)
    assert attn405 == 202_937_204_736
    ratio = mfu.training_days(
        405e9, 15.6e12, H100, 16384, 0.4, attention_flops_per_token=attn405
    ) / mfu.training_days(405e9, 15.6e12, H100, 16384, 0.4)
    assert ratio == pytest.approx(1.08351, abs=1e-5)


def test_nanogpt_estimate_refuses_more_than_the_peak():
    # GPT-2 small: 6 * 124e6 + 12 * 12 * 768 * 1024 = 857,242,112 FLOPs a token; at 1e6
    # tokens/s that is 857 TFLOP/s, above an A100's 312.
    with pytest.raises(mfu.ImpossibleUtilisation):
        mfu.nanogpt_estimate_mfu(124e6, 12, 12, 64, 1024, 1e6, 312e12)


# The published table against its sources. PaLM (arXiv:2204.02311) Table 3:
# GPT-3 21.3 %, Gopher 32.5 %, MT-NLG 30.2 %, PaLM 46.2 % (HFU 57.8 %).
# Llama 3 (arXiv:2407.21783) Table 4: 8,192 GPUs at s=8192 43 %; 16,384 at s=8192 41 %;
# 16,384 at s=131,072 38 %; TFLOPs/GPU 430, 400, 380.
SOURCE_ROWS = [
    ("GPT-3 175B", None, 0.213, None),
    ("Gopher 280B", 4096, 0.325, None),
    ("MT-NLG 530B", 2240, 0.302, None),
    ("PaLM 540B", 6144, 0.462, 0.578),
    ("Llama 3 405B, s=8192", 8192, 0.43, None),
    ("Llama 3 405B, s=8192", 16_384, 0.41, None),
    ("Llama 3 405B, s=131072", 16_384, 0.38, None),
]


def test_published_table_matches_its_sources():
    got = [(r.model, r.n_chips, r.mfu, r.hfu) for r in mfu.PUBLISHED_MFU]
    assert got == SOURCE_ROWS
    for r in mfu.PUBLISHED_MFU:
        assert ("Table 3" in r.source) == (
            not r.model.startswith("Llama")
        ) and "arXiv" in r.source


@pytest.mark.parametrize(
    "tflops_per_gpu,published", [(430, 0.43), (400, 0.41), (380, 0.38)]
)
def test_llama3_mfu_is_its_tflops_over_the_h100_peak(tflops_per_gpu, published):
    # Llama 3 Table 4 prints both columns; they agree with the table's H100 peak
    # to the paper's rounding: TFLOPs/GPU to the nearest 10 (+-5 / 989 = +-0.0051)
    # and MFU to the whole percent (+-0.005), so 0.0101 at most (400 / 989 = 40.4 %
    # is printed as 41 %).
    assert tflops_per_gpu * 1e12 / H100 == pytest.approx(published, abs=0.0101)
