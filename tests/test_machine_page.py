"""The "Your machine" page's claims, read from the test build's glued values
and held against values worked out here by hand."""

import pytest

from conftest import page_values

pytestmark = pytest.mark.book


@pytest.fixture(scope="module")
def v(book):
    return page_values("machine")


def test_the_reference_step_counts_its_flops_as_the_mfu_chapter_does(v):
    """At test sizes on a CPU the reference step is the capstone's final loop:
    L = 1, h = 768, a = 6, the vocabulary 1,000 padded to 1,024, s = 128.
    N_matmul = L (4 h^2 + 8 h^2) + V h = 7,077,888 + 786,432 = 7,864,320, and a
    token costs 6 N_matmul + 12 L h s = 47,185,920 + 1,179,648 FLOPs."""
    if not v["device_name"].startswith("CPU"):
        pytest.skip("the GPU's test sizes differ")
    assert v["flops_per_token"] == 48_365_568
    tokens = 2 * 128  # batch 2 of s = 128
    assert v["step_gflops"] == pytest.approx(48_365_568 * tokens / v["step_ms"] / 1e6)


def test_the_step_is_no_faster_than_its_ceiling_allows(v):
    """A step cannot beat its own FLOPs at the best matmul: measured / predicted
    at least 1 less the step's spread (the page asserts it on the fastest
    repeat; the median is slower still)."""
    assert v["ratio_step"] >= 1 - v["step_spread"]
    assert v["ratio_step"] == pytest.approx(v["step_ms"] / v["step_bound_ms"])
    # an MFU against the peak is at most the share of the ceiling, which the
    # peak bounds: MFU / share of MAMF = MAMF / peak
    assert v["step_mfu"] == pytest.approx(v["step_of_mamf"] * v["mamf_of_peak"])
    assert 0 < v["mamf_of_peak"] <= 1


def test_the_block_keeps_korthikantis_items_and_the_named_extras(v):
    """One GPT block, fp32, no dropout, attention written out, at s = 128,
    b = 2, h = 768, a = 6 (the CPU test sizes): Korthikanti's 34 sbh + 5 as^2 b
    at 2-byte values and 1-byte masks becomes, with no dropout masks or
    dropout outputs, 16 sbh + as^2 b values of 4 bytes: the layer's input,
    Q and K, V, the output projection's input (5 sbh), the MLP's 9 sbh, the
    two norms' inputs (2 sbh), and the softmax output (as^2 b)."""
    if not v["device_name"].startswith("CPU"):
        pytest.skip("the GPU's test sizes differ")
    s, b, h, a = 128, 2, 768, 6
    assert v["act_predicted_bytes"] == 4 * (16 * s * b * h + a * s * s * b)
    extra = v["act_measured_bytes"] - v["act_predicted_bytes"]
    # the norms' per-token statistics (mean and rstd, fp32, 2 norms) and the
    # causal mask: bytes, not a share of the block
    assert 0 < extra < 0.01 * v["act_predicted_bytes"]
    assert v["ratio_activations"] == pytest.approx(
        v["act_measured_bytes"] / v["act_predicted_bytes"]
    )


def test_bekmans_h100_row(v):
    """Bekman, ML Engineering, MAMF table: H100 SXM BF16 794.5 of 989 TFLOP/s."""
    assert v["bekman_h100_of_peak"] == pytest.approx(794.5 / 989)


def test_the_kept_calibrations_are_drawn(v):
    assert v["kept_count"] >= 2
    for key in ("checkpoint", "allreduce", "tokenise", "loader", "accumulation"):
        assert v[f"ratio_{key}"] > 0  # stated, not held to a bar
