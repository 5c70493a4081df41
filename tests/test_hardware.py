import pytest

from mlbook.common import accelerators as hardware
from mlbook.common_torch import device as devices


def test_table_rows_have_source_and_date():
    for a in hardware.ACCELERATORS.values():
        assert a.source and a.as_of
        assert a.hbm_bytes > 0 and a.hbm_bytes_per_s > 0
        assert 0 < a.hbm_usable_bytes <= a.hbm_bytes


@pytest.mark.parametrize(
    "device,dtype,tflops",
    [
        ("A100", "bf16", 312),
        ("H100 SXM", "bf16", 989),
        ("H100 PCIe", "bf16", 756),
        ("H200", "bf16", 989),
        ("H100", "fp8", 1979),
        ("V100", "fp16", 125),
    ],
)
def test_known_peaks(device, dtype, tflops):
    assert hardware.peak_flops_per_s(device, dtype) == tflops * 1e12


def test_h200_has_more_and_faster_memory_than_h100():
    h100, h200 = hardware.accelerator("H100"), hardware.accelerator("H200")
    assert h200.hbm_bytes == 141 * 2**30 and h200.hbm_bytes_per_s == 4.8e12
    assert h200.peak("bf16") == h100.peak("bf16")


@pytest.mark.parametrize(
    "device,gib,smi_mib",
    [
        # the datasheet's capacity read as GiB, and nvidia-smi's total in MiB
        ("V100", 32, 32_510),
        ("A100", 80, 81_920),
        ("H100 SXM", 80, 81_559),
        ("H100 PCIe", 80, 81_559),
        ("H200", 141, 143_771),
    ],
)
def test_hbm_is_binary_and_the_usable_part_is_what_nvidia_smi_reports(
    device, gib, smi_mib
):
    """HBM capacities are binary. nvidia-smi reports more than
    the decimal reading of the datasheet (81,559 MiB = 85.5e9 bytes > 80e9 for an
    H100), so "80 GB" cannot be 10^9-byte gigabytes; it is 80 GiB, of which the
    driver hands 81,559 MiB (79.65 GiB) to CUDA."""
    a = hardware.accelerator(device)
    assert a.hbm_bytes == gib * 2**30
    assert a.hbm_usable_bytes == smi_mib * 2**20
    assert gib * 1e9 < a.hbm_usable_bytes <= a.hbm_bytes
    assert a.hbm_usable_source and "nvidia-smi" in a.hbm_usable_source


def test_unknown_device_and_dtype():
    with pytest.raises(ValueError, match="unknown device 'B300'"):
        hardware.peak_flops_per_s("B300")
    with pytest.raises(ValueError, match="device must be a name"):
        hardware.accelerator(100)
    with pytest.raises(ValueError, match="dtype must be one of"):
        hardware.peak_flops_per_s("A100", "int4")
    with pytest.raises(ValueError, match="no fp8 peak"):
        hardware.peak_flops_per_s("A100", "fp8")


def test_cuda_name_matching_wants_a_string():
    """The names themselves: tests/test_gpu_table.py, every row and its
    look-alikes."""
    with pytest.raises(ValueError, match="cuda_name must be a string"):
        hardware.match_cuda_name(None)


def cpuinfo(vendor, family, model, name, flags, bogomips=4890.86):
    """A /proc/cpuinfo text of one processor, with the fields the peak reads."""
    return (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
        f"model\t\t: {model}\nmodel name\t: {name}\nflags\t\t: fpu sse2 {flags}\n"
        f"bogomips\t: {bogomips}\n\nprocessor\t: 1\n"
    )


# A build machine's /proc/cpuinfo: Zen 3, SKU hidden, BogoMIPS 4890.86.
ZEN3_HIDDEN = cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC", "avx fma avx2")
ZEN3_7763 = cpuinfo(
    "AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", "avx fma avx2"
)
ZEN2 = cpuinfo(
    "AuthenticAMD", 23, 49, "AMD EPYC 7742 64-Core Processor", "avx fma avx2"
)
ZEN4 = cpuinfo(
    "AuthenticAMD",
    25,
    17,
    "AMD EPYC 9654 96-Core Processor",
    "avx fma avx2 avx512f avx512bw avx512_bf16",
)
ZEN4_HIDDEN = ZEN4.replace("AMD EPYC 9654 96-Core Processor", "AMD EPYC")
SAPPHIRE_RAPIDS = cpuinfo(
    "GenuineIntel",
    6,
    143,
    "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
    "avx fma avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile",
)
CASCADE_LAKE = cpuinfo(  # a design the table has no row for
    "GenuineIntel",
    6,
    85,
    "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    "avx fma avx2 avx512f",
)
ARM = (
    "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"
)


@pytest.mark.parametrize(
    "text,cores,dtype,ghz,per_cycle",
    [
        # FLOP/cycle by hand: an FMA is 2 FLOPs a lane, two pipes;
        # a 256-bit fp32 vector has 8 lanes, a 512-bit one 16;
        # VDPBF16PS is 4 FLOPs per fp32 lane.
        # Zen 2 and Zen 3: 2 x 8 x 2 = 32; no bf16 unit, so bf16 at the fp32 rate.
        (ZEN2, 2, "fp32", 3.9, 32),  # 7742 not in the table: Rome's 7F52, 3.9 GHz
        (ZEN2, 2, "bf16", 3.9, 32),
        (ZEN3_HIDDEN, 2, "fp32", 4.1, 32),  # hidden: Milan's fastest, 72F3 at 4.1
        (ZEN3_HIDDEN, 2, "bf16", 4.1, 32),
        (ZEN3_7763, 2, "fp32", 3.5, 32),  # AnandTech: the 7763 boosts to 3.5 GHz
        # Zen 4: AVX-512 on 256-bit pipes, so fp32 2 x 8 x 2 = 32 (not 64) and
        # bf16 2 x 8 x 4 = 64 (not 128)
        (ZEN4, 1, "fp32", 3.7, 32),  # the 9654 boosts to 3.7 GHz
        (ZEN4, 1, "bf16", 3.7, 64),
        (ZEN4_HIDDEN, 1, "fp32", 4.4, 32),  # Genoa's fastest, 9174F at 4.4
        # Sapphire Rapids: two 512-bit FMA units, 2 x 16 x 2 = 64; AMX: a
        # 16 x 32 by 32 x 16 tile product, 8,192 MACs = 16,384 FLOPs in 16 cycles
        (SAPPHIRE_RAPIDS, 4, "fp32", 4.8, 64),  # SKU not in the table: w9-3495X
        (SAPPHIRE_RAPIDS, 4, "bf16", 4.8, 1024),
        # unknown design: two 512-bit FMA units assumed at 6.2 GHz (i9-14900KS):
        # the clock bounds, the units do not, so an estimate
        (CASCADE_LAKE, 2, "fp32", 6.2, 64),
    ],
)
def test_cpu_peak_from_cpuinfo(text, cores, dtype, ghz, per_cycle):
    peak, how = hardware.cpu_peak_from_cpuinfo(text, cores, dtype)
    assert peak == pytest.approx(cores * ghz * 1e9 * per_cycle, rel=1e-12)
    assert f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle" in how
    known_design = text is not CASCADE_LAKE
    assert ("an upper bound" in how) == known_design
    assert ("an estimate, not a bound" in how) == (not known_design)


def test_cpu_peak_says_where_its_clock_comes_from():
    _, hidden = hardware.cpu_peak_from_cpuinfo(ZEN3_HIDDEN, 2)
    assert "SKU is hidden" in hidden and "EPYC 72F3" in hidden
    _, named = hardware.cpu_peak_from_cpuinfo(ZEN3_7763, 2)
    assert "EPYC 7763's cited max boost" in named
    unknown = hardware.cpu_peak_from_cpuinfo(CASCADE_LAKE, 2)
    assert "not in the table" in unknown.how and "i9-14900KS" in unknown.how
    assert "assumed" in unknown.how and unknown.basis == "assumed clock"


def test_cpu_peak_is_above_the_ceilings_measured_on_these_machines():
    """A peak below a measured matmul is wrong. On a Zen 4 EPYC one
    thread ran fp32 matmuls at 103 GFLOP/s and bf16 at 224; on this Zen 3
    machine two threads reached 1.04-1.12 x the old peak, 2 x 2.445 GHz (BogoMIPS
    / 2) x 32 = 156.5 GFLOP/s, so up to 175 GFLOP/s."""
    assert hardware.cpu_peak_from_cpuinfo(ZEN4_HIDDEN, 1, "fp32")[0] > 103e9
    assert hardware.cpu_peak_from_cpuinfo(ZEN4_HIDDEN, 1, "bf16")[0] > 224e9
    assert hardware.cpu_peak_from_cpuinfo(ZEN4, 1, "fp32")[0] > 103e9
    assert hardware.cpu_peak_from_cpuinfo(ZEN4, 1, "bf16")[0] > 224e9
    base_clock_peak = 2 * 4890.86 / 2 * 1e6 * 32
    assert base_clock_peak == pytest.approx(156.5e9, rel=1e-3)
    assert hardware.cpu_peak_from_cpuinfo(ZEN3_HIDDEN, 2)[0] > 1.12 * base_clock_peak


def test_cpu_peak_errors():
    with pytest.raises(ValueError, match="cores must be an integer above 0"):
        hardware.cpu_peak_from_cpuinfo(ZEN3_HIDDEN, 0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        hardware.cpu_peak_from_cpuinfo(ZEN3_HIDDEN, 2, "fp16")
    with pytest.raises(ValueError, match="cpuinfo text must be a string"):
        hardware.cpu_peak_from_cpuinfo(None, 2)


def test_cpu_nominal_peak_is_positive_and_explained():
    peak, how = hardware.cpu_nominal_peak_flops_per_s("fp32")
    assert peak > 1e9 and "GHz" in how


def test_measured_matmul_is_below_nominal_peak():
    measured = devices.measure_matmul_flops_per_s("fp32", n=256, min_run_time_s=0.05)
    peak, _ = hardware.cpu_nominal_peak_flops_per_s("fp32")
    assert 0 < measured < peak


def test_device_description_counts_threads_in_english():
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert devices.device_description("cpu").endswith(", 1 thread")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "mps", "", None, 0])
def test_pick_device_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'cuda'"):
        devices.pick_device(bad)


def test_pick_device_choices():
    import torch

    assert devices.pick_device("cpu") == "cpu"
    assert devices.pick_device("auto") == (
        "cuda" if torch.cuda.is_available() else "cpu"
    )
    if torch.cuda.is_available():
        assert devices.pick_device("cuda") == "cuda"
    else:
        with pytest.raises(
            ValueError, match="device='cuda' was asked for but torch sees no CUDA GPU"
        ):
            devices.pick_device("cuda")


@pytest.mark.parametrize(
    "fn",
    [devices.device_description, lambda d: devices.nominal_peak_flops_per_s(d, "fp32")],
)
def test_device_helpers_reject_unknown_devices(fn):
    with pytest.raises(ValueError, match="device must be one of 'cpu', 'cuda'"):
        fn("cuda:0")


def test_notation_page_states_binary_capacities_as_the_table_has_them():
    """book/notation.md is not executed, so the one figure it types must match the
    table, and it must not call HBM capacities decimal (they are binary)."""
    import re
    from pathlib import Path

    text = " ".join(
        (Path(__file__).resolve().parent.parent / "book" / "notation.md")
        .read_text()
        .split()
    )
    assert "print decimal GB" not in text
    assert '"80 GB" of an H100 is 80 GiB' in text
    # HBM stacks do not come in powers of two: the H200 has six 24 GB stacks
    # (144 GB, 141 enabled), an H100 SXM five active ones; the binary units
    # stand on the DRAM dies, which hold whole gibibits
    assert "stacks come in powers of two" not in text
    assert "dies are made and counted in binary units" in text
    (mib,) = re.findall(r"([\d,]+) MiB", text)
    assert (
        int(mib.replace(",", "")) * 2**20
        == hardware.accelerator("H100").hbm_usable_bytes
    )
