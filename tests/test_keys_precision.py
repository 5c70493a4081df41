"""The precision chapter's exercise key, on made-up gradients whose window
is worked out by hand (precision-1 is checked against the reader's own)."""

import numpy as np

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


MEASURED = {"precision-1": made_up_gradients}
INDEPENDENT = {"precision-1": {"lowest_log2": 6, "highest_log2": 16, "width": 11}}


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
