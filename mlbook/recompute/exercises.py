"""Exercises of the activation-recompute chapter (notebooks/recompute.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.common.units import GIB
from mlbook.judge import (
    Code,
    Integer,
    Mistake,
    Real,
    WrongFunction,
    exercise,
    register,
)
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu
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

RECOMPUTE_2 = exercise(
    "recompute-2",
    level=1,
    kind="predict",
    answers={
        "full_extra_time": Real(
            "fraction", "your prediction: full recompute's extra step time", 0.1
        ),
        "selective_extra_time": Real(
            "fraction", "your prediction: selective recompute's extra step time", 0.1
        ),
    },
)


# --- recompute-3: another model's memory under each strategy --------------------------


def _shape(model):
    """(h, a, L) of a preset model."""
    cfg = transformer.PRESETS[model]
    return cfg.d_model, cfg.n_heads, cfg.n_layers


def _recompute_3(model, seq_len, batch):
    h, a, L = _shape(model)
    plans = formulas.checkpoint_plans(seq_len, batch, h, a, L)
    return {f"{k}_gib": p.memory_bytes / GIB for k, p in plans.items()}


def _layer(model, seq_len, batch, mode="none"):
    """One layer's bytes under Korthikanti's count, and L."""
    h, a, L = _shape(model)
    return formulas.activation_bytes_per_layer(seq_len, batch, h, a, mode), L


def _sqrt_plan(c=None, whole=True, segment=True):
    """Chen's plan computed another way: ``c`` checkpoints (ceil(sqrt L) by
    default), a segment of L/c layers not rounded up (``whole=False``), or the
    segment being recomputed left out (``segment=False``)."""

    def value(model, seq_len, batch):
        A, L = _layer(model, seq_len, batch)
        input_bytes, _ = _layer(model, seq_len, batch, "full")
        k = c(L) if c else formulas.sqrt_segments(L)
        layers = (math.ceil(L / k) if whole else L / k) if segment else 0
        return (k * input_bytes + layers * A) / GIB

    return value


RECOMPUTE_3 = exercise(
    "recompute-3",
    level=1,
    kind="compute",
    inputs={"model": "MT-NLG 530B", "seq_len": 2048, "batch": 1},
    answers={
        "none_gib": Real("GiB", "activation memory without recompute", 0.01),
        "selective_gib": Real("GiB", "with selective recompute", 0.01),
        "sqrt_gib": Real("GiB", "with sqrt(L) segments, c = ceil(sqrt L)", 0.01),
        "full_gib": Real("GiB", "with full recompute", 0.01),
    },
    key=_recompute_3,
    mistakes=(
        Mistake(
            "none_gib",
            "the attention core left out",
            "without recompute every layer also keeps its 5as^2b bytes of "
            "scores, softmax and dropout.",
            lambda **i: _recompute_3(**i)["selective_gib"],
        ),
        Mistake(
            "none_gib",
            "one layer instead of L",
            "the model has L layers, and each keeps A.",
            lambda **i: _layer(**i)[0] / GIB,
        ),
        Mistake(
            "selective_gib",
            "one layer instead of L",
            "selective keeps 34sbh in every one of the L layers.",
            lambda **i: _layer(**i, mode="selective")[0] / GIB,
        ),
        Mistake(
            "sqrt_gib",
            "L/c layers a segment, not rounded up",
            "a segment holds whole layers: ceil(L/c) of them.",
            _sqrt_plan(whole=False),
        ),
        Mistake(
            "sqrt_gib",
            "c = floor(sqrt L)",
            "Chen's plan rounds sqrt L up: c = ceil(sqrt L).",
            _sqrt_plan(c=lambda L: math.isqrt(L)),
        ),
        Mistake(
            "sqrt_gib",
            "the checkpoints alone",
            "while backward recomputes a segment, that segment's activations "
            "are all alive: add ceil(L/c) A.",
            _sqrt_plan(segment=False),
        ),
        Mistake(
            "full_gib",
            "L I without the layer being recomputed",
            "backward rebuilds one layer at a time, and holds its A bytes while "
            "it does.",
            lambda **i: _layer(**i, mode="full")[0] * _layer(**i)[1] / GIB,
        ),
    ),
)


# --- recompute-4: c* and the memory bound, derived ------------------------------------


def _per_layer(model, seq_len, batch):
    """(L, A, I) under Korthikanti's count."""
    A, L = _layer(model, seq_len, batch)
    return L, A, _layer(model, seq_len, batch, "full")[0]


def _recompute_4(model, seq_len, batch):
    return _recompute_4_with(model, seq_len, batch)


def _recompute_4_with(model, seq_len, batch, mode="none"):
    """The key, with A what a layer keeps under ``mode`` (a mistake's
    "selective")."""
    A, L = _layer(model, seq_len, batch, mode)
    input_bytes = _layer(model, seq_len, batch, "full")[0]
    c = formulas.optimal_segments(L, A, input_bytes)
    return {"c_star": c, "bound_gib": (c * input_bytes + L * A / c) / GIB}


def _from_layers(f):
    """A mistake computed from (L, A, I) by ``f``."""
    return lambda **inputs: f(*_per_layer(**inputs))


RECOMPUTE_4 = exercise(
    "recompute-4",
    level=2,
    kind="derive",
    inputs={"model": "GPT-3 175B", "seq_len": 2048, "batch": 1},
    answers={
        "c_star": Real("count", "c*, the segment count with the least memory", 0.01),
        "bound_gib": Real("GiB", "the least memory, c* I + (L/c*) A", 0.01),
    },
    key=_recompute_4,
    mistakes=(
        Mistake(
            "c_star",
            "Chen's sqrt(L)",
            "sqrt(L) is the optimum only when a layer keeps as much as its "
            "input; set the derivative of c I + (L/c) A to zero.",
            lambda **i: math.sqrt(_per_layer(**i)[0]),
        ),
        Mistake(
            "c_star",
            "sqrt(L I / A), the ratio upside down",
            "more bytes kept per layer (A) favour more, shorter segments.",
            _from_layers(lambda L, A, i: math.sqrt(L * i / A)),
        ),
        Mistake(
            "c_star",
            "sqrt(A / I), without L",
            "the segments share L layers: L enters c*.",
            _from_layers(lambda L, A, i: math.sqrt(A / i)),
        ),
        Mistake(
            "c_star",
            "selective's 34sbh as A",
            "A is what a layer keeps without recompute, sbh(34 + 5as/h).",
            lambda **i: _recompute_4_with(**i, mode="selective")["c_star"],
        ),
        Mistake(
            "bound_gib",
            "sqrt(L A I), without the 2",
            "at c* the two terms are equal, sqrt(L A I) each.",
            _from_layers(lambda L, A, i: math.sqrt(L * A * i) / GIB),
        ),
        Mistake(
            "bound_gib",
            "full recompute's L I + A",
            "that is the memory at c = L, a little above the bound.",
            lambda **i: _recompute_3(**i)["full_gib"],
        ),
    ),
)


# --- recompute-5: HFU and MFU under full recompute ------------------------------------


def _recompute_5(model, seq_len, gpu, dtype, n_gpus, tokens_per_s):
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    args = (tokens_per_s, cfg, seq_len, peak, n_gpus)
    return {"mfu": mfu.mfu(*args), "hfu": mfu.hfu(*args, recompute=True)}


def _six_n(model, gpu, dtype, n_gpus, tokens_per_s, **_):
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    return mfu.mfu_from_six_nd(flops.n_params(cfg), tokens_per_s, peak, n_gpus)


RECOMPUTE_5 = exercise(
    "recompute-5",
    level=1,
    kind="compute",
    inputs={
        "model": "Llama-3-70B",
        "seq_len": 8192,
        "gpu": "H100 SXM",
        "dtype": "bf16",
        "n_gpus": 2048,
        "tokens_per_s": 1_000_000,
    },
    answers={
        "mfu": Real("fraction", "MFU, 6N + 12Lhs a token", 0.01),
        "hfu": Real("fraction", "HFU, the recomputed forward counted", 0.01),
    },
    key=_recompute_5,
    mistakes=(
        Mistake(
            "mfu",
            "the recomputed forward counted",
            "MFU counts the model's FLOPs, 3 forwards' worth a step, whatever "
            "the hardware reran.",
            lambda **i: _recompute_5(**i)["hfu"],
        ),
        Mistake(
            "mfu",
            "6N instead of 6N + 12Lhs",
            "at s = 8192 the attention term adds 12Lhs FLOPs a token.",
            _six_n,
        ),
        Mistake(
            "hfu",
            "the recompute not counted",
            "HFU counts what the hardware ran: the forward twice, 4 forwards' "
            "worth a step.",
            lambda **i: _recompute_5(**i)["mfu"],
        ),
        Mistake(
            "hfu",
            "3/4 of MFU",
            "recompute adds work: HFU is above MFU.",
            lambda **i: 0.75 * _recompute_5(**i)["mfu"],
        ),
        Mistake(
            "hfu",
            "4/3 of the 6N MFU",
            "the recomputed forward includes the attention matmuls: "
            "8N + 16Lhs a token.",
            lambda **i: 4 / 3 * _six_n(**i),
        ),
    ),
)


# --- recompute-6: the best whole number of segments, in code --------------------------


def _rounded_optimum(L, A, input_bytes):
    return min(L, max(1, round(math.sqrt(L * A / input_bytes))))


def _chen(L, A, input_bytes):
    return math.ceil(math.sqrt(L))


def _without_ceiling(L, A, input_bytes):
    return min(range(1, L + 1), key=lambda c: c * input_bytes + L / c * A)


PRINTED = {(32, 97, 1): 32, (16, 1, 1): 4}  # the statement's two examples


def _printed_cases(L, A, input_bytes):
    return PRINTED.get((L, A, input_bytes), L)


def _segments_arguments(st):
    """(L, A, input_bytes): up to 200 layers, a layer input I of 1 kB to 1 GB, and a
    layer that keeps from 1 to 500 times its input, A = r I."""

    def build(args):
        L, i, r = args
        return L, r * i, i

    return st.tuples(
        st.integers(1, 200), st.floats(1e3, 1e9), st.floats(1.0, 500.0)
    ).map(build)


RECOMPUTE_6 = exercise(
    "recompute-6",
    level=2,
    kind="code",
    code=Code(
        name="best_segments",
        params=("L", "A", "input_bytes"),
        reference=formulas.best_segments,
        cases=(
            (32, 97, 1),  # Llama-2-7B at s = 4096: a checkpoint at every layer
            (16, 1, 1),  # a layer that keeps only its input: sqrt(L)
            (105, 49, 1),  # MT-NLG 530B at s = 2048
            (17, 3.3, 1),
            (33, 1.7, 1),
            (96, 57, 1),  # GPT-3 175B at s = 2048
            (2, 1, 1),  # a tie: the smaller c
            (1, 10, 1),
        ),
        arguments=_segments_arguments,
        mistakes=(
            WrongFunction(
                "the continuous optimum rounded",
                "c* = sqrt(L A / I) minimises c I + (L/c) A, but a segment holds "
                "whole layers: compare c I + ceil(L/c) A over every whole c.",
                _rounded_optimum,
            ),
            WrongFunction(
                "Chen's ceil(sqrt L)",
                "that is the optimum only for layers that keep about as much as "
                "their input; the memory depends on A and I.",
                _chen,
            ),
            WrongFunction(
                "L/c layers a segment, not rounded up",
                "the segment being recomputed holds ceil(L/c) whole layers.",
                _without_ceiling,
            ),
            WrongFunction(
                "the printed examples hard-coded",
                "the check tries many other L, A and I: compute the memory of "
                "each whole c.",
                _printed_cases,
            ),
        ),
        max_examples=30,
    ),
)

# --- recompute-7: what one block keeps, measured and fitted ---------------------------

# The reader's own count: no key, the solution explains what the fit shows.
RECOMPUTE_7 = exercise("recompute-7", level=2, kind="measure")

EXERCISES = register(
    RECOMPUTE_1,
    RECOMPUTE_2,
    RECOMPUTE_3,
    RECOMPUTE_4,
    RECOMPUTE_5,
    RECOMPUTE_6,
    RECOMPUTE_7,
)
