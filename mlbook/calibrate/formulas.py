"""A machine's calibration as a file, and every chapter's prediction held
against it. Torch-free: the page, the planner and the tests read a file
without measuring anything.

The file (``machine.json``) is JSON with four keys every reader relies on:

- ``schema_version``: SCHEMA_VERSION, or an older version this mlbook still
  reads (READ_VERSIONS); a file of any other version is refused;
- ``device``: what was measured (kind "cpu" or "cuda", its name, cores, the
  table row of a GPU, the nominal peaks with their basis);
- ``torch``: the build that measured (version, threads, ISA caps);
- ``measurements``: name -> {"median", "min", "max", "unit", "method"}, the
  spread of the repeats a measurement made, and the method in words.

Two more keys make the file self-describing: ``created`` (date, command,
seconds, quick or not) and ``reference`` (the sizes the measurements were
made at: the reference step's model, the message size held out of the
all-reduce fit, the checkpoint's bytes, ...), from which ``predictions``
computes each chapter's prediction with the chapter's own formula. Since
version 2 ``reference`` also keeps what the capstone's step model needs
(``step_model``: the rates of the reference step's matmul and attention
shapes, the ceilings, and the step's operators, counted once), and the
measurements add the bandwidth on the step's threads (``step_bandwidth``)
and the small-operator benchmark's cost (``op_cost``). A version 1 file has
none of them: its step is held against the lower bound alone.

Two kinds of prediction are checks. A memory prediction is exact up to
bytes the comparison names. A time predicted from the measured matmul
ceiling is a bound the step should not beat (every model FLOP at the best
matmul the sweep found), so the measured time is at least the prediction
less the run's own spread. It is a measured bound, not a physical one, with
two known exceptions: the sweep is finite (a step whose matmuls found a
faster shape than any the sweep timed beats it; the sweep times the step's
own shapes first), and the model FLOPs count the whole s x s attention
square, half of which a fused causal kernel skips. Every other ratio is
stated, not held to a bar.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mlbook.accumulation.formulas import StepCostModel
from mlbook.common.accelerators import ACCELERATORS, accelerator, match_cuda_name
from mlbook.common.stepmodel import (
    machine_model_from_json,
    operators_from_json,
    predict_step,
)
from mlbook.input_pipeline import formulas as pipeline
from mlbook.scaling.formulas import ring_allreduce_s

SCHEMA_VERSION = 2
# the versions this mlbook reads: 1 lacks the step model's inputs
READ_VERSIONS = (1, 2)
TOP_KEYS = ("schema_version", "device", "torch", "measurements")
MEASUREMENT_KEYS = ("median", "min", "max", "unit", "method")
# The measurements every calibration has, with their units. mamf_bf16 and
# mamf_fp16 are there where the device runs that dtype fast.
UNITS = {
    "mamf_fp32": "FLOP/s",
    "mamf_bf16": "FLOP/s",
    "mamf_fp16": "FLOP/s",
    "memory_bandwidth": "bytes/s",
    "allreduce_alpha": "s",
    "allreduce_beta": "s/byte",
    "checkpoint_write_bandwidth": "bytes/s",
    "fsync": "s",
    "tokenizer_throughput": "tokens/s",
    "loader_throughput": "tokens/s",
    "reference_step": "s",
    # what the predictions are held against
    "allreduce_heldout": "s",
    "checkpoint_write": "s",
    "activation_bytes": "bytes",
    "loader_wait_inline": "s",
    "loader_compute_inline": "s",
    "loader_step_workers": "s",
    "accumulated_step": "s",
    # the step model's (version 2)
    "step_bandwidth": "bytes/s",
    "op_cost": "s",
}
REQUIRED = (
    "mamf_fp32",
    "memory_bandwidth",
    "allreduce_alpha",
    "allreduce_beta",
    "checkpoint_write_bandwidth",
    "fsync",
    "tokenizer_throughput",
    "loader_throughput",
    "reference_step",
)
MAMF_DTYPES = ("fp32", "bf16", "fp16")
DEVICE_KINDS = ("cpu", "cuda")
# The ISA-cap variables (tools/bookbuild/machine.py): a calibration made under
# one is a capped build of its machine, not another machine.
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
# Each of the triad's three arrays, and the scratch each all-reduce rank writes
# over to flush its caches, at most this many bytes: enough to stream from
# memory past any cache a 2-core VM shares (the L3 such a VM reports is its
# host's whole cache, 300 to 480 MiB on the ones seen, which four times over
# asked for three 1.9 GiB arrays), and never more than MEMORY_SHARE of the
# memory the machine has free.
TRIAD_MAX_BYTES = 128 * 2**20
FLUSH_MAX_BYTES = 64 * 2**20
MEMORY_SHARE = 1 / 16
# The kept calibrations of the machines the book was built on, one folder each.
KEPT_DIR = Path(__file__).resolve().parents[2] / "book/measured"
KEPT_FILE = "machine.json"


class MachineFileError(ValueError):
    """A machine file that cannot be used: ``path`` and the rule it broke."""

    def __init__(self, path, rule: str):
        self.path, self.rule = str(path), rule
        super().__init__(f"{path}: {rule}")


@dataclass(frozen=True)
class Measurement:
    """One measurement: the median, min and max of its repeats, its unit and
    the method that made it, in words."""

    median: float
    min: float
    max: float
    unit: str
    method: str

    def __post_init__(self):
        for name in ("median", "min", "max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{name} must be a number, got {v!r}")
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be finite and at least 0, got {v!r}")
        if not self.min <= self.median <= self.max:
            raise ValueError(
                f"the median {self.median!r} must lie within [min, max] = "
                f"[{self.min!r}, {self.max!r}]"
            )
        for name in ("unit", "method"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")

    @property
    def spread(self) -> float:
        """Relative spread of the repeats: max / min - 1 (0 for one repeat)."""
        return self.max / self.min - 1 if self.min > 0 else math.inf

    @classmethod
    def of(cls, values, unit: str, method: str) -> Measurement:
        """The median, min and max of ``values`` (one per repeat)."""
        vs = sorted(float(v) for v in values)
        if not vs:
            raise ValueError("a measurement needs at least one value")
        mid = len(vs) // 2
        median = vs[mid] if len(vs) % 2 else (vs[mid - 1] + vs[mid]) / 2
        return cls(median, vs[0], vs[-1], unit, method)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in MEASUREMENT_KEYS}


@dataclass(frozen=True)
class Machine:
    """A calibration, as read from or written to a machine file."""

    device: dict
    torch: dict
    measurements: dict  # name -> Measurement
    reference: dict = field(default_factory=dict)
    created: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __getitem__(self, name: str) -> Measurement:
        return self.measurements[name]

    def __contains__(self, name: str) -> bool:
        return name in self.measurements

    @property
    def kind(self) -> str:
        return self.device["kind"]

    @property
    def capped(self) -> dict:
        """The ISA caps set when it ran ({} for the machine as it is)."""
        return {k: v for k, v in (self.torch.get("isa_caps") or {}).items() if v}

    @property
    def step_dtype(self) -> str:
        return self.reference.get("step_dtype", "fp32")

    @property
    def has_step_model(self) -> bool:
        """Whether the file keeps the step model's inputs (version 2 on)."""
        return (
            "step_model" in self.reference
            and "step_bandwidth" in self
            and "op_cost" in self
        )

    def step_model(self) -> tuple:
        """(stepmodel.MachineModel, the reference step's Operators) from the
        file; a ValueError for a file that keeps none."""
        if not self.has_step_model:
            raise ValueError(
                "this calibration keeps no step model (schema version "
                f"{self.schema_version}): calibrate again to predict the step"
            )
        data = self.reference["step_model"]
        machine = machine_model_from_json(
            {
                "gemm_flops_per_s": data["gemm_flops_per_s"],
                "attention_flops_per_s": data["attention_flops_per_s"],
                "ceiling_flops_per_s": data["ceiling_flops_per_s"],
                "bandwidth_bytes_per_s": self["step_bandwidth"].median,
                "op_cost_s": self["op_cost"].median,
            }
        )
        return machine, operators_from_json(data["operators"])

    def peak(self, dtype: str) -> float | None:
        """The nominal peak of ``dtype`` the file records (None where unknown)."""
        return (self.device.get("peaks", {}).get(dtype) or {}).get("flops_per_s")

    def mamf_share(self, dtype: str) -> float | None:
        """The measured MAMF ceiling (median) over the nominal peak; None where
        either is missing."""
        name, peak = f"mamf_{dtype}", self.peak(dtype)
        if name not in self or not peak:
            return None
        return self[name].median / peak

    def as_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "created": self.created,
            "device": self.device,
            "torch": self.torch,
            "measurements": {k: m.as_dict() for k, m in self.measurements.items()},
            "reference": self.reference,
        }


def from_dict(data, path="machine.json") -> Machine:
    """A Machine from parsed JSON, or MachineFileError naming ``path`` and
    the rule the data breaks."""
    if not isinstance(data, dict):
        raise MachineFileError(path, "the file must hold a JSON object")
    missing = [k for k in TOP_KEYS if k not in data]
    if missing:
        raise MachineFileError(
            path,
            f"missing top-level key(s) {', '.join(missing)}; a machine file "
            f"has {', '.join(TOP_KEYS)}",
        )
    version = data["schema_version"]
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise MachineFileError(
            path,
            f"schema_version {version!r} is not one of "
            f"{', '.join(map(str, READ_VERSIONS))}, the versions this mlbook reads; "
            "calibrate again with python -m mlbook calibrate",
        )
    device, torch_info = data["device"], data["torch"]
    if not isinstance(device, dict) or device.get("kind") not in DEVICE_KINDS:
        raise MachineFileError(
            path, f"device must be an object whose kind is one of {DEVICE_KINDS}"
        )
    if not isinstance(torch_info, dict):
        raise MachineFileError(path, "torch must be an object")
    raw = data["measurements"]
    if not isinstance(raw, dict):
        raise MachineFileError(path, "measurements must map names to objects")
    absent = [n for n in REQUIRED if n not in raw]
    if absent:
        raise MachineFileError(path, f"measurements lack {', '.join(absent)}")
    measurements = {}
    for name, m in raw.items():
        if not isinstance(m, dict) or set(m) != set(MEASUREMENT_KEYS):
            raise MachineFileError(
                path,
                f"measurement {name!r} must have exactly the keys "
                f"{', '.join(MEASUREMENT_KEYS)}",
            )
        try:
            measurements[name] = Measurement(**m)
        except ValueError as exc:
            raise MachineFileError(path, f"measurement {name!r}: {exc}") from None
        if name in UNITS and m["unit"] != UNITS[name]:
            raise MachineFileError(
                path, f"measurement {name!r} is in {m['unit']!r}, not {UNITS[name]!r}"
            )
    return Machine(
        device,
        torch_info,
        measurements,
        dict(data.get("reference") or {}),
        dict(data.get("created") or {}),
        version,
    )


def load(path) -> Machine:
    """Read and check a machine file; MachineFileError names it and the rule."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise MachineFileError(path, "no such file") from None
    except IsADirectoryError:
        raise MachineFileError(path, "is a directory, not a machine file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MachineFileError(path, f"cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MachineFileError(
            path, f"is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    return from_dict(data, path)


def check_writable(path) -> Path:
    """``path`` as a Path if a file can be written there (its folder exists
    and takes a new file), else MachineFileError: checked before a
    calibration spends its seconds."""
    p = Path(path)
    if p.is_dir():
        raise MachineFileError(path, "is a directory; give a file name")
    folder = p.parent
    if not folder.is_dir():
        raise MachineFileError(path, f"its folder {folder} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", dir=folder)
    except OSError as exc:
        raise MachineFileError(path, f"cannot be written ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def dumps(machine: Machine) -> str:
    return json.dumps(machine.as_dict(), indent=2, sort_keys=False) + "\n"


def kept(folder=KEPT_DIR) -> dict:
    """The kept calibrations: folder name -> Machine, sorted by name."""
    root = Path(folder)
    return {p.parent.name: load(p) for p in sorted(root.glob(f"*/{KEPT_FILE}"))}


def label(name: str, machine: Machine) -> str:
    """How a kept calibration is named on a page: its folder, and for a
    capped build, the cap (a capped build of one machine, not another)."""
    caps = machine.capped
    if not caps:
        return name
    isa = caps.get("ONEDNN_MAX_CPU_ISA") or next(iter(caps.values()))
    return f"{name} (capped build: {isa})"


def bounded_bytes(
    want: float, floor: int, cap: int, available_bytes: float | None = None
) -> int:
    """A buffer's size: ``want`` (what the cache the machine reports asks
    for) raised to ``floor`` and cut to ``cap``, and to MEMORY_SHARE of
    ``available_bytes`` where the memory the machine has free is known;
    whole MiB, at least one."""
    for name, value in (("floor", floor), ("cap", cap)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if floor > cap:
        raise ValueError(f"floor={floor:,} must not exceed cap={cap:,}")
    if isinstance(want, bool) or not isinstance(want, (int, float)) or want < 0:
        raise ValueError(f"want must be a number of bytes at least 0, got {want!r}")
    n = min(max(want, floor), cap)
    if available_bytes is not None:
        if available_bytes <= 0:
            raise ValueError(f"available_bytes must be above 0, got {available_bytes}")
        n = min(n, available_bytes * MEMORY_SHARE)
    return max(1, int(n) // 2**20) * 2**20


# --- predicted against measured -------------------------------------------------------

CHECKS = ("lower bound", "exact", "stated")


@dataclass(frozen=True)
class Comparison:
    """One chapter's prediction against this machine's measurement.

    ``check`` is "lower bound" (a time from the measured ceiling: the
    measured time is at least the prediction less ``margin``, the run's own
    relative spread; a measured bound, with the module docstring's two
    exceptions),
    "exact" (bytes: the measurement is the prediction plus at most
    ``margin`` bytes, which ``leaves_out`` names) or "stated" (the ratio is
    reported, not held to a bar)."""

    key: str  # a short name for the row ("step", "activations", ...)
    name: str
    chapter: str
    predicted: float
    measured: float
    unit: str
    leaves_out: str
    check: str = "stated"
    margin: float = 0.0
    measured_min: float | None = None  # the fastest repeat, for a lower bound

    @property
    def ratio(self) -> float:
        """measured / predicted."""
        return self.measured / self.predicted

    @property
    def holds(self) -> bool | None:
        """Whether the check holds (None for a stated ratio)."""
        if self.check == "lower bound":
            low = self.measured if self.measured_min is None else self.measured_min
            return low >= self.predicted * (1 - self.margin)
        if self.check == "exact":
            return 0 <= self.measured - self.predicted <= self.margin
        return None


def step_lower_bound_s(flops_per_step: float, ceiling_flops_per_s: float) -> float:
    """The fastest a step of ``flops_per_step`` model FLOPs runs on a device
    whose best measured matmul does ``ceiling_flops_per_s``: every FLOP at
    the ceiling, nothing else (6 N_matmul + 12 L h s a token, the MFU
    chapter's count)."""
    return flops_per_step / ceiling_flops_per_s


def predictions(machine: Machine) -> tuple:
    """Every prediction the book's calculators make for this machine, each
    against its measurement (Comparison), from the chapters' own formulas."""
    m, ref = machine.measurements, machine.reference
    rows = []
    step = m["reference_step"]
    ceiling = m[f"mamf_{machine.step_dtype}"]
    flops_per_step = ref["flops_per_token"] * ref["tokens_per_step"]
    if machine.has_step_model:
        model, ops = machine.step_model()
        rows.append(
            Comparison(
                "step",
                "reference step, the step model: each operator at its roofline "
                "plus a fixed cost",
                "capstone",
                predict_step(ops, model).step_s,
                step.median,
                "s",
                "caches, the arithmetic of elementwise operators (exp, erf), "
                "Python beyond the benchmark's cost per operator, other processes",
            )
        )
    rows.append(
        Comparison(
            "step_bound",
            "reference step, from 6N_matmul + 12Lhs at the MAMF ceiling",
            "mfu",
            step_lower_bound_s(flops_per_step, ceiling.max),
            step.median,
            "s",
            "everything but matmuls at their best shape: attention's softmax, "
            "norms, the optimizer, Python (and a fused causal kernel skips half "
            "the attention square the count includes)",
            "lower bound",
            step.spread,
            step.min,
        )
    )
    if "activation_bytes" in m:
        extras = ref.get("activation_extra_bytes", {})
        rows.append(
            Comparison(
                "activations",
                "activations one block keeps, Korthikanti's items",
                "recompute",
                ref["activation_formula_bytes"],
                m["activation_bytes"].median,
                "bytes",
                "named, "
                + ", ".join(f"{k} {v:,} bytes" for k, v in extras.items())
                + "; nothing else",
                "exact",
                sum(extras.values()),
            )
        )
    if "checkpoint_write" in m:
        rows.append(
            Comparison(
                "checkpoint",
                "reference checkpoint write, bytes / measured bandwidth",
                "cadence",
                ref["checkpoint_bytes"] / m["checkpoint_write_bandwidth"].median,
                m["checkpoint_write"].median,
                "s",
                "serialising the state, opening the file, the fsync's own cost",
            )
        )
    if "allreduce_heldout" in m:
        rows.append(
            Comparison(
                "allreduce",
                "all-reduce of a size left out of the alpha-beta fit",
                "scaling",
                ring_allreduce_s(
                    ref["allreduce_heldout_bytes"],
                    ref["allreduce_ranks"],
                    1 / m["allreduce_beta"].median,
                    m["allreduce_alpha"].median,
                ),
                m["allreduce_heldout"].median,
                "s",
                "caches (a message that fits stays fast), the sweep's noise",
            )
        )
    if "loader_wait_inline" in m:
        rows.append(
            Comparison(
                "tokenise",
                "tokenising a batch in the loop, from the tokenizer's rate",
                "input_pipeline",
                ref["loader_tokens_encoded_per_batch"]
                / m["tokenizer_throughput"].median,
                m["loader_wait_inline"].median,
                "s",
                "cutting windows, collating, the copy to the device",
            )
        )
    if "loader_step_workers" in m:
        load_s = m["loader_wait_inline"].median
        compute_s = m["loader_compute_inline"].median
        w = ref["loader_workers"]
        rows.append(
            Comparison(
                "loader",
                f"step fed by the {w} worker(s) needed, from load and compute",
                "input_pipeline",
                pipeline.loader_step_s(load_s, compute_s, w),
                m["loader_step_workers"].median,
                "s",
                "starting workers, moving batches between processes, cores "
                "the workers share with the step",
            )
        )
    if "accumulated_step" in m:
        k, batch = ref["accumulation_k"], ref["batch"]
        # accumulation adds no FLOPs: with no fixed cost a micro-step, the
        # chapter's model gives the k = 1 time at any k
        model = StepCostModel(0.0, 0.0, step.median / batch, 0.0)
        rows.append(
            Comparison(
                "accumulation",
                f"step at k = {k} micro-steps, from the k = 1 step",
                "accumulation",
                model.step_s(batch, k),
                m["accumulated_step"].median,
                "s",
                "the fixed cost of every micro-step (launches, Python), paid k "
                "times, and smaller matmuls",
            )
        )
    return tuple(rows)


def step_model_ratio(machine: Machine) -> float | None:
    """The reference step as measured over the capstone's step model's
    prediction of it; None for a file that keeps no step model (version 1)."""
    if not isinstance(machine, Machine):
        raise ValueError(f"machine must be a Machine, got {machine!r}")
    if not machine.has_step_model:
        return None
    model, ops = machine.step_model()
    return machine["reference_step"].median / predict_step(ops, model).step_s


def reference_mfu(machine: Machine) -> float | None:
    """The reference step's MFU: its model FLOPs a second (6 N_matmul +
    12 L h s a token) over the nominal peak of its dtype; None where the peak
    is unknown."""
    peak = machine.peak(machine.step_dtype)
    if not peak:
        return None
    ref = machine.reference
    flops_per_step = ref["flops_per_token"] * ref["tokens_per_step"]
    return flops_per_step / machine["reference_step"].median / peak


def step_of_mamf(machine: Machine) -> float:
    """The reference step's model FLOPs a second over the measured MAMF
    ceiling (median) of its dtype: how much of its best matmul rate the
    whole step kept. It does not depend on any peak."""
    ref = machine.reference
    flops_per_step = ref["flops_per_token"] * ref["tokens_per_step"]
    achieved = flops_per_step / machine["reference_step"].median
    return achieved / machine[f"mamf_{machine.step_dtype}"].median


# How a page shows each unit: (divide by, the unit shown).
DISPLAY_UNITS = {
    "FLOP/s": (1e9, "GFLOP/s"),
    "bytes/s": (1e9, "GB/s"),
    "s": (1e-3, "ms"),
    "s/byte": (1e-9, "ns/byte"),
    "tokens/s": (1e6, "M tokens/s"),
    "bytes": (1, "bytes"),
}


def display(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` as a page shows it: GFLOP/s, GB/s, ms, ..."""
    scale, shown = DISPLAY_UNITS.get(unit, (1.0, unit))
    return value / scale, shown


# --- the planner's use of a file ------------------------------------------------------


@dataclass(frozen=True)
class PlanInputs:
    """What a machine file gives a plan on ``gpu``: ``applies`` is whether
    the file calibrates that GPU; ``mamf_share`` the measured bf16 MAMF
    ceiling over its peak (the most MFU a run can plan with), None where the
    file does not apply or has no bf16 ceiling; ``used`` and ``unused`` say
    what was taken from the file and what was not, in words."""

    path: str
    device: str
    gpu: str
    applies: bool
    mamf_share: float | None
    mamf_flops_per_s: float | None
    peak_flops_per_s: float | None
    used: tuple
    unused: tuple


def plan_inputs(machine: Machine, gpu: str, path: str = "machine.json") -> PlanInputs:
    """Match a machine file to the planned ``gpu`` (a table name or alias):
    a CUDA device whose name the table maps to the same row applies; any
    other file applies to nothing, and says so."""
    row = accelerator(gpu)
    name = machine.device.get("name", "?")
    matched = None
    if machine.kind == "cuda":
        matched = machine.device.get("accelerator")
        if matched not in ACCELERATORS:
            found = match_cuda_name(machine.device.get("model") or name)
            matched = found.name if found else None
    if matched != row.name:
        why = (
            f"it calibrates {name}, not the planned {row.name}: nothing in it "
            "applies to this plan"
        )
        return PlanInputs(path, name, row.name, False, None, None, None, (), (why,))
    peak = row.peak("bf16")
    used, unused = [], []
    share = mamf = None
    if "mamf_bf16" in machine:
        mamf = machine["mamf_bf16"].median
        share = mamf / peak
        used.append(
            f"bf16 MAMF {mamf / 1e12:,.1f} TFLOP/s, {share:.1%} of the "
            f"{row.name}'s {peak / 1e12:,.0f} TFLOP/s peak: the most MFU "
            "a run on it can plan"
        )
    else:
        unused.append("no bf16 MAMF ceiling in the file: the MFU is not bounded")
    unused.append(
        "checkpoint bandwidth and all-reduce alpha-beta: one machine's disk and "
        "links, not the cluster's storage and network"
    )
    return PlanInputs(
        path, name, row.name, True, share, mamf, peak, tuple(used), tuple(unused)
    )


def check_mfu(inputs: PlanInputs, mfu: float) -> None:
    """ValueError where a planned ``mfu`` is above the calibrated MAMF share
    of the planned GPU's peak: no run beats its best matmul."""
    if inputs.mamf_share is not None and mfu > inputs.mamf_share:
        raise ValueError(
            f"mfu={mfu:g} is above the calibrated MAMF share of peak "
            f"{inputs.mamf_share:.3f} ({inputs.mamf_flops_per_s / 1e12:,.1f} of "
            f"{inputs.peak_flops_per_s / 1e12:,.0f} TFLOP/s bf16 in {inputs.path}): "
            "a run cannot beat its best matmul"
        )
