"""Exercises of the checkpoint-cadence chapter (notebooks/cadence.md)."""

from __future__ import annotations

import math

from mlbook.cadence import formulas
from mlbook.common.units import HOUR_S
from mlbook.exercises._core import Mistake, Real, exercise, register


def _exact_waste(c_s, t_s):
    """The exact expected loss at Daly's interval."""
    return formulas.waste_fraction(
        formulas.daly_interval(c_s, t_s), c_s, t_s, exact=True
    )


def _cadence_1(checkpoint_s, mtbf_h):
    c, t = checkpoint_s, mtbf_h * HOUR_S
    return {
        "young_s": formulas.young_interval(c, t),
        "daly_s": formulas.daly_interval(c, t),
        "waste": _exact_waste(c, t),
        "saved": _exact_waste(c, t) - _exact_waste(c / 2, t),
    }


def _first_order(c_s, t_s):
    """Young's first-order loss C/tau + tau/(2T) at his interval: sqrt(2C/T)."""
    return formulas.waste_fraction(formulas.young_interval(c_s, t_s), c_s, t_s)


CADENCE_1 = exercise(
    "cadence-1",
    level=1,
    kind="compute",
    inputs={"checkpoint_s": 40, "mtbf_h": 2.5},
    answers={
        "young_s": Real("s", "Young's interval", 0.005),
        "daly_s": Real("s", "Daly's interval", 0.005),
        "waste": Real(
            "fraction", "fraction of time lost at Daly's interval (exact)", 0.005
        ),
        "saved": Real(
            "fraction", "fraction of the run's time that halving C gives back", 0.01
        ),
    },
    key=_cadence_1,
    mistakes=(
        Mistake(
            "young_s",
            "Daly's interval",
            "Young's rule is the first-order optimum sqrt(2CT), without Daly's "
            "corrections.",
            lambda **i: _cadence_1(**i)["daly_s"],
        ),
        Mistake(
            "young_s",
            "the MTBF in minutes",
            "put C and T in the same unit, seconds.",
            lambda checkpoint_s, mtbf_h: formulas.young_interval(
                checkpoint_s, mtbf_h * 60
            ),
        ),
        Mistake(
            "young_s",
            "sqrt(CT) without the 2",
            "Young's interval is sqrt(2CT).",
            lambda checkpoint_s, mtbf_h: math.sqrt(checkpoint_s * mtbf_h * HOUR_S),
        ),
        Mistake(
            "daly_s",
            "Young's interval",
            "Daly's refinement multiplies sqrt(2CT) by 1 + (1/3) sqrt(C/2T) + "
            "(1/9) C/2T and subtracts C.",
            lambda **i: _cadence_1(**i)["young_s"],
        ),
        Mistake(
            "daly_s",
            "Daly's interval without the final - C",
            "Daly's interval subtracts the write time C at the end.",
            lambda **i: _cadence_1(**i)["daly_s"] + i["checkpoint_s"],
        ),
        Mistake(
            "waste",
            "the first-order loss C/tau + tau/(2T)",
            "that is Young's estimate; the exact expectation under exponential "
            "failures is a little lower.",
            lambda checkpoint_s, mtbf_h: _first_order(checkpoint_s, mtbf_h * HOUR_S),
        ),
        Mistake(
            "saved",
            "a loss that halves with C",
            "at the optimum both terms of the loss shrink together, so it scales "
            "as sqrt(C), not as C.",
            lambda **i: _cadence_1(**i)["waste"] / 2,
        ),
        Mistake(
            "saved",
            "the difference of the first-order losses",
            "compute both losses exactly, as for the fraction lost.",
            lambda checkpoint_s, mtbf_h: (
                _first_order(checkpoint_s, mtbf_h * HOUR_S)
                - _first_order(checkpoint_s / 2, mtbf_h * HOUR_S)
            ),
        ),
        Mistake(
            "saved",
            "minutes a day instead of a fraction",
            "give the fraction of the run's time.",
            lambda **i: _cadence_1(**i)["saved"] * 24 * 60,
        ),
    ),
)

EXERCISES = register(CADENCE_1)
