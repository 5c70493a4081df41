"""Exercises of the mixed-precision chapter (notebooks/precision.md)."""

from __future__ import annotations

from mlbook.exercises._core import Integer, Mistake, exercise, register
from mlbook.precision import formulas

LOG2_SCALES = range(0, 40)  # loss scales 2^0 .. 2^39


def scale_window(
    fmt, flush_limit, logit_grads, grads, lost="flushed", overflow_of="all"
):
    """The powers of two k whose scale 2^k loses fewer than ``flush_limit`` of
    the logit gradients (``lost``: "flushed" to zero, or "below_normal" to
    count subnormals as lost too, or "any" for none at all) and overflows
    none of the gradients (``overflow_of``: "all", or "logits" alone)."""
    logits = formulas.log2_histogram(logit_grads)
    everything = formulas.log2_histogram(grads) if overflow_of == "all" else logits
    window = []
    for k in LOG2_SCALES:
        z = formulas.zone_fractions(logits, fmt, 2.0**k)
        share = z.flushed + (z.subnormal if lost == "below_normal" else 0.0)
        ok_low = share == 0 if lost == "any" else share < flush_limit
        if ok_low and formulas.zone_fractions(everything, fmt, 2.0**k).overflow == 0:
            window.append(k)
    return window


def _answers(window):
    if not window:
        return None
    return {
        "lowest_log2": window[0],
        "highest_log2": window[-1],
        "width": len(window),
    }


def _precision_1(fmt, flush_limit, logit_grads, grads):
    found = _answers(scale_window(fmt, flush_limit, logit_grads, grads))
    if found is None:
        raise ValueError(
            "no power-of-two scale from 2^0 to 2^39 meets both conditions for "
            "these gradients"
        )
    return found


def _wrong(answer, **how):
    def value(fmt, flush_limit, logit_grads, grads):
        found = _answers(scale_window(fmt, flush_limit, logit_grads, grads, **how))
        return None if found is None else found[answer]

    return value


PRECISION_1 = exercise(
    "precision-1",
    level=2,
    kind="measure",
    inputs={"fmt": "fp16", "flush_limit": 0.01},
    measured=("logit_grads", "grads"),
    answers={
        "lowest_log2": Integer("log2", "the lowest scale 2^k's power k"),
        "highest_log2": Integer("log2", "the highest scale 2^k's power k"),
        "width": Integer("powers of two", "how many powers of two the window holds"),
    },
    key=_precision_1,
    mistakes=(
        Mistake(
            "lowest_log2",
            "no logit gradient flushed at all",
            "the question allows fewer than 1 % of them to become zero.",
            _wrong("lowest_log2", lost="any"),
        ),
        Mistake(
            "lowest_log2",
            "subnormals counted as lost",
            "a subnormal keeps its value with fewer bits; only a flush to zero "
            "loses it.",
            _wrong("lowest_log2", lost="below_normal"),
        ),
        Mistake(
            "highest_log2",
            "the overflow of the logit gradients alone",
            "none of the gradients may overflow: hidden-state and weight "
            "gradients are larger.",
            _wrong("highest_log2", overflow_of="logits"),
        ),
        Mistake(
            "width",
            "the gaps between the ends, not the powers of two",
            "count both ends of the window.",
            lambda **i: (
                _precision_1(**i)["highest_log2"] - _precision_1(**i)["lowest_log2"]
            ),
        ),
    ),
)

EXERCISES = register(PRECISION_1)
