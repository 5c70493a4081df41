"""Property tests of what a page says about the machine it ran on: the kind of
machine a measured ratio describes, the bucket that bounds a step, a ceiling
held with the run's own margin, the loader's wait verdict, and what the book
reads of the CPU (any /proc/cpuinfo text, or none)."""

import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import formulas as cf
from mlbook.common import accelerators as hw
from mlbook.common.machine import MATMUL_KINDS, matmul_kind
from mlbook.input_pipeline.formulas import WAIT_VERDICTS, wait_verdict

PROPERTY_COVERS = {
    "mlbook.common.machine.matmul_kind",
    "mlbook.capstone.formulas.step_bound",
    "mlbook.capstone.formulas.within_ceiling",
    "mlbook.input_pipeline.formulas.wait_verdict",
    "mlbook.common.accelerators.describe_cpu",
    "mlbook.common.accelerators.read_cpuinfo",
    "mlbook.common.accelerators.usable_cores",
    "mlbook.common.accelerators.usable_cpus",
    "mlbook.common.accelerators.cpu_model",
}
FEW = examples(50)
ratios = st.floats(1e-4, 1e4, allow_nan=False)


@FEW
@given(ratios, ratios)
def test_a_faster_bf16_is_never_a_slower_kind(a, b):
    order = [label for _, label in MATMUL_KINDS]
    lo, hi = sorted((a, b))
    assert order.index(matmul_kind(lo)) <= order.index(matmul_kind(hi))
    assert (matmul_kind(a) in order[2:]) == (a >= 1)  # the ladder's bf16 rung


@FEW
@given(st.one_of(st.floats(max_value=0), st.just(math.nan), st.text(max_size=3)))
def test_a_ratio_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(ValueError, match="bf16_over_fp32"):
        matmul_kind(bad)


buckets = st.dictionaries(
    st.sampled_from(cf.BUCKETS), st.floats(0, 10, allow_nan=False), min_size=1
).filter(lambda d: sum(d.values()) > 0)


@FEW
@given(buckets, st.floats(1.01, 100))
def test_the_bound_is_the_largest_bucket_and_scaling_keeps_it(b, factor):
    bound = cf.step_bound(b)
    assert b[bound.bucket] == max(b.values())
    assert 0 < bound.share <= 1 and 0 <= bound.matmul_share <= bound.share
    assert bound.share >= 1 / len(b) - 1e-12
    scaled = cf.step_bound({k: v * factor for k, v in b.items()})
    assert scaled.bucket == bound.bucket
    assert scaled.share == pytest.approx(bound.share, rel=1e-9)


@FEW
@given(buckets, st.floats(0.01, 10))
def test_faster_matmuls_never_raise_their_share(b, speedup):
    b = {**b, "matmul": b.get("matmul", 0.0) + 1.0}
    faster = {**b, "matmul": b["matmul"] / (1 + speedup)}
    before, after = cf.step_bound(b).matmul_share, cf.step_bound(faster).matmul_share
    assert after <= before  # equal only where the step is all matmul
    if sum(b.values()) - b["matmul"] > 1e-6:  # something besides the matmuls
        assert after < before


@FEW
@given(st.floats(0, 3), st.floats(0, 1))
def test_a_ceiling_holds_up_to_the_spread_and_no_further(share, spread):
    assert cf.within_ceiling(share, spread) == (share <= 1 + spread)
    assert cf.within_ceiling(min(share, 1.0), spread)  # at or below 1 always holds


@FEW
@given(st.floats(0, 1e3, allow_nan=False), st.floats(0, 1e3, allow_nan=False))
def test_a_smaller_wait_is_never_judged_worse(a, b):
    order = [label for _, label in WAIT_VERDICTS]
    lo, hi = sorted((a, b))
    assert order.index(wait_verdict(lo)) <= order.index(wait_verdict(hi))
    assert (wait_verdict(a) == order[-1]) == (a >= 1)  # no better than no workers


vendors = st.sampled_from(["AuthenticAMD", "GenuineIntel", "HygonGenuine", ""])
x86_flags = st.lists(
    st.sampled_from(["avx", "avx2", "avx512f", "avx512_bf16", "amx_bf16"]), unique=True
)
arm_features = st.lists(st.sampled_from(["fp", "asimd", "sve", "sve2", "bf16"]))


@FEW
@given(vendors, st.integers(0, 30), st.integers(0, 255), x86_flags, arm_features)
def test_every_cpuinfo_text_is_described_and_peaked_without_raising(
    vendor, family, model, flags, features
):
    text = (
        f"vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"flags\t\t: {' '.join(flags)}\n"
    )
    if features and not flags:
        text = f"Features\t: {' '.join(features)}\nCPU part\t: 0xd40\n"
    info = hw._parse_cpuinfo(text)
    words = hw.describe_cpu(info)
    assert isinstance(words, str) and words
    for dtype in hw.CPU_DTYPES:
        peak = hw.cpu_peak_from_cpuinfo(text, 2, dtype)
        assert peak.basis in hw.PEAK_BASES and peak.how
        assert peak.known == (peak.flops_per_s is not None)


@FEW
@given(st.booleans(), st.integers(1, 512))
def test_the_cores_and_cpuinfo_with_and_without_linux(linux, count):
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(os, "cpu_count", lambda: count)
        if not linux:
            mp.delattr(os, "sched_getaffinity", raising=False)
        cores, cpus = hw.usable_cores(), hw.usable_cpus()
        text = hw.read_cpuinfo()
        assert cores >= 1 and cores == len(cpus)
        assert all(isinstance(c, int) and c >= 0 for c in cpus)
        if not linux:
            assert cores == count
        assert text is None or isinstance(text, str)
    finally:
        mp.undo()


@FEW
@given(
    st.text(alphabet=st.characters(codec="ascii", categories=["L", "N", "P", "Zs"])),
    st.sampled_from(["\t: ", ": ", "\t\t:"]),
)
def test_the_model_name_is_the_first_cpuinfo_gives(name, sep):
    first = f"processor{sep}0\nmodel name{sep}{name}\nflags{sep}fpu sse\n"
    text = first + f"processor{sep}1\nmodel name{sep}Other CPU\n"
    got = hw.cpu_model(text)
    assert got == (name.strip() or "Other CPU")  # the first that names one
    fallback = hw.cpu_model("processor : 0\nmodel name :\n")  # none: the platform's
    assert isinstance(fallback, str) and fallback.strip() == fallback != ""
