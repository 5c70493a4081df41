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


# --- what bounds the final step, and how much of the ceiling it can reach -----------


@pytest.mark.parametrize("ratio", [0.01, 0.6, 1.0, 2.2, 9.0])
def test_a_step_reaches_at_most_its_matmuls_share_of_the_ceiling(ratio):
    """The final step's share of the ceiling is its matmuls' share of the time
    times their own share of the ceiling (so at most the time share while
    they run below the ceiling), and the sentence after it points where the
    glued bound says: at the matmuls' shapes and casts where they bound the
    step, elsewhere once they do not (at 9x, the elementwise bucket)."""
    buckets = _final_step(ratio)
    total = sum(buckets.values())
    time_share = (buckets["matmul"] + buckets["attention"]) / total  # by hand
    for own in (0.3, 0.45, 0.9):  # the matmuls' own rate, of the ceiling
        reach = cf.ceiling_reach(buckets, time_share * own)
        assert reach.matmul_time_share == pytest.approx(time_share, rel=1e-12)
        assert reach.matmul_vs_ceiling == pytest.approx(own, rel=1e-12)
        assert reach.step_vs_ceiling <= reach.matmul_time_share
    bound = cf.step_bound(buckets)
    if ratio < 4:
        assert bound.next_look == "the matmuls' shapes and casts"
    else:
        assert bound.next_look == "the elementwise & norms bucket, not the matmuls"


def test_the_amx_build_of_the_errata_by_hand():
    """The build the errata quote: bf16 at 8.29 x fp32, the final rung at 21 %
    of its ceiling with 46 % of its time in matmuls, which therefore ran at
    about 45 % of the ceiling; the matmuls bound that step, so the page
    points at their shapes and casts, not elsewhere."""
    buckets = {"matmul": 0.46, "attention": 0.0, "elementwise": 0.30, "optimizer": 0.24}
    reach = cf.ceiling_reach(buckets, 0.21)
    assert reach.matmul_vs_ceiling == pytest.approx(0.21 / 0.46)
    assert round(reach.matmul_vs_ceiling, 2) == 0.46  # "about 45 %"
    assert cf.step_bound(buckets).next_look == "the matmuls' shapes and casts"


def test_ceiling_reach_refuses_a_step_without_matmuls():
    with pytest.raises(ValueError, match="no matmul or attention time"):
        cf.ceiling_reach({"elementwise": 1.0}, 0.1)
    with pytest.raises(ValueError, match="step_vs_ceiling"):
        cf.ceiling_reach({"matmul": 1.0}, 0.0)


# --- the peak's basis, named wherever a page or a figure names the peak --------------


def test_a_table_row_has_its_own_basis():
    """The A10G's figures are the A10's (NVIDIA publishes none for the A10G),
    likely above its own: an upper bound, said so, not a datasheet peak."""
    from mlbook.common import accelerators as hw
    from mlbook.common_torch import device as devices

    a10g = devices.gpu_nominal_peak("NVIDIA A10G", "bf16")
    assert a10g.basis == "upper bound" and a10g.label == "upper-bound peak"
    assert not a10g.share_is_efficiency
    assert "upper bound" in a10g.how and "A10 datasheet" in a10g.how
    assert "datasheet (" not in a10g.how  # no "A10G PCIe datasheet (...)"
    assert hw.ACCELERATORS["A10G PCIe"].basis == "upper bound"
    h100 = devices.gpu_nominal_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert h100.basis == "datasheet" and h100.share_is_efficiency
    others = [a for n, a in hw.ACCELERATORS.items() if n != "A10G PCIe"]
    assert {a.basis for a in others} == {"datasheet"}
    with pytest.raises(ValueError, match="basis"):
        hw.Accelerator("x", {}, 1, 1, 1, "s", "s", "2026-12", basis="assumed clock")


def test_every_basis_has_a_label_and_only_a_datasheet_share_is_an_efficiency():
    from mlbook.common import accelerators as hw

    assert set(hw.PEAK_LABELS) == set(hw.PEAK_BASES)
    for basis in ("datasheet", "upper bound", "assumed clock"):
        peak = hw.NominalPeak(1e12, "how", basis)
        assert peak.label == hw.PEAK_LABELS[basis]
        assert peak.share_is_efficiency == (basis == "datasheet")
    assert hw.NominalPeak(None, "how", "unknown").label == "unknown peak"


def test_an_assumed_clock_is_not_called_an_upper_bound():
    """An x86 design the table lacks gets two FMA units assumed at the fastest
    x86 clock: the explanation says it is an estimate, not a bound; a design
    the table knows keeps "an upper bound"."""
    from mlbook.common import accelerators as hw

    def cpuinfo(vendor, family, model, name, flags):
        return (
            f"vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nflags\t\t: {flags}\n"
        )

    unknown = hw.cpu_peak_from_cpuinfo(
        cpuinfo("GenuineIntel", 6, 250, "Intel", "avx2 avx512f"), 1
    )
    assert unknown.basis == "assumed clock"
    assert "an estimate, not a bound" in unknown.how
    assert "upper bound" not in unknown.how
    zen3 = hw.cpu_peak_from_cpuinfo(
        cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core", "avx2"), 1
    )
    assert zen3.basis == "upper bound" and zen3.how.endswith("an upper bound")
    assert "EPYC 7763's cited max boost" in zen3.how  # the SKU's own clock


# --- a saving within the run's noise ------------------------------------------------


@pytest.mark.parametrize(
    "saved,bucket,spread,verdict",
    [
        (0.092, 0.109, 0.03, "above the run's noise"),  # data: most of its bucket
        (0.020, 0.001, 0.05, "within the run's noise"),  # the errata's logging
        (-0.011, 0.015, 0.05, "within the run's noise"),  # the errata's SDPA
        (-0.080, 0.015, 0.05, "above the run's noise"),  # slower, beyond the noise
        (0.187, 0.149, 0.02, "more than its bucket held"),  # beyond bucket + spread
        (0.160, 0.149, 0.02, "above the run's noise"),  # within bucket + spread
        (0.020, 0.001, 0.01, "more than its bucket held"),
    ],
)
def test_a_saving_is_read_against_the_spread_and_its_bucket(
    saved, bucket, spread, verdict
):
    assert cf.saving_verdict(saved, bucket, spread) == verdict
    effect = cf.FixEffect("sdpa", "attention", 1.0, bucket, 0.0, saved)
    assert effect.verdict(spread) == verdict
