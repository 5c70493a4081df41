"""Transformer shapes, with the published presets the book computes on.

Symbols follow book/notation.md: L = n_layers, h = d_model, a = n_heads,
d_ff = MLP width, V = vocab_size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlbook.common import validate

MLP_KINDS = ("swiglu", "gelu")


@dataclass(frozen=True)
class TransformerConfig:
    """The shape of a decoder-only transformer.

    n_kv_heads < n_heads is grouped-query attention (K and V projections are
    n_kv_heads * head_dim wide); it defaults to n_heads (multi-head attention).
    mlp is "swiglu" (three d_model x d_ff matrices) or "gelu" (two).
    tied_embeddings shares the input embedding with the LM head; the head is a
    matmul either way, the embedding lookup is a gather either way.
    """

    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    vocab_size: int
    n_kv_heads: int | None = None
    mlp: str = "swiglu"
    tied_embeddings: bool = False
    name: str = ""
    source: str = ""

    def __post_init__(self):
        for field in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size"):
            validate.positive_int(field, getattr(self, field))
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        validate.positive_int("n_kv_heads", self.n_kv_heads)
        validate.one_of("mlp", self.mlp, MLP_KINDS)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} "
                "(each head gets d_model / n_heads dimensions)"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                "(each K/V head serves a whole group of query heads)"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (and of the V) projection."""
        return self.n_kv_heads * self.head_dim

    def scaled(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (and checked again)."""
        return replace(self, **changes)


LLAMA2_7B = TransformerConfig(
    n_layers=32,
    d_model=4096,
    n_heads=32,
    d_ff=11008,
    vocab_size=32000,
    mlp="swiglu",
    tied_embeddings=False,
    name="Llama-2-7B",
    source="Touvron et al. 2023, arXiv:2307.09288, Table 1 and the released config",
)
LLAMA3_8B = TransformerConfig(
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    vocab_size=128256,
    name="Llama-3-8B",
    source=(
        "Grattafiori et al. 2024, arXiv:2407.21783, Table 3 (layers, width, heads, "
        "FFN); vocab_size from the released config.json (meta-llama/Meta-Llama-3-8B): "
        "128,000 BPE tokens and 256 reserved ones, where Table 3 prints 128,000"
    ),
)
LLAMA3_70B = TransformerConfig(
    n_layers=80,
    d_model=8192,
    n_heads=64,
    n_kv_heads=8,
    d_ff=28672,
    vocab_size=128256,
    name="Llama-3-70B",
    source=(
        "Grattafiori et al. 2024, arXiv:2407.21783, Table 3 (layers, width, heads, "
        "FFN); vocab_size from the released config.json (meta-llama/Meta-Llama-3-70B): "
        "128,000 BPE tokens and 256 reserved ones, where Table 3 prints 128,000"
    ),
)
LLAMA3_405B = TransformerConfig(
    n_layers=126,
    d_model=16384,
    n_heads=128,
    n_kv_heads=8,
    d_ff=53248,
    vocab_size=128256,
    name="Llama-3-405B",
    source=(
        "Grattafiori et al. 2024, arXiv:2407.21783, Table 3 (layers, width, heads, "
        "FFN); vocab_size from the released config.json (meta-llama/Llama-3.1-405B): "
        "128,000 BPE tokens and 256 reserved ones, where Table 3 prints 128,000"
    ),
)
GPT3_175B = TransformerConfig(
    n_layers=96,
    d_model=12288,
    n_heads=96,
    d_ff=4 * 12288,
    vocab_size=50257,
    mlp="gelu",
    tied_embeddings=True,
    name="GPT-3 175B",
    source="Brown et al. 2020, arXiv:2005.14165, Table 2.1 (d_ff = 4 d_model)",
)

PRESETS = {
    c.name: c for c in (LLAMA2_7B, LLAMA3_8B, LLAMA3_70B, LLAMA3_405B, GPT3_175B)
}

MT_NLG_530B = TransformerConfig(
    n_layers=105,
    d_model=20480,
    n_heads=128,
    d_ff=4 * 20480,
    vocab_size=50272,
    mlp="gelu",
    tied_embeddings=True,
    name="MT-NLG 530B",
    source="Smith et al. 2022, arXiv:2201.11990, Sec. 2 (d_ff = 4 d_model)",
)

PRESETS[MT_NLG_530B.name] = MT_NLG_530B


def gemm_shapes(cfg: TransformerConfig, tokens: int) -> tuple:
    """The (m, n, k) of every weight matmul one training step of ``cfg`` runs
    on ``tokens`` tokens (an (m x k) @ (k x n) product each): forward
    Y = X W^T is (tokens, out, in); the input gradient (tokens, in, out); the
    weight gradient (out, in, tokens). Distinct shapes, largest volume first:
    the MAMF probe times them first, so the ceiling covers the model's own
    shapes."""
    validate.instance_of("cfg", cfg, TransformerConfig)
    tokens = validate.positive_int("tokens", tokens)
    h, kv, ff, V = cfg.d_model, cfg.kv_dim, cfg.d_ff, cfg.vocab_size
    weights = [
        (h, h),
        (kv, h),
        (h, h),
        (ff, h),
        (h, ff),
        (V, h),
    ]  # (out, in): q, k/v, o, up, down, head
    if cfg.mlp == "swiglu":
        weights.append((ff, h))  # the gate
    shapes = set()
    for out, inp in weights:
        shapes |= {(tokens, out, inp), (tokens, inp, out), (out, inp, tokens)}
    return tuple(sorted(shapes, key=lambda s: (-(s[0] * s[1] * s[2]), s)))
