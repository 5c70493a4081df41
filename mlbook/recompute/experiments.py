"""Measured counterparts of mlbook.recompute.formulas, on the book's small GPT
and on a Llama-shaped block.

- ``saved_tensors``: the tensors autograd keeps for backward, counted with
  torch.autograd.graph.saved_tensors_hooks (one entry per storage, weights
  and constant buffers left out); ``compare_block`` sets them beside
  Korthikanti's count for one GPT block, ``compare_llama_block`` beside the
  count for a Llama-shaped block (RMSNorm, RoPE, SwiGLU, no dropout).
- ``use_strategy``: the GPT's blocks run plain, under torch.utils.checkpoint
  (full recompute) or under PyTorch's selective activation checkpointing
  (create_selective_checkpoint_contexts), and ``measure_strategies`` measures
  each one's memory (torch's MemTracker), step time and counted FLOPs;
  ``flop_check`` sets the counted FLOPs beside the formulas.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch import timing as measure
from mlbook.common_torch.dtypes import DTYPES
from mlbook.common_torch.gpt import GPT, MLP, Block, CausalSelfAttention, random_batch
from mlbook.common_torch.memtrace import FusedRMSNormFn, RMSNorm  # noqa: F401 (both named here)
from mlbook.recompute.formulas import (
    SCORE_ITEMS,
    block_saved_items,
    layer_bytes,
    layer_forward_flops,
)

# Saved bytes of a real block agree with the formula for that block (its
# dtype, the device's dropout-mask size, its MLP) to within this share; what
# is left is the norms' per-token statistics and the causal mask, which the
# paper's fused kernels do not keep.
SAVED_BYTES_TOLERANCE = 0.02

STRATEGIES = ("none", "selective", "full")
# The page's four GPT-block cases: (label, dtype, dropout, attention).
BLOCK_CASES = (
    ("fp32, no dropout", "fp32", 0.0, "math"),
    ("fp32, dropout 0.1", "fp32", 0.1, "math"),
    ("bf16, dropout 0.1", "bf16", 0.1, "math"),
    ("fp32, fused SDPA", "fp32", 0.0, "sdpa"),
)


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for backward."""

    shape: tuple
    dtype: str
    nbytes: int
    kind: (
        str  # "activation", "norm statistics", "causal mask" or "attention log-sum-exp"
    )


def _kind(t: torch.Tensor, b: int, s: int, a: int) -> str:
    shape = tuple(t.shape)
    if t.dtype == torch.bool and shape == (s, s):
        return "causal mask"
    if shape == (b, s, 1):
        return "norm statistics"
    if shape == (b, a, s):
        return "attention log-sum-exp"
    return "activation"


def saved_tensors(
    module: nn.Module, x: torch.Tensor, n_heads: int
) -> list[SavedTensor]:
    """What autograd keeps for the backward of ``module(x)``.

    Every tensor an operator saves passes through the pack hook; several
    operators may save views of one storage, so each storage is counted once,
    at its full size. The module's own weights and buffers (RoPE's sine and
    cosine tables) are left out: they are model state and constants, not
    activations.
    """
    b, s = x.shape[0], x.shape[1]
    state = {
        t.untyped_storage().data_ptr()
        for t in (*module.parameters(), *module.buffers())
    }
    seen: dict[int, SavedTensor] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in state and ptr not in seen:
            seen[ptr] = SavedTensor(
                tuple(t.shape),
                str(t.dtype).removeprefix("torch."),
                storage.nbytes(),
                _kind(t, b, s, n_heads),
            )
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return list(seen.values())


def dropout_mask_bytes(device: str, act_bytes: int) -> int:
    """Bytes a dropout mask value takes on ``device``.

    On CUDA, F.dropout runs the fused native_dropout kernel and autograd keeps
    a bool mask, 1 byte a value, as Korthikanti et al. assume. On a CPU it
    draws a noise tensor in the activation's dtype, scaled by 1/(1-p), and
    keeps that: as many bytes as an activation value.
    """
    validate.one_of("device", device, ("cpu", "cuda"))
    return 1 if device == "cuda" else validate.positive_int("act_bytes", act_bytes)


@dataclass(frozen=True)
class BlockCount:
    """Measured saved bytes of one block beside the formula for that block.

    extras: bytes of the named kinds the formula leaves out (norm statistics,
    causal mask, log-sum-exp); residual_bytes = measured - formula - extras.
    """

    measured_bytes: int
    formula_bytes: float
    formula_items: dict
    extras: dict
    residual_bytes: float
    saved: tuple
    act_bytes: int

    @property
    def ratio(self) -> float:
        """measured / formula."""
        return self.measured_bytes / self.formula_bytes

    @property
    def norm_stats_bytes(self) -> int:
        """The norms' per-token statistics among the extras."""
        return self.extras.get("norm statistics", 0)

    @property
    def other_extra_bytes(self) -> int:
        """The other extras: the causal mask, or a fused kernel's log-sum-exp."""
        return sum(self.extras.values()) - self.norm_stats_bytes


def _count(
    block: nn.Module,
    cfg: TransformerConfig,
    s: int,
    b: int,
    torch_dtype,
    device: str,
    items: dict,
) -> BlockCount:
    x = torch.randn(
        b, s, cfg.d_model, device=device, dtype=torch_dtype, requires_grad=True
    )
    saved = saved_tensors(block, x, cfg.n_heads)  # x: (b, s, h)
    measured = sum(t.nbytes for t in saved)
    formula = sum(items.values())
    extras: dict[str, int] = {}
    for t in saved:
        if t.kind != "activation":
            extras[t.kind] = extras.get(t.kind, 0) + t.nbytes
    return BlockCount(
        measured,
        formula,
        items,
        extras,
        measured - formula - sum(extras.values()),
        tuple(saved),
        torch.finfo(torch_dtype).bits // 8,
    )


def compare_block(
    cfg: TransformerConfig,
    s: int,
    b: int,
    dtype: str = "fp32",
    dropout: float = 0.0,
    device: str = "cpu",
    attn_impl: str = "math",
    seed: int = 0,
) -> BlockCount:
    """Measured saved bytes of one GPT block against the formula for it.

    The formula is Korthikanti's item list (block_saved_items) with this
    block's storage sizes: act_bytes from ``dtype``, the device's dropout-mask
    size, masks only when dropout > 0. A fused attention kernel
    (attn_impl="sdpa") keeps no s x s tensor, so its formula drops those items.
    """
    validate.one_of("dtype", dtype, tuple(DTYPES))
    if cfg.mlp != "gelu" or cfg.n_kv_heads != cfg.n_heads:
        raise ValueError(
            "compare_block needs Korthikanti's block: a GELU MLP and "
            f"multi-head attention; got mlp={cfg.mlp!r}, n_kv_heads={cfg.n_kv_heads}"
        )
    torch.manual_seed(seed)
    torch_dtype = DTYPES[validate.one_of("dtype", dtype, ("fp32", "bf16"))]
    block = (
        Block(cfg, dropout=dropout, attn_impl=attn_impl)
        .to(device=device, dtype=torch_dtype)
        .train()
    )
    act_bytes = torch.finfo(torch_dtype).bits // 8
    items = block_saved_items(
        s,
        b,
        cfg.d_model,
        cfg.n_heads,
        act_bytes=act_bytes,
        mask_bytes=dropout_mask_bytes(device, act_bytes),
        dropout=dropout > 0,
        d_ff_mult=cfg.d_ff / cfg.d_model,
    )
    if attn_impl == "sdpa":
        items = {k: v for k, v in items.items() if k not in SCORE_ITEMS}
    return _count(block, cfg, s, b, torch_dtype, device, items)


# --- a Llama-shaped block -----------------------------------------------------------


class Rotary(nn.Module):
    """A Q or K projection followed by rotary position embeddings (RoPE).

    The rotation multiplies by constant sine and cosine tables, so autograd
    keeps the tables (buffers, left out of the count) and not the unrotated
    projection: the rotated Q and K take the place of Q and K in the count.
    """

    def __init__(
        self, proj: nn.Linear, n_heads: int, max_seq_len: int, base: float = 10000.0
    ):
        super().__init__()
        self.proj, self.n_heads = proj, n_heads
        hd = proj.out_features // n_heads
        inv_freq = base ** (-torch.arange(0, hd, 2).float() / hd)  # (hd/2,)
        angles = torch.outer(torch.arange(max_seq_len).float(), inv_freq)  # (s, hd/2)
        angles = torch.cat([angles, angles], dim=-1)  # (s, hd)
        self.register_buffer(
            "cos", angles.cos()[:, None, :], persistent=False
        )  # (s, 1, hd)
        self.register_buffer("sin", angles.sin()[:, None, :], persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        y = self.proj(x).view(b, s, self.n_heads, -1)  # (b, s, a, hd)
        half = y.shape[-1] // 2
        rotated = torch.cat([-y[..., half:], y[..., :half]], dim=-1)
        return (y * self.cos[:s] + rotated * self.sin[:s]).flatten(2)  # (b, s, h)


class LlamaBlock(nn.Module):
    """A Llama 2 decoder block: RMSNorm, attention with RoPE written out
    (scores materialised, softmax in the activation dtype), RMSNorm, SwiGLU
    MLP, no dropout. Reuses the book's attention and MLP modules."""

    def __init__(self, cfg: TransformerConfig, max_seq_len: int):
        super().__init__()
        if cfg.mlp != "swiglu":
            raise ValueError(f"a Llama block has a SwiGLU MLP; got mlp={cfg.mlp!r}")
        self.ln1 = RMSNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, dropout=0.0, attn_impl="math")
        self.attn.q = Rotary(self.attn.q, cfg.n_heads, max_seq_len)
        self.attn.k = Rotary(self.attn.k, cfg.n_kv_heads, max_seq_len)
        self.ln2 = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg, dropout=0.0)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def compare_llama_block(
    cfg: TransformerConfig,
    s: int,
    b: int,
    dtype: str = "bf16",
    device: str = "cpu",
    seed: int = 0,
) -> BlockCount:
    """Measured saved bytes of one Llama-shaped block against the count for
    it: block_saved_items with a SwiGLU MLP of width cfg.d_ff, no dropout,
    ``dtype`` activations."""
    validate.one_of("dtype", dtype, tuple(DTYPES))
    if cfg.mlp != "swiglu" or cfg.n_kv_heads != cfg.n_heads:
        raise ValueError(
            "compare_llama_block needs Llama 2's block: a SwiGLU MLP and "
            f"multi-head attention; got mlp={cfg.mlp!r}, n_kv_heads={cfg.n_kv_heads}"
        )
    torch.manual_seed(seed)
    torch_dtype = DTYPES[validate.one_of("dtype", dtype, ("fp32", "bf16"))]
    block = LlamaBlock(cfg, max_seq_len=s).to(device=device, dtype=torch_dtype).train()
    act_bytes = torch.finfo(torch_dtype).bits // 8
    items = block_saved_items(
        s,
        b,
        cfg.d_model,
        cfg.n_heads,
        act_bytes=act_bytes,
        dropout=False,
        d_ff_mult=cfg.d_ff / cfg.d_model,
        mlp="swiglu",
    )
    return _count(block, cfg, s, b, torch_dtype, device, items)


# --- checkpointing the small GPT ----------------------------------------------------

_aten = torch.ops.aten
# Selective recompute, PyTorch's way: keep the outputs of the weight matmuls
# (the expensive ops), recompute everything else. Inside a block the only
# other matmuls are the attention core's two bmm, so the extra FLOPs are the
# core's, as in Korthikanti et al.; norms, GELU and copies are recomputed too.
SAVED_OPS = (_aten.mm.default, _aten.addmm.default)


def selective_policy(ctx, op, *args, **kwargs):
    """Save the output of every weight matmul; recompute the rest."""
    return (
        CheckpointPolicy.MUST_SAVE
        if op in SAVED_OPS
        else CheckpointPolicy.PREFER_RECOMPUTE
    )


def full_block(block, x):
    """Keep only the block's input; run its forward again during backward."""
    return checkpoint(block, x, use_reentrant=False)


def selective_block(block, x):
    """Keep the weight matmuls' outputs; recompute the attention core and the
    elementwise ops during backward."""
    context = functools.partial(
        create_selective_checkpoint_contexts,
        selective_policy,
    )
    return checkpoint(block, x, use_reentrant=False, context_fn=context)


BLOCK_FNS = {"none": None, "selective": selective_block, "full": full_block}


@contextlib.contextmanager
def use_strategy(model: GPT, strategy: str, early_stop: bool = True):
    """Run the model's blocks under ``strategy`` inside the with-block.

    early_stop=False makes torch.utils.checkpoint rerun each block's whole
    forward; by default it stops as soon as it has every tensor backward
    needs, which skips the last matmul of a block.
    """
    validate.one_of("strategy", strategy, STRATEGIES)
    previous = model.block_fn
    model.block_fn = BLOCK_FNS[strategy]
    try:
        with set_checkpoint_early_stop(early_stop):
            yield model
    finally:
        model.block_fn = previous


def head_flops(cfg: TransformerConfig, s: int, b: int, backward: bool = True) -> int:
    """FLOPs of the LM head, the one matmul outside the blocks: 2 b s h V
    forward, three times that for forward and backward."""
    return (3 if backward else 1) * 2 * b * s * cfg.d_model * cfg.vocab_size


@dataclass(frozen=True)
class MemoryUse:
    """kept_bytes: activations alive at the end of the forward, what backward
    will read. peak_bytes: the most bytes alive at once during the step,
    beyond the weights (activations, gradients and temporaries)."""

    kept_bytes: int
    peak_bytes: int


def activation_memory(model: GPT, idx, targets) -> MemoryUse:
    """Tensor bytes during one forward and backward, tracked by torch's
    MemTracker (a dispatch mode that follows every storage on any device)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model.zero_grad(set_to_none=True)
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        _, loss = model(idx, targets)
        after_forward = tracker.get_tracker_snapshot("current")
        loss.backward()
    peak = tracker.get_tracker_snapshot("peak")
    device = idx.device

    def bytes_of(snapshot, kind):  # keys are MemTracker's categories, plus "Total"
        return sum(
            v for k, v in snapshot[device].items() if getattr(k, "name", k) == kind
        )

    model.zero_grad(set_to_none=True)
    return MemoryUse(
        kept_bytes=bytes_of(after_forward, "ACT"),
        peak_bytes=bytes_of(peak, "Total") - bytes_of(peak, "PARAM"),
    )


@dataclass(frozen=True)
class StrategyResult:
    """One strategy on the small GPT: counted FLOPs of a step, memory, and
    the wall time of each timed step."""

    strategy: str
    flops: int
    kept_bytes: int
    peak_bytes: int
    step_s: tuple

    @property
    def median_s(self) -> float:
        return measure.median_s(list(self.step_s))

    @property
    def best_s(self) -> float:
        """The fastest step: on a shared machine, the one least disturbed by
        other work, so the fairest comparison between strategies."""
        return min(self.step_s)


@dataclass(frozen=True)
class MeasuredStrategies:
    """What measure_strategies found: ``strategies`` maps "none",
    "selective" and "full" to a StrategyResult; full_whole_forward_flops is a
    step's FLOPs with full recompute rerunning each block's whole forward
    (early stop off); forward_flops is one forward without recompute."""

    cfg: TransformerConfig
    s: int
    b: int
    device: str
    strategies: dict
    full_whole_forward_flops: int
    forward_flops: int

    def __getitem__(self, strategy: str) -> StrategyResult:
        return self.strategies[strategy]


def measure_strategies(
    cfg: TransformerConfig,
    s: int,
    b: int,
    device: str = "cpu",
    rounds: int = 3,
    seed: int = 0,
    cpu_threads: int | None = 1,
    log=None,
) -> MeasuredStrategies:
    """Counted FLOPs, activation memory and step times of the small GPT under
    each strategy, on one model and one batch.

    Steps are timed in interleaved rounds (none, selective, full, none, ...)
    so that a machine whose speed drifts treats every strategy alike. On a
    CPU everything runs on ``cpu_threads`` threads (None: torch's setting):
    with one, other programs sharing the machine cannot stall a parallel
    region halfway, which makes two-thread timings swing tenfold. Also
    counts the FLOPs of full recompute with early stopping off and of a
    forward alone. ``log`` (print, say) receives progress lines; None: no log.
    """
    validate.positive_int("rounds", rounds)
    log = log or (lambda *_, **__: None)
    with measure.cpu_threads(cpu_threads, device):
        return _measure_strategies(cfg, s, b, device, rounds, seed, log)


def _measure_strategies(cfg, s, b, device, rounds, seed, log) -> MeasuredStrategies:
    torch.manual_seed(seed)
    model = GPT(cfg, max_seq_len=s).to(device)
    gen = torch.Generator().manual_seed(seed)
    idx, tgt = random_batch(cfg, b, s, device, generator=gen)
    counted = {}
    for strategy in STRATEGIES:
        log(f"  {strategy}: counting FLOPs and tracking memory ...", flush=True)
        with use_strategy(model, strategy):
            flops = measure.counted_flops(model, idx, tgt)["total"]
            counted[strategy] = (flops, activation_memory(model, idx, tgt))
    with use_strategy(model, "full", early_stop=False):
        whole = measure.counted_flops(model, idx, tgt)["total"]
    forward = measure.counted_flops(model, idx, tgt, backward=False)["total"]

    def step_fn(strategy):
        def step():
            with use_strategy(model, strategy):
                model.zero_grad(set_to_none=True)
                _, loss = model(idx, tgt)
                loss.backward()

        return step

    steps = {k: step_fn(k) for k in STRATEGIES}
    times: dict[str, list] = {k: [] for k in STRATEGIES}
    for k in STRATEGIES:  # warm-up
        measure.time_steps(steps[k], steps=1, warmup=0, device=device)
    for r in range(rounds):
        log(f"  timing round {r + 1}/{rounds} ...", flush=True)
        for k in STRATEGIES:
            times[k] += measure.time_steps(steps[k], steps=1, warmup=0, device=device)
    results = {
        k: StrategyResult(
            k,
            counted[k][0],
            counted[k][1].kept_bytes,
            counted[k][1].peak_bytes,
            tuple(times[k]),
        )
        for k in STRATEGIES
    }
    return MeasuredStrategies(cfg, s, b, device, results, whole, forward)


@dataclass(frozen=True)
class FlopCheck:
    """Counted FLOPs of the recompute strategies beside the formulas.

    Each pair is (counted, formula), whole training steps of the small GPT:
    selective_extra (L x the attention core), full_whole_extra (L x F, full
    recompute rerunning each block's whole forward), full_default_extra
    (L x (F - the MLP's last matmul), PyTorch's early-stopping default), and
    blocks_forward (the blocks of one forward, L x F). head_flops: the LM
    head's training FLOPs, which no strategy recomputes.
    """

    selective_extra: tuple
    full_whole_extra: tuple
    full_default_extra: tuple
    blocks_forward: tuple
    head_flops: int
    none_flops: int

    @property
    def exact(self) -> bool:
        """Every count equals its formula, to the FLOP."""
        return all(
            c == f
            for c, f in (
                self.selective_extra,
                self.full_whole_extra,
                self.full_default_extra,
                self.blocks_forward,
            )
        )

    @property
    def blocks_ratio(self) -> float:
        """The blocks' FLOPs with full recompute (whole forward) over without: 4/3."""
        blocks = self.none_flops - self.head_flops
        return (blocks + self.full_whole_extra[0]) / blocks

    @property
    def whole_ratio(self) -> float:
        """The whole step's FLOPs with full recompute (whole forward) over without."""
        return (self.none_flops + self.full_whole_extra[0]) / self.none_flops

    @property
    def default_ratio(self) -> float:
        """The whole step's FLOPs with PyTorch's default full recompute over without."""
        return (self.none_flops + self.full_default_extra[0]) / self.none_flops

    @property
    def selective_share(self) -> float:
        """Selective's extra FLOPs as a share of the blocks' training FLOPs."""
        return self.selective_extra[0] / (self.none_flops - self.head_flops)


def flop_check(res: MeasuredStrategies) -> FlopCheck:
    """The counted extra FLOPs of each strategy in ``res`` and the formula for
    each: L x 4bs^2h for the attention core (Q K^T and P V, forward), L x F
    for a block's forward (layer_forward_flops), 2 b s d_ff h for the MLP's
    second matmul."""
    cfg, s, b = res.cfg, res.s, res.b
    L, h = cfg.n_layers, cfg.d_model
    none = res["none"].flops
    layer_f = int(
        layer_forward_flops(s, b, h, cfg.d_ff / h)
    )  # whole numbers at these shapes
    core = 4 * b * s * s * h  # Q K^T and P V, forward, one layer
    last_mm = 2 * b * s * cfg.d_ff * h  # the MLP's second matmul, forward, one layer
    return FlopCheck(
        selective_extra=(res["selective"].flops - none, L * core),
        full_whole_extra=(res.full_whole_forward_flops - none, L * layer_f),
        full_default_extra=(res["full"].flops - none, L * (layer_f - last_mm)),
        blocks_forward=(
            res.forward_flops - head_flops(cfg, s, b, backward=False),
            L * layer_f,
        ),
        head_flops=head_flops(cfg, s, b),
        none_flops=none,
    )


# --- a whole model, traced on fake tensors ------------------------------------------


@dataclass(frozen=True)
class TracedStrategy:
    """One recompute strategy for a whole model: the chapter's count of what
    its layers keep (None where the chapter has no count for the strategy)
    beside the bytes a training step's forward pass keeps, traced on fake
    tensors (mlbook.common_torch.memtrace): in the layers, their norms' fp32
    statistics (which the count leaves out), and outside the layers."""

    model: str
    strategy: str
    counted_bytes: float | None
    traced_layers_bytes: float
    norm_stats_bytes: float
    outside_layers_bytes: float

    @property
    def ratio(self) -> float:
        """Traced over counted, the norms' statistics set aside."""
        if self.counted_bytes is None:
            return float("nan")
        return (self.traced_layers_bytes - self.norm_stats_bytes) / self.counted_bytes


def traced_strategies(cfg: TransformerConfig, s: int, b: int) -> list[TracedStrategy]:
    """``cfg``'s whole model at ``s`` tokens and micro-batch ``b`` under each
    recompute strategy the tracer builds: the count (layer_bytes for the
    model's own block: no dropout, its SwiGLU width, K and V at every head)
    beside the trace. "selective" recomputes the attention core, as the count
    does; "selective_matmuls" is this chapter's PyTorch policy, for which
    there is no count."""
    from mlbook.common_torch import memtrace

    counts = layer_bytes(
        s,
        b,
        cfg.d_model,
        cfg.n_heads,
        dropout=False,
        d_ff_mult=cfg.d_ff / cfg.d_model,
        mlp="swiglu",
    )
    rows = []
    for strategy in memtrace.STRATEGIES:
        acts = memtrace.traced_activations(cfg, s, b, recompute=strategy)
        counted = getattr(counts, strategy, None)
        # two RMSNorms a layer keep an fp32 inverse RMS per token, except
        # under full recompute, which keeps only the layer's input
        stats = 0 if strategy == "full" else 2 * 4 * s * b
        rows.append(
            TracedStrategy(
                cfg.name,
                strategy,
                None if counted is None else cfg.n_layers * counted,
                cfg.n_layers * acts.per_layer_bytes,
                cfg.n_layers * stats,
                acts.outside_layers_bytes,
            )
        )
    return rows
