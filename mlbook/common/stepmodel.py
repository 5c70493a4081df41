"""A training step predicted before it runs: the roofline, summed over the
step's operators, by bucket.

Each operator takes

    max(FLOPs / the rate this machine reaches for its shape,
        bytes / the memory bandwidth)  +  a fixed cost per operator,

and a step takes the sum over the operators it runs, counted once
(mlbook.common_torch.opcount). The rates come from a calibration
(``MachineModel``): the matmul sweep's FLOP/s at the model's own GEMM shapes,
the fused attention kernel timed at the model's shape, and, for a matmul of a
shape nobody timed, the roofline with the sweep's ceiling as its peak. The
bandwidth is a triad's; the fixed cost is a small-operator benchmark's time
per operator (dispatch, autograd's bookkeeping, the Python between calls).

What it leaves out, on purpose: caches (every operand moves whole at the
triad's bandwidth, however small), elementwise operators whose arithmetic
is slower than their bytes (a GELU's erf, a softmax's exp count no FLOPs in
FlopCounterMode's tally), work that is not an operator (tokenising in
Python, printing), the interference of other processes, and overlap: on a
CPU one thread runs one operator at a time, so times add.

Torch-free: a page, the planner and a reader's browser can run it. It sits
below the chapters: the capstone predicts its rungs with it and
``mlbook.calibrate`` its reference step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.common.reference_loop import (
    BUCKET_LABELS,
    BUCKETS,
    SCOPE_PREFIX,
    bucket_of,
)
from mlbook.common.reference_loop import SCOPES as _SCOPES


@dataclass(frozen=True)
class Operator:
    """Identical calls of one operator in a step: ``count`` calls, each
    doing ``flops`` and moving ``bytes``."""

    bucket: str
    name: str  # the aten operator, "aten::mm"
    dtype: str  # "fp32", "bf16", ... ("" where it has no floating operand)
    count: int
    flops: float  # each call
    bytes: float  # each call
    gemm: tuple | None = None  # (m, n, k) of a matmul; with batch > 1 a bmm
    batch: int = 1
    attention: tuple | None = None  # (b, heads, s_q, s_k, head_dim) of fused attention
    backward: bool = False

    def __post_init__(self):
        validate.one_of("bucket", self.bucket, BUCKETS)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be an operator's name, got {self.name!r}")
        validate.positive_int("count", self.count)
        validate.non_negative("flops", self.flops)
        validate.non_negative("bytes", self.bytes)
        validate.positive_int("batch", self.batch)
        for what, shape, size in (
            ("gemm", self.gemm, 3),
            ("attention", self.attention, 5),
        ):
            if shape is not None and (
                not isinstance(shape, tuple)
                or len(shape) != size
                or not all(isinstance(x, int) and x > 0 for x in shape)
            ):
                raise ValueError(
                    f"{what} must be {size} positive integers or None, got {shape!r}"
                )

    @property
    def key(self) -> tuple:
        """What makes two calls the same: everything but the count."""
        return (
            self.bucket,
            self.name,
            self.dtype,
            self.flops,
            self.bytes,
            self.gemm,
            self.batch,
            self.attention,
            self.backward,
        )


def _scope(scopes) -> str | None:
    """The innermost ladder scope around an operator, as the profiler's
    accounting reads it (the step's own scope is no bucket)."""
    for s in reversed(tuple(scopes)):
        if isinstance(s, str) and s.startswith(SCOPE_PREFIX):
            name = s[len(SCOPE_PREFIX) :]
            if name in _SCOPES and name != "step":
                return name
            if name == "step":
                return None
    return None


def operators_of(counted) -> tuple:
    """Counted operators (anything with opcount.CountedOp's fields: name,
    flops, bytes, dtype, scopes, top, gemm, batch, attention, backward) as
    Operators: each in the bucket the profiler's accounting would give it
    (formulas.bucket_of of the operator shown at the top, in its innermost
    ladder scope), identical calls merged, in the order first seen."""
    counts: dict = {}
    buckets: dict = {}  # (top, scopes) -> bucket, worked out once
    for i, op in enumerate(counted):
        try:
            where = (op.top, tuple(op.scopes))
            if where not in buckets:
                buckets[where] = bucket_of(op.top, _scope(op.scopes))
            key = (
                buckets[where],
                op.name,
                op.dtype,
                op.flops,
                op.bytes,
                op.gemm,
                op.batch,
                op.attention,
                op.backward,
            )
            counts[key] = counts.get(key, 0) + 1
        except (AttributeError, TypeError) as exc:
            raise ValueError(f"counted[{i}] is not a counted operator: {exc}") from None
    return tuple(Operator(*k[:3], n, *k[3:]) for k, n in counts.items())


_FIELDS = (
    "bucket", "name", "dtype", "count", "flops", "bytes",
    "gemm", "batch", "attention", "backward",
)  # fmt: skip


def operators_to_json(ops) -> list:
    """Operators as a list of dicts of numbers, strings and lists (JSON)."""
    out = []
    for i, op in enumerate(ops):
        validate.instance_of(f"ops[{i}]", op, Operator)
        row = {f: getattr(op, f) for f in _FIELDS}
        row["gemm"] = None if op.gemm is None else list(op.gemm)
        row["attention"] = None if op.attention is None else list(op.attention)
        out.append(row)
    return out


def operators_from_json(rows) -> tuple:
    """The Operators ``operators_to_json`` wrote."""
    if not isinstance(rows, list):
        raise ValueError(f"operators must be a list of dicts, got {rows!r}")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != set(_FIELDS):
            raise ValueError(
                f"operators[{i}] must be a dict of {', '.join(_FIELDS)}, got {row!r}"
            )
        shaped = {
            k: None if row[k] is None else tuple(row[k]) for k in ("gemm", "attention")
        }
        out.append(Operator(**(row | shaped)))
    return tuple(out)


@dataclass(frozen=True)
class MachineModel:
    """What the step model needs of a machine, measured by a calibration.

    ``gemm_flops_per_s`` maps (m, n, k, dtype) to the FLOP/s a matmul of that
    shape ran at; ``attention_flops_per_s`` maps (b, heads, s_q, s_k,
    head_dim, pass, dtype) to the fused attention kernel's FLOP/s, forward or
    backward; ``ceiling_flops_per_s`` maps a dtype to the best matmul rate
    found (the peak of the roofline for a shape nobody timed)."""

    gemm_flops_per_s: dict
    attention_flops_per_s: dict
    ceiling_flops_per_s: dict
    bandwidth_bytes_per_s: float
    op_cost_s: float

    def __post_init__(self):
        validate.positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        validate.non_negative("op_cost_s", self.op_cost_s)
        for name, table, size in (
            ("gemm_flops_per_s", self.gemm_flops_per_s, 4),
            ("attention_flops_per_s", self.attention_flops_per_s, 7),
        ):
            if not isinstance(table, dict):
                raise ValueError(f"{name} must be a dict, got {table!r}")
            for key, rate in table.items():
                if not isinstance(key, tuple) or len(key) != size:
                    raise ValueError(
                        f"{name} keys must be tuples of {size}, got {key!r}"
                    )
                validate.positive(f"{name}[{key!r}]", rate)
        if not isinstance(self.ceiling_flops_per_s, dict):
            raise ValueError(
                f"ceiling_flops_per_s must be a dict, got {self.ceiling_flops_per_s!r}"
            )
        for dtype, rate in self.ceiling_flops_per_s.items():
            validate.positive(f"ceiling_flops_per_s[{dtype!r}]", rate)

    def rate(self, op: Operator) -> float | None:
        """The FLOP/s ``op`` runs at on this machine: its shape's measured
        rate, else the ceiling of its dtype (None where neither is known)."""
        if op.gemm is not None and op.batch == 1:
            found = self.gemm_flops_per_s.get((*op.gemm, op.dtype))
            if found is not None:
                return found
        if op.attention is not None:
            pass_ = "backward" if op.backward else "forward"
            found = self.attention_flops_per_s.get((*op.attention, pass_, op.dtype))
            if found is not None:
                return found
        return self.ceiling_flops_per_s.get(op.dtype)

    def to_json(self) -> dict:
        """A dict of lists and numbers, as machine.json keeps it."""
        return {
            "gemm_flops_per_s": [[*k, v] for k, v in self.gemm_flops_per_s.items()],
            "attention_flops_per_s": [
                [*k, v] for k, v in self.attention_flops_per_s.items()
            ],
            "ceiling_flops_per_s": dict(self.ceiling_flops_per_s),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "op_cost_s": self.op_cost_s,
        }


def machine_model_from_json(data: dict) -> MachineModel:
    """The MachineModel ``MachineModel.to_json`` wrote."""
    if not isinstance(data, dict):
        raise ValueError(f"a step model's machine must be a dict, got {data!r}")
    try:
        return MachineModel(
            {tuple(r[:4]): r[4] for r in data["gemm_flops_per_s"]},
            {tuple(r[:7]): r[7] for r in data["attention_flops_per_s"]},
            dict(data["ceiling_flops_per_s"]),
            data["bandwidth_bytes_per_s"],
            data["op_cost_s"],
        )
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"not a step model's machine ({exc!r}): {data!r}") from None


def operator_time_s(op: Operator, machine: MachineModel) -> float:
    """``op.count`` calls, each taking the longer of its FLOPs at the rate
    its shape runs at and its bytes at the bandwidth, plus the fixed cost
    every operator pays."""
    rate = _rate(op, machine)  # the shape's measured rate, or the ceiling
    compute_s = op.flops / rate if op.flops else 0.0
    memory_s = op.bytes / machine.bandwidth_bytes_per_s
    return op.count * (max(compute_s, memory_s) + machine.op_cost_s)


def _rate(op: Operator, machine: MachineModel) -> float | None:
    """The checks, and the FLOP/s ``op`` runs at (None for an operator of no
    FLOPs)."""
    validate.instance_of("op", op, Operator)
    validate.instance_of("machine", machine, MachineModel)
    if not op.flops:
        return None
    rate = machine.rate(op)
    if rate is None:
        raise ValueError(
            f"no rate for {op.name} in {op.dtype or 'no dtype'}: the machine "
            f"has ceilings for {sorted(machine.ceiling_flops_per_s)} only"
        )
    return rate


@dataclass(frozen=True)
class BucketPrediction:
    """One bucket's predicted time, in three parts: its operators bound by
    their FLOPs, those bound by their bytes, and the fixed cost of all."""

    bucket: str
    compute_s: float
    memory_s: float
    fixed_s: float
    operators: int  # calls

    @property
    def seconds(self) -> float:
        return self.compute_s + self.memory_s + self.fixed_s

    @property
    def label(self) -> str:
        return BUCKET_LABELS[self.bucket]


@dataclass(frozen=True)
class StepPrediction:
    buckets: tuple  # a BucketPrediction for every bucket in BUCKETS, in order

    @property
    def step_s(self) -> float:
        return sum(b.seconds for b in self.buckets)

    @property
    def operators(self) -> int:
        return sum(b.operators for b in self.buckets)

    def seconds(self, bucket: str) -> float:
        validate.one_of("bucket", bucket, BUCKETS)
        return next(b.seconds for b in self.buckets if b.bucket == bucket)


def predict_step(ops, machine: MachineModel) -> StepPrediction:
    """The step's time, bucket by bucket, from its Operators and a machine."""
    validate.instance_of("machine", machine, MachineModel)
    parts = {b: [0.0, 0.0, 0.0, 0] for b in BUCKETS}
    for i, op in enumerate(ops):
        validate.instance_of(f"ops[{i}]", op, Operator)
        rate = _rate(op, machine)
        compute_s = op.flops / rate if op.flops else 0.0
        memory_s = op.bytes / machine.bandwidth_bytes_per_s
        p = parts[op.bucket]
        if compute_s > memory_s:  # bound by its FLOPs
            p[0] += op.count * compute_s
        else:
            p[1] += op.count * memory_s
        p[2] += op.count * machine.op_cost_s
        p[3] += op.count
    return StepPrediction(tuple(BucketPrediction(b, *parts[b]) for b in BUCKETS))


@dataclass(frozen=True)
class BucketComparison:
    bucket: str
    predicted_s: float
    measured_s: float

    @property
    def label(self) -> str:
        return BUCKET_LABELS[self.bucket]

    @property
    def excess_s(self) -> float:
        """What the bucket took beyond its prediction (negative: less)."""
        return self.measured_s - self.predicted_s

    @property
    def ratio(self) -> float:
        """measured / predicted; inf where nothing was predicted but time was
        measured, nan where both are 0."""
        if self.predicted_s > 0:
            return self.measured_s / self.predicted_s
        return math.inf if self.measured_s > 0 else math.nan


def compare(prediction: StepPrediction, measured: dict) -> tuple:
    """Each bucket's prediction beside what the profiler measured
    ({bucket: seconds}, every bucket optional), the buckets that have either,
    in BUCKETS order."""
    validate.instance_of("prediction", prediction, StepPrediction)
    if not isinstance(measured, dict):
        raise ValueError(
            f"measured must be a dict {{bucket: seconds}}, got {measured!r}"
        )
    for name, value in measured.items():
        validate.one_of("bucket", name, BUCKETS)
        validate.non_negative(f"measured[{name!r}]", value)
    out = []
    for b in prediction.buckets:
        got = float(measured.get(b.bucket, 0.0))
        if b.seconds > 0 or got > 0:
            out.append(BucketComparison(b.bucket, b.seconds, got))
    return tuple(out)


def largest_excess(comparisons) -> BucketComparison:
    """The bucket that took the most time beyond its prediction: where the
    step lost the most against the model (ties: the first in BUCKETS order)."""
    comparisons = tuple(comparisons)
    if not comparisons:
        raise ValueError("comparisons must hold at least one bucket")
    for i, c in enumerate(comparisons):
        validate.instance_of(f"comparisons[{i}]", c, BucketComparison)
    return max(comparisons, key=lambda c: c.excess_s)


def step_ratio(measured_s: float, prediction: StepPrediction) -> float:
    """measured / predicted for the whole step: 1 is a perfect prediction,
    above 1 a step slower than the model says."""
    validate.positive("measured_s", measured_s)
    validate.instance_of("prediction", prediction, StepPrediction)
    if prediction.step_s <= 0:
        raise ValueError("the prediction is of a step of no operators")
    return measured_s / prediction.step_s
