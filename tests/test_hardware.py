import pytest

from mlbook.common import accelerators as hardware
from mlbook.common_torch import device as devices


def test_table_rows_have_source_and_date():
    for a in hardware.ACCELERATORS.values():
        assert a.source and a.as_of
        assert a.hbm_bytes > 0 and a.hbm_bytes_per_s > 0


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
    assert h200.hbm_bytes == 141e9 and h200.hbm_bytes_per_s == 4.8e12
    assert h200.peak("bf16") == h100.peak("bf16")


def test_unknown_device_and_dtype():
    with pytest.raises(ValueError, match="unknown device 'B300'"):
        hardware.peak_flops_per_s("B300")
    with pytest.raises(ValueError, match="device must be a name"):
        hardware.accelerator(100)
    with pytest.raises(ValueError, match="dtype must be one of"):
        hardware.peak_flops_per_s("A100", "int4")
    with pytest.raises(ValueError, match="no fp8 peak"):
        hardware.peak_flops_per_s("A100", "fp8")


def test_cuda_name_matching():
    assert hardware.match_cuda_name("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert hardware.match_cuda_name("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert hardware.match_cuda_name("NVIDIA H200").name == "H200 SXM"
    assert hardware.match_cuda_name("Tesla T4") is None
    with pytest.raises(ValueError, match="cuda_name must be a string"):
        hardware.match_cuda_name(None)


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
