"""The roofline: whether an operator waits on its arithmetic or on memory.

An operator that does F FLOPs and moves B bytes can take no less than F over
the peak FLOP/s, and no less than B over the memory bandwidth. Its
**arithmetic intensity** I = F / B (FLOPs a byte) says which bound bites: the
attainable rate is min(peak, I x bandwidth), and the two meet at the **ridge
point** I* = peak / bandwidth. Below I* an operator is memory-bound, above it
compute-bound (Williams, Waterman and Patterson, 2009).

The bytes are the operands' sizes in the dtype, each read or written once:
what a kernel must move at the least if nothing is in cache already.

Torch-free: these run in the reader's browser.
"""

from __future__ import annotations

import math

from mlbook.common import validate

# AdamW's update of one parameter, as torch's for-loop AdamW writes it, in
# FLOPs (a sqrt or a division counted as one): weight decay p *= 1 - lr wd (1);
# m = lerp(m, g, 1 - b1) (3); v = b2 v + (1 - b2) g^2 (4); the denominator
# sqrt(v) / sqrt(1 - b2^t) + eps (3); p -= step m / denominator (3).
ADAMW_FLOPS_PER_PARAM = 14
# The values it moves: p, g, m and v read, p, m and v written.
ADAMW_VALUES_PER_PARAM = 7


def _bytes_per_value(bytes_per_value) -> float:
    return validate.positive("bytes_per_value", bytes_per_value)


def matmul_flops(m: int, n: int, k: int) -> int:
    """2 m n k: an (m x k) @ (k x n) product, a multiply and an add per term."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        validate.positive_int(name, v)
    return 2 * m * n * k


def matmul_bytes(m: int, n: int, k: int, bytes_per_value: float) -> float:
    """The three operands, A (m x k) and B (k x n) read and C (m x n)
    written, at ``bytes_per_value`` each (4 for fp32, 2 for bf16)."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        validate.positive_int(name, v)
    return _bytes_per_value(bytes_per_value) * (m * k + k * n + m * n)


def matmul_intensity(m: int, n: int, k: int, bytes_per_value: float) -> float:
    """FLOPs a byte of an (m x k) @ (k x n) matmul: 2mnk / (e (mk + kn + mn)).
    Its smallest dimension sets it: for m much smaller than n and k it is
    about 2m / e, whatever the other two."""
    return matmul_flops(m, n, k) / matmul_bytes(m, n, k, bytes_per_value)


def elementwise_intensity(
    flops_per_element: float, operands: int, bytes_per_value: float
) -> float:
    """FLOPs a byte of an elementwise operator that does ``flops_per_element``
    on each element and reads or writes ``operands`` tensors of the same
    size: an add (1 FLOP; two inputs, one output) in fp32 is 1 / 12."""
    validate.positive("flops_per_element", flops_per_element)
    validate.positive_int("operands", operands)
    return flops_per_element / (operands * _bytes_per_value(bytes_per_value))


def adamw_intensity(bytes_per_value: float = 4) -> float:
    """FLOPs a byte of AdamW's update: ADAMW_FLOPS_PER_PARAM over
    ADAMW_VALUES_PER_PARAM values of ``bytes_per_value``, 0.5 in fp32."""
    return ADAMW_FLOPS_PER_PARAM / (
        ADAMW_VALUES_PER_PARAM * _bytes_per_value(bytes_per_value)
    )


def ridge_point(peak_flops_per_s: float, bytes_per_s: float) -> float:
    """FLOPs a byte where the two bounds meet: peak / bandwidth. An operator
    of lower intensity cannot reach the peak, only intensity x bandwidth."""
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive("bytes_per_s", bytes_per_s)
    return peak_flops_per_s / bytes_per_s


def attainable_flops_per_s(
    intensity: float, peak_flops_per_s: float, bytes_per_s: float
) -> float:
    """The roofline: min(peak, intensity x bandwidth)."""
    validate.positive("intensity", intensity)
    ridge_point(peak_flops_per_s, bytes_per_s)  # checks both
    return min(peak_flops_per_s, intensity * bytes_per_s)


def roofline_time_s(
    flops: float, n_bytes: float, peak_flops_per_s: float, bytes_per_s: float
) -> float:
    """The least time an operator can take: max(FLOPs / peak, bytes /
    bandwidth); 0 for one that does and moves nothing."""
    validate.non_negative("flops", flops)
    validate.non_negative("n_bytes", n_bytes)
    ridge_point(peak_flops_per_s, bytes_per_s)
    return max(flops / peak_flops_per_s, n_bytes / bytes_per_s)


def tokens_to_ridge(
    d_in: int, d_out: int, ridge: float, bytes_per_value: float
) -> float:
    """The fewest tokens T for which a weight matmul (T x d_in) @ (d_in x
    d_out) reaches the ridge point: the smallest T with
    2 T d_in d_out >= ridge e (T d_in + d_in d_out + T d_out), that is
    T >= ridge e d_in d_out / (2 d_in d_out - ridge e (d_in + d_out)).
    No number of tokens reaches it when the weight itself is too small
    (its intensity tends to 2 d_in d_out / (e (d_in + d_out)) as T grows):
    then inf."""
    validate.positive_int("d_in", d_in)
    validate.positive_int("d_out", d_out)
    validate.positive("ridge", ridge)
    e = _bytes_per_value(bytes_per_value)
    spare = 2 * d_in * d_out - ridge * e * (d_in + d_out)
    if spare <= 0:
        return math.inf
    return float(max(1, math.ceil(ridge * e * d_in * d_out / spare - 1e-9)))
