"""Exercises of the gradient-accumulation chapter (notebooks/accumulation.md)."""

from __future__ import annotations

from mlbook.exercises._core import exercise, register

# fp16 loss scaling inside accumulation, simulated on this machine: the share
# of gradients that underflow depends on the run, so there is no key.
ACCUMULATION_1 = exercise("accumulation-1", level=2, kind="measure")

EXERCISES = register(ACCUMULATION_1)
