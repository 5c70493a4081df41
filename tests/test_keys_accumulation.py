"""The accumulation chapter's exercise keys, worked out by hand, and the
change-the-code exercise against functions that are wrong in the ways a reader
might be (accumulation-1 is a measure exercise and accumulation-2 a prediction:
neither has a key)."""

import math

import pytest

from helpers.exercise_keys import assert_matches
from mlbook.exercises import EXERCISES, check

# accumulation-4. fp16 rounds a magnitude at or below 2^-25 (half its smallest
# subnormal, 2^-24; ties go to the even neighbour, 0) to zero. A micro-batch whose
# loss is scaled by S / k produces S g / k, which survives when S > k 2^-25 / g:
#   k = 16, g = 2e-7: 16 * 2^-25 / 2e-7 = 16 * 2.98023e-8 / 2e-7 = 2.384
#   -> the smallest power of two above it is 4 = 2^2, so e = 2.
# With S = 1 it survives while k < g / 2^-25 = 2e-7 * 33,554,432 = 6.711 -> k = 6.
# accumulation-5. Llama-2-7B (vocab 32,000, h = 4096, L = 32, SwiGLU 11,008, untied
# embeddings): 2 * 32,000 * 4096 + 32 * (4 * 4096^2 + 3 * 4096 * 11,008 + 2 * 4096)
# + 4096 = 6,738,415,616 parameters; bf16 gradients, 2 bytes each: 13,476,831,232
# bytes. H100 SXM's InfiniBand: NDR 400 Gb/s a GPU = 50e9 bytes/s each way (DGX
# H100 datasheet). A ring all-reduce over N = 64 sends 2 (N - 1) / N S per rank:
#   one = 2 * 63 / 64 * 13,476,831,232 / 50e9 = 0.530650 s; k = 16 of them 8.4904 s.
# accumulation-6. b fits while 4 + 1.75 b <= 32 GiB, b <= 16; the divisors of
# 360 = 2^3 3^2 5 up to 16 are 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15 -> b = 15, k = 24.
#   step = 40 + 24 * 15 + 360 * 5 = 2,200 ms; one batch: 40 + 15 + 1,800 = 1,855 ms
#   extra = 2,200 / 1,855 - 1 = 345 / 1,855 = 18.598 %
LLAMA2_7B_PARAMS = 2 * 32_000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11_008 + 8192)
LLAMA2_7B_PARAMS += 4096
ONE_ALLREDUCE_S = 2 * 63 / 64 * 2 * LLAMA2_7B_PARAMS / 50e9
INDEPENDENT = {
    "accumulation-4": {"scale_log2": 2, "k_unscaled": 6},
    "accumulation-5": {"sync_s": 16 * ONE_ALLREDUCE_S, "no_sync_s": ONE_ALLREDUCE_S},
    "accumulation-6": {"k": 24, "step_s": 2.2, "extra_pct": 345 / 1855 * 100},
}


def test_keys_match_the_hand_computation():
    assert LLAMA2_7B_PARAMS == 6_738_415_616  # the count test_keys_mfu quotes
    assert 16 * 2.0**-25 / 2e-7 == pytest.approx(2.384, abs=1e-3)
    assert 2e-7 * 2**25 == pytest.approx(6.711, abs=1e-3)
    assert_matches(INDEPENDENT)


def test_the_named_mistakes_of_the_loss_scale_are_the_hand_computed_ones():
    """With 2^-24 as the threshold: 16 * 2^-24 / 2e-7 = 4.77 -> S = 8 (e = 3), and
    k < 2e-7 * 2^24 = 3.36 -> 3. Without the 1/k: 2^-25 / 2e-7 = 0.149 -> S = 1
    (e = 0). With fp16's smallest normal 2^-14: 16 * 2^-14 / 2e-7 = 4,883 -> 8,192
    (e = 13). Rounding 6.71 up: 7."""
    right = INDEPENDENT["accumulation-4"]
    cases = {
        ("scale_log2", 3): "the smallest subnormal as the threshold",
        ("scale_log2", 0): "forgetting the 1/k",
        ("scale_log2", 13): "the smallest normal as the threshold",
        ("k_unscaled", 3): "the smallest subnormal as the threshold",
        ("k_unscaled", 7): "grad / 2^-25 rounded up",
    }
    for (name, value), mistake in cases.items():
        result = check("accumulation-4", **{**right, name: value})
        assert result[name].mistake == mistake


def test_the_allreduce_mistakes_are_the_factors_worked_out_here():
    right = INDEPENDENT["accumulation-5"]
    cases = {
        ("sync_s", ONE_ALLREDUCE_S): "one all-reduce per step",
        ("no_sync_s", 16 * ONE_ALLREDUCE_S): "k all-reduces per step",
        ("sync_s", 2 * right["sync_s"]): "fp32 gradients",  # 4 bytes a parameter
        ("no_sync_s", right["no_sync_s"] / 9): "NVLink's rate",  # 450 / 50 GB/s
        ("no_sync_s", right["no_sync_s"] / 8): "gigabits for gigabytes",
        ("sync_s", 16 * 13_476_831_232 / 50e9): "the buffer sent once",  # S / B
    }
    for (name, value), mistake in cases.items():
        result = check("accumulation-5", **{**right, name: value})
        assert result[name].mistake == mistake


def test_the_micro_batch_mistakes_are_the_hand_computed_ones():
    """Without M_0: b <= 32 / 1.75 = 18.3 -> 18 divides 360 -> k = 20, a step of
    40 + 300 + 1,800 = 2,140 ms. Powers of two only: b = 8, k = 45. The largest b
    that fits, 16, does not divide 360: 360 / 16 = 22.5 rounded up is 23."""
    right = INDEPENDENT["accumulation-6"]
    cases = {
        ("k", 20): "the fixed activations left out",
        ("k", 45): "powers of two only",
        ("k", 23): "k rounded up from a b that does not divide B",
        ("step_s", 2.14): "the fixed activations left out",
        ("extra_pct", (2140 / 1855 - 1) * 100): "the fixed activations left out",
        ("extra_pct", 360 / 2200 * 100): "the share of the step that is fixed cost",
        ("extra_pct", 360 / 1855 * 100): "k fixed costs over the step at k = 1",
    }
    for (name, value), mistake in cases.items():
        result = check("accumulation-6", **{**right, name: value})
        assert result[name].mistake == mistake


# --- accumulation-3: micro_batch_losses ---------------------------------------------


def by_hand(token_losses):
    n = sum(len(t) for t in token_losses)
    return [sum(t) / n for t in token_losses]


def test_the_reference_is_the_hand_rule_on_the_statements_example():
    reference = EXERCISES["accumulation-3"].code.reference
    # [2 + 1 + 3, 0.5] / 4 tokens = [1.5, 0.125]: the statement's numbers
    assert reference([[2.0, 1.0, 3.0], [0.5]]) == [1.5, 0.125]
    assert reference([[4.0, 2.0], [], [1.0, 1.0, 1.0]]) == [1.2, 0.0, 0.6]
    assert check("accumulation-3", by_hand).correct


@pytest.mark.parametrize(
    "wrong",
    [
        lambda t: [1.5, 0.125],  # the statement's answer, typed in
        lambda t: [sum(x) / 4 for x in t],  # the statement's N, typed in
        lambda t: [1.5, 0.125] if len(t) == 2 else by_hand(t),  # right elsewhere
        lambda t: [sum(x) / len(x) / len(t) for x in t],  # the naive mean / k
        lambda t: [sum(x) / max(len(x), 1) for x in t],  # forgetting the 1/k
        lambda t: [sum(x) / len(t) for x in t],  # dividing by k, not N
        lambda t: [sum(x) / (len(t) * max(map(len, t))) for x in t],  # k max N_j
    ],
)
def test_wrong_functions_fail_among_them_the_hard_coded_example(wrong):
    assert not check("accumulation-3", wrong).correct


def test_equal_micro_batches_cannot_tell_the_naive_mean_from_the_fix():
    """Why the known cases mix lengths: with every N_j equal, 1 / (k N_j) = 1 / N."""
    equal = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    naive = [sum(x) / len(x) / len(equal) for x in equal]
    assert all(math.isclose(a, b) for a, b in zip(naive, by_hand(equal), strict=True))


# --- the diagnoses: worked from the artifacts the page shows -----------------------


def test_accumulation_7_the_micro_batch_log_worked_by_hand():
    """Seed 11's log: four micro-batches of 239, 825, 1,196 and 1,648 real
    tokens. Each logged loss is its token sum over (k N_j), not over N."""
    from mlbook.accumulation import incidents

    log = incidents.micro_batch_log(11)
    tokens = [m.tokens for m in log.micro_batches]
    assert tokens == [239, 825, 1196, 1648]  # the artifact, on every machine
    n = sum(tokens)  # 3,908
    for m in log.micro_batches:  # which normalisation reproduces the log
        assert math.isclose(m.logged_loss, m.loss_sum / (4 * m.tokens), rel_tol=1e-12)
        assert not math.isclose(m.logged_loss, m.loss_sum / n, rel_tol=0.01)
    # micro-batch 1: 621.0 / 239 / 4 = 0.6496 logged, against 621.0 / 3,908 = 0.159
    assert log.micro_batches[0].loss_sum == pytest.approx(621.0, abs=0.05)
    by_hand = {
        "normalisation": ["mean_over_k"],
        "weight": 1 / (4 * 239),  # 0.00104603
        "right_weight": 1 / 3908,  # 0.000255885
    }
    assert_matches({"accumulation-7": by_hand})


def test_accumulation_8_the_k_sweep_worked_by_hand():
    """Seed 1's sweep at B = 256: activations fit 16 GiB from b = 32 down (15.64
    GiB; b = 64 needs 28.03), so k = 8; the step there against k = 64's."""
    from mlbook.accumulation import incidents

    sweep = incidents.k_sweep_log(1, 256).sweep
    step_ms = {r.k: r.step_s * 1e3 for r in sweep.rows}
    gib = {r.k: r.saved_bytes / 2**30 for r in sweep.rows}
    assert gib[8] == pytest.approx(15.64, abs=0.01) and gib[4] > 16 >= gib[8]
    assert step_ms[64] == pytest.approx(948.7, abs=0.05)
    assert step_ms[8] == pytest.approx(298.5, abs=0.05)
    # each micro-batch adds its fixed cost: (948.7 - 579.6) / 32 = 11.5 ms
    assert (step_ms[64] - step_ms[32]) / 32 == pytest.approx(11.5, abs=0.1)
    by_hand = {"cause": ["fixed_cost"], "k": 8, "saved_ms": step_ms[64] - step_ms[8]}
    assert by_hand["saved_ms"] == pytest.approx(650.2, abs=0.05)
    assert_matches({"accumulation-8": by_hand})
