"""Exercises of the activation-recompute chapter (notebooks/recompute.md)."""

from __future__ import annotations

import math

from mlbook.exercises._core import Integer, Mistake, exercise, register
from mlbook.recompute import formulas


def first_s_above(share, target: float, s_hint: float) -> int:
    """The smallest whole s with ``share(s) > target``, for a ``share`` that
    grows with s, searched from a real-valued estimate ``s_hint``."""
    s = max(1, math.floor(s_hint))
    while s > 1 and share(s) > target:
        s -= 1
    while share(s) <= target:
        s += 1
    return s


def _recompute_1(h, d_ff_mult, mlp, overhead):
    s_star = formulas.seq_len_for_selective_overhead(h, overhead, d_ff_mult)

    def extra(s):
        return formulas.selective_extra_flops_fraction(s, h, d_ff_mult, mlp)

    return {"seq_len": first_s_above(extra, overhead, s_star)}


def _wrong(share):
    """The first s at which a wrongly counted ``share(s, h, m)`` passes."""

    def value(h, d_ff_mult, overhead, **_):
        return first_s_above(lambda s: share(s, h, d_ff_mult), overhead, 1.0)

    return value


RECOMPUTE_1 = exercise(
    "recompute-1",
    level=2,
    kind="derive",
    inputs={"h": 4096, "d_ff_mult": 4, "mlp": "gelu", "overhead": 0.10},
    answers={
        "seq_len": Integer(
            "tokens", "the smallest whole s at which selective costs over 10 %"
        )
    },
    key=_recompute_1,
    mistakes=(
        Mistake(
            "seq_len",
            "the core's share of the forward, not of the step",
            "selective recomputes the core once, in a step of three forwards' "
            "worth: its extra is the core's share divided by 3.",
            _wrong(lambda s, h, m: formulas.attention_core_fraction(s, h, m)),
        ),
        Mistake(
            "seq_len",
            "a SwiGLU MLP",
            "the question's MLP is a GELU one: two matrices of h x d_ff, 4h d_ff "
            "FLOPs a token, not SwiGLU's three.",
            _wrong(
                lambda s, h, m: formulas.selective_extra_flops_fraction(
                    s, h, m, "swiglu"
                )
            ),
        ),
        Mistake(
            "seq_len",
            "the MLP left out",
            "a layer's forward also runs the MLP, 4h d_ff FLOPs a token.",
            _wrong(lambda s, h, m: 4 * s * h / (8 * h * h + 4 * s * h) / 3),
        ),
        Mistake(
            "seq_len",
            "the scores QK^T alone",
            "the core has two sequence-dependent matmuls, QK^T and PV, 2sh FLOPs "
            "a token each.",
            _wrong(
                lambda s, h, m: 2 * s * h / (8 * h * h + 4 * m * h * h + 2 * s * h) / 3
            ),
        ),
        Mistake(
            "seq_len",
            "a step of four forwards",
            "the overhead is a share of the training step without recompute: "
            "three forwards' worth.",
            _wrong(lambda s, h, m: formulas.attention_core_fraction(s, h, m) / 4),
        ),
    ),
)

EXERCISES = register(RECOMPUTE_1)
