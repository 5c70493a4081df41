"""Your machine, measured: one calibration that every chapter's prediction is
held against.

- ``formulas``: torch-free: the machine file (read, checked, written whole),
  the kept calibrations under book/measured/, every chapter's prediction
  against a file's measurements, and what a file gives the planner;
- ``experiments``: torch: the measurements themselves;
- ``resources``: the free memory, and the peak resident memory of a run;
- ``figures``: matplotlib: the "Your machine" page's figures;
- ``cli``: ``python -m mlbook calibrate``.

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import calibrate`` and call
``calibrate.kept()`` or ``calibrate.predictions(machine)``; importing the
package loads neither torch, numpy nor matplotlib (tests/test_layering.py).
"""

from mlbook.calibrate.formulas import (
    CHECKS,
    FLUSH_MAX_BYTES,
    KEPT_DIR,
    MAMF_DTYPES,
    TRIAD_MAX_BYTES,
    Comparison,
    Machine,
    MachineFileError,
    Measurement,
    PlanInputs,
    bounded_bytes,
    check_mfu,
    display,
    kept,
    label,
    load,
    plan_inputs,
    predictions,
    reference_mfu,
    step_lower_bound_s,
    step_of_mamf,
)

__all__ = [
    "CHECKS",
    "FLUSH_MAX_BYTES",
    "KEPT_DIR",
    "MAMF_DTYPES",
    "TRIAD_MAX_BYTES",
    "Comparison",
    "Machine",
    "MachineFileError",
    "Measurement",
    "PlanInputs",
    "bounded_bytes",
    "check_mfu",
    "display",
    "kept",
    "label",
    "load",
    "plan_inputs",
    "predictions",
    "reference_mfu",
    "step_lower_bound_s",
    "step_of_mamf",
]
