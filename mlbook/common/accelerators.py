"""Accelerator specifications in one table, and their interconnects in another.

Every hardware number the book uses lives here, once, with its source and the
date it was read. Peaks are dense tensor-core throughput (no 2:4 sparsity).

HBM capacities are binary, because HBM stacks come in powers of two: the "80
GB" of an A100 or H100 is 80 GiB (2^30 bytes), the "141 GB" of an H200 141 GiB.
Each row stores that capacity, and beside it the part the driver hands to CUDA,
nvidia-smi's total (torch.cuda.get_device_properties(0).total_memory reports
the same): the rest is reserved by the driver and the GPU. That usable figure
is what a plan must fit in; a process's own CUDA context takes a few hundred
MiB more of it. Bandwidths are decimal (a TB/s is 10^12 bytes a second).

Nothing here imports torch; the throughput probes that measure a device live
in mlbook.common_torch (device.py, mamf.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from mlbook.common import validate
from mlbook.common.units import GIB, GIGA, MIB, TERA

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Accelerator:
    """One device's nominal numbers. peak_flops_per_s maps a dtype to FLOP/s.

    hbm_bytes is the HBM on the card (binary: the datasheet's "80 GB" is 80
    GiB); hbm_usable_bytes is what nvidia-smi reports as its total, the most
    a process can have; hbm_usable_source says where that was read.
    """

    name: str
    peak_flops_per_s: dict = field(hash=False)
    hbm_bytes: float
    hbm_usable_bytes: float
    hbm_bytes_per_s: float
    source: str
    hbm_usable_source: str
    as_of: str

    def peak(self, dtype: str = "bf16") -> float:
        validate.one_of("dtype", dtype, DTYPES)
        if dtype not in self.peak_flops_per_s:
            raise ValueError(
                f"{self.name} has no {dtype} peak in the table; it lists "
                + ", ".join(sorted(self.peak_flops_per_s))
            )
        return self.peak_flops_per_s[dtype]


ACCELERATORS = {
    a.name: a
    for a in (
        Accelerator(
            "V100 SXM2",
            {"fp32": 15.7 * TERA, "fp16": 125 * TERA},
            32 * GIB,
            32_510 * MIB,
            900 * GIGA,
            "NVIDIA Tesla V100 datasheet (SXM2, 32 GB)",
            "nvidia-smi on a Tesla V100-SXM2-32GB: 32,510 MiB (some drivers print "
            "32,768 MiB; the lower is kept)",
            "2026-12",
        ),
        Accelerator(
            "A100 SXM",
            {
                "fp32": 19.5 * TERA,
                "tf32": 156 * TERA,
                "bf16": 312 * TERA,
                "fp16": 312 * TERA,
            },
            80 * GIB,
            81_920 * MIB,
            2039 * GIGA,
            "NVIDIA A100 Tensor Core GPU datasheet (SXM 80 GB, dense)",
            "nvidia-smi on an A100-SXM4-80GB: 81,920 MiB (modal-labs/modal-client "
            "#2797 lists it with the H100's)",
            "2026-12",
        ),
        Accelerator(
            "H100 SXM",
            {
                "fp32": 67 * TERA,
                "tf32": 494.5 * TERA,
                "bf16": 989 * TERA,
                "fp16": 989 * TERA,
                "fp8": 1979 * TERA,
            },
            80 * GIB,
            81_559 * MIB,
            3350 * GIGA,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense = half "
            "the sparse figure)",
            "nvidia-smi on an H100 80GB HBM3 (SXM): 81,559 MiB (NVIDIA/nccl#1264; "
            "modal-labs/modal-client#2797)",
            "2026-12",
        ),
        Accelerator(
            "H100 PCIe",
            {
                "fp32": 51 * TERA,
                "tf32": 378 * TERA,
                "bf16": 756 * TERA,
                "fp16": 756 * TERA,
                "fp8": 1513 * TERA,
            },
            80 * GIB,
            81_559 * MIB,
            2000 * GIGA,
            "NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)",
            "nvidia-smi on an H100 PCIe: 81,559 MiB, as the SXM part",
            "2026-12",
        ),
        Accelerator(
            "H200 SXM",
            {
                "fp32": 67 * TERA,
                "tf32": 494.5 * TERA,
                "bf16": 989 * TERA,
                "fp16": 989 * TERA,
                "fp8": 1979 * TERA,
            },
            141 * GIB,
            143_771 * MIB,
            4800 * GIGA,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense): H100 compute, "
            "more and faster HBM3e",
            "nvidia-smi on an H200 (SXM): 143,771 MiB",
            "2026-12",
        ),
    )
}

# Short names a reader types, mapped to table rows.
ALIASES = {
    "V100": "V100 SXM2",
    "A100": "A100 SXM",
    "H100": "H100 SXM",
    "H200": "H200 SXM",
}


def accelerator(name: str) -> Accelerator:
    """Look a device up by table name or alias; an unknown name is an error."""
    if not isinstance(name, str):
        raise ValueError(f"device must be a name such as 'H100', got {name!r}")
    key = ALIASES.get(name, name)
    if key not in ACCELERATORS:
        known = ", ".join(list(ACCELERATORS) + list(ALIASES))
        raise ValueError(f"unknown device {name!r}; the table knows {known}")
    return ACCELERATORS[key]


def peak_flops_per_s(device: str, dtype: str = "bf16") -> float:
    """Nominal dense peak of ``device`` for ``dtype`` from the table."""
    return accelerator(device).peak(dtype)


def match_cuda_name(cuda_name: str) -> Accelerator | None:
    """The table row for a CUDA device name such as 'NVIDIA H100 80GB HBM3',
    or None when the table has no row for it."""
    if not isinstance(cuda_name, str):
        raise ValueError(
            "cuda_name must be a string such as 'NVIDIA H100 80GB HBM3', "
            f"got {cuda_name!r}"
        )
    upper = cuda_name.upper()
    for chip in ("H200", "H100", "A100", "V100"):
        if chip in upper:
            if chip == "H100" and "PCIE" in upper:
                return ACCELERATORS["H100 PCIe"]
            return ACCELERATORS[ALIASES[chip]]
    return None


# --- Links between GPUs -------------------------------------------------------
# Bandwidths per GPU in ONE direction, which is what a ring's send rate B is.
# NVLink datasheets print the sum of both directions (H100: 18 links x 50 GB/s
# = 900 GB/s, so 450 GB/s each way). InfiniBand is quoted per port and
# direction (NDR 400 Gb/s = 50 GB/s); a DGX gives each GPU its own compute-
# fabric port, except the DGX-1, whose four EDR ports serve eight GPUs.


@dataclass(frozen=True)
class Interconnect:
    """A GPU's links: NVLink to the GPUs of its node, InfiniBand to other nodes."""

    name: str  # the ACCELERATORS row it belongs to
    nvlink_bytes_per_s: float  # per GPU, one direction
    nvlink_source: str
    ib_bytes_per_s: float  # per GPU, one direction, compute fabric
    ib_source: str
    as_of: str


INTERCONNECTS = {
    i.name: i
    for i in (
        Interconnect(
            "V100 SXM2",
            150 * GIGA,
            "NVIDIA Tesla V100 datasheet: NVLink 300 GB/s (6 NVLink 2.0 links, "
            "both directions)",
            4 * 100e9 / 8 / 8,
            "NVIDIA DGX-1 datasheet: 4x InfiniBand EDR 100 Gb/s for 8 V100 "
            "(400 Gb/s / 8 bits / 8 GPUs)",
            "2026-11",
        ),
        Interconnect(
            "A100 SXM",
            300 * GIGA,
            "NVIDIA A100 datasheet: NVLink 600 GB/s (12 NVLink 3.0 links, "
            "both directions)",
            200e9 / 8,
            "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 200 Gb/s "
            "HDR InfiniBand, one per GPU",
            "2026-11",
        ),
        Interconnect(
            "H100 SXM",
            450 * GIGA,
            "NVIDIA H100 datasheet: NVLink 900 GB/s (18 NVLink 4.0 links, "
            "both directions)",
            400e9 / 8,
            "NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 400 Gb/s "
            "NDR InfiniBand, one per GPU",
            "2026-11",
        ),
        Interconnect(
            "H200 SXM",
            450 * GIGA,
            "NVIDIA H200 datasheet: NVLink 900 GB/s (18 NVLink 4.0 links, "
            "both directions)",
            400e9 / 8,
            "NVIDIA DGX H200 datasheet: 8x single-port ConnectX-7 400 Gb/s "
            "NDR InfiniBand, one per GPU",
            "2026-11",
        ),
    )
}


def interconnect(name: str) -> Interconnect:
    """The NVLink and InfiniBand row of a device (table name or alias). A
    device the link table has no row for (the H100 PCIe, whose NVLink is a
    bridge between two cards) is an error."""
    key = accelerator(name).name
    if key not in INTERCONNECTS:
        raise ValueError(
            f"the link table has no row for {key!r}; it knows "
            f"{', '.join(INTERCONNECTS)}"
        )
    return INTERCONNECTS[key]


# --- CPUs -------------------------------------------------------------------
# A CPU's nominal peak is cores x clock x FLOPs per cycle per core. FLOPs per
# cycle is a property of the core's design, not of its instruction set: Zen 4
# runs AVX-512 on 256-bit units (two passes an instruction), so its AVX-512
# flag buys no more fp32 FLOPs than Zen 3's AVX2. So a peak is keyed on the
# design (vendor, family and model in /proc/cpuinfo), and the flags then say
# which of its units the kernel may use. An FMA is 2 FLOPs per lane; a bf16
# dot product (VDPBF16PS) 4 FLOPs per fp32 lane (two products, two adds).
#
# The clock is the highest the part is rated to boost to, so that the peak is
# an upper bound that no measurement may beat: the SKU's own cited max boost
# where /proc/cpuinfo names a SKU the table knows, else (a hypervisor often
# hides the SKU, as "AMD EPYC") the highest max boost of any part of that
# design. (BogoMIPS is twice the base clock, which a busy core runs above, so
# a peak at it is beaten by a real matmul.)


@dataclass(frozen=True)
class CpuCore:
    """One core design: FLOPs per cycle per core for each dtype, by the flag
    that enables the unit, best first; and the fastest max boost clock of any
    part built on it, the clock bound when the SKU is unknown."""

    name: str  # the core design, e.g. "Zen 3"
    parts: str  # the processors built on it that the row covers
    vendor: str  # /proc/cpuinfo vendor_id
    family: int  # /proc/cpuinfo cpu family
    models: tuple  # /proc/cpuinfo model numbers (decimal)
    flops_per_cycle: dict = field(hash=False)  # dtype -> ((flag, FLOP/cycle), ...)
    units: str  # the vector units behind the figures, in words
    max_boost_ghz: float  # fastest max boost of any part of this design
    max_boost_part: str  # the part rated at it
    source: str
    as_of: str


CPU_CORES = (
    CpuCore(
        "Zen 2",
        "EPYC 7002 (Rome)",
        "AuthenticAMD",
        23,
        (48, 49),
        {"fp32": (("avx2", 2 * 8 * 2),), "bf16": ()},
        "two 256-bit FMA pipes",
        3.9,
        "EPYC 7F52",
        "AMD, Software Optimization Guide for AMD Family 17h Models 30h and "
        "Greater Processors (pub. 56305): four FP pipes, two of them FMA, 256 "
        "bits wide; AMD EPYC 7F52 specifications: max boost 3.9 GHz, the "
        "fastest of the 7002 series",
        "2026-12",
    ),
    CpuCore(
        "Zen 3",
        "EPYC 7003 (Milan)",
        "AuthenticAMD",
        25,
        (1,),
        {"fp32": (("avx2", 2 * 8 * 2),), "bf16": ()},
        "two 256-bit FMA pipes, no AVX-512",
        4.1,
        "EPYC 72F3",
        "AMD, Software Optimization Guide for AMD EPYC 7003 Processors (pub. "
        "56665): two 256-bit FMA pipes; Cutress, AnandTech, AMD 3rd Gen EPYC "
        "Milan review (2021-03-15), 7003 list: 72F3 boosts to 4.1 GHz, the "
        "fastest of the series",
        "2026-12",
    ),
    CpuCore(
        "Zen 4",
        "EPYC 9004 and 8004 (Genoa, Bergamo, Siena)",
        "AuthenticAMD",
        25,
        (16, 17, 160),
        {
            # AVX-512 is split into two 256-bit halves: no more than AVX2's rate
            "fp32": (("avx512f", 2 * 8 * 2), ("avx2", 2 * 8 * 2)),
            "bf16": (("avx512_bf16", 2 * 8 * 4),),
        },
        "AVX-512 on two 256-bit FMA pipes (a 512-bit op takes two passes)",
        4.4,
        "EPYC 9174F",
        "AMD, Software Optimization Guide for the AMD Zen4 Microarchitecture "
        "(pub. 57647): 512-bit instructions on 256-bit data paths, two FMA "
        "pipes; AMD EPYC 9174F specifications: max boost 4.4 GHz, the fastest "
        "of the 9004 series",
        "2026-12",
    ),
    CpuCore(
        "Golden Cove / Raptor Cove",
        "4th and 5th Gen Xeon Scalable (Sapphire Rapids, Emerald Rapids)",
        "GenuineIntel",
        6,
        (143, 207),
        {
            "fp32": (("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2)),
            # AMX: one 16x32 by 32x16 bf16 tile multiply (TDPBF16PS: 8,192
            # MACs, 16,384 FLOPs) every 16 cycles
            "bf16": (("amx_bf16", 16 * 16 * 32 * 2 // 16), ("avx512_bf16", 2 * 16 * 4)),
        },
        "two 512-bit FMA units and an AMX tile unit",
        4.8,
        "Xeon w9-3495X",
        "Intel ARK, 4th and 5th Gen Xeon Scalable: # of AVX-512 FMA units 2; "
        "Intel 64 and IA-32 Architectures Optimization Reference Manual, AMX: "
        "TDPBF16PS throughput 16 cycles; Intel ARK, Xeon w9-3495X (same family "
        "and model as Sapphire Rapids): max turbo 4.8 GHz, above every Xeon "
        "Scalable part of either generation",
        "2026-12",
    ),
)

# Parts whose own max boost the table has, by the name /proc/cpuinfo gives them.
CPU_MAX_BOOST_GHZ = {
    # Cutress, AnandTech, AMD 3rd Gen EPYC Milan review (2021-03-15), SKU list
    "EPYC 7763": 3.5,
    "EPYC 7713": 3.675,
    "EPYC 7713P": 3.675,
    "EPYC 7663": 3.5,
    "EPYC 7643": 3.6,
    "EPYC 7543": 3.7,
    "EPYC 7543P": 3.7,
    "EPYC 7513": 3.65,
    "EPYC 7453": 3.45,
    "EPYC 7443": 4.0,
    "EPYC 7443P": 4.0,
    "EPYC 7413": 3.6,
    "EPYC 7343": 3.9,
    "EPYC 7313": 3.7,
    "EPYC 7313P": 3.7,
    "EPYC 75F3": 4.0,
    "EPYC 74F3": 4.0,
    "EPYC 73F3": 4.0,
    "EPYC 72F3": 4.1,
    # AMD EPYC 9654 specifications
    "EPYC 9654": 3.7,
    "EPYC 9654P": 3.7,
}
CPU_MAX_BOOST_SOURCE = (
    "Cutress, AnandTech, AMD 3rd Gen EPYC Milan review (2021-03-15); AMD EPYC "
    "9654 specifications"
)

# A core the table does not know: at most two FMA units of the widest vector its
# flags name (no x86 core has more), at the fastest boost any x86 part is rated
# for. An upper bound, not an estimate.
_UNKNOWN_CPU_FLOPS_PER_CYCLE = {
    "fp32": (("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2), ("avx", 2 * 8 * 2)),
    "bf16": (("amx_bf16", 16 * 16 * 32 * 2 // 16), ("avx512_bf16", 2 * 16 * 4)),
}
X86_MAX_BOOST_GHZ = 6.2
X86_MAX_BOOST_PART = "Core i9-14900KS (Intel ARK: max turbo 6.2 GHz)"
CPU_DTYPES = tuple(_UNKNOWN_CPU_FLOPS_PER_CYCLE)


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the first processor."""

    vendor: str
    family: int | None
    model: int | None
    model_name: str
    flags: frozenset


def _parse_cpuinfo(text: str) -> CpuInfo:
    """The fields of /proc/cpuinfo (its first processor) the peak needs."""
    if not isinstance(text, str):
        raise ValueError(f"cpuinfo text must be a string, got {type(text).__name__}")

    def field_(name):
        m = re.search(rf"^{name}\s*:\s*(.*)$", text, re.M | re.I)
        return m.group(1).strip() if m else None

    def integer(name):
        v = field_(name)
        return int(v) if v is not None and v.isdigit() else None

    return CpuInfo(
        vendor=field_("vendor_id") or "",
        family=integer("cpu family"),
        model=integer("model"),
        model_name=field_("model name") or "",
        flags=frozenset((field_("flags") or "").split()),
    )


def _cpu_core(info: CpuInfo) -> CpuCore | None:
    """The table's row for this CPU's design, or None."""
    validate.instance_of("info", info, CpuInfo)
    for core in CPU_CORES:
        if (info.vendor, info.family) == (core.vendor, core.family) and (
            info.model in core.models
        ):
            return core
    return None


def _sku(model_name: str) -> str | None:
    m = re.search(r"\bEPYC\s+(\d\w*)", model_name)
    return f"EPYC {m.group(1)}" if m else None


def cpu_peak_from_cpuinfo(
    text: str, cores: int, dtype: str = "fp32"
) -> tuple[float, str]:
    """The nominal peak FLOP/s of ``cores`` cores of the CPU /proc/cpuinfo
    ``text`` describes, for ``dtype``, and how it was worked out.

    FLOPs per cycle come from the core design's row (vendor, family and
    model), using the best unit its flags enable; the clock is the SKU's cited
    max boost, or where the SKU is hidden or not in the table, the fastest max
    boost of any part of that design. A CPU the table has no row for gets
    two FMA units of the widest vector its flags name at the fastest boost of
    any x86 part: an upper bound, and the explanation says so. Raises
    ValueError where neither gives a figure.
    """
    validate.one_of("dtype", dtype, CPU_DTYPES)
    cores = validate.positive_int("cores", cores)
    info = _parse_cpuinfo(text)
    core = _cpu_core(info)
    rates = core.flops_per_cycle if core else _UNKNOWN_CPU_FLOPS_PER_CYCLE
    found = next(((f, r) for f, r in rates[dtype] if f in info.flags), None)
    if found is None and dtype == "bf16":
        # no bf16 unit: bf16 is converted and multiplied at the fp32 rate at best
        peak, how = cpu_peak_from_cpuinfo(text, cores, "fp32")
        return peak, f"{how}; no bf16 unit, so bf16 at the fp32 rate"
    if found is None:
        what = core.name if core else "this CPU"
        raise ValueError(
            f"{what} has none of the vector units the table knows for {dtype} "
            f"(vendor {info.vendor!r}, family {info.family}, model {info.model}), "
            "so it has no nominal peak"
        )
    flag, per_cycle = found
    if core is None:
        ghz = X86_MAX_BOOST_GHZ
        design = (
            f"{info.vendor} family {info.family} model {info.model}, not in the "
            f"table: at most two FMA units ({flag})"
        )
        clock = f"the fastest boost of any x86 part, {X86_MAX_BOOST_PART}"
    else:
        design = f"{core.name}, {core.parts}: {core.units} ({flag})"
        sku = _sku(info.model_name)
        if sku in CPU_MAX_BOOST_GHZ:
            ghz, clock = CPU_MAX_BOOST_GHZ[sku], f"the {sku}'s cited max boost"
        else:
            ghz = core.max_boost_ghz
            why = "the SKU is hidden" if sku is None else f"no {sku} in the table"
            clock = (
                f"{why}, so the fastest {core.name} part's max boost, "
                f"{core.max_boost_part}"
            )
    peak = cores * ghz * 1e9 * per_cycle
    how = (
        f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle: {design}; "
        f"clock: {clock}, an upper bound"
    )
    return peak, how


def cpu_nominal_peak_flops_per_s(dtype: str = "fp32") -> tuple[float, str]:
    """This CPU's nominal peak FLOP/s for ``dtype`` and how it was worked out
    (cpu_peak_from_cpuinfo on /proc/cpuinfo, for the cores this process may
    run on). Raises ValueError where /proc/cpuinfo cannot be read or does not
    say enough to compute one.
    """
    validate.one_of("dtype", dtype, CPU_DTYPES)
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(
            f"cannot read /proc/cpuinfo ({e}), so this CPU has no nominal peak"
        ) from None
    return cpu_peak_from_cpuinfo(text, len(os.sched_getaffinity(0)), dtype)
