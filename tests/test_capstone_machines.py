"""The capstone's machine-dependent verdicts, driven by synthetic timings for
the kinds of machine a reader may have. The ratios are bf16 / fp32 matmul
ceilings: about 0.01 on an AVX2 CPU (bf16 emulated), 0.6 where bf16 runs
below fp32, 1 at the break-even, 2.2 on an AVX-512-BF16 CPU, 9 on an Intel
CPU with AMX (8.0 measured there) or a GPU's tensor cores. A page branches
on none of them: it glues the label and the numbers and states them."""

import math

import pytest

from mlbook.capstone import formulas as cf
from mlbook.common.machine import matmul_kind


@pytest.mark.parametrize(
    "ratio,kind,bf16_rung",
    [
        (0.01, "bf16 emulated", False),
        (0.6, "bf16 slower than fp32", False),
        (1.0, "bf16 faster than fp32", True),
        (2.2, "bf16 faster than fp32", True),
        (9.0, "bf16 much faster than fp32", True),
    ],
)
def test_each_kind_of_machine_gets_its_label_and_rungs(ratio, kind, bf16_rung):
    assert matmul_kind(ratio) == kind
    fixes = [f.name for f in cf.ladder_fixes(bf16_fast=ratio >= 1, compile_on=False)]
    assert ("bf16" in fixes) == bf16_rung


def test_the_kind_boundaries_and_bad_ratios():
    assert matmul_kind(0.499) == "bf16 emulated"
    assert matmul_kind(0.5) == "bf16 slower than fp32"
    assert matmul_kind(3.99) == "bf16 faster than fp32"
    assert matmul_kind(4.0) == "bf16 much faster than fp32"
    for bad in (0, -1, math.nan, "2"):
        with pytest.raises(ValueError, match="bf16_over_fp32"):
            matmul_kind(bad)


def _final_step(ratio: float, fp32_matmul_s: float = 0.060) -> dict:
    """A synthetic final step: its fp32 matmuls take ``fp32_matmul_s``; in bf16
    (ratio >= 1) they take fp32 / ratio, while the rest does not speed up
    (autocast adds casts to the elementwise bucket)."""
    bf16 = ratio >= 1
    return {
        "matmul": fp32_matmul_s / ratio if bf16 else fp32_matmul_s,
        "attention": 0.008,
        "elementwise": 0.012 + (0.004 if bf16 else 0.0),
        "optimizer": 0.006,
        "data": 0.001,
        "sync": 0.0005,
        "idle": 0.002,
    }


@pytest.mark.parametrize("ratio", [0.01, 0.6, 1.0, 2.2, 9.0])
def test_the_bucket_that_bounds_the_step_moves_off_the_matmuls(ratio):
    """Amdahl by hand: the matmuls' share of the step falls as they speed up,
    and at 9x the largest bucket is no longer the matmuls."""
    buckets = _final_step(ratio)
    bound = cf.step_bound(buckets)
    total = sum(buckets.values())
    assert bound.matmul_share == pytest.approx(buckets["matmul"] / total, rel=1e-12)
    top = max(buckets, key=buckets.get)
    assert bound.bucket == top and bound.share == pytest.approx(buckets[top] / total)
    assert bound.label == cf.BUCKET_LABELS[top]
    if ratio < 4:
        assert bound.bucket == "matmul"
    else:  # 60 ms / 9 = 6.7 ms of matmuls against 16 ms of elementwise work
        assert bound.bucket == "elementwise"


def test_the_matmul_share_falls_as_bf16_gets_faster():
    shares = [cf.step_bound(_final_step(r)).matmul_share for r in (1.0, 2.2, 9.0)]
    assert shares[0] > shares[1] > shares[2]


def test_step_bound_refuses_what_is_not_a_step():
    with pytest.raises(ValueError, match="non-empty dict"):
        cf.step_bound({})
    with pytest.raises(ValueError, match="bucket must be one of"):
        cf.step_bound({"gpu": 1.0})
    with pytest.raises(ValueError, match="more than 0 s"):
        cf.step_bound({"matmul": 0.0})
    with pytest.raises(ValueError, match=r"buckets\['idle'\]"):
        cf.step_bound({"matmul": 1.0, "idle": -0.1})


@pytest.mark.parametrize(
    "vs_ceiling,spread,held",
    [
        (0.18, 0.05, True),  # the AMX machine's final rung: far below
        (0.70, 0.05, True),  # an AVX2 machine's fp32 final rung
        (1.03, 0.05, True),  # above 1 by less than the steps' own spread
        (1.08, 0.05, False),  # above by more: the ceiling was missed
        (1.0, 0.0, True),
    ],
)
def test_a_ceiling_holds_within_the_run_s_own_spread(vs_ceiling, spread, held):
    assert cf.within_ceiling(vs_ceiling, spread) is held


def test_mfu_with_one_denominator_rises_with_tokens_per_s():
    """On the AMX machine an fp32 first rung against the fp32 peak showed 14.7 %
    MFU and the 4.3x faster bf16 final rung 3.4 % against the bf16 peak. With
    one denominator (the final rung's bf16 peak) MFU follows tokens/s."""
    fp32_peak, bf16_peak = 1.0e11, 1.6e12  # 16x apart, as AMX's 1,024 / 64
    tokens, per_token, ceiling = 4096, 1.0e6, 1.0e12
    first_s, final_s = 0.40, 0.40 / 4.3
    own = (
        cf.rung_rates(tokens, first_s, per_token, fp32_peak, ceiling).mfu,
        cf.rung_rates(tokens, final_s, per_token, bf16_peak, ceiling).mfu,
    )
    assert own[0] > own[1]  # each against its own dtype's peak: MFU falls
    one = (
        cf.rung_rates(tokens, first_s, per_token, bf16_peak, ceiling).mfu,
        cf.rung_rates(tokens, final_s, per_token, bf16_peak, ceiling).mfu,
    )
    assert one[1] / one[0] == pytest.approx(4.3, rel=1e-12)


def test_an_unknown_peak_gives_no_mfu_but_a_share_of_the_ceiling():
    r = cf.rung_rates(1000, 0.5, 1.0e6, None, 4.0e9)
    assert math.isnan(r.mfu)
    assert r.vs_ceiling == pytest.approx(1000 / 0.5 * 1.0e6 / 4.0e9, rel=1e-12)
