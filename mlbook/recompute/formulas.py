"""Activation recompute: what each strategy keeps for backward and what it
costs in extra FLOPs. Pure numbers, no torch.

Symbols as in book/notation.md: s sequence length, b micro-batch, h hidden
size, a heads, L layers. Per layer, A = bytes kept without recompute
(Korthikanti et al. 2022: sbh(34 + 5as/h)), I = 2sbh the layer's input in 16
bits, F = forward FLOPs; a training step costs 3F per layer (backward = 2F).

    strategy    memory                       extra FLOPs (share of a step)
    none        L A                          0
    selective   L 34sbh                      attention core / 3
    sqrt        c I + ceil(L/c) A,           1/3
                c = ceil(sqrt(L))            (Chen et al. 2016)
    full        L I + A                      1/3

The sqrt(L) and full plans keep every c-th layer input (a "checkpoint"),
recompute one segment's forward at a time during backward, and hold that one
segment's activations while they do. c I + (L/c) A is smallest at
c* = sqrt(L A / I).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.common.memory import activation_bytes_per_layer
from mlbook.page import Report

STRATEGIES = ("none", "selective", "sqrt", "full")
# The items of block_saved_items that are s x s per head (the a s^2 b terms):
# what selective recompute and fused attention kernels do not keep.
SCORE_ITEMS = ("softmax output", "softmax dropout mask", "dropped-out probabilities (for P V)")


def _check_d_ff_mult(d_ff_mult):
    return validate.positive("d_ff_mult", d_ff_mult)


def layer_forward_flops(s: int, b: int, h: int, d_ff_mult: float = 4.0) -> float:
    """F: forward FLOPs of one layer for b sequences of s tokens.

    Per token: Q, K, V and O projections 4 x 2h^2 = 8h^2; an MLP of two
    h x d_ff matmuls 4 h d_ff; the attention core (scores Q K^T and context
    P V) 2 x 2sh = 4sh. The full s x s square is counted (book/notation.md).
    """
    s = validate.positive_int("s", s)
    b = validate.positive_int("b", b)
    h = validate.positive_int("h", h)
    m = _check_d_ff_mult(d_ff_mult)
    return b * s * (8 * h * h + 4 * h * (m * h) + 4 * s * h)


def attention_core_fraction(s: int, h: int, d_ff_mult: float = 4.0) -> float:
    """The attention core's share of a layer's forward FLOPs:
    4sh / (8h^2 + 4h d_ff + 4sh), with d_ff = d_ff_mult x h.

    This is what selective recompute runs a second time; divided by 3 it is
    selective's extra FLOPs as a share of a training step. It grows with s.
    A SwiGLU MLP has three h x d_ff matmuls: pass d_ff_mult = 1.5 d_ff / h to
    give it the same FLOPs.
    """
    s = validate.positive_int("s", s)
    h = validate.positive_int("h", h)
    m = _check_d_ff_mult(d_ff_mult)
    core = 4 * s * h
    return core / (8 * h * h + 4 * h * (m * h) + core)


def selective_extra_flops_fraction(s: int, h: int, d_ff_mult: float = 4.0) -> float:
    """Selective recompute's extra FLOPs as a share of a training step (3F)."""
    return attention_core_fraction(s, h, d_ff_mult) / 3


def seq_len_for_selective_overhead(h: int, overhead: float, d_ff_mult: float = 4.0) -> float:
    """The sequence length at which selective recompute costs ``overhead``
    (a share of a training step), from attention_core_fraction = 3 x overhead:

        s = 3 t (8 + 4 m) h / (4 - 12 t),   t = overhead, m = d_ff_mult.

    Only overheads below 1/3 are reachable: the core's share tends to 1 as s
    grows, so selective never costs more than full recompute.
    """
    h = validate.positive_int("h", h)
    m = _check_d_ff_mult(d_ff_mult)
    validate.fraction("overhead", overhead)
    if overhead >= 1 / 3:
        raise ValueError(f"overhead must be below 1/3 (selective never costs more than a "
                         f"whole extra forward), got {overhead!r}")
    t = overhead
    return 3 * t * (8 + 4 * m) * h / (4 - 12 * t)


def block_saved_items(s: int, b: int, h: int, a: int, act_bytes: int = 2, mask_bytes: int = 1,
                      dropout: bool = True, d_ff_mult: float = 4.0) -> dict:
    """Korthikanti's per-layer count item by item, with the storage sizes as
    knobs: ``act_bytes`` per activation value (2 in the paper, 4 in fp32),
    ``mask_bytes`` per dropout-mask value (1 in the paper). Returns
    {item: bytes}.

    Without dropout there are no masks, and the probabilities P V reads are
    the softmax output itself, so that term is not stored twice. With the
    paper's defaults the items sum to activation_bytes_per_layer(s, b, h, a).
    """
    s = validate.positive_int("s", s)
    b = validate.positive_int("b", b)
    h = validate.positive_int("h", h)
    a = validate.positive_int("a", a)
    validate.divides("a", a, "h", h)
    act_bytes = validate.positive_int("act_bytes", act_bytes)
    mask_bytes = validate.positive_int("mask_bytes", mask_bytes)
    m = _check_d_ff_mult(d_ff_mult)
    sbh, ass = s * b * h, a * s * s * b
    items = {
        "LayerNorm 1 input": act_bytes * sbh,
        "QKV matmul input": act_bytes * sbh,
        "Q and K (for Q K^T)": 2 * act_bytes * sbh,
        "softmax output": act_bytes * ass,
        "softmax dropout mask": mask_bytes * ass if dropout else 0,
        "dropped-out probabilities (for P V)": act_bytes * ass if dropout else 0,
        "V (for P V)": act_bytes * sbh,
        "output projection input": act_bytes * sbh,
        "attention dropout mask": mask_bytes * sbh if dropout else 0,
        "LayerNorm 2 input": act_bytes * sbh,
        "MLP first matmul input": act_bytes * sbh,
        "GELU input": act_bytes * m * sbh,
        "MLP second matmul input": act_bytes * m * sbh,
        "MLP dropout mask": mask_bytes * sbh if dropout else 0,
    }
    return {k: (int(v) if float(v).is_integer() else v) for k, v in items.items()}


@dataclass(frozen=True)
class Plan:
    """One recompute strategy for a whole model.

    memory_bytes: activation bytes kept for backward at the worst moment
    (the kept checkpoints plus one segment being recomputed).
    extra_flops_fraction: recompute FLOPs as a share of a training step
    without recompute (3F per layer).
    segments: how many layer inputs are kept as checkpoints (sqrt and full).
    """

    strategy: str
    memory_bytes: float
    extra_flops_fraction: float
    segments: int | None = None

    def __post_init__(self):
        validate.one_of("strategy", self.strategy, STRATEGIES)
        validate.positive("memory_bytes", self.memory_bytes)
        validate.non_negative("extra_flops_fraction", self.extra_flops_fraction)


def segments_memory_bytes(c: int, L: int, A: float, I: float) -> float:
    """Memory of c segments: c kept layer inputs plus one segment of
    ceil(L / c) layers holding all their activations, c I + ceil(L/c) A."""
    c = validate.positive_int("c", c)
    L = validate.positive_int("L", L)
    validate.positive("A", A)
    validate.positive("I", I)
    if c > L:
        raise ValueError(f"c={c} segments cannot exceed L={L} layers")
    return c * I + math.ceil(L / c) * A


def optimal_segments(L: int, A: float, I: float) -> float:
    """c* = sqrt(L A / I): where c I + (L / c) A has zero slope."""
    L = validate.positive_int("L", L)
    validate.positive("A", A)
    validate.positive("I", I)
    return math.sqrt(L * A / I)


def sqrt_segments(L: int) -> int:
    """Chen et al.'s choice: c = ceil(sqrt(L)) segments."""
    return math.ceil(math.sqrt(validate.positive_int("L", L)))


def checkpoint_plans(s: int, b: int, h: int, a: int, L: int, d_ff_mult: float = 4.0) -> dict:
    """The four strategies' memory and extra FLOPs, {strategy: Plan}.

    Memory per layer from Korthikanti et al. (activation_bytes_per_layer,
    16-bit activations); the extra FLOPs leave out the LM head, which no
    strategy recomputes.
    """
    L = validate.positive_int("L", L)
    A = activation_bytes_per_layer(s, b, h, a, "none")
    I = activation_bytes_per_layer(s, b, h, a, "full")
    sel = activation_bytes_per_layer(s, b, h, a, "selective")
    c = sqrt_segments(L)
    return {
        "none": Plan("none", L * A, 0.0),
        "selective": Plan("selective", L * sel, selective_extra_flops_fraction(s, h, d_ff_mult)),
        "sqrt": Plan("sqrt", segments_memory_bytes(c, L, A, I), 1 / 3, segments=c),
        "full": Plan("full", L * I + A, 1 / 3, segments=L),
    }


def selective_sqrt_crossover_seq_len(h: int, a: int, L: int) -> float:
    """The sequence length at which selective recompute and sqrt(L) segments
    need the same memory (the same for every b). Below it sqrt(L) needs less;
    above it selective does, because sqrt(L) still holds one segment's
    5as^2b score terms, which grow as s^2, while selective grows as s.

    Setting L 34sbh = 2sbh c + k sbh (34 + 5as/h), with c = ceil(sqrt L) and
    k = ceil(L / c), gives s = (34 L - 2c - 34k) h / (5 a k). Returns 0.0 when
    sqrt(L) never needs less (very few layers).
    """
    h = validate.positive_int("h", h)
    a = validate.positive_int("a", a)
    L = validate.positive_int("L", L)
    validate.divides("a", a, "h", h)
    c = sqrt_segments(L)
    k = math.ceil(L / c)
    room = 34 * L - 2 * c - 34 * k
    if room <= 0:
        return 0.0
    return room * h / (5 * a * k)


def best_segments(L: int, A: float, I: float) -> int:
    """The whole number of segments in 1..L with the least memory. When
    c* = sqrt(L A / I) is above L (a layer keeps far more than its input),
    that is L: checkpoint every layer."""
    L = validate.positive_int("L", L)
    return min(range(1, L + 1), key=lambda c: (segments_memory_bytes(c, L, A, I), c))


# Measured overheads reported by Korthikanti et al. 2022 (arXiv:2205.05198),
# Table 4: the time of one transformer layer of their 22B model with each
# strategy, relative to no recompute.
REPORTED_TIME_OVERHEAD = {
    "full": 0.39,
    "selective": 0.07,
    "selective + sequence parallel": 0.04,
}
# Table 5: selective recompute's throughput gain over full recompute, 22B to 1T models.
REPORTED_THROUGHPUT_GAIN = (0.29, 0.32)
REPORTED_SOURCE = "Korthikanti et al. 2022, arXiv:2205.05198, Table 4 (22B model, one layer)"


# --- page helpers: what the chapter's cells print and glue ---------------------------

def comparison(x: float, y: float, close: float = 0.05) -> str:
    """"more than", "about as much as" or "less than": x against y, with
    ``close`` the relative band counted as about equal."""
    validate.positive("y", y)
    if x > y * (1 + close):
        return "more than"
    if x < y * (1 - close):
        return "less than"
    return "about as much as"


def item_coefficients(s: int, b: int, h: int, a: int) -> Report:
    """Korthikanti's item list for one layer, each item in units of sbh or
    a s^2 b, and their sums (glued as coef_linear and coef_square)."""
    items = block_saved_items(s, b, h, a)
    sbh, ass = s * b * h, a * s * s * b
    lines = []
    for name, nbytes in items.items():
        square = name in SCORE_ITEMS
        unit = "a s^2 b" if square else "sbh"
        lines.append(f"{name:>38}: {nbytes / (ass if square else sbh):>3.0f} {unit}")
    linear = sum(v for k, v in items.items() if k not in SCORE_ITEMS) / sbh
    square = sum(v for k, v in items.items() if k in SCORE_ITEMS) / ass
    lines.append(f"total: {linear:.0f} sbh + {square:.0f} a s^2 b")
    if sum(items.values()) != activation_bytes_per_layer(s, b, h, a):
        raise AssertionError("block_saved_items does not sum to activation_bytes_per_layer")
    return Report(lines, {"coef_linear": (linear, ".0f"), "coef_square": (square, ".0f")})


def reference_case(cfg, s: int, b: int = 1) -> Report:
    """The four strategies for ``cfg`` (the page uses Llama-2-7B) at s tokens:
    a table, the model state for scale, c*, and the selective/sqrt(L) crossover."""
    from mlbook.mfu.flops import n_params
    from mlbook.common.memory import GIB, model_state_bytes

    h, a, L = cfg.d_model, cfg.n_heads, cfg.n_layers
    swiglu_mult = 1.5 * cfg.d_ff / h     # three h x d_ff matmuls = two of width 1.5 d_ff
    plans = checkpoint_plans(s, b, h, a, L, d_ff_mult=swiglu_mult)
    A = activation_bytes_per_layer(s, b, h, a)
    I = activation_bytes_per_layer(s, b, h, a, "full")
    state = model_state_bytes(n_params(cfg))
    lines = [f"{cfg.name}: s={s}, b={b}, h={h}, a={a}, L={L}",
             f"one layer keeps A = {A / GIB:.2f} GiB",
             f"{'strategy':>10} {'memory (GiB)':>13} {'extra FLOPs':>12}"]
    lines += [f"{p.strategy:>10} {p.memory_bytes / GIB:>13.2f} {p.extra_flops_fraction:>12.1%}"
              for p in plans.values()]
    lines.append(f"for scale: weights, gradients and Adam state take {state / GIB:.0f} GiB")
    g = {f"l7_{k}_gib": (p.memory_bytes / GIB, ".1f") for k, p in plans.items()}
    vs_state = comparison(plans["none"].memory_bytes, state)
    g |= {
        "l7_layer_gib": (A / GIB, ".2f"),
        "l7_sqrt_c": (plans["sqrt"].segments, "d"),
        "l7_sel_extra": (plans["selective"].extra_flops_fraction, ".1%"),
        "l7_sel_extra_4h": (selective_extra_flops_fraction(s, h), ".1%"),
        "l7_swiglu_mult": (swiglu_mult, ".2f"),
        "l7_state_gib": (state / GIB, ".0f"),
        "l7_vs_state": (vs_state, None),
        "l7_vs_state_mem": (vs_state.replace("much", "much memory").replace(" than", " memory than"),
                            None),
        "l7_sel_saving": (plans["none"].memory_bytes / plans["selective"].memory_bytes, ".1f"),
        "l7_a_over_i": (A / I, ".0f"),
        "l7_cstar": (optimal_segments(L, A, I), ".1f"),
        "l7_best_c": (best_segments(L, A, I), "d"),
        "cross_s": (selective_sqrt_crossover_seq_len(h, a, L), ",.0f"),
    }
    for n in (2048, 4096):
        p = checkpoint_plans(n, b, h, a, L)
        g[f"cmp_{n}_sel"] = (p["selective"].memory_bytes / GIB, ".1f")
        g[f"cmp_{n}_sqrt"] = (p["sqrt"].memory_bytes / GIB, ".1f")
    big = checkpoint_plans(32768, b, h, a, L)
    g["cmp_32k_sel"] = (big["selective"].memory_bytes / GIB, ".0f")
    g["cmp_32k_full"] = (big["full"].memory_bytes / GIB, ".0f")
    return Report(lines, g)


def reported_overheads() -> Report:
    """Korthikanti et al.'s measured overheads (Tables 4 and 5), to glue."""
    g = {"rep_full": (REPORTED_TIME_OVERHEAD["full"], ".0%"),
         "rep_sel": (REPORTED_TIME_OVERHEAD["selective"], ".0%"),
         "rep_sel_sp": (REPORTED_TIME_OVERHEAD["selective + sequence parallel"], ".0%"),
         "rep_gain_lo": (REPORTED_THROUGHPUT_GAIN[0], ".0%"),
         "rep_gain_hi": (REPORTED_THROUGHPUT_GAIN[1], ".0%")}
    return Report([], g)


def selective_overhead_table(h: int, target: float) -> Report:
    """The exercise: the s where selective's extra FLOPs pass ``target``, in
    closed form and by a scan, and the extra at a few lengths."""
    s_star = seq_len_for_selective_overhead(h, target)
    scan = next(s for s in range(1, 10 * h) if selective_extra_flops_fraction(s, h) > target)
    lines = [f"closed form: s = {s_star:,.0f} tokens ({s_star / h:.2f} h)",
             f"first whole s above {target:.0%} in a scan: {scan:,}"]
    lines += [f"  s = {s:>6,}: selective adds {selective_extra_flops_fraction(s, h):.1%}"
              for s in (2048, 4096, 8192, 16384, 32768)]
    return Report(lines, {"ex_s_star": (s_star, ",.0f"), "ex_ratio": (s_star / h, ".2f")})
