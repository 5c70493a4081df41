"""Artifacts to diagnose, as a practitioner meets them: one GPU's profile of
a training step with one slow bucket, and an MFU dashboard whose logger
counts wrongly.

Each is drawn from a seed with Python's own ``random.Random`` (the same
numbers on every machine and Python) and built on the chapter's formulas
(``flops``, ``formulas``), so an exercise's key is the generator's planted
cause and the formulas' answer, in milliseconds and fractions that do not
depend on the machine that draws them. Torch-free and standard library only.

A profile's buckets are the ones a step's trace splits into: the weight
matmuls of the forward and the backward pass, the LM head, attention, the
element-wise work, the optimizer and the wait for data. A healthy matmul
bucket runs at one rate, the share of the GPU's dense peak that this step's
matmuls reach; the planted defect runs one matmul bucket ``slowdown`` times
slower. The fix brings it back to the healthy rate.

A dashboard lists a few runs, each with its job throughput and the MFU its
logger printed; every run went through the same logger, and the logger makes
one of the mistakes in ``CAUSES`` (``logged_mfu``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mlbook.common import accelerators, transformer, validate
from mlbook.common.transformer import TransformerConfig
from mlbook.mfu import flops, formulas

# A step's buckets, as a profile names them.
BUCKETS = {
    "forward_matmuls": "forward, weight matmuls",
    "backward_matmuls": "backward, weight matmuls",
    "lm_head": "LM head, forward and backward",
    "attention": "attention, forward and backward",
    "elementwise": "norms, activations and loss",
    "optimizer": "optimizer step",
    "data_wait": "waiting for data",
}
MATMUL_BUCKETS = ("forward_matmuls", "backward_matmuls", "lm_head", "attention")

# What a healthy step's buckets take, drawn from these ranges: the matmuls'
# share of the dense peak (Bekman's MAMF is 80 % of an H100 SXM's and 87 % of
# an A100 SXM's; a model's own shapes run below it), the element-wise work and
# the optimizer as shares of the matmuls' time, the data wait in ms.
_HEALTHY_EFFICIENCY = (0.60, 0.75)
_ELEMENTWISE_SHARE = (0.06, 0.10)
_OPTIMIZER_SHARE = (0.02, 0.04)
_DATA_WAIT_MS = (0.1, 1.0)
_SLOWDOWN = (2.0, 4.0)  # how many times slower the planted bucket runs


def bucket_flops(cfg: TransformerConfig, batch: int, seq_len: int) -> dict:
    """The FLOPs of each matmul bucket of one training step on b x s tokens,
    counted as equation eq-train-flops counts them: the forward's weight
    matmuls 2 (N_matmul - Vh) a token, the backward's twice that, the LM head
    6Vh (forward and backward) and attention 12Lhs. They add up to
    ``flops_per_token`` x b x s."""
    validate.instance_of("cfg", cfg, TransformerConfig)
    validate.positive_int("batch", batch)
    validate.positive_int("seq_len", seq_len)
    tokens = batch * seq_len
    head = cfg.vocab_size * cfg.d_model  # the LM head's weights, V x h
    body = flops.matmul_params(cfg) - head
    attention = 3 * flops.attention_flops_per_token(cfg, seq_len)  # 12 L h s
    return {
        "forward_matmuls": 2 * body * tokens,
        "backward_matmuls": 4 * body * tokens,
        "lm_head": 6 * head * tokens,
        "attention": attention * tokens,
    }


@dataclass(frozen=True)
class Bucket:
    name: str  # a key of BUCKETS
    label: str  # what a profile calls it
    ms: float  # its time in one step, to 0.1 ms as a profile prints it
    share: float  # of the step's time


@dataclass(frozen=True)
class StepProfile:
    """One GPU's profile of a training step, with one planted slow bucket."""

    model: str
    gpu: str
    batch: int
    seq_len: int
    seed: int
    buckets: tuple  # Bucket, in BUCKETS' order
    defect: str  # the slow bucket's name
    slowdown: float  # how many times slower than healthy it ran
    healthy_flops_per_s: float  # the rate every healthy matmul bucket runs at

    @property
    def step_ms(self) -> float:
        return sum(b.ms for b in self.buckets)

    def ms(self, name: str) -> float:
        validate.one_of("name", name, tuple(BUCKETS))
        return next(b.ms for b in self.buckets if b.name == name)

    @property
    def fixed_step_ms(self) -> float:
        """The step once the slow bucket runs at the healthy rate again."""
        cfg = transformer.PRESETS[self.model]
        work = bucket_flops(cfg, self.batch, self.seq_len)[self.defect]
        return (
            self.step_ms - self.ms(self.defect) + 1e3 * work / self.healthy_flops_per_s
        )

    @property
    def largest(self) -> str:
        """The bucket that takes the most time (not always the slow one)."""
        return max(self.buckets, key=lambda b: b.ms).name


def _check_seed(seed) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return seed


def _draw(rng: random.Random, low_high: tuple, digits: int) -> float:
    return round(rng.uniform(*low_high), digits)


def step_profile(
    model: str, gpu: str, batch: int, seq_len: int, seed: int
) -> StepProfile:
    """A step's profile on one ``gpu`` (bf16) for ``model`` on ``batch`` x
    ``seq_len`` tokens, drawn from ``seed``: the healthy matmul rate, which
    matmul bucket is slow and by how much, and the other buckets' times."""
    validate.one_of("model", model, tuple(transformer.PRESETS))
    _check_seed(seed)
    cfg = transformer.PRESETS[model]
    work = bucket_flops(cfg, batch, seq_len)
    peak = accelerators.peak_flops_per_s(gpu, "bf16")
    rng = random.Random(seed)
    rate = _draw(rng, _HEALTHY_EFFICIENCY, 2) * peak  # FLOP/s
    defect = rng.choice(MATMUL_BUCKETS)
    slowdown = _draw(rng, _SLOWDOWN, 1)
    ms = {name: 1e3 * f / rate for name, f in work.items()}
    healthy_matmul_ms = sum(ms.values())
    ms[defect] *= slowdown
    ms["elementwise"] = healthy_matmul_ms * _draw(rng, _ELEMENTWISE_SHARE, 3)
    ms["optimizer"] = healthy_matmul_ms * _draw(rng, _OPTIMIZER_SHARE, 3)
    ms["data_wait"] = _draw(rng, _DATA_WAIT_MS, 1)
    shown = {name: round(ms[name], 1) for name in BUCKETS}
    step = sum(shown.values())
    buckets = tuple(
        Bucket(name, label, shown[name], shown[name] / step)
        for name, label in BUCKETS.items()
    )
    return StepProfile(
        model, gpu, batch, seq_len, seed, buckets, defect, slowdown, rate
    )


# --- an MFU dashboard whose logger counts wrongly ------------------------------------

# What the logger does wrong: name -> how a dashboard's caption would say it.
CAUSES = {
    "one_gpu_peak": "the job's tokens/s over one GPU's peak",
    "per_gpu_tokens": "one GPU's tokens/s over the whole job's peak",
    "forward_only": "the forward pass's FLOPs only",
    "recompute_counted": "the recomputed forward counted (an HFU)",
    "sparse_peak": "the 2:4 sparse peak, twice the dense one",
    "six_n": "6N with N all parameters, no attention term",
}
# The models a dashboard draws from (the page prints each one's N_matmul), and
# the GPU counts a run of that size is drawn from.
DASHBOARD_MODELS = {
    "Llama-2-7B": (8, 16, 64),
    "Llama-3-8B": (16, 64, 256),
    "Llama-3-70B": (256, 1024, 2048),
    "Llama-3-405B": (2048, 8192, 16384),
}
_DASHBOARD_GPUS = ("H100 SXM", "A100 SXM")
_DASHBOARD_SEQ_LENS = (2048, 4096, 8192)
_TRUE_MFU = (0.30, 0.50)  # what a run really reaches, counted right
_RUN_NAMES = "ABCDEFGH"


def logged_mfu(
    cause: str,
    tokens_per_s: float,
    cfg: TransformerConfig,
    seq_len: int,
    peak_flops_per_s: float,
    n_gpus: int,
) -> float:
    """The MFU a logger prints that makes the mistake ``cause`` (a key of
    CAUSES), for a job of ``n_gpus`` GPUs at ``tokens_per_s`` in all. Not
    ``formulas.mfu``: a wrong count may pass 100 %."""
    validate.one_of("cause", cause, tuple(CAUSES))
    validate.positive("tokens_per_s", tokens_per_s)
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive_int("n_gpus", n_gpus)
    per_token = flops.flops_per_token(cfg, seq_len)  # 6 N_matmul + 12 L h s
    capacity = n_gpus * peak_flops_per_s  # the job's FLOP/s at 100 %
    tokens = tokens_per_s
    if cause == "one_gpu_peak":
        capacity = peak_flops_per_s
    elif cause == "per_gpu_tokens":
        tokens = tokens_per_s / n_gpus
    elif cause == "forward_only":
        per_token = flops.flops_per_token(cfg, seq_len, "forward")
    elif cause == "recompute_counted":
        per_token = flops.flops_per_token(cfg, seq_len, recompute=True)
    elif cause == "sparse_peak":
        capacity = 2 * n_gpus * peak_flops_per_s
    else:  # six_n
        per_token = 6 * flops.n_params(cfg)
    return tokens * per_token / capacity


@dataclass(frozen=True)
class LoggedRun:
    run: str  # "A", "B", ...
    model: str
    gpu: str
    n_gpus: int
    seq_len: int
    tokens_per_s: int  # the whole job's
    logged_mfu: float  # what the dashboard printed

    @property
    def mfu(self) -> float:
        """The run's MFU counted right: equation eq-mfu, the dense bf16 peak."""
        cfg = transformer.PRESETS[self.model]
        peak = accelerators.peak_flops_per_s(self.gpu, "bf16")
        return formulas.mfu(self.tokens_per_s, cfg, self.seq_len, peak, self.n_gpus)


@dataclass(frozen=True)
class Dashboard:
    seed: int
    cause: str  # a key of CAUSES: what the logger did wrong
    runs: tuple  # LoggedRun

    def run(self, name: str) -> LoggedRun:
        validate.one_of("name", name, tuple(r.run for r in self.runs))
        return next(r for r in self.runs if r.run == name)


def mfu_dashboard(seed: int, n_runs: int = 3) -> Dashboard:
    """A dashboard of ``n_runs`` runs (different models), drawn from
    ``seed``: the logger's mistake, each run's model, GPU, GPU count,
    sequence length and true MFU, and from them the job's tokens/s (whole)
    and the MFU the logger printed."""
    _check_seed(seed)
    validate.positive_int("n_runs", n_runs)
    if n_runs > len(DASHBOARD_MODELS):
        raise ValueError(
            f"n_runs={n_runs!r}: a dashboard has at most {len(DASHBOARD_MODELS)} "
            "runs, one per model"
        )
    rng = random.Random(seed)
    cause = rng.choice(tuple(CAUSES))
    models = rng.sample(tuple(DASHBOARD_MODELS), n_runs)
    runs = []
    for name, model in zip(_RUN_NAMES, models, strict=False):
        cfg = transformer.PRESETS[model]
        gpu = rng.choice(_DASHBOARD_GPUS)
        n_gpus = rng.choice(DASHBOARD_MODELS[model])
        seq_len = rng.choice(_DASHBOARD_SEQ_LENS)
        peak = accelerators.peak_flops_per_s(gpu, "bf16")
        true_mfu = _draw(rng, _TRUE_MFU, 3)
        top = formulas.max_tokens_per_s(cfg, seq_len, peak, n_gpus)
        tokens = round(true_mfu * top)
        shown = logged_mfu(cause, tokens, cfg, seq_len, peak, n_gpus)
        runs.append(LoggedRun(name, model, gpu, n_gpus, seq_len, tokens, shown))
    return Dashboard(seed, cause, tuple(runs))
