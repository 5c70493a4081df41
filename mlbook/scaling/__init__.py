"""Scaling out: communication, sharding and the pipeline bubble.

The calculators load without torch, numpy or matplotlib (tests/test_layering.py),
in the reader's browser too::

    from mlbook import scaling
    scaling.ring_allreduce_s(1e9, 8, 50e9, 5e-6)

``formulas`` (ring collectives, ZeRO state and traffic, the bubble, tensor-
parallel traffic, the alpha-beta fit, published all-reduce bandwidths),
``ring`` (the ring all-reduce step by step), ``pipeline`` (schedule
timelines) and ``artifacts`` (seeded all-reduce sweeps to diagnose) are
plain Python, and their public names are this package's; ``experiments``
runs the gloo measurements in forked process groups (``dist_script`` is what
each rank runs); ``figures`` draws; ``exercises`` is the chapter's problem set
(mlbook.exercises registers it).
"""

from mlbook.scaling.artifacts import (
    CAUSES,
    SweepLog,
    SweepRow,
    allreduce_log,
    bucket_allreduce_s,
)
from mlbook.scaling.formulas import (
    BEKMAN_H200_SWEEP,
    PUBLISHED_BUS_BANDWIDTH,
    ZERO_STAGE_NAMES,
    ZERO_STAGES,
    AlphaBeta,
    LinkRow,
    PublishedBusBandwidth,
    PublishedSweep,
    ZeroState,
    all_gather_s,
    bubble_fraction,
    bus_bytes_per_s,
    crossover_bytes,
    fit_alpha_beta,
    fsdp_gathered_bytes,
    micro_batches_for_bubble,
    published_link_rows,
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
from mlbook.scaling.ring import (
    PHASES,
    RingStep,
    Send,
    bytes_sent_per_rank,
    ring_allreduce_steps,
    start_state,
)

__all__ = [
    "BEKMAN_H200_SWEEP",
    "CAUSES",
    "PHASES",
    "PublishedBusBandwidth",
    "PublishedSweep",
    "RingStep",
    "Send",
    "SweepRow",
    "PUBLISHED_BUS_BANDWIDTH",
    "SCHEDULES",
    "ZERO_STAGES",
    "ZERO_STAGE_NAMES",
    "AlphaBeta",
    "LinkRow",
    "Op",
    "SweepLog",
    "Timeline",
    "ZeroState",
    "all_gather_s",
    "allreduce_log",
    "bubble_fraction",
    "bucket_allreduce_s",
    "bus_bytes_per_s",
    "bytes_sent_per_rank",
    "crossover_bytes",
    "device_order",
    "fit_alpha_beta",
    "fsdp_gathered_bytes",
    "micro_batches_for_bubble",
    "published_link_rows",
    "reduce_scatter_s",
    "ring_allreduce_bytes_per_rank",
    "ring_allreduce_s",
    "ring_allreduce_steps",
    "simulate",
    "start_state",
    "tp_bytes_per_layer",
    "tp_comm_s_per_layer",
    "zero_comm_bytes",
    "zero_state",
    "zero_state_bytes",
]
