"""Finding lost MFU: one training step's timeline accounted for, and a ladder
of fixes that wins the time back one measured rung at a time.

- ``formulas``: torch-free: which bucket an operator's time belongs to, the
  accounting of a step window into buckets and idle gaps, the GEMM shapes a
  model runs, the ladder's sizes and fixes, the rates of a rung, and the
  MFU-loss waterfall.
- ``experiments``: torch: the deliberately slow loop with each defect
  switchable, the profiler accounting, the ladder with the MAMF ceiling
  re-probed between rungs, and the two-process gloo run for exposed
  communication and stragglers.
- ``figures``: matplotlib: the stacked bars, one step's timeline, the
  waterfall slider, the per-rank times.
- ``exercises``: the chapter's problem set (mlbook.exercises registers it).

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import capstone`` and call
``capstone.step_bound(...)``; importing the package loads neither torch, numpy
nor matplotlib (tests/test_layering.py), and the HTML book imports it in the
browser.
"""

from mlbook.capstone.formulas import (
    BUCKET_LABELS,
    BUCKETS,
    FIX_NAMES,
    FIXES,
    MYSTERY_DEFECTS,
    PUBLISHED_MAMF,
    RASCHKA_LADDER,
    SCOPE_BUCKETS,
    SCOPE_PREFIX,
    SCOPES,
    Bar,
    Fix,
    FixEffect,
    LadderSizes,
    PublishedMamf,
    PublishedRung,
    RungRates,
    StepBound,
    account,
    bucket_of,
    exposed_fraction,
    fix_effects,
    fix_savings,
    gemm_shapes,
    idle_s,
    ladder_fixes,
    ladder_sizes,
    mfu_after_fix,
    padded_vocab,
    residual_fraction,
    rung_rates,
    step_bound,
    waterfall,
    within_ceiling,
)

__all__ = [
    "BUCKETS",
    "BUCKET_LABELS",
    "FIXES",
    "FIX_NAMES",
    "MYSTERY_DEFECTS",
    "PUBLISHED_MAMF",
    "RASCHKA_LADDER",
    "SCOPES",
    "SCOPE_BUCKETS",
    "SCOPE_PREFIX",
    "Bar",
    "Fix",
    "FixEffect",
    "LadderSizes",
    "PublishedMamf",
    "PublishedRung",
    "RungRates",
    "StepBound",
    "account",
    "bucket_of",
    "exposed_fraction",
    "fix_effects",
    "fix_savings",
    "gemm_shapes",
    "idle_s",
    "ladder_fixes",
    "ladder_sizes",
    "mfu_after_fix",
    "padded_vocab",
    "residual_fraction",
    "rung_rates",
    "step_bound",
    "waterfall",
    "within_ceiling",
]
