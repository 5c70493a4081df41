"""Scaling out: communication, sharding and the pipeline bubble.

The calculators load without torch, numpy or matplotlib (tests/test_layering.py),
in the reader's browser too::

    from mlbook import scaling
    scaling.ring_allreduce_s(1e9, 8, 50e9, 5e-6)

``formulas`` (ring collectives, ZeRO state and traffic, the bubble, tensor-
parallel traffic, the alpha-beta fit) and ``pipeline`` (schedule timelines)
are plain Python, and their public names are this package's; ``experiments``
runs the gloo measurements in forked process groups (``dist_script`` is what
each rank runs); ``figures`` draws; ``exercises`` is the chapter's problem set
(mlbook.exercises registers it).
"""

from mlbook.scaling.formulas import (
    ZERO_STAGE_NAMES,
    ZERO_STAGES,
    AlphaBeta,
    ZeroState,
    all_gather_s,
    bubble_fraction,
    fit_alpha_beta,
    micro_batches_for_bubble,
    reduce_scatter_s,
    ring_allreduce_bytes_per_rank,
    ring_allreduce_s,
    tp_bytes_per_layer,
    tp_comm_s_per_layer,
    zero_comm_bytes,
    zero_state,
    zero_state_bytes,
)
from mlbook.scaling.pipeline import (
    SCHEDULES,
    Op,
    Timeline,
    device_order,
    simulate,
)

__all__ = [
    "SCHEDULES",
    "ZERO_STAGES",
    "ZERO_STAGE_NAMES",
    "AlphaBeta",
    "Op",
    "Timeline",
    "ZeroState",
    "all_gather_s",
    "bubble_fraction",
    "device_order",
    "fit_alpha_beta",
    "micro_batches_for_bubble",
    "reduce_scatter_s",
    "ring_allreduce_bytes_per_rank",
    "ring_allreduce_s",
    "simulate",
    "tp_bytes_per_layer",
    "tp_comm_s_per_layer",
    "zero_comm_bytes",
    "zero_state",
    "zero_state_bytes",
]
