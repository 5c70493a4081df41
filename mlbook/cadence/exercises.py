"""Exercises of the checkpoint-cadence chapter (notebooks/cadence.md)."""

from __future__ import annotations

import math

from mlbook.cadence import formulas
from mlbook.common.units import DAY_S, HOUR_S
from mlbook.judge import (
    Code,
    Mistake,
    Real,
    WrongFunction,
    exercise,
    register,
)


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


# Just before the measured save stalls: the reader writes down how much of the
# synchronous stall async_save keeps.
CADENCE_2 = exercise(
    "cadence-2",
    level=1,
    kind="predict",
    answers={
        "async_vs_sync": Real(
            "fraction",
            "your prediction: async_save's stall as a fraction of the synchronous one",
            0.1,
        ),
    },
)


def _cadence_3(
    n_params_b, writers, writer_gb_s, storage_gb_s, n_gpus, gpus_per_node, node_days
):
    nbytes = formulas.checkpoint_bytes(n_params_b * 1e9)
    c = formulas.write_time_s(nbytes, writers, writer_gb_s * 1e9, storage_gb_s * 1e9)
    t = formulas.cluster_mtbf(node_days * DAY_S, n_gpus // gpus_per_node)
    daly = formulas.daly_interval(c, t)
    return {
        "c_s": c,
        "mtbf_h": t / HOUR_S,
        "daly_s": daly,
        "waste": formulas.waste_fraction(daly, c, t, exact=True),
    }


def _cadence_3_with(**changes):
    """cadence-3's key computed with some inputs changed (a mistake's way)."""

    def wrong(answer):
        return lambda **i: _cadence_3(**{**i, **changes})[answer]

    return wrong


CADENCE_3 = exercise(
    "cadence-3",
    level=2,
    kind="compute",
    inputs={
        "n_params_b": 405,
        "writers": 2048,
        "writer_gb_s": 1,
        "storage_gb_s": 500,
        "n_gpus": 16_384,
        "gpus_per_node": 8,
        "node_days": 60,
    },
    answers={
        "c_s": Real("s", "the write time C", 0.005),
        "mtbf_h": Real("h", "the job's MTBF T", 0.005),
        "daly_s": Real("s", "Daly's interval", 0.005),
        "waste": Real("fraction", "fraction of time lost at Daly's interval", 0.005),
    },
    key=_cadence_3,
    mistakes=(
        Mistake(
            "c_s",
            "no storage ceiling",
            "2,048 writers at 1 GB/s would push 2 TB/s; the storage takes less.",
            _cadence_3_with(storage_gb_s=1e9)("c_s"),
        ),
        Mistake(
            "c_s",
            "one writer",
            "every rank writes its own shard, all at once.",
            _cadence_3_with(writers=1)("c_s"),
        ),
        Mistake(
            "c_s",
            "16 bytes a parameter",
            "the gradients are not saved: the next step recomputes them.",
            lambda **i: _cadence_3(**i)["c_s"] * 16 / 14,
        ),
        Mistake(
            "mtbf_h",
            "GPUs instead of nodes",
            "the failure rate given is per node: divide by the node count.",
            _cadence_3_with(gpus_per_node=1)("mtbf_h"),
        ),
        Mistake(
            "mtbf_h",
            "the node's MTBF",
            "a synchronous job stops when any of its nodes fails.",
            lambda node_days, **_: node_days * DAY_S / HOUR_S,
        ),
        Mistake(
            "daly_s",
            "Young's interval",
            "Daly's refinement multiplies sqrt(2CT) by 1 + (1/3) sqrt(C/2T) + "
            "(1/9) C/2T and subtracts C.",
            lambda **i: formulas.young_interval(
                _cadence_3(**i)["c_s"], _cadence_3(**i)["mtbf_h"] * HOUR_S
            ),
        ),
        Mistake(
            "waste",
            "the first-order loss",
            "that is Young's estimate C/I + I/(2T); the exact expectation under "
            "exponential failures is a little lower.",
            lambda **i: formulas.waste_fraction(
                _cadence_3(**i)["daly_s"],
                _cadence_3(**i)["c_s"],
                _cadence_3(**i)["mtbf_h"] * HOUR_S,
            ),
        ),
    ),
)


def _cadence_4(interruptions, days, checkpoint_s, restart_s):
    t = days * DAY_S / interruptions
    daly = formulas.daly_interval(checkpoint_s, t)
    return {
        "mtbf_h": t / HOUR_S,
        "daly_s": daly,
        "waste": formulas.waste_fraction(daly, checkpoint_s, t, restart_s, exact=True),
    }


CADENCE_4 = exercise(
    "cadence-4",
    level=1,
    kind="compute",
    inputs={"interruptions": 419, "days": 54, "checkpoint_s": 60, "restart_s": 600},
    answers={
        "mtbf_h": Real("h", "the job's MTBF T", 0.005),
        "daly_s": Real("s", "Daly's interval", 0.005),
        "waste": Real(
            "fraction", "fraction of time lost at Daly's interval, restarts in", 0.005
        ),
    },
    key=_cadence_4,
    mistakes=(
        Mistake(
            "mtbf_h",
            "the MTBF in days",
            "54 days over 419 interruptions is a number of days: give hours.",
            lambda interruptions, days, **_: days / interruptions,
        ),
        Mistake(
            "daly_s",
            "the restart added to C",
            "the restart cost adds waste but does not move the optimum.",
            lambda interruptions, days, checkpoint_s, restart_s: formulas.daly_interval(
                checkpoint_s + restart_s, days * DAY_S / interruptions
            ),
        ),
        Mistake(
            "daly_s",
            "Young's interval",
            "Daly's refinement multiplies sqrt(2CT) by 1 + (1/3) sqrt(C/2T) + "
            "(1/9) C/2T and subtracts C.",
            lambda interruptions, days, checkpoint_s, **_: formulas.young_interval(
                checkpoint_s, days * DAY_S / interruptions
            ),
        ),
        Mistake(
            "waste",
            "the restarts left out",
            "every failure also costs the restart R, and failures may strike "
            "during it.",
            lambda **i: _cadence_4(**{**i, "restart_s": 0})["waste"],
        ),
        Mistake(
            "waste",
            "the first-order loss C/I + I/(2T) + R/T",
            "that is the first-order estimate; use the exact expectation.",
            lambda interruptions, days, checkpoint_s, restart_s: (
                formulas.waste_fraction(
                    _cadence_4(interruptions, days, checkpoint_s, restart_s)["daly_s"],
                    checkpoint_s,
                    days * DAY_S / interruptions,
                    restart_s,
                )
            ),
        ),
    ),
)


def _cadence_5(checkpoint_s, mtbf_h, k_long, k_short):
    c, t = checkpoint_s, mtbf_h * HOUR_S
    young = formulas.young_interval(c, t)
    return {
        "waste_long": formulas.waste_fraction(k_long * young, c, t),
        "waste_short": formulas.waste_fraction(k_short * young, c, t),
    }


def _optimum(checkpoint_s, mtbf_h, **_):
    """The first-order waste at Young's interval, sqrt(2C/T)."""
    return _first_order(checkpoint_s, mtbf_h * HOUR_S)


CADENCE_5 = exercise(
    "cadence-5",
    level=2,
    kind="derive",
    inputs={"checkpoint_s": 30, "mtbf_h": 3, "k_long": 2, "k_short": 0.1},
    answers={
        "waste_long": Real(
            "fraction", "fraction of time lost at twice Young's interval", 0.01
        ),
        "waste_short": Real(
            "fraction", "fraction of time lost at a tenth of Young's interval", 0.01
        ),
    },
    key=_cadence_5,
    mistakes=(
        Mistake(
            "waste_long",
            "k times the optimum's waste",
            "only the failure term grows with k; the checkpoint term shrinks.",
            lambda k_long, **i: k_long * _optimum(**i),
        ),
        Mistake(
            "waste_long",
            "the optimum's waste",
            "the optimum is the bottom of the curve: anywhere else loses more.",
            _optimum,
        ),
        Mistake(
            "waste_long",
            "the checkpoint term only",
            "add the failure term I/(2T).",
            lambda checkpoint_s, mtbf_h, k_long, **_: (
                checkpoint_s
                / (k_long * formulas.young_interval(checkpoint_s, mtbf_h * HOUR_S))
            ),
        ),
        Mistake(
            "waste_short",
            "k times the optimum's waste",
            "a shorter interval pays the checkpoint more often: the loss grows.",
            lambda k_short, **i: k_short * _optimum(**i),
        ),
        Mistake(
            "waste_short",
            "1/k times the optimum's waste",
            "the two terms move in opposite directions: average k and 1/k.",
            lambda k_short, **i: _optimum(**i) / k_short,
        ),
        Mistake(
            "waste_short",
            "the optimum's waste",
            "the optimum is the bottom of the curve: anywhere else loses more.",
            _optimum,
        ),
    ),
)


def _daly_arguments(st):
    """(checkpoint_s, mtbf_s): write times from 0.1 s to about 3 h, MTBFs
    from a second to about 12 days, C >= 2T included."""
    return st.tuples(st.floats(0.1, 1e4), st.floats(1.0, 1e6))


def _young_only(checkpoint_s, mtbf_s):
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def _no_branch(checkpoint_s, mtbf_s):
    c, t = checkpoint_s, mtbf_s
    x = c / (2 * t)
    return math.sqrt(2 * c * t) * (1 + math.sqrt(x) / 3 + x / 9) - c


def _without_minus_c(checkpoint_s, mtbf_s):
    return formulas.daly_interval(checkpoint_s, mtbf_s) + (
        checkpoint_s if checkpoint_s < 2 * mtbf_s else 0.0
    )


DALY_CASES = (
    (40.0, 9000.0),  # cadence-1: C = 40 s, T = 2.5 h
    (30.0, 10_800.0),  # the page's C = 30 s, T = 3 h
    (60.0, 10_800.0),
    (30.0, 1777.5),  # 16,384 GPUs at the 1,024-GPU rate
    (3000.0, 1000.0),  # C >= 2T: checkpoint once an MTBF
    (2000.0, 1000.0),  # C = 2T exactly
)
_PRINTED = {case: formulas.daly_interval(*case) for case in DALY_CASES}


def _hard_coded(checkpoint_s, mtbf_s):
    """The known cases' answers looked up; Young's rule for anything else."""
    return _PRINTED.get((checkpoint_s, mtbf_s), _young_only(checkpoint_s, mtbf_s))


CADENCE_6 = exercise(
    "cadence-6",
    level=2,
    kind="code",
    code=Code(
        name="daly_interval",
        params=("checkpoint_s", "mtbf_s"),
        reference=formulas.daly_interval,
        cases=DALY_CASES,
        arguments=_daly_arguments,
        same=lambda expected, got: math.isclose(expected, got, rel_tol=1e-9),
        mistakes=(
            WrongFunction(
                "Young's sqrt(2CT)",
                "Daly's refinement multiplies sqrt(2CT) by 1 + (1/3) sqrt(C/2T) + "
                "(1/9) C/2T and subtracts C.",
                _young_only,
            ),
            WrongFunction(
                "no branch for C >= 2T",
                "when a checkpoint takes two MTBFs or more, Daly's optimum is T.",
                _no_branch,
            ),
            WrongFunction(
                "the final - C left out",
                "Daly's interval subtracts the write time C at the end.",
                _without_minus_c,
            ),
            WrongFunction(
                "the known cases' answers hard-coded",
                "compute the interval from C and T: the check also draws cases "
                "of its own.",
                _hard_coded,
            ),
        ),
    ),
)

# The reader times a plain file write on their own disk against the save the
# page measured: the numbers depend on the machine, so there is no key.
CADENCE_7 = exercise("cadence-7", level=2, kind="measure")

EXERCISES = register(
    CADENCE_1, CADENCE_2, CADENCE_3, CADENCE_4, CADENCE_5, CADENCE_6, CADENCE_7
)
