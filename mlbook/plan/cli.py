"""``python -m mlbook plan``: the planner as a command.

Prints the plan as an aligned budget with units, or with ``--json`` the same
numbers under stable keys. A bad argument exits with status 2 and one line
that names the flag, the value as typed, its unit and the rule
("--restart-min -1: the restart time must be from 0 to 1,440 minutes"),
with the near miss where there is one ("--mfu 40: ... 40 % is 0.4",
"--gpu h100: ... did you mean H100?"). A number is read as the answer boxes
read one (mlbook.common.validate.number_text): "15,000" is 15000, and a
decimal comma, "0,4", is refused with the point it needs. Each numeric flag
has a range (``LIMITS``), which the plan page's form shares, so the form
takes every plan the command takes.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, fields

from mlbook.common.transformer import PRESETS
from mlbook.common.units import GB, GIB, HOUR_S, MINUTE_S, TB, TERA
from mlbook.common.validate import did_you_mean, number_text
from mlbook.plan.planner import (
    DEFAULT_RESTART_S,
    DEFAULT_STORAGE_BYTES_PER_S,
    GPU_ALIASES,
    GPUS,
    RECOMPUTE,
    ZERO_STAGES,
    RunSpec,
    as_dict,
    llama3_failures_per_gpu_hour,
    plan,
)

# RunSpec field -> the flag a user typed (to name it in an error)
FLAG = {
    "model": "--model",
    "tokens": "--tokens",
    "gpu": "--gpu",
    "n_gpus": "--gpus",
    "mfu": "--mfu",
    "seq_len": "--seq-len",
    "tp": "--tp",
    "pp": "--pp",
    "dp": "--dp",
    "zero_stage": "--zero",
    "micro_batch": "--micro-batch",
    "grad_accum": "--grad-accum",
    "global_batch": "--global-batch",
    "recompute": "--recompute",
    "failures_per_gpu_hour": "--failures-per-gpu-hour",
    "storage_bytes_per_s": "--storage-gb-per-s",
    "restart_s": "--restart-min",
    "interval_s": "--interval-min",
}


@dataclass(frozen=True)
class Limit:
    """A numeric flag's range, in the flag's unit: from ``lo`` (or above it,
    when ``above``) to ``hi``."""

    what: str  # what the flag sets, as a message names it
    unit: str
    lo: float
    hi: float
    whole: bool = False
    above: bool = False

    def rule(self) -> str:
        start = f"above {_num(self.lo)}" if self.above else f"from {_num(self.lo)}"
        joint = "and at most" if self.above else "to"
        kind = "a whole number " if self.whole else ""
        said = f"{self.what} must be {kind}{start} {joint} {_num(self.hi)} {self.unit}"
        return said.rstrip()

    def holds(self, value) -> bool:
        low = value > self.lo if self.above else value >= self.lo
        return low and value <= self.hi


# Each numeric flag's range: the planner's own rule (counts from 1, rates and
# an MFU above 0, a restart from 0) up to a generous top, so that no finite
# plan overflows (tokens up to 1e15, 64 times Llama 3 405B's 15.6e12). The
# plan page's form (mlbook.plan.live.FORM) takes the same ranges.
LIMITS = {
    "tokens": Limit("the training tokens D", "tokens", 1, 1e15),
    "gpus": Limit("the GPU count G", "GPUs", 1, 1_048_576, whole=True),
    "mfu": Limit("MFU, a fraction of peak,", "", 0.001, 1),
    "seq_len": Limit("the sequence length s", "tokens", 1, 1_048_576, whole=True),
    "tp": Limit("the tensor-parallel size", "GPUs", 1, 128, whole=True),
    "pp": Limit("the pipeline-parallel size", "stages", 1, 128, whole=True),
    "dp": Limit("the data-parallel size", "replicas", 1, 1_048_576, whole=True),
    "micro_batch": Limit("the micro-batch", "sequences", 1, 1024, whole=True),
    "grad_accum": Limit("the gradient accumulation", "micro-steps", 1, 65_536, True),
    "global_batch": Limit("the global batch", "sequences", 1, 2**30, whole=True),
    "failures_per_gpu_hour": Limit(
        "the failure rate", "failures per GPU-hour", 1e-9, 0.01
    ),
    "storage_gb_per_s": Limit("the checkpoint write bandwidth", "GB/s", 0.1, 100_000),
    "restart_min": Limit("the restart time", "minutes", 0, 1440),
    "interval_min": Limit("the checkpoint interval", "minutes", 0, 10_080, above=True),
}


def _num(x) -> str:
    """A number as a rule states it: 1,048,576; 0.001; 1e15; 1e-9."""
    if x == int(x) and abs(x) < 1e7:
        return f"{int(x):,}"
    if 1e-4 <= abs(x) < 1e7:
        return f"{x:g}"
    mantissa, exponent = f"{x:.6g}".split("e")
    return f"{mantissa}e{int(exponent)}"


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _reader(whole: bool):
    """An argparse type: a number as typed (digits grouped or not), an int
    for a count; what is not one is refused with why."""

    def read(text: str):
        try:
            t = number_text(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text}: {exc}") from None
        if not _DECIMAL.fullmatch(t):
            raise argparse.ArgumentTypeError(f"{text}: not a number")
        value = float(t)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}: too large a number")
        if not whole:
            return value
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"{text}: not a whole number")
        return int(t) if re.fullmatch(r"[+-]?[0-9]+", t) else int(value)

    read.__name__ = "whole number" if whole else "number"
    return read


_NUMBER = _reader(False)
_WHOLE = _reader(True)
# a value that starts with "-": argparse takes "-15e12" for an option
_NEGATIVE = re.compile(r"-(?:[0-9]|\.[0-9])")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        # "argument --tokens: -15e12: ..." as "--tokens -15e12: ..."
        message = re.sub(r"^argument (--[\w-]+): (?=\S+: )", r"\1 ", message)
        message = re.sub(r"^argument (--[\w-]+): ", r"\1: ", message)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _joined(argv: list[str], ap: argparse.ArgumentParser) -> list[str]:
    """``argv`` with a negative number after a flag that takes a value joined
    to it ("--tokens -15e12" as "--tokens=-15e12"), so that the flag gets it."""
    takes = {
        o
        for a in ap._actions
        if a.nargs is None and a.const is None
        for o in a.option_strings
    }
    out, i = [], 0
    while i < len(argv):
        if argv[i] in takes and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _typed(argv: list[str]) -> dict[str, str]:
    """The text typed for each flag (the last one given)."""
    typed = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
            typed[flag] = value
        elif arg.startswith("--") and i + 1 < len(argv):
            typed[arg] = argv[i + 1]
    return typed


def check_args(args, typed: dict[str, str] | None = None) -> str | None:
    """The first flag whose value breaks its own rule, as one line ("--mfu
    40: MFU, a fraction of peak, must be from 0.001 to 1; 40 % is 0.4"), or
    None. ``typed``: the text typed for each flag, quoted in the message."""
    typed = typed or {}
    names = [*PRESETS]
    if args.model not in PRESETS:
        return _choice("--model", args.model, "a model preset", names)
    gpus = list(GPUS + GPU_ALIASES)
    if args.gpu not in gpus and not _known_device(args.gpu):
        return _choice("--gpu", args.gpu, "a GPU the planner knows", gpus)
    if args.zero not in ZERO_STAGES:
        stages = ", ".join(map(str, ZERO_STAGES[:-1])) + f" or {ZERO_STAGES[-1]}"
        return f"--zero {typed.get('--zero', args.zero)}: the ZeRO stage is {stages}"
    if args.recompute not in RECOMPUTE:
        return _choice("--recompute", args.recompute, "a recompute strategy", RECOMPUTE)
    for dest, limit in LIMITS.items():
        value = getattr(args, dest, None)
        if value is None or limit.holds(value):
            continue
        flag = "--" + dest.replace("_", "-")
        said = f"{flag} {typed.get(flag, _num(value))}: {limit.rule()}"
        if dest == "mfu" and 2 <= value <= 100:  # a percentage, surely
            said += f"; {_num(value)} % is {_num(value / 100)}"
        if dest == "interval_min" and value <= 0:
            said += f" (leave {flag} out for Young's optimum)"
        return said
    return None


def _known_device(name: str) -> bool:
    """A device the table knows, by name or alias (the planner says why it
    cannot plan on one without a bf16 peak)."""
    from mlbook.common.accelerators import ACCELERATORS, ALIASES

    return name in ACCELERATORS or name in ALIASES


def _choice(flag: str, value: str, what: str, options) -> str:
    near = did_you_mean(value, options)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{flag} {value}: not {what}{hint} (one of {', '.join(options)})"


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="python -m mlbook plan",
        description="The budget of a training run: compute, days, memory per GPU, "
        "checkpoints, failures and goodput.",
    )
    ap.add_argument("--model", required=True, help="preset name: " + ", ".join(PRESETS))
    ap.add_argument(
        "--tokens", type=_NUMBER, required=True, help="training tokens D (e.g. 15e12)"
    )
    ap.add_argument(
        "--gpu",
        required=True,
        help="accelerator with a bf16 peak: " + ", ".join(GPUS + GPU_ALIASES),
    )
    ap.add_argument("--gpus", type=_WHOLE, required=True, help="number of GPUs G")
    ap.add_argument(
        "--mfu", type=_NUMBER, default=0.40, help="MFU to plan with, 0-1 (default 0.40)"
    )
    ap.add_argument(
        "--seq-len",
        type=_WHOLE,
        default=8192,
        help="sequence length s, tokens (default 8192)",
    )
    ap.add_argument(
        "--tp", type=_WHOLE, default=1, help="tensor-parallel size (default 1)"
    )
    ap.add_argument(
        "--pp", type=_WHOLE, default=1, help="pipeline-parallel size (default 1)"
    )
    ap.add_argument(
        "--dp",
        type=_WHOLE,
        default=None,
        help="data-parallel size (default gpus / (tp x pp))",
    )
    ap.add_argument(
        "--zero", type=_WHOLE, default=1, help=f"ZeRO stage {ZERO_STAGES} (default 1)"
    )
    ap.add_argument(
        "--micro-batch",
        type=_WHOLE,
        default=1,
        help="sequences per GPU per micro-step (default 1)",
    )
    ap.add_argument(
        "--grad-accum",
        type=_WHOLE,
        default=1,
        help="micro-steps per optimizer step (default 1)",
    )
    ap.add_argument(
        "--global-batch",
        type=_WHOLE,
        default=None,
        help="global batch in sequences; checked against micro-batch x grad-accum x dp",
    )
    ap.add_argument(
        "--recompute",
        default="selective",
        help=f"activation recompute {RECOMPUTE} (default selective)",
    )
    ap.add_argument(
        "--failures-per-gpu-hour",
        type=_NUMBER,
        default=llama3_failures_per_gpu_hour(),
        help="failure rate per GPU-hour (default %(default).3g: Llama 3 405B's 419 "
        "unexpected interruptions in 54 days on 16,384 GPUs)",
    )
    ap.add_argument(
        "--storage-gb-per-s",
        type=_NUMBER,
        default=DEFAULT_STORAGE_BYTES_PER_S / GB,
        help=(
            "aggregate checkpoint write bandwidth, GB/s (default %(default)g, "
            "an assumption)"
        ),
    )
    ap.add_argument(
        "--restart-min",
        type=_NUMBER,
        default=DEFAULT_RESTART_S / MINUTE_S,
        help="minutes to detect a failure, reschedule and reload (default %(default)g, "
        "an assumption)",
    )
    ap.add_argument(
        "--interval-min",
        type=_NUMBER,
        default=None,
        help="checkpoint interval, minutes (default: Young's optimum)",
    )
    ap.add_argument(
        "--json", action="store_true", help="print the plan as JSON with stable keys"
    )
    ap.add_argument(
        "--machine",
        default=None,
        metavar="FILE",
        help="a machine file from python -m mlbook calibrate: where it calibrates "
        "the planned GPU, its measured MAMF share of peak bounds --mfu",
    )
    ap.add_argument(
        "--trace-memory",
        action="store_true",
        help="also trace one GPU's shard of the planned model on fake tensors "
        "(torch, no GPU, nothing allocated) and print the traced bill beside "
        "the planned one",
    )
    return ap


def _traced_lines(t) -> list[str]:
    """The traced bill (mlbook.plan.experiments.TracedPlan) beside the planned one,
    as aligned lines in GiB."""
    b = t.bill
    head = (
        f"memory traced on fake tensors: {b.model}, {b.layers_traced[0]} and "
        f"{b.layers_traced[1]} layers composed to {b.n_layers}, tp {b.tp}, "
        f"s={b.seq_len:,}, b={b.micro_batch} (GiB per GPU)"
    )
    rows = [("", "planned", "traced")]
    for line in t.kinds + t.left_out:
        planned = (
            "-" if line.planned_bytes is None else f"{line.planned_bytes / GIB:,.2f}"
        )
        rows.append((f"  {line.item}", planned, f"{line.traced_bytes / GIB:,.2f}"))
    if t.peak_bytes is not None:
        rows.append(
            (
                f"  total; traced: the peak ({t.peak_phase})",
                f"{t.planned_total_bytes / GIB:,.2f}",
                f"{t.peak_bytes / GIB:,.2f}",
            )
        )
        rows.append(
            (
                f"  first step's peak ({t.first_step_peak_phase})",
                "-",
                f"{t.first_step_peak_bytes / GIB:,.2f}",
            )
        )
    else:
        rows.append(
            (
                "  total (the peak is not traced across pipeline stages)",
                f"{t.planned_total_bytes / GIB:,.2f}",
                "-",
            )
        )
    width = max(len(r[0]) for r in rows)
    return [head] + [f"{a:<{width}}  {p:>9}  {tr:>9}" for a, p, tr in rows]


def _traced_dict(t) -> dict:
    """The traced bill under stable keys (bytes)."""
    return {
        "layers_traced": list(t.bill.layers_traced),
        "items": [
            {
                "item": line.item,
                "planned_bytes": line.planned_bytes,
                "traced_bytes": line.traced_bytes,
            }
            for line in t.kinds + t.left_out
        ],
        "planned_total_bytes": t.planned_total_bytes,
        "peak_bytes": t.peak_bytes,
        "peak_phase": t.peak_phase,
        "first_step_peak_bytes": t.first_step_peak_bytes,
        "first_step_peak_phase": t.first_step_peak_phase,
    }


def machine_inputs(path: str, gpu: str):
    """What the machine file at ``path`` gives a plan on ``gpu``
    (mlbook.calibrate.formulas.plan_inputs); a bad file or an unknown GPU
    raises ValueError with the file and the rule."""
    from mlbook.calibrate import formulas as cal

    return cal.plan_inputs(cal.load(path), gpu, path)


def machine_lines(inputs) -> list[str]:
    """What the plan took from a machine file, and what it did not."""
    head = f"machine file {inputs.path} ({inputs.device})"
    if not inputs.applies:
        return [f"{head}: used nothing", *(f"  not used: {u}" for u in inputs.unused)]
    return [
        f"{head}: calibrates the planned {inputs.gpu}",
        *(f"  used: {u}" for u in inputs.used),
        *(f"  not used: {u}" for u in inputs.unused),
    ]


def spec_from_args(args) -> RunSpec:
    return RunSpec(
        model=args.model,
        tokens=args.tokens,
        gpu=args.gpu,
        n_gpus=args.gpus,
        mfu=args.mfu,
        seq_len=args.seq_len,
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        zero_stage=args.zero,
        micro_batch=args.micro_batch,
        grad_accum=args.grad_accum,
        global_batch=args.global_batch,
        recompute=args.recompute,
        failures_per_gpu_hour=args.failures_per_gpu_hour,
        storage_bytes_per_s=args.storage_gb_per_s * GB,
        restart_s=args.restart_min * MINUTE_S,
        interval_s=None if args.interval_min is None else args.interval_min * MINUTE_S,
    )


def flag_for(message: str) -> str | None:
    """The flag a planner's error is about: the RunSpec field its message
    starts with ("n_gpus=1000 must be ..." is --gpus), else the longest field
    it names, else None (a rule over several, such as a run that cannot make
    progress)."""
    names = sorted((f.name for f in fields(RunSpec)), key=len, reverse=True)
    for name in names:
        if message.startswith(name) or message.startswith(f"{name}="):
            return FLAG[name]
    for name in names:  # "dp x tp x pp = ... must equal": the first field named
        if name in message:
            return FLAG[name]
    return None


def budget_lines(d: dict) -> list[str]:
    """The plan as aligned lines with units."""
    gib = lambda b: f"{b / GIB:,.1f} GiB"  # noqa: E731
    mb = d["memory_breakdown_bytes"]
    lost = d["lost_days"]
    rows = [
        (
            "run",
            f"{d['model']}, {d['tokens'] / TERA:g}T tokens, s={d['seq_len']:,}, "
            f"{d['n_gpus']:,} x {d['gpu']} (dp {d['dp']} x tp {d['tp']} "
            f"x pp {d['pp']})",
        ),
        ("compute (6ND)", f"{d['compute_flops_6nd']:.3e} FLOPs"),
        ("compute (6N+12Lhs)", f"{d['compute_flops']:.3e} FLOPs  <- MFU convention"),
        (
            "ideal days",
            f"{d['ideal_days']:,.1f} days at {d['mfu']:.0%} MFU "
            f"({d['ideal_days_6nd']:,.1f} with 6ND)",
        ),
        (
            "memory per GPU",
            f"{gib(d['memory_per_gpu_bytes'])} of {gib(d['usable_hbm_bytes'])} "
            f"usable HBM ({d['hbm_bytes'] / GIB:,.0f} GiB on the card): "
            + ("fits" if d["fits"] else f"does not fit, by {gib(d['short_bytes'])}"),
        ),
        ("  weights / grads", f"{gib(mb['weights'])} / {gib(mb['gradients'])}"),
        ("  optimizer", f"{gib(mb['optimizer'])} (ZeRO-{d['zero_stage']})"),
        (
            "  activations",
            f"{gib(mb['activations'])} (recompute: {d['recompute']}; "
            f"{d['activation_count']})",
        ),
        (
            "checkpoint",
            f"{d['checkpoint_bytes'] / TB:,.2f} TB, written in "
            f"{d['checkpoint_write_s']:,.1f} s",
        ),
        ("job MTBF", f"{d['job_mtbf_s'] / HOUR_S:,.2f} h"),
        (
            "checkpoint every",
            f"{d['checkpoint_interval_s'] / MINUTE_S:,.1f} min "
            f"(Young {d['young_interval_s'] / MINUTE_S:,.1f}, Daly "
            f"{d['daly_interval_s'] / MINUTE_S:,.1f})",
        ),
        ("expected failures", f"{d['expected_failures']:,.0f}"),
        (
            "lost to",
            f"checkpoints {lost['checkpoints']:,.2f} d, rework "
            f"{lost['rework']:,.2f} d, restarts {lost['restarts']:,.2f} d",
        ),
        ("goodput", f"{d['goodput']:.1%} (Daly exact: {d['goodput_daly']:.1%})"),
        ("expected days", f"{d['expected_days']:,.1f} days"),
    ]
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def main(argv=None) -> int:
    ap = parser()
    argv = _joined(list(sys.argv[1:] if argv is None else argv), ap)
    args = ap.parse_args(argv)
    bad = check_args(args, _typed(argv))
    if bad:
        print(f"{ap.prog}: error: {bad}", file=sys.stderr)
        return 2
    inputs = None
    if args.machine is not None:
        from mlbook.calibrate.formulas import MachineFileError, check_mfu

        try:
            inputs = machine_inputs(args.machine, args.gpu)
        except MachineFileError as exc:
            print(f"{ap.prog}: error: --machine: {exc}", file=sys.stderr)
            return 2
        except ValueError:
            inputs = None  # an unknown --gpu: the planner names it below
        if inputs is not None:
            try:
                check_mfu(inputs, args.mfu)
            except ValueError as exc:
                print(f"{ap.prog}: error: --mfu: {exc}", file=sys.stderr)
                return 2
    try:
        spec = spec_from_args(args)
        d = as_dict(plan(spec))
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        print(
            f"{ap.prog}: error: {flag_for(msg) or 'arguments'}: {msg}", file=sys.stderr
        )
        return 2
    traced = None
    if args.trace_memory:  # torch is imported here, and only here
        from mlbook.plan import experiments as trace

        try:
            trace.check_traceable(spec)
        except ValueError as exc:
            msg = str(exc).splitlines()[0]
            flag = flag_for(msg) or "--trace-memory"
            print(f"{ap.prog}: error: {flag}: {msg}", file=sys.stderr)
            return 2
        traced = trace.trace_plan(spec)
        d["traced_memory"] = _traced_dict(traced)
    if inputs is not None:
        d["machine"] = {
            "path": inputs.path,
            "device": inputs.device,
            "applies": inputs.applies,
            "mamf_share": inputs.mamf_share,
            "used": list(inputs.used),
            "not_used": list(inputs.unused),
        }
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True))
    else:
        lines = budget_lines(d) + (machine_lines(inputs) if inputs else [])
        print("\n".join(lines + (_traced_lines(traced) if traced else [])))
    return 0
