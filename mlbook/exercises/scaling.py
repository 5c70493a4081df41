"""Exercises of the scaling chapter (notebooks/scaling.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.exercises._core import Integer, Mistake, exercise, register
from mlbook.mfu import flops
from mlbook.scaling import formulas

POWERS_OF_TWO = tuple(2**i for i in range(15))  # data-parallel sizes 1 .. 16384


def _smallest_dp(model, gpu, t, p, hbm_share, stage=1):
    """The smallest power of two N_d whose ZeRO ``stage`` model state of one
    GPU's 1/(t p) slice fits in ``hbm_share`` of the HBM."""
    n_gpu = flops.n_params(transformer.PRESETS[model]) / (t * p)
    budget = hbm_share * accelerators.accelerator(gpu).hbm_usable_bytes  # driver total
    for d in POWERS_OF_TWO:
        if formulas.zero_state_bytes(n_gpu, d, stage) <= budget:
            return d
    return None  # no data-parallel size fits: the state needs another stage


def _interleaved(p, bubble, v):
    """The fewest micro-batches for the bubble with v chunks, rounded up to a
    multiple of p (what the interleaved schedule runs)."""
    m = formulas.micro_batches_for_bubble(p, bubble, v)
    return math.ceil(m / p) * p


def _scaling_1(model, gpu, t, p, hbm_share, bubble, v):
    n_dp = _smallest_dp(model, gpu, t, p, hbm_share)
    if n_dp is None:
        raise ValueError(f"no power of two up to {POWERS_OF_TWO[-1]} fits")
    return {
        "n_dp": n_dp,
        "m": formulas.micro_batches_for_bubble(p, bubble),
        "m_interleaved": _interleaved(p, bubble, v),
    }


SCALING_1 = exercise(
    "scaling-1",
    level=2,
    kind="compute",
    inputs={
        "model": "Llama-3-405B",
        "gpu": "H100",
        "t": 8,
        "p": 16,
        "hbm_share": 0.25,
        "bubble": 0.05,
        "v": 4,
    },
    answers={
        "n_dp": Integer("ranks", "ZeRO-1's data-parallel size N_d (a power of two)"),
        "m": Integer("micro-batches", "micro-batches for a bubble of at most 5 %"),
        "m_interleaved": Integer(
            "micro-batches", "micro-batches with v = 4 (a multiple of p)"
        ),
    },
    key=_scaling_1,
    mistakes=(
        Mistake(
            "n_dp",
            "gradients (or weights) sharded too",
            "ZeRO-1 shards only the optimizer state; each GPU keeps its slice's "
            "16-bit weights and gradients whole.",
            lambda **i: _smallest_dp(
                i["model"], i["gpu"], i["t"], i["p"], i["hbm_share"], stage=2
            ),
        ),
        Mistake(
            "n_dp",
            "the whole HBM as the budget",
            "the model state may take a quarter of the HBM; the rest is for "
            "activations.",
            lambda **i: _smallest_dp(i["model"], i["gpu"], i["t"], i["p"], 1.0),
        ),
        Mistake(
            "m",
            "a bubble of (p - 1) / m",
            "the bubble is (p - 1) of the m + p - 1 stage-times a step takes.",
            lambda p, bubble, **_: math.ceil((p - 1) / bubble),
        ),
        Mistake(
            "m",
            "the interleaved count",
            "this answer is for the plain schedule, v = 1.",
            lambda p, bubble, v, **_: formulas.micro_batches_for_bubble(p, bubble, v),
        ),
        Mistake(
            "m_interleaved",
            "the bound without the schedule's rule",
            "the interleaved schedule needs m to be a multiple of p.",
            lambda p, bubble, v, **_: formulas.micro_batches_for_bubble(p, bubble, v),
        ),
        Mistake(
            "m_interleaved",
            "v left out",
            "with v chunks per device the bubble is (p - 1) / (v m + p - 1).",
            lambda p, bubble, **_: _interleaved(p, bubble, 1),
        ),
    ),
)

EXERCISES = register(SCALING_1)
