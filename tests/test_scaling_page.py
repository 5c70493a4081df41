"""The scaling chapter's claims, read from the values it glued into its prose
in the test build (test sizes). Each number is checked against its source, a
hand computation written out here, a physical bound, or the page's own
asserts; each tolerance says where it comes from."""

import math

import pytest

from conftest import page_values

pytestmark = pytest.mark.book

# Stored glue values are the page's floats; where a value is an exact product of
# integers by hand, 1e-9 relative allows for the float divisions that made it.
EXACT = 1e-9


@pytest.fixture(scope="module")
def v(book):
    return page_values("scaling")


def test_every_glued_value_is_a_plain_number_or_a_short_label(v):
    labels = {k: x for k, x in v.items() if isinstance(x, str)}
    assert set(labels) == {"device_name"}
    assert v["device_name"].startswith("CPU:") and v["device_name"].endswith(
        "gloo over loopback"
    )
    assert all(isinstance(x, (int, float)) for k, x in v.items() if k not in labels)


def test_ring_allreduce_of_llama3_70b_gradients(v):
    # Llama-3-70B (Grattafiori et al. 2024, Table 3: L=80, h=8192, 64 heads, 8 KV heads,
    # d_ff=28672, V=128256, untied), by hand:
    #   per layer: Q, O 2 * 8192^2 = 134,217,728; K, V 2 * 8192 * 1024 = 16,777,216;
    #   MLP 3 * 8192 * 28672 = 704,643,072; two norms 16,384 -> 855,654,400;
    #   x 80 = 68,452,352,000
    #   embedding + head 2 * 128,256 * 8192 = 2,101,346,304; final norm 8,192
    #   N = 70,553,706,496; bf16 gradients 141,107,412,992 bytes
    assert v["ring_n70"] == pytest.approx(70.553706496, rel=EXACT)
    assert v["ring_grad_gb"] == pytest.approx(141.107412992, rel=EXACT)
    # links per GPU per direction (NVIDIA H100 / DGX H100 datasheets):
    # 900/2 and 400/8 GB/s
    assert v["ring_ib_gbs"] == 50 and v["ring_nvl_gbs"] == 450
    # 2 * 1023/1024 * 141.107412992e9 / 50e9 = 5.638784511 s;
    # 2 * 7/8 * ... / 450e9 = 0.548751051 s
    assert v["ring_ib_s"] == pytest.approx(5.638784511, rel=1e-9)
    assert v["ring_nvl_s"] == pytest.approx(0.548751051, rel=1e-9)


def test_alpha_beta_fit(v):
    # Over gloo on loopback the "link" is the memory system: a 1 MiB message
    # stays in cache through the ring's passes while a 16 MiB one streams from
    # DRAM, which bends the curve in per-byte cost between them, by how much
    # depends on the CPU and its load (0.78 and 1.33 of the fit on one 2-core
    # VM; a largest deviation of 0.60 on another while other builds ran). So the
    # deviation is stated on the page, not held to a bar.
    assert (
        v["ar_min_kb"] == 1
        and v["ar_max_mb"] == 16
        and v["ar_sizes"] == 8
        and v["ar_ranks"] == 2
    )
    # physical: a latency is not negative, a bandwidth is positive, and beta is 1/B
    # (ns per KiB = 1024 / (GB/s))
    assert v["ar_alpha_us"] >= 0 and v["ar_bw_gbs"] > 0
    # the crossover of this fit, S* = N alpha B (scaling-3), in KiB: 2 ranks x
    # alpha (us -> s) x B (GB/s -> bytes/s) / 1024; the page says it is this
    # machine's, not a rule (scaling-3's ring of 16 at 8 us and 25 GB/s: 3.2 MB)
    s_star_bytes = 2 * v["ar_alpha_us"] * 1e-6 * v["ar_bw_gbs"] * 1e9
    assert v["ar_s_star_kib"] == pytest.approx(s_star_bytes / 1024, rel=EXACT)
    # the flush the sweep wrote and the rounds it took are asserted on the page
    # (its hidden cell after the sweep) and told in its checks box


def test_the_gpu_rows_beside_the_fit(v):
    """Bekman's 8 x H200 sweep (network/benchmarks/results/all-reduce-8xH200.md)
    fitted with the page's function: messages of 32-512 KiB take 38-40 us, 14
    ring steps of about 2.8 us; the bus bandwidth levels off at 450-482 GB/s;
    S* = 8 alpha B is about 10 MiB."""
    assert v["h200_alpha_us"] == pytest.approx(2.8, rel=0.15)
    assert 400 < v["h200_bw_gbs"] <= 482.26
    assert v["h200_s_star_mib"] == pytest.approx(
        8 * v["h200_alpha_us"] * 1e-6 * v["h200_bw_gbs"] * 1e9 / 2**20, rel=EXACT
    )
    # the callout's message size is a power of two between the two crossovers
    middle = v["ar_middle_mib"]
    assert math.log2(middle) == round(math.log2(middle))
    assert v["ar_s_star_kib"] / 1024 < middle < v["h200_s_star_mib"]
    assert v["ar_bw_ratio"] == pytest.approx(v["h200_bw_gbs"] / v["ar_bw_gbs"])


def test_ddp_overlap_run(v):
    # The test-size GPT (L=2, h=128, V=512, 32 positions, GELU d_ff=512), by hand:
    #   embeddings 512*128 + 32*128 = 69,632;
    #   per block 2*128 + 4*128^2 + 2*128*512 = 196,864;
    #   final norm 128; head 512*128 = 65,536
    #   -> N = 69,632 + 393,728 + 128 + 65,536 = 529,024
    assert v["ov_params_m"] == pytest.approx(0.529024, rel=EXACT)
    assert v["ov_grad_mb"] == pytest.approx(4 * 529_024 / 2**20, rel=EXACT)
    # DDP closes a bucket once it passes the cap: 1 MB buckets over 2.02 MB make at most
    # ceil(2.02) = 3, and at least 2; a 1000 MB cap leaves one bucket
    assert 2 <= v["ov_small_buckets"] <= 3
    assert v["ov_big_buckets"] == 1
    # the prose states the measured times as numbers; they must be times
    for k in ("ov_allreduce_ms", "ov_small_nosync_ms", "ov_big_nosync_ms"):
        assert v[k] > 0
    # exposed communication is a median of differences of two positive times; the prose
    # states it as measured (it may even come out negative on a busy machine)
    assert math.isfinite(v["ov_small_exposed_ms"]) and math.isfinite(
        v["ov_big_exposed_ms"]
    )


def test_zero_figure_1_and_the_playbook(v):
    # Rajbhandari et al. 2020, Figure 1 (Psi = 7.5B, N_d = 64, K = 12): 120, 31.4,
    # 16.6, 1.9 GB; by hand 16 * 7.5 = 120; 4 * 7.5 + 12 * 7.5 / 64 = 31.40625;
    # 2 * 7.5 + 14 * 7.5 / 64 = 16.640625; 16 * 7.5 / 64 = 1.875
    assert v["zero_fig1_0"] == 120
    assert (
        v["zero_fig1_1"] == pytest.approx(31.40625, rel=EXACT)
        and round(v["zero_fig1_1"], 1) == 31.4
    )
    assert (
        v["zero_fig1_2"] == pytest.approx(16.640625, rel=EXACT)
        and round(v["zero_fig1_2"], 1) == 16.6
    )
    assert (
        v["zero_fig1_3"] == pytest.approx(1.875, rel=EXACT)
        and round(v["zero_fig1_3"], 1) == 1.9
    )
    # Ultra-Scale Playbook (Tazi et al. 2025): 1B -> 16 GB (20 GB with fp32 grad
    # accumulation), 7B -> 112 GB (140 GB)
    assert (v["pb_1b"], v["pb_1b_acc"], v["pb_7b"], v["pb_7b_acc"]) == (
        16,
        20,
        112,
        140,
    )
    # ZeRO Sec. 7: 2 Psi values per step for stages 0-2, 3 Psi for stage 3; 16-bit
    # values: 4 * 7.5 = 30 GB and 6 * 7.5 = 45 GB
    assert (v["zero_comm_dp"], v["zero_comm_3"], v["zero_comm_ratio"]) == (30, 45, 1.5)


def test_measured_rank_state_against_zero_state_bytes(v):
    # The test-size GPT of the sharded runs (L=2, h=64, V=256, 32 positions), by hand:
    #   16,384 + 2,048 + 2 * (128 + 4 * 4,096 + 2 * 64 * 256) + 64 + 16,384
    #   = 133,440 in 20 tensors
    n = 133_440
    assert (v["sh_n"], v["sh_ranks"], v["sh_tensors"], v["sh_steps"]) == (n, 3, 20, 3)
    # fp32 weights 4, gradients 4, Adam moments 8 bytes per parameter:
    #   ZeRO-1: 4n + 4n + 8n/3 = 1,423,360; FSDP2 (stage 3): 16n/3 = 711,680
    assert v["z1_formula"] == pytest.approx(1_423_360, rel=EXACT)
    assert v["f_formula"] == pytest.approx(711_680, rel=EXACT)
    # ZeroRedundancyOptimizer's greedy split (largest tensor to the emptiest rank) gives
    # 45,056 / 45,056 / 43,328 elements in 5 / 5 / 10 tensors (tests/test_scaling.py
    # works it out); held = formula + 8 * (share - n/3): +4,608, +4,608, -9,216
    assert (v["z1_tensors_min"], v["z1_tensors_max"]) == (5, 10)
    assert v["z1_imb_min"] == pytest.approx(-9_216, abs=1e-6)
    assert v["z1_imb_max"] == pytest.approx(4_608, abs=1e-6)
    assert v["z1_held_max"] == 1_427_968 and v["z1_held_min"] == 1_414_144
    assert v["z1_steps_bytes"] == 4 * 10  # one fp32 step per owned tensor
    # FSDP2 chunks dim 0 by ceil(d/3): 45,358 / 45,358 / 42,724 elements;
    # held = formula + 16 * (share - n/3): +14,048, +14,048, -28,096;
    # the short rank's weights and gradients are padded by 2,634 elements each:
    # 2 * 4 * 2,634 = 21,072 bytes
    assert v["f_imb_min"] == pytest.approx(-28_096, abs=1e-6)
    assert v["f_imb_max"] == pytest.approx(14_048, abs=1e-6)
    assert v["f_held_max"] == 725_728 and v["f_held_min"] == 683_584
    assert v["f_pad_max"] == 21_072
    assert v["f_steps_bytes"] == 4 * 20


def test_sharded_training_matches_one_process(v):
    # The page asserts both: fp32 sums in another order agree to 1e-5 relative on
    # the loss (measured ~1e-7), and over all weights to 1 % of how far training
    # moved them (rounding changes Adam's move only for the rare weight whose
    # gradient is near eps = 1e-8).
    assert v["sh_lr"] == 1e-3
    assert v["sh_loss_gap"] < 1e-5 * v["sh_ref_loss"]
    assert max(v["z1_weight_rel"], v["f_weight_rel"]) < 0.01
    # a single weight: at most two opposite Adam moves a step, each at most
    # lr (1 - beta1) / sqrt(1 - beta2) = 3.16 lr (Kingma & Ba 2015, Sec. 2.1), 3 steps
    assert max(v["z1_weight_gap"], v["f_weight_gap"]) <= 2 * 3 * 3.17e-3
    # random next tokens: a near-uniform predictor's cross-entropy is
    # ln V = ln 256 = 5.545
    assert v["sh_ref_loss"] == pytest.approx(math.log(256), abs=0.1)


def test_fsdp_prefetch_break_even(v):
    # One Llama-3-70B layer without its norms: 150,994,944 + 704,643,072 = 855,638,016
    # parameters, 1.711276032 GB in bf16; all-gather over 64 ranks at 50 GB/s:
    # 63/64 * 1.711276032e9 / 50e9 = 33.690747 ms
    assert v["pf_layer_gb"] == pytest.approx(1.711276032, rel=EXACT)
    assert v["pf_gather_ms"] == pytest.approx(33.69074688, rel=1e-9)
    # forward FLOPs per token of that layer at s = 8192:
    # 2 * 855,638,016 + 4 * 8192 * 8192 = 1,979,711,488;
    # tokens = 0.03369074688 s * 989e12 * 0.4 / 1,979,711,488 = 6,732.32
    assert v["pf_tokens_even"] == pytest.approx(6732.32, abs=0.01)


def test_tensor_parallel_traffic(v):
    # b=1, s=8192, h=8192, t=8, bf16: 4 * 2 * 7/8 * 8192 * 8192 * 2 = 939,524,096 bytes
    assert v["tp_mb"] == pytest.approx(939.524096, rel=EXACT)
    # over 450 GB/s: 2.087831 ms; over 50 GB/s: 18.790482 ms
    assert v["tp_nvl_ms"] == pytest.approx(2.0878313, rel=1e-7)
    assert v["tp_ib_ms"] == pytest.approx(18.790482, rel=1e-7)
    # compute: 3 * 1,979,711,488 * 8192 / 8 / (989e12 * 0.4) = 15.37329 ms
    assert v["tp_compute_ms"] == pytest.approx(15.37329, rel=1e-6)
    assert v["tp_nvl_frac"] == pytest.approx(
        v["tp_nvl_ms"] / v["tp_compute_ms"], rel=EXACT
    )
    # the prose: over NVLink a small share of the compute, over InfiniBand
    # more than all of it
    assert v["tp_nvl_frac"] < 0.25 < 1 < v["tp_ib_frac"]


def test_pipeline_bubble(v):
    # p = 4, m = 8: (p-1)/(m+p-1) = 3/11 for GPipe and 1F1B; v = 2: 3/19
    assert (v["pp"], v["mm"]) == (4, 8)
    assert v["pp_gpipe"] == pytest.approx(3 / 11, rel=EXACT) and v[
        "pp_1f1b"
    ] == pytest.approx(3 / 11, rel=EXACT)
    assert v["pp_inter"] == pytest.approx(3 / 19, rel=EXACT)
    # device 0 holds every micro-batch under GPipe, p of them under 1F1B
    assert (v["pp_gpipe_held"], v["pp_1f1b_held"]) == (8, 4)
    # the page asserts the simulation equals the formula on every case
    # of its grid: schedules x p in (1, 2, 3, 4, 8) x m in 1..16 (m a
    # multiple of p when interleaved), v in (1, 2, 4) when interleaved:
    # 80 + 80 + 3 * (16 + 8 + 5 + 4 + 2) = 265
    assert v["pp_grid"] == 265 and v["pp_agree"] == v["pp_grid"]


def test_the_plan_exercise_budget_is_a_quarter_of_the_usable_hbm(v):
    """An H100's "80 GB" is 80 GiB, of which nvidia-smi reports
    81,559 MiB usable; a quarter is 20,389.75 MiB = 19.91 GiB (not the 18.6 GiB
    of a quarter of 80e9 bytes). Llama-3-405B's 405.85e9 parameters (test_plan)
    over t p = 128 GPUs are 3.1707e9 each: ZeRO-1 keeps 4 bytes of weights and
    gradients plus 12 / N_d of optimizer state, 12.683e9 + 38.048e9 / N_d bytes,
    within 21.380e9 bytes from N_d = 4.37 up, so 8 is the smallest power of two."""
    assert v["ex_plan_budget_gib"] == pytest.approx(81_559 / 1024 / 4, rel=EXACT)
    assert v["ex_plan_n_dp"] == 8


def test_the_core_count_is_the_runs(v, book):
    """Pages run with --jobs on more cores, and on a GPU
    machine with 16, so a sentence that explains a measurement by the core
    count quotes the run's own count (the test runs where the build ran:
    the CPUs its page was given)."""
    from pathlib import Path

    from conftest import cores_of_a_page

    assert v["cores"] == cores_of_a_page(book)
    text = " ".join(
        (Path(__file__).resolve().parent.parent / "notebooks" / "scaling.md")
        .read_text()
        .split()
    )
    assert "two CPU cores" not in text and "on two cores" not in text
