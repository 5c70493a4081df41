"""The precision chapter's exercise keys, worked out by hand here: on
made-up gradients whose window is worked out by hand (precision-1 is checked
against the reader's own), and from IEEE 754 / OCP FP8 limits and the normal
distribution for the others (math.erf and math.erfc, not the package)."""

import math

import numpy as np
import pytest

from helpers.exercise_keys import assert_matches, measured_for
from mlbook.exercises import check


def made_up_gradients():
    """1,000 logit gradients: 0.5 % at 2^-36, 0.5 % at 2^-30, the rest at
    2^-22; the other gradients add ten of 0.5.

    fp16 flushes a magnitude to zero at or below 2^-25 (half its smallest
    subnormal 2^-24) and overflows from 65,520 (65,504 plus half the last gap).
      flushed < 1 %: 2^-30 x 2^k flushes for k <= 5, 2^-36 x 2^k for k <= 11:
                     1 % for k <= 5, 0.5 % for 6 <= k <= 11 -> lowest k = 6
      no overflow:   0.5 x 2^k < 65,520 -> 2^(k-1) < 65,520 -> k <= 16
    The window is 2^6 .. 2^16: 11 powers of two. The named mistakes:
      no flush at all:           k >= 12                     -> lowest 12
      subnormals as lost (< 2^-14): 2^-30 x 2^k below normal for k <= 15,
                                 2^-22 x 2^k for k <= 7      -> lowest 16
      overflow of logits alone:  2^-22 x 2^k < 65,520 -> k <= 37 -> highest 37
    """
    logits = np.array([2.0**-36] * 5 + [2.0**-30] * 5 + [2.0**-22] * 990)
    return {"logit_grads": logits, "grads": np.concatenate([logits, [0.5] * 10])}


# precision-3: a 4096 x 4096 Gaussian gradient, sigma = 1e-7. fp16 rounds to zero
# exactly the |x| <= 2^-25 (half its smallest subnormal 2^-24, IEEE 754 binary16):
# P(|x| <= t) = erf(t / (sigma sqrt 2)). At S = 1024 the threshold is 2^-25 / 2^10.
N_VALUES = 4096 * 4096  # 16,777,216


def _flushed(scale):
    return N_VALUES * math.erf(2.0**-25 / scale / (1e-7 * math.sqrt(2)))


# erf(0.2107) = 0.2343: 3.93 M of them; at S = 1024, erf(2.06e-4) = 2.32e-4: 3,896.
# Fewer than one expected: for small x erf(x) ~ 2x / sqrt(pi), so
# N 2^-25 sqrt(2 / pi) / (S sigma) < 1 -> S > 3.99e6: 2^21 = 2.10e6 is too small,
# 2^22 = 4.19e6 enough -> k = 22 (the loop below checks the exact erf)
FEWEST = next(k for k in range(64) if _flushed(2.0**k) < 1)
assert FEWEST == 22 and _flushed(2.0**21) > 1

# precision-4: E4M3's max is 448 (OCP FP8 spec, Table 1). Delayed scaling with a
# margin of 1: scale = 448 / 6 / 2^1 = 37.33, log2 = log2(112 / 3) = 5.2224. The
# largest value the cast holds is 448 / scale = 12 = 4 sigma of N(0, 3^2):
# P(|Z| > 4) = erfc(4 / sqrt 2) = 6.334e-5 (a standard normal table: 6.334e-5)
SCALE_LOG2 = math.log2(448 / 6 / 2)
SATURATED = math.erfc(4 / math.sqrt(2))

# precision-5: bf16 keeps 7 mantissa bits. 6 = 1.1000000b x 2^2: gap 2^(2-7) = 2^-5,
# half a gap 2^-6; 6's last mantissa bit is 0, so the tie 6 + 2^-6 goes back to 6:
# the largest update it absorbs is 2^-6. A learning rate of 0.0003 = 1.2288 x 2^-12
# (stored in bf16 as 1.0011101b x 2^-12, still in [2^-12, 2^-11)); every weight of
# binade E ignores it when it is below half the gap 2^(E-8): E - 8 >= -11 -> E = -3
# (at E = -4 the half gap 2^-12 is below the update, which moves the weight)
# precision-7, from the artifact itself (the generator's magnitudes) with torch's
# own fp16 cast, not the package's formulas: a value becomes zero where
# (|g| S).half() == 0 and overflows where it becomes inf. The scale to use is the
# largest 2^k at which the largest |g| still casts to a finite value.


def _precision_7_by_casts(seed):
    import torch

    from mlbook.precision import cases

    case = cases.loss_scale_case(seed)
    g = torch.tensor(case.magnitudes, dtype=torch.float64)

    def cast(k):  # scaled in fp32, as the gradients are, then stored in fp16
        return (g.float() * 2.0**k).half().float()

    zeros = int((cast(case.scale_log2) == 0).sum())
    overflow = bool(torch.isinf(cast(case.scale_log2)).any())
    safe = max(k for k in range(-10, 80) if bool(torch.isfinite(cast(k)).all()))
    cause = (
        "overflow"
        if overflow
        else "underflow"
        if zeros >= 0.01 * g.numel()
        else "healthy"
    )
    return {"cause": [cause], "scale_log2": safe, "flushed_now": zeros}


# precision-8, by hand from the run's median weight: bf16 keeps 8 significant bits,
# so a weight in [2^E, 2^(E+1)) has neighbours 2^(E-7) apart and absorbs updates up
# to half of that, 2^(E-8). Seed 1's median weight is 0.7285 (in [2^-1, 2^0)):
# E = -1, it absorbs 2^-9; its learning rate is 1e-4, so one bf16 step of 2^-8
# takes 2^-8 / 1e-4 = 39.0625 updates.
def _precision_8_by_hand(seed):
    from mlbook.precision import cases

    run = cases.stalled_run(seed)
    E = math.floor(math.log2(run.weight_median))
    return {
        "cause": ["no_master"],
        "absorbed_log2": E - 8,
        "updates_per_step": 2.0 ** (E - 7) / run.lr,
    }


INDEPENDENT = {
    "precision-1": {"lowest_log2": 6, "highest_log2": 16, "width": 11},
    "precision-7": _precision_7_by_casts(3),
    "precision-8": _precision_8_by_hand(1),
    "precision-3": {
        "flushed": _flushed(1.0),
        "flushed_scaled": _flushed(1024.0),
        "fewest_log2": FEWEST,
    },
    "precision-4": {"scale_log2": SCALE_LOG2, "saturated": SATURATED},
    "precision-5": {"absorbed_log2": -6, "stall_log2": -3},
}
MEASURED = {"precision-1": made_up_gradients}


def test_the_hand_values_are_the_ones_the_comments_give():
    assert _flushed(1.0) == pytest.approx(3.931e6, rel=1e-3)
    assert _flushed(1024.0) == pytest.approx(3896, rel=1e-3)
    assert SCALE_LOG2 == pytest.approx(5.2224, abs=1e-4)
    assert SATURATED == pytest.approx(6.334e-5, rel=1e-3)


def test_keys_match_the_hand_computation():
    assert_matches(INDEPENDENT)


def test_the_named_mistakes_are_the_hand_computed_ones():
    measured = measured_for("precision-1")
    cases = {
        "no logit gradient flushed at all": dict(lowest_log2=12),
        "subnormals counted as lost": dict(lowest_log2=16),
        "the overflow of the logit gradients alone": dict(highest_log2=37),
        "the gaps between the ends, not the powers of two": dict(width=10),
    }
    for mistake, wrong in cases.items():
        answers = {**INDEPENDENT["precision-1"], **wrong}
        result = check("precision-1", **measured, **answers)
        (name,) = wrong
        assert result[name].mistake == mistake


def test_torch_tensors_are_measured_inputs_too():
    import torch

    m = made_up_gradients()
    tensors = {k: torch.tensor(v, dtype=torch.float32) for k, v in m.items()}
    assert check("precision-1", **tensors, **INDEPENDENT["precision-1"]).correct


def test_the_hysteresis_example_by_hand():
    """precision-6's example, step by step (Megatron-LM's DynamicGradScaler
    rules, megatron/core/optimizer/grad_scaler.py): growth interval 2,
    hysteresis 2, from 65,536.
      1 ok    good 1                          65,536
      2 inf   good 0, 1 overflow left         65,536 (skipped, no back-off)
      3 inf   0 left: back off                32,768
      4 ok    good 1                          32,768
      5 ok    good 2: grow, refill to 2       65,536
      6 inf   1 left                          65,536"""
    from mlbook.precision import exercises as ex

    steps = [False, True, True, False, False, True]
    want = [65536.0, 65536.0, 32768.0, 32768.0, 65536.0, 65536.0]
    assert list(ex.EXAMPLE_STEPS) == steps and list(ex.EXAMPLE_SCALES) == want
    assert ex.formulas.scales_with_hysteresis(steps, 2, 2) == want
    assert check("precision-6", lambda f, g, h: want).correct is False


def test_precision_8s_run_is_the_one_the_comment_works_out():
    from mlbook.precision import cases

    run = cases.stalled_run(1)
    assert (run.weight_median, run.lr) == (0.728515625, 1e-4)
    assert INDEPENDENT["precision-8"]["absorbed_log2"] == -9
    assert INDEPENDENT["precision-8"]["updates_per_step"] == 39.0625


def test_precision_8s_log_shows_a_stall_by_torch_bf16():
    """Every logged step changed no weight, and torch's own bf16 addition agrees
    that an update of the run's size rounds away at the median weight."""
    import torch

    from mlbook.precision import cases

    run = cases.stalled_run(1)
    assert all(row.changed == 0 and row.grad_norm > 0 for row in run.rows)
    assert len({row.loss for row in run.rows}) == 1
    w = torch.tensor(run.weight_median, dtype=torch.bfloat16)
    assert w + torch.tensor(run.lr, dtype=torch.bfloat16) == w


def test_precision_7s_named_mistakes_by_casts():
    """The mistakes of precision-7 counted by hand from the bins: below 2^-14
    (subnormals counted as lost) and below 2^-24 (the smallest subnormal as the
    threshold), and the change of scale."""
    from mlbook.precision import cases

    case = cases.loss_scale_case(3)
    k = case.scale_log2
    below = {t: sum(m * 2.0**k < 2.0**t for m in case.magnitudes) for t in (-14, -24)}
    key = INDEPENDENT["precision-7"]
    wrong = {
        "subnormals counted as lost": dict(flushed_now=below[-14]),
        "the smallest subnormal as the threshold": dict(flushed_now=below[-24]),
        "the change of scale, not the scale": dict(scale_log2=key["scale_log2"] - k),
        "GradScaler's initial scale": dict(scale_log2=16),
    }
    for mistake, answer in wrong.items():
        result = check("precision-7", **{**key, **answer})
        (name,) = answer
        assert result[name].mistake == mistake
