"""``python -m mlbook plan``: the planner as a command.

Prints the plan as an aligned budget with units, or with ``--json`` the same
numbers under stable keys. A bad argument exits with status 2 and one line
that names the flag and the rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from mlbook.common.transformer import PRESETS
from mlbook.common.units import GB, GIB, HOUR_S, MINUTE_S, TB, TERA
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


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="python -m mlbook plan",
        description="The budget of a training run: compute, days, memory per GPU, "
        "checkpoints, failures and goodput.",
    )
    ap.add_argument("--model", required=True, help="preset name: " + ", ".join(PRESETS))
    ap.add_argument(
        "--tokens", type=float, required=True, help="training tokens D (e.g. 15e12)"
    )
    ap.add_argument(
        "--gpu",
        required=True,
        help="accelerator with a bf16 peak: " + ", ".join(GPUS + GPU_ALIASES),
    )
    ap.add_argument("--gpus", type=int, required=True, help="number of GPUs G")
    ap.add_argument(
        "--mfu", type=float, default=0.40, help="MFU to plan with, 0-1 (default 0.40)"
    )
    ap.add_argument(
        "--seq-len",
        type=int,
        default=8192,
        help="sequence length s, tokens (default 8192)",
    )
    ap.add_argument(
        "--tp", type=int, default=1, help="tensor-parallel size (default 1)"
    )
    ap.add_argument(
        "--pp", type=int, default=1, help="pipeline-parallel size (default 1)"
    )
    ap.add_argument(
        "--dp",
        type=int,
        default=None,
        help="data-parallel size (default gpus / (tp x pp))",
    )
    ap.add_argument(
        "--zero", type=int, default=1, help=f"ZeRO stage {ZERO_STAGES} (default 1)"
    )
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=1,
        help="sequences per GPU per micro-step (default 1)",
    )
    ap.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        help="micro-steps per optimizer step (default 1)",
    )
    ap.add_argument(
        "--global-batch",
        type=int,
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
        type=float,
        default=llama3_failures_per_gpu_hour(),
        help="failure rate per GPU-hour (default %(default).3g: Llama 3 405B's 419 "
        "unexpected interruptions in 54 days on 16,384 GPUs)",
    )
    ap.add_argument(
        "--storage-gb-per-s",
        type=float,
        default=DEFAULT_STORAGE_BYTES_PER_S / GB,
        help=(
            "aggregate checkpoint write bandwidth, GB/s (default %(default)g, "
            "an assumption)"
        ),
    )
    ap.add_argument(
        "--restart-min",
        type=float,
        default=DEFAULT_RESTART_S / MINUTE_S,
        help="minutes to detect a failure, reschedule and reload (default %(default)g, "
        "an assumption)",
    )
    ap.add_argument(
        "--interval-min",
        type=float,
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
    args = ap.parse_args(argv)
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
