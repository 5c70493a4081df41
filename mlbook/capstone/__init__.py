"""Finding lost MFU: one training step's timeline accounted for, and a ladder
of fixes that wins the time back one measured rung at a time.

- ``formulas``: torch-free: the accounting of a step window into buckets and
  idle gaps, the GEMM shapes a model runs, the ladder's sizes and fixes, the
  rates of a rung, and the MFU-loss waterfall.
- ``experiments``: torch: the ladder with the MAMF ceiling re-probed between
  rungs; ``experiments_profile``: the profiler's account of a step and the
  timing of a rung; ``experiments_comm``: the two-process gloo run for
  exposed communication and stragglers. The deliberately slow loop with each
  defect switchable is ``mlbook.common_torch.reference_loop`` (its sizes and
  fixes, and which bucket an operator's time belongs to,
  ``mlbook.common.reference_loop``), which ``mlbook.calibrate`` runs too.
- the step model (``mlbook.common.stepmodel``, which ``mlbook.calibrate``
  predicts with too; ``stepmodel`` here names it): torch-free: a step
  predicted before it runs, bucket by bucket, from its operators (each at the
  longer of its FLOPs at the rate its shape runs and its bytes at the
  bandwidth, plus a fixed cost) and a machine's calibration;
  ``experiments_stepmodel`` counts a rung's operators and calibrates the
  machine.
- ``cases``: torch-free: seeded generators of the diagnosis exercises'
  artifacts (a profile with a planted defect, a run's HFU and MFU).
- ``figures``: matplotlib: the stacked bars, one step's timeline, a schematic
  step with its all-reduce overlapped or not, the per-rank times.
- ``exercises``: the chapter's problem set (mlbook.exercises registers it).

The torch-free calculators (``formulas``, the step model, ``cases``) are
named here too, so a page or a reader can write ``from mlbook import capstone`` and call
``capstone.step_bound(...)``; importing the package loads neither torch, numpy
nor matplotlib (tests/test_layering.py), and the HTML book imports it in the
browser.
"""

from mlbook.capstone.cases import (
    HEALTHY_SHARES,
    JITTER,
    PLANTABLE,
    RECOMPUTE_SETTINGS,
    PlantedProfile,
    RecomputeReport,
    hardware_flops_per_token,
    planted_profile,
    recompute_report,
)
from mlbook.capstone.formulas import (
    BUCKET_LABELS,
    BUCKETS,
    FIX_NAMES,
    FIXES,
    MYSTERY_DEFECTS,
    PUBLISHED_FIX,
    PUBLISHED_MAMF,
    RASCHKA_LADDER,
    SAVING_VERDICTS,
    SCOPE_BUCKETS,
    SCOPE_PREFIX,
    SCOPES,
    Bar,
    CeilingReach,
    Fix,
    FixEffect,
    LadderSizes,
    PublishedMamf,
    PublishedRung,
    RungRates,
    Span,
    StepBound,
    StepPhases,
    account,
    bucket_of,
    ceiling_reach,
    exposed_allreduce_s,
    exposed_fraction,
    fix_effects,
    fix_savings,
    gemm_shapes,
    idle_s,
    ladder_fixes,
    ladder_sizes,
    mfu_after_fix,
    padded_vocab,
    published_speedups,
    residual_fraction,
    rung_rates,
    saving_verdict,
    step_bound,
    step_schedule,
    waterfall,
    within_ceiling,
)
from mlbook.common.stepmodel import (
    BucketComparison,
    BucketPrediction,
    MachineModel,
    Operator,
    StepPrediction,
    compare,
    largest_excess,
    machine_model_from_json,
    operator_time_s,
    operators_from_json,
    operators_of,
    operators_to_json,
    predict_step,
    step_ratio,
)

__all__ = [
    "BucketComparison",
    "BucketPrediction",
    "MachineModel",
    "Operator",
    "StepPrediction",
    "compare",
    "largest_excess",
    "machine_model_from_json",
    "operator_time_s",
    "operators_from_json",
    "operators_of",
    "operators_to_json",
    "predict_step",
    "step_ratio",
    "BUCKETS",
    "HEALTHY_SHARES",
    "JITTER",
    "PLANTABLE",
    "RECOMPUTE_SETTINGS",
    "BUCKET_LABELS",
    "FIXES",
    "FIX_NAMES",
    "MYSTERY_DEFECTS",
    "PUBLISHED_FIX",
    "PUBLISHED_MAMF",
    "RASCHKA_LADDER",
    "SAVING_VERDICTS",
    "SCOPES",
    "SCOPE_BUCKETS",
    "SCOPE_PREFIX",
    "Bar",
    "CeilingReach",
    "Fix",
    "FixEffect",
    "LadderSizes",
    "PlantedProfile",
    "PublishedMamf",
    "PublishedRung",
    "RecomputeReport",
    "RungRates",
    "Span",
    "StepBound",
    "StepPhases",
    "account",
    "bucket_of",
    "ceiling_reach",
    "exposed_allreduce_s",
    "exposed_fraction",
    "fix_effects",
    "fix_savings",
    "gemm_shapes",
    "hardware_flops_per_token",
    "idle_s",
    "ladder_fixes",
    "ladder_sizes",
    "mfu_after_fix",
    "padded_vocab",
    "planted_profile",
    "published_speedups",
    "recompute_report",
    "residual_fraction",
    "rung_rates",
    "saving_verdict",
    "step_bound",
    "step_schedule",
    "waterfall",
    "within_ceiling",
]
