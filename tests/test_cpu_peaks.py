"""Every reader's CPU gets a nominal peak it can defend, or an honest
"unknown": /proc/cpuinfo texts of each kind seen (AMD Zen 3, Zen 4, Zen 5, an
Intel Xeon with AMX whose hypervisor reports Rocket Lake's model number, an
ARM Graviton), and a system with no /proc/cpuinfo or sched_getaffinity
(macOS). FLOPs a cycle and clocks by hand, from the sources in the table."""

import math
import os

import pytest

from mlbook.common import accelerators as hw
from mlbook.common_torch import device as devices


def cpuinfo(vendor, family, model, name, flags):
    return (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
        f"model\t\t: {model}\nmodel name\t: {name}\nflags\t\t: fpu sse2 {flags}\n"
        "bogomips\t: 4890.86\n\nprocessor\t: 1\n"
    )


ZEN3 = cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC", "avx fma avx2")
ZEN4 = cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC", "avx2 avx512f avx512_bf16")
# these machines: AMD EPYC, family 26 model 2, AVX-512 with AVX512_BF16
ZEN5 = cpuinfo("AuthenticAMD", 26, 2, "AMD EPYC", "avx2 avx512f avx512_bf16")
# the Intel AMX machine of the issue: "GenuineIntel family 6 model 167"
AMX_167 = cpuinfo(
    "GenuineIntel",
    6,
    167,
    "Intel(R) Xeon(R) Processor",
    "avx2 avx512f avx512_bf16 amx_bf16 amx_tile",
)
# Rocket Lake itself (model 167, no AMX): a design the table does not know
ROCKET_LAKE = cpuinfo(
    "GenuineIntel", 6, 167, "11th Gen Intel(R) Core(TM)", "avx2 avx512f"
)
# AWS Graviton3 (Neoverse V1): no vendor, family or clock; its units in Features
GRAVITON3 = (
    "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes pmull "
    "sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
    "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca "
    "pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n"
)


@pytest.mark.parametrize(
    "text,dtype,ghz,per_cycle,basis",
    [
        # Zen 3: two 256-bit FMA pipes, 2 x 8 x 2 = 32; no bf16 unit
        (ZEN3, "fp32", 4.1, 32, "upper bound"),
        (ZEN3, "bf16", 4.1, 32, "upper bound"),
        # Zen 4: AVX-512 on 256-bit pipes: 32 fp32, VDPBF16PS 2 x 8 x 4 = 64
        (ZEN4, "fp32", 4.4, 32, "upper bound"),
        (ZEN4, "bf16", 4.4, 64, "upper bound"),
        # Zen 5 server: 512-bit pipes: 2 x 16 x 2 = 64, 2 x 16 x 4 = 128; the
        # EPYC 9175F boosts to 5.0 GHz, the fastest of the 9005 series
        (ZEN5, "fp32", 5.0, 64, "upper bound"),
        (ZEN5, "bf16", 5.0, 128, "upper bound"),
        # an AMX Xeon whatever model it reports: two 512-bit FMA units, 64; AMX
        # TDPBF16PS 16 x 16 x 32 MACs = 16,384 FLOPs every 16 cycles, 1,024
        (AMX_167, "fp32", 4.8, 64, "upper bound"),
        (AMX_167, "bf16", 4.8, 1024, "upper bound"),
        # Rocket Lake is not in the table: two 512-bit units assumed, at 6.2 GHz
        (ROCKET_LAKE, "fp32", 6.2, 64, "assumed clock"),
    ],
)
def test_each_kind_of_cpu(text, dtype, ghz, per_cycle, basis):
    peak = hw.cpu_peak_from_cpuinfo(text, 2, dtype)
    assert peak.flops_per_s == pytest.approx(2 * ghz * 1e9 * per_cycle, rel=1e-12)
    assert peak.basis == basis and f"{ghz:.2f} GHz" in peak.how
    flops, how = peak  # it unpacks as (FLOP/s, how)
    assert flops == peak.flops_per_s and how == peak.how


def test_an_amx_xeon_is_known_by_its_tiles_not_its_model_number():
    info = hw._parse_cpuinfo(AMX_167)
    assert info.model == 167
    assert hw.describe_cpu(info).startswith("Golden Cove")
    assert hw.describe_cpu(hw._parse_cpuinfo(ROCKET_LAKE)) == (
        "GenuineIntel family 6 model 167"
    )


def test_an_arm_cpu_has_an_unknown_peak_that_names_its_units():
    for dtype in ("fp32", "bf16"):
        peak = hw.cpu_peak_from_cpuinfo(GRAVITON3, 4, dtype)
        assert peak.flops_per_s is None and peak.basis == "unknown"
        assert not peak.known and math.isnan(peak.share(1e9))
        assert "asimd, sve, bf16, i8mm" in peak.how and "0xd40" in peak.how
        assert "ceiling" in peak.how  # what the page holds the step against


def test_an_x86_cpu_with_no_vector_unit_the_table_knows():
    bare = cpuinfo("GenuineIntel", 6, 15, "Intel Core 2", "sse3")
    peak = hw.cpu_peak_from_cpuinfo(bare, 1, "fp32")
    assert peak.basis == "unknown" and peak.flops_per_s is None


def test_shares_of_a_known_peak():
    peak = hw.cpu_peak_from_cpuinfo(ZEN5, 1, "fp32")
    assert peak.known and peak.share(160e9) == pytest.approx(0.5, rel=1e-12)


def test_a_peak_and_its_basis_agree():
    with pytest.raises(ValueError, match="only an unknown peak is None"):
        hw.NominalPeak(None, "x", "datasheet")
    with pytest.raises(ValueError, match="only an unknown peak is None"):
        hw.NominalPeak(1e9, "x", "unknown")
    with pytest.raises(ValueError, match="basis must be one of"):
        hw.NominalPeak(1e9, "x", "guess")


@pytest.fixture
def no_linux(monkeypatch):
    """macOS as far as the book can tell: no sched_getaffinity, no
    /proc/cpuinfo."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    real_open = open

    def fake_open(path, *a, **k):
        if str(path) == "/proc/cpuinfo":
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)


def test_without_the_linux_only_calls(no_linux):
    assert hw.usable_cores() == (os.cpu_count() or 1)
    assert hw.read_cpuinfo() is None
    peak = hw.cpu_nominal_peak_flops_per_s("fp32")
    assert peak.basis == "unknown" and "no /proc/cpuinfo" in peak.how
    assert devices.nominal_peak_flops_per_s("cpu", "bf16").basis == "unknown"
    assert devices.device_description("cpu").startswith("CPU: ")


def test_the_capstone_peak_without_the_linux_only_calls(no_linux):
    from mlbook.common_torch import reference_loop as rl

    peak = rl.nominal_peak("cpu", "fp32", 1)
    assert peak.flops_per_s is None and peak.basis == "unknown"


def test_this_machine_has_a_peak_or_says_why_not():
    for dtype in ("fp32", "bf16"):
        peak = hw.cpu_nominal_peak_flops_per_s(dtype)
        assert peak.basis in hw.PEAK_BASES and peak.how
        assert peak.known == (peak.basis != "unknown")


def test_a_gpu_without_bf16_units_has_no_bf16_peak():
    """A T4 (Turing) and a V100 have fp16 tensor cores and no bf16 ones: their
    datasheets give no bf16 figure, so the peak is unknown, not an error."""
    for name in ("Tesla T4", "Tesla V100-SXM2-32GB"):
        bf16 = devices.gpu_nominal_peak(name, "bf16")
        assert bf16.basis == "unknown" and "no bf16 peak" in bf16.how
        assert devices.gpu_nominal_peak(name, "fp16").basis == "datasheet"


def test_an_unknown_design_s_units_are_named_for_what_they_are():
    """An AMX rate is a tile unit's, not FMA units': the explanation says so."""
    amx_unknown = cpuinfo("GenuineIntel", 19, 1, "Intel", "avx2 avx512f amx_bf16")
    bf16 = hw.cpu_peak_from_cpuinfo(amx_unknown, 1, "bf16")
    assert "AMX tile unit" in bf16.how and "FMA" not in bf16.how.split(":")[1]
    fp32 = hw.cpu_peak_from_cpuinfo(amx_unknown, 1, "fp32")
    assert "two 512-bit FMA units assumed" in fp32.how
