"""Will it fit: one training step's memory, traced on fake tensors.

A model built under ``FakeTensorMode`` has shapes, dtypes and devices but no
storage, so a step at a real model's size runs on any machine in seconds and
allocates nothing. ``torch.distributed._tools.mem_tracker.MemTracker`` sees
every tensor of that step and sorts it by kind (parameter, buffer, gradient,
activation, temporary, optimizer state) at each moment, and at the peak.

The traced model is Llama-shaped, in the planner's set-up: bf16 weights and
gradients, an optimizer holding an fp32 master copy and AdamW's two fp32
moments per parameter (``MasterAdamW``, 12 bytes a parameter); RMSNorm as a
fused kernel keeps it (its input and an fp32 inverse RMS a token); attention
written out (scores materialised, K and V repeated to every head before the
two matmuls, as the planner counts them); SwiGLU; the loss in fp32 over the
real vocabulary. Tensor parallelism over ``tp`` GPUs with sequence
parallelism is traced as one GPU's shard (``ShardedLlamaBlock``): heads and
d_ff split ``tp`` ways, the vocabulary split ``tp`` ways, and the norms, the
residual and the column-parallel linears' saved inputs held at s/tp tokens,
as Megatron-LM keeps them (Korthikanti et al. 2022, Sec. 4.2.2). The
collectives are stand-ins that only move shapes (a gather is a repeat, a
reduce-scatter a sum over chunks): their bytes are those of the real ones.

A whole model is composed from two traces: ``layers`` (two and three) of the
model's own layers with its own embedding, head and loss. Every kind of
bytes is linear in the layer count at a given step and phase, so the two
traces give a layer's bytes and the rest's, and ``L`` layers cost
rest + L x layer.

Recompute strategies (``STRATEGIES``): ``none``; ``selective``, the
planner's and Megatron-LM's, which recomputes the attention core only (the
scores, softmax and P V) and keeps everything else; ``selective_matmuls``,
the recompute chapter's PyTorch policy, which keeps only the weight matmuls'
outputs and recomputes everything else; ``full``, which keeps each layer's
input.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig

STRATEGIES = ("none", "selective", "selective_matmuls", "full")
KINDS = (
    "parameters",
    "buffers",
    "gradients",
    "activations",
    "temporaries",
    "optimizer",
)
# MemTracker's names for the kinds above
_MEMTRACKER_KINDS = {
    "Parameter": "parameters",
    "Buffer": "buffers",
    "Gradient": "gradients",
    "Activation": "activations",
    "Temp": "temporaries",
    "Optstate": "optimizer",
    "Other": "other",
}


# --- the optimizer --------------------------------------------------------------


class MasterAdamW(torch.optim.Optimizer):
    """AdamW on an fp32 master copy of 16-bit weights: the state a mixed-
    precision run keeps per parameter (master 4, m 4, v 4 bytes).

    Each step copies a parameter's gradient to fp32, updates the master copy
    with AdamW's rule (torch.optim.AdamW's, checked in the tests) and writes
    it back to the 16-bit weight, one parameter at a time, so the step's
    temporaries are one parameter's, not the model's. The step count is a
    Python int: no per-tensor counters."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        )
        self.steps = 0

    @torch.no_grad()
    def step(self, closure=None):
        self.steps += 1
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            bias1, bias2 = 1 - beta1**self.steps, 1 - beta2**self.steps
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["master"] = p.detach().to(torch.float32, copy=True)
                    state["exp_avg"] = torch.zeros_like(state["master"])
                    state["exp_avg_sq"] = torch.zeros_like(state["master"])
                master, m, v = state["master"], state["exp_avg"], state["exp_avg_sq"]
                grad = p.grad.to(torch.float32)
                master.mul_(1 - lr * group["weight_decay"])
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v / bias2).sqrt_().add_(eps)
                master.addcdiv_(m, denom, value=-lr / bias1)
                p.copy_(master)


# --- stand-ins for tensor- and sequence-parallel collectives ----------------------


def _gather(x, tp: int):
    """All-gather along the sequence: (b, s/tp, h) -> (b, s, h)."""
    return x if tp == 1 else x.repeat(1, tp, 1)


def _reduce_scatter(x, tp: int):
    """Reduce-scatter along the sequence: (b, s, h) partial sums -> (b, s/tp, h)."""
    if tp == 1:
        return x
    b, s, h = x.shape
    return x.view(b, tp, s // tp, h).sum(1)


class _GatheredLinear(torch.autograd.Function):
    """A column-parallel linear under sequence parallelism: the input is
    gathered from s/tp to s tokens, multiplied, and only the s/tp shard is
    kept for the backward pass, which gathers it again (Megatron-LM)."""

    @staticmethod
    def forward(ctx, shard, weight, tp):
        ctx.save_for_backward(shard, weight)
        ctx.tp = tp
        return F.linear(_gather(shard, tp), weight)

    @staticmethod
    def backward(ctx, grad):
        shard, weight = ctx.saved_tensors
        full = _gather(shard, ctx.tp)  # (b, s, h)
        grad_in = _reduce_scatter(grad @ weight, ctx.tp)
        grad_w = grad.flatten(0, -2).T @ full.flatten(0, -2)
        return grad_in, grad_w, None


def _column(x, linear: nn.Linear, tp: int):
    if tp == 1:
        return linear(x)
    return _GatheredLinear.apply(x, linear.weight, tp)


# --- the model ----------------------------------------------------------------------


class FusedRMSNormFn(torch.autograd.Function):
    """RMSNorm as one kernel computes it: forward and backward by hand, so
    autograd keeps only the input and one inverse RMS per token (fp32), as a
    fused kernel (Apex, Megatron-LM) does. torch.nn.RMSNorm on a CPU is
    written out in elementwise ops and keeps an fp32 copy and the normalised
    value as well."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.to(torch.promote_types(x.dtype, torch.float32))  # 16-bit inputs: fp32
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)  # (b, s, 1)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        xhat = x.to(rstd.dtype) * rstd  # (b, s, h)
        g = grad.to(rstd.dtype) * weight.to(rstd.dtype)
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = (grad.to(rstd.dtype) * xhat).sum(dim=tuple(range(grad.dim() - 1)))
        return dx.to(x.dtype), dw.to(weight.dtype), None


class RMSNorm(nn.Module):
    """RMSNorm with a fused-kernel memory footprint (input and rstd kept)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return FusedRMSNormFn.apply(x, self.weight, self.eps)


def _attention_core(q, k, v, mask, scale):
    """Scores, causal softmax and P V: what selective recompute recomputes.
    q, k, v: (b, a, s, hd), K and V already repeated to every head."""
    scores = (q @ k.transpose(-2, -1)) * scale  # (b, a, s, s)
    probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
    return probs @ v  # (b, a, s, hd)


class ShardedLlamaBlock(nn.Module):
    """One GPU's shard of a Llama decoder block under tensor parallelism
    ``tp`` with sequence parallelism (``tp`` = 1: the whole block). Takes and
    returns (b, s/tp, h)."""

    def __init__(self, cfg: TransformerConfig, seq_len: int, tp: int, mask, rope):
        super().__init__()
        h, hd = cfg.d_model, cfg.head_dim
        self.tp, self.hd, self.mask, self.rope = tp, hd, mask, rope
        self.heads, self.kv_heads = cfg.n_heads // tp, cfg.n_kv_heads // tp
        self.ln1, self.ln2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, self.heads * hd, bias=False)
        self.k = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.v = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.o = nn.Linear(self.heads * hd, h, bias=False)
        self.gate = nn.Linear(h, cfg.d_ff // tp, bias=False)
        self.up = nn.Linear(h, cfg.d_ff // tp, bias=False)
        self.down = nn.Linear(cfg.d_ff // tp, h, bias=False)
        self.core = _attention_core

    def _heads(self, y, n):
        b, s, _ = y.shape
        return y.view(b, s, n, self.hd).transpose(1, 2)  # (b, n, s, hd)

    def _rotate(self, y):
        cos, sin = self.rope  # (s, hd) each, bf16 constants
        half = y.shape[-1] // 2
        return y * cos + torch.cat([-y[..., half:], y[..., :half]], dim=-1) * sin

    def attention(self, x):
        q = self._rotate(self._heads(_column(x, self.q, self.tp), self.heads))
        k = self._rotate(self._heads(_column(x, self.k, self.tp), self.kv_heads))
        v = self._heads(_column(x, self.v, self.tp), self.kv_heads)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        y = self.core(q, k, v, self.mask, 1 / math.sqrt(self.hd))  # (b, a, s, hd)
        y = y.transpose(1, 2).flatten(2)  # (b, s, a hd)
        return _reduce_scatter(self.o(y), self.tp)  # row-parallel

    def mlp(self, x):
        hidden = F.silu(_column(x, self.gate, self.tp)) * _column(x, self.up, self.tp)
        return _reduce_scatter(self.down(hidden), self.tp)  # row-parallel

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


_aten = torch.ops.aten
_MATMULS = (_aten.mm.default, _aten.addmm.default)


def _keep_matmuls(ctx, op, *args, **kwargs):
    """The recompute chapter's selective policy: keep the weight matmuls'
    outputs, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    if op in _MATMULS:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _checkpointed_core(q, k, v, mask, scale):
    return checkpoint(_attention_core, q, k, v, mask, scale, use_reentrant=False)


class TracedLlama(nn.Module):
    """Embedding (vocabulary split tp ways), ``n_layers`` sharded blocks under
    ``recompute``, a final RMSNorm, the LM head (vocabulary split tp ways)
    and the cross-entropy in fp32."""

    def __init__(
        self,
        cfg: TransformerConfig,
        seq_len: int,
        n_layers: int,
        tp: int = 1,
        recompute: str = "none",
    ):
        super().__init__()
        validate.one_of("recompute", recompute, STRATEGIES)
        self.cfg, self.tp, self.recompute = cfg, tp, recompute
        h, hd = cfg.d_model, cfg.head_dim
        dtype = torch.get_default_dtype()
        # constants every layer shares: the causal mask and RoPE's tables
        mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
        inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
        angles = torch.cat([angles, angles], dim=-1)  # (s, hd)
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)
        self.emb = nn.Embedding(cfg.vocab_size // tp, h)
        self.blocks = nn.ModuleList(
            ShardedLlamaBlock(cfg, seq_len, tp, self.mask, (self.cos, self.sin))
            for _ in range(n_layers)
        )
        if recompute == "selective":
            for block in self.blocks:
                block.core = _checkpointed_core
        self.norm = RMSNorm(h)
        self.head = nn.Linear(h, cfg.vocab_size // tp, bias=False)

    def _block(self, block, x):
        if self.recompute == "full":
            return checkpoint(block, x, use_reentrant=False)
        if self.recompute == "selective_matmuls":
            context = functools.partial(
                create_selective_checkpoint_contexts, _keep_matmuls
            )
            return checkpoint(block, x, use_reentrant=False, context_fn=context)
        return block(x)

    def forward(self, idx, targets):
        x = _reduce_scatter(self.emb(idx), self.tp)  # (b, s/tp, h)
        for block in self.blocks:
            x = self._block(block, x)
        logits = _column(self.norm(x), self.head, self.tp)  # (b, s, V/tp)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


# --- tracing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Bytes by kind at one moment of a step (``KINDS``), and their total."""

    parameters: int
    buffers: int
    gradients: int
    activations: int
    temporaries: int
    optimizer: int

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in KINDS)

    @classmethod
    def of(cls, snap: dict) -> Snapshot:
        (device,) = [d for d in snap if str(d) != "Total"] or [None]
        by_kind = {k: 0 for k in KINDS}
        for ref, n in (snap[device] if device is not None else {}).items():
            kind = _MEMTRACKER_KINDS.get(getattr(ref, "value", str(ref)))
            if kind in by_kind:
                by_kind[kind] += int(n)
        return cls(**by_kind)


PHASES = ("forward", "backward", "optimizer step")


@dataclass(frozen=True)
class StepTrace:
    """One traced training step: bytes by kind at the end of the forward
    pass (every activation the backward will read is live), at the end of the
    backward pass (gradients complete), after the optimizer step, and at the
    peak of each phase (``PHASES``)."""

    after_forward: Snapshot
    after_backward: Snapshot
    after_step: Snapshot
    peaks: dict  # phase -> Snapshot

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=lambda p: self.peaks[p].total)

    @property
    def peak(self) -> Snapshot:
        return self.peaks[self.peak_phase]


def _build(cfg, seq_len, micro_batch, tp, recompute, n_layers, seed):
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # fake parameters cannot be .to()'d
    try:
        model = TracedLlama(cfg, seq_len, n_layers, tp, recompute)
    finally:
        torch.set_default_dtype(previous)
    idx = torch.randint(0, cfg.vocab_size // tp, (micro_batch, seq_len))
    targets = torch.randint(0, cfg.vocab_size // tp, (micro_batch, seq_len))
    return model, MasterAdamW(model.parameters()), idx, targets


def trace_steps(
    cfg: TransformerConfig,
    seq_len: int,
    micro_batch: int = 1,
    tp: int = 1,
    recompute: str = "none",
    n_layers: int = 2,
    steps: int = 2,
    fake: bool = True,
    seed: int = 0,
) -> list[StepTrace]:
    """Trace ``steps`` training steps (forward, backward, optimizer step,
    zero_grad) of ``TracedLlama`` with ``n_layers`` of ``cfg``'s layers.

    ``fake`` builds everything under FakeTensorMode (nothing is allocated);
    False runs it for real on the CPU, for small shapes. The first step's
    optimizer step creates the optimizer's state; the second step shows the
    steady state."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState

    _check_shape(cfg, seq_len, micro_batch, tp)
    validate.one_of("recompute", recompute, STRATEGIES)
    validate.positive_int("n_layers", n_layers)
    validate.positive_int("steps", steps)
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    traces = []
    with mode:
        model, opt, idx, targets = _build(
            cfg, seq_len, micro_batch, tp, recompute, n_layers, seed
        )
        for _ in range(steps):
            tracker = MemTracker()
            tracker.track_external(model, opt, idx, targets)
            with tracker:
                loss = model(idx, targets)
                after_forward = Snapshot.of(tracker.get_tracker_snapshot("current"))
                loss.backward()
                after_backward = Snapshot.of(tracker.get_tracker_snapshot("current"))
                del loss
            stats = tracker.memory_tracking[model].snapshots
            peaks = {
                phase: max(
                    (Snapshot.of(s) for s in stats[state]), key=lambda s: s.total
                )
                for phase, state in (
                    ("forward", _ModState.PEAK_FW),
                    ("backward", _ModState.PEAK_BW),
                )
            }
            stepper = MemTracker()  # the optimizer step on its own
            stepper.track_external(model, opt, idx, targets)
            with stepper:
                opt.step()
                after_step = Snapshot.of(stepper.get_tracker_snapshot("current"))
            peaks["optimizer step"] = Snapshot.of(stepper.get_tracker_snapshot("peak"))
            model.zero_grad(set_to_none=True)
            traces.append(StepTrace(after_forward, after_backward, after_step, peaks))
    return traces


def _check_shape(cfg, seq_len, micro_batch, tp):
    validate.instance_of("cfg", cfg, TransformerConfig)
    if cfg.mlp != "swiglu":
        raise ValueError(f"the traced block is Llama's, with SwiGLU; got {cfg.mlp!r}")
    validate.positive_int("seq_len", seq_len)
    validate.positive_int("micro_batch", micro_batch)
    validate.positive_int("tp", tp)
    for name, n in (
        ("n_heads", cfg.n_heads),
        ("n_kv_heads", cfg.n_kv_heads),
        ("d_ff", cfg.d_ff),
        ("vocab_size", cfg.vocab_size),
        ("seq_len", seq_len),
    ):
        if n % tp:
            raise ValueError(
                f"tp={tp} must divide the model's {name}={n} (tensor parallelism "
                "with sequence parallelism splits it tp ways)"
            )


# --- a whole model, composed ------------------------------------------------------

MOMENTS = (
    "after forward",
    "after backward",
    "after step",
    *(f"peak: {p}" for p in PHASES),
    *(f"first step peak: {p}" for p in PHASES),
)


def _moments(steps: list[StepTrace]) -> dict[str, Snapshot]:
    first, steady = steps[0], steps[-1]
    return {
        "after forward": steady.after_forward,
        "after backward": steady.after_backward,
        "after step": steady.after_step,
        **{f"peak: {p}": steady.peaks[p] for p in PHASES},
        **{f"first step peak: {p}": first.peaks[p] for p in PHASES},
    }


@dataclass(frozen=True)
class Bill:
    """One GPU's bytes by kind at each moment of a training step (``MOMENTS``:
    the steady step's ends of forward and backward, after its optimizer
    step, each phase's peak, and the first step's phase peaks), for a model
    of ``n_layers`` layers composed from two traces of ``layers_traced``
    layers: ``per_layer`` is one layer's bytes and ``rest`` the embedding's,
    final norm's, head's, loss's and the buffers' (moment -> kind -> bytes)."""

    model: str
    seq_len: int
    micro_batch: int
    tp: int
    recompute: str
    n_layers: int
    layers_traced: tuple[int, int]
    per_layer: dict
    rest: dict

    def at(self, moment: str, n_layers: float | None = None) -> dict:
        """Bytes by kind at ``moment`` with ``n_layers`` layers (the model's
        own count by default)."""
        n = self.n_layers if n_layers is None else n_layers
        return {k: self.rest[moment][k] + n * self.per_layer[moment][k] for k in KINDS}

    def total(self, moment: str, n_layers: float | None = None) -> float:
        return sum(self.at(moment, n_layers).values())

    def peak_phase(self, first_step: bool = False) -> str:
        head = "first step peak" if first_step else "peak"
        return max(PHASES, key=lambda p: self.total(f"{head}: {p}"))

    def peak_bytes(self, first_step: bool = False) -> float:
        head = "first step peak" if first_step else "peak"
        return self.total(f"{head}: {self.peak_phase(first_step)}")

    @property
    def parameters_bytes(self) -> float:
        return self.at("after step")["parameters"]

    @property
    def gradients_bytes(self) -> float:
        return self.at("after backward")["gradients"]

    @property
    def optimizer_bytes(self) -> float:
        return self.at("after step")["optimizer"]

    @property
    def activations_bytes(self) -> float:
        """Live at the end of the steady step's forward pass."""
        return self.at("after forward")["activations"]

    @property
    def activations_per_layer_bytes(self) -> float:
        return self.per_layer["after forward"]["activations"]

    @property
    def activations_outside_layers_bytes(self) -> float:
        """The embedding's, final norm's, head's and the fp32 loss's."""
        return self.rest["after forward"]["activations"]


def traced_bill(
    cfg: TransformerConfig,
    seq_len: int,
    micro_batch: int = 1,
    tp: int = 1,
    recompute: str = "none",
    layers: tuple[int, int] = (2, 3),
) -> Bill:
    """The bytes one GPU holds for ``cfg`` (all its layers) under tensor
    parallelism ``tp`` and ``recompute``, composed from two fake-tensor
    traces of two training steps each, with ``layers`` layers: every kind at
    every moment is rest + L x layer. Pipeline parallelism and ZeRO are not
    traced: they divide the layers and the model state, which the caller
    does by arithmetic."""
    la, lb = layers
    if not 1 <= la < lb:
        raise ValueError(f"layers={layers} must be two counts, the first smaller")
    a, b = (
        _moments(trace_steps(cfg, seq_len, micro_batch, tp, recompute, n, steps=2))
        for n in (la, lb)
    )
    per_layer, rest = {}, {}
    for moment in MOMENTS:
        sa, sb = a[moment], b[moment]
        per_layer[moment] = {
            k: (getattr(sb, k) - getattr(sa, k)) / (lb - la) for k in KINDS
        }
        rest[moment] = {k: getattr(sa, k) - la * per_layer[moment][k] for k in KINDS}
    return Bill(
        cfg.name,
        seq_len,
        micro_batch,
        tp,
        recompute,
        cfg.n_layers,
        layers,
        per_layer,
        rest,
    )


@dataclass(frozen=True)
class Activations:
    """Activation bytes live at the end of a forward pass: one layer's, the
    rest's (embedding, final norm, head, fp32 loss), and the whole model's."""

    per_layer_bytes: float
    outside_layers_bytes: float
    total_bytes: float


def traced_activations(
    cfg: TransformerConfig,
    seq_len: int,
    micro_batch: int = 1,
    tp: int = 1,
    recompute: str = "none",
    layers: tuple[int, int] = (2, 3),
) -> Activations:
    """What a forward pass keeps for the backward pass under ``recompute``,
    traced on fake tensors for ``layers`` layers (forward only, one step) and
    composed for the model's own layer count."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    _check_shape(cfg, seq_len, micro_batch, tp)
    la, lb = layers
    if not 1 <= la < lb:
        raise ValueError(f"layers={layers} must be two counts, the first smaller")
    live = []
    for n in layers:
        with FakeTensorMode():
            model, opt, idx, targets = _build(
                cfg, seq_len, micro_batch, tp, recompute, n, seed=0
            )
            tracker = MemTracker()
            tracker.track_external(model, idx, targets)
            with tracker:
                loss = model(idx, targets)
                live.append(
                    Snapshot.of(tracker.get_tracker_snapshot("current")).activations
                )
                del loss
    per, rest, total = _compose(live[0], live[1], la, lb, cfg.n_layers)
    return Activations(per, rest, total)


def _compose(
    a: float, b: float, la: int, lb: int, n: int
) -> tuple[float, float, float]:
    """Values ``a`` at ``la`` layers and ``b`` at ``lb``: per layer, the rest,
    and the value at ``n`` layers."""
    per = (b - a) / (lb - la)
    rest = a - la * per
    return per, rest, rest + n * per
