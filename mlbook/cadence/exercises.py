"""Exercises of the checkpoint-cadence chapter (notebooks/cadence.md)."""

from __future__ import annotations

import math

from mlbook.cadence import formulas, incidents
from mlbook.common.units import DAY_S, HOUR_S
from mlbook.judge import (
    Choice,
    Mistake,
    Real,
    Reason,
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
    # why: how much of a save is the copy into host memory
    reasons=(
        Reason(
            "async_save stalls training only while it copies the state into host "
            "memory; the write to storage, the slow part, goes on in a background "
            "thread while training runs.",
            when=(("async_vs_sync", "<", 0.5),),
        ),
        Reason(
            "On a CPU the state already sits in host memory and a small checkpoint "
            "lands in the operating system's page cache at memory speed, so the "
            "copy async_save waits for costs a large share of the write it hides. "
            "On a GPU the copy crosses PCIe while the write goes to shared storage, "
            "and the stall shrinks.",
            when=(("async_vs_sync", "<=", 1),),
        ),
        Reason(
            "A checkpoint this small is written about as fast as it is copied, so "
            "async_save's own costs, the copy, starting its writer and handing the "
            "copy over, outweigh the write it takes off the training thread; it pays "
            "once a checkpoint's write is slower than its copy into host memory.",
        ),
    ),
)


def _storage_bound(nbytes, writers, writer_bytes_per_s, storage_bytes_per_s):
    """'storage' when the writers together could push more than the storage
    takes, else 'writers' (formulas.write_time_s takes the smaller)."""
    pushed = writers * writer_bytes_per_s
    return "storage" if pushed >= storage_bytes_per_s else "writers"


BOUND = Choice(
    "what sets the write time C",
    {
        "storage": "the storage's aggregate bandwidth",
        "writers": "the writers' own bandwidth (too few of them)",
    },
    {
        "writers": "add up what all the writers could push and compare it with "
        "what the storage takes.",
    },
)


def _cadence_3(
    n_params_b, writers, writer_gb_s, storage_gb_s, n_gpus, gpus_per_node, node_days
):
    """The job doubled: twice the GPUs (so twice the nodes) and twice the writers."""
    nbytes = formulas.checkpoint_bytes(n_params_b * 1e9)
    w, s = writer_gb_s * 1e9, storage_gb_s * 1e9
    c = formulas.write_time_s(nbytes, 2 * writers, w, s)
    t = formulas.cluster_mtbf(node_days * DAY_S, 2 * n_gpus // gpus_per_node)
    daly = formulas.daly_interval(c, t)
    return {
        "bound": _storage_bound(nbytes, writers, w, s),
        "daly_s": daly,
        "waste": formulas.waste_fraction(daly, c, t, exact=True),
    }


def _cadence_3_before(**i):
    """cadence-3's Daly interval and loss before the job doubled."""
    nbytes = formulas.checkpoint_bytes(i["n_params_b"] * 1e9)
    c = formulas.write_time_s(
        nbytes, i["writers"], i["writer_gb_s"] * 1e9, i["storage_gb_s"] * 1e9
    )
    nodes = i["n_gpus"] // i["gpus_per_node"]
    t = formulas.cluster_mtbf(i["node_days"] * DAY_S, nodes)
    daly = formulas.daly_interval(c, t)
    return c, t, daly


def _cadence_3_halved_c(**i):
    """Daly's interval if doubling the writers had halved C."""
    c, t, _ = _cadence_3_before(**i)
    return formulas.daly_interval(c / 2, t / 2)


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
        "bound": BOUND,
        "daly_s": Real("s", "Daly's interval once the job has doubled", 0.005),
        "waste": Real(
            "fraction", "fraction of time lost there, once the job has doubled", 0.01
        ),
    },
    key=_cadence_3,
    mistakes=(
        Mistake(
            "daly_s",
            "C halved by the doubled writers",
            "the writers could already push more than the storage takes: twice "
            "as many write no faster (and sqrt(2CT) does not halve with T).",
            _cadence_3_halved_c,
        ),
        Mistake(
            "daly_s",
            "the interval before the job doubled",
            "twice the nodes fail twice as often: T halves.",
            lambda **i: _cadence_3_before(**i)[2],
        ),
        Mistake(
            "waste",
            "the loss doubled with the failure rate",
            "at the optimum the loss grows as sqrt(C/T), not as 1/T.",
            lambda **i: (
                2
                * formulas.waste_fraction(
                    _cadence_3_before(**i)[2], *_cadence_3_before(**i)[:2], exact=True
                )
            ),
        ),
        Mistake(
            "waste",
            "the loss before the job doubled",
            "twice the nodes fail twice as often, and every failure costs work.",
            lambda **i: formulas.waste_fraction(
                _cadence_3_before(**i)[2], *_cadence_3_before(**i)[:2], exact=True
            ),
        ),
    ),
)


def _cadence_4(interruptions, days, checkpoint_s, restart_s):
    t = days * DAY_S / interruptions

    def lost(c, r):  # the exact loss at Daly's interval for C = c, R = r
        daly = formulas.daly_interval(c, t)
        return formulas.waste_fraction(daly, c, t, r, exact=True)

    now = lost(checkpoint_s, restart_s)
    half_c = now - lost(checkpoint_s / 2, restart_s)
    half_r = now - lost(checkpoint_s, restart_s / 2)
    return {
        "restarts": now - lost(checkpoint_s, 0.0),
        "saved_half_c": half_c,
        "saved_half_r": half_r,
        "better": "halve_c" if half_c > half_r else "halve_r",
    }


CADENCE_4 = exercise(
    "cadence-4",
    level=2,
    kind="compute",
    inputs={"interruptions": 419, "days": 54, "checkpoint_s": 60, "restart_s": 600},
    answers={
        "restarts": Real(
            "fraction", "fraction of time the restarts cost, at Daly's interval", 0.02
        ),
        "saved_half_c": Real("fraction", "fraction of time halving C gives back", 0.02),
        "saved_half_r": Real("fraction", "fraction of time halving R gives back", 0.02),
        "better": Choice(
            "which buys more",
            {"halve_c": "halving the write C", "halve_r": "halving the restart R"},
        ),
    },
    key=_cadence_4,
    mistakes=(
        Mistake(
            "restarts",
            "R/T, the first-order restart cost",
            "a failure can also strike during a restart, and restarts only cost "
            "while the job runs: use the exact loss with R and without it.",
            lambda interruptions, days, restart_s, **_: (
                restart_s / (days * DAY_S / interruptions)
            ),
        ),
        Mistake(
            "saved_half_c",
            "a loss that halves with C",
            "at the optimum the checkpoint's part of the loss scales as sqrt(C).",
            lambda interruptions, days, checkpoint_s, **_: (
                _exact_waste(checkpoint_s, days * DAY_S / interruptions) / 2
            ),
        ),
        Mistake(
            "saved_half_r",
            "R/(2T), the first-order saving",
            "use the exact loss: e^(R/T) multiplies the time every segment takes.",
            lambda interruptions, days, restart_s, **_: (
                restart_s / 2 / (days * DAY_S / interruptions)
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


def _sets(f, c_s, t_s):
    """What ``f(C, T)`` depends on, found by evaluating it: 'product' when
    (2C, T/2) leaves it unchanged, 'ratio' when (2C, 2T) does."""
    base = f(c_s, t_s)
    if math.isclose(f(2 * c_s, t_s / 2), base, rel_tol=1e-9):
        return "product"
    if math.isclose(f(2 * c_s, 2 * t_s), base, rel_tol=1e-9):
        return "ratio"
    return "neither"


def _cadence_6(checkpoint_s, mtbf_h):
    """C doubles and T halves: the new Daly interval and loss, and what sets
    Young's interval and his loss at it."""
    c, t = 2 * checkpoint_s, mtbf_h * HOUR_S / 2
    daly = formulas.daly_interval(c, t)
    return {
        "daly_s": daly,
        "waste": formulas.waste_fraction(daly, c, t, exact=True),
        "interval_on": _sets(formulas.young_interval, checkpoint_s, mtbf_h * HOUR_S),
        "loss_on": _sets(_first_order, checkpoint_s, mtbf_h * HOUR_S),
    }


DEPENDS = {
    "product": "the product C T",
    "ratio": "the ratio C / T",
    "neither": "neither alone",
}

CADENCE_6 = exercise(
    "cadence-6",
    level=2,
    kind="derive",
    inputs={"checkpoint_s": 30, "mtbf_h": 3},
    answers={
        "daly_s": Real("s", "Daly's interval after the change", 0.005),
        "waste": Real("fraction", "fraction of time lost there (exact)", 0.01),
        "interval_on": Choice("Young's interval depends on", DEPENDS),
        "loss_on": Choice("the loss at Young's interval depends on", DEPENDS),
    },
    key=_cadence_6,
    mistakes=(
        Mistake(
            "daly_s",
            "Young's interval",
            "Young's sqrt(2CT) does not move; Daly's correction terms grow with "
            "C/T, and he subtracts C.",
            lambda checkpoint_s, mtbf_h: formulas.young_interval(
                2 * checkpoint_s, mtbf_h * HOUR_S / 2
            ),
        ),
        Mistake(
            "daly_s",
            "the interval before the change",
            "C doubled and T halved: Daly's terms in C/T grow fourfold, and the "
            "final - C doubles.",
            lambda checkpoint_s, mtbf_h: formulas.daly_interval(
                checkpoint_s, mtbf_h * HOUR_S
            ),
        ),
        Mistake(
            "waste",
            "the loss before the change",
            "the loss at the optimum grows with C/T, which has quadrupled.",
            lambda checkpoint_s, mtbf_h: _exact_waste(checkpoint_s, mtbf_h * HOUR_S),
        ),
        Mistake(
            "waste",
            "four times the loss",
            "the loss at the optimum grows as the square root of C/T.",
            lambda checkpoint_s, mtbf_h: (
                4 * _exact_waste(checkpoint_s, mtbf_h * HOUR_S)
            ),
        ),
        Mistake(
            "interval_on",
            "the ratio C/T for the interval",
            "double both C and T: does Young's interval stay put?",
            lambda **_: "ratio",
        ),
    ),
)


# The reader times a plain file write on their own disk against the save the
# page measured: the numbers depend on the machine, so there is no key.
CADENCE_7 = exercise("cadence-7", level=2, kind="measure")

# --- diagnoses: a failure log, a write sweep -----------------------------------------

CADENCE_CAUSES = Choice(
    "what is wrong with the cadence",
    {
        "too_rare": "checkpoints too far apart for this MTBF",
        "too_often": "checkpoints so frequent that the writes dominate",
        "restarts": "restarts that take too long",
    },
    {
        "too_often": "compare the interval the run used with Daly's for its MTBF.",
        "restarts": "count what the restarts cost against the work redone.",
    },
)


def _cadence_8(seed, checkpoint_min, interval_h, restart_min, run_h):
    c, i, r = checkpoint_min * 60, interval_h * HOUR_S, restart_min * 60
    log = incidents.failure_log(seed, c, i, r, run_h)
    t = log.observed_mtbf_s
    daly = formulas.daly_interval(c, t)
    now = formulas.waste_fraction(i, c, t, r, exact=True)
    best = formulas.waste_fraction(daly, c, t, r, exact=True)
    return {
        "cause": "too_rare" if i > daly else "too_often",
        "mtbf_h": t / HOUR_S,
        "daly_min": daly / 60,
        "redone_h": log.redone_h,
        "saved_h": (now - best) * run_h,
    }


def _cadence_8_log(seed, checkpoint_min, interval_h, restart_min, run_h):
    return incidents.failure_log(
        seed, checkpoint_min * 60, interval_h * HOUR_S, restart_min * 60, run_h
    )


CADENCE_8 = exercise(
    "cadence-8",
    level=2,
    kind="diagnose",
    inputs={
        "seed": 2,
        "checkpoint_min": 5,
        "interval_h": 3,
        "restart_min": 10,
        "run_h": 48,
    },
    answers={
        "cause": CADENCE_CAUSES,
        "mtbf_h": Real("h", "the MTBF, from the log", 0.01),
        "daly_min": Real("min", "Daly's interval for that MTBF", 0.01),
        "redone_h": Real("h", "hours of work redone after failures", 0.02),
        "saved_h": Real(
            "h", "hours of the run Daly's interval would save (exact model)", 0.02
        ),
    },
    key=_cadence_8,
    mistakes=(
        Mistake(
            "redone_h",
            "half an interval per failure",
            "that is the expectation when failures are rare; read each failure's "
            "lost work off the log (a failure can strike before any checkpoint).",
            lambda interval_h, **i: (
                len(_cadence_8_log(interval_h=interval_h, **i).failures)
                * interval_h
                / 2
            ),
        ),
        Mistake(
            "mtbf_h",
            "the MTBF in days",
            "divide the run's hours by the failures.",
            lambda run_h, **i: (
                run_h / 24 / len(_cadence_8_log(run_h=run_h, **i).failures)
            ),
        ),
        Mistake(
            "daly_min",
            "Young's interval",
            "Daly's refinement multiplies sqrt(2CT) by 1 + (1/3) sqrt(C/2T) + "
            "(1/9) C/2T and subtracts C.",
            lambda checkpoint_min, **i: (
                formulas.young_interval(
                    checkpoint_min * 60,
                    _cadence_8(checkpoint_min=checkpoint_min, **i)["mtbf_h"] * HOUR_S,
                )
                / 60
            ),
        ),
        Mistake(
            "saved_h",
            "the first-order losses",
            "C/I + I/(2T) + R/T overstates the loss at long intervals; use the "
            "exact expectation for both intervals.",
            lambda **i: _first_order_saving(**i),
        ),
    ),
)


def _first_order_saving(seed, checkpoint_min, interval_h, restart_min, run_h):
    c, i, r = checkpoint_min * 60, interval_h * HOUR_S, restart_min * 60
    key = _cadence_8(seed, checkpoint_min, interval_h, restart_min, run_h)
    t, daly = key["mtbf_h"] * HOUR_S, key["daly_min"] * 60
    gap = formulas.waste_fraction(i, c, t, r) - formulas.waste_fraction(daly, c, t, r)
    return gap * run_h


def _cadence_9(seed, n_params_b, writers, writers_next):
    sweep = incidents.write_sweep(seed, n_params_b * 1e9)
    w, s = sweep.writer_bytes_per_s, sweep.storage_bytes_per_s
    return {
        "bound": _storage_bound(sweep.checkpoint_bytes, writers, w, s),
        "writers_full": sweep.saturating_writers,
        "c_next_s": sweep.write_s(writers_next),
    }


def _first_flat(seed, n_params_b, **_):
    """The first writer count of the sweep whose write is no faster than the
    one before it (within the jitter): where the table looks flat."""
    sweep = incidents.write_sweep(seed, n_params_b * 1e9)
    for before, after in zip(sweep.timings, sweep.timings[1:], strict=False):
        if after.write_s > 0.9 * before.write_s:
            return after.writers
    return None


CADENCE_9 = exercise(
    "cadence-9",
    level=2,
    kind="diagnose",
    inputs={"seed": 1, "n_params_b": 405, "writers": 1024, "writers_next": 2048},
    answers={
        "bound": BOUND,
        "writers_full": Real(
            "ranks", "writers whose bandwidths add up to the storage's", 0.05
        ),
        "c_next_s": Real("s", "the write time C with 2,048 writers", 0.03),
    },
    key=_cadence_9,
    mistakes=(
        Mistake(
            "c_next_s",
            "C halved by twice the writers",
            "look at what doubling the writers did in the last rows of the sweep.",
            lambda seed, n_params_b, writers, **_: (
                next(
                    t.write_s
                    for t in incidents.write_sweep(seed, n_params_b * 1e9).timings
                    if t.writers == writers
                )
                / 2
            ),
        ),
        Mistake(
            "writers_full",
            "the first count where the table goes flat",
            "the table only tries powers of two; divide the storage's bandwidth "
            "by one writer's, both read off the sweep.",
            _first_flat,
        ),
    ),
)

EXERCISES = register(
    CADENCE_1,
    CADENCE_2,
    CADENCE_3,
    CADENCE_4,
    CADENCE_5,
    CADENCE_6,
    CADENCE_7,
    CADENCE_8,
    CADENCE_9,
)
