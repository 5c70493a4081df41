"""The roofline's formulas against values worked out by hand here, and the
ridge points of the accelerator table's GPUs against their datasheets."""

from __future__ import annotations

import math

import pytest

from mlbook.common import accelerators
from mlbook.mfu import roofline


def test_a_square_matmul_intensity_by_hand():
    # (4096 x 4096) @ (4096 x 4096) in bf16: 2 * 4096^3 FLOPs over
    # 2 bytes * 3 * 4096^2 values = 4096 / 3 FLOPs a byte
    assert roofline.matmul_flops(4096, 4096, 4096) == 137_438_953_472
    assert roofline.matmul_bytes(4096, 4096, 4096, 2) == 100_663_296
    assert roofline.matmul_intensity(4096, 4096, 4096, 2) == pytest.approx(1365.333333)


def test_a_thin_matmul_intensity_is_about_twice_its_tokens_over_e():
    # 8 tokens through a 4096 x 4096 weight in bf16:
    # 2*8*4096*4096 / (2*(8*4096 + 4096*4096 + 8*4096)) = 268435456 / 33685504
    got = roofline.matmul_intensity(8, 4096, 4096, 2)
    assert got == pytest.approx(268_435_456 / 33_685_504)
    assert got == pytest.approx(8, rel=0.01)  # about m, as the docstring says


def test_elementwise_and_adamw_intensity_by_hand():
    # an fp32 add: 1 FLOP on two 4-byte inputs and one 4-byte output
    assert roofline.elementwise_intensity(1, 3, 4) == pytest.approx(1 / 12)
    # AdamW in fp32: 14 FLOPs over 7 values of 4 bytes
    assert roofline.adamw_intensity(4) == pytest.approx(0.5)
    assert roofline.adamw_intensity(2) == pytest.approx(1.0)


def test_the_h100_and_a100_ridge_points_from_their_datasheets():
    # NVIDIA H100 SXM: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3 -> about 295
    h100 = accelerators.ACCELERATORS["H100 SXM"]
    got = roofline.ridge_point(h100.peak("bf16"), h100.hbm_bytes_per_s)
    assert got == pytest.approx(989e12 / 3.35e12) and round(got) == 295
    # NVIDIA A100 SXM 80GB: 312 TFLOP/s, 2,039 GB/s -> about 153
    a100 = accelerators.ACCELERATORS["A100 SXM"]
    got = roofline.ridge_point(a100.peak("bf16"), a100.hbm_bytes_per_s)
    assert got == pytest.approx(312e12 / 2.039e12, rel=1e-3)


def test_attainable_is_the_lower_roof():
    # 100 GFLOP/s and 10 GB/s meet at 10 FLOPs a byte
    assert roofline.attainable_flops_per_s(1, 100e9, 10e9) == 10e9
    assert roofline.attainable_flops_per_s(10, 100e9, 10e9) == 100e9
    assert roofline.attainable_flops_per_s(1000, 100e9, 10e9) == 100e9
    # an operator of 1 GFLOP and 1 GB: 10 ms at the peak, 100 ms for its bytes
    assert roofline.roofline_time_s(1e9, 1e9, 100e9, 10e9) == pytest.approx(0.1)


def test_tokens_to_ridge_by_hand():
    # an H100-like ridge of 295, a 4096 x 4096 weight in bf16:
    # T >= 295 * 2 * 4096^2 / (2 * 4096^2 - 295 * 2 * 8192) = 9898557440 / 28721152
    t = roofline.tokens_to_ridge(4096, 4096, 295, 2)
    assert t == math.ceil(9_898_557_440 / 28_721_152) == 345
    assert roofline.matmul_intensity(345, 4096, 4096, 2) >= 295
    assert roofline.matmul_intensity(344, 4096, 4096, 2) < 295
    # a 64 x 64 weight never gets there: its intensity tends to 2*64*64/(2*128) = 32
    assert roofline.tokens_to_ridge(64, 64, 295, 2) == math.inf


@pytest.mark.parametrize(
    "call",
    [
        lambda: roofline.matmul_intensity(0, 1, 1, 2),
        lambda: roofline.matmul_intensity(1, 1, 1, 0),
        lambda: roofline.ridge_point(-1, 1),
        lambda: roofline.elementwise_intensity(1, 0, 4),
        lambda: roofline.tokens_to_ridge(64, 64, 0, 2),
    ],
)
def test_bad_input_is_refused(call):
    with pytest.raises(ValueError, match="must be"):
        call()
