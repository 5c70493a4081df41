"""The input-pipeline page's claims, read back from its glued values in the
test build (SMALL=True): known answers where the number has one (hand
computations from the published model shapes, Bekman's README), physical
bounds where it does not (a sleep is never shorter than asked, a share lies
in [0, 1]), and the page's own asserts for what depends on the run."""

from __future__ import annotations

import math

import pytest

from conftest import page_values
from helpers.live import live_payloads

pytestmark = pytest.mark.book

# The page's test sizes (its parameters cell with SMALL=True): V = 512, s = 64,
# b = 4, 64 rows a shard, and the sweep at 1/20 of Bekman's batch.
SMALL_VOCAB, SMALL_SEQ_LEN, SMALL_BATCH, SMALL_ROWS_PER_SHARD = 512, 64, 4, 64


@pytest.fixture(scope="module")
def v(book):
    return page_values("input_pipeline")


def test_device_is_named(v):
    assert v["device_name"].startswith(("CPU:", "GPU:"))


def test_tokenizer_and_corpus(v):
    assert (
        257 <= v["tok_vocab"] <= SMALL_VOCAB
    )  # 256 bytes + the end token, at most V asked
    assert (
        v["corpus_docs"] >= 1 and 0 < v["corpus_mb"] <= 0.2
    )  # the 200,000-byte cap at test sizes
    assert v["tok_train_s"] > 0
    for key in ("tok_single_tps", "tok_batched_tps", "tok_single_mbps"):
        assert math.isfinite(v[key]) and v[key] > 0
    assert v["tok_cores"] >= 1
    # a byte-level BPE token is at least one byte of text (the end token
    # is not counted in the text)
    assert v["tok_bytes_per_token"] >= 1
    # the Llama-3 preset's V: 128,000 BPE tokens and 256 reserved ones (Table 3 of
    # arXiv:2407.21783 rounds to 128,000; the released tokenizer has 128,256 ids)
    assert v["llama3_vocab"] == 128_256


def test_what_an_h100_eats_by_hand(v):
    """One H100 at 989 TFLOP/s bf16 (datasheet, dense) and 40 % MFU; FLOPs a token
    6 N_matmul + 12 L h s.
    Llama-3-8B (L=32, h=4096, 1024-wide K/V, d_ff=14336, V=128256), s=8192:
        N_matmul = 32 (2 4096^2 + 2 4096 1024 + 3 4096 14336) + 128256 4096
                 = 7,504,658,432
        6 N + 12 L h s = 45,027,950,592 + 12,884,901,888 = 57,912,852,480
    Llama-3-70B (L=80, h=8192, 1024-wide K/V, d_ff=28672, V=128256), s=8192:
        N_matmul = 80 (2 8192^2 + 2 8192 1024 + 3 8192 28672) + 128256 8192
                 = 69,501,714,432
        6 N + 12 L h s = 417,010,286,592 + 64,424,509,440 = 481,434,796,032
    The GPU-size small GPT (L=12, h=1024, GELU d_ff=4096, V=32768), s=1024:
        N_matmul = 12 (4 1024^2 + 2 1024 4096) + 32768 1024 = 184,549,376
        6 N + 12 L h s = 1,107,296,256 + 150,994,944 = 1,258,291,200"""
    assert v["plan_mfu"] == 0.4
    assert v["8b_need"] == pytest.approx(
        0.4 * 989e12 / 57_912_852_480, rel=1e-9
    )  # 6,831
    assert v["70b_need"] == pytest.approx(
        0.4 * 989e12 / 481_434_796_032, rel=1e-9
    )  # 822
    assert v["gpt_need"] == pytest.approx(
        0.4 * 989e12 / 1_258_291_200, rel=1e-9
    )  # 314,395
    # threads a node needs: the node's appetite over this machine's measured
    # tokenizer rate, stated on the page (a slow CPU may need more than one)
    assert v["8b_cores"] > 0
    # tokenising in the loop: the hungrier the trainer, the more the device waits
    assert 0 < v["70b_idle"] < v["8b_idle"] < v["gpt_idle"] < 1
    assert v["gpt_cores"] > v["8b_cores"] > v["70b_cores"] > 0


def test_packing_wastes_least(v):
    assert 0 <= v["waste_packed"] <= v["waste_dynamic"] <= v["waste_fixed"] < 1
    # packing pads only the last row: fewer than s slots of ceil(T / s) s
    assert v["waste_packed"] <= (v["seq_len"] - 1) / v["corpus_tokens"]
    assert v["seq_len"] == SMALL_SEQ_LEN and v["long_s"] == 4096
    assert (
        0 <= v["waste_long"] < 1 and v["doc_median"] >= 2
    )  # a document and its end token


def test_document_mask(v):
    assert v["mask_docs"] >= 1 and 0 <= v["rows_multi"] <= 1
    # sum l_i (l_i + 1) / (s (s + 1)) >= 1 / k for k documents in the
    # row (convexity), = 1 for one document
    assert 1 / v["mask_docs"] <= v["mask_density"] <= 1
    if v["mask_docs"] == 1:
        assert v["mask_density"] == 1
    for key in ("mask_causal_ms", "mask_masked_ms", "mask_per_doc_ms"):
        assert v[key] > 0


def test_shards(v):
    assert v["shard_bytes_per_token"] == 2  # uint16: V <= 65,536
    assert v["shard_count"] == math.ceil(v["shard_rows"] / SMALL_ROWS_PER_SHARD)
    assert v["shard_mb"] == pytest.approx(
        v["shard_rows"] * (SMALL_SEQ_LEN + 1) * 2 / 1e6
    )


def test_resume(v):
    assert v["resume_equal"] == 1  # bitwise-equal weights (the page asserts it)
    # torch's DataLoader hands out prefetch_factor x num_workers batches before the loop
    # takes one: 2 x 2 batches of b rows that a sampler-offset checkpoint would skip
    assert (
        v["resume_ahead"] == 2 * 2 * v["resume_batch"]
        and v["resume_batch"] == SMALL_BATCH
    )


def test_step_time_ab(v):
    for key in ("ab_inloop_ms", "ab_pre_ms", "ab_synth_ms", "gpt_tokens_per_s"):
        assert math.isfinite(v[key]) and v[key] > 0
    for key in ("ab_inloop_wait_ms", "ab_pre_wait_ms", "ab_model_wait_ms"):
        assert v[key] >= 0
    assert 0 <= v["ab_inloop_idle"] < 1
    assert v["ab_inloop_wait_ms"] < v["ab_inloop_ms"]


def test_timeline(v):
    # each batch of the slow loader sleeps tl_load_ms in all; a sleep is never shorter
    assert v["tl_w0_wait_ms"] >= v["tl_load_ms"]
    # the wait with two workers is measured and judged, not held to a bar
    from mlbook.input_pipeline.formulas import wait_verdict

    assert v["tl_wait_ratio"] == pytest.approx(
        v["tl_w2_wait_ms"] / v["tl_w0_wait_ms"], rel=1e-9
    )
    assert v["tl_verdict"] == wait_verdict(v["tl_wait_ratio"])


def test_bekman_numbers_are_the_published_ones(v):
    """stas00/ml-engineering, training/performance/README.md, the block under
    num-workers-bench.py."""
    published = {0: 5.388, 1: 3.900, 2: 1.333, 3: 0.839, 4: 0.875}
    for w, seconds in published.items():
        assert v[f"bek_w{w}"] == seconds


def test_closed_form_at_bekmans_settings_by_hand(v):
    """10 batches, t_load = 100 x 5 ms = 0.5 s, compute 0.2 s:
    w=0: 10 x 0.5 = 5.0; w=1: 0.5 + 9 x 0.5 + 0.2 - 2 = 3.2;
    w=2: 0.5 + 9 x 0.25 + 0.2 - 2 = 0.95;
    w=3, 4: 0.5 + 9 x 0.2 + 0.2 - 2 = 0.5 (seconds of overhead)."""
    for w, seconds in {0: 5.0, 1: 3.2, 2: 0.95, 3: 0.5, 4: 0.5}.items():
        assert v[f"bek_model_w{w}"] == pytest.approx(seconds, abs=1e-12)


def test_sweep_against_lower_bounds(v):
    """The sweep's settings at test sizes: 1/20 of Bekman's (50 items of 5 ms,
    batches of 5, 10 ms compute). Sleeps are lower bounds, so an epoch of n
    batches takes at least n (t_load + c) with no workers and
    max(t_load + n c, ceil(n / w) t_load + c) with w; the closed form is
    n (t_load + c), resp. t_load + (n - 1) max(c, t_load / w) + c."""
    assert (v["sweep_scale"], v["sweep_items"], v["sweep_batch"]) == (20, 50, 5)
    assert (v["sweep_item_ms"], v["sweep_compute_ms"]) == (5.0, 10.0)
    n, load, c = 10, 0.025, 0.010
    assert v["here_w0_overhead"] >= n * load - 1e-9
    assert v["sweep_w0_ratio"] >= 1 - 1e-9
    for w in (1, 2):
        model = load + (n - 1) * max(c, load / w) + c
        bound = max(load + n * c, math.ceil(n / w) * load + c)
        assert v[f"sweep_w{w}_ratio"] >= bound / model - 1e-9
        assert v[f"here_w{w}_overhead"] >= bound - n * c - 1e-9
    assert (
        v["sweep_w2_persistent_ratio"]
        >= (load + n * c) / (load + (n - 1) * max(c, load / 2) + c) - 1e-9
    )


def test_the_live_figure_carries_the_sweep_and_bekmans_run(v):
    """The page passes every measured setting and Bekman's published run as fixed
    data; the default spec (the figure opened from disk, and in the executed
    notebook) draws them. At test sizes: 10 batches of 5 items of 5 ms, 10 ms of
    compute. Bekman's overheads at 1/20 of his batch, by hand: with no workers
    5.388 s / 20 / 10 = 26.94 ms a step on top of 10 ms: 36.94 ms; with four
    0.875 / 200 = 4.375 ms: 14.375 ms."""
    payload = live_payloads("input_pipeline")[
        "mlbook.input_pipeline.live:loader_explorer"
    ]
    fixed = payload["fixed"]
    assert (fixed["batch_size"], fixed["n_batches"]) == (5, 10)
    assert [r["workers"] for r in fixed["measured"]] == [0, 1, 2]
    # the plain settings' steps: compute plus the overhead the prose quotes, per batch
    for r in fixed["measured"]:
        over = v[f"here_w{r['workers']}_overhead"]
        assert r["step_ms"] == pytest.approx(10 + over / 10 * 1e3, rel=1e-9)
    assert [r["setting"] for r in fixed["variants"]][0] == "w=2 persistent"
    assert [r["workers"] for r in fixed["published"]] == [0, 1, 2, 3, 4]
    assert fixed["published"][0]["step_ms"] == pytest.approx(36.94)
    assert fixed["published"][4]["step_ms"] == pytest.approx(14.375)
    for panel in payload["spec"]["hconcat"]:
        drawn = {
            lay["mark"].get("shape"): len(lay["data"]["values"])
            for lay in panel["layer"]
            if lay["mark"]["type"] == "point"
        }
        assert drawn["square"] == 3 and drawn["cross"] == 5
        assert drawn["diamond"] == len(fixed["variants"])


def test_exercise_by_hand(v):
    """A 350 ms step fed by workers that take 1.2 s a batch:
    ceil(1.2 / 0.35) = ceil(3.43) = 4 workers; with 3 a step takes 1.2 / 3 = 0.4 s,
    of which the GPU idles 0.05 s: 12.5 %."""
    assert v["ex_need"] == 4
    assert v["ex_idle_fewer"] == pytest.approx(0.125)


def test_sleep_calibration(v):
    assert (
        v["sweep_sleep_ms"] >= v["sweep_item_ms"]
    )  # a sleep is never shorter than asked


def test_the_introductions_step(v):
    """2M tokens with 400 ms of GPU math eat 5M tokens/s, far more than the
    GPU-size small GPT (314,395 tokens/s), so tokenising in the loop idles the
    GPU more; the threads that keep up are the fewest whose share of the
    tokenising fits in 400 ms."""
    assert v["seed_tok_s"] > 0 and v["gpt_idle"] < v["seed_idle"] < 1
    assert (
        v["seed_workers"] - 1 < v["seed_tok_s"] / 0.4 <= v["seed_workers"] * (1 + 1e-9)
    )


def test_the_published_and_modelled_rows_beside_the_measurements(v):
    """The tokenizers README's "less than 20 seconds to tokenize a GB of text on a
    server's CPU" is at least 50 MB/s. The test-size step on an H100 at 40 % MFU
    (989 TFLOP/s bf16, datasheet): the GPT of L=1, h=64, GELU d_ff=256, V=512 at
    s=64 has N_matmul = 4 * 64^2 + 2 * 64 * 256 + 512 * 64 = 81,920 and
    6 N + 12 L h s = 491,520 + 49,152 = 540,672 FLOPs a token; b s = 256 tokens
    a step take 256 * 540,672 / (0.4 * 989e12) s. Bekman with no workers: 5.388 s
    over 10 batches is 538.8 ms a step against 200 ms of compute: 72.93 %."""
    assert v["hf_mbps"] == 50 and v["tok_batched_mbps"] > 0
    assert v["ab_h100_step_ms"] == pytest.approx(
        256 * 540_672 / (0.4 * 989e12) * 1e3, rel=1e-9
    )
    assert v["bek_w0_idle"] == pytest.approx(0.5388 / 0.7388, rel=1e-9)
    # the page asserts the order the callout states: the faster step waits more
    assert v["ab_inloop_idle"] < v["ab_h100_idle"] < 1
