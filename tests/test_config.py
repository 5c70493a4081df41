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
