"""Measured counterparts of mlbook.recompute, on the book's small GPT.

- ``saved_tensors``: the tensors autograd keeps for backward, counted with
  torch.autograd.graph.saved_tensors_hooks (one entry per storage, weights
  left out), and ``compare_block`` which sets them beside Korthikanti's count
  for the same block.
- ``use_strategy``: the GPT's blocks run plain, under torch.utils.checkpoint
  (full recompute) or under PyTorch's selective activation checkpointing
  (create_selective_checkpoint_contexts), and ``measure_strategies`` measures
  each one's memory (torch's MemTracker), step time and counted FLOPs.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)

from . import measure, validate
from .config import TransformerConfig
from .model import GPT, Block, random_batch
from .recompute import SCORE_ITEMS, block_saved_items

# Saved bytes of a real block agree with the formula for that block (fp32 or
# bf16 values, the device's dropout-mask size) to within this share; what is
# left is the LayerNorms' per-token statistics and the causal mask, which the
# paper's fused kernels do not keep.
SAVED_BYTES_TOLERANCE = 0.02

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STRATEGIES = ("none", "selective", "full")


@dataclass(frozen=True)
class SavedTensor:
    shape: tuple
    dtype: str
    nbytes: int
    kind: str


def _kind(t: torch.Tensor, b: int, s: int, a: int) -> str:
    shape = tuple(t.shape)
    if t.dtype == torch.bool and shape == (s, s):
        return "causal mask"
    if shape == (b, s, 1):
        return "LayerNorm statistics"
    if shape == (b, a, s):
        return "attention log-sum-exp"
    return "activation"


def saved_tensors(module: torch.nn.Module, x: torch.Tensor, n_heads: int) -> list[SavedTensor]:
    """What autograd keeps for the backward of ``module(x)``.

    Every tensor an operator saves passes through the pack hook; several
    operators may save views of one storage, so each storage is counted once,
    at its full size. The module's own weights are left out: they are model
    state, not activations.
    """
    b, s = x.shape[0], x.shape[1]
    weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, SavedTensor] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in weights and ptr not in seen:
            seen[ptr] = SavedTensor(tuple(t.shape), str(t.dtype).removeprefix("torch."),
                                    storage.nbytes(), _kind(t, b, s, n_heads))
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
    return 1 if device == "cuda" else act_bytes


def compare_block(cfg: TransformerConfig, s: int, b: int, dtype: str = "fp32",
                  dropout: float = 0.0, device: str = "cpu", attn_impl: str = "math",
                  seed: int = 0) -> dict:
    """Measured saved bytes of one GPT block against the formula for it.

    The formula is Korthikanti's item list (block_saved_items) with this
    block's storage sizes: act_bytes from ``dtype``, the device's dropout-mask
    size, masks only when dropout > 0. A fused attention kernel
    (attn_impl="sdpa") keeps no s x s tensor, so its formula drops those items.
    Returns measured and formula bytes, the named extras (LayerNorm statistics,
    causal mask, log-sum-exp), the residual measured - formula - extras, and
    the measured tensors.
    """
    validate.one_of("dtype", dtype, tuple(DTYPES))
    if cfg.mlp != "gelu" or cfg.n_kv_heads != cfg.n_heads:
        raise ValueError("compare_block needs Korthikanti's block: a GELU MLP and "
                         f"multi-head attention; got mlp={cfg.mlp!r}, n_kv_heads={cfg.n_kv_heads}")
    torch.manual_seed(seed)
    torch_dtype = DTYPES[dtype]
    block = Block(cfg, dropout=dropout, attn_impl=attn_impl).to(device=device, dtype=torch_dtype).train()
    x = torch.randn(b, s, cfg.d_model, device=device, dtype=torch_dtype, requires_grad=True)
    saved = saved_tensors(block, x, cfg.n_heads)
    act_bytes = torch.finfo(torch_dtype).bits // 8
    items = block_saved_items(s, b, cfg.d_model, cfg.n_heads, act_bytes=act_bytes,
                              mask_bytes=dropout_mask_bytes(device, act_bytes),
                              dropout=dropout > 0, d_ff_mult=cfg.d_ff / cfg.d_model)
    if attn_impl == "sdpa":
        items = {k: v for k, v in items.items() if k not in SCORE_ITEMS}
    measured = sum(t.nbytes for t in saved)
    formula = sum(items.values())
    extras = {}
    for t in saved:
        if t.kind != "activation":
            extras[t.kind] = extras.get(t.kind, 0) + t.nbytes
    return {"measured_bytes": measured, "formula_bytes": formula, "formula_items": items,
            "extras": extras, "residual_bytes": measured - formula - sum(extras.values()),
            "saved": saved, "act_bytes": act_bytes}


# --- checkpointing the small GPT ----------------------------------------------------

_aten = torch.ops.aten
# Selective recompute, PyTorch's way: keep the outputs of the weight matmuls
# (the expensive ops), recompute everything else. Inside a block the only
# other matmuls are the attention core's two bmm, so the extra FLOPs are the
# core's, as in Korthikanti et al.; norms, GELU and copies are recomputed too.
SAVED_OPS = (_aten.mm.default, _aten.addmm.default)


def selective_policy(ctx, op, *args, **kwargs):
    """Save the output of every weight matmul; recompute the rest."""
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def full_block(block, x):
    """Keep only the block's input; run its forward again during backward."""
    return checkpoint(block, x, use_reentrant=False)


def selective_block(block, x):
    """Keep the weight matmuls' outputs; recompute the attention core and the
    elementwise ops during backward."""
    context = functools.partial(create_selective_checkpoint_contexts, selective_policy)
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


def activation_memory(model: GPT, idx, targets) -> dict:
    """Tensor bytes during one forward and backward, tracked by torch's
    MemTracker (a dispatch mode that follows every storage on any device).

    kept_bytes: activations alive at the end of the forward, what backward
    will read. peak_bytes: the most bytes alive at once during the step,
    beyond the weights (activations, gradients and temporaries).
    """
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
        return sum(v for k, v in snapshot[device].items() if getattr(k, "name", k) == kind)

    model.zero_grad(set_to_none=True)
    return {"kept_bytes": bytes_of(after_forward, "ACT"),
            "peak_bytes": bytes_of(peak, "Total") - bytes_of(peak, "PARAM")}


@dataclass
class StrategyResult:
    strategy: str
    flops: int
    kept_bytes: int
    peak_bytes: int
    step_s: list = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return measure.median_s(self.step_s)

    @property
    def best_s(self) -> float:
        """The fastest step: on a shared machine, the one least disturbed by
        other work, so the fairest comparison between strategies."""
        return min(self.step_s)


def measure_strategies(cfg: TransformerConfig, s: int, b: int, device: str = "cpu",
                       rounds: int = 3, seed: int = 0, cpu_threads: int | None = 1,
                       log=print) -> dict:
    """Counted FLOPs, activation memory and step times of the small GPT under
    each strategy, on one model and one batch.

    Steps are timed in interleaved rounds (none, selective, full, none, ...)
    so that a machine whose speed drifts treats every strategy alike. On a
    CPU everything runs on ``cpu_threads`` threads (None: torch's setting):
    with one, other programs sharing the machine cannot stall a parallel
    region halfway, which makes two-thread timings swing tenfold. Also
    counts the FLOPs of full recompute with early stopping off ("full, whole
    forward") and of a forward alone.
    """
    validate.positive_int("rounds", rounds)
    threads = torch.get_num_threads()
    if device == "cpu" and cpu_threads is not None:
        torch.set_num_threads(validate.positive_int("cpu_threads", cpu_threads))
    try:
        return _measure_strategies(cfg, s, b, device, rounds, seed, log)
    finally:
        torch.set_num_threads(threads)


def _measure_strategies(cfg, s, b, device, rounds, seed, log) -> dict:
    torch.manual_seed(seed)
    model = GPT(cfg, max_seq_len=s).to(device)
    gen = torch.Generator().manual_seed(seed)
    idx, tgt = random_batch(cfg, b, s, device, generator=gen)
    results = {}
    for strategy in STRATEGIES:
        log(f"  {strategy}: counting FLOPs and tracking memory ...", flush=True)
        with use_strategy(model, strategy):
            flops = measure.counted_flops(model, idx, tgt)["total"]
            mem = activation_memory(model, idx, tgt)
        results[strategy] = StrategyResult(strategy, flops, mem["kept_bytes"], mem["peak_bytes"])
    with use_strategy(model, "full", early_stop=False):
        results["full_whole_forward_flops"] = measure.counted_flops(model, idx, tgt)["total"]
    results["forward_flops"] = measure.counted_flops(model, idx, tgt, backward=False)["total"]

    def step_fn(strategy):
        def step():
            with use_strategy(model, strategy):
                model.zero_grad(set_to_none=True)
                _, loss = model(idx, tgt)
                loss.backward()
        return step

    steps = {k: step_fn(k) for k in STRATEGIES}
    for k in STRATEGIES:  # warm-up
        measure.time_steps(steps[k], steps=1, warmup=0, device=device)
    for r in range(rounds):
        log(f"  timing round {r + 1}/{rounds} ...", flush=True)
        for k in STRATEGIES:
            results[k].step_s += measure.time_steps(steps[k], steps=1, warmup=0, device=device)
    return results
