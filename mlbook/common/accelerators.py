"""Accelerator specifications in one table, and their interconnects in another.

Every hardware number the book uses lives here, once, with its source and the
date it was read. Peaks are dense tensor-core throughput (no 2:4 sparsity).

GPU memory capacities are binary: DRAM dies are made and counted in whole
gibibits, so a stack, and a card, holds a whole number of GiB however many
stacks it has (an H200 has six, an H100 SXM five active). The "80 GB" of an
A100 or H100 is 80 GiB (2^30 bytes), the "141 GB" of an H200 141 GiB.
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

# What a nominal peak rests on, as a short label a page can quote:
# "datasheet": a GPU's table row; "upper bound": cores x the fastest cited boost
# clock x the FLOPs a cycle of a core design the table knows; "assumed clock": a
# core design the table does not know, its FLOPs a cycle read from its flags and
# its clock assumed (the fastest of any x86 part); "unknown": nothing to compute
# one from (an ARM core or a GPU the table has no row for, no /proc/cpuinfo).
# A table row whose datasheet figures are another part's says so with its own
# basis: the A10G's are the A10's, likely above its own ("upper bound").
# A share of a datasheet peak is an efficiency; a share of a bound or of an
# assumed peak is only a lower limit on one; an unknown peak gives no share.
# (A share of a measured ceiling does not depend on the peak at all.)
PEAK_BASES = ("datasheet", "upper bound", "assumed clock", "unknown")
# What a figure or a table calls a peak of each basis, where it names it.
PEAK_LABELS = {
    "datasheet": "datasheet peak",
    "upper bound": "upper-bound peak",
    "assumed clock": "assumed-clock peak",
    "unknown": "unknown peak",
}


@dataclass(frozen=True)
class NominalPeak:
    """A device's nominal peak FLOP/s for one dtype (None where unknown), how
    it was worked out, and its basis (one of PEAK_BASES). It unpacks as
    ``flops_per_s, how``."""

    flops_per_s: float | None
    how: str
    basis: str

    def __post_init__(self):
        validate.one_of("basis", self.basis, PEAK_BASES)
        if (self.flops_per_s is None) != (self.basis == "unknown"):
            raise ValueError(
                f"a peak of {self.flops_per_s!r} cannot have the basis "
                f"{self.basis!r}: only an unknown peak is None"
            )
        if self.flops_per_s is not None:
            validate.positive("flops_per_s", self.flops_per_s)

    def __iter__(self):
        return iter((self.flops_per_s, self.how))

    def __getitem__(self, i):
        return (self.flops_per_s, self.how)[i]

    def __len__(self) -> int:
        return 2

    @property
    def known(self) -> bool:
        return self.flops_per_s is not None

    @property
    def label(self) -> str:
        """What to call this peak where a figure names it ("datasheet peak",
        "upper-bound peak", ...): from its basis, never assumed."""
        return PEAK_LABELS[self.basis]

    @property
    def share_is_efficiency(self) -> bool:
        """Whether a share of this peak is an efficiency (a datasheet peak);
        of an upper bound or an assumed clock it is only a lower limit on one,
        and of an unknown peak there is none."""
        return self.basis == "datasheet"

    def share(self, flops_per_s: float) -> float:
        """``flops_per_s`` as a fraction of this peak; NaN where it is unknown."""
        return flops_per_s / self.flops_per_s if self.known else float("nan")


@dataclass(frozen=True)
class Accelerator:
    """One device's nominal numbers. peak_flops_per_s maps a dtype to FLOP/s.

    hbm_bytes is the HBM on the card (binary: the datasheet's "80 GB" is 80
    GiB); hbm_usable_bytes is what nvidia-smi reports as its total, the most
    a process can have; hbm_usable_source says where that was read. basis is
    what the peaks rest on (PEAK_BASES): "datasheet" for the part's own
    datasheet, "upper bound" where the figures are a bigger part's.
    """

    name: str
    peak_flops_per_s: dict = field(hash=False)
    hbm_bytes: float
    hbm_usable_bytes: float
    hbm_bytes_per_s: float
    source: str
    hbm_usable_source: str
    as_of: str
    basis: str = "datasheet"

    def __post_init__(self):
        validate.one_of("basis", self.basis, ("datasheet", "upper bound"))

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
        # The rows below are PCIe cards and newer modules. GDDR cards keep
        # their memory in the same hbm_ fields: their "24 GB" is 24 GiB too
        # (nvidia-smi on a GeForce RTX 3090 reports 24,576 MiB, all of it).
        # GeForce and RTX workstation datasheets quote FP16/BF16 tensor rates
        # with FP16 accumulate; training accumulates in FP32, which GeForce
        # parts run at half that rate, so their rows keep the FP32-accumulate
        # figure. Data-center and workstation Ada/Ampere parts run FP32
        # accumulate at the full rate.
        # NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column (per GPU, PCIe with
        # NVLink bridge): FP32 60; TF32 835, BF16/FP16 1,671, FP8 3,341 TFLOPS with
        # sparsity, halved here; 94 GB HBM3, 3.9 TB/s. No copy
        # of the datasheet text; 94 GB and 3.9 TB/s were confirmed on third-party spec
        # pages, the peaks were not
        Accelerator(
            "H100 NVL",
            {
                "fp32": 60 * TERA,
                "tf32": 417.5 * TERA,
                "bf16": 835.5 * TERA,
                "fp16": 835.5 * TERA,
                "fp8": 1670.5 * TERA,
            },
            94 * GIB,
            95_830 * MIB,
            3900 * GIGA,
            "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column (sparse halved)",
            "nvidia-smi on an H100 NVL: 95,830 MiB (NVIDIA/gpu-admin-tools#4, "
            "driver 535.183.01)",
            "2026-12",
        ),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column (PCIe, 600 W): the H100
        # NVL's compute (FP32 60; TF32 835, BF16/FP16 1,671, FP8 3,341 TFLOPS with
        # sparsity, halved here) with 141 GB HBM3e at 4.8 TB/s. No copy of the datasheet
        # text; 141 GB and 4.8 TB/s were confirmed on third-
        # party pages, the peaks were not
        Accelerator(
            "H200 NVL",
            {
                "fp32": 60 * TERA,
                "tf32": 417.5 * TERA,
                "bf16": 835.5 * TERA,
                "fp16": 835.5 * TERA,
                "fp8": 1670.5 * TERA,
            },
            141 * GIB,
            143_771 * MIB,
            4800 * GIGA,
            "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column (sparse halved)",
            "143,771 MiB, as the SXM part, reported for H200 NVL machines in "
            "public run notes (a LeRobot reproduction README, driver 570.195.03; "
            "a vLLM probe log, 8 x H200 NVL); no raw nvidia-smi printout found",
            "2026-12",
        ),
        # NVIDIA HGX B200 datasheet, per-GPU column: FP32 75 TFLOPS; TF32 2.2, FP16/BF16
        # 4.5, FP8 9 PFLOPS with sparsity, halved here; 180 GB HBM3e at 7.7 TB/s (the
        # DGX B200's 1,440 GB and 64 TB/s for eight give 8 TB/s; the per-GPU 7.7 is
        # kept, and pytorch/ao#4002 measured a 7,680-bit bus at 3,996 MHz, 7.67 TB/s)
        Accelerator(
            "B200 SXM",
            {
                "fp32": 75 * TERA,
                "tf32": 1100 * TERA,
                "bf16": 2250 * TERA,
                "fp16": 2250 * TERA,
                "fp8": 4500 * TERA,
            },
            180 * GIB,
            183_359 * MIB,
            7700 * GIGA,
            "NVIDIA HGX B200 datasheet, per-GPU column (sparse halved)",
            "nvidia-smi on a B200: 183,359 MiB (NVIDIA/TensorRT-LLM#10278, "
            "driver 580.95.05)",
            "2026-12",
        ),
        # NVIDIA L40S datasheet (dense column, as reproduced by resellers): FP32 91.6;
        # TF32 183; BF16/FP16 362.05; FP8 733 TFLOPS (366, 733 and 1,466 with sparsity);
        # 48 GB GDDR6 with ECC at 864 GB/s
        Accelerator(
            "L40S PCIe",
            {
                "fp32": 91.6 * TERA,
                "tf32": 183 * TERA,
                "bf16": 362.05 * TERA,
                "fp16": 362.05 * TERA,
                "fp8": 733 * TERA,
            },
            48 * GIB,
            46_068 * MIB,
            864 * GIGA,
            "NVIDIA L40S datasheet (dense column)",
            "nvidia-smi on an L40S: 46,068 MiB (akash-network/provider-configs#99, "
            "driver 595.71.05; modal-labs/modal-client#2797)",
            "2026-12",
        ),
        # NVIDIA L4 datasheet: FP32 30.3; TF32 120, BF16/FP16 242, FP8 485 TFLOPS with
        # sparsity, halved here; 24 GB GDDR6 at 300 GB/s (the TF32 120 and 300 GB/s seen
        # in a reseller's copy of the datasheet; the other sparse figures are the
        # datasheet's as recalled, not confirmed against a copy of it)
        Accelerator(
            "L4 PCIe",
            {
                "fp32": 30.3 * TERA,
                "tf32": 60 * TERA,
                "bf16": 121 * TERA,
                "fp16": 121 * TERA,
                "fp8": 242.5 * TERA,
            },
            24 * GIB,
            23_034 * MIB,
            300 * GIGA,
            "NVIDIA L4 datasheet (sparse halved)",
            "nvidia-smi on an L4: 23,034 MiB (speaches-ai/speaches#438; "
            "modal-labs/modal-client#2797)",
            "2026-12",
        ),
        # NVIDIA A10 datasheet (dense), used for the A10G: NVIDIA publishes no A10G
        # datasheet (an AWS-only part) and no NVIDIA figure for it was found. Baseten's
        # A10-vs-A10G comparison says both have 24 GB GDDR6 at 600 GB/s and that the
        # A10G has less tensor and more CUDA-core throughput than the A10; third-party
        # tables disagree (62.5, 70 or 125 TFLOPS BF16). So the tensor peaks are the
        # A10's, likely above the A10G's: an MFU against them may understate
        Accelerator(
            "A10G PCIe",
            {
                "fp32": 31.2 * TERA,
                "tf32": 62.5 * TERA,
                "bf16": 125 * TERA,
                "fp16": 125 * TERA,
            },
            24 * GIB,
            23_028 * MIB,
            600 * GIGA,
            "the NVIDIA A10 datasheet's figures (NVIDIA publishes none for the "
            "A10G), likely above the A10G's own",
            "nvidia-smi on an A10G: 23,028 MiB (NVIDIA/DCGM#232, driver 535.247.01)",
            "2026-12",
            basis="upper bound",
        ),
        # NVIDIA T4 datasheet: single precision 8.1 TFLOPS; mixed precision (FP16
        # products, FP32 accumulate) 65 TFLOPS; no BF16, TF32 or FP8 on Turing; 16 GB
        # GDDR6. 320 GB/s is the 256-bit bus at 10 Gbps from third-party spec tables;
        # the datasheet's own bandwidth figure was not found
        Accelerator(
            "T4 PCIe",
            {"fp32": 8.1 * TERA, "fp16": 65 * TERA},
            16 * GIB,
            15_360 * MIB,
            320 * GIGA,
            "NVIDIA T4 datasheet (FP16 products, FP32 accumulate)",
            "nvidia-smi on a T4: 15,360 MiB (modal-labs/modal-client#2797)",
            "2026-12",
        ),
        # NVIDIA Ampere GA102 GPU architecture whitepaper, appendix A (GeForce RTX 3090,
        # dense): FP32 35.6; TF32 35.6; FP16 and BF16 tensor with FP32 accumulate 71
        # TFLOPS (the FP16-accumulate 142 is not what training uses); no FP8; 24 GB
        # GDDR6X at 936 GB/s
        Accelerator(
            "GeForce RTX 3090",
            {
                "fp32": 35.6 * TERA,
                "tf32": 35.6 * TERA,
                "bf16": 71 * TERA,
                "fp16": 71 * TERA,
            },
            24 * GIB,
            24_576 * MIB,
            936 * GIGA,
            "NVIDIA GA102 whitepaper, app. A (FP32 accumulate, not FP16-accumulate)",
            "nvidia-smi on a GeForce RTX 3090: 24,576 MiB "
            "(noonghunna/club-3090#1128, driver 595.84)",
            "2026-12",
        ),
        # NVIDIA Ada GPU architecture whitepaper, appendix (GeForce RTX 4090, dense):
        # FP32 82.6; TF32 82.6; FP16 and BF16 tensor with FP32 accumulate 165.2, FP8
        # with FP32 accumulate 330.3 TFLOPS (the FP16-accumulate 330.3 and 660.6 are not
        # what training uses); 24 GB GDDR6X at 1,008 GB/s
        Accelerator(
            "GeForce RTX 4090",
            {
                "fp32": 82.6 * TERA,
                "tf32": 82.6 * TERA,
                "bf16": 165.2 * TERA,
                "fp16": 165.2 * TERA,
                "fp8": 330.3 * TERA,
            },
            24 * GIB,
            24_564 * MIB,
            1008 * GIGA,
            "NVIDIA Ada whitepaper (FP32 accumulate, not FP16-accumulate)",
            "nvidia-smi on a GeForce RTX 4090: 24,564 MiB (RLinf/RLinf#255, "
            "driver 550.163.01)",
            "2026-12",
        ),
        # NVIDIA Ada GPU architecture whitepaper, appendix (RTX 6000 Ada Generation,
        # dense; workstation parts run FP32 accumulate at full rate) and its datasheet
        # (FP32 91.1 TFLOPS, 1,457 TFLOPS FP8 tensor with sparsity, 48 GB GDDR6 with ECC
        # at 960 GB/s): TF32 182.1, FP16/BF16 364.2, FP8 728.5 TFLOPS
        Accelerator(
            "RTX 6000 Ada",
            {
                "fp32": 91.1 * TERA,
                "tf32": 182.1 * TERA,
                "bf16": 364.2 * TERA,
                "fp16": 364.2 * TERA,
                "fp8": 728.5 * TERA,
            },
            48 * GIB,
            49_140 * MIB,
            960 * GIGA,
            "NVIDIA Ada GPU architecture whitepaper; RTX 6000 Ada datasheet",
            "nvidia-smi on an RTX 6000 Ada Generation: 49,140 MiB (a two-GPU "
            "printout in an Advantech EdgeSync container README)",
            "2026-12",
        ),
        # NVIDIA Ampere GA102 GPU architecture whitepaper, appendix C (RTX A6000, dense;
        # a workstation part, FP32 accumulate at full rate): FP32 38.7; TF32 77.4;
        # FP16/BF16 154.8 TFLOPS; no FP8; 48 GB GDDR6 with ECC at 768 GB/s
        Accelerator(
            "RTX A6000",
            {
                "fp32": 38.7 * TERA,
                "tf32": 77.4 * TERA,
                "bf16": 154.8 * TERA,
                "fp16": 154.8 * TERA,
            },
            48 * GIB,
            49_140 * MIB,
            768 * GIGA,
            "NVIDIA Ampere GA102 whitepaper, appendix C",
            "nvidia-smi on an RTX A6000: 49,140 MiB (the printout in Sionna's "
            "'Discover Sionna' tutorial, driver 535.183.01)",
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
    "B200": "B200 SXM",
    "L40S": "L40S PCIe",
    "L4": "L4 PCIe",
    "A10G": "A10G PCIe",
    "T4": "T4 PCIe",
    "RTX 3090": "GeForce RTX 3090",
    "RTX 4090": "GeForce RTX 4090",
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


# How torch names the GPUs the table has rows for, as upper-case words: the
# words of the chip, the words after them that name another row (or another
# card the table has no row for: None), and the row. A name matches on whole
# words, so "A100" is not found in "RTX A1000", nor "H200" in "GH200", nor
# "L4" in "L40S"; a GH200 (an H100/H200-class GPU with its own memory) and a
# GB200 (a B200 at higher power) are None: the table has no row for them.
_GEFORCE_VARIANTS = (("TI", None), ("SUPER", None), ("D", None), ("LAPTOP", None))
_CUDA_NAMES = (
    (("H100",), (("NVL", "H100 NVL"), ("PCIE", "H100 PCIe")), "H100 SXM"),
    (("H200",), (("NVL", "H200 NVL"),), "H200 SXM"),
    (("A100",), (), "A100 SXM"),
    (("V100",), (), "V100 SXM2"),
    (("B200",), (), "B200 SXM"),
    (("L40S",), (), "L40S PCIe"),
    (("L4",), (), "L4 PCIe"),
    (("A10G",), (), "A10G PCIe"),
    (("T4",), (), "T4 PCIe"),
    (("RTX", "3090"), _GEFORCE_VARIANTS, "GeForce RTX 3090"),
    (("RTX", "4090"), _GEFORCE_VARIANTS, "GeForce RTX 4090"),
    # "RTX 6000 Ada Generation"; "Quadro RTX 6000" (Turing) lacks the "Ada"
    (("RTX", "6000", "ADA"), (), "RTX 6000 Ada"),
    (("RTX", "A6000"), (), "RTX A6000"),
)


def match_cuda_name(cuda_name: str) -> Accelerator | None:
    """The table row for a CUDA device name such as 'NVIDIA H100 80GB HBM3',
    or None when the table has no row for it (an unknown GPU: its peak is
    unknown, not some other GPU's)."""
    if not isinstance(cuda_name, str):
        raise ValueError(
            "cuda_name must be a string such as 'NVIDIA H100 80GB HBM3', "
            f"got {cuda_name!r}"
        )
    words = re.findall(r"[A-Z0-9]+", cuda_name.upper())
    for chip, variants, row in _CUDA_NAMES:
        n = len(chip)
        for i in range(len(words) - n + 1):
            if tuple(words[i : i + n]) == chip:
                after = words[i + n :]
                for word, other in variants:
                    if word in after:
                        return None if other is None else ACCELERATORS[other]
                return ACCELERATORS[row]
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
# design (vendor, family and model in /proc/cpuinfo; for Intel's AMX parts,
# whose model a hypervisor may misreport, the amx_bf16 flag), and the flags
# then say which of its units the kernel may use. An FMA is 2 FLOPs per lane;
# a bf16 dot product (VDPBF16PS) 4 FLOPs per fp32 lane (two products, two
# adds).
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
    # a flag only this design (and its successors of the same layout) has, for
    # a model number the table does not list
    marker_flag: str | None = None


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
        "Zen 5",
        "EPYC 9005 (Turin, Turin Dense)",
        "AuthenticAMD",
        26,
        (2, 17),
        {
            # the server core executes AVX-512 on full 512-bit data paths
            "fp32": (("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2)),
            "bf16": (("avx512_bf16", 2 * 16 * 4),),
        },
        "two 512-bit FMA pipes",
        5.0,
        "EPYC 9175F",
        "AMD, Software Optimization Guide for the AMD Zen5 Microarchitecture: "
        "512-bit data paths, two FMA pipes; AMD EPYC 9175F specifications: "
        "max boost 5.0 GHz, the fastest of the 9005 series",
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
        # Under some hypervisors an AMX Xeon reports model 167 (Rocket Lake's
        # id); no core without this layout has AMX
        marker_flag="amx_bf16",
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

# A core the table does not know: two FMA units of the widest vector its flags
# name (a common layout, though not a bound: a design may have more), at an
# assumed clock, the fastest boost any x86 part is rated for. The page says
# the clock is assumed and shows no share of this peak as an efficiency.
_UNKNOWN_CPU_FLOPS_PER_CYCLE = {
    "fp32": (("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2), ("avx", 2 * 8 * 2)),
    "bf16": (("amx_bf16", 16 * 16 * 32 * 2 // 16), ("avx512_bf16", 2 * 16 * 4)),
}
# What each flag's rate above assumes, in words, for a design the table lacks.
_UNKNOWN_CPU_UNITS = {
    "amx_bf16": "an AMX tile unit assumed (one TDPBF16PS, 16,384 FLOPs, every 16 "
    "cycles)",
    "avx512_bf16": "two 512-bit FMA units assumed (VDPBF16PS)",
    "avx512f": "two 512-bit FMA units assumed",
    "avx2": "two 256-bit FMA units assumed",
    "avx": "two 256-bit FMA units assumed",
}
X86_MAX_BOOST_GHZ = 6.2
X86_MAX_BOOST_PART = "Core i9-14900KS (Intel ARK: max turbo 6.2 GHz)"
CPU_DTYPES = tuple(_UNKNOWN_CPU_FLOPS_PER_CYCLE)

# ARM cores list their vector units under "Features" in /proc/cpuinfo (asimd
# is NEON; sve, sve2; bf16 the BFloat16 dot and matrix instructions) and give
# no clock there, and their FMA pipe counts differ by design, so the book
# computes no nominal peak for them: it names the units and holds a step
# against the measured ceiling alone.
ARM_FEATURES = ("asimd", "sve", "sve2", "bf16", "i8mm")


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the first processor. ``features`` is
    ARM's list of units (empty on x86, whose list is ``flags``)."""

    vendor: str
    family: int | None
    model: int | None
    model_name: str
    flags: frozenset
    features: frozenset = frozenset()
    implementer: str = ""  # ARM's "CPU implementer" (0x41 is Arm Ltd.)
    part: str = ""  # ARM's "CPU part" (the core design's number)


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
        features=frozenset((field_("Features") or "").split()),
        implementer=field_("CPU implementer") or "",
        part=field_("CPU part") or "",
    )


def _cpu_core(info: CpuInfo) -> CpuCore | None:
    """The table's row for this CPU's design, or None: by model number, else
    by a flag only that design's layout has."""
    validate.instance_of("info", info, CpuInfo)
    same = [c for c in CPU_CORES if (info.vendor, info.family) == (c.vendor, c.family)]
    for core in same:
        if info.model in core.models:
            return core
    for core in same:
        if core.marker_flag and core.marker_flag in info.flags:
            return core
    return None


def _sku(model_name: str) -> str | None:
    m = re.search(r"\bEPYC\s+(\d\w*)", model_name)
    return f"EPYC {m.group(1)}" if m else None


def describe_cpu(info: CpuInfo) -> str:
    """What a page can say of this CPU: the design the table matched, else
    the vendor, family and model, or an ARM core's vector features."""
    validate.instance_of("info", info, CpuInfo)
    core = _cpu_core(info)
    if core is not None:
        return f"{core.name} ({core.parts})"
    if info.features:
        units = [f for f in ARM_FEATURES if f in info.features]
        part = f" part {info.part}" if info.part else ""
        return f"ARM core{part} ({', '.join(units) or 'no vector units listed'})"
    if info.vendor:
        return f"{info.vendor} family {info.family} model {info.model}"
    return "a CPU /proc/cpuinfo does not describe"


def cpu_peak_from_cpuinfo(text: str, cores: int, dtype: str = "fp32") -> NominalPeak:
    """The nominal peak FLOP/s of ``cores`` cores of the CPU /proc/cpuinfo
    ``text`` describes, for ``dtype``, how it was worked out, and its basis.

    FLOPs per cycle come from the core design's row (vendor, family and
    model), using the best unit its flags enable; the clock is the SKU's cited
    max boost, or where the SKU is hidden or not in the table, the fastest max
    boost of any part of that design: an upper bound. An x86 design the table
    has no row for gets two FMA units of the widest vector its flags name at
    an assumed clock, the fastest boost of any x86 part (basis "assumed
    clock"). An ARM core, or an x86 one with no vector unit the table knows,
    has an unknown peak (None), and the explanation names what was read.
    """
    validate.one_of("dtype", dtype, CPU_DTYPES)
    cores = validate.positive_int("cores", cores)
    info = _parse_cpuinfo(text)
    core = _cpu_core(info)
    what = describe_cpu(info)
    if info.features and not info.flags:
        return NominalPeak(
            None,
            f"{what}: the table has no row for ARM core designs and /proc/cpuinfo "
            "gives no clock, so no nominal peak; the step is held against the "
            "measured ceiling",
            "unknown",
        )
    rates = core.flops_per_cycle if core else _UNKNOWN_CPU_FLOPS_PER_CYCLE
    found = next(((f, r) for f, r in rates[dtype] if f in info.flags), None)
    if found is None and dtype == "bf16":
        # no bf16 unit: bf16 is converted and multiplied at the fp32 rate at best
        fp32 = cpu_peak_from_cpuinfo(text, cores, "fp32")
        how = f"{fp32.how}; no bf16 unit, so bf16 at the fp32 rate"
        return NominalPeak(fp32.flops_per_s, how, fp32.basis)
    if found is None:
        return NominalPeak(
            None,
            f"{what} has none of the vector units the table knows for {dtype}, "
            "so no nominal peak; the step is held against the measured ceiling",
            "unknown",
        )
    flag, per_cycle = found
    if core is None:
        ghz, basis = X86_MAX_BOOST_GHZ, "assumed clock"
        design = f"{what}, not in the table: {_UNKNOWN_CPU_UNITS[flag]} ({flag})"
        clock = f"assumed, the fastest boost of any x86 part, {X86_MAX_BOOST_PART}"
        # the units are assumed: a design may have more, so this is no bound
        bound = "an estimate, not a bound"
    else:
        basis = "upper bound"
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
        bound = "an upper bound"
    peak = cores * ghz * 1e9 * per_cycle
    how = (
        f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle: {design}; "
        f"clock: {clock}; {bound}"
    )
    return NominalPeak(peak, how, basis)


def usable_cpus() -> frozenset[int]:
    """The CPUs (logical cores) this process may run on: its affinity where
    the OS has one (Linux), else every CPU the OS reports (macOS, Windows)."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """How many CPU cores this process may run on (``usable_cpus``)."""
    return len(usable_cpus())


def read_cpuinfo() -> str | None:
    """/proc/cpuinfo's text, or None where there is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return None


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name: the first non-empty ``model name`` of
    ``cpuinfo`` (by default /proc/cpuinfo's), else what the platform module
    says (the processor, or the machine type), else "unknown"."""
    import platform

    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    m = re.search(r"^model name[ \t]*:[ \t]*(.*\S)", text or "", re.M)
    if m:
        return m.group(1)
    return platform.processor() or platform.machine() or "unknown"


def cpu_nominal_peak_flops_per_s(dtype: str = "fp32") -> NominalPeak:
    """This CPU's nominal peak FLOP/s for ``dtype`` (cpu_peak_from_cpuinfo on
    /proc/cpuinfo, for the cores this process may run on). Where there is no
    /proc/cpuinfo the peak is unknown (None), and says so."""
    validate.one_of("dtype", dtype, CPU_DTYPES)
    text = read_cpuinfo()
    if text is None:
        return NominalPeak(
            None,
            "no /proc/cpuinfo on this system, so no nominal peak; the step is "
            "held against the measured ceiling",
            "unknown",
        )
    return cpu_peak_from_cpuinfo(text, usable_cores(), dtype)
