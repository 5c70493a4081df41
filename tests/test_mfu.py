import pytest

from mlbook.common import transformer as config
from mlbook.mfu import flops
from mlbook.common import accelerators as hardware
from mlbook.mfu import formulas as mfu

A100 = 312e12
H100 = 989e12


def test_palm_mt_nlg_without_attention():
    # PaLM App. B: MT-NLG 530B at 65.43K tokens/s on 2240 A100s -> 29.7 % (6N only).
    n = flops.matmul_params(config.MT_NLG_530B)
    assert round(mfu.mfu_from_six_nd(n, 65.43e3, A100, 2240), 3) == 0.297


def test_palm_mt_nlg_with_attention_matches_table3():
    # PaLM Table 3 lists MT-NLG at 30.2 % MFU (with the attention term, s = 2048).
    assert round(mfu.mfu(65.43e3, config.MT_NLG_530B, 2048, A100, 2240), 3) == 0.302


def test_hfu_is_four_thirds_of_mfu_with_full_recompute():
    args = (1000.0, config.LLAMA2_7B, 4096, H100)
    assert mfu.hfu(*args) / mfu.mfu(*args) == pytest.approx(4 / 3, rel=1e-12)
    assert mfu.hfu(*args, recompute=False) == pytest.approx(mfu.mfu(*args))


def test_nanogpt_convention_agrees():
    c = config.LLAMA2_7B
    ours = mfu.mfu(4000, c, 2048, A100)
    theirs = mfu.nanogpt_estimate_mfu(flops.matmul_params(c), c.n_layers, c.n_heads, c.head_dim, 2048, 4000)
    assert theirs == pytest.approx(ours, rel=1e-12)


def test_exercise_7b_at_12k_tokens():
    u = mfu.mfu(12_000, config.LLAMA2_7B, 4096, H100)
    u6 = mfu.mfu_from_six_nd(flops.n_params(config.LLAMA2_7B), 12_000, H100)
    assert 0.5 < u < 0.6 and 0.45 < u6 < 0.52 and u > u6


def test_mfu_above_one_is_refused():
    with pytest.raises(mfu.ImpossibleUtilisation, match="peak FLOP/s .* or the FLOPs convention must be wrong"):
        mfu.mfu(1e6, config.LLAMA2_7B, 4096, H100)
    with pytest.raises(ValueError):  # it is a ValueError too
        mfu.mfu_from_six_nd(7e9, 1e6, H100)


def test_training_days_known_case():
    # 6 * 8e9 * 15e12 / (1024 * 989e12 * 0.4 * 86400)
    expected = 6 * 8e9 * 15e12 / (1024 * 989e12 * 0.4 * 86400)
    assert mfu.training_days(8e9, 15e12, H100, 1024, 0.4) == pytest.approx(expected)
    assert 20 < expected < 25


@pytest.mark.parametrize("kw,match", [
    (dict(tokens_per_s=0), "tokens_per_s"),
    (dict(tokens_per_s=-3.0), "tokens_per_s"),
    (dict(seq_len=0), "seq_len"),
    (dict(n_gpus=0), "n_gpus"),
    (dict(n_gpus=1.5), "n_gpus"),
    (dict(peak_flops_per_s=0), "peak_flops_per_s"),
])
def test_bad_inputs(kw, match):
    args = dict(tokens_per_s=1000.0, cfg=config.LLAMA2_7B, seq_len=4096, peak_flops_per_s=H100, n_gpus=1)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        mfu.mfu(**args)


@pytest.mark.parametrize("bad", [0, -0.1, 1.5])
def test_training_days_rejects_impossible_mfu(bad):
    with pytest.raises(ValueError, match="mfu"):
        mfu.training_days(8e9, 15e12, H100, 1024, bad)


def test_published_table_has_sources():
    assert all("arXiv" in r.source and 0 < r.mfu < 1 for r in mfu.PUBLISHED_MFU)
