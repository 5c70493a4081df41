"""The MFU chapter's exercise keys, worked out by hand (the Contract: mfu-1's
``mfu`` is the MFU with the attention term; the 6N-only answer's name
contains ``6n``)."""

from helpers.exercise_keys import assert_matches
from mlbook.exercises import EXERCISES

# Llama-2-7B (test_mfu.py writes the counts out): N_matmul = 6,607,077,376,
# N = 6,738,415,616; 12Lhs at s = 4096 is 12 * 32 * 4096 * 4096 = 6,442,450,944.
# H100 SXM BF16 dense peak: 989 TFLOP/s (NVIDIA's datasheet).
#   with attention: 12,000 * (6 * 6,607,077,376 + 6,442,450,944) / 989e12 = 0.559170
#   6N only:        12,000 * 6 * 6,738,415,616 / 989e12 = 0.490562
INDEPENDENT = {
    "mfu-1": {
        "mfu": 12_000 * (6 * 6_607_077_376 + 6_442_450_944) / 989e12,
        "mfu_6n": 12_000 * 6 * 6_738_415_616 / 989e12,
    },
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
