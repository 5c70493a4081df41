"""Exercises of the capstone chapter (notebooks/capstone.md)."""

from __future__ import annotations

from mlbook.capstone import formulas
from mlbook.exercises._core import Choice, exercise, register

# Each defect of the slow loop, named by the fix that removes it.
DEFECTS = {
    "pretokenise": "text tokenised inside the loop",
    "log_every_n": "a host sync and a print every micro-step",
    "sdpa": "written-out (unfused) attention",
    "pad_vocab": "a vocabulary not padded to a multiple of 64",
    "fused_adamw": "AdamW's for-loop over parameters",
    "no_recompute": "full activation recompute",
    "bigger_micro_batch": "micro-batches of one sequence",
}
_LADDER = {f.name: f for f in formulas.ladder_fixes(bf16_fast=False, compile_on=False)}
assert set(DEFECTS) == set(_LADDER), "one label per defect of the fp32 ladder"

CAPSTONE_1 = exercise(
    "capstone-1",
    level=2,
    kind="measure",
    inputs={"defects_back": 2},
    answers={
        "defects": Choice(
            "the two defects back in (each named by the fix that removes it)",
            options=DEFECTS,
            hints={
                name: (
                    f"{label}: that defect would show in the {fix.bucket} "
                    "bucket; compare that row with the fixed fp32 rung's."
                )
                for name, label in DEFECTS.items()
                for fix in (_LADDER[name],)
            },
        )
    },
    key=lambda defects_back: {"defects": formulas.MYSTERY_DEFECTS},
)

EXERCISES = register(CAPSTONE_1)
