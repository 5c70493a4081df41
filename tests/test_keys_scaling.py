"""The scaling chapter's exercise keys, worked out by hand."""

from helpers.exercise_keys import assert_matches

# Llama-3-405B has 405.85 B parameters (flops.n_params; Meta quotes 405B), so
# with t = 8, p = 16 a GPU holds 405.85e9 / 128 = 3.1707e9 of them. A quarter
# of an 80 GB H100 is 20e9 bytes. ZeRO-1: (2 + 2) Psi + 12 Psi / N_d bytes
#   N_d = 4: 12.68e9 + 9.51e9 = 22.19e9 > 20e9
#   N_d = 8: 12.68e9 + 4.76e9 = 17.44e9 <= 20e9  -> 8
# Bubble (p - 1) / (v m + p - 1) <= 0.05 with p = 16:
#   v = 1: m + 15 >= 300 -> m = 285 (exactly 5 %)
#   v = 4: 4m + 15 >= 300 -> m >= 71.25 -> 72, run as a multiple of 16: 80
PSI = 3_170_729_600  # 405,853,388,800 / 128, the per-GPU share


def zero1_bytes(n_dp):
    return 4 * PSI + 12 * PSI / n_dp


INDEPENDENT = {"scaling-1": {"n_dp": 8, "m": 285, "m_interleaved": 80}}


def test_keys_match_the_hand_computation():
    assert zero1_bytes(4) > 20e9 >= zero1_bytes(8)
    assert_matches(INDEPENDENT)
