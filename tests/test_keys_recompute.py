"""The recompute chapter's exercise keys, worked out by hand."""

from helpers.exercise_keys import assert_matches

# Selective's extra = (1/3) 4sh / (24h^2 + 4sh) for a GELU MLP with d_ff = 4h
# (8h^2 of projections, 16h^2 of MLP, 4sh of attention core per token).
# Setting it to t = 0.1: s = 72 t h / (4 - 12 t) = 72 * 0.1 * 4096 / 2.8
# = 10,532.57, so the first whole s above 10 % is 10,533.
INDEPENDENT = {"recompute-1": {"seq_len": 10_533}}


def test_keys_match_the_hand_computation():
    assert 72 * 0.1 * 4096 / 2.8 == __import__("pytest").approx(10_532.571, abs=1e-3)
    assert_matches(INDEPENDENT)
