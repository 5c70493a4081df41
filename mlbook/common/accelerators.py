"""Accelerator specifications in one table, and their interconnects in another.

Every hardware number the book uses lives here, once, with its source and the
date it was read. Peaks are dense tensor-core throughput (no 2:4 sparsity).
Memory sizes are the vendor's decimal gigabytes (10^9 bytes), as printed on
the datasheets; the book converts to GiB where it reports memory.

Nothing here imports torch; the throughput probes that measure a device live
in mlbook.common_torch (device.py, mamf.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from mlbook.common import validate
from mlbook.common.units import GIGA, TERA

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Accelerator:
    """One device's nominal numbers. peak_flops_per_s maps a dtype to FLOP/s."""

    name: str
    peak_flops_per_s: dict = field(hash=False)
    hbm_bytes: float
    hbm_bytes_per_s: float
    source: str
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
            32 * GIGA,
            900 * GIGA,
            "NVIDIA Tesla V100 datasheet (SXM2, 32 GB)",
            "2026-11",
        ),
        Accelerator(
            "A100 SXM",
            {
                "fp32": 19.5 * TERA,
                "tf32": 156 * TERA,
                "bf16": 312 * TERA,
                "fp16": 312 * TERA,
            },
            80 * GIGA,
            2039 * GIGA,
            "NVIDIA A100 Tensor Core GPU datasheet (SXM 80 GB, dense)",
            "2026-11",
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
            80 * GIGA,
            3350 * GIGA,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense = half "
            "the sparse figure)",
            "2026-11",
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
            80 * GIGA,
            2000 * GIGA,
            "NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)",
            "2026-11",
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
            141 * GIGA,
            4800 * GIGA,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense): H100 compute, "
            "more and faster HBM3e",
            "2026-11",
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
# cycle depends on the vector units, which /proc/cpuinfo names as flags. The
# figures assume two FMA ports per core (true of recent server cores; some
# parts have one, which halves the peak): an FMA is 2 FLOPs per lane.
_CPU_FLOPS_PER_CYCLE = {
    # dtype: [(flag that enables it, FLOPs per cycle per core), ...] best first
    "fp32": [("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2)],
    # AMX: one 16x32 by 32x16 bf16 tile multiply (16 384 MACs) per 16 cycles.
    "bf16": [("amx_bf16", 1024), ("avx512_bf16", 2 * 32 * 2)],
}


def _cpuinfo() -> tuple[set, float | None, int]:
    flags: set = set()
    mhz = None
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return flags, None, os.cpu_count() or 1
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    if m:
        flags = set(m.group(1).split())
    m = re.search(r"^bogomips\s*:\s*([\d.]+)$", text, re.M | re.I)
    if m:  # on x86 BogoMIPS is twice the base (nominal) clock in MHz
        mhz = float(m.group(1)) / 2
    return flags, mhz, len(os.sched_getaffinity(0))


def cpu_nominal_peak_flops_per_s(dtype: str = "fp32") -> tuple[float, str]:
    """This CPU's nominal peak FLOP/s for ``dtype`` and how it was worked out.

    Returns (flops_per_s, explanation). Raises ValueError where /proc/cpuinfo
    does not say enough to compute one.
    """
    validate.one_of("dtype", dtype, tuple(_CPU_FLOPS_PER_CYCLE))
    flags, mhz, cores = _cpuinfo()
    if mhz is None:
        raise ValueError(
            "cannot read this CPU's clock from /proc/cpuinfo, so it has no nominal peak"
        )
    for flag, per_cycle in _CPU_FLOPS_PER_CYCLE[dtype]:
        if flag in flags:
            peak = cores * mhz * 1e6 * per_cycle
            how = (
                f"{cores} cores x {mhz / 1000:.2f} GHz x {per_cycle} "
                f"FLOP/cycle ({flag})"
            )
            return peak, how
    if dtype == "bf16":  # no bf16 units: bf16 runs at best at the fp32 rate
        return cpu_nominal_peak_flops_per_s("fp32")
    raise ValueError(
        f"this CPU has none of the vector units the table knows for {dtype}"
    )
