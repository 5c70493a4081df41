"""Exercises of the failures chapter (notebooks/faults.md)."""

from __future__ import annotations

from mlbook.exercises._core import (
    Code,
    Mistake,
    Real,
    WrongFunction,
    exercise,
    register,
)
from mlbook.faults import formulas


def _faults_1(n_ranks, sigma):
    return {
        "delta_no_noise": formulas.drain_threshold(n_ranks, 0.0),
        "delta": formulas.drain_threshold(n_ranks, sigma),
    }


def _drain_arguments(st):
    """(n_ranks, delta, sigma) away from the break-even: delta is a factor
    of the reference threshold outside [0.7, 1.4], where a Monte Carlo
    estimate of a few thousand steps tells the two sides apart."""
    sigmas = st.sampled_from([0.0, 0.01, 0.02, 0.05, 0.1])
    factors = st.floats(0.0, 0.7) | st.floats(1.4, 4.0)

    def build(args):
        n, sigma, factor = args
        return n, factor * formulas.drain_threshold(n, sigma), sigma

    return st.tuples(st.integers(2, 1024), sigmas, factors).map(build)


def _no_noise_rule(n_ranks, delta, sigma):
    return delta > 1 / (n_ranks - 1)


def _no_resharding(n_ranks, delta, sigma):
    healthy = formulas.expected_step_time(n_ranks - 1, 0.0, sigma)
    return healthy < formulas.expected_step_time(n_ranks, delta, sigma)


FAULTS_1 = exercise(
    "faults-1",
    level=3,
    kind="code",
    inputs={"n_ranks": 1024, "sigma": 0.05},
    answers={
        "delta_no_noise": Real("fraction", "the break-even delta without noise", 0.01),
        "delta": Real("fraction", "the break-even delta with sigma = 5 %", 0.03),
    },
    key=_faults_1,
    mistakes=(
        Mistake(
            "delta",
            "the break-even without noise",
            "with a spread of step times the slow rank hides among the others, "
            "and the barrier waits for the slowest of them anyway.",
            lambda n_ranks, **_: formulas.drain_threshold(n_ranks, 0.0),
        ),
        Mistake(
            "delta_no_noise",
            "the break-even with noise",
            "without noise every healthy rank takes exactly one step time.",
            lambda n_ranks, sigma: formulas.drain_threshold(n_ranks, sigma),
        ),
    ),
    code=Code(
        name="drop_beats_wait",
        params=("n_ranks", "delta", "sigma"),
        reference=formulas.drop_beats_wait,
        cases=(
            (1024, 0.05, 0.05),
            (1024, 0.10, 0.05),
            (1024, 0.002, 0.0),
            (1024, 0.0005, 0.0),
            (64, 0.01, 0.0),
            (64, 0.03, 0.0),
            (8, 0.5, 0.1),
        ),
        arguments=_drain_arguments,
        mistakes=(
            WrongFunction(
                "the no-noise rule delta > 1/(N - 1)",
                "with noise, compare the expected step times: E[max] of the N "
                "ranks with the slow one against N/(N - 1) E[max] of N - 1.",
                _no_noise_rule,
            ),
            WrongFunction(
                "draining without re-sharding",
                "the N - 1 ranks left take over the drained rank's share: each "
                "step's compute grows by N/(N - 1).",
                _no_resharding,
            ),
        ),
        max_examples=30,
    ),
)

EXERCISES = register(FAULTS_1)
