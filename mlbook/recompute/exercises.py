"""Exercises of the activation-recompute chapter (notebooks/recompute.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.common.units import GIB
from mlbook.judge import (
    Choice,
    Integer,
    Mistake,
    Real,
    Reason,
    exercise,
    register,
)
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu
from mlbook.recompute import cases, formulas


def first_s_above(share, target: float, s_hint: float) -> int:
    """The smallest whole s with ``share(s) > target``, for a ``share`` that
    grows with s, searched from a real-valued estimate ``s_hint``: doubling
    from it until the share passes, then halving the gap (a step at a time
    from s = 1 called the share 173,000 times for the chapter's keys)."""
    if share(1) > target:
        return 1
    below, above = 1, max(2, math.floor(s_hint))  # share(below) <= target
    while share(above) <= target:
        below, above = above, 2 * above
    while above - below > 1:  # share(below) <= target < share(above)
        mid = (below + above) // 2
        below, above = (below, mid) if share(mid) > target else (mid, above)
    return above


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
    # why: full recompute's extra time against its extra FLOPs
    reasons=(
        Reason(
            "Recompute cost more time than its extra FLOPs: a step of a model this "
            "small takes milliseconds, and costs that do not shrink with the FLOPs "
            "weigh on it, the checkpoint machinery running once per block and "
            "selective checkpointing inspecting every operator in Python.",
            when=(("full_extra_time", ">", "full_extra_flops"),),
        ),
        Reason(
            "The time followed the FLOPs: the recomputed forward runs the same "
            "matmuls at the same speed, so full recompute costs about its third of "
            "the blocks' FLOPs and selective about its few per cent.",
        ),
    ),
)


# --- recompute-3: what doubling s does to each strategy's memory --------------------


def _shape(model):
    """(h, a, L) of a preset model."""
    cfg = transformer.PRESETS[model]
    return cfg.d_model, cfg.n_heads, cfg.n_layers


def _memory(model, seq_len, batch):
    h, a, L = _shape(model)
    return {
        k: p.memory_bytes
        for k, p in formulas.checkpoint_plans(seq_len, batch, h, a, L).items()
    }


def _recompute_3(model, seq_len, batch, factor):
    before = _memory(model, seq_len, batch)
    after = _memory(model, factor * seq_len, batch)
    return {f"{k}_growth": after[k] / before[k] for k in ("none", "selective", "full")}


def _layer(model, seq_len, batch, mode="none"):
    """One layer's bytes under Korthikanti's count, and L."""
    h, a, L = _shape(model)
    return formulas.activation_bytes_per_layer(seq_len, batch, h, a, mode), L


RECOMPUTE_3 = exercise(
    "recompute-3",
    level=1,
    kind="derive",
    inputs={"model": "MT-NLG 530B", "seq_len": 2048, "batch": 1, "factor": 2},
    answers={
        "none_growth": Real("count", "the factor without recompute", 0.01),
        "selective_growth": Real("count", "the factor with selective recompute", 0.01),
        "full_growth": Real("count", "the factor with full recompute", 0.01),
    },
    key=_recompute_3,
    mistakes=(
        Mistake(
            "none_growth",
            "everything as s^2",
            "only the 5as^2b attention core grows as s^2; the 34sbh grows as s.",
            lambda factor, **_: float(factor**2),
        ),
        Mistake(
            "none_growth",
            "everything as s",
            "the 5as^2b attention core grows as s^2: at this length it is most "
            "of what a layer keeps.",
            lambda factor, **_: float(factor),
        ),
        Mistake(
            "selective_growth",
            "the attention core kept",
            "selective recompute drops the 5as^2b term: what is left, 34sbh, "
            "grows as s.",
            lambda **i: _recompute_3(**i)["none_growth"],
        ),
        Mistake(
            "full_growth",
            "the layer inputs alone",
            "full recompute also holds one whole layer, scores included, while "
            "backward rebuilds it: L I + A.",
            lambda factor, **_: float(factor),
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
            lambda **i: _memory(**i)["full"] / GIB,
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
        "mfu": Real("fraction", "MFU, 6N_matmul + 12Lhs a token", 0.01),
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
            "6N instead of 6N_matmul + 12Lhs",
            "count the matmul weights, N_matmul (not the embedding), and at "
            "s = 8192 add the attention term, 12Lhs FLOPs a token.",
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
            "8N_matmul + 16Lhs a token.",
            lambda **i: 4 / 3 * _six_n(**i),
        ),
    ),
)


# --- recompute-6: when a checkpoint at every layer is best ---------------------------


def _ratio(model, seq_len, batch):
    """A / I under Korthikanti's count: 17 + 2.5 a s / h."""
    return _layer(model, seq_len, batch)[0] / _layer(model, seq_len, batch, "full")[0]


def _first_s(model, batch, target, at_least=False):
    """The smallest whole s whose A / I passes ``target`` (or reaches it)."""

    def ratio(s):
        r = _ratio(model, s, batch)
        return r + (1e-9 * r if at_least else 0.0)

    return first_s_above(ratio, target, 1.0)


def _recompute_6(model, batch):
    L = _shape(model)[2]
    threshold = formulas.every_layer_ratio(L)
    return {"ratio": threshold, "seq_len": _first_s(model, batch, threshold)}


RECOMPUTE_6 = exercise(
    "recompute-6",
    level=2,
    kind="derive",
    inputs={"model": "MT-NLG 530B", "batch": 1},
    answers={
        "ratio": Real("count", "the A/I above which c = L has the least memory", 0.003),
        "seq_len": Integer("tokens", "the smallest whole s where that holds"),
    },
    key=_recompute_6,
    mistakes=(
        Mistake(
            "ratio",
            "the continuous optimum c* = L",
            "c* = sqrt(L A / I) ignores that segments hold whole layers: compare "
            "c = L with the c whose segments first hold two layers.",
            lambda model, **_: float(_shape(model)[2]),
        ),
        Mistake(
            "ratio",
            "L/2 without whole segments",
            "the rival is a whole c: c = ceil(L/2) checkpoints, segments of at "
            "most two layers. Compare c I + 2A with L I + A.",
            lambda model, **_: _shape(model)[2] / 2,
        ),
        Mistake(
            "seq_len",
            "the continuous optimum c* = L",
            "c* = sqrt(L A / I) ignores that segments hold whole layers.",
            lambda model, batch: _first_s(model, batch, float(_shape(model)[2])),
        ),
        Mistake(
            "seq_len",
            "the tie counted as a win",
            "at the threshold c = L and its rival keep the same bytes, and the "
            "smaller c is kept: s must pass it.",
            lambda model, batch: _first_s(
                model, batch, formulas.every_layer_ratio(_shape(model)[2]), True
            ),
        ),
    ),
)

# --- recompute-7: what one block keeps, measured and fitted ---------------------------

# The reader's own count: no key, the solution explains what the fit shows.
RECOMPUTE_7 = exercise("recompute-7", level=2, kind="measure")

# --- recompute-8: a memory bill that overflows --------------------------------------

_FIXES = {
    "none": "none: it fits as it is",
    "selective": "selective recompute",
    "full": "full recompute",
}


def _recompute_8(seed):
    bill = cases.memory_bill(seed)
    return {
        "strategy": cases.fix(bill),
        "extra_flops": cases.extra_flops(bill),
        "headroom_gib": cases.headroom_gib(bill),
    }


def _headroom_with(seed, shards=None, layer_only=False):
    """The headroom another way: the model state on ``shards`` GPUs instead
    of the bill's, or full recompute's L I without the layer being rebuilt."""
    bill = cases.memory_bill(seed)
    total = bill.total_with(cases.fix(bill))
    if shards is not None:
        total += bill.state_gib * (bill.shards / shards - 1)
    if layer_only:
        total -= (
            formulas.activation_bytes_per_layer(
                bill.seq_len, bill.micro_batch, bill.d_model, bill.n_heads
            )
            / GIB
        )
    return bill.hbm_gib - total


RECOMPUTE_8 = exercise(
    "recompute-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 1},
    answers={
        "strategy": Choice(
            "the strategy that fits at the fewest extra FLOPs",
            options=_FIXES,
            hints={
                "none": "add the bill up: it passes the GPU's memory.",
                "selective": "selective keeps 34 sbh in every layer: add that to "
                "the state and the logits and compare with the GPU.",
                "full": "selective recompute fits here, for far fewer FLOPs.",
            },
        ),
        "extra_flops": Real(
            "fraction", "its extra FLOPs, a share of the step without it", 0.01
        ),
        "headroom_gib": Real("GiB", "the memory the GPU has left with it", 0.01),
    },
    key=_recompute_8,
    mistakes=(
        Mistake(
            "extra_flops",
            "a share of the recomputing step",
            "the overhead is a share of the step without recompute: for full "
            "recompute three forwards' worth, not four.",
            lambda seed: (
                _recompute_8(seed)["extra_flops"]
                / (1 + _recompute_8(seed)["extra_flops"])
            ),
        ),
        Mistake(
            "headroom_gib",
            "the model state not sharded",
            "ZeRO-3 splits the 16 bytes a parameter over the 8 GPUs: each holds "
            "an eighth of the state.",
            lambda seed: _headroom_with(seed, shards=1),
        ),
        Mistake(
            "headroom_gib",
            "L I without the layer being rebuilt",
            "full recompute holds one whole layer while backward rebuilds it: L I + A.",
            lambda seed: (
                _headroom_with(seed, layer_only=True)
                if _recompute_8(seed)["strategy"] == "full"
                else None
            ),
        ),
    ),
)


# --- recompute-9: a memory trace with layers left without a checkpoint --------------

_PATTERNS = {
    "even": "layers 0, 2, 4, ...",
    "odd": "layers 1, 3, 5, ...",
    "first_quarter": "the first quarter of the layers",
    "last_quarter": "the last quarter of the layers",
}


def _recompute_9(seed):
    trace = cases.checkpoint_trace(seed)
    return {"unwrapped": trace.pattern, "saved_gib": cases.wrapping_saves_gib(trace)}


def _saved_another_way(seed, per_layer="A - I", layers="missed"):
    trace = cases.checkpoint_trace(seed)
    n = (
        len(cases.unwrapped_layers(trace.pattern, trace.n_layers))
        if layers == "missed"
        else trace.n_layers
    )
    lb = trace.layer
    each = lb.none if per_layer == "A" else lb.none - lb.full
    return n * each / GIB


RECOMPUTE_9 = exercise(
    "recompute-9",
    level=2,
    kind="diagnose",
    inputs={"seed": 2},
    answers={
        "unwrapped": Choice(
            "the layers that run without a checkpoint",
            options=_PATTERNS,
            hints={
                name: "a layer without a checkpoint adds all of its A bytes, a "
                "checkpointed one only its input I: find the tall bars."
                for name in _PATTERNS
            },
        ),
        "saved_gib": Real("GiB", "what checkpointing them too saves", 0.005),
    },
    key=_recompute_9,
    mistakes=(
        Mistake(
            "saved_gib",
            "A a layer, not A - I",
            "a checkpointed layer still keeps its input I: each saves A - I.",
            lambda seed: _saved_another_way(seed, per_layer="A"),
        ),
        Mistake(
            "saved_gib",
            "every layer counted",
            "the other layers are checkpointed already: count only the tall bars.",
            lambda seed: _saved_another_way(seed, layers="all"),
        ),
    ),
)

EXERCISES = register(
    RECOMPUTE_1,
    RECOMPUTE_2,
    RECOMPUTE_3,
    RECOMPUTE_4,
    RECOMPUTE_5,
    RECOMPUTE_6,
    RECOMPUTE_7,
    RECOMPUTE_8,
    RECOMPUTE_9,
)
