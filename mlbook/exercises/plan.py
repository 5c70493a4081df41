"""Exercises of the planning page (book/plan.md): none yet."""

from __future__ import annotations

from mlbook.exercises._core import register

EXERCISES = register()
