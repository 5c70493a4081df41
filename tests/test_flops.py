import pytest

from mlbook.common import transformer as config
from mlbook.common.transformer import TransformerConfig
from mlbook.mfu import flops


def test_llama2_7b_parameter_count():
    # Touvron et al. 2023 report 6.74B parameters for Llama-2-7B.
    assert flops.n_params(config.LLAMA2_7B) == pytest.approx(6.74e9, rel=1e-3)


def test_llama3_8b_and_70b_counts():
    # Meta reports 8.03B and 70.6B parameters for the released models.
    assert flops.n_params(config.LLAMA3_8B) == pytest.approx(8.03e9, rel=2e-3)
    assert flops.n_params(config.LLAMA3_70B) == pytest.approx(70.6e9, rel=2e-3)


def test_gpt3_175b_count():
    assert flops.n_params(config.GPT3_175B) == pytest.approx(175e9, rel=0.01)


def test_matmul_params_exclude_embedding_but_count_head():
    # Llama-2-7B by hand:
    #   N_matmul = 32 (4 * 4096^2 + 3 * 4096 * 11008) + 32000 * 4096 (head)
    #            = 6,607,077,376;
    #   the rest of N = 6,738,415,616 is the embedding 32000 * 4096 = 131,072,000
    #   and 65 norm gains of 4096 = 266,240.
    assert flops.matmul_params(config.LLAMA2_7B) == 6_607_077_376
    assert flops.n_params(config.LLAMA2_7B) == 6_607_077_376 + 131_072_000 + 266_240


def test_tied_embeddings_counted_once():
    untied = TransformerConfig(
        n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=100
    )
    tied = untied.scaled(tied_embeddings=True)
    assert flops.n_params(untied) - flops.n_params(tied) == 100 * 64
    assert flops.matmul_params(untied) == flops.matmul_params(tied)


def test_swiglu_has_three_mlp_matrices():
    g = TransformerConfig(
        n_layers=1, d_model=64, n_heads=4, d_ff=256, vocab_size=10, mlp="gelu"
    )
    s = g.scaled(mlp="swiglu")
    assert flops.mlp_params_per_layer(s) == 3 * 64 * 256
    assert flops.mlp_params_per_layer(g) == 2 * 64 * 256


def test_train_is_six_n_plus_twelve_lhs():
    # Llama-2-7B at s = 4096, by hand: 6 * 6,607,077,376 + 12 * 32 * 4096 * 4096
    #   = 39,642,464,256 + 6,442,450,944 = 46,084,915,200;
    #   forward is a third: 15,361,638,400.
    assert flops.flops_per_token(config.LLAMA2_7B, 4096) == 46_084_915_200
    assert flops.flops_per_token(config.LLAMA2_7B, 4096, "forward") == 15_361_638_400


def test_full_recompute_is_four_thirds():
    c = config.LLAMA3_8B
    assert (
        flops.flops_per_token(c, 8192, recompute=True) * 3
        == flops.flops_per_token(c, 8192) * 4
    )


def test_attention_term_is_about_a_seventh_for_llama2_7b():
    # BRIEF section 1: at s=4096 the attention term is roughly a seventh. By hand:
    # 6,442,450,944 / 46,084,915,200 = 0.139795...; a seventh is 0.142857.
    share = flops.attention_share(config.LLAMA2_7B, 4096)
    assert share == pytest.approx(0.139795, abs=1e-6)
    assert share == pytest.approx(
        1 / 7, abs=0.005
    )  # "roughly": within half a point of 1/7


def test_six_nd():
    assert flops.six_nd(1e9, 1e12) == 6e21


@pytest.mark.parametrize("bad", [0, -5, 1.5])
def test_bad_seq_len(bad):
    with pytest.raises(ValueError, match="seq_len"):
        flops.flops_per_token(config.LLAMA2_7B, bad)


@pytest.mark.parametrize(
    "fn",
    [
        flops.attention_params_per_layer,
        flops.mlp_params_per_layer,
        flops.matmul_params,
        flops.n_params,
    ],
)
def test_a_config_is_required(fn):
    with pytest.raises(ValueError, match="cfg must be a TransformerConfig"):
        fn({"n_layers": 32})


def test_bad_mode_and_recompute_forward():
    with pytest.raises(ValueError, match="mode"):
        flops.flops_per_token(config.LLAMA2_7B, 128, mode="backward")
    with pytest.raises(ValueError, match="recompute"):
        flops.flops_per_token(config.LLAMA2_7B, 128, mode="forward", recompute=True)


@pytest.mark.parametrize("n,d", [(0, 1), (1, -1), (float("nan"), 1)])
def test_six_nd_rejects(n, d):
    with pytest.raises(ValueError):
        flops.six_nd(n, d)
