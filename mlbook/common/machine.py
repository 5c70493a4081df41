"""What kind of machine a measurement came from, as a short label a page can
glue: verdicts on measured ratios, so that a page states what it found with
one sentence that is true for every label. Torch-free."""

from __future__ import annotations

import math

from mlbook.common import validate

# How much faster a device runs bf16 matmuls than fp32 ones, in four kinds, by the
# ratio of their measured MAMF ceilings. A measured ratio is the units' ratio times
# what the libraries make of it. The units: an AVX2 CPU has no bf16 unit and
# converts (measured about 0.01 x fp32); an AVX-512-BF16 unit's VDPBF16PS does 4
# FLOPs per fp32 lane a cycle against an FMA's 2, a ratio of 2 (Zen 4 measured
# 2.2 x); an AMX tile unit 16 x the FMA units' FLOPs a cycle (an Intel CPU with AMX
# measured 8 x); a GPU's tensor cores many times its fp32 vector units. The
# libraries: on a Zen 5, whose units give 2, bf16 measured 4.5 x because the fp32
# path ran at the AVX2 rate (its fp32 ceiling is the same with AVX-512 capped off,
# 111.8 against 109.9 GFLOP/s). The labels name the measurement, not the hardware.
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
