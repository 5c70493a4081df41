"""The capstone chapter's live figure (mlbook.common.live): the MFU lost,
bar by bar, from the nominal peak to a step with the fixes a reader ticks,
under the additive time model of formulas.waterfall. Standard library and
mlbook's torch-free modules only: the HTML book runs it in the reader's
browser.

The run's measurements reach it as one fixed summary, ``run``: the nominal
peak of the final rung's dtype and its basis (accelerators.PEAK_BASES, which
names the first bar: a datasheet peak, an upper bound, a peak at an assumed
clock; with no known peak the bars start at the ceiling), the MAMF ceiling,
the model FLOPs of one step, the step time with every fix, and the time each
measured fix saved (a few hundred bytes of JSON)."""

from __future__ import annotations

from mlbook.capstone import formulas as cf
from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.accelerators import PEAK_LABELS

# What the page leaves out at first: the two fixes whose bars show the most
# (tokenising inside the loop, and full recompute).
LEFT_OUT = ("pretokenise", "no_recompute")
LABELS = {f.name: f.label for f in cf.FIXES}
PEAK_COLOUR = "#999999"  # the first bar, whatever its basis names it
KINDS = {  # the other bars' kinds -> colour, as the matplotlib figure drew them
    "MFU lost": vl.C[3],
    "MFU gained": vl.C[2],
    "achieved": vl.C[0],
}
NO_PEAK = "MAMF ceiling"  # the first bar where the device's peak is unknown
# A made-up run in the shape the page passes (a CPU ladder of seven fixes),
# so the figure draws without a page, as the tests call it.
EXAMPLE_RUN = {
    "peak_basis": "upper bound",
    "peak_flops_per_s": 1.0e11,
    "ceiling_flops_per_s": 6.0e10,
    "flops_per_step": 3.0e9,
    "fixed_step_s": 0.1,
    "savings_s": {
        "pretokenise": 0.25,
        "log_every_n": 0.004,
        "sdpa": 0.02,
        "pad_vocab": 0.001,
        "fused_adamw": 0.01,
        "no_recompute": 0.04,
        "bigger_micro_batch": 0.03,
    },
    "device": "example run",
}


COMM = "exposed communication"  # the bar of the what-if control


def _bar_label(name: str) -> str:
    return {
        "peak to MAMF ceiling": "MAMF ceiling",
        "ceiling to all fixes": "all fixes",
    }.get(name, LABELS.get(name, name))


def peak_label(run: dict) -> str:
    """What the figure calls the bar it starts from: the peak's label by its
    basis (accelerators.PEAK_LABELS), or the MAMF ceiling where the peak is
    unknown (the run then passes the ceiling as its peak)."""
    basis = run.get("peak_basis") if isinstance(run, dict) else None
    if basis not in PEAK_LABELS:
        raise ValueError(
            f"run['peak_basis'] must be one of {sorted(PEAK_LABELS)}, got {basis!r}"
        )
    return NO_PEAK if basis == "unknown" else PEAK_LABELS[basis]


def waterfall_rows(run: dict, applied: list[str], comm_s: float = 0.0) -> list[dict]:
    """The bars of the waterfall as rows: ``bar`` (its label, in order),
    ``lo`` and ``hi`` (its ends, fractions of the peak), ``change`` (MFU
    after the bar minus before it) and ``kind`` (the peak's label for the
    first bar, peak_label; a key of KINDS for the others). ``comm_s`` above 0
    adds a last loss: that much exposed communication a step."""
    savings = dict(run["savings_s"])
    if comm_s > 0:
        savings[COMM] = comm_s  # never applied: a time the step pays
    bars, final = cf.waterfall(
        run["peak_flops_per_s"],
        run["ceiling_flops_per_s"],
        run["flops_per_step"],
        run["fixed_step_s"],
        savings,
        applied,
    )
    top = peak_label(run)
    rows = [{"bar": top, "lo": 0.0, "hi": 1.0, "change": 1.0, "kind": top}]
    for b in bars:
        lo, hi = sorted((b.top, b.bottom))
        rows.append(
            {
                "bar": _bar_label(b.label),
                "lo": lo,
                "hi": hi,
                "change": b.bottom - b.top,
                "kind": "MFU lost" if b.bottom < b.top else "MFU gained",
            }
        )
    end = {"bar": "achieved", "lo": 0.0, "hi": final, "change": final}
    return [*rows, {**end, "kind": "achieved"}]


@live.figure(
    *(live.checkbox(f.name, f.label, f.name not in LEFT_OUT) for f in cf.FIXES),
    live.slider(
        "comm_pct", "exposed communication added (% of the fixed step)", 0, 0, 100, 5
    ),
)
def mfu_waterfall(run: dict | None = None, comm_pct: float = 0, **applied) -> dict:
    """The MFU waterfall for the fixes ticked in ``applied`` (one checkbox per
    fix of formulas.FIXES; a fix the run did not measure, bf16 or
    torch.compile on a CPU, has no bar and its box changes nothing), with
    ``comm_pct`` % of the fixed step added as exposed communication, the
    checklist's item that one process cannot show."""
    run = EXAMPLE_RUN if run is None else run
    measured = list(run["savings_s"])
    chosen = [name for name in measured if applied.get(name, True)]
    rows = waterfall_rows(run, chosen, comm_pct / 100 * run["fixed_step_s"])
    final = rows[-1]["hi"]
    x = {
        "field": "bar",
        "type": "nominal",
        "sort": None,
        "title": vl.title_of("peak, losses, then each fix left out", "in order"),
        "axis": {"labelAngle": -30, "labelLimit": 160},
    }
    top = peak_label(run)
    y = vl.channel(
        "lo", vl.title_of("MFU", f"% of the {top}"), domain=[0, 1.08], percent=True
    )
    color = {
        "field": "kind",
        "type": "nominal",
        "scale": {
            "domain": [top, *KINDS],
            "range": [PEAK_COLOUR, *KINDS.values()],
        },
        "legend": {"title": None, "orient": "top"},
    }
    tooltip = [
        vl.tip("bar", "bar", nominal=True),
        vl.tip("change", "change in MFU", ".3%"),
        vl.tip("lo", "from", ".3%"),
        vl.tip("hi", "to", ".3%"),
    ]
    text_rows = [
        {**r, "text": f"{r['change']:+.1%}" if i not in (0, len(rows) - 1) else ""}
        for i, r in enumerate(rows)
    ]
    text_rows[-1]["text"] = f"{final:.1%}"
    skipped = [LABELS[n] for n in cf.FIX_NAMES if n not in measured]
    note = f" ({', '.join(skipped)}: not rungs of this run)" if skipped else ""
    comm = f", {comm_pct:g} % exposed communication" if comm_pct > 0 else ""
    title = (
        f"{len(chosen)} of {len(measured)} fixes applied{comm}: MFU {final:.1%}, "
        f"{run['device']}{note}"
    )
    return vl.chart(
        [
            {
                "data": {"values": rows},
                "mark": {"type": "bar", "width": {"band": 0.7}},
                "encoding": {
                    "x": x,
                    "y": y,
                    "y2": {"field": "hi"},
                    "color": color,
                    "tooltip": tooltip,
                },
            },
            {
                "data": {"values": text_rows},
                "mark": {"type": "text", "dy": -6, "fontSize": 10},
                "encoding": {
                    "x": x,
                    "y": {**y, "field": "hi"},
                    "text": {"field": "text"},
                },
            },
        ],
        title=title,
    )
