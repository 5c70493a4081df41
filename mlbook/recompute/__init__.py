"""Chapter: activation recompute.

The torch-free calculators (``formulas``) are named here too, so a page or a
reader can write ``from mlbook import recompute`` and call
``recompute.layer_bytes(...)``; importing the package loads neither torch,
numpy nor matplotlib (tests/test_layering.py), and the HTML book imports it in
the browser.
"""

from mlbook.recompute.formulas import (
    MLP_KINDS,
    RECOMPUTE_MODES,
    REPORTED_SOURCE,
    REPORTED_THROUGHPUT_GAIN,
    REPORTED_TIME_OVERHEAD,
    SCORE_ITEMS,
    STRATEGIES,
    Coefficients,
    LayerBytes,
    Plan,
    activation_bytes_per_layer,
    attention_core_fraction,
    best_segments,
    block_saved_items,
    checkpoint_plans,
    every_layer_ratio,
    kept_items,
    layer_bytes,
    layer_forward_flops,
    optimal_segments,
    saved_coefficients,
    segments_memory_bytes,
    selective_extra_flops_fraction,
    selective_sqrt_crossover_seq_len,
    seq_len_for_selective_overhead,
    sqrt_segments,
)

__all__ = [
    "MLP_KINDS",
    "RECOMPUTE_MODES",
    "REPORTED_SOURCE",
    "REPORTED_THROUGHPUT_GAIN",
    "REPORTED_TIME_OVERHEAD",
    "SCORE_ITEMS",
    "STRATEGIES",
    "Coefficients",
    "LayerBytes",
    "Plan",
    "activation_bytes_per_layer",
    "attention_core_fraction",
    "best_segments",
    "block_saved_items",
    "checkpoint_plans",
    "every_layer_ratio",
    "kept_items",
    "layer_bytes",
    "layer_forward_flops",
    "optimal_segments",
    "saved_coefficients",
    "segments_memory_bytes",
    "selective_extra_flops_fraction",
    "selective_sqrt_crossover_seq_len",
    "seq_len_for_selective_overhead",
    "sqrt_segments",
]
