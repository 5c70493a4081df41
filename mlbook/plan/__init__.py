"""Plan a run: the chapters' calculators composed into one budget (no torch).

The torch-free calculators (``planner``) are named here too, so a page or a
reader can write ``from mlbook import plan`` and call
``plan.plan(plan.RunSpec(...))``; importing the package loads neither torch,
numpy nor matplotlib (tests/test_layering.py), and the HTML book imports it in
the browser.
"""

from mlbook.plan.planner import (
    ACTIVATION_COUNTS,
    DEFAULT_RESTART_S,
    DEFAULT_STORAGE_BYTES_PER_S,
    GPU_ALIASES,
    GPUS,
    RECOMPUTE,
    TP_REPLICATED_ITEMS,
    ZERO_STAGES,
    Memory,
    Plan,
    RunSpec,
    as_dict,
    llama3_failures_per_gpu_hour,
    memory_per_gpu,
    plan,
    restart_for_goodput,
    wall_clock_s,
)

__all__ = [
    "ACTIVATION_COUNTS",
    "DEFAULT_RESTART_S",
    "DEFAULT_STORAGE_BYTES_PER_S",
    "GPU_ALIASES",
    "GPUS",
    "RECOMPUTE",
    "TP_REPLICATED_ITEMS",
    "ZERO_STAGES",
    "Memory",
    "Plan",
    "RunSpec",
    "as_dict",
    "llama3_failures_per_gpu_hour",
    "memory_per_gpu",
    "plan",
    "restart_for_goodput",
    "wall_clock_s",
]
