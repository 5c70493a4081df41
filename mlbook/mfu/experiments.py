"""The MFU chapter's measurements: counted FLOPs against the formula, and the
MFU of the small GPT's training step on the current device."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch import device as devices
from mlbook.common_torch import mamf
from mlbook.common_torch import timing as measure
from mlbook.common_torch.bandwidth import triad_bytes_per_s
from mlbook.common_torch.gpt import GPT, random_batch, train_step
from mlbook.common_torch.mamf import MatmulCeiling
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu


@dataclass(frozen=True)
class CountRow:
    attn_impl: str
    mode: str  # "forward" or "train"
    formula: int  # FLOPs from flops_per_token x tokens
    counted: int  # FLOPs that FlopCounterMode saw
    per_op: dict

    @property
    def ratio(self) -> float:
        return self.counted / self.formula


def count_vs_formula(
    cfg: TransformerConfig, seq_len: int, batch: int, device: str = "cpu"
) -> list[CountRow]:
    """FlopCounterMode against equation 6N + 12Lhs, for written-out
    and fused attention."""
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


def gemm_shapes(cfg: TransformerConfig, batch: int, seq_len: int) -> tuple:
    """The (m, n, k) of every weight matmul one training step runs: the
    forward (tokens x in -> out), the input gradient (tokens x out -> in) and
    the weight gradient (out x tokens -> in) of each projection, MLP matrix
    and the LM head."""
    t = batch * seq_len
    weights = [
        (cfg.d_model, cfg.d_model),
        (cfg.kv_dim, cfg.d_model),
        (cfg.d_ff, cfg.d_model),
        (cfg.d_model, cfg.d_ff),
        (cfg.vocab_size, cfg.d_model),
    ]
    shapes = []
    for out, inp in weights:
        shapes += [(t, out, inp), (t, inp, out), (out, inp, t)]
    return tuple(dict.fromkeys(shapes))


def sweep_ceiling(
    cfg: TransformerConfig,
    seq_len: int,
    batch: int,
    device: str,
    ceiling_budget_s: float = 5.0,
    min_run_time_s: float = 0.5,
    **_,
) -> MatmulCeiling:
    """measure_mfu's first sweep on its own: the step's own GEMM shapes
    first, then the grid, for ``ceiling_budget_s`` seconds, in the dtype the
    step trains in (bf16 on a GPU, fp32 on a CPU). Pass it on to
    measure_mfu as ``ceiling``. Other keyword arguments (a page's probe
    sizes) are ignored."""
    dtype = "bf16" if device == "cuda" else "fp32"
    return mamf.find_ceiling(
        dtype,
        device,
        budget_s=ceiling_budget_s,
        include=gemm_shapes(cfg, batch, seq_len),
        min_run_time_s=min(min_run_time_s, 0.05),
    )


def memory_bandwidth(device: str, array_bytes: int, repeats: int = 5) -> float:
    """The median of ``repeats`` triad passes (a = b + 2c, 12 bytes a value,
    mlbook.common_torch.bandwidth) over three arrays of ``array_bytes``, on
    the threads the step runs on, by the wall clock."""
    return statistics.median(triad_bytes_per_s(array_bytes, repeats, device))


@dataclass(frozen=True)
class MfuMeasurement:
    device: str  # what produced the numbers, e.g. "CPU: ..., 2 threads"
    dtype: str
    # nominal, from the datasheet table or the CPU's vector units; NaN where the
    # device's peak is unknown (then so is mfu_nominal)
    peak_flops_per_s: float
    peak_how: str
    square_flops_per_s: float  # one n^3 matmul measured in the same run (not a ceiling)
    ceiling: (
        MatmulCeiling  # MAMF: the best of a sweep of shapes, the model's own among them
    )
    step_s: float  # median wall time of one training step
    tokens_per_s: float
    mfu_nominal: float
    step_vs_square: float  # achieved / the square matmul; may pass 1
    step_vs_ceiling: float  # achieved / MAMF ceiling
    sweeps: int  # how many sweeps it took for the ceiling to hold
    # the timed steps' slowest / fastest - 1: warm steps only, as every round
    # starts with an untimed one
    step_spread: float = 0.0
    peak_basis: str = "datasheet"  # accelerators.PEAK_BASES


# How many ceiling sweeps measure_mfu makes at most while the step still beats
# the ceiling (the page glues how many it took).
MAX_SWEEPS = 3


def measure_mfu(
    cfg: TransformerConfig,
    seq_len: int,
    batch: int,
    steps: int,
    device: str,
    gemm_n: int,
    min_run_time_s: float = 0.5,
    ceiling_budget_s: float = 5.0,
    rounds: int = 3,
    log=None,
    ceiling: MatmulCeiling | None = None,
) -> MfuMeasurement:
    """Time the small GPT's training step and compute its MFU against the
    nominal peak, against one square matmul, and against the maximum
    achievable matmul FLOP/s (MAMF) found by sweeping shapes, the step's own
    GEMM shapes included.

    The machine's speed drifts, so the step and the ceiling are measured in
    ``rounds`` alternating rounds: one untimed warm-up step, ``steps`` timed
    steps, then the best shapes timed again. The warm-up is per round: on a
    busy 2-core CPU the first step after the best shapes' matmuls ran several
    times as long as the next, and timing it made the spread of the steps,
    which bounds how far a step may pass the ceiling, the size of that first
    step, not the spread of the steps.

    Should the step still beat the ceiling, the sweep is widened (twice the
    budget, larger sizes) and the step measured again, up to MAX_SWEEPS
    sweeps; a beaten ceiling is reported, never explained away.
    ``ceiling``, a sweep that ``sweep_ceiling`` made with the same arguments,
    stands for the first sweep (the page draws its roofline from it first).

    On a GPU the step runs under bf16 autocast and is compared with bf16
    peaks; on a CPU it trains in fp32 against fp32 peaks. ``log`` (for
    example ``print``) is called with a line before each long part.
    """
    log = log or (lambda *_: None)
    on_gpu = device == "cuda"
    dtype = "bf16" if on_gpu else "fp32"
    log(f"measuring a {gemm_n}^3 {dtype} matmul on {device} ...")
    square = devices.measure_matmul_flops_per_s(
        dtype, n=gemm_n, device=device, min_run_time_s=min_run_time_s
    )
    nominal = devices.nominal_peak_flops_per_s(device, dtype)
    peak, how = nominal
    basis = "unknown" if peak is None else getattr(nominal, "basis", "datasheet")

    model = GPT(cfg, max_seq_len=seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = random_batch(cfg, batch, seq_len, device)
    per_token = flops.flops_per_token(cfg, seq_len)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=on_gpu):
            train_step(model, opt, idx, tgt)

    include = gemm_shapes(cfg, batch, seq_len)
    tokens = batch * seq_len
    run_s = min(min_run_time_s, 0.05)
    if ceiling is not None and (ceiling.dtype, ceiling.device) != (dtype, str(device)):
        raise ValueError(
            f"the first sweep must be of {dtype} on {device}, got "
            f"{ceiling.dtype} on {ceiling.device}"
        )
    first = ceiling
    # (ceiling, step times, sweep budget, largest size): each sweep merges into
    # the ceiling, and the step's times accumulate across rounds and sweeps
    state = {"ceiling": None, "times": [], "budget_s": ceiling_budget_s, "dim": None}

    def sweep_and_step() -> dict:
        if state["ceiling"] is not None:  # a sweep the step beat: twice as long,
            state["budget_s"] *= 2  # over a grid twice as large as the last one
            # (find_ceiling's own default the first time; doubling the best shape
            # instead could give a grid smaller than the default, or than 256)
            last = state["dim"] or (8192 if device == "cuda" else 2048)
            state["dim"] = 2 * max(last, *state["ceiling"].shape)
        if state["ceiling"] is None and first is not None:
            found = first  # the sweep the caller made first
        else:
            log(
                f"sweep: matmul shapes for {state['budget_s']:g} s (the step's "
                f"own {len(include)} first) ..."
            )
            found = mamf.find_ceiling(
                dtype,
                device,
                budget_s=state["budget_s"],
                include=include,
                max_dim=state["dim"],
                min_run_time_s=run_s,
            )
        ceiling = (
            found if state["ceiling"] is None else mamf.merge(state["ceiling"], found)
        )
        for r in range(rounds):
            log(
                f"round {r + 1}/{rounds}: {steps} training steps of b={batch} x "
                f"s={seq_len}, then the best shapes again ..."
            )
            state["times"] += measure.time_steps(step, steps, 1, device)
            ceiling = mamf.refine(ceiling, top=3, min_run_time_s=run_s)
        state["ceiling"] = ceiling
        return state

    def held(st: dict) -> bool:
        achieved = tokens / measure.median_s(st["times"]) * per_token
        return achieved < st["ceiling"].flops_per_s

    got = measure.measure_until(
        sweep_and_step, held, lambda a, b: b, MAX_SWEEPS, log=log
    )
    ceiling, times, sweeps = state["ceiling"], state["times"], got.attempts
    step_s = measure.median_s(times)
    achieved = tokens / step_s * per_token
    tokens_per_s = batch * seq_len / step_s
    return MfuMeasurement(
        device=devices.device_description(device),
        dtype=dtype,
        peak_flops_per_s=math.nan if peak is None else peak,
        peak_how=how,
        square_flops_per_s=square,
        ceiling=ceiling,
        step_s=step_s,
        tokens_per_s=tokens_per_s,
        mfu_nominal=math.nan
        if peak is None
        else mfu.mfu(tokens_per_s, cfg, seq_len, peak),
        # Not mfu(): these are measurements, not peaks; the page asserts
        # the ceiling held.
        step_vs_square=achieved / square,
        step_vs_ceiling=achieved / ceiling.flops_per_s,
        sweeps=sweeps,
        step_spread=max(times) / min(times) - 1,
        peak_basis=basis,
    )
