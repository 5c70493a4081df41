"""Property tests for the input-pipeline chapter's torch-free modules
(mlbook.input_pipeline.formulas, packing, tokenizer, shards): for valid
inputs they return finite numbers that move the way the model says, and for
bad arguments they raise a ValueError that names the argument."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common.transformer import TransformerConfig
from mlbook.input_pipeline import formulas, packing, shards, tokenizer

PROPERTY_COVERS = {
    "mlbook.input_pipeline.artifacts.loader_log",
    "mlbook.input_pipeline.formulas.loader_step_s",
    "mlbook.input_pipeline.formulas.device_idle_fraction",
    "mlbook.input_pipeline.formulas.loader_epoch_s",
    "mlbook.input_pipeline.formulas.loader_overhead_s",
    "mlbook.input_pipeline.formulas.workers_needed",
    "mlbook.input_pipeline.formulas.trainer_tokens_per_s",
    "mlbook.input_pipeline.packing.per_document_rows",
    "mlbook.input_pipeline.packing.padding_waste",
    "mlbook.input_pipeline.packing.packing_waste",
    "mlbook.input_pipeline.packing.pack_documents",
    "mlbook.input_pipeline.packing.document_ids",
    "mlbook.input_pipeline.packing.reset_positions",
    "mlbook.input_pipeline.packing.document_mask",
    "mlbook.input_pipeline.packing.mask_density",
    "mlbook.common.tokenizer.python_sources",
    "mlbook.common.tokenizer.train_bpe",
    "mlbook.common.tokenizer.tokenizer_sha256",
    "mlbook.common.tokenizer.encode_documents",
    "mlbook.common.tokenizer.measure_throughput",
    "mlbook.input_pipeline.shards.token_dtype",
    "mlbook.input_pipeline.shards.write_shards",
    "mlbook.input_pipeline.shards.read_index",
}

FEW = examples(50)
SLOW = examples(10)  # each example trains a tokenizer or writes files

seconds = st.floats(1e-4, 1e3)
workers = st.integers(0, 64)
batches = st.integers(1, 10_000)
NOT_POSITIVE = [0, -1, -2.5, math.nan, math.inf, -math.inf, True, "7", None]
NOT_WORKERS = [-1, 1.5, 2.0, True, "2", None, math.nan]
not_positive = st.sampled_from(NOT_POSITIVE)


def _raises_naming(name, fn, *args, **kw):
    with pytest.raises(ValueError, match=name):
        fn(*args, **kw)


# --- the loader model -----------------------------------------------------------------


@FEW
@given(seconds, seconds, workers)
def test_step_is_finite_and_between_its_bounds(load, compute, w):
    step = formulas.loader_step_s(load, compute, w)
    assert math.isfinite(step)
    assert (
        compute <= step <= load + compute
    )  # never faster than compute, never worse than serial
    idle = formulas.device_idle_fraction(load, compute, w)
    assert 0 <= idle < 1 and math.isfinite(idle)


@FEW
@given(seconds, seconds, workers)
def test_more_workers_never_slow_the_step(load, compute, w):
    assert formulas.loader_step_s(load, compute, w + 1) <= formulas.loader_step_s(
        load, compute, w
    )
    assert formulas.device_idle_fraction(
        load, compute, w + 1
    ) <= formulas.device_idle_fraction(load, compute, w)


@FEW
@given(seconds, seconds, seconds, workers)
def test_slower_loading_never_speeds_the_step(load, more, compute, w):
    assert formulas.loader_step_s(load + more, compute, w) >= formulas.loader_step_s(
        load, compute, w
    )
    assert (
        formulas.device_idle_fraction(load + more, compute, w)
        >= formulas.device_idle_fraction(load, compute, w) - 1e-12
    )
    # more compute: a longer step, and a device that waits less of it
    assert formulas.loader_step_s(load, compute + more, w) >= formulas.loader_step_s(
        load, compute, w
    )
    assert (
        formulas.device_idle_fraction(load, compute + more, w)
        <= formulas.device_idle_fraction(load, compute, w) + 1e-12
    )


@FEW
@given(batches, seconds, seconds, workers)
def test_epoch_grows_with_batches_and_shrinks_with_workers(n, load, compute, w):
    epoch = formulas.loader_epoch_s(n, load, compute, w)
    assert math.isfinite(epoch)
    assert epoch >= n * compute * (1 - 1e-12)  # the compute alone
    assert formulas.loader_epoch_s(n + 1, load, compute, w) >= epoch
    assert formulas.loader_epoch_s(n, load, compute, w + 1) <= epoch * (1 + 1e-12)
    overhead = formulas.loader_overhead_s(n, load, compute, w)
    assert overhead >= -1e-9 * epoch and math.isclose(
        overhead + n * compute, epoch, rel_tol=1e-9
    )
    assert (
        formulas.loader_overhead_s(n, load * 2, compute, w) >= overhead - 1e-9 * epoch
    )


@FEW
@given(seconds, seconds)
def test_workers_needed_is_the_fewest_that_keep_the_device_busy(load, compute):
    w = formulas.workers_needed(load, compute)
    assert w >= 1
    assert formulas.device_idle_fraction(load, compute, w) <= 1e-6
    if w > 1:
        assert formulas.device_idle_fraction(load, compute, w - 1) > 0
    assert formulas.workers_needed(load * 2, compute) >= w


@FEW
@given(not_positive)
def test_loader_model_names_bad_arguments(bad):
    for name, args in (("load_s", (bad, 0.1, 1)), ("compute_s", (0.1, bad, 1))):
        _raises_naming(name, formulas.loader_step_s, *args)
        _raises_naming(name, formulas.device_idle_fraction, *args)
        _raises_naming(name, formulas.loader_epoch_s, 3, *args)
        _raises_naming(name, formulas.loader_overhead_s, 3, *args)
        _raises_naming(name, formulas.workers_needed, *args[:2])
    _raises_naming("n_batches", formulas.loader_epoch_s, bad, 0.1, 0.1, 1)


@FEW
@given(st.sampled_from(NOT_WORKERS))
def test_workers_must_be_a_count(bad):
    _raises_naming("workers", formulas.loader_step_s, 0.1, 0.1, bad)
    _raises_naming("workers", formulas.loader_epoch_s, 2, 0.1, 0.1, bad)


@st.composite
def configs(draw):
    n_heads = draw(st.integers(1, 64))
    return TransformerConfig(
        n_layers=draw(st.integers(1, 128)),
        d_model=n_heads * draw(st.sampled_from([16, 64, 128])),
        n_heads=n_heads,
        d_ff=draw(st.integers(1, 60_000)),
        vocab_size=draw(st.integers(1, 200_000)),
    )


@FEW
@given(
    configs(),
    st.integers(1, 200_000),
    st.floats(1e9, 1e16),
    st.floats(1e-4, 1.0),
    st.integers(1, 10_000),
)
def test_trainer_tokens_grow_with_mfu_gpus_and_peak(cfg, s, peak, mfu, g):
    t = formulas.trainer_tokens_per_s(cfg, s, peak, mfu, g)
    assert math.isfinite(t) and t > 0
    assert formulas.trainer_tokens_per_s(cfg, s, peak, min(1.0, mfu * 2), g) >= t
    assert math.isclose(
        formulas.trainer_tokens_per_s(cfg, s, peak, mfu, 2 * g), 2 * t, rel_tol=1e-12
    )
    assert (
        formulas.trainer_tokens_per_s(cfg, s * 2, peak, mfu, g) < t
    )  # longer s: more FLOPs a token


@FEW
@given(not_positive)
def test_trainer_tokens_names_bad_arguments(bad):
    cfg = TransformerConfig(n_layers=2, d_model=64, n_heads=2, d_ff=256, vocab_size=100)
    _raises_naming("mfu", formulas.trainer_tokens_per_s, cfg, 128, 1e12, bad)
    _raises_naming(
        "peak_flops_per_s", formulas.trainer_tokens_per_s, cfg, 128, bad, 0.4
    )
    _raises_naming("seq_len", formulas.trainer_tokens_per_s, cfg, bad, 1e12, 0.4)
    _raises_naming("n_gpus", formulas.trainer_tokens_per_s, cfg, 128, 1e12, 0.4, bad)
    _raises_naming("mfu", formulas.trainer_tokens_per_s, cfg, 128, 1e12, 1.5)
    _raises_naming("cfg", formulas.trainer_tokens_per_s, "Llama-3-8B", 128, 1e12, 0.4)


# --- packing --------------------------------------------------------------------------

doc_lengths = st.lists(st.integers(1, 5000), min_size=1, max_size=60)
seq_lens = st.integers(1, 4096)


@FEW
@given(doc_lengths, seq_lens, st.integers(1, 16))
def test_packing_pads_least(lens, s, b):
    fixed, dynamic, packed = (
        packing.padding_waste(lens, s),
        packing.padding_waste(lens, s, b),
        packing.packing_waste(lens, s),
    )
    for w in (fixed, dynamic, packed):
        assert 0 <= w < 1 and math.isfinite(w)
    # sum ceil(l/s) >= ceil(sum l / s): per-document rows never fewer than packed rows
    assert packed <= fixed + 1e-12 and dynamic <= fixed + 1e-12
    rows = packing.per_document_rows(lens, s)
    assert rows >= math.ceil(sum(lens) / s) and rows >= len(lens)
    assert math.isclose(fixed, 1 - sum(lens) / (rows * s), rel_tol=1e-12, abs_tol=1e-15)


@FEW
@given(doc_lengths, seq_lens)
def test_documents_that_fill_whole_rows_waste_nothing(lens, s):
    whole = [s * (1 + n % 3) for n in lens]
    assert packing.padding_waste(whole, s) == 0 and packing.packing_waste(whole, s) == 0
    assert packing.per_document_rows(whole, s) == sum(1 + n % 3 for n in lens)


@FEW
@given(st.sampled_from([[], "abc", None, 5, [0], [3, -1], [2, 1.5], [True]]))
def test_padding_names_bad_lengths(bad):
    for fn in (packing.padding_waste, packing.packing_waste, packing.per_document_rows):
        _raises_naming("doc_lens", fn, bad, 8)


@FEW
@given(not_positive)
def test_padding_names_bad_seq_len(bad):
    for fn in (packing.padding_waste, packing.packing_waste, packing.per_document_rows):
        _raises_naming("seq_len", fn, [3, 4], bad)
    if bad is not None:  # None is the fixed-length scheme
        _raises_naming("batch_size", packing.padding_waste, [3, 4], 8, bad)


docs_strategy = st.lists(
    st.lists(st.integers(1, 500), max_size=40), min_size=1, max_size=20
)


@FEW
@given(docs_strategy, st.integers(1, 64))
def test_pack_keeps_every_token_in_order(docs, s):
    rows = packing.pack_documents(docs, s, 0)
    stream = [t for d in docs for t in d + [0]]
    assert rows.shape == (len(stream) // (s + 1), s + 1)
    assert (
        rows.ravel().tolist() == stream[: rows.size]
    )  # only the short tail is dropped
    assert len(stream) - rows.size < s + 1


@FEW
@given(st.sampled_from([None, "ids", [[1, -2]], [[1.5, 2.0]], 7]))
def test_pack_names_bad_docs(bad):
    _raises_naming("docs", packing.pack_documents, bad, 8, 0)


@FEW
@given(not_positive)
def test_pack_names_bad_seq_len_and_eos(bad):
    _raises_naming("seq_len", packing.pack_documents, [[1, 2]], bad, 0)
    if not (isinstance(bad, int) and not isinstance(bad, bool) and bad >= 0):
        _raises_naming("eos_id", packing.pack_documents, [[1, 2]], 4, bad)


rows_with_eos = st.lists(st.integers(0, 5), min_size=1, max_size=80)


@FEW
@given(rows_with_eos)
def test_document_ids_positions_and_mask_agree(row):
    eos = 0
    ids = packing.document_ids(row, eos)
    assert ids[0] == 0 and np.all(np.diff(ids) >= 0) and np.all(np.diff(ids) <= 1)
    assert ids[-1] == sum(
        1 for t in row[:-1] if t == eos
    )  # one document more per end token
    pos = packing.reset_positions(row, eos)
    assert pos[0] == 0 and np.all((np.diff(pos) == 1) | (pos[1:] == 0))
    mask = packing.document_mask(row, eos)
    causal = np.tril(np.ones((len(row), len(row)), dtype=bool))
    assert not np.any(mask & ~causal) and np.all(
        np.diag(mask)
    )  # inside the causal mask, self always kept
    density = packing.mask_density(row, eos)
    assert 0 < density <= 1 and math.isclose(
        density, mask.sum() / causal.sum(), rel_tol=1e-12
    )
    if eos not in row[:-1]:
        assert density == 1 and np.array_equal(mask, causal)


@FEW
@given(st.sampled_from([[], "ab", None, [[1, 2], [3, 4]], [0.5, 1.5]]))
def test_mask_functions_name_bad_rows(bad):
    for fn in (
        packing.document_ids,
        packing.reset_positions,
        packing.document_mask,
        packing.mask_density,
    ):
        _raises_naming("row", fn, bad, 0)
        _raises_naming("eos_id", fn, [1, 2, 3], -1)


# --- tokenizer ------------------------------------------------------------------------

texts_strategy = st.lists(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=200),
    min_size=1,
    max_size=8,
)


@SLOW
@given(texts_strategy, st.integers(257, 600))
def test_bpe_round_trips_any_text_and_hashes_stably(texts, vocab):
    tok = tokenizer.train_bpe(texts, vocab, min_frequency=1)
    assert tok.get_vocab_size() <= vocab and tok.token_to_id(tokenizer.EOS) is not None
    ids = tokenizer.encode_documents(tok, texts)
    assert ids == tokenizer.encode_documents(tok, texts, batched=False)
    assert [tok.decode(d) for d in ids] == texts  # byte-level: lossless
    h = tokenizer.tokenizer_sha256(tok)
    assert len(h) == 64 and h == tokenizer.tokenizer_sha256(
        tokenizer.train_bpe(texts, vocab, min_frequency=1)
    )
    t = tokenizer.measure_throughput(tok, texts, batched=False, repeats=1)
    assert (
        t.tokens == sum(map(len, ids))
        and t.tokens_per_s > 0
        and math.isfinite(t.bytes_per_s)
    )


@SLOW
@given(st.sampled_from([0, 256, -5, 1.5, True, "512", None]))
def test_train_bpe_names_bad_vocab(bad):
    _raises_naming("vocab_size", tokenizer.train_bpe, ["abc"], bad)


@FEW
@given(st.sampled_from([[], "text", None, [1, 2], ["ok", 3]]))
def test_text_functions_name_bad_texts(bad):
    tok = _small_tokenizer()
    _raises_naming("texts", tokenizer.train_bpe, bad, 300)
    _raises_naming("texts", tokenizer.encode_documents, tok, bad)
    _raises_naming("texts", tokenizer.measure_throughput, tok, bad, True)


@FEW
@given(st.sampled_from([None, "tok", 3, object()]))
def test_hash_names_a_non_tokenizer(bad):
    _raises_naming("tok", tokenizer.tokenizer_sha256, bad)


@FEW
@given(not_positive)
def test_throughput_names_bad_repeats_and_flags(bad):
    tok = _small_tokenizer()
    _raises_naming("repeats", tokenizer.measure_throughput, tok, ["a b"], True, bad)
    if not isinstance(bad, bool):  # True is a fine flag
        _raises_naming("batched", tokenizer.encode_documents, tok, ["a b"], bad)
        _raises_naming("batched", tokenizer.measure_throughput, tok, ["a b"], bad)


_TOK = []


def _small_tokenizer():
    if not _TOK:
        _TOK.append(tokenizer.train_bpe(["def f(x):\n    return x + 1\n"] * 3, 300))
    return _TOK[0]


@SLOW
@given(
    st.lists(st.integers(1, 3000), min_size=1, max_size=12), st.integers(2_000, 40_000)
)
def test_python_sources_is_a_deterministic_capped_subset(sizes, cap):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, n in enumerate(sizes):
            (root / f"pkg{i % 3}").mkdir(exist_ok=True)
            (root / f"pkg{i % 3}" / f"m{i:02d}.py").write_text("x" * (n - 1) + "\n")
        (root / "site-packages").mkdir()
        (root / "site-packages" / "big.py").write_text("y\n")
        assume(min(sizes) <= cap)
        try:
            a = tokenizer.python_sources(cap, root)
        except ValueError:  # every file the stride took was above the cap
            return
        assert a == tokenizer.python_sources(cap, root)
        assert 0 < a.n_bytes <= cap and a.n_docs == len(a.paths) <= len(sizes)
        assert list(a.paths) == sorted(a.paths) and not any(
            "site-packages" in p for p in a.paths
        )
        assert a.files_seen == len(sizes)
        everything = tokenizer.python_sources(
            sum(sizes), root
        )  # a cap above the total takes every file
        assert everything.n_docs == len(sizes) and everything.n_bytes == sum(sizes)


@FEW
@given(not_positive)
def test_python_sources_names_bad_cap(bad):
    _raises_naming("max_bytes", tokenizer.python_sources, bad)


def test_python_sources_names_a_missing_root(tmp_path):
    _raises_naming("root", tokenizer.python_sources, 1000, tmp_path / "nowhere")


# --- shards ---------------------------------------------------------------------------


@FEW
@given(st.integers(1, 2**32))
def test_token_dtype_holds_every_id(v):
    dtype = np.dtype(shards.token_dtype(v))
    assert np.iinfo(dtype).max >= v - 1
    assert (dtype == np.uint16) == (v <= 65_536)


@FEW
@given(st.sampled_from([0, -1, 1.5, True, "65536", None, 2**32 + 1]))
def test_token_dtype_names_bad_vocab(bad):
    _raises_naming("vocab_size", shards.token_dtype, bad)


@SLOW
@given(
    st.integers(1, 40),
    st.integers(1, 33),
    st.integers(1, 12),
    st.sampled_from([300, 70_000]),
)
def test_shards_round_trip_exactly(n_rows, row_len_minus_one, per, vocab):
    rng = np.random.default_rng(n_rows * 1000 + per)
    rows = rng.integers(0, vocab, size=(n_rows, row_len_minus_one + 1))
    with tempfile.TemporaryDirectory() as tmp:
        index = shards.write_shards(rows, tmp, per, vocab, "a" * 64, 0)
        assert index == shards.read_index(tmp)
        assert len(index["shards"]) == math.ceil(n_rows / per)
        assert sum(s["rows"] for s in index["shards"]) == n_rows == index["rows"]
        data = shards.PackedShards(tmp, "a" * 64, verify=True)
        assert len(data) == n_rows and data.nbytes == rows.size * (
            2 if vocab <= 65_536 else 4
        )
        assert np.array_equal(np.stack([data[i] for i in range(n_rows)]), rows)


@FEW
@given(not_positive)
def test_write_shards_names_bad_arguments(bad):
    rows = np.ones((2, 5), dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        _raises_naming(
            "rows_per_shard", shards.write_shards, rows, tmp, bad, 10, "a" * 64, 0
        )
        _raises_naming(
            "vocab_size", shards.write_shards, rows, tmp, 1, bad, "a" * 64, 0
        )
        _raises_naming("rows", shards.write_shards, np.ones(5), tmp, 1, 10, "a" * 64, 0)
        _raises_naming("rows", shards.write_shards, rows * 20, tmp, 1, 10, "a" * 64, 0)
        _raises_naming(
            "tokenizer_sha256", shards.write_shards, rows, tmp, 1, 10, "abc", 0
        )
        _raises_naming("eos_id", shards.write_shards, rows, tmp, 1, 10, "a" * 64, 10)


def test_read_index_refuses_a_directory_without_one(tmp_path):
    _raises_naming("index.json", shards.read_index, tmp_path)
    (tmp_path / "index.json").write_text('{"format": "something else"}')
    _raises_naming("format", shards.read_index, tmp_path)


# --- the loop's timings to diagnose --------------------------------------------------


@examples(40)
@given(
    st.integers(0, 10_000),
    st.integers(0, 6),
    st.floats(0.01, 2.0),
    st.floats(0.01, 2.0),
    st.integers(2, 40),
)
def test_a_noiseless_trace_is_the_loader_model(seed, workers, load, compute, steps):
    """Without jitter the trace is the closed form: the first step waits a
    whole load; with no workers every step does; with w workers the mean
    step over a whole number of rounds after the first tends to
    max(compute, load / w), and never beats it."""
    from mlbook.input_pipeline import artifacts, formulas

    log = artifacts.loader_log(seed, workers, steps, 0.0, load, compute)
    assert [r.step for r in log.rows] == list(range(1, steps + 1))
    assert log.rows[0].wait_s == pytest.approx(load)
    assert all(r.compute_s == pytest.approx(compute) for r in log.rows)
    if workers == 0:
        assert all(r.wait_s == pytest.approx(load) for r in log.rows)
        return
    total = sum(r.step_s for r in log.rows)
    # worker k makes batches k, k + w, ...: batch i is ready at ceil(i / w)
    # loads, and the loop ends at the latest of (batch i ready, then steps i..n)
    ends = [
        math.ceil(i / workers) * load + (steps - i + 1) * compute
        for i in range(1, steps + 1)
    ]
    assert total == pytest.approx(max(ends), rel=1e-9)
    # which never beats the model's steady state, max(compute, load / w)
    steady = formulas.loader_step_s(load, compute, workers)
    assert total >= (steps - workers) * steady - 1e-9
    assert log.loader_bound == (load / workers > compute)


@examples(40)
@given(st.integers(0, 10_000), st.integers(0, 4))
def test_a_seed_draws_a_load_and_a_compute_in_range(seed, workers):
    from mlbook.input_pipeline import artifacts

    log = artifacts.loader_log(seed, workers)
    assert 0.05 <= log.compute_s <= 0.5
    ratio = log.load_s / (log.compute_s * max(1, workers))
    assert 0.005 <= ratio <= 4.0
    assert log == artifacts.loader_log(seed, workers)
    assert all(r.wait_s >= 0 and r.compute_s > 0 for r in log.rows)
