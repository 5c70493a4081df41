"""Plan a run: every chapter's calculator composed into one budget.

No new physics here. ``plan(spec)`` calls the chapters' own formulas:

- compute: 6ND (Kaplan et al. 2020) and (6 N_matmul + 12 L h s) D, the FLOP
  count that MFU is defined against (PaLM; mlbook.mfu.flops);
- ideal days at the planned MFU (mlbook.mfu), in the 6N + 12Lhs convention,
  with the 6ND figure beside it;
- memory per GPU: weights, gradients and optimizer state under a ZeRO stage
  (mlbook.scaling.zero_state), split over tensor and pipeline stages,
  and activations under a recompute strategy at its worst moment
  (mlbook.recompute.checkpoint_plans), counted for the model's own block
  (Llama's for a SwiGLU model, Korthikanti et al.'s GPT block for a GELU one),
  against the HBM the GPU's driver makes usable (mlbook.common.accelerators);
- checkpoint bytes and write time at a storage bandwidth (mlbook.cadence);
- the job's mean time between failures from a per-GPU failure rate (default
  calibrated on Llama 3 405B's log, mlbook.faults), and the Young and Daly
  checkpoint intervals (mlbook.cadence);
- the time lost to checkpoint writes, rework and restarts, goodput (the
  effective training time ratio) and the expected wall-clock days.

The loss accounting is first order and self-consistent, so its parts add up:
with useful time W, interval I, write time C, restart time R and job MTBF T,
the run writes W/I checkpoints and suffers F = wall/T failures, each costing
R plus on average half a segment, (I + C)/2, of lost work. Solving
wall = W + (W/I) C + (wall/T)(R + (I + C)/2) for wall gives the days. Daly's
exact expectation for the same failure model is reported beside it.

No torch here: everything is numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlbook.cadence import formulas as cadence
from mlbook.common import validate
from mlbook.common.accelerators import ACCELERATORS, ALIASES, accelerator
from mlbook.common.transformer import PRESETS, TransformerConfig
from mlbook.common.units import DAY_S, HOUR_S, MINUTE_S
from mlbook.faults import formulas as faults
from mlbook.mfu import flops
from mlbook.recompute.formulas import (
    RECOMPUTE_MODES,
    STRATEGIES,
    LayerBytes,
    activation_bytes_per_layer,
    block_saved_items,
    checkpoint_plans,
    layer_bytes,
)
from mlbook.scaling.formulas import zero_state

RECOMPUTE = STRATEGIES  # none, selective, sqrt, full
ZERO_STAGES = (0, 1, 2, 3)
# The GPUs a plan takes: it plans bf16 training, so those the table gives a
# bf16 peak (not a V100 or a T4), by table name and by alias.
GPUS = tuple(n for n, a in ACCELERATORS.items() if "bf16" in a.peak_flops_per_s)
GPU_ALIASES = tuple(a for a, n in ALIASES.items() if n in GPUS)
# What a tensor-parallel layer keeps whole on every rank unless sequence
# parallelism splits it along the sequence (Korthikanti et al. 2022, Sec. 4.2.2):
# the two norms' inputs, the inputs of the first linear of attention and of the
# MLP (each rank multiplies the whole input by its slice of the weights), and the
# dropout masks after attention and the MLP. For the GPT block that is 10 of its
# 34 sbh; for Llama's (no dropout) 8 of its 16 + 8 d_ff/h under selective recompute.
TP_REPLICATED_ITEMS = (
    "norm 1 input",
    "QKV matmul input",
    "attention dropout mask",
    "norm 2 input",
    "MLP input",
    "MLP dropout mask",
)
# Whose block the activations are counted for, by the model's MLP.
ACTIVATION_COUNTS = {
    "swiglu": "Llama block (no dropout, SwiGLU, K and V at every head)",
    "gelu": "Korthikanti et al. GPT block (dropout, GELU)",
}


def llama3_failures_per_gpu_hour() -> float:
    """Unexpected interruptions per GPU-hour in Llama 3 405B's 54-day log:
    419 / (54 days x 24 h x 16,384 GPUs) (Grattafiori et al. 2024, Sec. 3.3.4)."""
    log = faults.LLAMA3_405B_LOG
    return log.unexpected / (log.days * DAY_S / HOUR_S * log.gpus)


# What a run plans with when the user does not say. Each is an assumption a
# reader should replace with their own numbers.
DEFAULT_STORAGE_BYTES_PER_S = cadence.ASSUMED_STORAGE_BYTES_PER_S
DEFAULT_RESTART_S = (
    10 * MINUTE_S
)  # detect, reschedule, reload: an assumption, not a measurement


@dataclass(frozen=True)
class RunSpec:
    """Everything a plan needs. Sizes in sequences, seconds and bytes per second.

    ``dp`` defaults to n_gpus / (tp x pp). ``micro_batch`` sequences per GPU
    per micro-step, ``grad_accum`` micro-steps per optimizer step; the global
    batch is micro_batch x grad_accum x dp sequences. ``global_batch``, when
    given, must equal that product.
    """

    model: str | TransformerConfig
    tokens: float
    gpu: str
    n_gpus: int
    mfu: float = 0.40
    seq_len: int = 8192
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    zero_stage: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    global_batch: int | None = None
    recompute: str = "selective"
    failures_per_gpu_hour: float = field(default_factory=llama3_failures_per_gpu_hour)
    storage_bytes_per_s: float = DEFAULT_STORAGE_BYTES_PER_S
    restart_s: float = DEFAULT_RESTART_S
    interval_s: float | None = None  # checkpoint interval; None: Young's optimum

    def __post_init__(self):
        if isinstance(self.model, str):
            if self.model not in PRESETS:
                raise ValueError(
                    f"model={self.model!r} is not a preset; the presets are "
                    + ", ".join(PRESETS)
                )
        elif not isinstance(self.model, TransformerConfig):
            raise ValueError(
                "model must be a preset name or a TransformerConfig, "
                f"got {self.model!r}"
            )
        validate.positive("tokens", self.tokens)
        try:  # the planner plans bf16 training: the GPU needs a bf16 peak
            accelerator(self.gpu).peak("bf16")
        except ValueError as exc:
            raise ValueError(f"gpu={self.gpu!r}: {exc}") from None
        validate.positive_int("n_gpus", self.n_gpus)
        validate.fraction("mfu", self.mfu)
        validate.positive_int("seq_len", self.seq_len)
        validate.positive_int("tp", self.tp)
        validate.positive_int("pp", self.pp)
        cfg = self.config  # the model's shape first: a bad tp is named as tp
        if cfg.n_heads % self.tp:
            raise ValueError(
                f"tp={self.tp} must divide the model's n_heads={cfg.n_heads} "
                "(tensor parallelism splits attention by heads)"
            )
        if self.pp > cfg.n_layers:
            raise ValueError(
                f"pp={self.pp} must not exceed the model's n_layers={cfg.n_layers} "
                "(each pipeline stage holds at least one layer)"
            )
        if self.dp is None:
            if self.n_gpus % (self.tp * self.pp):
                raise ValueError(
                    f"n_gpus={self.n_gpus} must be a multiple of tp x pp = "
                    f"{self.tp * self.pp} (the data-parallel size dp = n_gpus / "
                    "(tp x pp) is a whole number)"
                )
            object.__setattr__(self, "dp", self.n_gpus // (self.tp * self.pp))
        validate.positive_int("dp", self.dp)
        if self.dp * self.tp * self.pp != self.n_gpus:
            raise ValueError(
                f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp} = "
                f"{self.dp * self.tp * self.pp} must equal n_gpus={self.n_gpus}"
            )
        validate.one_of("zero_stage", self.zero_stage, ZERO_STAGES)
        validate.positive_int("micro_batch", self.micro_batch)
        validate.positive_int("grad_accum", self.grad_accum)
        if self.global_batch is not None:
            validate.positive_int("global_batch", self.global_batch)
            filled = self.micro_batch * self.grad_accum * self.dp
            if filled != self.global_batch:
                raise ValueError(
                    f"micro_batch x grad_accum x dp = {self.micro_batch} x "
                    f"{self.grad_accum} x {self.dp} = {filled} sequences must fill "
                    f"global_batch={self.global_batch} exactly"
                )
        validate.one_of("recompute", self.recompute, RECOMPUTE)
        validate.positive("failures_per_gpu_hour", self.failures_per_gpu_hour)
        validate.positive("storage_bytes_per_s", self.storage_bytes_per_s)
        validate.non_negative("restart_s", self.restart_s)
        if self.interval_s is not None:
            validate.positive("interval_s", self.interval_s)

    @property
    def config(self) -> TransformerConfig:
        return PRESETS[self.model] if isinstance(self.model, str) else self.model


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU, by item, against the HBM the driver makes usable
    (``usable_hbm_bytes``, the GPU's hbm_usable_bytes: nvidia-smi's total, less
    than the card's binary capacity). ``activation_count`` names whose block
    the activations were counted for (an ACTIVATION_COUNTS value)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    usable_hbm_bytes: float
    activation_count: str = ACTIVATION_COUNTS["gelu"]

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
        )

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_hbm_bytes

    @property
    def short_bytes(self) -> float:
        """How far the total exceeds the usable HBM (0 when it fits)."""
        return max(0.0, self.total_bytes - self.usable_hbm_bytes)


@dataclass(frozen=True)
class Plan:
    spec: RunSpec
    n_params: float
    compute_flops_6nd: float
    compute_flops: float  # (6 N_matmul + 12 L h s) D: the MFU convention
    ideal_days: float  # compute_flops at the planned MFU
    ideal_days_6nd: float  # 6ND at the same MFU number
    memory: Memory
    checkpoint_bytes: float
    checkpoint_write_s: float
    job_mtbf_s: float
    young_interval_s: float
    daly_interval_s: float
    interval_s: float  # the interval planned with
    checkpoint_days: float  # writing checkpoints
    rework_days: float  # work lost since the last checkpoint, redone
    restart_days: float  # detecting, rescheduling, reloading
    expected_days: float
    expected_failures: float
    goodput: float  # ideal / expected wall time (effective training time ratio)
    goodput_daly: float  # 1 - Daly's exact waste at the same interval

    @property
    def fits(self) -> bool:
        return self.memory.fits


def memory_per_gpu(spec: RunSpec, sequence_parallel: bool = True) -> Memory:
    """Model state under the ZeRO stage across dp, the model split over tp x pp;
    activations of one micro-batch for the layers a GPU holds.

    With 1F1B the first pipeline stage keeps pp micro-batches in flight, each for
    L/pp layers: L layers' worth, the same as no pipeline (Korthikanti et al. 2022,
    Sec. 4.2.3). When pp does not divide L (Llama 3 405B runs 126 layers on 16 stages,
    with lighter first and last stages) the fullest stage holds ceil(L/pp) layers,
    which is what is counted. Tensor parallelism with sequence parallelism divides the
    activations by tp (ibid., Sec. 4.2.2), which is what every plan assumes. With
    ``sequence_parallel=False`` the TP_REPLICATED_ITEMS stay whole on every rank
    (sbh (10 + 24/t) for the GPT block, ibid. eq. 4), and under full recompute so
    does each layer's saved input.

    A layer's bytes are counted for the model's own block: Korthikanti's GPT
    block (34 sbh + 5 a s^2 b) for a GELU model, and for a SwiGLU model
    Llama's (mlbook.recompute.layer_bytes with no dropout and its d_ff), with
    the recompute chapter's assumptions: 16-bit activations, norms that keep
    their input, unfused attention, K and V at every head. Under selective
    recompute that is 16 + 8 d_ff / h sbh a layer: 37.5 for Llama-2-7B, 42 for
    Llama 3 405B, where the GPT count keeps 34.
    """
    validate.instance_of("spec", spec, RunSpec)
    validate.boolean("sequence_parallel", sequence_parallel)
    cfg = spec.config
    n_local = flops.n_params(cfg) / (spec.tp * spec.pp)
    state = zero_state(n_local, spec.dp, spec.zero_stage)
    layers = (
        -(-cfg.n_layers // spec.pp) * spec.pp
    )  # ceil(L/pp) layers x pp micro-batches
    s, b, h, a = spec.seq_len, spec.micro_batch, cfg.d_model, cfg.n_heads
    m = cfg.d_ff / cfg.d_model
    layer = (
        layer_bytes(s, b, h, a, dropout=False, d_ff_mult=m, mlp="swiglu")
        if cfg.mlp == "swiglu"
        else None  # checkpoint_plans' default: Korthikanti's count
    )
    if sequence_parallel:
        plans = checkpoint_plans(s, b, h, a, layers, m, cfg.mlp, layer)
        acts = plans[spec.recompute].memory_bytes / spec.tp
    else:
        rank_layer = _without_sequence_parallel(spec, layer)
        plans = checkpoint_plans(s, b, h, a, layers, m, cfg.mlp, rank_layer)
        acts = plans[spec.recompute].memory_bytes
    return Memory(
        state.weights,
        state.grads,
        state.optimizer,
        float(acts),
        accelerator(spec.gpu).hbm_usable_bytes,
        ACTIVATION_COUNTS[cfg.mlp],
    )


def _without_sequence_parallel(spec: RunSpec, layer: LayerBytes | None) -> LayerBytes:
    """One rank's bytes of a layer under tensor parallelism without sequence
    parallelism: the TP_REPLICATED_ITEMS whole, the rest split over tp, and
    the layer's input (what full recompute keeps) whole."""
    cfg = spec.config
    s, b, h, a = spec.seq_len, spec.micro_batch, cfg.d_model, cfg.n_heads
    if layer is None:  # Korthikanti's GPT block
        layer = LayerBytes(
            *(activation_bytes_per_layer(s, b, h, a, r) for r in RECOMPUTE_MODES)
        )
    gelu = cfg.mlp == "gelu"
    items = block_saved_items(
        s, b, h, a, dropout=gelu, d_ff_mult=cfg.d_ff / h, mlp=cfg.mlp
    )
    whole = sum(items[k] for k in TP_REPLICATED_ITEMS)
    tp = spec.tp
    return LayerBytes(
        whole + (layer.none - whole) / tp,
        whole + (layer.selective - whole) / tp,
        layer.full,
    )


def wall_clock_s(
    useful_s: float, interval_s: float, write_s: float, restart_s: float, mtbf_s: float
) -> float:
    """The first-order wall-clock time of ``useful_s`` of work that writes a
    checkpoint of ``write_s`` every ``interval_s`` and fails every ``mtbf_s``
    on average, each failure costing the restart plus half a segment:
    wall = (W + (W/I) C) / (1 - (R + (I + C)/2) / T). A failure that costs
    as much as the time between failures leaves no progress: an error."""
    for name, value in (
        ("useful_s", useful_s),
        ("interval_s", interval_s),
        ("write_s", write_s),
        ("mtbf_s", mtbf_s),
    ):
        validate.positive(name, value)
    validate.non_negative("restart_s", restart_s)
    per_failure_s = restart_s + (interval_s + write_s) / 2
    if per_failure_s >= mtbf_s:
        raise ValueError(
            f"the run cannot make progress: each failure costs {per_failure_s:,.0f} s "
            f"(restart + half a segment) but failures come every {mtbf_s:,.0f} s; "
            "shorten the checkpoint interval, speed up restarts or checkpoint "
            "writes"
        )
    wall_s = useful_s * (1 + write_s / interval_s) / (1 - per_failure_s / mtbf_s)
    if not math.isfinite(wall_s):
        raise ValueError(
            f"the run cannot make progress: a checkpoint of {write_s:,.3g} s every "
            f"{interval_s:.3g} s leaves no time to train (the wall clock "
            "overflows); lengthen the checkpoint interval"
        )
    return wall_s


def restart_for_goodput(
    goodput: float, interval_s: float, write_s: float, mtbf_s: float
) -> float:
    """The restart time R (s) at which the first-order account gives
    ``goodput``, for a checkpoint of ``write_s`` every ``interval_s`` and a
    job MTBF of ``mtbf_s``: W / wall = (1 - (R + (I + C)/2) / T) / (1 + C/I)
    solved for R. An error when even an instant restart falls short."""
    validate.fraction("goodput", goodput, allow_one=False)
    for name, value in (
        ("interval_s", interval_s),
        ("write_s", write_s),
        ("mtbf_s", mtbf_s),
    ):
        validate.positive(name, value)
    i, c, t = interval_s, write_s, mtbf_s
    restart = t * (1 - goodput * (1 + c / i)) - (i + c) / 2
    if restart < 0:
        best = 1 / wall_clock_s(1.0, i, c, 0.0, t) if (i + c) / 2 < t else 0.0
        raise ValueError(
            f"goodput={goodput} is out of reach at this interval: even an instant "
            f"restart gives {best:.4f}"
        )
    return restart


def plan(spec: RunSpec) -> Plan:
    """The budget of the run ``spec`` describes."""
    validate.instance_of("spec", spec, RunSpec)
    cfg = spec.config
    n = flops.n_params(cfg)
    c6 = flops.six_nd(n, spec.tokens)
    c = flops.flops_per_token(cfg, spec.seq_len) * spec.tokens
    cluster_flops_per_s = spec.n_gpus * accelerator(spec.gpu).peak("bf16") * spec.mfu
    useful_s = c / cluster_flops_per_s

    ckpt = cadence.checkpoint_bytes(n)
    write_s = ckpt / spec.storage_bytes_per_s
    mtbf_s = HOUR_S / (spec.failures_per_gpu_hour * spec.n_gpus)
    young = cadence.young_interval(write_s, mtbf_s)
    daly = cadence.daly_interval(write_s, mtbf_s)
    interval = spec.interval_s if spec.interval_s is not None else young

    wall_s = wall_clock_s(useful_s, interval, write_s, spec.restart_s, mtbf_s)
    writes_s = useful_s / interval * write_s
    failures = wall_s / mtbf_s
    waste_daly = cadence.waste_fraction(
        interval, write_s, mtbf_s, spec.restart_s, exact=True
    )
    return Plan(
        spec=spec,
        n_params=float(n),
        compute_flops_6nd=c6,
        compute_flops=float(c),
        ideal_days=useful_s / DAY_S,
        ideal_days_6nd=c6 / cluster_flops_per_s / DAY_S,
        memory=memory_per_gpu(spec),
        checkpoint_bytes=float(ckpt),
        checkpoint_write_s=write_s,
        job_mtbf_s=mtbf_s,
        young_interval_s=young,
        daly_interval_s=daly,
        interval_s=interval,
        checkpoint_days=writes_s / DAY_S,
        rework_days=failures * (interval + write_s) / 2 / DAY_S,
        # instant restarts cost nothing: 0 days, not 0 x the count of
        # failures (which, were it ever to overflow, would give NaN)
        restart_days=failures * spec.restart_s / DAY_S if spec.restart_s else 0.0,
        expected_days=wall_s / DAY_S,
        expected_failures=failures,
        goodput=useful_s / wall_s,
        goodput_daly=1 - waste_daly,
    )


def as_dict(p: Plan) -> dict:
    """The plan as plain numbers with stable keys (what ``--json`` prints)."""
    validate.instance_of("plan", p, Plan)
    m = p.memory
    return {
        "model": p.spec.config.name,
        "gpu": accelerator(p.spec.gpu).name,
        "n_gpus": p.spec.n_gpus,
        "dp": p.spec.dp,
        "tp": p.spec.tp,
        "pp": p.spec.pp,
        "zero_stage": p.spec.zero_stage,
        "recompute": p.spec.recompute,
        "seq_len": p.spec.seq_len,
        "tokens": p.spec.tokens,
        "mfu": p.spec.mfu,
        "n_params": p.n_params,
        "compute_flops": p.compute_flops,
        "compute_flops_6nd": p.compute_flops_6nd,
        "flops_convention": "6 N_matmul + 12 L h s per token (PaLM MFU)",
        "ideal_days": p.ideal_days,
        "ideal_days_6nd": p.ideal_days_6nd,
        "memory_per_gpu_bytes": m.total_bytes,
        "memory_breakdown_bytes": {
            "weights": m.weights_bytes,
            "gradients": m.gradients_bytes,
            "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes,
        },
        "activation_count": m.activation_count,
        "hbm_bytes": accelerator(p.spec.gpu).hbm_bytes,
        "usable_hbm_bytes": m.usable_hbm_bytes,
        "fits": m.fits,
        "short_bytes": m.short_bytes,
        "checkpoint_bytes": p.checkpoint_bytes,
        "checkpoint_write_s": p.checkpoint_write_s,
        "job_mtbf_s": p.job_mtbf_s,
        "checkpoint_interval_s": p.interval_s,
        "young_interval_s": p.young_interval_s,
        "daly_interval_s": p.daly_interval_s,
        "expected_failures": p.expected_failures,
        "lost_days": {
            "checkpoints": p.checkpoint_days,
            "rework": p.rework_days,
            "restarts": p.restart_days,
        },
        "goodput": p.goodput,
        "goodput_daly": p.goodput_daly,
        "expected_days": p.expected_days,
    }
