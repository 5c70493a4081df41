"""The MFU chapter's exercise keys, worked out by hand (the Contract: mfu-1's
``mfu`` is the MFU with the attention term; the 6N-only answer's name
contains ``6n``)."""

from helpers.exercise_keys import assert_matches
from mlbook.exercises import EXERCISES, check

# Llama-2-7B (test_mfu.py writes the counts out): N_matmul = 6,607,077,376,
# N = 6,738,415,616; 12Lhs at s = 4096 is 12 * 32 * 4096 * 4096 = 6,442,450,944.
# H100 SXM BF16 dense peak: 989 TFLOP/s (NVIDIA's datasheet).
#   with attention: 12,000 * (6 * 6,607,077,376 + 6,442,450,944) / 989e12 = 0.559170
#   6N only:        12,000 * 6 * 6,738,415,616 / 989e12 = 0.490562
# GPT-3 175B (Brown et al. 2020, Table 2.1: L = 96, h = 12288, d_ff = 4h, GELU,
# V = 50257, head tied to the embedding):
#   a layer: 4 * 12288^2 + 2 * 12288 * 49152 = 603,979,776 + 1,207,959,552
#          = 1,811,939,328; 96 layers 173,946,175,488; head 50257 * 12288 =
#   617,558,016; N_matmul = 174,563,733,504.
#   12Lhs at s = 2048: 12 * 96 * 12288 * 2048 = 28,991,029,248
#   FLOPs a token: 6 * 174,563,733,504 + 28,991,029,248 = 1,076,373,430,272
# A100 SXM BF16 dense peak: 312 TFLOP/s (NVIDIA's datasheet); 1,024 GPUs.
#   MFU = 100,000 * 1,076,373,430,272 / (1024 * 312e12) = 0.33691
#   at 100 % MFU: 1024 * 312e12 / 1,076,373,430,272 = 296,819 tokens/s
GPT3_FLOPS_A_TOKEN = 6 * 174_563_733_504 + 12 * 96 * 12_288 * 2_048
# GPT-3 on 300B tokens: C = 6ND = 6 * 175e9 * 300e9 = 3.15e23 FLOPs (Brown et al.
# 2020, Table D.1, print 3.14e23 for their 174.6B parameters). V100 SXM2 fp16
# tensor-core peak 125 TFLOP/s (NVIDIA's datasheet), 10,000 of them at 30 % MFU:
#   3.15e23 / (10,000 * 125e12 * 0.30 * 86,400 s) = 9.72 days
GPT3_C = 6 * 175e9 * 300e9
# Llama-3-8B (Grattafiori et al. 2024, Table 3: L = 32, h = 4096, 32 heads, 8 K/V
# heads of 128, d_ff = 14336, SwiGLU; V = 128,256 in the released config):
#   a layer: Q, O 2 * 4096^2 = 33,554,432; K, V 2 * 4096 * 1024 = 8,388,608;
#   MLP 3 * 4096 * 14336 = 176,160,768; together 218,103,808; 32 layers
#   6,979,321,856; head 128256 * 4096 = 525,336,576; N_matmul = 7,504,658,432.
#   s* = 6 N_matmul / (12 L h) = 7,504,658,432 / (2 * 32 * 4096) = 28,628 exactly
#   at s = 8192: 12Lhs / (6N + 12Lhs) = s / (s* + s) = 8192 / 36,820 = 0.22249
LLAMA3_8B_N_MATMUL = 7_504_658_432
S_STAR = 6 * LLAMA3_8B_N_MATMUL / (12 * 32 * 4096)
INDEPENDENT = {
    "mfu-1": {
        "mfu": 12_000 * (6 * 6_607_077_376 + 6_442_450_944) / 989e12,
        "mfu_6n": 12_000 * 6 * 6_738_415_616 / 989e12,
    },
    "mfu-3": {
        "mfu": 100_000 * GPT3_FLOPS_A_TOKEN / (1024 * 312e12),
        "max_tokens_per_s": 1024 * 312e12 / GPT3_FLOPS_A_TOKEN,
    },
    "mfu-4": {
        "train_flops": GPT3_C,
        "days": GPT3_C / (10_000 * 125e12 * 0.30 * 86_400),
    },
    "mfu-5": {"s_star": S_STAR, "attention_share": 8192 / (S_STAR + 8192)},
}


def test_keys_match_the_hand_computation():
    assert_matches(INDEPENDENT)


def test_mfu_1_names_its_answers_as_the_contract_says():
    answers = EXERCISES["mfu-1"].answers
    assert answers == {"mfu": "fraction", "mfu_6n": "fraction"}
    assert [n for n in answers if "6n" in n] == ["mfu_6n"]


def test_the_attention_term_is_about_a_seventh():
    # BRIEF: at s = 4096 the attention term adds roughly a seventh on top of 6N
    key = EXERCISES["mfu-1"].key_values()
    assert 1 / 8 < key["mfu"] / key["mfu_6n"] - 1 < 1 / 6


def test_the_hand_counts_are_the_ones_written_out():
    assert GPT3_FLOPS_A_TOKEN == 1_076_373_430_272
    assert S_STAR == 28_628
    assert 0.336 < INDEPENDENT["mfu-3"]["mfu"] < 0.337
    assert 9.72 < INDEPENDENT["mfu-4"]["days"] < 9.73
    # GPT-3's paper prints 3.14e23 for its 174.6B parameters
    assert abs(GPT3_C / 3.14e23 - 1) < 0.005


# mfu-6's reference against N_matmul counted by hand (test_mfu.py writes out
# Llama-2-7B's; the others above and here):
#   Llama-3-70B (L = 80, h = 8192, 8 K/V heads of 128, d_ff = 28672, V = 128256):
#   2 * 8192^2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 = 855,638,016 a layer,
#   80 layers 68,451,041,280, head 1,050,673,152: 69,501,714,432.
#   A tiny GELU model (L = 2, h = 128, 2 heads, 1 K/V head of 64, d_ff = 512,
#   V = 512): 2 * 128^2 + 2 * 128 * 64 + 2 * 128 * 512 = 32,768 + 16,384 +
#   131,072 = 180,224 a layer, 2 layers 360,448, head 65,536: 425,984.
HAND_COUNTS = {
    (32, 4096, 32, 32, 11008, 32000, "swiglu"): 6_607_077_376,
    (32, 4096, 32, 8, 14336, 128256, "swiglu"): LLAMA3_8B_N_MATMUL,
    (96, 12288, 96, 96, 49152, 50257, "gelu"): 174_563_733_504,
    (80, 8192, 64, 8, 28672, 128256, "swiglu"): 69_501_714_432,
    (2, 128, 2, 1, 512, 512, "gelu"): 425_984,
}


def test_mfu_6s_reference_counts_as_by_hand():
    reference = EXERCISES["mfu-6"].code.reference
    for shape, n in HAND_COUNTS.items():
        assert reference(*shape) == n, shape


def test_mfu_6_fails_functions_that_hard_code_the_printed_counts():
    printed = {k: v for k, v in list(HAND_COUNTS.items())[:2]}

    def lookup(*shape):  # the two printed counts, and 12 L h^2 + V h otherwise
        L, h, *_, vocab, _mlp = shape
        return printed.get(shape, 12 * L * h * h + vocab * h)

    def all_cases(*shape):  # every known case, and nothing more
        return HAND_COUNTS.get(shape, 0)

    for f in (lookup, all_cases):
        assert not check("mfu-6", f).correct
