"""Exercises of the scaling chapter (notebooks/scaling.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.judge import (
    Choice,
    Code,
    Integer,
    Mistake,
    Real,
    Reason,
    WrongFunction,
    exercise,
    register,
)
from mlbook.mfu import flops
from mlbook.scaling import artifacts, formulas

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


# --- scaling-2: the gradient all-reduce of another model on another cluster -------


def _grad_bytes(model, value_bytes=2):
    return value_bytes * flops.n_params(transformer.PRESETS[model])


def _ring(model, gpu, n_gpus, value_bytes=2, link="ib", per_rank=True):
    links = accelerators.interconnect(gpu)
    bw = links.ib_bytes_per_s if link == "ib" else links.nvlink_bytes_per_s
    s = _grad_bytes(model, value_bytes)
    if not per_rank:  # S / B: the whole buffer once, not 2 (N - 1) / N of it
        return s / bw
    return formulas.ring_allreduce_s(s, n_gpus, bw)


def _scaling_2(model, gpu, n_gpus):
    s = _grad_bytes(model)
    return {
        "sent_gb": formulas.ring_allreduce_bytes_per_rank(s, n_gpus) / 1e9,
        "allreduce_s": _ring(model, gpu, n_gpus),
    }


SCALING_2 = exercise(
    "scaling-2",
    level=1,
    kind="compute",
    inputs={"model": "Llama-3-8B", "gpu": "A100", "n_gpus": 256},
    answers={
        "sent_gb": Real("GB", "GB each GPU sends per all-reduce", 0.01),
        "allreduce_s": Real("s", "seconds per all-reduce, bandwidth term only", 0.01),
    },
    key=_scaling_2,
    mistakes=(
        Mistake(
            "sent_gb",
            "S instead of 2(N - 1)/N S",
            "a ring all-reduce is a reduce-scatter and an all-gather: each "
            "passes (N - 1)/N of the buffer through every rank.",
            lambda model, **_: _grad_bytes(model) / 1e9,
        ),
        Mistake(
            "sent_gb",
            "fp32 gradients",
            "the gradients are bf16: 2 bytes per parameter.",
            lambda model, n_gpus, **_: (
                formulas.ring_allreduce_bytes_per_rank(_grad_bytes(model, 4), n_gpus)
                / 1e9
            ),
        ),
        Mistake(
            "allreduce_s",
            "S / B instead of 2(N - 1)/N S / B",
            "each rank sends almost twice the buffer: a reduce-scatter, then "
            "an all-gather.",
            lambda **i: _ring(**i, per_rank=False),
        ),
        Mistake(
            "allreduce_s",
            "fp32 gradients",
            "the gradients are bf16: 2 bytes per parameter.",
            lambda **i: _ring(**i, value_bytes=4),
        ),
        Mistake(
            "allreduce_s",
            "NVLink's bandwidth",
            "256 GPUs span 32 nodes: the ring crosses InfiniBand, the slowest "
            "link in it.",
            lambda **i: _ring(**i, link="nvlink"),
        ),
    ),
)


# --- scaling-3: where latency and bandwidth cost the same -------------------------


def _crossover(n_ranks, alpha_us, link_gb_per_s, latency_steps=None):
    """The message size whose latency term equals its bandwidth term, read
    off the package's ring model: the latency term (the time of a message
    with alpha minus without) over the seconds one byte costs."""
    bw, alpha = link_gb_per_s * 1e9, alpha_us * 1e-6
    latency = formulas.ring_allreduce_s(1.0, n_ranks, bw, alpha)
    per_byte = formulas.ring_allreduce_s(1.0, n_ranks, bw)
    latency -= per_byte
    if latency_steps is not None:  # alpha paid latency_steps times, not 2 (N - 1)
        latency *= latency_steps / (2 * (n_ranks - 1))
    return latency / per_byte


def _scaling_3(n_ranks, alpha_us, link_gb_per_s):
    s_star = _crossover(n_ranks, alpha_us, link_gb_per_s)
    bw, alpha = link_gb_per_s * 1e9, alpha_us * 1e-6
    return {
        "s_star_bytes": s_star,
        "t_star_s": formulas.ring_allreduce_s(s_star, n_ranks, bw, alpha),
    }


SCALING_3 = exercise(
    "scaling-3",
    level=2,
    kind="derive",
    inputs={"n_ranks": 16, "alpha_us": 8, "link_gb_per_s": 25},
    answers={
        "s_star_bytes": Real("bytes", "S*, where the two terms are equal", 0.01),
        "t_star_s": Real("s", "the all-reduce time at S*", 0.01),
    },
    key=_scaling_3,
    mistakes=(
        Mistake(
            "s_star_bytes",
            "forgetting the 1/N",
            "the bandwidth term is 2(N - 1)/N S/B: set it equal to 2(N - 1) "
            "alpha and the (N - 1) cancels, the N does not.",
            lambda n_ranks, **i: _crossover(n_ranks, **i) / n_ranks,
        ),
        Mistake(
            "s_star_bytes",
            "alpha once per all-reduce",
            "a ring pays the latency at each of its 2(N - 1) steps.",
            lambda **i: _crossover(**i, latency_steps=1),
        ),
        Mistake(
            "t_star_s",
            "the latency term alone",
            "at S* the bandwidth term adds as much again.",
            lambda **i: _scaling_3(**i)["t_star_s"] / 2,
        ),
    ),
)


# --- scaling-4: ZeRO-2's bytes per GPU, as code ----------------------------------


def _zero2_reference(n_params, n_dp, k):
    return formulas.zero_state_bytes(n_params, n_dp, 2, k)


def _zero2_arguments(st):
    return st.tuples(
        st.floats(1e6, 1e12),
        st.sampled_from(POWERS_OF_TWO[1:]) | st.integers(2, 5000),
        st.sampled_from((4, 8, 12, 16)),
    )


def _same_bytes(expected, got) -> bool:
    try:
        return math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _zero2_example_numbers(n_params, n_dp, k):
    return 2 * 7.5e9 + (2 + 12) * 7.5e9 / n_dp  # Psi and K of the example


def _zero2_as_zero1(n_params, n_dp, k):
    return 4 * n_params + k * n_params / n_dp


def _zero2_as_zero3(n_params, n_dp, k):
    return (2 + 2 + k) * n_params / n_dp


SCALING_4 = exercise(
    "scaling-4",
    level=1,
    kind="code",
    code=Code(
        name="zero2_bytes",
        params=("n_params", "n_dp", "k"),
        reference=_zero2_reference,
        cases=(
            (7.5e9, 64, 12),
            (7.5e9, 1, 12),
            (70.6e9, 8, 12),
            (133_440, 3, 8),
            (1e9, 1024, 16),
        ),
        arguments=_zero2_arguments,
        same=_same_bytes,
        mistakes=(
            WrongFunction(
                "the example's Psi and K typed in",
                "use the function's arguments: the check tries other models, "
                "data-parallel sizes and optimizers.",
                _zero2_example_numbers,
            ),
            WrongFunction(
                "ZeRO-1's split",
                "stage 2 shards the gradients too: only the 16-bit weights stay "
                "whole on every rank.",
                _zero2_as_zero1,
            ),
            WrongFunction(
                "ZeRO-3's split",
                "stage 2 keeps every rank's 16-bit weights whole; only stage 3 "
                "shards them.",
                _zero2_as_zero3,
            ),
        ),
    ),
)

# --- scaling-5: measure the crossover on your own machine -------------------------
SCALING_5 = exercise("scaling-5", level=2, kind="measure")

# --- scaling-6: just before the DDP run, the reader predicts the exposed time -----
SCALING_6 = exercise(
    "scaling-6",
    level=1,
    kind="predict",
    answers={
        "exposed_share": Real(
            "%",
            "your prediction: exposed communication with one bucket, in per cent "
            "of one all-reduce on its own",
            0.1,
        ),
    },
    # why: one bucket overlaps nothing; did the 1 MiB buckets hide more?
    reasons=(
        Reason(
            "More showed than a whole all-reduce takes on its own: an all-reduce "
            "also waits for the slower rank, so any time one rank loses to other "
            "work on the machine shows up as exposed communication.",
            when=(("exposed_share", ">", 150),),
        ),
        Reason(
            "One bucket starts its all-reduce only when backward has produced the "
            "last gradient, so nothing is left to overlap with and nearly all of it "
            "adds to the step; the 1 MiB buckets started while backward was still "
            "running and hid part of theirs.",
            when=(("exposed_share", ">=", 80), ("small_share", "<", "exposed_share")),
        ),
        Reason(
            "One bucket starts its all-reduce only when backward has produced the "
            "last gradient, so nearly all of it adds to the step; the 1 MiB buckets "
            "did no better here, each paying the latency again while the cores "
            "that could overlap them were busy computing.",
            when=(("exposed_share", ">=", 80),),
        ),
        Reason(
            "One bucket has nothing to overlap with, yet less than a whole "
            "all-reduce showed: on a CPU the ranks' computation and gloo's threads "
            "share the same cores, so the step and the all-reduce it is compared "
            "with both move with how busy those cores are.",
        ),
    ),
)


# --- scaling-7: diagnose an all-reduce sweep: alpha, S*, and DDP's buckets ---------

GB = 1e9
MIB = 2**20
BOUND = {
    "latency": "latency-bound: the 2(N - 1) alpha term is the larger",
    "bandwidth": "bandwidth-bound: the 2(N - 1)/N S/B term is the larger",
}


def _bound(log, bucket_bytes) -> str:
    s_star = formulas.crossover_bytes(log.n_ranks, log.alpha_s, log.link_bytes_per_s)
    return "latency" if bucket_bytes < s_star else "bandwidth"


def _saved_ms(log, grad_gb, bucket_mib, new_bucket_mib, alpha_steps=None):
    """What buckets of ``new_bucket_mib`` save over ``bucket_mib`` per step;
    ``alpha_steps`` replaces the 2 (N - 1) latency steps (a mistake)."""
    if alpha_steps is not None:  # alpha paid alpha_steps times a message
        scale = alpha_steps / (2 * (log.n_ranks - 1))
        log = artifacts.SweepLog(**{**vars(log), "alpha_s": log.alpha_s * scale})
    grads = grad_gb * GB
    old = artifacts.bucket_allreduce_s(log, grads, bucket_mib * MIB)
    new = artifacts.bucket_allreduce_s(log, grads, new_bucket_mib * MIB)
    return (old - new) * 1e3


def _scaling_7(seed, n_ranks, bucket_mib, grad_gb, new_bucket_mib):
    log = artifacts.allreduce_log(seed, n_ranks)
    return {
        "alpha_s": log.alpha_s,
        "s_star_bytes": formulas.crossover_bytes(
            n_ranks, log.alpha_s, log.link_bytes_per_s
        ),
        "bound": _bound(log, bucket_mib * MIB),
        "saved_ms": _saved_ms(log, grad_gb, bucket_mib, new_bucket_mib),
    }


def _s_star_from(seed, n_ranks, use_algbw=False, with_n=True, **_):
    log = artifacts.allreduce_log(seed, n_ranks)
    b = log.link_bytes_per_s
    if use_algbw:  # S / T at the plateau: N / (2 (N - 1)) of B
        b *= n_ranks / (2 * (n_ranks - 1))
    return (n_ranks if with_n else 1) * log.alpha_s * b


SCALING_7 = exercise(
    "scaling-7",
    level=2,
    kind="diagnose",
    inputs={
        "seed": 11,
        "n_ranks": 16,
        "bucket_mib": 1,
        "grad_gb": 16,
        "new_bucket_mib": 25,
    },
    answers={
        "alpha_s": Real("s", "alpha, the latency of one ring step", 0.1),
        "s_star_bytes": Real("bytes", "S* = N alpha B, where the terms are equal", 0.1),
        "bound": Choice(
            "a 1 MiB bucket on this ring is",
            BOUND,
            hints={
                "bandwidth": "compare the bucket with S*: below it, the latency "
                "term is the larger.",
                "latency": "compare the bucket with S*: above it, the bandwidth "
                "term is the larger.",
            },
        ),
        "saved_ms": Real("ms", "what 25 MiB buckets save per step", 0.1),
    },
    key=_scaling_7,
    mistakes=(
        Mistake(
            "alpha_s",
            "the whole small-message time as alpha",
            "a 1 KiB all-reduce is almost all latency, but it pays alpha at each "
            "of the ring's 2(N - 1) steps.",
            lambda seed, n_ranks, **_: (
                artifacts.allreduce_log(seed, n_ranks).rows[0].time_s
            ),
        ),
        Mistake(
            "alpha_s",
            "N - 1 steps instead of 2(N - 1)",
            "an all-reduce is a reduce-scatter and an all-gather: N - 1 steps each.",
            lambda seed, n_ranks, **_: (
                2 * artifacts.allreduce_log(seed, n_ranks).alpha_s
            ),
        ),
        Mistake(
            "s_star_bytes",
            "algbw as the link's B",
            "the plateau of the bus bandwidth (busbw) is B; algbw = S/T is "
            "N/(2(N - 1)) of it.",
            lambda **i: _s_star_from(**i, use_algbw=True),
        ),
        Mistake(
            "s_star_bytes",
            "alpha B without the N",
            "set 2(N - 1) alpha equal to 2(N - 1)/N S/B: S* = N alpha B.",
            lambda **i: _s_star_from(**i, with_n=False),
        ),
        Mistake(
            "saved_ms",
            "one alpha per bucket instead of 2(N - 1)",
            "every bucket is a ring all-reduce of its own: 2(N - 1) latency steps.",
            lambda seed, n_ranks, grad_gb, bucket_mib, new_bucket_mib, **_: _saved_ms(
                artifacts.allreduce_log(seed, n_ranks),
                grad_gb,
                bucket_mib,
                new_bucket_mib,
                alpha_steps=1,
            ),
        ),
    ),
)


# --- scaling-8: diagnose a slow ring: which cause, and what the fix buys ------------

CAUSE = {
    "latency": "the messages are too small to reach the link's speed",
    "slow_link": "the ring runs through a link well below its rated speed",
    "healthy": "nothing: the ring runs near its links' rated speed",
}


def _scaling_8(seed, n_ranks, rated_gb_per_s, healthy_share, grad_gb):
    log = artifacts.allreduce_log(seed, n_ranks, rated_gb_per_s * GB, "slow_link")
    now = log.predict_s(grad_gb * GB)
    fixed = formulas.ring_allreduce_s(
        grad_gb * GB, n_ranks, healthy_share * rated_gb_per_s * GB, log.alpha_s
    )
    return {
        "cause": "slow_link",
        "bus_share": log.link_bytes_per_s / (rated_gb_per_s * GB),
        "saved_ms": (now - fixed) * 1e3,
    }


def _scaling_8_saved(
    seed, n_ranks, rated_gb_per_s, healthy_share, grad_gb, how="", **_
):
    log = artifacts.allreduce_log(seed, n_ranks, rated_gb_per_s * GB, "slow_link")
    b_now, b_fixed = log.link_bytes_per_s, healthy_share * rated_gb_per_s * GB
    if how == "algbw":  # the algbw plateau taken for B
        b_now *= n_ranks / (2 * (n_ranks - 1))
    if how == "rated":  # the fix reaches the rated speed itself
        b_fixed = rated_gb_per_s * GB
    share = 1.0 if how == "once" else 2 * (n_ranks - 1) / n_ranks
    return share * grad_gb * GB * (1 / b_now - 1 / b_fixed) * 1e3


SCALING_8 = exercise(
    "scaling-8",
    level=2,
    kind="diagnose",
    inputs={
        "seed": 5,
        "n_ranks": 16,
        "rated_gb_per_s": 50,
        "healthy_share": 0.75,
        "grad_gb": 16,
    },
    answers={
        "cause": Choice(
            "what is wrong with this ring",
            CAUSE,
            hints={
                "latency": "look at the largest messages: at a gigabyte the "
                "latency is a rounding error, and the bus bandwidth has levelled off.",
                "healthy": "set the plateau of the bus bandwidth against the rated "
                "speed: a healthy ring reaches about 80 % of it.",
            },
        ),
        "bus_share": Real(
            "fraction", "the ring's bus bandwidth B, as a share of the rated speed", 0.1
        ),
        "saved_ms": Real("ms", "what fixing the link saves per all-reduce", 0.1),
    },
    key=_scaling_8,
    mistakes=(
        Mistake(
            "bus_share",
            "algbw as B",
            "nccl-tests' busbw is 2(N - 1)/N S/T, the ring model's B; algbw = "
            "S/T is N/(2(N - 1)) of it.",
            lambda seed, n_ranks, rated_gb_per_s, **_: (
                artifacts.allreduce_log(seed, n_ranks, rated_gb_per_s * GB, "slow_link")
                .rows[-1]
                .algbw_bytes_per_s
                / (rated_gb_per_s * GB)
            ),
        ),
        Mistake(
            "saved_ms",
            "S / B instead of 2(N - 1)/N S / B",
            "each rank sends almost twice the buffer: a reduce-scatter, then an "
            "all-gather.",
            lambda **i: _scaling_8_saved(**i, how="once"),
        ),
        Mistake(
            "saved_ms",
            "the fixed ring at the rated speed",
            "a healthy ring reaches the share of the rated speed the statement "
            "gives, not all of it.",
            lambda **i: _scaling_8_saved(**i, how="rated"),
        ),
        Mistake(
            "saved_ms",
            "algbw as B",
            "take B from the bus bandwidth (busbw), not from algbw = S/T.",
            lambda **i: _scaling_8_saved(**i, how="algbw"),
        ),
    ),
)

EXERCISES = register(
    SCALING_1,
    SCALING_2,
    SCALING_3,
    SCALING_4,
    SCALING_5,
    SCALING_6,
    SCALING_7,
    SCALING_8,
)
