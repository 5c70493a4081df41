"""Scaling out: communication, sharding and the pipeline bubble.

The calculators load without torch::

    from mlbook.scaling import (
        ring_allreduce_s, zero_state_bytes, zero_comm_bytes, bubble_fraction
    )

``formulas`` (ring collectives, ZeRO state and traffic, the bubble, tensor-
parallel traffic, the alpha-beta fit) and ``pipeline`` (schedule timelines)
are plain Python; ``experiments`` runs the gloo measurements in forked
process groups (``dist_script`` is what each rank runs); ``figures`` draws.
"""

from mlbook.scaling.formulas import (  # noqa: F401
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
from mlbook.scaling.pipeline import SCHEDULES, Timeline, device_order, simulate  # noqa: F401
