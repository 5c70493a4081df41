"""The three costs of going wide, as formulas: bytes on the wire, model state
per GPU, and idle pipeline stages. Plain Python, no torch.

Symbols: N_d data-parallel ranks, Psi parameters, S bytes in a message,
alpha the latency of one message, B the bandwidth of one rank's link in one
direction (bytes/s), p pipeline stages, m micro-batches, v model chunks per
device, t tensor-parallel ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

from mlbook.common import accelerators, validate

ZERO_STAGES = (0, 1, 2, 3)
ZERO_STAGE_NAMES = {
    0: "plain data parallel",
    1: "ZeRO-1: optimizer state sharded",
    2: "ZeRO-2: + gradients",
    3: "ZeRO-3 / FSDP: + weights",
}


def _stage(stage) -> int:
    if (
        not isinstance(stage, Integral)
        or isinstance(stage, bool)
        or stage not in ZERO_STAGES
    ):
        raise ValueError(
            "stage must be one of the ZeRO stages 0, 1, 2, 3 (an integer), "
            f"got {stage!r}"
        )
    return int(stage)


def _ring_args(n_bytes, n_ranks, link_bytes_per_s, latency_s):
    """The arguments of a ring collective, checked: (S, N, B, alpha)."""
    validate.positive("n_bytes", n_bytes)
    n = validate.positive_int("n_ranks", n_ranks)
    validate.positive("link_bytes_per_s", link_bytes_per_s)
    validate.non_negative("latency_s", latency_s)
    return n_bytes, n, link_bytes_per_s, latency_s


def ring_allreduce_s(
    n_bytes: float, n_ranks: int, link_bytes_per_s: float, latency_s: float = 0.0
) -> float:
    """Seconds to all-reduce ``n_bytes`` over ``n_ranks`` ranks in a ring.

    The ring cuts the buffer into N pieces. A reduce-scatter (N - 1 steps)
    leaves each rank one fully summed piece; an all-gather (N - 1 more steps)
    hands every piece to everyone. Each step sends S/N bytes to the next rank
    and pays the latency alpha once, so each rank sends (and receives)
    2 (N - 1) / N * S bytes, almost 2S whatever N is. One rank needs no
    communication (0 s).
    """
    s, n, b, alpha = _ring_args(n_bytes, n_ranks, link_bytes_per_s, latency_s)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * s / b


def reduce_scatter_s(
    n_bytes: float, n_ranks: int, link_bytes_per_s: float, latency_s: float = 0.0
) -> float:
    """Seconds to reduce-scatter an ``n_bytes`` buffer: the first half of the
    ring all-reduce, (N - 1) alpha + (N - 1) / N * S / B. Each rank ends with
    the sum of its 1/N of the buffer."""
    s, n, b, alpha = _ring_args(n_bytes, n_ranks, link_bytes_per_s, latency_s)
    return (n - 1) * alpha + (n - 1) / n * s / b


def all_gather_s(
    n_bytes: float, n_ranks: int, link_bytes_per_s: float, latency_s: float = 0.0
) -> float:
    """Seconds to all-gather a buffer of ``n_bytes`` in all (each rank starts
    with 1/N of it): the second half of the ring all-reduce,
    (N - 1) alpha + (N - 1) / N * S / B."""
    s, n, b, alpha = _ring_args(n_bytes, n_ranks, link_bytes_per_s, latency_s)
    return (n - 1) * alpha + (n - 1) / n * s / b


def ring_allreduce_bytes_per_rank(n_bytes: float, n_ranks: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of
    ``n_bytes``: 2 (N - 1) / N * S."""
    validate.positive("n_bytes", n_bytes)
    n = validate.positive_int("n_ranks", n_ranks)
    return 2 * (n - 1) / n * n_bytes


@dataclass(frozen=True)
class ZeroState:
    """Model-state bytes one GPU holds, item by item."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def _zero_args(n_params, n_dp, stage, k, weight_bytes, grad_bytes):
    """zero_state's arguments, checked: (Psi, N_d, stage)."""
    validate.positive("n_params", n_params)
    n = validate.positive_int("n_dp", n_dp)
    for name, value in (("k", k), ("weight_bytes", weight_bytes)):
        validate.positive(name, value)
    validate.positive("grad_bytes", grad_bytes)
    return n_params, n, _stage(stage)


def zero_state(
    n_params: float,
    n_dp: int,
    stage: int,
    k: float = 12,
    weight_bytes: float = 2,
    grad_bytes: float = 2,
) -> ZeroState:
    """Weights, gradients and optimizer state one data-parallel rank holds.

    ZeRO (Rajbhandari et al. 2020, Sec. 5): mixed-precision Adam keeps
    2 Psi bytes of 16-bit weights, 2 Psi of 16-bit gradients and K Psi of
    optimizer state (fp32 master weights, momentum and variance: K = 12).
    Stage 1 shards the optimizer state over the N_d ranks, stage 2 also the
    gradients, stage 3 also the weights; stage 0 is plain data parallelism.
    The bytes per parameter are arguments, so other precisions fit too.
    """
    psi, n, stage = _zero_args(n_params, n_dp, stage, k, weight_bytes, grad_bytes)
    w, g, o = weight_bytes * psi, grad_bytes * psi, k * psi
    return ZeroState(
        weights=w / n if stage >= 3 else w,
        grads=g / n if stage >= 2 else g,
        optimizer=o / n if stage >= 1 else o,
    )


def zero_state_bytes(
    n_params: float,
    n_dp: int,
    stage: int,
    k: float = 12,
    weight_bytes: float = 2,
    grad_bytes: float = 2,
) -> float:
    """Model-state bytes per GPU under ZeRO stage 0-3 (see ``zero_state``):

    stage 0: (2 + 2 + K) Psi        stage 2: 2 Psi + (2 + K) Psi / N_d
    stage 1: (2 + 2) Psi + K Psi / N_d    stage 3: (2 + 2 + K) Psi / N_d
    """
    return zero_state(n_params, n_dp, stage, k, weight_bytes, grad_bytes).total


def zero_comm_bytes(
    n_params: float, stage: int, n_dp: int | None = None, value_bytes: float = 2
) -> float:
    """Bytes each rank sends per optimizer step under ZeRO stage 0-3.

    Stages 0-2 move the gradients once around a ring: an all-reduce (stage 0),
    or a reduce-scatter of the gradients and an all-gather of the updated
    weights (stages 1 and 2), 2 Psi values in all. Stage 3 all-gathers the
    weights again in backward, because it dropped them after forward: 3 Psi,
    1.5 times as much (Rajbhandari et al. 2020, Sec. 7). Values are
    ``value_bytes`` each (16-bit: 2). With ``n_dp`` the ring's factor
    (N_d - 1) / N_d is applied; without it, the large-N_d limit the paper
    quotes.
    """
    validate.positive("n_params", n_params)
    stage = _stage(stage)
    validate.positive("value_bytes", value_bytes)
    share = 1.0 if n_dp is None else (validate.positive_int("n_dp", n_dp) - 1) / n_dp
    passes = 3 if stage == 3 else 2
    return passes * share * n_params * value_bytes


def _pipeline_args(p, m, v):
    """(p, m, v), each a positive integer."""
    return (
        validate.positive_int("p", p),
        validate.positive_int("m", m),
        validate.positive_int("v", v),
    )


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """The share of a pipeline step that devices sit idle.

    With p stages and m micro-batches each device idles p - 1 stage-times of
    forward and of backward, out of m + p - 1 (GPipe, Huang et al. 2019, and
    1F1B alike). With v model chunks per device, each 1/v as long, the idle
    time shrinks v times (Narayanan et al. 2021, Sec. 2.2.2). One stage
    never idles.
    """
    p, m, v = _pipeline_args(p, m, v)
    return (p - 1) / (v * m + p - 1)


def micro_batches_for_bubble(p: int, bubble: float, v: int = 1) -> int:
    """The fewest micro-batches m that keep the bubble at or below ``bubble``:
    m >= (p - 1)(1 - bubble) / (v bubble)."""
    p = validate.positive_int("p", p)
    validate.fraction("bubble", bubble, allow_zero=False, allow_one=False)
    v = validate.positive_int("v", v)
    m = max(1, math.ceil((p - 1) * (1 - bubble) / (v * bubble) - 1e-9))
    while bubble_fraction(p, m, v) > bubble:  # float rounding at the boundary
        m += 1
    return m


def tp_bytes_per_layer(b: int, s: int, h: int, t: int, value_bytes: float = 2) -> float:
    """Bytes each tensor-parallel rank sends per transformer layer per
    training step (forward and backward).

    Megatron-LM's tensor parallelism (Shoeybi et al. 2019, Sec. 3) splits the
    attention heads and the MLP's hidden units over t ranks, so each rank
    holds part of every matmul. The partial outputs are summed by one
    all-reduce of the (b, s, h) activations after attention and one after the
    MLP in forward, and two more of their gradients in backward: four ring
    all-reduces of b s h values, 4 * 2 (t - 1) / t * b s h * value_bytes.
    (Sequence parallelism replaces each all-reduce by an all-gather and a
    reduce-scatter: the same bytes.)
    """
    b, s, h, t = _tp_args(b, s, h, t, value_bytes)
    return 4 * ring_allreduce_bytes_per_rank(b * s * h * value_bytes, t)


def _tp_args(b, s, h, t, value_bytes):
    """(b, s, h, t), each a positive integer; ``value_bytes`` above 0."""
    validate.positive("value_bytes", value_bytes)
    return tuple(
        validate.positive_int(name, x)
        for name, x in (("b", b), ("s", s), ("h", h), ("t", t))
    )


def tp_comm_s_per_layer(
    b: int,
    s: int,
    h: int,
    t: int,
    link_bytes_per_s: float,
    latency_s: float = 0.0,
    value_bytes: float = 2,
) -> float:
    """Seconds of tensor-parallel all-reduce per layer per training step:
    four ring all-reduces of the (b, s, h) activations over ``t`` ranks."""
    b = validate.positive_int("b", b)
    s = validate.positive_int("s", s)
    h = validate.positive_int("h", h)
    validate.positive("value_bytes", value_bytes)
    return 4 * ring_allreduce_s(b * s * h * value_bytes, t, link_bytes_per_s, latency_s)


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted latency-bandwidth (alpha-beta) model of a ring all-reduce.

    alpha_s: latency per message step; link_bytes_per_s: B; beta_s_per_byte:
    1/B, the seconds a byte costs on the link.
    """

    alpha_s: float
    link_bytes_per_s: float
    n_ranks: int

    @property
    def beta_s_per_byte(self) -> float:
        return 1.0 / self.link_bytes_per_s

    def predict_s(self, n_bytes: float) -> float:
        return ring_allreduce_s(
            n_bytes, self.n_ranks, self.link_bytes_per_s, self.alpha_s
        )


def fit_alpha_beta(n_bytes, seconds, n_ranks: int) -> AlphaBeta:
    """Fit T = 2 (N - 1) alpha + 2 (N - 1) / N * S / B to measured all-reduce
    times by least squares on the relative error.

    Times span four decades from 1 KiB to 64 MiB, so plain least squares would
    fit the largest messages only; minimising sum((T_fit / T - 1)^2) weighs
    every size alike. The model is linear in (2 (N - 1) alpha, 2 (N - 1) / N / B),
    so the fit is a 2 x 2 linear solve. A negative latency or bandwidth term
    (noise can produce one) is clamped at zero and the other term refitted.
    """
    n = validate.positive_int("n_ranks", n_ranks)
    if n < 2:
        raise ValueError(
            "n_ranks must be at least 2 to fit an all-reduce (one rank "
            f"sends nothing), got {n}"
        )
    try:
        xs, ts = list(n_bytes), list(seconds)
    except TypeError:
        raise ValueError("n_bytes and seconds must be sequences of numbers") from None
    if len(xs) != len(ts):
        raise ValueError(
            f"n_bytes and seconds must have the same length, got {len(xs)} "
            f"and {len(ts)}"
        )
    if len({x for x in xs if isinstance(x, (int, float))}) < 2:
        raise ValueError(
            f"the fit needs at least two different message sizes, got n_bytes={xs!r}"
        )
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        validate.positive(f"n_bytes[{i}]", x)
        validate.positive(f"seconds[{i}]", t)
    # rows (1/t, S/t) . (a, c) ~ 1, where T = a + c S
    u = [1 / t for t in ts]
    w = [x / t for x, t in zip(xs, ts, strict=True)]
    suu = sum(a * a for a in u)
    sww = sum(a * a for a in w)
    suw = sum(a * b for a, b in zip(u, w, strict=True))
    su, sw = sum(u), sum(w)
    det = suu * sww - suw * suw
    a = (sww * su - suw * sw) / det if det > 0 else -1.0
    c = (suu * sw - suw * su) / det if det > 0 else -1.0
    if a <= 0 or not math.isfinite(a):  # bandwidth only
        a, c = 0.0, sw / sww
    elif c <= 0 or not math.isfinite(c):  # latency only: no bandwidth to report
        raise ValueError(
            "the measured times do not grow with the message size; "
            "no bandwidth can be fitted"
        )
    steps = 2 * (n - 1)
    return AlphaBeta(alpha_s=a / steps, link_bytes_per_s=steps / n / c, n_ranks=n)


def fsdp_gathered_bytes(
    n_params: float, n_units: int, weight_bytes: float = 2
) -> float:
    """Bytes of full weights a rank holds while one FSDP unit computes: FSDP
    (ZeRO-3) keeps 1/N_d of every weight, and all-gathers one unit's
    ``weight_bytes * n_params / n_units`` into a buffer of its own before the
    unit runs, freeing it after (FSDP2 prefetches the next unit's too, which
    doubles it while the two overlap)."""
    validate.positive("n_params", n_params)
    n = validate.positive_int("n_units", n_units)
    validate.positive("weight_bytes", weight_bytes)
    return weight_bytes * n_params / n


def crossover_bytes(n_ranks: int, alpha_s: float, link_bytes_per_s: float) -> float:
    """S* = N alpha B: the message size at which a ring all-reduce's latency
    term 2 (N - 1) alpha equals its bandwidth term 2 (N - 1) / N * S / B.
    Smaller messages are latency-bound, larger ones bandwidth-bound."""
    n = validate.positive_int("n_ranks", n_ranks)
    validate.non_negative("alpha_s", alpha_s)
    validate.positive("link_bytes_per_s", link_bytes_per_s)
    return n * alpha_s * link_bytes_per_s


def bus_bytes_per_s(n_bytes: float, n_ranks: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: the bytes each rank sends,
    2 (N - 1) / N * S, over the time. For a ring it tends to the link's B as
    the message grows (the latency term fades); the algorithm bandwidth
    S / T is N / (2 (N - 1)) of it."""
    validate.positive("seconds", seconds)
    return ring_allreduce_bytes_per_rank(n_bytes, n_ranks) / seconds


# --- published all-reduce measurements, for the GPU rows beside the CPU's ----------


@dataclass(frozen=True)
class PublishedBusBandwidth:
    """An all-reduce bus bandwidth a source reports (nccl-tests' busbw, the
    B of the ring model) or, ``measured=False``, a link's nominal rate."""

    system: str
    n_gpus: int | None  # ranks in the all-reduce, where the source says
    bus_bytes_per_s: float
    measured: bool
    source: str
    as_of: str


# ML Engineering's network/README.md, and its network/benchmarks/results/
# all-reduce-8xH200.md; NVIDIA/nccl-tests issue 212 (S. Jeaugey, NVIDIA,
# 2024-05-06)
_BEKMAN_NETWORK = "Bekman, network chapter"
_BEKMAN_H200 = "Bekman, 8 x H200 results"
_NCCL_TESTS_212 = "NVIDIA, nccl-tests issue 212"

PUBLISHED_BUS_BANDWIDTH = (
    PublishedBusBandwidth(
        "8 x H200, NVSwitch, NCCL NVLS (16 GiB)",
        8,
        482.26e9,
        True,
        f"{_BEKMAN_H200}, torch 2.9.1, NCCL 2.27.7",
        "2026-08",
    ),
    PublishedBusBandwidth(
        "8 x H200, NVSwitch, NVLS off (ring)",
        8,
        367.61e9,
        True,
        f"{_BEKMAN_H200}, the same node, SHARP off",
        "2026-08",
    ),
    PublishedBusBandwidth(
        "8 x H100, NVLink, ring",
        8,
        370e9,
        True,
        f"{_NCCL_TESTS_212}: about 370 of 450 GB/s",
        "2024-05",
    ),
    PublishedBusBandwidth(
        "8 x H100, NVLink, NVLS",
        8,
        480e9,
        True,
        f"{_NCCL_TESTS_212}: about 480 GB/s",
        "2024-05",
    ),
    PublishedBusBandwidth(
        "8 x A100 node, NVLink",
        8,
        235e9,
        True,
        f"{_BEKMAN_NETWORK}: about 80 % of 300 GB/s",
        "2024",
    ),
)


@dataclass(frozen=True)
class PublishedSweep:
    """A published all-reduce sweep: message sizes and the bus bandwidth
    measured at each (nccl-tests' busbw)."""

    system: str
    n_ranks: int
    sizes_bytes: tuple
    bus_bytes_per_s: tuple
    source: str
    as_of: str

    @property
    def seconds(self) -> tuple:
        """Each size's time: the bytes a rank sends, 2 (N - 1) / N * S, over
        the bus bandwidth."""
        return tuple(
            ring_allreduce_bytes_per_rank(s, self.n_ranks) / b
            for s, b in zip(self.sizes_bytes, self.bus_bytes_per_s, strict=True)
        )


# all_reduce_bench.py on one node of 8 H200 SXM, NVSwitch (all pairs NV18):
# torch 2.9.1+cu130, NCCL 2.27.7; NCCL ran Ring (LL protocol) up to 1 MiB
# and NVLS from 2 MiB (the source says so).
BEKMAN_H200_SWEEP = PublishedSweep(
    "8 x H200, NVSwitch, NCCL",
    8,
    tuple(2**k for k in range(15, 35)),  # 32 KiB to 16 GiB
    tuple(
        g * 1e9
        for g in (
            1.44,
            2.93,
            5.73,
            11.74,
            23.94,
            39.93,
            64.53,
            107.16,
            155.53,
            219.89,
            275.84,
            346.51,
            401.93,
            436.15,
            450.29,
            463.58,
            469.17,
            473.10,
            477.45,
            482.26,
        )
    ),
    f"{_BEKMAN_H200}, torch 2.9.1, NCCL 2.27.7",
    "2026-08",
)


@dataclass(frozen=True)
class LinkRow:
    """One all-reduce fabric in the alpha-beta table: its latency per ring
    step (NaN where the source gives none), its B, and where they come from."""

    system: str
    n_ranks: int
    alpha_s: float
    bus_bytes_per_s: float
    source: str

    @property
    def alpha_us(self) -> float:
        return self.alpha_s * 1e6

    @property
    def bus_gb_per_s(self) -> float:
        return self.bus_bytes_per_s / 1e9

    @property
    def s_star_mib(self) -> float:
        """S* = N alpha B in MiB (NaN without a latency or a ring size)."""
        if math.isnan(self.alpha_s) or not self.n_ranks:
            return math.nan
        return crossover_bytes(self.n_ranks, self.alpha_s, self.bus_bytes_per_s) / 2**20


def published_link_rows(ib_gpus=("A100 SXM", "H100 SXM")) -> list[LinkRow]:
    """The GPU rows of the alpha-beta table: Bekman's 8 x H200 sweep fitted
    with ``fit_alpha_beta``, the published bus bandwidths, and the InfiniBand
    links of ``ib_gpus`` at their nominal datasheet rate (no measurement)."""
    sweep = BEKMAN_H200_SWEEP
    fit = fit_alpha_beta(sweep.sizes_bytes, sweep.seconds, sweep.n_ranks)
    rows = [
        LinkRow(
            f"{sweep.system}, 32 KiB-16 GiB sweep, fitted",
            sweep.n_ranks,
            fit.alpha_s,
            fit.link_bytes_per_s,
            sweep.source,
        )
    ]
    rows += [
        LinkRow(b.system, b.n_gpus or 0, math.nan, b.bus_bytes_per_s, b.source)
        for b in PUBLISHED_BUS_BANDWIDTH
    ]
    for gpu in ib_gpus:
        link = accelerators.interconnect(gpu)
        rows.append(
            LinkRow(
                f"{link.name}, InfiniBand, per GPU (nominal)",
                0,
                math.nan,
                link.ib_bytes_per_s,
                "datasheet rate, not a measurement",
            )
        )
    return rows
