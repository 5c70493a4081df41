"""Chapter: checkpoint cadence and resumable training state.

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import cadence`` and call
``cadence.young_interval(...)``; importing the package loads neither torch,
numpy nor matplotlib (tests/test_layering.py), and the HTML book imports it in
the browser.
"""

from mlbook.cadence.formulas import (
    ASSUMED_STORAGE_BYTES_PER_S,
    ASYNC_SAVE_7B_ASYNC_S,
    ASYNC_SAVE_7B_SYNC_S,
    CHECKPOINT_ITEMS,
    LLAMA3_STORAGE_PEAK_BYTES_PER_S,
    LLAMA3_STORAGE_SUSTAINED_BYTES_PER_S,
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
from mlbook.cadence.incidents import (
    FAILURE_LOG_MTBF_H,
    SATURATION_EXPONENTS,
    SWEEP_WRITERS,
    WRITE_JITTER,
    WRITER_BYTES_PER_S,
    Failure,
    FailureLog,
    WriteSweep,
    WriteTiming,
    failure_log,
    write_sweep,
)

__all__ = [
    "ASSUMED_STORAGE_BYTES_PER_S",
    "ASYNC_SAVE_7B_ASYNC_S",
    "ASYNC_SAVE_7B_SYNC_S",
    "LLAMA3_STORAGE_PEAK_BYTES_PER_S",
    "LLAMA3_STORAGE_SUSTAINED_BYTES_PER_S",
    "CHECKPOINT_ITEMS",
    "FAILURE_LOG_MTBF_H",
    "Failure",
    "FailureLog",
    "MTTF_1024_GPUS_S",
    "MTTF_16384_GPUS_PROJECTED_S",
    "SATURATION_EXPONENTS",
    "SWEEP_WRITERS",
    "WRITER_BYTES_PER_S",
    "WRITE_JITTER",
    "WriteSweep",
    "WriteTiming",
    "checkpoint_bytes",
    "cluster_mtbf",
    "daly_interval",
    "failure_log",
    "monte_carlo_stderr",
    "optimal_interval",
    "simulate_waste",
    "waste_fraction",
    "write_sweep",
    "write_time_s",
    "young_interval",
]
