"""The input-pipeline chapter's exercise keys, worked out by hand."""

from helpers.exercise_keys import assert_matches

# 1.2 s of loading per batch, 350 ms of compute a step: 1.2 / 0.35 = 3.43, so 4
# workers keep the GPU busy. With 3, a batch arrives every 1.2 / 3 = 0.4 s and
# the GPU idles 0.05 of every 0.4 s step: 12.5 %.
INDEPENDENT = {"input_pipeline-1": {"workers": 4, "idle": 0.05 / 0.4}}


def test_keys_match_the_hand_computation():
    assert_matches(INDEPENDENT)
