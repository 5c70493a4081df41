"""Exercises of the input-pipeline chapter (notebooks/input_pipeline.md)."""

from __future__ import annotations

import math

from mlbook.exercises._core import Integer, Mistake, Real, exercise, register
from mlbook.input_pipeline import formulas


def _input_pipeline_1(compute_ms, load_s):
    compute_s = compute_ms / 1e3
    need = formulas.workers_needed(load_s, compute_s)
    return {
        "workers": need,
        "idle": formulas.device_idle_fraction(load_s, compute_s, need - 1),
    }


def _one_fewer(compute_ms, load_s):
    compute_s = compute_ms / 1e3
    w = formulas.workers_needed(load_s, compute_s) - 1
    return compute_s, formulas.loader_step_s(load_s, compute_s, w)


INPUT_PIPELINE_1 = exercise(
    "input_pipeline-1",
    level=1,
    kind="compute",
    inputs={"compute_ms": 350, "load_s": 1.2},
    answers={
        "workers": Integer("workers", "workers that keep the GPU busy (the fewest)"),
        "idle": Real(
            "fraction", "share of each step the GPU is idle with one fewer", 0.01
        ),
    },
    key=_input_pipeline_1,
    mistakes=(
        Mistake(
            "workers",
            "the ratio rounded down",
            "with that many workers a batch arrives less often than a step "
            "computes, and the GPU waits.",
            lambda compute_ms, load_s: math.floor(load_s / (compute_ms / 1e3)),
        ),
        Mistake(
            "workers",
            "a spare worker",
            "the question asks for the fewest that keep the GPU busy.",
            lambda **i: _input_pipeline_1(**i)["workers"] + 1,
        ),
        Mistake(
            "idle",
            "idle time as a share of the compute time",
            "the share is of the whole step, which now waits for the loader.",
            lambda **i: (lambda c, step: (step - c) / c)(*_one_fewer(**i)),
        ),
        Mistake(
            "idle",
            "the idle share with a single worker",
            "the question asks about one worker fewer than the number that "
            "keeps the GPU busy.",
            lambda compute_ms, load_s: formulas.device_idle_fraction(
                load_s, compute_ms / 1e3, 1
            ),
        ),
        Mistake(
            "idle",
            "the idle seconds instead of a share",
            "give the idle time as a share of the step.",
            lambda **i: (lambda c, step: step - c)(*_one_fewer(**i)),
        ),
    ),
)

EXERCISES = register(INPUT_PIPELINE_1)
