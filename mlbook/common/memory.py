"""Memory budgets of a training step, in bytes.

Model state: mixed-precision training with Adam keeps, per parameter,
bf16 weights (2 bytes) and bf16 gradients (2), an fp32 master copy of the
weights (4) and Adam's two fp32 moments m and v (4 + 4): 16 bytes in all
(ZeRO, Rajbhandari et al. 2020, Sec. 3.1, counts the same 16 with fp16).
Activations come on top and depend on the batch and sequence length.
"""

from __future__ import annotations

from mlbook.common import validate

GIB = 2**30

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
    items = {k: v * n_params for k, v in ADAM_MIXED_STATE_BYTES.items()}
    return items if breakdown else sum(items.values())


# --- activations -----------------------------------------------------------------

RECOMPUTE_MODES = ("none", "selective", "full")


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, recompute: str = "none") -> int:
    """Bytes one transformer layer keeps for its backward pass.

    Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1 and Table 2), whose
    assumptions this keeps: activations are stored in 16 bits (2 bytes a
    value), dropout masks in 1 byte a value, the MLP is 4h wide with a GELU
    between two matmuls, there is no tensor or sequence parallelism, and the
    attention scores are materialised (no FlashAttention). Per layer:

        attention  11 sbh + 5 a s^2 b   (QKV input 2, Q and K 4, V 2, output
                                         projection input 2, its dropout mask 1;
                                         softmax output 2, its dropout mask 1,
                                         the dropped-out probabilities 2)
        MLP        19 sbh               (first matmul input 2, GELU input 8,
                                         second matmul input 8, dropout mask 1)
        two norms   4 sbh               (each keeps its input, 2)
        total      sbh (34 + 5 a s / h)

    recompute="selective" recomputes the attention core (scores, softmax,
    dropout, P V) and drops the 5 a s^2 b term: 34 sbh. recompute="full" keeps
    only the layer's input, 2 sbh, and recomputes the rest.
    """
    s = validate.positive_int("s", s)
    b = validate.positive_int("b", b)
    h = validate.positive_int("h", h)
    a = validate.positive_int("a", a)
    validate.divides("a", a, "h", h)
    validate.one_of("recompute", recompute, RECOMPUTE_MODES)
    if recompute == "full":
        return 2 * s * b * h
    selective = 34 * s * b * h
    if recompute == "selective":
        return selective
    return selective + 5 * a * s * s * b
