"""Chapter: MFU and the FLOPs of a training step.

The torch-free calculators (``flops`` and ``formulas``) and the generators of
artifacts to diagnose (``diagnose``) are named here too, so
a page or a reader can write ``from mlbook import mfu`` and call
``mfu.mfu(...)``; importing the package loads neither torch, numpy nor
matplotlib (tests/test_layering.py), and the HTML book imports it in the
browser.
"""

from mlbook.mfu.diagnose import (
    BUCKETS,
    CAUSES,
    DASHBOARD_MODELS,
    MATMUL_BUCKETS,
    Bucket,
    Dashboard,
    LoggedRun,
    StepProfile,
    bucket_flops,
    logged_mfu,
    mfu_dashboard,
    step_profile,
)
from mlbook.mfu.flops import (
    MODES,
    attention_flops_per_token,
    attention_params_per_layer,
    attention_share,
    flops_per_token,
    matmul_params,
    mlp_params_per_layer,
    n_params,
    six_nd,
)
from mlbook.mfu.formulas import (
    PUBLISHED_MFU,
    ROUNDING,
    ImpossibleUtilisation,
    PublishedRun,
    hfu,
    max_tokens_per_s,
    mfu,
    mfu_from_six_nd,
    nanogpt_estimate_mfu,
    training_days,
)

__all__ = [
    "BUCKETS",
    "CAUSES",
    "DASHBOARD_MODELS",
    "MATMUL_BUCKETS",
    "MODES",
    "PUBLISHED_MFU",
    "ROUNDING",
    "Bucket",
    "Dashboard",
    "ImpossibleUtilisation",
    "LoggedRun",
    "PublishedRun",
    "StepProfile",
    "attention_flops_per_token",
    "attention_params_per_layer",
    "attention_share",
    "bucket_flops",
    "flops_per_token",
    "hfu",
    "logged_mfu",
    "matmul_params",
    "max_tokens_per_s",
    "mfu",
    "mfu_dashboard",
    "mfu_from_six_nd",
    "mlp_params_per_layer",
    "n_params",
    "nanogpt_estimate_mfu",
    "six_nd",
    "step_profile",
    "training_days",
]
