"""The plan page's live figure and its planner form (mlbook.common.live).

- ``budget_explorer``: where a planned run's days and memory go, two stacked
  bars (the expected days by cause; memory per GPU by item against the HBM
  the driver makes usable) for the run its controls set.
- ``planner_form``: the whole planner as a form. Its controls are the flags
  of ``python -m mlbook plan``, named as argparse names them (``gpus`` is
  ``--gpus``, ``storage_gb_per_s`` is ``--storage-gb-per-s``) and in the
  flags' units; it runs the command's own code (``cli.parser``,
  ``cli.spec_from_args``, ``plan``, ``as_dict``) and returns what ``--json``
  prints for the same arguments. ``budget_view`` shows it as the command
  prints it, with the command line and ``budget_chart``. A bad input raises
  the planner's own message as a ``FieldError`` for the flag it names.

Standard library and mlbook's torch-free modules only: the HTML book runs
them in the reader's browser.
"""

from __future__ import annotations

import re
import shlex

from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.transformer import PRESETS
from mlbook.common.units import GIB, TERA
from mlbook.plan import cli
from mlbook.plan.planner import (
    GPUS,
    RECOMPUTE,
    ZERO_STAGES,
    RunSpec,
    as_dict,
    llama3_failures_per_gpu_hour,
    plan,
)

MODELS = tuple(PRESETS)
# the parts of the two bars: (label, key in the plan's JSON, colour)
DAY_PARTS = (
    ("ideal", "ideal_days", vl.C[0]),
    ("checkpoint writes", "checkpoints", vl.C[1]),
    ("rework", "rework", vl.C[3]),
    ("restarts", "restarts", vl.C[2]),
)
MEMORY_PARTS = (
    ("weights", "weights", vl.C[0]),
    ("gradients", "gradients", vl.C[1]),
    ("optimizer", "optimizer", vl.C[2]),
    ("activations", "activations", vl.C[4]),
)
BAR_WIDTH = 400  # px: each bar, its legend beside it
COMMAND = "python -m mlbook plan"


def _bar(parts: list[tuple[str, float, str]], field: str, unit: str, title: str):
    """One horizontal stacked bar: ``parts`` (label, value, colour) laid end
    to end on an axis of ``field`` in ``unit``, a tooltip on each part; the
    legend gives each part's value too."""
    rows, start = [], 0.0
    parts = [(f"{label} {value:,.1f}", value, color) for label, value, color in parts]
    for label, value, _ in parts:
        rows.append({"part": label, field: value, "start": start, "end": start + value})
        start += value
    x = vl.channel("start", vl.title_of(field, unit), format=",~r")
    color = {
        "field": "part",
        "type": "nominal",
        "scale": {"domain": [p[0] for p in parts], "range": [p[2] for p in parts]},
        "legend": {"title": None, "orient": "right"},
    }
    tooltip = [vl.tip("part", "part", nominal=True), vl.tip(field, f"{field} ({unit})")]
    return {
        "title": {"text": title, "fontSize": 11, "fontWeight": "normal"},
        "width": BAR_WIDTH,
        "height": 36,
        "layer": [
            {
                "data": {"values": rows},
                "mark": {"type": "bar"},
                "encoding": {
                    "x": x,
                    "x2": {"field": "end"},
                    "color": color,
                    "tooltip": tooltip,
                },
            }
        ],
    }


def budget_chart(d: dict, title: str) -> dict:
    """The plan ``d`` (what ``--json`` prints) as two stacked bars: the
    expected days by cause, and memory per GPU by item with a rule at the
    usable HBM."""
    lost = d["lost_days"]
    days = [
        (label, d[key] if key == "ideal_days" else lost[key], color)
        for label, key, color in DAY_PARTS
    ]
    mem = d["memory_breakdown_bytes"]
    gib = [(label, mem[key] / GIB, color) for label, key, color in MEMORY_PARTS]
    total, usable = d["memory_per_gpu_bytes"] / GIB, d["usable_hbm_bytes"] / GIB
    verdict = "fits" if d["fits"] else f"short by {d['short_bytes'] / GIB:,.1f} GiB"
    day_bar = _bar(
        days,
        "time",  # the axis reads "time (days)", not "days (days)"
        "days",
        f"{d['expected_days']:,.1f} days expected, goodput {d['goodput']:.1%}",
    )
    mem_bar = _bar(
        gib,
        "memory",
        "GiB per GPU",
        f"{total:,.1f} GiB per GPU of {usable:,.1f} usable: {verdict}",
    )
    hbm = {"memory": usable, "card": d["hbm_bytes"] / GIB}
    mem_bar["layer"].append(
        {
            "data": {"values": [hbm]},
            "mark": {"type": "rule", "color": "black", "strokeDash": vl.DASHED},
            "encoding": {
                "x": {**mem_bar["layer"][0]["encoding"]["x"], "field": "memory"},
                "tooltip": [
                    vl.tip("memory", "usable HBM (GiB)"),
                    vl.tip("card", "HBM on the card (GiB)"),
                ],
            },
        }
    )
    return {
        "$schema": vl.SCHEMA,
        "title": {"text": title, "fontSize": 12, "fontWeight": "normal"},
        "vconcat": [day_bar, mem_bar],
        "resolve": {"scale": {"color": "independent", "x": "independent"}},
        "config": {
            "axis": {"grid": True, "gridOpacity": 0.5, "labelFontSize": 10},
            "legend": {"labelFontSize": 10, "labelLimit": 320},
            "view": {"stroke": "#888"},
        },
    }


@live.figure(
    live.dropdown("model", "model", MODELS, "Llama-3-70B"),
    live.slider("tokens_trillions", "tokens D (trillions)", 15, 0.5, 30, 0.5),
    live.dropdown("gpu", "GPU", GPUS, "H100 SXM"),
    live.dropdown("n_gpus", "GPUs", (512, 1024, 2048, 4096, 8192, 16384), 4096),
    live.dropdown("tp", "TP (tensor-parallel size)", (1, 2, 4, 8), 8),
    live.dropdown("pp", "PP (pipeline stages)", (1, 2, 4, 8, 16), 1),
    live.slider("mfu", "MFU (fraction of peak)", 0.4, 0.1, 0.7, 0.01),
    live.dropdown("zero_stage", "ZeRO stage", ZERO_STAGES, 1),
    live.dropdown("recompute", "recompute", RECOMPUTE, "selective"),
    live.slider("restart_min", "restart R (min)", 10, 0, 60, 1),
)
def budget_explorer(
    model: str,
    tokens_trillions: float,
    gpu: str,
    n_gpus: int,
    tp: int,
    pp: int,
    mfu: float,
    zero_stage: int,
    recompute: str,
    restart_min: float,
) -> dict:
    """Where the days and the memory of a planned run go (``budget_chart``),
    the setting in the title. Every setting of these controls is a valid
    plan: every preset's heads divide by 8, its layers number at least 16,
    and tp x pp divides every GPU count offered."""
    spec = RunSpec(
        model=model,
        tokens=tokens_trillions * TERA,
        gpu=gpu,
        n_gpus=n_gpus,
        tp=tp,
        pp=pp,
        mfu=mfu,
        zero_stage=zero_stage,
        recompute=recompute,
        restart_s=restart_min * 60,
    )
    title = (
        f"{model}, {tokens_trillions:g}T tokens on {n_gpus:,} x {gpu} (tp {tp}, "
        f"pp {pp}) at {mfu:.0%} MFU, ZeRO-{zero_stage}, {recompute} recompute, "
        f"{restart_min:g}-min restarts"
    )
    return budget_chart(as_dict(plan(spec)), title)


def _arg(value) -> str:
    """A value as a command line writes it, read back exactly by the flag's
    type (15e12 as 1.5e13, 2.4e9 as 2.4e9, 0.4 as 0.4, 4096 as 4096)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    short = re.sub(r"e([+-])0*(?=\d)", lambda m: "e" + m[1].strip("+"), f"{value:g}")
    return short if float(short) == value else repr(float(value))


# the interval field's value for Young's optimum: no --interval-min, the
# planner's default
YOUNG = 0


def plan_argv(**values) -> list[str]:
    """The arguments of ``python -m mlbook plan`` for a form's values: each
    control ``name`` is the flag ``--name`` with dashes (the interval left
    out at Young's optimum, the command's default)."""
    argv = []
    for name, value in values.items():
        if name == "interval_min" and value == YOUNG:
            continue
        argv += [f"--{name.replace('_', '-')}", _arg(value)]
    return argv


def _field(name: str, label: str, value, step) -> live.Control:
    """A number field with the range the command gives its flag
    (``cli.LIMITS``): the form takes every value the command takes."""
    limit = cli.LIMITS[name]
    lo, hi = limit.lo, limit.hi
    if limit.whole:
        lo, hi, step = int(lo), int(hi), int(step)
    flag = f"{label} (--{name.replace('_', '-')})"
    # whole or not as the command reads the flag, said in the JSON too: the
    # browser's JSON reads 1e15 back as a whole number
    return live.number(name, flag, value, lo, hi, step, whole=limit.whole)


# The controls of the form: the command's flags, in its units and defaults,
# each number in the range the command takes for its flag (cli.LIMITS), so
# a box never holds a value the command refuses on its own and takes every
# value it accepts, as typed (the steps are the arrow keys'); what the
# planner still refuses is a rule over several fields (tp divides the
# model's heads, tp x pp divides the GPUs), shown at the field it names.
FORM = (
    live.dropdown("model", "model (--model)", MODELS, "Llama-3-70B"),
    _field("tokens", "tokens D", 15e12, 1e12),
    live.dropdown("gpu", "GPU (--gpu)", GPUS, "H100 SXM"),
    _field("gpus", "GPUs G", 4096, 1),
    _field("mfu", "MFU, fraction of peak", 0.4, 0.01),
    _field("seq_len", "sequence length s, tokens", 8192, 1024),
    _field("tp", "TP, tensor-parallel size", 8, 1),
    _field("pp", "PP, pipeline stages", 1, 1),
    live.dropdown("zero", "ZeRO stage (--zero)", ZERO_STAGES, 1),
    live.dropdown("recompute", "recompute (--recompute)", RECOMPUTE, "selective"),
    _field("micro_batch", "micro-batch, sequences", 1, 1),
    _field(
        "failures_per_gpu_hour",
        "failures per GPU-hour",
        # Llama 3 405B's log, 419 / (54 x 24 h x 16,384 GPUs), to four digits
        float(f"{llama3_failures_per_gpu_hour():.4g}"),
        1e-6,
    ),
    _field("storage_gb_per_s", "checkpoint write bandwidth, GB/s", 200.0, 10.0),
    _field("restart_min", "restart time R, min", 10, 1.0),
    # 0 is Young's optimum (no flag); the command takes any interval above 0
    _field(
        "interval_min", "checkpoint interval I, min (0: Young's optimum)", YOUNG, 1.0
    ),
)
FORM_FIELDS = tuple(c.name for c in FORM)
# How a planner's message names a field, and how the form's label does; the
# model's own sizes as a reader says them
_WORDS = {
    "n_gpus": "GPUs",
    "tp": "TP",
    "pp": "PP",
    "dp": "DP",
    "mfu": "MFU",
    "tokens": "tokens",
    "seq_len": "sequence length",
    "zero_stage": "ZeRO stage",
    "micro_batch": "micro-batch",
    "failures_per_gpu_hour": "failures per GPU-hour",
    "storage_bytes_per_s": "checkpoint write bandwidth",
    "restart_s": "restart time",
    "interval_s": "checkpoint interval",
}
_MODEL_SIZES = {"n_heads": "heads", "n_layers": "layers"}


def in_the_forms_words(message: str) -> str:
    """A planner's message with the form's names for its fields: "n_gpus=1000
    must be a multiple of tp x pp" reads "GPUs = 1,000 must be a multiple of
    TP x PP", "the model's n_heads=64" reads "the model's 64 heads". The
    command prints the message as the planner wrote it, after its flag."""

    def number(text: str) -> str:
        return f"{int(text):,}" if text.isdigit() else text

    def size(m: re.Match) -> str:
        return f"{number(m.group(2))} {_MODEL_SIZES[m.group(1)]}"

    message = re.sub(r"\b(n_heads|n_layers)=(\w+)", size, message)

    def field(m: re.Match) -> str:
        word = _WORDS[m.group(1)]
        return f"{word} = {number(m.group(2))}" if m.group(2) else word

    names = "|".join(sorted(_WORDS, key=len, reverse=True))
    return re.sub(rf"\b({names})\b(?:=([\w.+-]+))?", field, message)


def budget_view(result: dict, values: dict) -> dict:
    """What the form shows for a result: the command line, the budget as
    the command prints it, and ``budget_chart``."""
    return {
        "command": f"{COMMAND} {shlex.join(plan_argv(**values))}",
        "text": "\n".join(cli.budget_lines(result)),
        "spec": budget_chart(
            result,
            f"{result['model']}, {result['tokens'] / TERA:g}T tokens on "
            f"{result['n_gpus']:,} x {result['gpu']}",
        ),
    }


@live.figure(*FORM, view=budget_view)
def planner_form(
    model: str,
    tokens: float,
    gpu: str,
    gpus: int,
    mfu: float,
    seq_len: int,
    tp: int,
    pp: int,
    zero: int,
    recompute: str,
    micro_batch: int,
    failures_per_gpu_hour: float,
    storage_gb_per_s: float,
    restart_min: float,
    interval_min: float = YOUNG,
) -> dict:
    """What ``python -m mlbook plan ... --json`` prints for these flags: the
    command's own parser, spec and planner. A value the planner refuses
    raises its message, in the form's words (``in_the_forms_words``), as a
    FieldError for the flag it names (None when it names no one flag of the
    form's)."""
    values = dict(locals())  # the parameters, in order: the flags
    try:
        args = cli.parser().parse_args(plan_argv(**values))
    except SystemExit:  # the form's values always parse; this would be a bug here
        raise ValueError(
            f"the form's values did not parse as flags: {values}"
        ) from None
    try:
        return as_dict(plan(cli.spec_from_args(args)))
    except ValueError as exc:
        message = str(exc).splitlines()[0]
        flag = cli.flag_for(message)
        name = flag[2:].replace("-", "_") if flag else None
        raise live.FieldError(
            name if name in FORM_FIELDS else None, in_the_forms_words(message)
        ) from None
