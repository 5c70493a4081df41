"""The MFU chapter's measurements: counted FLOPs against the formula, and the
MFU of the small GPT's training step on the current device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch import device as devices
from mlbook.common_torch import timing as measure
from mlbook.common_torch.gpt import GPT, random_batch, train_step
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu


@dataclass(frozen=True)
class CountRow:
    attn_impl: str
    mode: str          # "forward" or "train"
    formula: int       # FLOPs from flops_per_token x tokens
    counted: int       # FLOPs that FlopCounterMode saw
    per_op: dict

    @property
    def ratio(self) -> float:
        return self.counted / self.formula


def count_vs_formula(cfg: TransformerConfig, seq_len: int, batch: int, device: str = "cpu") -> list[CountRow]:
    """FlopCounterMode against equation 6N + 12Lhs, for written-out and fused attention."""
    tokens = batch * seq_len
    rows = []
    for impl in ("math", "sdpa"):
        model = GPT(cfg, max_seq_len=seq_len, attn_impl=impl).to(device)
        idx, tgt = random_batch(cfg, batch, seq_len, device)
        for mode in ("forward", "train"):
            got = measure.counted_flops(model, idx, tgt, backward=(mode == "train"))
            want = flops.flops_per_token(cfg, seq_len, mode) * tokens
            rows.append(CountRow(impl, mode, want, got["total"], got["per_op"]))
    return rows


@dataclass(frozen=True)
class MfuMeasurement:
    device: str                # what produced the numbers, e.g. "CPU: ..., 2 threads"
    dtype: str
    peak_flops_per_s: float    # nominal, from the datasheet table or the CPU's vector units
    peak_how: str
    gemm_flops_per_s: float    # a square matmul measured in the same run
    step_s: float              # median wall time of one training step
    tokens_per_s: float
    mfu_nominal: float
    mfu_gemm: float            # achieved / measured matmul; may pass 1 if the step's matmuls beat the probe


def measure_mfu(cfg: TransformerConfig, seq_len: int, batch: int, steps: int, device: str,
                gemm_n: int, min_run_time_s: float = 0.5, log=None) -> MfuMeasurement:
    """Time the small GPT's training step and compute its MFU against the
    nominal peak and against a matmul measured on the same device.

    On a GPU the step runs under bf16 autocast and is compared with bf16
    peaks; on a CPU it trains in fp32 against fp32 peaks. ``log`` (for
    example ``print``) is called with a line before each long part.
    """
    log = log or (lambda *_: None)
    on_gpu = device == "cuda"
    dtype = "bf16" if on_gpu else "fp32"
    log(f"measuring a {gemm_n}^3 {dtype} matmul on {device} ...")
    gemm = devices.measure_matmul_flops_per_s(dtype, n=gemm_n, device=device, min_run_time_s=min_run_time_s)
    peak, how = devices.nominal_peak_flops_per_s(device, dtype)

    model = GPT(cfg, max_seq_len=seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = random_batch(cfg, batch, seq_len, device)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=on_gpu):
            train_step(model, opt, idx, tgt)

    log(f"timing {steps} training steps of b={batch} x s={seq_len} tokens ...")
    step_s = measure.median_s(measure.time_steps(step, steps=steps, warmup=1, device=device))
    tokens_per_s = batch * seq_len / step_s
    return MfuMeasurement(
        device=devices.device_description(device), dtype=dtype, peak_flops_per_s=peak, peak_how=how,
        gemm_flops_per_s=gemm, step_s=step_s, tokens_per_s=tokens_per_s,
        mfu_nominal=mfu.mfu(tokens_per_s, cfg, seq_len, peak),
        # Not mfu(): the probe is a measurement, not a peak, and a step whose
        # matmuls run faster than one square matmul is a finding, not an error.
        mfu_gemm=tokens_per_s * flops.flops_per_token(cfg, seq_len) / gemm,
    )
