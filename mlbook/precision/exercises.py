"""Exercises of the mixed-precision chapter (notebooks/precision.md)."""

from __future__ import annotations

import math

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
from mlbook.precision import cases, formulas

LOG2_SCALES = range(0, 40)  # loss scales 2^0 .. 2^39


def scale_window(
    fmt, flush_limit, logit_grads, grads, lost="flushed", overflow_of="all"
):
    """The powers of two k whose scale 2^k loses fewer than ``flush_limit`` of
    the logit gradients (``lost``: "flushed" to zero, or "below_normal" to
    count subnormals as lost too, or "any" for none at all) and overflows
    none of the gradients (``overflow_of``: "all", or "logits" alone)."""
    logits = formulas.log2_histogram(logit_grads)
    everything = formulas.log2_histogram(grads) if overflow_of == "all" else logits
    window = []
    for k in LOG2_SCALES:
        z = formulas.zone_fractions(logits, fmt, 2.0**k)
        share = z.flushed + (z.subnormal if lost == "below_normal" else 0.0)
        ok_low = share == 0 if lost == "any" else share < flush_limit
        if ok_low and formulas.zone_fractions(everything, fmt, 2.0**k).overflow == 0:
            window.append(k)
    return window


def _answers(window):
    if not window:
        return None
    return {
        "lowest_log2": window[0],
        "highest_log2": window[-1],
        "width": len(window),
    }


def _precision_1(fmt, flush_limit, logit_grads, grads):
    found = _answers(scale_window(fmt, flush_limit, logit_grads, grads))
    if found is None:
        raise ValueError(
            "no power-of-two scale from 2^0 to 2^39 meets both conditions for "
            "these gradients"
        )
    return found


def _wrong(answer, **how):
    def value(fmt, flush_limit, logit_grads, grads):
        found = _answers(scale_window(fmt, flush_limit, logit_grads, grads, **how))
        return None if found is None else found[answer]

    return value


PRECISION_1 = exercise(
    "precision-1",
    level=2,
    kind="measure",
    inputs={"fmt": "fp16", "flush_limit": 0.01},
    measured=("logit_grads", "grads"),
    answers={
        "lowest_log2": Integer("log2", "the lowest scale 2^k's power k"),
        "highest_log2": Integer("log2", "the highest scale 2^k's power k"),
        "width": Integer("powers of two", "how many powers of two the window holds"),
    },
    key=_precision_1,
    mistakes=(
        Mistake(
            "lowest_log2",
            "no logit gradient flushed at all",
            "the question allows fewer than 1 % of them to become zero.",
            _wrong("lowest_log2", lost="any"),
        ),
        Mistake(
            "lowest_log2",
            "subnormals counted as lost",
            "a subnormal keeps its value with fewer bits; only a flush to zero "
            "loses it.",
            _wrong("lowest_log2", lost="below_normal"),
        ),
        Mistake(
            "highest_log2",
            "the overflow of the logit gradients alone",
            "none of the gradients may overflow: hidden-state and weight "
            "gradients are larger.",
            _wrong("highest_log2", overflow_of="logits"),
        ),
        Mistake(
            "width",
            "the gaps between the ends, not the powers of two",
            "count both ends of the window.",
            lambda **i: (
                _precision_1(**i)["highest_log2"] - _precision_1(**i)["lowest_log2"]
            ),
        ),
    ),
)

# --- precision-2: predict the share of logit gradients fp16 flushes ---------------

PRECISION_2 = exercise(
    "precision-2",
    level=1,
    kind="predict",
    answers={
        "logits_zero": Real(
            "fraction",
            "your prediction: the share of logit gradients that become zero in fp16",
            0.1,
        ),
    },
    # why: where the median logit gradient, about 1/(bsV), sits against the threshold
    reasons=(
        Reason(
            "None of the logit gradients became zero: at this batch, sequence and "
            "vocabulary even the smallest lies above fp16's flush threshold; a "
            "larger b s V pushes every one of them down toward it.",
            when=(("logits_zero", "<=", 0),),
        ),
        Reason(
            "Half the logit gradients lie below their median, about 1/(bsV), and "
            "here the median is at or below fp16's flush threshold, so at least "
            "half of them become zero.",
            when=(("logits_median", "<=", "flush_threshold"),),
        ),
        Reason(
            "The median logit gradient, about 1/(bsV), sits above fp16's flush "
            "threshold, so only the tail below it becomes zero: the tokens the "
            "model already gives almost no probability, whose gradients are far "
            "smaller than the median. A larger batch, sequence or vocabulary moves "
            "the median down onto the threshold.",
        ),
    ),
)


# --- precision-3: fp16 underflow counts of a Gaussian weight gradient -------------


def _flushed(rows, cols, sigma, scale, fmt, threshold=None, signs=2):
    """The expected number of values of a Gaussian (rows x cols) tensor that
    become zero when scaled by ``scale`` and cast to ``fmt``: those with
    |x| <= threshold / scale (the flush threshold unless told otherwise)."""
    threshold = formulas.flush_threshold(fmt) if threshold is None else threshold
    share = formulas.gaussian_share_within(threshold / scale, sigma)
    return rows * cols * share * signs / 2


def _fewest_log2(rows, cols, sigma, fmt, threshold=None):
    """The smallest k whose scale 2^k leaves fewer than one expected flush."""
    for k in range(0, 128):
        if _flushed(rows, cols, sigma, 2.0**k, fmt, threshold) < 1:
            return k
    return None


def _precision_3(rows, cols, sigma, scale, fmt):
    return {
        "flushed": _flushed(rows, cols, sigma, 1.0, fmt),
        "flushed_scaled": _flushed(rows, cols, sigma, scale, fmt),
        "fewest_log2": _fewest_log2(rows, cols, sigma, fmt),
    }


def _subnormal(fmt):
    return formulas.float_format(fmt).smallest_subnormal


def _normal(fmt):
    return formulas.float_format(fmt).smallest_normal


def _counted(answer, threshold=None, signs=2, times_scale=False):
    """``answer`` of precision-3 counted a wrong way: another threshold (a
    function of the format), one sign only, or the threshold multiplied by
    the scale instead of divided."""

    def value(rows, cols, sigma, scale, fmt):
        if answer == "fewest_log2":
            return _fewest_log2(rows, cols, sigma, fmt, threshold(fmt))
        s = scale if answer == "flushed_scaled" else 1.0
        t = formulas.flush_threshold(fmt) if threshold is None else threshold(fmt)
        if times_scale:
            s, t = 1.0, t * scale
        return _flushed(rows, cols, sigma, s, fmt, t, signs)

    return value


_SUB_HINT = (
    "round to nearest keeps a value above half the smallest subnormal: it "
    "rounds up to 2^-24. Only |x| <= 2^-25 becomes zero."
)
_NORMAL_HINT = (
    "a subnormal is not zero: it keeps its value with fewer significant bits. "
    "Count only what becomes zero."
)
_SIGN_HINT = "a Gaussian has two tails: count the negative values that flush too."
_SUB_NAME = "the smallest subnormal as the flush threshold"
_NORMAL_NAME = "subnormals counted as lost"

_PRECISION_3_MISTAKES = tuple(
    Mistake(answer, name, hint, _counted(answer, **how))
    for answer in ("flushed", "flushed_scaled", "fewest_log2")
    for name, hint, how in (
        (_SUB_NAME, _SUB_HINT, {"threshold": _subnormal}),
        (_NORMAL_NAME, _NORMAL_HINT, {"threshold": _normal}),
        ("one sign only", _SIGN_HINT, {"signs": 1}),
    )
    if not (answer == "fewest_log2" and name == "one sign only")
) + (
    Mistake(
        "flushed_scaled",
        "the threshold multiplied by the scale",
        "the scale multiplies the values, so the values that still flush are "
        "those below the threshold divided by the scale.",
        _counted("flushed_scaled", times_scale=True),
    ),
)

PRECISION_3 = exercise(
    "precision-3",
    level=2,
    kind="compute",
    inputs={"rows": 4096, "cols": 4096, "sigma": 1e-7, "scale": 1024, "fmt": "fp16"},
    answers={
        "flushed": Real("count", "values that become zero, unscaled", 0.01),
        "flushed_scaled": Real("count", "values that become zero at S = 1024", 0.01),
        "fewest_log2": Integer(
            "log2", "the smallest k whose scale 2^k leaves fewer than one"
        ),
    },
    key=_precision_3,
    mistakes=_PRECISION_3_MISTAKES,
)


# --- precision-4: delayed scaling of an fp8 E4M3 tensor with a margin -------------


def _precision_4(fmt, history_amax, margin, sigma):
    scale = formulas.fp8_scale(history_amax, fmt, margin)
    fmax = formulas.float_format(fmt).max
    return {
        "scale_log2": math.log2(scale),
        "saturated": formulas.gaussian_share_beyond(fmax / scale, sigma),
    }


def _fp8_wrong(answer, margin=None, fmt=None, tails=2):
    def value(**i):
        changed = dict(i)
        if margin == "none":
            changed["margin"] = 0
        if fmt is not None:
            changed["fmt"] = fmt
        if margin == "inverted":  # the margin multiplies the scale instead
            scale = formulas.fp8_scale(i["history_amax"], i["fmt"]) * 2 ** i["margin"]
            fmax = formulas.float_format(i["fmt"]).max
            got = {
                "scale_log2": math.log2(scale),
                "saturated": formulas.gaussian_share_beyond(fmax / scale, i["sigma"]),
            }
        else:
            got = _precision_4(**changed)
        return got[answer] * (tails / 2 if answer == "saturated" else 1)

    return value


_MARGIN_HINT = (
    "the margin makes the scale 2^margin smaller, so the largest value the "
    "cast holds is 2^margin times the history's amax."
)
_INVERTED_HINT = (
    "a margin leaves headroom: the scale becomes smaller, not larger, and more "
    "values fit under the format's max."
)

PRECISION_4 = exercise(
    "precision-4",
    level=1,
    kind="compute",
    inputs={"fmt": "fp8 E4M3", "history_amax": 6.0, "margin": 1, "sigma": 3.0},
    answers={
        "scale_log2": Real("log2", "log2 of the per-tensor scale", 0.005),
        "saturated": Real(
            "fraction", "the share of this step's values that saturate", 0.02
        ),
    },
    key=_precision_4,
    mistakes=(
        Mistake(
            "scale_log2",
            "the margin left out",
            _MARGIN_HINT,
            _fp8_wrong("scale_log2", "none"),
        ),
        Mistake(
            "scale_log2",
            "the margin applied the wrong way",
            _INVERTED_HINT,
            _fp8_wrong("scale_log2", "inverted"),
        ),
        Mistake(
            "scale_log2",
            "E5M2's max",
            "activations are cast to E4M3, whose largest value is 448.",
            _fp8_wrong("scale_log2", fmt="fp8 E5M2"),
        ),
        Mistake(
            "saturated",
            "the margin left out",
            _MARGIN_HINT,
            _fp8_wrong("saturated", "none"),
        ),
        Mistake(
            "saturated",
            "the margin applied the wrong way",
            _INVERTED_HINT,
            _fp8_wrong("saturated", "inverted"),
        ),
        Mistake(
            "saturated",
            "one tail only",
            "values saturate at -448 as well as at +448: count both tails.",
            _fp8_wrong("saturated", tails=1),
        ),
    ),
)


# --- precision-5: the bf16 stagnation bound ---------------------------------------


def _log2_of_power(x: float) -> int:
    return math.frexp(x)[1] - 1  # exact for a power of two


def _precision_5(fmt, weight, lr):
    return {
        "absorbed_log2": _log2_of_power(formulas.absorb_limit(weight, fmt)),
        "stall_log2": formulas.stall_log2(lr, fmt),
    }


PRECISION_5 = exercise(
    "precision-5",
    level=2,
    kind="derive",
    inputs={"fmt": "bf16", "weight": 6.0, "lr": 0.0003},
    answers={
        "absorbed_log2": Integer(
            "log2", "log2 of the largest update a weight of 6 absorbs"
        ),
        "stall_log2": Integer("log2", "the E from which on weights ignore the update"),
    },
    key=_precision_5,
    mistakes=(
        Mistake(
            "absorbed_log2",
            "the whole gap, not half of it",
            "round to nearest moves the sum to the nearer neighbour: an update "
            "survives once it passes half the gap.",
            lambda fmt, weight, lr: (
                _log2_of_power(formulas.absorb_limit(weight, fmt)) + 1
            ),
        ),
        Mistake(
            "absorbed_log2",
            "the gap at 1, not at the weight",
            "the gap grows with the weight's binade 2^E: 6 lies in [4, 8).",
            lambda fmt, weight, lr: _log2_of_power(formulas.absorb_limit(1.0, fmt)),
        ),
        Mistake(
            "absorbed_log2",
            "fp16's 10 mantissa bits",
            "bf16 keeps 7 mantissa bits (8 significant), not fp16's 10.",
            lambda fmt, weight, lr: _log2_of_power(
                formulas.absorb_limit(weight, "fp16")
            ),
        ),
        Mistake(
            "stall_log2",
            "the whole gap, not half of it",
            "an update of more than half the gap moves the weight by a whole gap: "
            "it stalls only below half.",
            lambda fmt, weight, lr: formulas.stall_log2(lr, fmt) - 1,
        ),
        Mistake(
            "stall_log2",
            "fp16's 10 mantissa bits",
            "bf16 keeps 7 mantissa bits (8 significant), not fp16's 10.",
            lambda fmt, weight, lr: formulas.stall_log2(lr, "fp16"),
        ),
    ),
)


# --- precision-6: a loss scaler with a hysteresis ----------------------------------


def _scales(found_inf, growth_interval, hysteresis):
    return formulas.scales_with_hysteresis(found_inf, growth_interval, hysteresis)


def _hysteresis_arguments(st):
    """Runs of up to 60 steps (the scale stays within 2^-44 .. 2^76, exact in
    fp32 and in a double), growth intervals 1-8, hysteresis 1-4."""
    return st.tuples(
        st.lists(st.booleans(), min_size=1, max_size=60),
        st.integers(1, 8),
        st.integers(1, 4),
    )


def _same_scales(expected, got) -> bool:
    got = [float(v) for v in got]
    return len(got) == len(expected) and got == [float(v) for v in expected]


EXAMPLE_STEPS = (False, True, True, False, False, True)
EXAMPLE_SCALES = (65536.0, 65536.0, 32768.0, 32768.0, 65536.0, 65536.0)


def _no_hysteresis(found_inf, growth_interval, hysteresis):
    return _scales(found_inf, growth_interval, 1)


def _refill_on_every_good_step(found_inf, growth_interval, hysteresis):
    scale, good, left, out = 65536.0, 0, hysteresis, []
    for inf in found_inf:
        if inf:
            good, left = 0, left - 1
            if left <= 0:
                scale *= 0.5
        else:
            good, left = good + 1, hysteresis
            if good == growth_interval:
                scale, good = scale * 2, 0
        out.append(scale)
    return out


def _good_run_survives_an_overflow(found_inf, growth_interval, hysteresis):
    scale, good, left, out = 65536.0, 0, hysteresis, []
    for inf in found_inf:
        if inf:
            left -= 1
            if left <= 0:
                scale *= 0.5
        else:
            good += 1
            if good == growth_interval:
                scale, good, left = scale * 2, 0, hysteresis
        out.append(scale)
    return out


def _hard_coded(found_inf, growth_interval, hysteresis):
    return list(EXAMPLE_SCALES)


PRECISION_6 = exercise(
    "precision-6",
    level=2,
    kind="code",
    code=Code(
        name="scales_with_hysteresis",
        params=("found_inf", "growth_interval", "hysteresis"),
        reference=_scales,
        cases=(
            (EXAMPLE_STEPS, 2, 2),
            ((True, True, True, True), 3, 1),
            ((True, True, True, True), 3, 3),
            ((False,) * 7 + (True, False, True, True), 3, 2),
            ((True, False, True, False, False, True, True), 2, 2),
            ((False, True) * 5, 1, 2),
        ),
        arguments=_hysteresis_arguments,
        same=_same_scales,
        mistakes=(
            WrongFunction(
                "no hysteresis (GradScaler's rule)",
                "with a hysteresis of h the scale backs off only at the h-th "
                "overflow since the last growth.",
                _no_hysteresis,
            ),
            WrongFunction(
                "the count refilled by every good step",
                "only a growth of the scale refills the count of overflows left; "
                "a good step does not.",
                _refill_on_every_good_step,
            ),
            WrongFunction(
                "the run of good steps kept through an overflow",
                "an overflow ends the run of good steps: the growth interval "
                "counts again from zero.",
                _good_run_survives_an_overflow,
            ),
            WrongFunction(
                "the example's scales, whatever the steps",
                "compute the scales from found_inf, growth_interval and "
                "hysteresis: the example is one case of many.",
                _hard_coded,
            ),
        ),
    ),
)

# --- precision-7: diagnose a gradient histogram under a loss scale ---------------

_CAUSES = {
    "underflow": "the scale is too small: the left tail becomes zero",
    "overflow": "the scale is too large: the largest values overflow to inf",
    "healthy": "nothing: this scale keeps the gradients",
}


def _precision_7(seed):
    case = cases.loss_scale_case(seed)
    return {
        "cause": cases.diagnosis(case),
        "scale_log2": cases.safe_scale_log2(case),
        "flushed_now": cases.flushed_count(case, case.scale_log2),
    }


def _below(seed, threshold_log2):
    """Values with |g| x S below 2^threshold_log2 at the case's scale: a
    flush counted at the wrong threshold."""
    case = cases.loss_scale_case(seed)
    limit = 2.0**threshold_log2 / 2.0**case.scale_log2
    return sum(m < limit for m in case.magnitudes)


PRECISION_7 = exercise(
    "precision-7",
    level=2,
    kind="diagnose",
    inputs={"seed": 3},
    answers={
        "cause": Choice(
            "what is wrong at this scale",
            options=_CAUSES,
            hints={
                "overflow": "fp16 overflows only from 65,520: compare the largest "
                "|g| x S with it.",
                "healthy": "look at the bins below 2^-25: those values become zero.",
                "underflow": "the largest |g| x S passes fp16's max: those values "
                "become inf and the step is skipped.",
            },
        ),
        "scale_log2": Integer(
            "log2", "the k of the largest scale 2^k at which nothing overflows"
        ),
        "flushed_now": Integer("count", "values that become zero at this scale"),
    },
    key=_precision_7,
    mistakes=(
        Mistake(
            "scale_log2",
            "the change of scale, not the scale",
            "the table is at the scale 2^k already: give the new scale's own "
            "power of two.",
            lambda seed: (
                _precision_7(seed)["scale_log2"]
                - cases.loss_scale_case(seed).scale_log2
            ),
        ),
        Mistake(
            "scale_log2",
            "GradScaler's initial scale",
            "2^16 is where GradScaler starts; the scale to use follows from the "
            "largest gradient: the largest power of two that keeps it under "
            "65,504.",
            lambda seed: 16,
        ),
        Mistake(
            "flushed_now",
            "subnormals counted as lost",
            "a value between 2^-24 and 2^-14 is subnormal: it keeps a few bits. "
            "Only values at or below 2^-25 become zero.",
            lambda seed: _below(seed, -14),
        ),
        Mistake(
            "flushed_now",
            "the smallest subnormal as the threshold",
            "round to nearest lifts a value above half the smallest subnormal "
            "to 2^-24: only |g| x S at or below 2^-25 becomes zero.",
            lambda seed: _below(seed, -24),
        ),
    ),
)


# --- precision-8: diagnose a bf16 run that stopped learning -----------------------

_STALL_CAUSES = {
    "no_master": "bf16 weights updated in place, with no fp32 master copy",
    "lr_zero": "the learning-rate schedule has reached zero",
    "grads_flushed": "the gradients flush to zero (no loss scale)",
    "not_in_optimizer": "the weights are not among the optimizer's parameters",
}


def _precision_8(seed):
    run = cases.stalled_run(seed)
    return {
        "cause": run.cause,
        "absorbed_log2": cases.absorbed_log2(run),
        "updates_per_step": cases.updates_per_bf16_step(run),
    }


def _gap_log2(seed, fmt="bf16", at=None):
    run = cases.stalled_run(seed)
    w = run.weight_median if at is None else at
    return math.frexp(formulas.absorb_limit(w, fmt))[1] - 1


PRECISION_8 = exercise(
    "precision-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 1},
    answers={
        "cause": Choice(
            "why the loss does not move",
            options=_STALL_CAUSES,
            hints={
                "lr_zero": "read the learning-rate column: it is not zero.",
                "grads_flushed": "read the gradient norm: the gradients are there, "
                "and bf16 has fp32's range.",
                "not_in_optimizer": "the optimizer computed an update for every "
                "weight: read the update column.",
            },
        ),
        "absorbed_log2": Integer(
            "log2", "log2 of the largest update the median weight absorbs"
        ),
        "updates_per_step": Real(
            "count",
            "updates of this size an fp32 master sums into one bf16 step",
            0.01,
        ),
    },
    key=_precision_8,
    mistakes=(
        Mistake(
            "absorbed_log2",
            "the whole gap, not half of it",
            "round to nearest keeps the nearer neighbour: an update survives once "
            "it passes half the gap.",
            lambda seed: _gap_log2(seed) + 1,
        ),
        Mistake(
            "absorbed_log2",
            "fp16's 10 mantissa bits",
            "bf16 keeps 7 mantissa bits (8 significant), not fp16's 10.",
            lambda seed: _gap_log2(seed, "fp16"),
        ),
        Mistake(
            "updates_per_step",
            "half the gap, not the whole",
            "the bf16 copy moves from one number to the next: a whole gap, "
            "twice the largest update it absorbs.",
            lambda seed: _precision_8(seed)["updates_per_step"] / 2,
        ),
        Mistake(
            "updates_per_step",
            "fp16's gap",
            "the copy the forward reads is bf16: its gap around the weight is "
            "2^(E - 7).",
            lambda seed: (
                2
                * formulas.absorb_limit(cases.stalled_run(seed).weight_median, "fp16")
                / cases.stalled_run(seed).lr
            ),
        ),
    ),
)

EXERCISES = register(
    PRECISION_1,
    PRECISION_2,
    PRECISION_3,
    PRECISION_4,
    PRECISION_5,
    PRECISION_6,
    PRECISION_7,
    PRECISION_8,
)
