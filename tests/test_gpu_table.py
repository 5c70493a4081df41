"""The GPU rows readers have (T4 to B200) against their datasheets, and the
torch device names that find them. The numbers are typed here from the
sources in the comments, not read back from the table."""

from __future__ import annotations

import pytest

from mlbook.common import accelerators as hardware
from mlbook.common_torch import device as devices

T = 1e12

# Dense peaks in TFLOP/s. Where a datasheet prints only the 2:4-sparse
# figure, the dense one is half of it; GeForce tensor rates are the
# FP32-accumulate ones (the FP16-accumulate rate is twice that).
DATASHEET_TFLOPS = {
    # NVIDIA T4 datasheet: FP32 8.1, mixed precision (FP16/FP32) 65
    "T4 PCIe": {"fp32": 8.1, "fp16": 65},
    # NVIDIA L4 datasheet: FP32 30.3; sparse TF32 120, FP16/BF16 242, FP8 485
    "L4 PCIe": {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5},
    # NVIDIA A10 datasheet (no A10G datasheet exists): 31.2, 62.5, 125, 125
    "A10G PCIe": {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125},
    # NVIDIA L40S datasheet: FP32 91.6; dense TF32 183, FP16/BF16 362.05, FP8 733
    "L40S PCIe": {
        "fp32": 91.6,
        "tf32": 183,
        "bf16": 362.05,
        "fp16": 362.05,
        "fp8": 733,
    },
    # Ampere GA102 whitepaper, appendix A: 35.6; TF32 35.6; FP32-accumulate 71
    "GeForce RTX 3090": {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71},
    # Ada whitepaper: 82.6; TF32 82.6; FP32-accumulate FP16/BF16 165.2, FP8 330.3
    "GeForce RTX 4090": {
        "fp32": 82.6,
        "tf32": 82.6,
        "bf16": 165.2,
        "fp16": 165.2,
        "fp8": 330.3,
    },
    # Ada whitepaper / RTX 6000 Ada datasheet: 91.1; 182.1; 364.2; FP8 1,457 sparse
    "RTX 6000 Ada": {
        "fp32": 91.1,
        "tf32": 182.1,
        "bf16": 364.2,
        "fp16": 364.2,
        "fp8": 728.5,
    },
    # Ampere GA102 whitepaper, appendix C (RTX A6000): 38.7; 77.4; 154.8
    "RTX A6000": {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8},
    # HGX B200 datasheet, per GPU: FP32 75; sparse TF32 2.2, BF16 4.5, FP8 9 PFLOPS
    "B200 SXM": {"fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500},
    # H100 datasheet, NVL column: FP32 60; sparse TF32 835, BF16 1,671, FP8 3,341
    "H100 NVL": {
        "fp32": 60,
        "tf32": 417.5,
        "bf16": 835.5,
        "fp16": 835.5,
        "fp8": 1670.5,
    },
    # H200 datasheet, NVL column: the same compute as the H100 NVL
    "H200 NVL": {
        "fp32": 60,
        "tf32": 417.5,
        "bf16": 835.5,
        "fp16": 835.5,
        "fp8": 1670.5,
    },
}

# The card's memory (its "GB" read as GiB), nvidia-smi's total in MiB (the
# issue or page each came from is in the row's hbm_usable_source), and the
# datasheet bandwidth in GB/s.
MEMORY = {
    "T4 PCIe": (16, 15_360, 320),  # modal-labs/modal-client#2797
    "L4 PCIe": (24, 23_034, 300),  # speaches-ai/speaches#438
    "A10G PCIe": (24, 23_028, 600),  # NVIDIA/DCGM#232
    "L40S PCIe": (48, 46_068, 864),  # akash-network/provider-configs#99
    "GeForce RTX 3090": (24, 24_576, 936),  # noonghunna/club-3090#1128
    "GeForce RTX 4090": (24, 24_564, 1008),  # RLinf/RLinf#255
    "RTX 6000 Ada": (48, 49_140, 960),
    "RTX A6000": (48, 49_140, 768),
    "B200 SXM": (180, 183_359, 7700),  # NVIDIA/TensorRT-LLM#10278
    "H100 NVL": (94, 95_830, 3900),  # NVIDIA/gpu-admin-tools#4
    "H200 NVL": (141, 143_771, 4800),
}


@pytest.mark.parametrize("name", sorted(DATASHEET_TFLOPS))
def test_new_rows_carry_the_datasheet_peaks_and_no_others(name):
    row = hardware.ACCELERATORS[name]
    expected = DATASHEET_TFLOPS[name]
    assert set(row.peak_flops_per_s) == set(expected)
    for dtype, tflops in expected.items():
        assert row.peak(dtype) == pytest.approx(tflops * T, rel=1e-12)


@pytest.mark.parametrize("name", sorted(MEMORY))
def test_new_rows_memory_is_binary_and_the_usable_part_is_nvidia_smis(name):
    gib, smi_mib, gb_per_s = MEMORY[name]
    row = hardware.ACCELERATORS[name]
    assert row.hbm_bytes == gib * 2**30
    assert row.hbm_usable_bytes == smi_mib * 2**20
    # the driver keeps some of the card, and what it hands out is more than
    # the decimal reading of the datasheet: so the datasheet's GB are GiB
    assert gib * 1e9 < row.hbm_usable_bytes <= row.hbm_bytes
    assert row.hbm_bytes_per_s == gb_per_s * 1e9
    assert row.source and row.hbm_usable_source and row.as_of == "2026-12"


def test_geforce_rows_say_their_tensor_rate_is_the_fp32_accumulate_one():
    for name in ("GeForce RTX 3090", "GeForce RTX 4090"):
        source = hardware.ACCELERATORS[name].source
        assert "FP32 accumulate" in source and "FP16-accumulate" in source


def test_turing_has_no_bf16_and_ampere_no_fp8():
    with pytest.raises(ValueError, match="T4 PCIe has no bf16 peak"):
        hardware.peak_flops_per_s("T4", "bf16")
    for name in ("RTX 3090", "RTX A6000", "A10G"):
        with pytest.raises(ValueError, match="no fp8 peak"):
            hardware.peak_flops_per_s(name, "fp8")


@pytest.mark.parametrize(
    "alias,name",
    [
        ("T4", "T4 PCIe"),
        ("L4", "L4 PCIe"),
        ("A10G", "A10G PCIe"),
        ("L40S", "L40S PCIe"),
        ("RTX 3090", "GeForce RTX 3090"),
        ("RTX 4090", "GeForce RTX 4090"),
        ("B200", "B200 SXM"),
        ("H100 NVL", "H100 NVL"),
        ("H200 NVL", "H200 NVL"),
        ("RTX 6000 Ada", "RTX 6000 Ada"),
        ("RTX A6000", "RTX A6000"),
    ],
)
def test_short_names_find_the_rows(alias, name):
    assert hardware.accelerator(alias).name == name


# What torch.cuda.get_device_name() returns on each card, and the row
TORCH_NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA B200", "B200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla T4", "T4 PCIe"),
    ("NVIDIA L4", "L4 PCIe"),
    ("NVIDIA A10G", "A10G PCIe"),
    ("NVIDIA L40S", "L40S PCIe"),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA RTX A6000", "RTX A6000"),
]


@pytest.mark.parametrize("torch_name,row", TORCH_NAMES)
def test_torch_names_find_their_rows(torch_name, row):
    assert hardware.match_cuda_name(torch_name).name == row


@pytest.mark.parametrize(
    "torch_name",
    [
        "NVIDIA GeForce GTX 1080",
        "AMD Instinct MI300X",
        # Grace Hopper: an H100/H200-class GPU with its own memory (96 GB HBM3
        # on the 480GB part), which no row describes; "H200" is not a word in it
        "NVIDIA GH200 480GB",
        "NVIDIA GB200",  # a B200 at higher power and clocks
        "NVIDIA L40",  # the L40S's sibling, slower tensor cores
        "NVIDIA A10",  # not the A10G
        "NVIDIA RTX A1000",  # "A100" is not a word in it
        "Quadro RTX 6000",  # Turing, not the RTX 6000 Ada
        "NVIDIA RTX 5000 Ada Generation",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "Tesla V100S-PCIE-32GB",
        "NVIDIA H800",
        "",
    ],
)
def test_gpus_without_a_row_match_none(torch_name):
    assert hardware.match_cuda_name(torch_name) is None


def test_gpu_nominal_peak_is_the_datasheet_row_or_unknown():
    known = devices.gpu_nominal_peak("NVIDIA H100 NVL", "bf16")
    assert known.basis == "datasheet" and known.known
    assert known.flops_per_s == pytest.approx(835.5 * T)  # not the SXM's 989
    assert "H100 NVL" in known.how
    unknown = devices.gpu_nominal_peak("NVIDIA GeForce GTX 1080", "bf16")
    assert unknown.flops_per_s is None and unknown.basis == "unknown"
    assert "GTX 1080" in unknown.how
