"""The plan page's exercise keys, worked out by hand (no mlbook calculator).

Sources of the constants: the Llama 3 shapes (Grattafiori et al. 2024,
Table 3; vocabulary 128,256 from the released config.json); H100/H200 SXM
dense BF16 989 TFLOP/s (NVIDIA datasheets); usable HBM as nvidia-smi reports
it, 81,559 MiB (H100) and 143,771 MiB (H200); 14 bytes a parameter in a
checkpoint (bf16 weights, fp32 master weights, Adam's two fp32 moments);
Llama 3's 419 unexpected interruptions in 54 days on 16,384 GPUs (Sec. 3.3.4).
"""

import math

import pytest

from helpers.exercise_keys import assert_matches
from mlbook.exercises import EXERCISES

GIB, DAY, PEAK = 2**30, 86_400, 989e12
H100_USABLE, H200_USABLE = 81_559 * 2**20, 143_771 * 2**20
LLAMA3_RATE = 419 / (54 * 24 * 16_384)  # failures per GPU-hour


def params(L, h, kv, d_ff, V=128_256):
    """(N, N_matmul): embedding and LM head V x h each; a layer's Q and O
    h x h, K and V h x kv (kv = 8 heads of 128), three SwiGLU matrices
    h x d_ff, two norm gains of h; a final norm of h. N_matmul leaves out the
    embedding and the norm gains."""
    n = 2 * V * h + L * (2 * h * h + 2 * h * kv + 3 * h * d_ff + 2 * h) + h
    return n, n - V * h - (2 * L + 1) * h


N70, NMM70 = params(80, 8192, 1024, 28_672)
N405, NMM405 = params(126, 16_384, 1024, 53_248)
assert N70 == 70_553_706_496 and N405 == 405_853_388_800  # the presets' counts


def wall(useful_s, interval_s, write_s, restart_s, mtbf_s):
    """First-order wall time: W (1 + C/I) / (1 - (R + (I + C)/2) / T)."""
    return (
        useful_s
        * (1 + write_s / interval_s)
        / (1 - (restart_s + (interval_s + write_s) / 2) / mtbf_s)
    )


def budget(n, n_mm, L, h, tokens, gpus, mfu, rate, storage, restart_s, s=8192):
    """Useful seconds, write time, job MTBF, Young's interval, wall seconds."""
    useful = tokens * (6 * n_mm + 12 * L * h * s) / (gpus * PEAK * mfu)
    c, t = 14 * n / storage, 3600 / (gpus * rate)
    i = math.sqrt(2 * c * t)
    return useful, c, t, i, wall(useful, i, c, restart_s, t)


# plan-1: Llama-3-70B, 15T tokens, 2,048 H100s at 40 %, tp 8 (dp 256), one
# failure per 20,000 GPU-hours, 100 GB/s, 10-minute restarts.
W1, C1, T1, I1, WALL1 = budget(
    N70, NMM70, 80, 8192, 15e12, 2048, 0.40, 1 / 20_000, 100e9, 600
)
# memory: bf16 weights and gradients split over tp 8; ZeRO-1 shards Adam's
# 12 bytes over dp = 256; selective recompute keeps 16 + 8 d_ff/h = 16 + 8 x 3.5
# = 44 sbh a layer for Llama's block, 80 layers, split over tp by sequence
# parallelism: 80 x 44 x 8192 x 8192 / 8 bytes = 27.5 GiB.
MEM1 = 2 * N70 / 8 + 2 * N70 / 8 + 12 * N70 / 8 / 256 + 80 * 44 * 8192 * 8192 / 8
assert MEM1 / GIB == pytest.approx(60.74, abs=0.01)

# plan-2: Llama-3-405B, 15.6T tokens, 8,192 H200s at 41 %, tp 8, pp 8 (dp 128),
# Llama 3's rate, the planner's 200 GB/s and 10 minutes. The first stage holds
# ceil(126/8) = 16 layers and keeps 8 micro-batches in flight: 128 layers of
# 16 + 8 x 3.25 = 42 sbh, over tp 8: 128 x 42 x 8192 x 16384 / 8 bytes = 84 GiB.
W2, C2, T2, I2, WALL2 = budget(
    N405, NMM405, 126, 16_384, 15.6e12, 8192, 0.41, LLAMA3_RATE, 200e9, 600
)
MEM2 = 4 * N405 / 64 + 12 * N405 / 64 / 128 + 128 * 42 * 8192 * 16_384 / 8
assert MEM2 / GIB == pytest.approx(108.18, abs=0.01) and MEM2 < H200_USABLE

# plan-3: T = 3 h, C = 30 s, I = 10 min, R = 10 min:
# g = (1 - (600 + 315) / 10,800) / (1 + 30/600) = 0.915278 / 1.05 = 0.871693;
# g = 0.9: R = T (1 - 0.9 x 1.05) - 315 = 10,800 x 0.055 - 315 = 279 s = 4.65 min.
G3 = (1 - (600 + 315) / 10_800) / (1 + 30 / 600)
R3 = (10_800 * (1 - 0.9 * 1.05) - 315) / 60

# plan-4: Llama-3-70B on 4,096 H100s, pp 1, ZeRO-1 (dp = 4096 / tp).
# State per GPU (weights + gradients, 4 bytes, over tp; Adam over tp x dp):
#   tp 2: 141.1e9 B = 131.4 GiB, past the 79.6 usable before any activation;
#   tp 4: 65.7 GiB + 0.19 GiB. Selective: + 80 x 44 sbh / 4 = 55 GiB: 120.9, no.
#   Full recompute keeps each layer's input, 2sbh (80 layers, 2.5 GiB at tp 4),
#   plus one layer's full set while it is recomputed, at most Korthikanti's GPT
#   count (34 sbh + 5 a s^2 b with dropout, more than Llama's block keeps):
#   (34 x 8192^2 + 5 x 64 x 8192^2) / 4 B = 5.53 GiB: 74 GiB in all, fits.
#   tp 8 selective: 32.9 + 0.1 + 27.5 = 60.5 GiB, fits (tp 4 did not).
# Days do not depend on tp: the selective run at 40 %, the full one at 30 % MFU.
STATE4 = 4 * N70 / 4 + 12 * N70 / 4 / 1024
assert 4 * N70 / 2 > H100_USABLE
assert STATE4 + 80 * 44 * 8192 * 8192 / 4 > H100_USABLE
assert STATE4 + (80 * 2 + 34 + 5 * 64) * 8192 * 8192 / 4 < H100_USABLE
assert 4 * N70 / 8 + 12 * N70 / 8 / 512 + 80 * 44 * 8192 * 8192 / 8 < H100_USABLE
*_, WALL4S = budget(N70, NMM70, 80, 8192, 15e12, 4096, 0.40, LLAMA3_RATE, 200e9, 600)
*_, WALL4F = budget(N70, NMM70, 80, 8192, 15e12, 4096, 0.30, LLAMA3_RATE, 200e9, 600)

INDEPENDENT = {
    "plan-1": {
        "expected_days": WALL1 / DAY,
        "memory_gib": MEM1 / GIB,
        "interval_min": I1 / 60,
        "goodput": W1 / WALL1,
    },
    "plan-2": {
        "memory_gib": MEM2 / GIB,
        "expected_days": WALL2 / DAY,
        "failures": WALL2 / T2,
    },
    "plan-3": {"goodput_now": G3, "restart_min": R3},
    "plan-4": {
        "tp_selective": 8,
        "tp_full": 4,
        "days_selective": WALL4S / DAY,
        "days_full": WALL4F / DAY,
    },
}


def test_keys_match_the_hand_computation():
    assert_matches(INDEPENDENT)


def test_the_hand_numbers_are_what_the_statements_say():
    # plan-1: T = 3600 x 20,000 / 2,048 s = 9.77 h; C = 14 x 70.55e9 / 100e9 = 9.88 s
    assert T1 / 3600 == pytest.approx(9.766, abs=1e-3)
    assert C1 == pytest.approx(9.878, abs=1e-3)
    assert G3 == pytest.approx(0.871693, abs=1e-6) and R3 == pytest.approx(4.65)
    # plan-4: full recompute at 3/4 the MFU takes 4/3 the days (the same losses aside)
    assert WALL4F / WALL4S == pytest.approx(4 / 3, rel=0.01)


def test_the_statements_give_the_counts_the_keys_take():
    """plan-1 and plan-2 say which N each formula takes and which block the
    activations count; the numbers they print are the hand counts above, to the
    figures they print (70.55 B, where a reader left to guess takes 70e9 and
    gets a Young interval of 13.835 min against the key's 13.890)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "book" / "plan.md").read_text()

    def statement(label):
        start = text.index(f":label: {label}\n")
        return " ".join(text[start : text.index("```", start)].split())

    for label, n, n_mm in (("plan-1", N70, NMM70), ("plan-2", N405, NMM405)):
        body = statement(label)
        assert f"$N$ = {n / 1e9:.2f} B" in body, label
        assert f"$N_\\text{{matmul}}$ = {n_mm / 1e9:.2f} B" in body, label
        assert "$(16 + 8d_{ff}/h)\\,sbh$" in body, label
    assert "$34\\,sbh$" in statement("plan-1")
    assert math.sqrt(70e9 / N70) * I1 / 60 == pytest.approx(13.835, abs=1e-3)


def test_the_34_sbh_mistake_is_the_gpt_blocks_count():
    """plan-1 and plan-2 with 34 sbh a layer (Korthikanti's GPT block) instead of
    Llama's 44 and 42: 54.49 and 92.18 GiB, refused with a hint, not taken as
    right (the keys are 60.74 and 108.18)."""
    from mlbook.exercises import spec

    gpt1 = MEM1 - 80 * (44 - 34) * 8192 * 8192 / 8
    gpt2 = MEM2 - 128 * (42 - 34) * 8192 * 16_384 / 8
    assert gpt1 / GIB == pytest.approx(54.49, abs=0.01)
    assert gpt2 / GIB == pytest.approx(92.18, abs=0.01)
    for ex_id, want in (("plan-1", gpt1), ("plan-2", gpt2)):
        (memory,) = [a for a in spec(ex_id)["answers"] if a["name"] == "memory_gib"]
        named = {m["name"]: m["value"] for m in memory["mistakes"]}
        assert named["34 sbh for a SwiGLU model"] == pytest.approx(want / GIB)


def test_there_are_at_least_three_planning_problems():
    plans = [r for r in EXERCISES.values() if r.chapter == "plan"]
    assert len(plans) >= 3 and all(r.checked for r in plans)


def _named(ex_id: str, answer: str) -> dict:
    from mlbook.exercises import spec

    (entry,) = [a for a in spec(ex_id)["answers"] if a["name"] == answer]
    return {m["name"]: m["value"] for m in entry["mistakes"]}


def test_the_no_sequence_parallelism_mistake():
    """Without sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) the
    norms' inputs (2 x 2 sbh) and the inputs of the QKV and first MLP linears
    (2 x 2 sbh) stay whole on every tensor-parallel rank: 8 of Llama's 44 sbh a
    layer under selective recompute, so a rank keeps (8 + 36/8) sbh = 12.5 sbh
    a layer instead of 44/8 = 5.5. plan-1: 80 layers; plan-2: 128 layers' worth
    of 8 + 34/8 = 12.25 against 42/8 = 5.25 sbh."""
    sbh70, sbh405 = 8192 * 8192, 8192 * 16_384
    no_sp1 = MEM1 + 80 * (12.5 - 5.5) * sbh70
    no_sp2 = MEM2 + 128 * (12.25 - 5.25) * sbh405
    assert no_sp1 / GIB == pytest.approx(95.74, abs=0.01)  # the errata's 95.7
    assert no_sp1 > H100_USABLE and no_sp2 > H200_USABLE  # neither would fit
    assert _named("plan-1", "memory_gib")["no sequence parallelism"] == pytest.approx(
        no_sp1 / GIB
    )
    assert _named("plan-2", "memory_gib")["no sequence parallelism"] == pytest.approx(
        no_sp2 / GIB
    )
    # plan-4 without it: selective recompute at tp 8 needs 32.9 + 0.1 + 80 x
    # 12.5 sbh = 62.5 GiB: 95.6 GiB, which fits no H100; so the statement says
    # "with sequence parallelism"
    assert 4 * N70 / 8 + 12 * N70 / 8 / 512 + 80 * 12.5 * sbh70 > H100_USABLE


def test_the_126_layer_mistake():
    """plan-2 counted for the model's 126 layers instead of the fullest stage's
    ceil(126/8) x 8 = 128: 106.9 GiB, refused with its hint."""
    act2 = 128 * 42 * 8192 * 16_384 / 8
    wrong = MEM2 - act2 * (1 - 126 / 128)
    assert wrong / GIB == pytest.approx(106.86, abs=0.01)
    named = _named("plan-2", "memory_gib")
    assert named["126 layers' worth of activations"] == pytest.approx(wrong / GIB)


def test_the_statements_say_with_sequence_parallelism():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "book" / "plan.md").read_text()
    for label in ("plan-1", "plan-2", "plan-4"):
        start = text.index(f":label: {label}\n")
        body = " ".join(text[start : text.index("```", start)].split())
        assert "with sequence parallelism" in body, label
    table = text[text.index("| line of the plan |") :].split("\n\n")[0]
    assert "with sequence parallelism" in table
