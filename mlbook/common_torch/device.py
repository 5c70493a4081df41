"""The device a notebook runs on: which one, its name, its nominal peak, and a
matmul throughput probe."""

from __future__ import annotations

from mlbook.common import validate
from mlbook.common.accelerators import (
    NominalPeak,
    cpu_model,
    cpu_nominal_peak_flops_per_s,
    match_cuda_name,
)

# --- the device a notebook runs on ---------------------------------------------


def pick_device(requested: str = "auto") -> str:
    """'cuda' when asked for 'auto' and a GPU is there, else 'cpu'."""
    import torch

    validate.one_of("device", requested, ("auto", "cpu", "cuda"))
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA GPU")
    return requested


def device_description(device: str) -> str:
    """A human name for the device that produced a measurement."""
    import torch

    validate.one_of("device", device, ("cpu", "cuda"))
    if device == "cuda":
        return f"GPU: {torch.cuda.get_device_name()}"
    n = torch.get_num_threads()
    return f"CPU: {cpu_model()}, {n} thread" + ("s" if n != 1 else "")


def gpu_nominal_peak(cuda_name: str, dtype: str) -> NominalPeak:
    """The table's peak of the GPU torch names ``cuda_name``, with the row's
    own basis ("datasheet", or "upper bound" where the row's figures are a
    bigger part's, as the A10G's are the A10's), or an unknown peak (None)
    that says so where the table has no row for it."""
    row = match_cuda_name(cuda_name)
    if row is None:
        return NominalPeak(
            None,
            f"no table row for GPU {cuda_name!r}, so no nominal peak; the step is "
            "held against the measured ceiling",
            "unknown",
        )
    if dtype not in row.peak_flops_per_s:  # a T4 or V100 in bf16: no such units
        return NominalPeak(
            None,
            f"the {row.name} datasheet gives no {dtype} peak (it lists "
            f"{', '.join(sorted(row.peak_flops_per_s))}), so none; the step is held "
            "against the measured ceiling",
            "unknown",
        )
    if row.basis == "datasheet":
        how = f"{row.name} datasheet ({row.source})"
    else:  # another part's figures, so a bound on this one's, not its peak
        how = f"{row.name}: {row.source}, so an upper bound"
    return NominalPeak(row.peak(dtype), how, row.basis)


def nominal_peak_flops_per_s(device: str, dtype: str) -> NominalPeak:
    """The nominal peak of the device a notebook runs on, where it came from,
    and its basis (mlbook.common.accelerators.PEAK_BASES); None where unknown."""
    validate.one_of("device", device, ("cpu", "cuda"))
    if device == "cuda":
        import torch

        return gpu_nominal_peak(torch.cuda.get_device_name(), dtype)
    return cpu_nominal_peak_flops_per_s(dtype)


def measure_matmul_flops_per_s(
    dtype: str = "fp32", n: int = 1024, device: str = "cpu", min_run_time_s: float = 0.3
) -> float:
    """Measured FLOP/s of one n x n x n matmul on ``device`` in ``dtype``
    (2 n^3 FLOPs), best of its timed blocks, on torch's thread count: one
    shape of the sweep in mlbook.common_torch.mamf, which finds the ceiling."""
    from mlbook.common_torch import mamf

    validate.positive_int("n", n)
    return mamf.time_matmul(n, n, n, dtype, device, min_run_time_s)
