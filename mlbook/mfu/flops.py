"""FLOPs of a transformer training step, counted the way the book does.

Convention (book/notation.md): a multiply-add is 2 FLOPs; only matmuls are
counted (norms, softmax, activations and the loss are a rounding error at
scale); attention scores are counted as the full s x s square even though a
causal mask makes half of them useless, because that is what PaLM,
Megatron-LM and nanoGPT count, so MFUs stay comparable across papers.
"""

from __future__ import annotations

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig

MODES = ("forward", "train")


def _config(cfg) -> TransformerConfig:
    return validate.instance_of("cfg", cfg, TransformerConfig)


def attention_params_per_layer(cfg: TransformerConfig) -> int:
    """Q and O are h x h; K and V are h x kv_dim (smaller under GQA)."""
    h = _config(cfg).d_model
    return 2 * h * h + 2 * h * cfg.kv_dim


def mlp_params_per_layer(cfg: TransformerConfig) -> int:
    """SwiGLU has three h x d_ff matrices (gate, up, down); a GELU MLP two."""
    n_mats = 3 if _config(cfg).mlp == "swiglu" else 2
    return n_mats * cfg.d_model * cfg.d_ff


def matmul_params(cfg: TransformerConfig) -> int:
    """N_matmul: every weight that takes part in a matmul once per token.

    The blocks' projections and MLPs plus the LM head. The input embedding is
    a gather (a table look-up), not a matmul, so it is left out even when it
    shares its weights with the head. Biases and norm gains are left out too.
    """
    per_layer = attention_params_per_layer(_config(cfg)) + mlp_params_per_layer(cfg)
    return cfg.n_layers * per_layer + cfg.vocab_size * cfg.d_model


def n_params(cfg: TransformerConfig) -> int:
    """All parameters: matmul weights, the input embedding (unless tied) and
    the RMSNorm/LayerNorm gains (two per layer and a final one)."""
    embedding = 0 if _config(cfg).tied_embeddings else cfg.vocab_size * cfg.d_model
    norms = (2 * cfg.n_layers + 1) * cfg.d_model
    return matmul_params(cfg) + embedding + norms


def attention_flops_per_token(cfg: TransformerConfig, seq_len: int) -> int:
    """Forward FLOPs of the two sequence-dependent matmuls, per token.

    Scores Q K^T and context P V each cost 2 s h per token per layer (every
    query head meets every key of the sequence; GQA shares K/V but does not
    reduce this), so 4 L h s in all.
    """
    _config(cfg)
    validate.positive_int("seq_len", seq_len)
    return 4 * cfg.n_layers * cfg.d_model * seq_len


def flops_per_token(
    cfg: TransformerConfig, seq_len: int, mode: str = "train", recompute: bool = False
) -> int:
    """FLOPs per token of a forward pass or of a whole training step.

    forward:  2 N_matmul + 4 L h s
    train:    3 x forward = 6 N_matmul + 12 L h s   (backward = 2 x forward:
              one matmul for the input gradient, one for the weight gradient)
    train with full activation recompute: one more forward, 4 x forward =
              8 N_matmul + 16 L h s. These are the FLOPs the hardware runs
              (for HFU); the model's FLOPs (for MFU) stay 3 x forward.
    """
    _check_mode(mode, recompute)
    forward = 2 * matmul_params(cfg) + attention_flops_per_token(cfg, seq_len)
    if mode == "forward":
        return forward
    return (4 if recompute else 3) * forward


def _check_mode(mode: str, recompute: bool) -> None:
    validate.one_of("mode", mode, MODES)
    validate.boolean("recompute", recompute)
    if mode == "forward" and recompute:
        raise ValueError("recompute=True only makes sense with mode='train'")


def six_nd(n_params: float, tokens: float) -> float:
    """Total training FLOPs C = 6 N D (Kaplan et al. 2020; Hoffmann et al. 2022)."""
    validate.positive("n_params", n_params)
    validate.positive("tokens", tokens)
    return 6 * n_params * tokens


def attention_share(cfg: TransformerConfig, seq_len: int) -> float:
    """The fraction of training FLOPs that the attention term 12 L h s is."""
    return attention_flops_per_token(cfg, seq_len) / flops_per_token(
        cfg, seq_len, "forward"
    )
