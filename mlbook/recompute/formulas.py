"""Activation recompute: what each strategy keeps for backward and what it
costs in extra FLOPs. Pure numbers, no torch.

Symbols as in book/notation.md: s sequence length, b micro-batch, h hidden
size, a heads, L layers, d_ff MLP width. Per layer, A = bytes kept without
recompute (Korthikanti et al. 2022: sbh(34 + 5as/h)), I = 2sbh the layer's
input in 16 bits, F = forward FLOPs; a training step costs 3F per layer
(backward = 2F).

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

Korthikanti's count is for a GPT block (dropout, a 4h GELU MLP). Llama 2's
block has no dropout and a SwiGLU MLP; ``block_saved_items`` and
``layer_bytes`` count either, and ``checkpoint_plans`` takes the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbook.common import validate

STRATEGIES = ("none", "selective", "sqrt", "full")
RECOMPUTE_MODES = ("none", "selective", "full")
MLP_KINDS = ("gelu", "swiglu")
# The items of block_saved_items that are s x s per head (the a s^2 b terms):
# what selective recompute and fused attention kernels do not keep.
SCORE_ITEMS = (
    "softmax output",
    "softmax dropout mask",
    "dropped-out probabilities (for P V)",
)

# Measured overheads reported by Korthikanti et al. 2022 (arXiv:2205.05198),
# Table 4: the time of one transformer layer of their 22B model with each
# strategy, relative to no recompute (forward plus backward).
REPORTED_TIME_OVERHEAD = {
    "full": 0.39,
    "selective": 0.07,
    "selective + sequence parallel": 0.04,
}
# Table 5: selective recompute's throughput gain over full recompute, 22B to 1T models.
REPORTED_THROUGHPUT_GAIN = (0.29, 0.32)
REPORTED_SOURCE = "Korthikanti et al. 2022, arXiv:2205.05198, Tables 4 and 5"


def _check_shape(s, b, h, a, recompute="none"):
    """(s, b, h, a) as ints, or a ValueError naming the first that breaks its
    rule (positive integers, a divides h, a known recompute mode)."""
    named = zip("sbha", (s, b, h, a), strict=True)
    s, b, h, a = (validate.positive_int(n, v) for n, v in named)
    validate.divides("a", a, "h", h)
    validate.one_of("recompute", recompute, RECOMPUTE_MODES)
    return s, b, h, a


def _check_d_ff_mult(d_ff_mult):
    return validate.positive("d_ff_mult", d_ff_mult)


def _mlp_matmuls(mlp: str) -> int:
    """Matmuls of width d_ff in the MLP: two for GELU, three for SwiGLU."""
    return 3 if validate.one_of("mlp", mlp, MLP_KINDS) == "swiglu" else 2


def activation_bytes_per_layer(
    s: int, b: int, h: int, a: int, recompute: str = "none"
) -> int:
    """Bytes one transformer layer keeps for its backward pass.

    Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1 and Table 2), whose
    assumptions this keeps: activations are stored in 16 bits (2 bytes a
    value), dropout masks in 1 byte a value, the MLP is 4h wide with a GELU
    between two matmuls, there is no tensor or sequence parallelism, and the
    attention scores are materialised (no FlashAttention). Per layer:

        attention  11 sbh + 5 a s^2 b   (QKV input 2, Q and K 4, V 2, output
                                         projection input 2, its dropout mask 1;
                                         softmax output 2, its dropout mask 1,
                                         the dropped-out probabilities 2)
        MLP        19 sbh               (first matmul input 2, GELU input 8,
                                         second matmul input 8, dropout mask 1)
        two norms   4 sbh               (each keeps its input, 2)
        total      sbh (34 + 5 a s / h)

    recompute="selective" recomputes the attention core (scores, softmax,
    dropout, P V) and drops the 5 a s^2 b term: 34 sbh. recompute="full" keeps
    only the layer's input, 2 sbh, and recomputes the rest.
    """
    s, b, h, a = _check_shape(s, b, h, a, recompute)
    if recompute == "full":
        return 2 * s * b * h
    selective = 34 * s * b * h
    if recompute == "selective":
        return selective
    return selective + 5 * a * s * s * b


def layer_forward_flops(
    s: int, b: int, h: int, d_ff_mult: float = 4.0, mlp: str = "gelu"
) -> float:
    """F: forward FLOPs of one layer for b sequences of s tokens.

    Per token: Q, K, V and O projections 4 x 2h^2 = 8h^2; an MLP of two
    (GELU) or three (SwiGLU) h x d_ff matmuls, 4 h d_ff or 6 h d_ff; the
    attention core (scores Q K^T and context P V) 2 x 2sh = 4sh. The full
    s x s square is counted (book/notation.md). d_ff = d_ff_mult x h.
    """
    s = validate.positive_int("s", s)
    b = validate.positive_int("b", b)
    h = validate.positive_int("h", h)
    m = _check_d_ff_mult(d_ff_mult)
    return b * s * (8 * h * h + 2 * _mlp_matmuls(mlp) * h * (m * h) + 4 * s * h)


def _check_core(s, h, d_ff_mult):
    """(s, h, d_ff_mult), checked: positive integers and a positive width."""
    return (
        validate.positive_int("s", s),
        validate.positive_int("h", h),
        (_check_d_ff_mult(d_ff_mult)),
    )


def attention_core_fraction(
    s: int, h: int, d_ff_mult: float = 4.0, mlp: str = "gelu"
) -> float:
    """The attention core's share of a layer's forward FLOPs:
    4sh / (8h^2 + 4h d_ff + 4sh) for a GELU MLP (6h d_ff for SwiGLU), with
    d_ff = d_ff_mult x h.

    This is what selective recompute runs a second time; divided by 3 it is
    selective's extra FLOPs as a share of a training step. It grows with s.
    """
    s, h, m = _check_core(s, h, d_ff_mult)
    core = 4 * s * h
    return core / (8 * h * h + 2 * _mlp_matmuls(mlp) * h * (m * h) + core)


def selective_extra_flops_fraction(
    s: int, h: int, d_ff_mult: float = 4.0, mlp: str = "gelu"
) -> float:
    """Selective recompute's extra FLOPs as a share of a training step (3F)."""
    return attention_core_fraction(s, h, d_ff_mult, mlp) / 3


def seq_len_for_selective_overhead(
    h: int, overhead: float, d_ff_mult: float = 4.0
) -> float:
    """The sequence length at which selective recompute costs ``overhead``
    (a share of a training step) with a GELU MLP, from
    attention_core_fraction = 3 x overhead:

        s = 3 t (8 + 4 m) h / (4 - 12 t),   t = overhead, m = d_ff_mult.

    Only overheads below 1/3 are reachable: the core's share tends to 1 as s
    grows, so selective never costs more than full recompute.
    """
    h = validate.positive_int("h", h)
    m = _check_d_ff_mult(d_ff_mult)
    validate.fraction("overhead", overhead)
    if overhead >= 1 / 3:
        raise ValueError(
            f"overhead must be below 1/3 (selective never costs more than a "
            f"whole extra forward), got {overhead!r}"
        )
    t = overhead
    return 3 * t * (8 + 4 * m) * h / (4 - 12 * t)


def block_saved_items(
    s: int,
    b: int,
    h: int,
    a: int,
    act_bytes: int = 2,
    mask_bytes: int = 1,
    dropout: bool = True,
    d_ff_mult: float = 4.0,
    mlp: str = "gelu",
    kv_fraction: float = 1.0,
) -> dict:
    """What one layer keeps for backward, item by item: {item: bytes}.

    Korthikanti's list (Sec. 4.1), with the storage sizes and the block's
    shape as knobs: ``act_bytes`` per activation value (2 in the paper, 4 in
    fp32), ``mask_bytes`` per dropout-mask value (1 in the paper),
    ``dropout`` whether the block has dropout, ``mlp`` "gelu" (the paper's:
    two matmuls with a GELU between) or "swiglu" (Llama's: gate and up
    matmuls, SiLU(gate) x up, a down matmul), and d_ff = d_ff_mult x h.

    Without dropout there are no masks, and the probabilities P V reads are
    the softmax output itself, so that term is not stored twice. A SwiGLU MLP
    keeps four d_ff-wide tensors: the gate output (SiLU's input), SiLU's
    output and the up output (both read by the product's backward), and the
    product (the down matmul's input). Every norm keeps its input, as a fused
    LayerNorm or RMSNorm kernel does. With the defaults the items sum to
    activation_bytes_per_layer(s, b, h, a).

    ``kv_fraction`` is the width of the K and V kept for Q K^T and P V, as a
    share of Q's: 1 where K and V reach the matmuls at every head (multi-head
    attention, or grouped-query attention whose K and V are repeated to all
    heads before unfused matmuls, as Meta's reference code does), n_kv_heads /
    a where a kernel takes the grouped K and V as they are.
    """
    s = validate.positive_int("s", s)
    b = validate.positive_int("b", b)
    h = validate.positive_int("h", h)
    a = validate.positive_int("a", a)
    validate.divides("a", a, "h", h)
    act_bytes = validate.positive_int("act_bytes", act_bytes)
    mask_bytes = validate.positive_int("mask_bytes", mask_bytes)
    validate.boolean("dropout", dropout)
    m = _check_d_ff_mult(d_ff_mult)
    validate.one_of("mlp", mlp, MLP_KINDS)
    kv = validate.fraction("kv_fraction", kv_fraction)
    sbh, ass = s * b * h, a * s * s * b
    items = {
        "norm 1 input": act_bytes * sbh,
        "QKV matmul input": act_bytes * sbh,
        "Q and K (for Q K^T)": (1 + kv) * act_bytes * sbh,
        "softmax output": act_bytes * ass,
        "softmax dropout mask": mask_bytes * ass if dropout else 0,
        "dropped-out probabilities (for P V)": act_bytes * ass if dropout else 0,
        "V (for P V)": kv * act_bytes * sbh,
        "output projection input": act_bytes * sbh,
        "attention dropout mask": mask_bytes * sbh if dropout else 0,
        "norm 2 input": act_bytes * sbh,
        "MLP input": act_bytes * sbh,
    }
    if mlp == "gelu":
        items |= {
            "GELU input": act_bytes * m * sbh,
            "MLP second matmul input": act_bytes * m * sbh,
        }
    else:
        items |= {
            "gate output (SiLU input)": act_bytes * m * sbh,
            "SiLU output": act_bytes * m * sbh,
            "up output": act_bytes * m * sbh,
            "down matmul input": act_bytes * m * sbh,
        }
    items["MLP dropout mask"] = mask_bytes * sbh if dropout else 0
    return {k: (int(v) if float(v).is_integer() else v) for k, v in items.items()}


def kept_items(items: dict, mode: str = "none") -> dict:
    """The items of ``block_saved_items`` a layer keeps from its forward to
    its backward under recompute ``mode``: all of them ("none"), all but the
    s x s score items ("selective"), or the layer's input alone ("full": the
    first norm's input, which is the layer's input). Their bytes sum to
    layer_bytes' field of the same name."""
    validate.one_of("mode", mode, RECOMPUTE_MODES)
    if not isinstance(items, dict) or "norm 1 input" not in items:
        raise ValueError(
            f"items must be block_saved_items' dict, got {type(items).__name__}"
        )
    if mode == "full":
        return {"norm 1 input": items["norm 1 input"]}
    if mode == "selective":
        return {k: v for k, v in items.items() if k not in SCORE_ITEMS}
    return dict(items)


@dataclass(frozen=True)
class Coefficients:
    """A layer's saved bytes as ``linear`` sbh + ``square`` a s^2 b."""

    linear: float
    square: float


def saved_coefficients(
    act_bytes: int = 2,
    mask_bytes: int = 1,
    dropout: bool = True,
    d_ff_mult: float = 4.0,
    mlp: str = "gelu",
    kv_fraction: float = 1.0,
) -> Coefficients:
    """The item list of ``block_saved_items`` summed into its two terms.

    Every item is a multiple of sbh or of a s^2 b, so evaluating the list at
    s = b = h = a = 1 gives the multiples. The defaults give Korthikanti's
    34 sbh + 5 a s^2 b.
    """
    items = block_saved_items(
        1, 1, 1, 1, act_bytes, mask_bytes, dropout, d_ff_mult, mlp, kv_fraction
    )
    square = sum(v for k, v in items.items() if k in SCORE_ITEMS)
    return Coefficients(linear=sum(items.values()) - square, square=square)


@dataclass(frozen=True)
class LayerBytes:
    """Bytes one layer keeps for backward under each recompute mode.

    none: everything (A). selective: everything but the s x s score items.
    full: the layer's input alone (I), what a checkpoint keeps.
    """

    none: float
    selective: float
    full: float

    def __post_init__(self):
        for name in RECOMPUTE_MODES:
            validate.positive(name, getattr(self, name))
        if not self.full <= self.selective <= self.none:
            raise ValueError(f"need full <= selective <= none, got {self}")


def layer_bytes(
    s: int,
    b: int,
    h: int,
    a: int,
    act_bytes: int = 2,
    mask_bytes: int = 1,
    dropout: bool = True,
    d_ff_mult: float = 4.0,
    mlp: str = "gelu",
    kv_fraction: float = 1.0,
) -> LayerBytes:
    """``block_saved_items`` summed for each recompute mode. With the defaults
    this is activation_bytes_per_layer for "none", "selective" and "full"."""
    items = block_saved_items(
        s, b, h, a, act_bytes, mask_bytes, dropout, d_ff_mult, mlp, kv_fraction
    )
    total = sum(items.values())
    square = sum(v for k, v in items.items() if k in SCORE_ITEMS)
    return LayerBytes(none=total, selective=total - square, full=act_bytes * s * b * h)


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


def segments_memory_bytes(c: int, L: int, A: float, input_bytes: float) -> float:
    """Memory of c segments: c kept layer inputs plus one segment of
    ceil(L / c) layers holding all their activations, c I + ceil(L/c) A,
    where I = ``input_bytes``, the bytes of one layer's input."""
    c = validate.positive_int("c", c)
    L = validate.positive_int("L", L)
    validate.positive("A", A)
    validate.positive("I", input_bytes)
    if c > L:
        raise ValueError(f"c={c} segments cannot exceed L={L} layers")
    return c * input_bytes + math.ceil(L / c) * A


def optimal_segments(L: int, A: float, input_bytes: float) -> float:
    """c* = sqrt(L A / I): where c I + (L / c) A has zero slope (I =
    ``input_bytes``)."""
    L = validate.positive_int("L", L)
    validate.positive("A", A)
    validate.positive("I", input_bytes)
    return math.sqrt(L * A / input_bytes)


def sqrt_segments(L: int) -> int:
    """Chen et al.'s choice: c = ceil(sqrt(L)) segments."""
    return math.ceil(math.sqrt(validate.positive_int("L", L)))


def best_segments(L: int, A: float, input_bytes: float) -> int:
    """The whole number of segments in 1..L with the least memory. When
    c* = sqrt(L A / I) is above L (a layer keeps far more than its input,
    I = ``input_bytes``), that is L: checkpoint every layer."""
    L = validate.positive_int("L", L)
    validate.positive("A", A)
    validate.positive("I", input_bytes)

    def memory(c: int) -> float:
        return segments_memory_bytes(c, L, A, input_bytes)

    return min(range(1, L + 1), key=memory)  # the first of equals: the smaller c


def every_layer_ratio(L: int) -> float:
    """The A/I above which a checkpoint at every layer (c = L) keeps less than
    any other whole number of segments: c I + ceil(L/c) A exceeds L I + A
    exactly when A/I > (L - c) / (ceil(L/c) - 1), so the threshold is the
    largest of these over c < L (0.0 for L = 1). At a tie best_segments keeps
    the smaller c. It is about L/2, reached at c = ceil(L/2), the first c
    whose segments hold two layers: far below the L at which the continuous
    optimum c* = sqrt(L A / I) reaches L."""
    L = validate.positive_int("L", L)
    ratios = [(L - c) / (math.ceil(L / c) - 1) for c in range(1, L)]
    return max(ratios, default=0.0)


def _check_plans(s, b, h, a, L, layer):
    """(L, layer): L checked, and the LayerBytes given or, for None,
    Korthikanti's count for (s, b, h, a)."""
    L = validate.positive_int("L", L)
    if layer is None:
        return L, LayerBytes(
            *(activation_bytes_per_layer(s, b, h, a, r) for r in RECOMPUTE_MODES)
        )
    if not isinstance(layer, LayerBytes):
        raise ValueError(f"layer must be a LayerBytes, got {layer!r}")
    return L, layer


def checkpoint_plans(
    s: int,
    b: int,
    h: int,
    a: int,
    L: int,
    d_ff_mult: float = 4.0,
    mlp: str = "gelu",
    layer: LayerBytes | None = None,
) -> dict:
    """The four strategies' memory and extra FLOPs, {strategy: Plan}.

    Memory per layer from ``layer`` (a LayerBytes); by default Korthikanti's
    count (activation_bytes_per_layer, 16-bit activations). The extra FLOPs
    use a d_ff_mult x h wide ``mlp`` and leave out the LM head, which no
    strategy recomputes.
    """
    L, layer = _check_plans(s, b, h, a, L, layer)
    A, input_bytes = layer.none, layer.full
    c = sqrt_segments(L)
    return {
        "none": Plan("none", L * A, 0.0),
        "selective": Plan(
            "selective",
            L * layer.selective,
            selective_extra_flops_fraction(s, h, d_ff_mult, mlp),
        ),
        "sqrt": Plan(
            "sqrt", segments_memory_bytes(c, L, A, input_bytes), 1 / 3, segments=c
        ),
        "full": Plan("full", L * input_bytes + A, 1 / 3, segments=L),
    }


def selective_sqrt_crossover_seq_len(h: int, a: int, L: int) -> float:
    """The sequence length at which selective recompute and sqrt(L) segments
    need the same memory under Korthikanti's count (the same for every b).
    Below it sqrt(L) needs less; above it selective does, because sqrt(L)
    still holds one segment's 5as^2b score terms, which grow as s^2, while
    selective grows as s.

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
