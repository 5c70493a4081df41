"""The input-pipeline chapter's exercise keys, worked out by hand."""

import math

from helpers.exercise_keys import assert_matches

# input_pipeline-1: 1.2 s of loading per batch, 350 ms of compute a step:
# 1.2 / 0.35 = 3.43, so 4 workers keep the GPU busy. With 3, a batch arrives
# every 1.2 / 3 = 0.4 s and the GPU idles 0.05 of every 0.4 s step: 12.5 %.
#
# input_pipeline-2: Llama-2-7B (L=32, h=4096, MHA, SwiGLU d_ff=11008, V=32000),
# s = 4096, A100 SXM at 312 TFLOP/s bf16 dense (NVIDIA datasheet), MFU 0.5:
#   N_matmul = 32 (4 4096^2 + 3 4096 11008) + 32000 4096 = 6,607,077,376
#   6 N + 12 L h s = 39,642,464,256 + 6,442,450,944 = 46,084,915,200 a token
#   (4.60849e10, what flops_per_token(LLAMA2_7B, 4096) returns)
#   per GPU 0.5 x 312e12 / 46,084,915,200 = 3,385.06 tokens/s; 8 GPUs 27,080.4.
#   Threads at 20,000 tokens/s: ceil(1.354) = 2. Tokenised in the loop, a token
#   costs 1/20,000 s to make and 1/3,385.06 s to train on: idle
#   (1/20000) / (1/20000 + 1/3385.06) = 3385.06 / 23385.06 = 14.48 %.
PER_GPU = 0.5 * 312e12 / 46_084_915_200
#
# input_pipeline-3: 50 batches, 0.6 s to load one, 0.25 s to compute one.
#   2 workers: the first batch after 0.6 s, then 49 steps of max(0.25, 0.3) =
#   0.3 s, then the last compute: 0.6 + 14.7 + 0.25 = 15.55 s; minus 50 x 0.25
#   = 12.5 s of compute: 3.05 s. From ceil(0.6 / 0.25) = 3 workers a step is
#   0.25 s: 0.6 + 49 x 0.25 + 0.25 - 12.5 = 0.6 s, the warm-up's one load.
INDEPENDENT = {
    "input_pipeline-1": {"workers": 4, "idle": 0.05 / 0.4},
    "input_pipeline-2": {
        "node_tokens_per_s": 8 * PER_GPU,
        "threads": math.ceil(8 * PER_GPU / 20_000),
        "idle": PER_GPU / (20_000 + PER_GPU),
    },
    "input_pipeline-3": {"overhead": 3.05, "floor": 0.6},
}


def test_keys_match_the_hand_computation():
    assert 27_080 < 8 * PER_GPU < 27_081 and math.ceil(8 * PER_GPU / 20_000) == 2
    assert_matches(INDEPENDENT)


def test_input_pipeline_4_by_hand():
    """Documents of 100, 300 and 50 tokens in rows of 128: 1 + 3 + 1 = 5 rows,
    640 slots for 450 tokens, 190 of padding: 29.6875 %."""
    from mlbook.exercises import check
    from mlbook.input_pipeline.exercises import EXAMPLE_WASTE

    assert EXAMPLE_WASTE == 190 / 640

    def mine(doc_lens, seq_len):
        rows = sum(-(-n // seq_len) for n in doc_lens)
        return 1 - sum(doc_lens) / (rows * seq_len)

    assert check("input_pipeline-4", mine).correct
