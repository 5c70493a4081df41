"""Measured counterparts of mlbook.recompute.formulas, on the book's small GPT.

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

from mlbook.common_torch import timing as measure
from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch.gpt import GPT, Block, random_batch
from mlbook.common.memory import activation_bytes_per_layer
from mlbook.page import Report
from mlbook.recompute.formulas import SCORE_ITEMS, block_saved_items

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
    with measure.cpu_threads(cpu_threads, device):
        return _measure_strategies(cfg, s, b, device, rounds, seed, log)


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


# --- page helpers: what the chapter's cells print and glue ---------------------------

BLOCK_CASES = (("fp32, no dropout", "fp32", 0.0, "math"), ("fp32, dropout 0.1", "fp32", 0.1, "math"),
               ("bf16, dropout 0.1", "bf16", 0.1, "math"), ("fp32, fused SDPA", "fp32", 0.0, "sdpa"))


def block_checks(cfg: TransformerConfig, s: int, b: int, device: str, device_name: str,
                 seed: int = 0) -> tuple[Report, dict]:
    """compare_block for the page's four cases: a table, the glued values, and
    the per-case results (the caller lists one case's tensors)."""
    h, a = cfg.d_model, cfg.n_heads
    lines = [f"one block: s={s}, b={b}, h={h}, a={a}, on {device_name}",
             f"{'case':>18} {'measured':>11} {'formula':>11} {'LN stats':>9} {'mask/lse':>9}"
             f" {'rest':>5} {'ratio':>7}"]
    checks = {}
    for label, dtype, p, impl in BLOCK_CASES:
        r = compare_block(cfg, s, b, dtype, p, device, impl, seed=seed)
        checks[label] = r
        ln = r["extras"].get("LayerNorm statistics", 0)
        other = sum(r["extras"].values()) - ln
        lines.append(f"{label:>18} {r['measured_bytes']:>11,} {r['formula_bytes']:>11,} {ln:>9,}"
                     f" {other:>9,} {r['residual_bytes']:>5,}"
                     f" {r['measured_bytes'] / r['formula_bytes']:>7.4f}")
    lines.append("ratio = measured / formula")
    worst = max(abs(r["measured_bytes"] / r["formula_bytes"] - 1) for r in checks.values())
    if worst > SAVED_BYTES_TOLERANCE:
        raise AssertionError(f"measured saved bytes differ from the formula by {worst:.2%}")
    no_drop, drop = checks["fp32, no dropout"], checks["fp32, dropout 0.1"]
    fused = checks["fp32, fused SDPA"]
    fp32_vs_paper = no_drop["measured_bytes"] / activation_bytes_per_layer(s, b, h, a)
    zero = all(r["residual_bytes"] == 0 for r in checks.values())
    g = {
        "tol": (SAVED_BYTES_TOLERANCE, ".0%"),
        "worst": (worst, ".2%"),
        "all_residual_zero": ("zero" if zero else "not zero (see the table)", None),
        "fp32_vs_paper": (fp32_vs_paper, ".2f"),
        "fp32_vs_twice": ("less than" if fp32_vs_paper < 2 else "more than", None),
        "mask_bytes_here": (dropout_mask_bytes(device, 4), "d"),
        "extras_share": (sum(no_drop["extras"].values()) / no_drop["measured_bytes"], ".2%"),
        "dropout_extra": (drop["measured_bytes"] - no_drop["measured_bytes"], ",d"),
        "fused_saving": (1 - fused["measured_bytes"] / no_drop["measured_bytes"], ".0%"),
        "square_share": ((no_drop["formula_bytes"] - fused["formula_bytes"])
                         / no_drop["formula_bytes"], ".0%"),
        "sdpa_kernel": ("the CPU flash kernel" if device == "cpu"
                        else "the kernel PyTorch picks for this GPU and dtype", None),
    }
    return Report(lines, g), checks


def strategies_table(res: dict) -> Report:
    """Memory, fastest step and counted FLOPs of each strategy (from
    measure_strategies), relative to no recompute."""
    base = res["none"]
    lines = [f"{'strategy':>10} {'kept MiB':>9} {'peak MiB':>9} {'best ms':>8} {'time':>6}"
             f" {'counted FLOPs':>15} {'FLOPs':>7}"]
    for k in STRATEGIES:
        r = res[k]
        lines.append(f"{k:>10} {r.kept_bytes / 2**20:>9.2f} {r.peak_bytes / 2**20:>9.2f}"
                     f" {r.best_s * 1e3:>8.1f} {r.best_s / base.best_s:>6.2f}"
                     f" {r.flops:>15,} {r.flops / base.flops:>7.4f}")
    lines.append("time and FLOPs: relative to none; best ms: the fastest step")
    return Report(lines, {})


def _time_word(extra_time: float, extra_flops: float, close: float = 0.02) -> str:
    if extra_time > extra_flops + close:
        return "more"
    if extra_time < extra_flops - close:
        return "less"
    return "about as much"


def _time_vs_flops(extra_t: dict, extra_f: dict) -> str:
    """"both took more extra time", or one clause per strategy: measured time
    overheads against the FLOP overheads."""
    sel = _time_word(extra_t["selective"], extra_f["selective"])
    full = _time_word(extra_t["full"], extra_f["full"])
    if sel == full:
        return f"both took {sel} extra time"
    return f"selective recompute took {sel} extra time and full recompute {full}"


def flop_check(res: dict, cfg: TransformerConfig, s: int, b: int, rounds: int) -> Report:
    """Counted extra FLOPs of each strategy against the formulas (asserted
    equal to the FLOP), and the glued memory, time and FLOP figures, with the
    sentences about time chosen from the measurement."""
    from mlbook.recompute.formulas import layer_forward_flops, selective_extra_flops_fraction

    L, h = cfg.n_layers, cfg.d_model
    base = res["none"]
    head_train = head_flops(cfg, s, b)
    blocks_fwd = res["forward_flops"] - head_flops(cfg, s, b, backward=False)
    layer_f = layer_forward_flops(s, b, h)
    core = 4 * b * s * s * h                     # Q K^T and P V, forward, one layer
    last_mm = 2 * b * s * cfg.d_ff * h           # the MLP's second matmul, forward, one layer
    whole = res["full_whole_forward_flops"]
    rows = [("selective - none", res["selective"].flops - base.flops, int(L * core),
             "L x attention core"),
            ("full (whole forward) - none", whole - base.flops, int(L * layer_f), "L x F"),
            ("full (PyTorch default) - none", res["full"].flops - base.flops,
             int(L * (layer_f - last_mm)), "L x (F - last matmul)")]
    lines = [f"{'extra FLOPs':>30} {'counted':>13} {'formula':>13}  formula"]
    lines += [f"{name:>30} {got:>13,} {want:>13,}  {how}" for name, got, want, how in rows]
    if blocks_fwd != L * layer_f or any(got != want for _, got, want, _ in rows):
        raise AssertionError("counted FLOPs differ from the formulas")
    blocks_ratio = (whole - head_train) / (base.flops - head_train)
    lines.append(f"blocks' FLOPs with full recompute / without: {blocks_ratio:.6f}"
                 f" (4/3 = {4 / 3:.6f})")
    g = {"blocks_ratio": (blocks_ratio, ".4f"),
         "whole_ratio": (whole / base.flops, ".4f"),
         "default_ratio": (res["full"].flops / base.flops, ".4f"),
         "sel_ratio": (res["selective"].flops / base.flops, ".4f"),
         "sel_formula": (selective_extra_flops_fraction(s, h), ".2%"),
         "sel_measured_extra": ((res["selective"].flops - base.flops) / (base.flops - head_train),
                                ".2%"),
         "run_rounds": (rounds, "d"),
         "run_none_ms": (base.best_s * 1e3, ".0f"),
         "run_tokens": (b * s, ",d")}
    extra_t, extra_f = {}, {}
    for k in STRATEGIES:
        g[f"run_{k}_kept"] = (res[k].kept_bytes / 2**20, ".1f")
        g[f"run_{k}_peak"] = (res[k].peak_bytes / 2**20, ".1f")
        extra_t[k] = res[k].best_s / base.best_s - 1
        extra_f[k] = res[k].flops / base.flops - 1
        g[f"run_{k}_time"] = (extra_t[k], "+.0%")
        g[f"run_{k}_flops"] = (extra_f[k], "+.0%")
    if extra_t["selective"] < extra_t["full"]:
        order = ("Selective recompute was the faster of the two here, as its fewer extra "
                 "FLOPs suggest")
    else:
        order = ("Selective recompute was no faster than full recompute here, although it "
                 "reruns fewer FLOPs")
    if any(extra_t[k] > extra_f[k] + 0.02 for k in ("selective", "full")):
        why = ("Some costs do not shrink with the FLOPs: the checkpoint machinery runs once "
               "per block, and selective checkpointing inspects every operator in a Python "
               "dispatch mode, which can cost more than the FLOPs it saves")
    else:
        why = ("At this size the checkpoint machinery, which runs once per block, and "
               "selective checkpointing's per-operator dispatch mode cost no more than the "
               "recomputed FLOPs")
    g["time_order"] = (order, None)
    g["time_why"] = (why, None)
    g["time_vs_flops"] = (_time_vs_flops(extra_t, extra_f), None)
    return Report(lines, g)
