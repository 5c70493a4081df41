"""The exercise judge, below the chapters: record types, the registry,
``check`` and ``answer_key``. It imports no chapter.

A chapter's ``exercises.py`` builds its records with ``exercise(...)``
(answers ``Real``, ``Integer``, ``Choice``; named ``Mistake``s; a ``Code``
check with ``WrongFunction``s) and adds them to the registry with
``register(...)`` as it loads. ``mlbook.exercises``, the catalogue above the
chapters, imports every chapter's module, so its ``EXERCISES`` and ``check``
see them all: readers import from there. docs/exercises.md says how to add
an exercise.

``spec(exercise_id)`` is a record as plain data and ``judge(answer, value)``
the verdict on it; book/_extra/vendor/exercises.js runs the same logic on the
same data in the HTML book.
"""

# ruff: noqa: F401 (every name imported here is in __all__)
from mlbook.judge._check import Result, check, outcome
from mlbook.judge._core import (
    EXERCISES,
    KINDS,
    MESSAGES,
    STARS,
    UNITS,
    Choice,
    Code,
    Exercise,
    Integer,
    Mistake,
    Real,
    Reason,
    UnknownExercise,
    Verdict,
    WrongFunction,
    exercise,
    get,
    judge,
    read_number,
    register,
    spec,
)
from mlbook.judge._page import MIME_TYPE, AnswerKey, answer_key

__all__ = sorted(n for n in dir() if not n.startswith("_"))  # what is imported above
