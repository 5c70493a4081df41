"""The accumulation chapter's claims, read from the values it glued into its prose
in the test build (test sizes, notebooks/accumulation.md with SMALL=True). Each
number is checked against the brief's bars (section 2), a hand computation
written out here, a physical bound, or the page's own asserts; each tolerance
says where it comes from."""

import pytest

from conftest import page_values
from helpers.live import live_payloads

pytestmark = pytest.mark.book

# The test sizes of the page's parameters cell (SMALL=True), which the hand
# computations below use.
B_EXACT, KS_EXACT = 16, (1, 2, 4, 8)
TOK_SEQS, TOK_LEN, TOK_K = 8, 16, 4
SWEEP_B, SWEEP_KS = 8, (1, 2, 4, 8)
DDP_K, DDP_HIDDEN = 4, 64
# The brief's bars (section 2): LayerNorm's accumulated gradient within 1e-6 of the
# full batch (fp32 rounding of O(1) sums), BatchNorm's more than 1e-4 away.
EXACT_BAR, BROKEN_BAR = 1e-6, 1e-4

GLUED = {
    "device_name",
    "acc_B_exact",
    "acc_k_max_exact",
    "acc_ln_worst",
    "acc_bn_best",
    "acc_clip_k",
    "acc_clip_max_norm",
    "acc_clip_right_diff",
    "acc_clip_wrong_diff",
    "acc_clip_wrong_angle",
    "acc_tok_seqs",
    "acc_tok_len",
    "acc_tok_k",
    "acc_tok_naive_diff",
    "acc_tok_naive_cos",
    "acc_tok_fixed_diff",
    "acc_tok_weight_ratio",
    "acc_sweep_B",
    "acc_sweep_kmax",
    "acc_mem_k1",
    "acc_mem_kmax",
    "acc_mem_ratio",
    "acc_step_k1_ms",
    "acc_step_kmax_ms",
    "acc_time_ratio",
    "acc_overhead_ms",
    "acc_example_ms",
    "acc_overhead_share",
    "acc_ddp_k",
    "acc_ddp_sync_count",
    "acc_ddp_skip_count",
    "acc_ddp_buckets",
    "acc_ddp_grad_kib",
    "acc_ddp_sync_ms",
    "acc_ddp_skip_ms",
    "acc_ddp_sync_step_ms",
    "acc_ddp_skip_step_ms",
    "acc_ddp_grad_diff",
    "acc_fp16_tiny",
    "acc_fp16_flush",
    "acc_fp16_flush_log2",
    "acc_ex_naive_sum",
    "acc_ex_mean",
    "acc_7b_grad_gb",
    "acc_7b_ring_s",
    "acc_7b_k_s",
    *(
        f"acc_ex_{what}_k{k}_S{S}"
        for what in ("zero", "rel")
        for k in (1, 8)
        for S in (1, 1024)
    ),
}


@pytest.fixture(scope="module")
def v(book):
    assert book["chapters"]["accumulation"]["error"] is None
    return page_values("accumulation")


def test_every_glued_value_is_named_here_and_is_a_number_or_a_label(v):
    assert set(v) == GLUED  # a new glue needs a check in this file
    assert v["device_name"].startswith(("CPU:", "GPU:")) and len(v["device_name"]) < 80
    assert all(
        isinstance(x, (int, float)) and not isinstance(x, bool)
        for k, x in v.items()
        if k != "device_name"
    )


def test_the_identity_holds_for_layernorm_and_breaks_for_batchnorm(v):
    assert (v["acc_B_exact"], v["acc_k_max_exact"]) == (B_EXACT, max(KS_EXACT))
    assert 0 <= v["acc_ln_worst"] < EXACT_BAR
    assert v["acc_bn_best"] > BROKEN_BAR


def test_clipping_once_matches_the_full_batch_and_clipping_inside_the_loop_does_not(v):
    assert v["acc_clip_k"] == KS_EXACT[3]
    assert v["acc_clip_max_norm"] > 0
    assert v["acc_clip_right_diff"] < EXACT_BAR < BROKEN_BAR < v["acc_clip_wrong_diff"]
    # "points ... degrees away": a different direction, which a cosine of 1 would deny
    assert 0 < v["acc_clip_wrong_angle"] < 90


def test_token_normalisation(v):
    assert (v["acc_tok_seqs"], v["acc_tok_len"], v["acc_tok_k"]) == (
        TOK_SEQS,
        TOK_LEN,
        TOK_K,
    )
    assert v["acc_tok_fixed_diff"] < EXACT_BAR < BROKEN_BAR < v["acc_tok_naive_diff"]
    assert -1 <= v["acc_tok_naive_cos"] < 1
    # The naive weight of a token is 1 / (k N_j), so the ratio is N_max / N_min. Each
    # micro-batch holds TOK_SEQS / TOK_K = 2 sequences of 1 to TOK_LEN tokens: between
    # 2 and 32 tokens, so the ratio lies in [1, 16]; with lengths sorted it exceeds 1
    # unless every sequence has the same length.
    assert 1 < v["acc_tok_weight_ratio"] <= TOK_LEN


def test_the_sweep_keeps_its_units_and_physical_bounds(v):
    assert (v["acc_sweep_B"], v["acc_sweep_kmax"]) == (SWEEP_B, max(SWEEP_KS))
    # Saved bytes are a fixed part plus a part linear in b (every activation of the GPT
    # is (b, s, ...)): going from b = B to b = B / kmax divides them by at most kmax.
    assert (
        1 < v["acc_mem_ratio"] <= v["acc_sweep_kmax"] * (1 + 1e-12)
    )  # 1e-12: the float division
    assert v["acc_mem_k1"] > v["acc_mem_kmax"] > 0
    assert (
        v["acc_step_k1_ms"] > 0
        and v["acc_step_kmax_ms"] > 0
        and v["acc_time_ratio"] > 0
    )
    assert (
        v["acc_overhead_ms"] >= 0 and v["acc_example_ms"] >= 0
    )  # the fit clips noise at 0
    assert 0 <= v["acc_overhead_share"] <= 1


def test_the_live_figure_carries_the_measured_sweep(v):
    # The page passes its sweep as fixed data; the default spec (the figure opened
    # from disk, and in the executed notebook) draws it in grey at the sweep's B, the
    # same numbers the prose quotes for k = 1 and the largest k.
    payload = live_payloads("accumulation")["mlbook.accumulation.live:cost_explorer"]
    measured = payload["fixed"]["measured"]
    assert measured["global_batch"] == v["acc_sweep_B"] == SWEEP_B
    assert measured["device"] == v["device_name"]
    rows = measured["rows"]
    assert [r["k"] for r in rows] == list(SWEEP_KS)
    first, last = rows[0], rows[-1]
    assert (first["act_mib"], last["act_mib"]) == (v["acc_mem_k1"], v["acc_mem_kmax"])
    assert first["step_ms"] == v["acc_step_k1_ms"]
    assert last["step_ms"] == v["acc_step_kmax_ms"]
    # a CUDA peak only where a GPU measured one
    assert all(("peak_mib" in r) == v["device_name"].startswith("GPU:") for r in rows)
    grey = [
        lay["data"]["values"]
        for lay in payload["spec"]["layer"]
        if lay["mark"].get("color") == "#666666"
    ]
    assert grey == [rows, rows]  # step time and memory, one layer each
    assert {c["name"]: c["value"] for c in payload["controls"]} == {
        "global_batch": SWEEP_B,
        "micro_batch": SWEEP_B // 4,
    }


def test_no_sync_cuts_the_allreduces_from_k_to_one_per_bucket(v):
    assert v["acc_ddp_k"] == DDP_K
    # Linear(32, 64) -> LayerNorm(64) -> Linear(64, 8), by hand:
    # 32*64 + 64 + 2*64 + 64*8 + 8 = 2,760 fp32 parameters = 11,040 bytes = 10.78 KiB
    assert v["acc_ddp_grad_kib"] == 2760 * 4 / 1024
    # DDP's default bucket_cap_mb is 25 (torch.nn.parallel.DistributedDataParallel
    # docs): 10.78 KiB fits in one bucket, so one all-reduce per synchronised backward.
    assert v["acc_ddp_buckets"] == v["acc_ddp_skip_count"] == 1
    assert v["acc_ddp_sync_count"] == DDP_K * v["acc_ddp_skip_count"]
    assert v["acc_ddp_sync_ms"] > 0 and v["acc_ddp_skip_ms"] > 0
    assert v["acc_ddp_sync_step_ms"] > 0 and v["acc_ddp_skip_step_ms"] > 0
    assert v["acc_ddp_grad_diff"] < EXACT_BAR


def test_fp16_loss_scaling_exercise(v):
    # fp16 without a scale zeroes some first-layer gradients; S = 1024 keeps all of them
    assert 0 < v["acc_ex_zero_k8_S1"] <= 1 and v["acc_ex_zero_k8_S1024"] == 0
    assert v["acc_ex_zero_k1_S1024"] == 0
    assert v["acc_ex_zero_k8_S1"] >= v["acc_ex_zero_k1_S1"]  # the page asserts this too
    # With the scale, what is left is fp16's rounding: eps = 2^-10 ~ 1e-3 per operation,
    # over a handful of fp16 operations; 1e-2 is ten of them.
    assert 0 < v["acc_ex_rel_k1_S1024"] < 1e-2 and 0 < v["acc_ex_rel_k8_S1024"] < 1e-2
    assert v["acc_ex_rel_k8_S1"] > v["acc_ex_rel_k8_S1024"]  # "the error falls to"


def test_fp16_underflow_threshold_is_half_the_smallest_subnormal(v):
    """IEEE 754 binary16's smallest subnormal is 2^-24. Round to
    nearest, ties to even: a value above 2^-25 is nearer 2^-24 than 0 and rounds up
    to it; exactly 2^-25 is a tie and goes to the even neighbour, 0. So a gradient
    becomes zero at or below 2^-25, not below 2^-24."""
    assert v["acc_fp16_tiny"] == 2.0**-24
    assert v["acc_fp16_flush"] == 2.0**-25 and v["acc_fp16_flush_log2"] == -25
    import numpy as np

    assert np.float16(2.0**-25) == 0 and np.float16(1.5 * 2.0**-25) == 2.0**-24


def test_the_small_token_example(v):
    # [[2, 1, 3], [0.5]]: the naive losses are mean / k = 2 / 2 and 0.5 / 2, which
    # add up to 1.25; the token mean is 6.5 / 4 = 1.625
    assert v["acc_ex_naive_sum"] == pytest.approx(1.25, abs=1e-12)
    assert v["acc_ex_mean"] == pytest.approx(1.625, abs=1e-12)


def test_the_cluster_row_beside_the_loopback_all_reduce(v):
    # Llama-2-7B: 6,738,415,616 parameters (Touvron et al. 2023's shapes), 2 bytes
    # each in bf16: 13.4768 GB. A ring over 64 GPUs at 50 GB/s (a H100's
    # InfiniBand line rate): 2 x 63/64 x 13.4768e9 / 50e9 = 0.530650 s, and k = 4
    # (the test size) of them without no_sync.
    assert v["acc_7b_grad_gb"] == pytest.approx(13.476831232, rel=1e-9)
    assert v["acc_7b_ring_s"] == pytest.approx(0.53065023, rel=1e-7)
    assert v["acc_7b_k_s"] == pytest.approx(DDP_K * 0.53065023, rel=1e-7)
