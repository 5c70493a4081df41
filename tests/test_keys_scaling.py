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


# scaling-2: Llama-3-8B (Grattafiori et al. 2024, Table 3: L=32, h=4096, 32 heads,
# 8 KV heads of 128, d_ff=14336, V=128256, untied), by hand:
#   per layer: Q, O 2 * 4096^2 = 33,554,432; K, V 2 * 4096 * 1024 = 8,388,608;
#   MLP 3 * 4096 * 14336 = 176,160,768; two norms 8,192 -> 218,112,000;
#   x 32 = 6,979,584,000; embedding + head 2 * 128,256 * 4096 = 1,050,673,152;
#   final norm 4,096 -> N = 8,030,261,248; bf16 gradients 2N bytes.
# A ring of 256 sends 2 * 255/256 of them per rank; an A100's HDR InfiniBand
# link is 200 Gb/s = 25 GB/s each way (NVIDIA DGX A100 datasheet).
N_8B = 8_030_261_248
SENT_8B = 2 * 255 / 256 * 2 * N_8B  # 31,995,572,160 bytes
# scaling-3: 2 (N - 1) alpha = 2 (N - 1) / N S / B gives S* = N alpha B =
# 16 * 8e-6 s * 25e9 B/s = 3.2e6 bytes; at S* the time is twice the latency
# term: 2 * 2 * 15 * 8e-6 s = 4.8e-4 s.


# scaling-7 and scaling-8 are read off their artifacts, the simulated
# all_reduce_perf tables the page prints, as a reader would (4 significant
# figures, the table's default). The keys are the generator's hidden alpha and
# B, so a hand reading differs from them by the sweep's 2 % noise: these match
# the keys to 5 % and check() accepts them.
#
# scaling-7, seed 11, 16 ranks: the 1 KiB row took 173.5 us, all latency, over
# 2 (N - 1) = 30 steps: alpha = 173.5e-6 / 30 = 5.783e-6 s. The 1 GiB row's
# busbw is 102.8 GB/s = B. S* = N alpha B = 16 * 5.783e-6 * 102.8e9 = 9.512e6
# bytes: a 1 MiB bucket (1,048,576 bytes) is far below it, latency-bound.
# 16e9 bytes in 1 MiB buckets: ceil(15,258.8) = 15,259 all-reduces; in 25 MiB
# buckets ceil(610.35) = 611. The bytes are the same, so the bandwidth terms
# cancel and 25 MiB buckets save 30 alpha per bucket:
# 30 * 5.783e-6 * (15,259 - 611) = 2.5413 s.
ALPHA_7 = 173.5e-6 / 30
SCALING_7 = {
    "alpha_s": ALPHA_7,
    "s_star_bytes": 16 * ALPHA_7 * 102.8e9,
    "bound": ["latency"],
    "saved_ms": 30 * ALPHA_7 * (15_259 - 611) * 1e3,
}
# scaling-8, seed 5, 16 ranks rated 50 GB/s: the busbw levels off at 20.82 GB/s
# for 1 GiB (latency 30 alpha, a few hundred us of a 97 ms all-reduce): a ring
# through a slow link, B = 20.82 / 50 = 0.4164 of the rated speed. 16 GB
# all-reduced: each rank sends 2 * 15/16 * 16e9 = 30e9 bytes, at 20.82 GB/s now
# and at 0.75 * 50 = 37.5 GB/s fixed: 30e9 * (1/20.82e9 - 1/37.5e9) = 0.6409 s.
SCALING_8 = {
    "cause": ["slow_link"],
    "bus_share": 20.82 / 50,
    "saved_ms": 30e9 * (1 / 20.82e9 - 1 / 37.5e9) * 1e3,
}
READ_OFF = {"scaling-7": SCALING_7, "scaling-8": SCALING_8}

EXACT = {
    "scaling-1": {"n_dp": 8, "m": 285, "m_interleaved": 80},
    "scaling-2": {"sent_gb": SENT_8B / 1e9, "allreduce_s": SENT_8B / 25e9},
    "scaling-3": {"s_star_bytes": 3.2e6, "t_star_s": 4.8e-4},
}
INDEPENDENT = EXACT | READ_OFF


def test_keys_match_the_hand_computation():
    assert zero1_bytes(4) > 20e9 >= zero1_bytes(8)
    assert_matches(EXACT)


def test_the_diagnoses_read_off_their_artifacts():
    """The numbers above are the ones the page's tables print."""
    from mlbook.scaling import artifacts

    seven = artifacts.allreduce_log(11, 16)
    assert f"{seven.rows[0].time_s * 1e6:.4g}" == "173.5"
    assert f"{seven.rows[-1].busbw_bytes_per_s / 1e9:.4g}" == "102.8"
    eight = artifacts.allreduce_log(5, 16, 50e9, "slow_link")
    assert f"{eight.rows[-1].busbw_bytes_per_s / 1e9:.4g}" == "20.82"
    assert_matches(READ_OFF, rel=0.05)


def test_zero2_code_fails_a_function_that_hard_codes_the_printed_case():
    """ZeRO-2 at ZeRO's Figure 1 (Psi = 7.5e9, N_d = 64, K = 12): 2 Psi + 14 Psi / 64
    = 16.640625e9 bytes. A function that returns it, or that types in Psi and K,
    passes the printed case and must still fail."""
    from mlbook.exercises import check

    assert check("scaling-4", lambda n, d, k: 2 * n + (2 + k) * n / d).correct
    for f in (
        lambda n, d, k: 16.640625e9,
        lambda n, d, k: 2 * 7.5e9 + 14 * 7.5e9 / d,
        lambda n, d, k: 16.640625e9 if d == 64 else 2 * n + 12 * n / d,
    ):
        assert not check("scaling-4", f).correct
