"""Exercises of the gradient-accumulation chapter (notebooks/accumulation.md)."""

from __future__ import annotations

import math

from mlbook.accumulation import formulas, incidents
from mlbook.common import accelerators, transformer
from mlbook.common.memory import ADAM_MIXED_STATE_BYTES
from mlbook.common.units import GIB
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
from mlbook.precision.formulas import flush_threshold
from mlbook.scaling import formulas as scaling

# fp16 loss scaling inside accumulation, simulated on this machine: the share
# of gradients that underflow depends on the run, so there is no key.
ACCUMULATION_1 = exercise("accumulation-1", level=2, kind="measure")

# Just before the two-rank DDP run: the reader writes down what no_sync saves.
ACCUMULATION_2 = exercise(
    "accumulation-2",
    level=1,
    kind="predict",
    answers={
        "step_saved": Real(
            "%",
            "your prediction: how much shorter the step with no_sync is",
            0.1,
        ),
    },
    # why the step saved what it did: the all-reduce's share of the synchronised step
    reasons=(
        Reason(
            "Skipping the all-reduces saved less than the steps vary from one to "
            "the next: each moved a few KiB between two processes on one machine, "
            "which costs next to nothing beside the forward and backward passes.",
            when=(("step_saved", "<=", 0),),
        ),
        Reason(
            "The all-reduces were a small part of the step: each moved a few KiB "
            "between two processes on one machine, while the forward and backward "
            "passes did the work. Across machines, a large model's gigabytes of "
            "gradients make the same all-reduces a real share of the step.",
            when=(("allreduce_share", "<", 0.1),),
        ),
        Reason(
            "Even a few KiB pays a fixed latency per all-reduce, the two processes "
            "meeting and handing the buffer over, and beside a model this small "
            "that latency is a large part of each backward: skipping all but the "
            "last all-reduce saves most of it.",
        ),
    ),
)


# --- accumulation-3: normalise by the whole batch's tokens ---------------------------


def _same_losses(expected, got) -> bool:
    got = list(got)
    return len(got) == len(expected) and all(
        math.isclose(float(g), e, rel_tol=1e-9, abs_tol=1e-12)
        for e, g in zip(expected, got, strict=True)
    )


def _token_loss_arguments(st):
    """k = 1 to 8 micro-batches of 1 to 12 real tokens, losses in [0, 20]."""
    micro_batch = st.lists(st.floats(0.0, 20.0), min_size=1, max_size=12)
    return st.lists(micro_batch, min_size=1, max_size=8).map(lambda t: (t,))


def _mean_without_k(token_losses):
    return [sum(losses) / len(losses) for losses in token_losses]


def _sum_over_k(token_losses):
    return [sum(losses) / len(token_losses) for losses in token_losses]


def _example_count(token_losses):
    return [sum(losses) / 4 for losses in token_losses]  # N of the statement's example


ACCUMULATION_3 = exercise(
    "accumulation-3",
    level=2,
    kind="code",
    code=Code(
        name="micro_batch_losses",
        params=("token_losses",),
        reference=formulas.token_normalised_losses,
        cases=(
            ([[2.0, 1.0, 3.0], [0.5]],),
            ([[0.7, 1.1], [2.3, 0.4, 1.9, 0.6], [1.2]],),
            ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],),
            ([[2.5]],),
            ([[4.0, 2.0], [], [1.0, 1.0, 1.0]],),
        ),
        arguments=_token_loss_arguments,
        same=_same_losses,
        mistakes=(
            WrongFunction(
                "each micro-batch's own token mean, divided by k",
                "a token of micro-batch j then weighs 1 / (k N_j): tokens in short "
                "micro-batches count for more. Divide every micro-batch's sum by "
                "the same number.",
                formulas.naive_token_losses,
            ),
            WrongFunction(
                "each micro-batch's own token mean, without the 1/k",
                "the k losses add up over the accumulation: their sum must be the "
                "whole batch's token mean, not k times a mean.",
                _mean_without_k,
            ),
            WrongFunction(
                "the token sums divided by k",
                "k counts micro-batches, not tokens: the mean is over the tokens "
                "of the whole batch.",
                _sum_over_k,
            ),
            WrongFunction(
                "the example's token count typed in",
                "N = 4 is the example's count; count the real tokens of the batch "
                "you are given.",
                _example_count,
            ),
        ),
    ),
)


# --- accumulation-4: the loss scale that accumulation needs ---------------------------


def _accumulation_4(grad, k, fmt):
    flush = flush_threshold(fmt)
    return {
        "scale_log2": formulas.loss_scale_log2(grad, k, flush),
        "k_unscaled": formulas.largest_unscaled_k(grad, flush),
    }


def _with_threshold(answer, threshold, *, forget_k=False):
    """The answer against another underflow threshold (or without the 1/k)."""

    def wrong(grad, k, fmt):
        if answer == "scale_log2":
            return formulas.loss_scale_log2(grad, 1 if forget_k else k, threshold)
        found = formulas.largest_unscaled_k(grad, threshold)
        return found if found > 0 else None

    return wrong


_SUBNORMAL_HINT = (
    "fp16's smallest subnormal is 2^-24, but rounding to nearest keeps anything "
    "above half of it: the flush threshold is 2^-25."
)
_NORMAL_HINT = (
    "subnormals are not lost: fp16 keeps magnitudes down to its smallest "
    "subnormal, and rounds only those at or below half of it to zero."
)

ACCUMULATION_4 = exercise(
    "accumulation-4",
    level=2,
    kind="derive",
    inputs={"grad": 2e-7, "k": 16, "fmt": "fp16"},
    answers={
        "scale_log2": Integer(
            "log2", "the exponent e of the smallest loss scale S = 2^e at k = 16"
        ),
        "k_unscaled": Integer(
            "micro-batches", "the largest k at which S = 1 still keeps the gradient"
        ),
    },
    key=_accumulation_4,
    mistakes=(
        Mistake(
            "scale_log2",
            "the smallest subnormal as the threshold",
            _SUBNORMAL_HINT,
            _with_threshold("scale_log2", 2.0**-24),
        ),
        Mistake(
            "scale_log2",
            "the smallest normal as the threshold",
            _NORMAL_HINT,
            _with_threshold("scale_log2", 2.0**-14),
        ),
        Mistake(
            "scale_log2",
            "forgetting the 1/k",
            "each micro-batch's loss is scaled by S / k, not S: its backward "
            "produces S grad / k.",
            _with_threshold("scale_log2", 2.0**-25, forget_k=True),
        ),
        Mistake(
            "k_unscaled",
            "the smallest subnormal as the threshold",
            _SUBNORMAL_HINT,
            _with_threshold("k_unscaled", 2.0**-24),
        ),
        Mistake(
            "k_unscaled",
            "grad / 2^-25 rounded up",
            "grad / k must stay above the threshold: the largest whole k below "
            "grad / 2^-25, rounded down.",
            lambda grad, k, fmt: math.ceil(grad / flush_threshold(fmt)),
        ),
    ),
)


# --- accumulation-5: the all-reduces no_sync saves, on a real cluster ----------------


def _allreduce_s(model, gpu, n_gpus, k, link):
    """Seconds of gradient all-reduce per step, with and without no_sync, over
    the ring at the GPU's InfiniBand ("ib") or NVLink rate."""
    grad_bytes = ADAM_MIXED_STATE_BYTES["bf16 gradients"] * flops.n_params(
        transformer.PRESETS[model]
    )
    links = accelerators.interconnect(gpu)
    rate = links.ib_bytes_per_s if link == "ib" else links.nvlink_bytes_per_s
    one = scaling.ring_allreduce_s(grad_bytes, n_gpus, rate)
    return {"sync_s": k * one, "no_sync_s": one}


def _accumulation_5(model, gpu, n_gpus, k):
    return _allreduce_s(model, gpu, n_gpus, k, "ib")


def _times(factor, link="ib"):
    """Both answers off by ``factor`` (a byte count or a rate read wrongly)."""

    def wrong(answer):
        return lambda **i: _allreduce_s(**i, link=link)[answer] * factor

    return wrong


_FP32 = _times(2.0)
_NVLINK = _times(1.0, link="nvlink")
_BITS = _times(1 / 8)
_FP32_HINT = "bf16 gradients are 2 bytes a parameter, not fp32's 4."
_NVLINK_HINT = (
    "a ring over 8 nodes crosses InfiniBand between them, and a ring runs at "
    "its slowest link: 50 GB/s a GPU, not NVLink's 450."
)
_BITS_HINT = "NDR InfiniBand is 400 gigabits a second: 50 GB/s, not 400 GB/s."


def _one_pass(answer):
    """S / B: the buffer sent once, not a reduce-scatter and an all-gather."""

    def wrong(model, gpu, n_gpus, k):
        right = _accumulation_5(model, gpu, n_gpus, k)[answer]
        return right * n_gpus / (2 * (n_gpus - 1))

    return wrong


_ONE_PASS_HINT = (
    "a ring all-reduce is a reduce-scatter and then an all-gather: each rank "
    "sends 2 (N - 1) / N times the buffer."
)

ACCUMULATION_5 = exercise(
    "accumulation-5",
    level=1,
    kind="compute",
    inputs={"model": "Llama-2-7B", "gpu": "H100 SXM", "n_gpus": 64, "k": 16},
    answers={
        "sync_s": Real(
            "s", "seconds all-reducing per optimizer step without no_sync", 0.01
        ),
        "no_sync_s": Real(
            "s", "seconds all-reducing per optimizer step with no_sync", 0.01
        ),
    },
    key=_accumulation_5,
    mistakes=(
        Mistake(
            "sync_s",
            "one all-reduce per step",
            "without no_sync every one of the k backwards all-reduces the "
            "gradients it has so far.",
            lambda **i: _accumulation_5(**i)["no_sync_s"],
        ),
        Mistake(
            "no_sync_s",
            "k all-reduces per step",
            "inside no_sync the first k - 1 backwards skip the all-reduce; only "
            "the last one runs it.",
            lambda **i: _accumulation_5(**i)["sync_s"],
        ),
        *(
            Mistake(answer, name, hint, wrong(answer))
            for answer in ("sync_s", "no_sync_s")
            for name, hint, wrong in (
                ("fp32 gradients", _FP32_HINT, _FP32),
                ("NVLink's rate", _NVLINK_HINT, _NVLINK),
                ("gigabits for gigabytes", _BITS_HINT, _BITS),
                ("the buffer sent once", _ONE_PASS_HINT, _one_pass),
            )
        ),
    ),
)


# --- accumulation-6: the k a memory budget forces, and what it costs -----------------


def _cost_model(
    optimizer_ms, micro_batch_ms, example_ms, act_fixed_gib, act_per_example_gib, **_
):
    return formulas.StepCostModel(
        optimizer_s=optimizer_ms / 1e3,
        per_micro_batch_s=micro_batch_ms / 1e3,
        per_example_s=example_ms / 1e3,
        per_example_bytes=act_per_example_gib * GIB,
        fixed_bytes=act_fixed_gib * GIB,
    )


def _smallest_k(global_batch, act_budget_gib, **costs):
    b = _cost_model(**costs).largest_micro_batch(global_batch, act_budget_gib * GIB)
    return global_batch // b


def _extra_pct(global_batch, k, **costs):
    return (_cost_model(**costs).slowdown(global_batch, k) - 1) * 100


def _accumulation_6(
    global_batch,
    optimizer_ms,
    micro_batch_ms,
    example_ms,
    act_fixed_gib,
    act_per_example_gib,
    act_budget_gib,
):
    costs = dict(
        optimizer_ms=optimizer_ms,
        micro_batch_ms=micro_batch_ms,
        example_ms=example_ms,
        act_fixed_gib=act_fixed_gib,
        act_per_example_gib=act_per_example_gib,
    )
    k = _smallest_k(global_batch, act_budget_gib, **costs)
    return {
        "k": k,
        "step_s": _cost_model(**costs).step_s(global_batch, k),
        "extra_pct": _extra_pct(global_batch, k, **costs),
    }


def _no_fixed_k(global_batch, act_per_example_gib, act_budget_gib, **_):
    """The budget divided by the per-example bytes alone."""
    fits = [
        b
        for b in formulas.divisors(global_batch)
        if b * act_per_example_gib <= act_budget_gib
    ]
    return global_batch // fits[-1]


def _powers_of_two_k(
    global_batch, act_fixed_gib, act_per_example_gib, act_budget_gib, **_
):
    """Micro-batches restricted to powers of two."""
    fits = [
        b
        for b in formulas.divisors(global_batch)
        if b & (b - 1) == 0
        and act_fixed_gib + b * act_per_example_gib <= act_budget_gib
    ]
    return global_batch // fits[-1]


def _rounded_up_k(
    global_batch, act_fixed_gib, act_per_example_gib, act_budget_gib, **_
):
    """The most examples that fit, and k = B / b rounded up, whether b
    divides B or not."""
    b = math.floor((act_budget_gib - act_fixed_gib) / act_per_example_gib)
    return math.ceil(global_batch / b)


def _at_k(answer, pick):
    """The answer computed at the k that ``pick(**inputs)`` chose."""

    def wrong(**i):
        k = pick(**i)
        if answer == "step_s":
            return _cost_model(**i).step_s(i["global_batch"], k)
        return _extra_pct(k=k, **i)

    return wrong


def _overhead_share_pct(**i):
    k = _accumulation_6(**i)["k"]
    return _cost_model(**i).overhead_share(i["global_batch"], k) * 100


def _k_fixed_costs_pct(**i):
    k, t1 = _accumulation_6(**i)["k"], _cost_model(**i).step_s(i["global_batch"], 1)
    return k * i["micro_batch_ms"] / 1e3 / t1 * 100


_NO_FIXED_HINT = (
    "the activations of a micro-batch are M_0 + b m_example: the fixed part "
    "takes its share of the budget too."
)
_POWERS_HINT = "b need not be a power of two, only a divisor of B."
_DIVIDES_HINT = "b must divide B, so that the k micro-batches are equal."
_CASES_6 = (
    ("the fixed activations left out", _NO_FIXED_HINT, _no_fixed_k),
    ("powers of two only", _POWERS_HINT, _powers_of_two_k),
)

ACCUMULATION_6 = exercise(
    "accumulation-6",
    level=2,
    kind="compute",
    inputs={
        "global_batch": 360,
        "optimizer_ms": 40,
        "micro_batch_ms": 15,
        "example_ms": 5,
        "act_fixed_gib": 4,
        "act_per_example_gib": 1.75,
        "act_budget_gib": 32,
    },
    answers={
        "k": Integer("micro-batches", "the smallest k whose micro-batch fits"),
        "step_s": Real("s", "the step time at that k", 0.005),
        "extra_pct": Real("%", "how much longer that is than one batch of 360", 0.01),
    },
    key=_accumulation_6,
    mistakes=(
        *(Mistake("k", name, hint, pick) for name, hint, pick in _CASES_6),
        Mistake(
            "k",
            "k rounded up from a b that does not divide B",
            _DIVIDES_HINT,
            _rounded_up_k,
        ),
        *(
            Mistake(answer, name, hint, _at_k(answer, pick))
            for answer in ("step_s", "extra_pct")
            for name, hint, pick in _CASES_6
        ),
        Mistake(
            "extra_pct",
            "the share of the step that is fixed cost",
            "compare the step at k with the step at k = 1, which pays the fixed "
            "cost once: t(k) / t(1) - 1.",
            _overhead_share_pct,
        ),
        Mistake(
            "extra_pct",
            "k fixed costs over the step at k = 1",
            "the step at k = 1 pays the fixed cost once already: the extra is "
            "(k - 1) t_micro, not k t_micro.",
            _k_fixed_costs_pct,
        ),
    ),
)

# --- diagnoses: a step's micro-batch log, a k sweep ----------------------------------

NORMALISATION_CHOICE = Choice(
    "how this trainer normalised each micro-batch's loss",
    {
        "sum_over_n": "the token sum over the whole batch's N (right)",
        "mean_over_k": "each micro-batch's token mean, divided by k",
        "mean_no_k": "each micro-batch's token mean, not divided by k",
        "sum_over_k": "each micro-batch's token sum, divided by k",
    },
    {
        "sum_over_n": "divide a micro-batch's loss sum by N and compare with the "
        "logged loss.",
        "mean_no_k": "add the logged losses up: the whole batch's mean is about "
        "one token's loss, 2.6 nats.",
        "sum_over_k": "a token sum is thousands of nats; compare the logged "
        "losses with the sums.",
    },
)


def _accumulation_7(seed):
    log = incidents.micro_batch_log(seed)
    return {
        "normalisation": log.normalisation,
        "weight": log.token_weight(log.shortest),
        "right_weight": log.token_weight(log.shortest, "sum_over_n"),
    }


ACCUMULATION_7 = exercise(
    "accumulation-7",
    level=2,
    kind="diagnose",
    inputs={"seed": 11},
    answers={
        "normalisation": NORMALISATION_CHOICE,
        "weight": Real(
            "fraction", "the weight this trainer gave one token of micro-batch 1", 0.01
        ),
        "right_weight": Real("fraction", "the weight one token should have had", 0.01),
    },
    key=_accumulation_7,
    mistakes=(
        Mistake(
            "weight",
            "the right weight 1/N",
            "that is what the token should have weighed; this trainer divided by "
            "something else.",
            lambda seed: _accumulation_7(seed)["right_weight"],
        ),
        Mistake(
            "weight",
            "1/N_1, without the k",
            "each micro-batch's mean was also divided by k.",
            lambda seed: 1 / incidents.micro_batch_log(seed).micro_batches[0].tokens,
        ),
        Mistake(
            "right_weight",
            "1/(k N_1), the trainer's weight",
            "the right weight is the same for every token of the batch.",
            lambda seed: _accumulation_7(seed)["weight"],
        ),
    ),
)

K_CAUSES = Choice(
    "what makes the step at the team's k slow",
    {
        "fixed_cost": "each micro-batch's fixed cost, paid k times",
        "per_example": "the work per example",
        "optimizer": "the optimizer step",
    },
    {
        "per_example": "every k processes the same B examples.",
        "optimizer": "the optimizer runs once a step, whatever k is.",
    },
)


def _accumulation_8(seed, global_batch, k_used, budget_gib):
    log = incidents.k_sweep_log(seed, global_batch)
    m, rows = log.model, {r.k: r for r in log.sweep.rows}
    k_fit = global_batch // m.largest_micro_batch(global_batch, budget_gib * GIB)
    grows = {  # what each term of the step adds between k_fit and k_used
        "fixed_cost": (k_used - k_fit) * m.per_micro_batch_s,
        "per_example": 0.0,
        "optimizer": 0.0,
    }
    return {
        "cause": max(grows, key=grows.get),
        "k": k_fit,
        "saved_ms": (rows[k_used].step_s - rows[k_fit].step_s) * 1e3,
    }


def _all_fixed_costs_ms(seed, global_batch, k_used, budget_gib):
    fit = formulas.fit_cost_model(incidents.k_sweep_log(seed, global_batch).sweep)
    return k_used * fit.per_micro_batch_s * 1e3


ACCUMULATION_8 = exercise(
    "accumulation-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 1, "global_batch": 256, "k_used": 64, "budget_gib": 16},
    answers={
        "cause": K_CAUSES,
        "k": Integer("micro-batches", "the k to use"),
        "saved_ms": Real("ms", "what it saves a step", 0.04),
    },
    key=_accumulation_8,
    mistakes=(
        Mistake(
            "k",
            "the micro-batch b instead of k",
            "k is the number of micro-batches: B / b.",
            lambda seed, global_batch, budget_gib, **_: (
                global_batch // _accumulation_8(seed, global_batch, 1, budget_gib)["k"]
            ),
        ),
        Mistake(
            "saved_ms",
            "the fixed cost of all 64 micro-batches",
            "at the k you pick, its micro-batches still pay their fixed cost.",
            _all_fixed_costs_ms,
        ),
    ),
)

EXERCISES = register(
    ACCUMULATION_1,
    ACCUMULATION_2,
    ACCUMULATION_3,
    ACCUMULATION_4,
    ACCUMULATION_5,
    ACCUMULATION_6,
    ACCUMULATION_7,
    ACCUMULATION_8,
)
