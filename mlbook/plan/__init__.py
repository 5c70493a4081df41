"""Plan a run: the chapters' calculators composed into one budget (no torch)."""

from mlbook.plan.planner import Memory, Plan, RunSpec, as_dict, memory_per_gpu, plan  # noqa: F401
