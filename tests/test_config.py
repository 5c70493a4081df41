import dataclasses

import pytest

from mlbook.common import transformer as config
from mlbook.common.transformer import TransformerConfig


def test_kv_heads_default_to_heads():
    c = TransformerConfig(n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=100)
    assert c.n_kv_heads == 4 and c.kv_dim == 64 and c.head_dim == 16


def test_gqa_kv_dim():
    c = config.LLAMA3_70B
    assert c.head_dim == 128 and c.kv_dim == 8 * 128


@pytest.mark.parametrize(
    "field", ["n_layers", "d_model", "n_heads", "d_ff", "vocab_size"]
)
@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_rejects_non_positive_ints(field, bad):
    kw = dict(n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=100)
    kw[field] = bad
    with pytest.raises(ValueError, match=field):
        TransformerConfig(**kw)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match=r"n_heads=5 must divide d_model=64"):
        TransformerConfig(n_layers=2, d_model=64, n_heads=5, d_ff=256, vocab_size=100)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match=r"n_kv_heads=3 must divide n_heads=4"):
        TransformerConfig(
            n_layers=2, d_model=64, n_heads=4, n_kv_heads=3, d_ff=256, vocab_size=100
        )


def test_unknown_mlp():
    with pytest.raises(ValueError, match="mlp must be one of"):
        TransformerConfig(
            n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=100, mlp="relu"
        )


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.LLAMA2_7B.n_layers = 3


def test_presets_have_sources():
    assert len(config.PRESETS) >= 5
    for cfg in config.PRESETS.values():
        assert cfg.source and "arXiv" in cfg.source


def test_scaled_rechecks():
    with pytest.raises(ValueError):
        config.LLAMA2_7B.scaled(n_heads=7)


@pytest.mark.parametrize(
    "preset", [config.LLAMA3_8B, config.LLAMA3_70B, config.LLAMA3_405B]
)
def test_llama3_vocabulary_cites_the_released_config(preset):
    """Table 3 of the Llama 3 paper (arXiv:2407.21783) prints a
    vocabulary of 128,000; the released checkpoints' config.json says
    vocab_size 128256 (128,000 BPE tokens + 256 reserved special tokens). The
    preset uses the released figure, so its source must name the config."""
    assert preset.vocab_size == 128_000 + 256
    assert "config.json" in preset.source and "Table 3 prints 128,000" in preset.source
