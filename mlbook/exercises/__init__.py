"""Exercises that check the reader: every chapter's problem set, with keys.

``EXERCISES`` maps an id ("mfu-1", "<page stem>-<n>") to its record:
``.chapter`` (the page's file stem), ``.level`` (1 ★ minutes, 2 ★★ an hour,
3 ★★★ an afternoon), ``.kind`` (compute, derive, code, measure, predict),
``.answers`` (answer name -> unit; a fraction's unit is "fraction", a
percentage's "%"), ``.tolerances`` (relative; 0 for an exact answer).

``check("mfu-1", mfu=0.56, mfu_6n=0.49)`` checks answers against the key the
package computes, prints a hint for each wrong one (the direction and rough
size of the error, or the named mistake it matches) and returns a Result
whose ``.correct`` is True only when every answer is right.
``check("faults-1", drop_beats_wait)`` checks a function (change-the-code
exercises) on known cases and on hypothesis-generated ones against the
reference. ``check("mfu-1")`` says what an exercise expects.

One module per chapter holds its records (``mlbook/exercises/mfu.py``...);
docs/exercises.md says how to add one.
"""

from mlbook.exercises import (  # noqa: F401 (each module registers its records)
    accumulation,
    cadence,
    capstone,
    faults,
    input_pipeline,
    mfu,
    plan,
    precision,
    recompute,
    scaling,
)
from mlbook.exercises._check import Result, check
from mlbook.exercises._core import (
    EXERCISES,
    KINDS,
    STARS,
    UNITS,
    Choice,
    Code,
    Exercise,
    Integer,
    Mistake,
    Real,
    UnknownExercise,
    Verdict,
    WrongFunction,
    exercise,
    get,
    judge,
    register,
    spec,
)
from mlbook.exercises._page import MIME_TYPE, AnswerKey, answer_key

__all__ = [
    "EXERCISES",
    "KINDS",
    "MIME_TYPE",
    "STARS",
    "UNITS",
    "AnswerKey",
    "Choice",
    "Code",
    "Exercise",
    "Integer",
    "Mistake",
    "Real",
    "Result",
    "UnknownExercise",
    "Verdict",
    "WrongFunction",
    "answer_key",
    "check",
    "exercise",
    "get",
    "judge",
    "register",
    "spec",
]
