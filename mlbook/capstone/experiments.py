"""Finding lost MFU, measured: the ladder of fixes, each rung the reference
loop with one more defect fixed, timed and profiled, with the MAMF ceiling
re-probed between rungs.

The loop and its defects are ``mlbook.common_torch.reference_loop``
(``mlbook.calibrate`` times the same loop); the profiler's account of a step
and the timing of a rung are ``experiments_profile``; the two-process run for
exposed communication and stragglers is ``experiments_comm``. The names a
page reaches through this module are imported here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from mlbook.capstone import formulas as cf
from mlbook.capstone.experiments_comm import COMM_MODES as COMM_MODES
from mlbook.capstone.experiments_comm import comm_run as comm_run
from mlbook.capstone.experiments_profile import StepTimes, time_and_profile
from mlbook.common import validate
from mlbook.common_torch import mamf
from mlbook.common_torch.device import device_description
from mlbook.common_torch.reference_loop import (
    Loop,
    LoopConfig,
    TextData,
    apply_fix,
    model_config,
    nominal_peak,
    slow_loop,
    step_clock,
)
from mlbook.common_torch.timing import cpu_threads, measure_until
from mlbook.mfu import flops

# --- the ceiling ---------------------------------------------------------------------


def probe_ceilings(
    sizes: cf.LadderSizes,
    device: str,
    budget_s: float | None = None,
    min_run_time_s: float = 0.02,
) -> dict:
    """The MAMF ceiling for fp32 and bf16 on ``device``, each swept for
    ``budget_s`` (default sizes.probe_budget_s) with the model's own GEMM
    shapes first.

    On a CPU bf16 may be emulated (fifty times slower): a 256^3 bf16 matmul
    is timed first, and where it is slower than fp32 the sweep stays at
    small shapes (up to 512) rather than spend minutes proving it. Every
    timing is on the clock the ladder times its steps by (step_clock: the
    thread's CPU time on one CPU thread), so a busy machine lowers neither
    alone."""
    budget_s = sizes.probe_budget_s if budget_s is None else budget_s
    shapes = cf.gemm_shapes(
        model_config(sizes, pad_vocab=True), sizes.batch * sizes.seq_len
    )
    out = {}
    clock = step_clock(device, sizes.cpu_threads)
    with torch.inference_mode(), cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        for dtype in ("fp32", "bf16"):
            max_dim = None
            include = shapes
            if device == "cpu" and dtype == "bf16":
                quick = {
                    d: mamf.time_matmul(256, 256, 256, d, device, 0.01)
                    for d in ("fp32", "bf16")
                }
                if quick["bf16"] < quick["fp32"]:
                    max_dim, include = 512, ()
            out[dtype] = mamf.find_ceiling(
                dtype,
                device,
                budget_s,
                include=include,
                max_dim=max_dim,
                min_run_time_s=min_run_time_s,
                clock=clock,
            )
    return out


def widen_ceiling(
    ceiling: mamf.MatmulCeiling, budget_s: float, min_run_time_s: float = 0.05
) -> mamf.MatmulCeiling:
    """A second, longer sweep (the shapes timed so far again, then more of
    the grid) merged with the first: for a ceiling that a step beat."""
    more = mamf.find_ceiling(
        ceiling.dtype,
        ceiling.device,
        budget_s,
        include=tuple((t.m, t.n, t.k) for t in ceiling.timings[:8]),
        min_run_time_s=min_run_time_s,
        clock=ceiling.clock,
    )
    return mamf.merge(ceiling, more)


# --- the ladder ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    fix: str  # the fix this rung applied ("slow loop" for rung 0)
    label: str
    config: LoopConfig
    dtype: str
    times: StepTimes
    # measurements pooled (more were taken while the residual was above tolerance)
    attempts: int
    tokens_per_step: int
    flops_per_token: float  # the model's 6N + 12Lhs, the unpadded vocabulary
    rates: (
        cf.RungRates
    )  # against the datasheet peak and the final ceiling of the rung's dtype

    @property
    def step_s(self) -> float:
        return self.times.step_s

    @property
    def residual(self) -> float:
        return self.times.residual

    @property
    def buckets(self) -> dict:
        return self.times.account.buckets


@dataclass(frozen=True)
class Ladder:
    rungs: tuple
    ceilings: (
        dict  # dtype -> MatmulCeiling, refined between rungs (and widened if beaten)
    )
    peaks: dict  # dtype -> NominalPeak (FLOP/s or None, how, basis)
    mfu_dtype: str  # every rung's MFU divides by this dtype's peak (the final rung's)
    device: str  # who measured
    widened: tuple = field(
        default=()
    )  # dtypes whose ceiling a rung beat, so they were swept again
    widenings: int = 0  # how many sweeps that took, all dtypes together
    again_s: float = 0.0  # seconds spent measuring rungs again, all rungs together


# A rung whose residual is above the bar is measured again, this many times in all
# at most; a ceiling that a rung beats is swept again, each time twice as long, this
# many times at most (the page glues how many it took of each).
LADDER_MAX_ATTEMPTS = 4
LADDER_MAX_WIDENINGS = 3
LADDER_RESIDUAL_GOAL = 0.05  # a rung whose residual is above it is measured again


def run_ladder(
    sizes: cf.LadderSizes,
    device: str,
    data: TextData,
    ceilings: dict,
    fixes: tuple,
    seed: int = 0,
    log=None,
    min_run_time_s: float = 0.05,
    residual_tol: float = LADDER_RESIDUAL_GOAL,
    max_attempts: int = LADDER_MAX_ATTEMPTS,
) -> Ladder:
    """Measure the slow loop, then each fix in ``fixes`` (formulas.Fix) applied on
    top of the ones before. Between rungs the ceiling of the next rung's dtype is
    re-timed (mamf.refine), so the ceiling is probed while the machine runs as it runs
    for the step. A rung whose residual is above ``residual_tol`` is measured again, up
    to ``max_attempts`` times in all, and the samples pooled (the median of more steps
    is a better estimate; a residual the profiler itself causes does not go away, and
    stays), while ``sizes.again_budget_s`` seconds, for all rungs together, still
    cover one more measurement as long as the rung's last: after that a rung keeps
    what it has, and its residual is what the page shows. A ceiling that a rung
    still beats is swept again, twice as long each time (widen_ceiling), up to
    LADDER_MAX_WIDENINGS sweeps: a short sweep on a busy machine can miss the best
    shape, while the step's own clock skips the time other processes held the
    core.

    Every rung's MFU divides by the nominal peak of the final rung's dtype (the
    fastest the device trains in), so that MFU moves with tokens/s along the
    ladder; each rung's share of the ceiling is against its own dtype's."""
    validate.positive("residual_tol", residual_tol)
    validate.positive_int("max_attempts", max_attempts)
    validate.non_negative("sizes.again_budget_s", sizes.again_budget_s)
    with cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        return _run_ladder(
            sizes,
            device,
            data,
            dict(ceilings),
            fixes,
            seed,
            log or (lambda *_: None),
            min_run_time_s,
            residual_tol,
            max_attempts,
        )


def _run_ladder(
    sizes,
    device,
    data,
    ceilings,
    fixes,
    seed,
    log,
    min_run_time_s,
    residual_tol,
    max_attempts,
) -> Ladder:
    config = slow_loop(sizes)
    plan = [("slow loop", "slow loop (all defects)", config)]
    for fix in fixes:
        config = apply_fix(config, fix.name, sizes)
        plan.append((fix.name, fix.label, config))
    measured, again_s = [], 0.0
    tokens = sizes.batch * sizes.seq_len
    per_token = flops.flops_per_token(model_config(sizes), sizes.seq_len)
    for i, (name, label, config) in enumerate(plan):
        ceilings[config.dtype] = mamf.refine(
            ceilings[config.dtype], top=2, min_run_time_s=min_run_time_s
        )
        log(f"rung {i}: {label} ...")
        loop = Loop(config, sizes, data, device, seed)
        warmup = 2 if config.compile else 1
        start = time.perf_counter()
        clock = step_clock(device, sizes.cpu_threads)
        warm = [warmup]  # the first measurement warms the loop up, the rest not

        def measure(loop=loop, clock=clock, warm=warm):
            w, warm[0] = warm[0], 0
            return time_and_profile(
                loop.step, sizes.steps, sizes.profiled_steps, device, w, clock
            )

        got = measure_until(
            measure,
            lambda t: abs(t.residual) <= residual_tol,
            lambda t, more: t.pooled(more),
            max_attempts,
            max(0.0, sizes.again_budget_s - again_s),
            lambda line, i=i: log(f"rung {i}: {line}"),
        )
        times, attempts, again_s = got.value, got.attempts, again_s + got.again_s
        log(
            f"rung {i}: {label}: {times.step_s * 1e3:,.0f} ms a step, residual "
            f"{times.residual:+.1%} ({time.perf_counter() - start:.1f} s)"
        )
        measured.append((name, label, config, times, attempts))
        del loop
    widened, widenings = [], 0
    for dtype in sorted({c.dtype for _, _, c, _, _ in measured}):
        best = max(
            tokens / t.step_s * per_token
            for _, _, c, t, _ in measured
            if c.dtype == dtype
        )
        budget_s = 2 * sizes.probe_budget_s
        while best > ceilings[dtype].flops_per_s and widenings < LADDER_MAX_WIDENINGS:
            log(f"a rung beat the {dtype} ceiling: sweeping again, {budget_s:g} s ...")
            ceilings[dtype] = widen_ceiling(ceilings[dtype], budget_s)
            budget_s *= 2
            widenings += 1
            if dtype not in widened:
                widened.append(dtype)
    peaks = {d: nominal_peak(device, d, sizes.cpu_threads) for d in ceilings}
    mfu_dtype = measured[-1][2].dtype
    rungs = tuple(
        Rung(
            name,
            label,
            config,
            config.dtype,
            times,
            attempts,
            tokens,
            per_token,
            cf.rung_rates(
                tokens,
                times.step_s,
                per_token,
                peaks[mfu_dtype].flops_per_s,
                ceilings[config.dtype].flops_per_s,
            ),
        )
        for name, label, config, times, attempts in measured
    )
    return Ladder(
        rungs,
        ceilings,
        peaks,
        mfu_dtype,
        device_description(device),
        tuple(sorted(widened)),
        widenings,
        again_s,
    )


def measure_config(
    config: LoopConfig,
    sizes: cf.LadderSizes,
    data: TextData,
    device: str,
    seed: int = 0,
) -> StepTimes:
    """Time and profile one loop set up as ``config`` says (the exercise's
    mystery step)."""
    with cpu_threads(sizes.cpu_threads, device, "cpu_threads"):
        loop = Loop(config, sizes, data, device, seed)
        return time_and_profile(
            loop.step,
            sizes.steps,
            sizes.profiled_steps,
            device,
            2 if config.compile else 1,
            step_clock(device, sizes.cpu_threads),
        )


def mystery_config(sizes: cf.LadderSizes, device: str) -> LoopConfig:
    """A step with two defects back in (which two is the exercise's question:
    formulas.MYSTERY_DEFECTS): every fix of the fp32 ladder but those two."""
    config = slow_loop(sizes)
    for fix in cf.ladder_fixes(bf16_fast=False, compile_on=False):
        if fix.name not in cf.MYSTERY_DEFECTS:
            config = apply_fix(config, fix.name, sizes)
    return config
