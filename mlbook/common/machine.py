"""What kind of machine a measurement came from, as a short label a page can
glue: verdicts on measured ratios, so that a page states what it found with
one sentence that is true for every label. Torch-free."""

from __future__ import annotations

import math

from mlbook.common import validate

# How much faster a device runs bf16 matmuls than fp32 ones, in four kinds, by the
# ratio of their measured MAMF ceilings. Seen on 2-core CPUs: an AVX2 CPU emulates
# bf16 (about 0.01 x fp32); AVX-512-BF16 CPUs ran it 2.2 x (Zen 4) to 4.5 x (Zen 5)
# fp32; an Intel CPU with AMX tiles 8 x; a GPU's tensor cores run bf16 many times
# its fp32 vector units. The labels name the measurement, not the hardware.
# The ladder adds a bf16 rung from a ratio of 1.
MATMUL_KINDS = (
    (0.5, "bf16 emulated"),  # far slower than fp32: no bf16 unit
    (1.0, "bf16 slower than fp32"),
    (4.0, "bf16 faster than fp32"),
    (math.inf, "bf16 much faster than fp32"),
)


def matmul_kind(bf16_over_fp32: float) -> str:
    """The kind of machine a bf16 / fp32 matmul-ceiling ratio describes: the
    label of the first MATMUL_KINDS bound the ratio is below."""
    validate.positive("bf16_over_fp32", bf16_over_fp32)
    return next(label for bound, label in MATMUL_KINDS if bf16_over_fp32 < bound)
