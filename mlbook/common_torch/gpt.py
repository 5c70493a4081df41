"""A small GPT that every chapter's demos share.

Pre-norm decoder blocks with causal self-attention (grouped-query when
n_kv_heads < n_heads) and a SwiGLU or GELU MLP, no biases, learned position
embeddings, and an LM head that may share the token embedding. The attention
is written out (scores, mask, softmax, dropout, P V) so that FlopCounterMode
and saved-tensor hooks see every piece; ``attn_impl="sdpa"`` swaps in
torch's fused scaled_dot_product_attention instead.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig

ATTN_IMPLS = ("math", "sdpa")


def tiny_config(
    n_layers: int = 4,
    d_model: int = 256,
    n_heads: int = 4,
    vocab_size: int = 2048,
    mlp: str = "gelu",
    **kw,
) -> TransformerConfig:
    """The book's small GPT: d_ff = 4 d_model, sizes that run in seconds on a CPU."""
    return TransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=4 * d_model,
        vocab_size=vocab_size,
        mlp=mlp,
        name=kw.pop("name", "tiny GPT"),
        **kw,
    )


class CausalSelfAttention(nn.Module):
    def __init__(
        self, cfg: TransformerConfig, dropout: float = 0.0, attn_impl: str = "math"
    ):
        super().__init__()
        validate.one_of("attn_impl", attn_impl, ATTN_IMPLS)
        self.n_heads, self.n_kv_heads, self.head_dim = (
            cfg.n_heads,
            cfg.n_kv_heads,
            cfg.head_dim,
        )
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.kv_dim, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = dropout
        self.attn_impl = attn_impl

    def forward(self, x):
        b, s, h = x.shape
        q = (
            self.q(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        )  # (b, a, s, hd)
        k = (
            self.k(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        )  # (b, kv, s, hd)
        v = self.v(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if (
            self.n_kv_heads != self.n_heads
        ):  # each K/V head serves a group of query heads
            group = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(group, dim=1)  # (b, a, s, hd)
            v = v.repeat_interleave(group, dim=1)
        p_drop = self.dropout if self.training else 0.0
        if self.attn_impl == "sdpa":
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=p_drop, is_causal=True
            )
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(
                self.head_dim
            )  # (b, a, s, s)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            probs = F.dropout(probs, p_drop, self.training)
            y = probs @ v  # (b, a, s, hd)
        y = y.transpose(1, 2).reshape(b, s, h)  # (b, s, h)
        return F.dropout(self.o(y), p_drop, self.training)


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig, dropout: float = 0.0):
        super().__init__()
        self.kind = cfg.mlp
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        if cfg.mlp == "swiglu":
            self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.dropout = dropout

    def forward(self, x):
        if self.kind == "swiglu":
            hidden = F.silu(self.gate(x)) * self.up(x)  # (b, s, d_ff)
        else:
            hidden = F.gelu(self.up(x))  # (b, s, d_ff)
        return F.dropout(self.down(hidden), self.dropout, self.training)


class Block(nn.Module):
    def __init__(
        self, cfg: TransformerConfig, dropout: float = 0.0, attn_impl: str = "math"
    ):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=False)
        self.attn = CausalSelfAttention(cfg, dropout, attn_impl)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=False)
        self.mlp = MLP(cfg, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A decoder-only transformer built from a TransformerConfig.

    ``forward(idx, targets=None)`` returns logits (b, s, V) and, with targets,
    the mean cross-entropy. ``block_fn`` lets a chapter wrap every block call
    (activation checkpointing does this).
    """

    def __init__(
        self,
        cfg: TransformerConfig,
        max_seq_len: int = 256,
        dropout: float = 0.0,
        attn_impl: str = "math",
    ):
        super().__init__()
        validate.positive_int("max_seq_len", max_seq_len)
        validate.fraction("dropout", dropout, allow_zero=True, allow_one=False)
        self.cfg, self.max_seq_len = cfg, max_seq_len
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg, dropout, attn_impl) for _ in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.head.weight = self.tok_emb.weight
        self.block_fn = None
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx, targets=None):
        b, s = idx.shape
        if s > self.max_seq_len:
            raise ValueError(
                f"sequence length {s} exceeds max_seq_len={self.max_seq_len}"
            )
        pos = torch.arange(s, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (b, s, h)
        for block in self.blocks:
            x = block(x) if self.block_fn is None else self.block_fn(block, x)
        logits = self.head(self.ln_f(x))  # (b, s, V)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def random_batch(
    cfg: TransformerConfig,
    batch_size: int,
    seq_len: int,
    device="cpu",
    generator: torch.Generator | None = None,
):
    """Random token ids and next-token targets: enough to time and count a step."""
    validate.positive_int("batch_size", batch_size)
    validate.positive_int("seq_len", seq_len)
    ids = torch.randint(
        0, cfg.vocab_size, (batch_size, seq_len + 1), generator=generator
    )
    ids = ids.to(device)
    return ids[:, :-1], ids[:, 1:]


def train_step(model: GPT, optimizer, idx, targets) -> float:
    """One forward, backward and optimizer step; returns the loss as a float."""
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(idx, targets)
    loss.backward()
    optimizer.step()
    return loss.item()
