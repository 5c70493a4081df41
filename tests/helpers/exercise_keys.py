"""Shared by the exercise tests: every chapter's independent keys.

Each chapter has its own tests/test_keys_<chapter>.py with

- ``INDEPENDENT``: exercise id -> {answer: value worked out by hand in the
  test, or read from a cited source}, for every exercise with a key;
- ``MEASURED`` (only where an exercise is checked against the reader's own
  measurement): exercise id -> a function returning made-up measured inputs
  whose answers the test works out by hand.

tests/test_exercises.py collects them and fails when a checked exercise has
no independent value, so a new exercise cannot skip this step.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

from mlbook.exercises import EXERCISES, Choice, Integer, check

TESTS = Path(__file__).resolve().parent.parent


def key_modules():
    """The test_keys_<chapter> modules."""
    return [
        importlib.import_module(p.stem) for p in sorted(TESTS.glob("test_keys_*.py"))
    ]


def independent_values() -> dict:
    out = {}
    for m in key_modules():
        for ex_id, values in getattr(m, "INDEPENDENT", {}).items():
            assert ex_id not in out, f"{ex_id} has independent values in two files"
            out[ex_id] = values
    return out


def measured_inputs() -> dict:
    out = {}
    for m in key_modules():
        out.update(getattr(m, "MEASURED", {}))
    return out


def measured_for(ex_id: str) -> dict:
    """Made-up measured inputs for a measured exercise ({} for the others)."""
    record = EXERCISES[ex_id]
    if not record.measured:
        return {}
    found = measured_inputs()
    assert ex_id in found, (
        f"{ex_id} is checked against the reader's measurement: give it made-up "
        f"measured inputs in tests/test_keys_{record.chapter}.py's MEASURED"
    )
    return found[ex_id]()


def assert_matches(independent: dict, rel: float = 1e-6) -> None:
    """Each exercise's key equals the independent values (reals to ``rel``,
    integers and choices exactly), and ``check`` accepts them."""
    for ex_id, values in independent.items():
        record = EXERCISES[ex_id]
        measured = measured_for(ex_id)
        key = record.key_values(**measured)
        assert set(values) == set(record.fields), (
            f"{ex_id}: independent values for {sorted(values)}, answers "
            f"{sorted(record.fields)}"
        )
        for name, expected in values.items():
            f, got = record.fields[name], key[name]
            if isinstance(f, Choice):
                assert sorted(got) == sorted(expected), (ex_id, name, got, expected)
            elif isinstance(f, Integer):
                assert got == expected, (ex_id, name, got, expected)
            else:
                assert math.isclose(got, expected, rel_tol=rel), (
                    ex_id,
                    name,
                    got,
                    expected,
                )
        assert check(ex_id, **measured, **values).correct, ex_id
