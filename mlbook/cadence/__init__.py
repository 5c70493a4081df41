"""Chapter: checkpoint cadence and resumable training state.

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import cadence`` and call
``cadence.young_interval(...)``; importing the package loads neither torch,
numpy nor matplotlib (tests/test_layering.py), and the HTML book imports it in
the browser.
"""

from mlbook.cadence.formulas import (
    ASSUMED_STORAGE_BYTES_PER_S,
    CHECKPOINT_ITEMS,
    MTTF_1024_GPUS_S,
    MTTF_16384_GPUS_PROJECTED_S,
    checkpoint_bytes,
    cluster_mtbf,
    daly_interval,
    monte_carlo_stderr,
    optimal_interval,
    simulate_waste,
    waste_fraction,
    write_time_s,
    young_interval,
)

__all__ = [
    "ASSUMED_STORAGE_BYTES_PER_S",
    "CHECKPOINT_ITEMS",
    "MTTF_1024_GPUS_S",
    "MTTF_16384_GPUS_PROJECTED_S",
    "checkpoint_bytes",
    "cluster_mtbf",
    "daly_interval",
    "monte_carlo_stderr",
    "optimal_interval",
    "simulate_waste",
    "waste_fraction",
    "write_time_s",
    "young_interval",
]
