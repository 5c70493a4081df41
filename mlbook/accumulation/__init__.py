"""Chapter: gradient accumulation.

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import accumulation`` and call
``accumulation.largest_unscaled_k(...)``; importing the package loads neither
torch, numpy nor matplotlib (tests/test_layering.py), and the HTML book imports
it in the browser.
"""

from mlbook.accumulation.formulas import (
    KSweep,
    StepCostModel,
    SweepRow,
    check_k,
    divisors,
    fit_cost_model,
    fit_line,
    largest_unscaled_k,
    loss_scale_log2,
    naive_token_losses,
    token_normalised_losses,
)
from mlbook.accumulation.incidents import (
    NORMALISATIONS,
    STEP_JITTER,
    MicroBatch,
    MicroBatchLog,
    SweepIncident,
    k_sweep_log,
    micro_batch_log,
)

__all__ = [
    "KSweep",
    "MicroBatch",
    "MicroBatchLog",
    "NORMALISATIONS",
    "STEP_JITTER",
    "StepCostModel",
    "SweepIncident",
    "SweepRow",
    "check_k",
    "divisors",
    "fit_cost_model",
    "fit_line",
    "k_sweep_log",
    "largest_unscaled_k",
    "loss_scale_log2",
    "micro_batch_log",
    "naive_token_losses",
    "token_normalised_losses",
]
