"""A plan's memory, traced: the planner's bill per GPU beside the bytes a
real training step of the planned model holds, traced on fake tensors
(mlbook.common_torch.memtrace), kind by kind.

This module imports torch (through memtrace): the planner and its command
stay torch-free and import it only for ``--trace-memory``. The traced weights
hold one item the planner splits and tensor parallelism does not: the norm
gains, (2L + 1) h of them, whole on every tensor-parallel rank.

What is traced, and what is arithmetic: the trace is one GPU's shard of the
model under the plan's tensor parallelism (with sequence parallelism),
recompute strategy, sequence length and micro-batch, composed from one and
two layers to the model's layer count (``LAYERS``: every kind at every
moment comes out as from two and three layers, at about half the cost).
Pipeline parallelism and ZeRO are applied to the traced kinds as the planner
applies them: a stage holds 1/pp of the model state and ceil(L/pp) x pp
layers' worth of activations (1F1B's first stage), so with pp > 1 the kinds
are traced and composed but the step's peak, which depends on the pipeline's
schedule, is not; ZeRO stage k divides the optimizer state (k >= 1), the
gradients (k >= 2) and the weights (k = 3) over dp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.common_torch import memtrace
from mlbook.plan.planner import RunSpec, memory_per_gpu

# the planner's recompute strategies that a trace can run (sqrt keeps every
# c-th layer's input, which memtrace does not build)
TRACEABLE = ("none", "selective", "full")
# the layer counts traced and composed (memtrace.traced_bill)
LAYERS = (1, 2)
# the planner's four kinds, in the bill's order, and the peak
RATIO_KINDS = ("weights", "gradients", "optimizer state", "activations", "peak")


@dataclass(frozen=True)
class Line:
    """One item of the bill: the planner's bytes and the trace's (None where
    one side does not count the item)."""

    item: str
    planned_bytes: float | None
    traced_bytes: float | None

    @property
    def ratio(self) -> float | None:
        if not self.planned_bytes or self.traced_bytes is None:
            return None
        return self.traced_bytes / self.planned_bytes


@dataclass(frozen=True)
class TracedPlan:
    """The planned bill beside the traced one. ``kinds`` are the four items
    the planner counts; ``left_out`` the items it leaves out, with their
    traced bytes; ``peak_bytes`` the steady step's traced peak (None with
    pipeline stages, whose peak the composition cannot place),
    ``peak_by_kind`` its bytes by kind (memtrace.KINDS) and
    ``first_step_peak_bytes`` the first step's."""

    spec: RunSpec
    bill: memtrace.Bill
    kinds: tuple[Line, ...]
    left_out: tuple[Line, ...]
    planned_total_bytes: float
    peak_bytes: float | None
    peak_phase: str | None
    first_step_peak_bytes: float | None
    first_step_peak_phase: str | None
    peak_by_kind: dict | None = None

    @property
    def ratios(self) -> dict:
        """Traced / planned for each of ``RATIO_KINDS``: the four kinds, and
        the steady step's peak against the planner's total (None where the
        peak is not traced)."""
        four = [line.ratio for line in self.kinds]
        out = dict(zip(RATIO_KINDS[:4], four, strict=True))
        out["peak"] = (
            None
            if self.peak_bytes is None
            else self.peak_bytes / self.planned_total_bytes
        )
        return out


def check_traceable(spec: RunSpec) -> None:
    """Refuse, before anything is traced, a plan the tracer cannot build."""
    validate.instance_of("spec", spec, RunSpec)
    cfg = spec.config
    if cfg.mlp != "swiglu":
        raise ValueError(
            f"model={cfg.name!r}: --trace-memory traces Llama's block (SwiGLU); "
            f"this model has a {cfg.mlp.upper()} MLP"
        )
    if spec.recompute not in TRACEABLE:
        raise ValueError(
            f"recompute={spec.recompute!r}: --trace-memory traces "
            + ", ".join(TRACEABLE)
        )
    for name, n in (
        ("n_kv_heads", cfg.n_kv_heads),
        ("d_ff", cfg.d_ff),
        ("vocab_size", cfg.vocab_size),
        ("seq_len", spec.seq_len),
    ):
        if n % spec.tp:
            raise ValueError(
                f"tp={spec.tp} must divide the model's {name}={n} to trace a "
                "tensor-parallel shard"
            )


def _zero(kinds: dict, spec: RunSpec) -> dict:
    """The traced state of a whole model, on one pipeline stage, under ZeRO."""
    stage, dp, pp = spec.zero_stage, spec.dp, spec.pp
    out = dict(kinds)
    out["parameters"] = kinds["parameters"] / pp / (dp if stage >= 3 else 1)
    out["gradients"] = kinds["gradients"] / pp / (dp if stage >= 2 else 1)
    out["optimizer"] = kinds["optimizer"] / pp / (dp if stage >= 1 else 1)
    return out


def _shape(spec: RunSpec) -> tuple:
    """What a trace depends on: the model, s, b, tp and the recompute."""
    cfg = spec.config
    return (
        cfg.name,
        cfg.n_layers,
        spec.seq_len,
        spec.micro_batch,
        spec.tp,
        spec.recompute,
    )


def _bill_shape(bill: memtrace.Bill) -> tuple:
    return (
        bill.model,
        bill.n_layers,
        bill.seq_len,
        bill.micro_batch,
        bill.tp,
        bill.recompute,
    )


def trace_plan(spec: RunSpec, bill: memtrace.Bill | None = None) -> TracedPlan:
    """Trace ``spec``'s model as planned and set its bill beside the
    planner's (see the module's docstring for what is traced). ``bill``: a
    trace of the same shape (model, s, b, tp, recompute) to reuse; plans that
    differ only in pp, dp, ZeRO or the GPU count share one."""
    check_traceable(spec)
    cfg = spec.config
    if bill is None:
        bill = memtrace.traced_bill(
            cfg, spec.seq_len, spec.micro_batch, spec.tp, spec.recompute, LAYERS
        )
    elif _bill_shape(bill) != _shape(spec):
        raise ValueError(
            f"bill traced for {_bill_shape(bill)} (model, layers, s, b, tp, "
            f"recompute); the plan needs {_shape(spec)}"
        )
    planned = memory_per_gpu(spec)
    layers_worth = math.ceil(cfg.n_layers / spec.pp) * spec.pp
    state = _zero(bill.at("after step"), spec)
    grads = _zero(bill.at("after backward"), spec)["gradients"]
    per_layer = bill.per_layer["after forward"]
    norm_stats = 2 * 4 * spec.seq_len * spec.micro_batch / spec.tp  # fp32 rstd
    acts = layers_worth * (per_layer["activations"] - norm_stats)
    kinds = (
        Line("weights", planned.weights_bytes, state["parameters"]),
        Line("gradients", planned.gradients_bytes, grads),
        Line("optimizer state", planned.optimizer_bytes, state["optimizer"]),
        Line(f"activations ({spec.recompute})", planned.activations_bytes, acts),
    )
    outside = bill.activations_outside_layers_bytes
    left_out = [
        Line("norm statistics (fp32, 2 a layer)", None, layers_worth * norm_stats),
        Line(
            "embedding, final norm, head and fp32 loss"
            + (" (last stage)" if spec.pp > 1 else ""),
            None,
            outside,
        ),
        Line(
            "buffers (causal mask, RoPE tables)", None, bill.at("after step")["buffers"]
        ),
    ]
    peak = peak_phase = first = first_phase = peak_by_kind = None
    if spec.pp == 1:

        def sharded(head: str) -> tuple[float, str]:
            totals = {
                p: sum(_zero(bill.at(f"{head}: {p}"), spec).values())
                for p in memtrace.PHASES
            }
            phase = max(totals, key=totals.get)
            return totals[phase], phase

        (peak, peak_phase), (first, first_phase) = (
            sharded("peak"),
            sharded("first step peak"),
        )
        peak_by_kind = _zero(bill.at(f"peak: {peak_phase}"), spec)
        left_out.append(
            Line(
                f"temporaries at the peak ({peak_phase})",
                None,
                bill.at(f"peak: {peak_phase}")["temporaries"],
            )
        )
    return TracedPlan(
        spec=spec,
        bill=bill,
        kinds=kinds,
        left_out=tuple(left_out),
        planned_total_bytes=planned.total_bytes,
        peak_bytes=peak,
        peak_phase=peak_phase,
        first_step_peak_bytes=first,
        first_step_peak_phase=first_phase,
        peak_by_kind=peak_by_kind,
    )


def trace_plans(specs, known=()) -> tuple[TracedPlan, ...]:
    """``specs`` traced as planned, each shape (model, s, b, tp, recompute)
    once: plans of one shape share a trace, and so do those in ``known``
    (TracedPlans already made)."""
    bills = {_bill_shape(t.bill): t.bill for t in known}
    out = []
    for spec in specs:
        traced = trace_plan(spec, bills.get(_shape(spec)))
        bills[_shape(traced.spec)] = traced.bill
        out.append(traced)
    return tuple(out)
