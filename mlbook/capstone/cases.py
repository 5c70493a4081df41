"""Artifacts for the capstone's diagnosis exercises, made by seeded
generators from the chapter's tested formulas: the same seed gives the same
artifact on every machine (the standard library's random.Random), in
milliseconds.

- ``planted_profile(seed)``: one step's profile by bucket, beside last week's
  healthy step of the same model, with one defect of the slow loop planted in
  today's. Which fix undoes it, and what step does the fix leave?
- ``recompute_report(seed)``: a run's report, as a profiler with a hardware
  FLOP counter gives it: throughput, step time, MFU and HFU. Which recompute
  setting runs, and what step would dropping it leave?

Torch-free: pages, exercises and tests import it alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mlbook.capstone import formulas
from mlbook.common import accelerators, transformer, validate
from mlbook.mfu import flops

# A healthy step of a mid-sized GPT on one GPU, as shares of its time (the
# bucket names of formulas.BUCKETS; no communication on one GPU, no recompute).
HEALTHY_SHARES = {
    "matmul": 0.55,
    "attention": 0.12,
    "elementwise": 0.17,
    "optimizer": 0.05,
    "data": 0.02,
    "sync": 0.01,
    "idle": 0.08,
}
# The defects a generator may plant, by the fix that removes it: the bucket
# it grows and by what factor, at least and at most (full recompute instead
# adds a recompute bucket of one forward pass: a third of the model's own
# compute, which is a forward and a backward twice its cost).
PLANTABLE = {
    "pretokenise": ("data", 6.0, 12.0),
    "log_every_n": ("sync", 8.0, 15.0),
    "sdpa": ("attention", 2.5, 3.5),
    "fused_adamw": ("optimizer", 3.0, 5.0),
    "no_recompute": ("recompute", None, None),
}
JITTER = 0.03  # two measurements of a healthy bucket differ by up to 3 %


def _ms(x: float) -> float:
    """Milliseconds to one decimal, as a profiler's summary prints them."""
    return round(x, 1)


@dataclass(frozen=True)
class PlantedProfile:
    """Two profiles of one model's step in milliseconds per bucket: last
    week's healthy one and today's with ``defect`` planted (a key of
    PLANTABLE, named by the fix that removes it)."""

    seed: int
    defect: str
    healthy_ms: dict = field(hash=False)
    today_ms: dict = field(hash=False)

    @property
    def bucket(self) -> str:
        """The bucket the defect grew."""
        return PLANTABLE[self.defect][0]

    @property
    def healthy_step_ms(self) -> float:
        return _ms(sum(self.healthy_ms.values()))

    @property
    def today_step_ms(self) -> float:
        return _ms(sum(self.today_ms.values()))

    @property
    def fixed_step_ms(self) -> float:
        """Today's step once the fix returns the defect's bucket to what it
        took last week: today's step less the bucket's excess only."""
        excess = self.today_ms[self.bucket] - self.healthy_ms[self.bucket]
        return _ms(self.today_step_ms - excess)

    def rows(self) -> list[dict]:
        """One row per bucket, then the step, as the profile shows them."""
        out = [
            {
                "bucket": formulas.BUCKET_LABELS[b],
                "last week (ms)": self.healthy_ms[b],
                "today (ms)": self.today_ms[b],
            }
            for b in formulas.BUCKETS
            if self.healthy_ms[b] or self.today_ms[b]
        ]
        step = {
            "last week (ms)": self.healthy_step_ms,
            "today (ms)": self.today_step_ms,
        }
        return [*out, {"bucket": "step", **step}]


def planted_profile(seed: int) -> PlantedProfile:
    """Last week's healthy step and today's with one planted defect, drawn
    from ``seed``: a step of 400 to 900 ms split by HEALTHY_SHARES, each
    bucket measured twice (each time within JITTER of its share), and one
    defect of PLANTABLE grown into today's profile."""
    seed = validate.positive_int("seed", seed)
    rng = random.Random(seed)
    step_ms = rng.uniform(400.0, 900.0)
    defect = rng.choice(sorted(PLANTABLE))

    def measured() -> dict:
        out = dict.fromkeys(formulas.BUCKETS, 0.0)
        for b, share in HEALTHY_SHARES.items():
            out[b] = _ms(share * step_ms * (1 + rng.uniform(-JITTER, JITTER)))
        return out

    healthy, today = measured(), measured()
    bucket, low, high = PLANTABLE[defect]
    if defect == "no_recompute":
        compute = today["matmul"] + today["attention"] + today["elementwise"]
        today["recompute"] = _ms(compute / 3)
    else:
        today[bucket] = _ms(today[bucket] * rng.uniform(low, high))
    return PlantedProfile(seed, defect, healthy, today)


# --- HFU against MFU: which recompute setting ------------------------------------

RECOMPUTE_SETTINGS = ("none", "selective", "full")
# Runs a report may come from: a model, its sequence length and its GPUs.
_RUNS = (
    ("Llama-3-8B", 8192, 64),
    ("Llama-3-70B", 8192, 1024),
    ("Llama-2-7B", 4096, 128),
)


def hardware_flops_per_token(
    cfg: transformer.TransformerConfig, seq_len: int, setting: str
) -> float:
    """The FLOPs a token costs the hardware under a recompute ``setting``:
    the model's 6 N_matmul + 12 L h s, plus a second forward for full
    recompute (4 x the forward in all), or for selective recompute the
    attention core's forward again (Q K^T and P V, 4 L h s: Korthikanti et
    al. recompute only what the core's softmax and dropout save)."""
    validate.one_of("setting", setting, RECOMPUTE_SETTINGS)
    model = flops.flops_per_token(cfg, seq_len)
    if setting == "full":
        return flops.flops_per_token(cfg, seq_len, recompute=True)
    if setting == "selective":
        return model + flops.attention_flops_per_token(cfg, seq_len)
    return model


@dataclass(frozen=True)
class RecomputeReport:
    """A run's report: model, sequence length, GPUs (H100 SXM, bf16), tokens
    a step, step time, tokens/s, MFU, and HFU from a hardware FLOP counter;
    ``setting`` is the recompute it ran with (what the reader finds)."""

    seed: int
    model: str
    seq_len: int
    n_gpus: int
    tokens_per_step: int
    step_s: float
    mfu: float
    hfu: float
    setting: str

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def step_s_without(self) -> float:
        """The step with the recompute dropped, at the same hardware FLOP
        rate (HFU): the hardware then does only the model's FLOPs, so the
        step shrinks by MFU / HFU."""
        return self.step_s * self.mfu / self.hfu

    def rows(self) -> list[dict]:
        return [
            {"quantity": "model", "value": self.model},
            {"quantity": "sequence length (tokens)", "value": f"{self.seq_len:,}"},
            {"quantity": "GPUs (H100 SXM, bf16)", "value": f"{self.n_gpus:,}"},
            {"quantity": "tokens a step", "value": f"{self.tokens_per_step:,}"},
            {"quantity": "step (s)", "value": f"{self.step_s:.2f}"},
            {"quantity": "MFU (%)", "value": f"{self.mfu:.1%}"},
            {"quantity": "HFU, hardware counter (%)", "value": f"{self.hfu:.1%}"},
        ]


def recompute_report(seed: int) -> RecomputeReport:
    """A run's report drawn from ``seed``: one of the runs above, a recompute
    setting, and a hardware FLOP rate of 35 to 55 % of the peak (HFU, rounded
    to 0.1 %). MFU is HFU times model over hardware FLOPs a token; the step
    time follows from the tokens a step (4 M, rounded to whole sequences)
    and is rounded to 0.01 s, and MFU and HFU are then taken from that
    rounded step, as a report would compute them."""
    seed = validate.positive_int("seed", seed)
    rng = random.Random(seed)
    model, seq_len, n_gpus = _RUNS[rng.randrange(len(_RUNS))]
    setting = rng.choice(RECOMPUTE_SETTINGS)
    hfu = round(rng.uniform(0.35, 0.55), 3)
    cfg = transformer.PRESETS[model]
    peak = n_gpus * accelerators.peak_flops_per_s("H100 SXM", "bf16")
    hardware = hardware_flops_per_token(cfg, seq_len, setting)
    tokens_per_step = (4 * 2**20 // seq_len) * seq_len
    step_s = round(tokens_per_step * hardware / (hfu * peak), 2)
    tokens_per_s = tokens_per_step / step_s
    return RecomputeReport(
        seed,
        model,
        seq_len,
        n_gpus,
        tokens_per_step,
        step_s,
        tokens_per_s * flops.flops_per_token(cfg, seq_len) / peak,
        tokens_per_s * hardware / peak,
        setting,
    )
