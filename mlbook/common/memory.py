"""Memory budgets of a training step, in bytes.

Model state: mixed-precision training with Adam keeps, per parameter,
bf16 weights (2 bytes) and bf16 gradients (2), an fp32 master copy of the
weights (4) and Adam's two fp32 moments m and v (4 + 4): 16 bytes in all
(ZeRO, Rajbhandari et al. 2020, Sec. 3.1, counts the same 16 with fp16).
Activations come on top and depend on the batch and sequence length
(mlbook.recompute.formulas counts them).
"""

from __future__ import annotations

from mlbook.common import validate

# bytes per parameter of mixed-precision Adam, item by item
ADAM_MIXED_STATE_BYTES = {
    "bf16 weights": 2,
    "bf16 gradients": 2,
    "fp32 master weights": 4,
    "Adam m (fp32)": 4,
    "Adam v (fp32)": 4,
}


def model_state_bytes(n_params: float, breakdown: bool = False):
    """Bytes of weights, gradients and optimizer state for mixed-precision Adam.

    With breakdown=True returns {item: bytes} (summing to the total).
    """
    validate.positive("n_params", n_params)
    validate.boolean("breakdown", breakdown)
    items = {k: v * n_params for k, v in ADAM_MIXED_STATE_BYTES.items()}
    return items if breakdown else sum(items.values())
