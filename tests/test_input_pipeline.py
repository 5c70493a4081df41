"""The input-pipeline chapter's package: known answers for the calculators
(hand computations and Bekman's published benchmark), the shards and the
dataset over them, the data position through the cadence chapter's
Checkpointer for 1 to 4 ranks, and the torch experiments' behaviour."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mlbook.common import transformer
from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler
from mlbook.common_torch.gpt import tiny_config
from mlbook.common_torch.launch import fork_group
from mlbook.input_pipeline import experiments, formulas, packing, shards, tokenizer

# --- the loader model against hand computations and a simulation ----------------------


def test_bekman_settings_by_hand():
    """Bekman's num-workers-bench: 1,000 items of 5 ms in batches of 100
    (t_load = 0.5 s), 0.2 s compute, 10 batches. Written out:
    w=0: 10 x 0.5 = 5.0 s; w=1: 0.5 + 9 x 0.5 + 0.2 - 2.0 = 3.2 s;
    w=2: 0.5 + 9 x 0.25 + 0.2 - 2.0 = 0.95 s;
    w>=3: 0.5 + 9 x 0.2 + 0.2 - 2.0 = 0.5 s."""
    b = formulas.BEKMAN_NUM_WORKERS
    assert (b.n_batches, b.load_s) == (10, 0.5)
    by_hand = {0: 5.0, 1: 3.2, 2: 0.95, 3: 0.5, 4: 0.5}
    for w, expected in by_hand.items():
        assert formulas.loader_overhead_s(
            b.n_batches, b.load_s, b.compute_s, w
        ) == pytest.approx(expected, abs=1e-12)


def test_bekman_table_matches_the_source():
    """training/performance/README.md of stas00/ml-engineering, the block
    printed under num-workers-bench.py, and the pin-memory block below it."""
    quoted = """num_workers=0: average time: 5.388
num_workers=1: average time: 3.900
num_workers=2: average time: 1.333
num_workers=3: average time: 0.839
num_workers=4: average time: 0.875"""
    parsed = {
        int(line.split(":")[0].split("=")[1]): float(line.split()[-1])
        for line in quoted.splitlines()
    }
    assert formulas.BEKMAN_NUM_WORKERS.overhead_s == parsed
    b = formulas.BEKMAN_NUM_WORKERS  # the script's settings
    assert (
        b.n_items,
        b.item_cost_s,
        b.item_bytes,
        b.batch_size,
        b.compute_s,
        b.runs,
    ) == (1000, 0.005, 2**20, 100, 0.2, 10)
    assert b.pin_memory and not b.persistent_workers
    assert formulas.BEKMAN_PIN_MEMORY_S == {
        (True, True): 0.459,
        (True, False): 0.522,
        (False, True): 0.658,
        (False, False): 0.646,
    }


def _simulate_epoch(n, load, compute, workers, prefetch=2):
    """PyTorch's DataLoader schedule, event by event: worker k gets batches
    k, k + w, ...; at most prefetch x w batches are handed out and not yet
    consumed; the loop trains on batch i once it has arrived and batch i - 1
    is done."""
    if workers == 0:
        return n * (load + compute)
    ready = [0.0] * n
    free = [0.0] * workers  # when each worker is next idle
    consumed_at = [0.0] * n  # when the loop finished batch i
    t_loop = 0.0
    for i in range(n):
        k = i % workers
        issue = 0.0 if i < prefetch * workers else consumed_at[i - prefetch * workers]
        start = max(free[k], issue)
        free[k] = ready[i] = start + load
    for i in range(n):
        t_loop = max(t_loop, ready[i]) + compute
        consumed_at[i] = t_loop
    return t_loop


@pytest.mark.parametrize("workers", [0, 1, 2, 3, 4, 8])
@pytest.mark.parametrize("load,compute", [(0.5, 0.2), (0.1, 0.4), (0.3, 0.3)])
def test_closed_form_against_a_simulation(workers, load, compute):
    """The closed form is exact without workers and with one, and within one
    batch's load time of the event-by-event schedule with more (the warm-up
    it approximates); its steady state is the simulation's."""
    n = 40
    sim = _simulate_epoch(n, load, compute, workers)
    model = formulas.loader_epoch_s(n, load, compute, workers)
    assert abs(model - sim) <= load + 1e-9
    if workers <= 1:
        assert model == pytest.approx(sim, rel=1e-12)
    tail = (
        _simulate_epoch(2 * n, load, compute, workers) - sim
    )  # n more batches, steady state
    assert tail == pytest.approx(
        n * formulas.loader_step_s(load, compute, workers), rel=0.05
    )


def test_workers_needed_by_hand():
    assert (
        formulas.workers_needed(1.2, 0.35) == 4
    )  # 1.2 / 0.35 = 3.43 -> 4 (the exercise)
    assert (
        formulas.workers_needed(0.3, 0.1) == 3
    )  # 2.9999999999999996 in floating point
    assert formulas.workers_needed(0.7, 0.1) == 7
    assert formulas.workers_needed(0.05, 0.4) == 1
    assert formulas.device_idle_fraction(1.2, 0.35, 3) == pytest.approx(
        1 - 0.35 / 0.4
    )  # 12.5 %


def test_trainer_tokens_for_llama3_8b_by_hand():
    """Llama 3 8B (L=32, h=4096, 8 KV heads of 128, d_ff=14336, V=128256):
    N_matmul = 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) + 128256 x 4096
             = 32 x (33,554,432 + 8,388,608 + 176,160,768) + 525,336,576
             = 7,504,658,432.
    At s = 8192: 6 N + 12 L h s = 45,027,950,592 + 12,884,901,888
                                = 57,912,852,480 FLOPs a token.
    One H100 (989 TFLOP/s bf16) at 40 % MFU: 0.4 x 989e12 / 57,912,852,480
                                             = 6,830.95 tokens/s."""
    t = formulas.trainer_tokens_per_s(transformer.LLAMA3_8B, 8192, 989e12, 0.4)
    assert t == pytest.approx(0.4 * 989e12 / 57_912_852_480, rel=1e-12)
    assert round(t) == 6831


# --- packing --------------------------------------------------------------------------


def test_padding_by_hand():
    """Documents of 3, 5 and 8 tokens at s = 4: per-document rows 1 + 2 + 2 = 5,
    20 slots for 16 tokens, 20 % padding. Chunks 3 | 4 1 | 4 4 padded per batch of
    2 to the longest: [3, 4] -> 8, [1, 4] -> 8, [4] -> 4 slots: 20 again; batches of
    one are never padded. Packed: 16 tokens fill 4 rows exactly."""
    assert packing.per_document_rows([3, 5, 8], 4) == 5
    assert packing.padding_waste([3, 5, 8], 4) == pytest.approx(0.2)
    assert packing.padding_waste([3, 5, 8], 4, batch_size=2) == pytest.approx(0.2)
    assert packing.padding_waste([3, 5, 8], 4, batch_size=1) == 0
    assert packing.packing_waste([3, 5, 8], 4) == 0
    assert packing.packing_waste([3, 5, 9], 4) == pytest.approx(
        3 / 20
    )  # 17 tokens in 5 rows


def test_pack_and_mask_by_hand():
    rows = packing.pack_documents([[5, 6], [7], [8, 9, 4]], 3, 0)
    assert rows.tolist() == [
        [5, 6, 0, 7],
        [0, 8, 9, 4],
    ]  # the final end token is dropped
    row = [5, 0, 7, 8]  # doc A = 5 <eos>, doc B = 7 8
    assert packing.document_ids(row, 0).tolist() == [0, 0, 1, 1]
    assert packing.reset_positions(row, 0).tolist() == [0, 1, 0, 1]
    assert packing.document_mask(row, 0).astype(int).tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 1],
    ]
    assert packing.mask_density(row, 0) == pytest.approx(
        6 / 10
    )  # (3 + 3) of 4 x 5 / 2 causal pairs


def test_stream_packer_yields_the_offline_rows():
    docs = [[1, 2, 3], [4], [5, 6, 7, 8, 9], [10, 11]] * 3
    texts = [" ".join(map(str, d)) for d in docs]
    encode = lambda t: [int(x) for x in t.split()]  # noqa: E731
    offline = packing.pack_documents(docs, 4, 0)
    packer = packing.StreamPacker(encode, texts, 4, 0)
    online = np.concatenate(
        [packer.next_rows(2), packer.next_rows(1), packer.next_rows(len(offline) - 3)]
    )
    assert np.array_equal(online, offline)
    assert packer.tokens_encoded >= offline.size - len(docs)
    with pytest.raises(ValueError, match="n"):
        packer.next_rows(0)
    with pytest.raises(ValueError, match="encode"):
        packing.StreamPacker("not callable", texts, 4, 0)


# --- tokenizer and shards -------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus():
    return tokenizer.python_sources(60_000)


@pytest.fixture(scope="module")
def tok(corpus):
    return tokenizer.train_bpe(corpus.texts, 400)


@pytest.fixture(scope="module")
def packed(tmp_path_factory, corpus, tok):
    eos = tok.token_to_id(tokenizer.EOS)
    rows = packing.pack_documents(
        tokenizer.encode_documents(tok, corpus.texts), 16, eos
    )
    root = tmp_path_factory.mktemp("shards")
    shards.write_shards(
        rows[:48], root, 10, tok.get_vocab_size(), tokenizer.tokenizer_sha256(tok), eos
    )
    return root, rows[:48], tokenizer.tokenizer_sha256(tok)


def test_corpus_comes_from_the_standard_library(corpus):
    assert corpus.n_docs >= 1 and corpus.n_bytes <= 60_000
    assert all(p.endswith(".py") and "site-packages" not in p for p in corpus.paths)
    assert Path(corpus.root, corpus.paths[0]).is_file()


def test_shards_are_narrow_views_that_round_trip(packed, tok):
    root, rows, h = packed
    data = shards.PackedShards(root, tokenizer_sha256=h, verify=True)
    assert data.dtype == np.dtype("<u2") and tok.get_vocab_size() <= 65_536
    assert data.shard_of(0) == (0, 0) and data.shard_of(47) == (
        4,
        7,
    )  # shards of 10 rows
    ds = experiments.ShardDataset(data)
    for i in (0, 9, 10, 47):
        k, j = data.shard_of(i)
        item = ds[i]
        assert item.dtype == torch.uint16 and np.shares_memory(
            item.numpy(), data.maps[k]
        )
        assert torch.equal(item.long(), torch.from_numpy(rows[i]))
    x, y = experiments.to_model_batch(next(iter(DataLoader(ds, batch_size=4))), "cpu")
    assert (
        x.dtype == torch.int64
        and x.shape == (4, 16)
        and torch.equal(x[:, 1:], y[:, :-1])
    )
    assert (
        data.nbytes
        == rows.size * 2
        == sum(f.stat().st_size for f in root.glob("shard-*.bin"))
    )


def test_shards_refuse_another_tokenizer_and_corruption(packed, tmp_path):
    root, rows, h = packed
    with pytest.raises(ValueError, match="tokenised by tokenizer"):
        shards.PackedShards(root, tokenizer_sha256="b" * 64)
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in root.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    raw = bytearray((copy / "shard-00002.bin").read_bytes())
    raw[3] ^= 0x01  # one bit, same size
    (copy / "shard-00002.bin").write_bytes(bytes(raw))
    shards.PackedShards(copy)  # the size still matches
    with pytest.raises(ValueError, match="SHA-256"):
        shards.PackedShards(copy, verify=True)
    (copy / "shard-00003.bin").write_bytes(b"short")
    with pytest.raises(ValueError, match="wrong size"):
        shards.PackedShards(copy)
    with pytest.raises(IndexError):
        shards.PackedShards(root)[48]


# --- the data position: one process, a prefetching loader -----------------------------


def test_loop_position_counts_what_the_loop_consumed(packed):
    root, rows, h = packed
    data = shards.PackedShards(root)
    sampler = ShardedSampler(len(data), seed=3)
    position = experiments.LoopPosition(sampler)
    loader = DataLoader(
        experiments.ShardDataset(data, with_index=True),
        batch_size=2,
        sampler=sampler,
        num_workers=2,
        prefetch_factor=2,
    )
    position.begin_epoch()
    it = iter(loader)
    seen = []
    for _ in range(3):
        idx, _rows = next(it)
        seen += idx.tolist()
        position.advance(len(idx))
    # two workers x prefetch 2 batches of 2 were pulled ahead of the loop
    assert sampler.state_dict()["offset"] - position.state_dict()["offset"] == 2 * 2 * 2
    fresh = ShardedSampler(len(data), seed=3)
    fresh.load_state_dict(position.state_dict())
    assert (
        seen + list(fresh) == sampler.permutation(0).tolist()
    )  # no row skipped or repeated
    del it


def test_loop_position_at_the_end_of_an_epoch():
    sampler = ShardedSampler(6, seed=0)
    position = experiments.LoopPosition(sampler)
    position.begin_epoch()
    list(sampler)  # the whole epoch, generator closed
    position.advance(6)
    assert position.state_dict()["offset"] == 6
    position.begin_epoch()  # the next epoch starts at 0
    assert (position.state_dict()["epoch"], position.state_dict()["offset"]) == (1, 0)
    with pytest.raises(ValueError, match="sampler"):
        experiments.LoopPosition([1, 2, 3])


def test_resume_check_in_one_process(packed, tmp_path):
    root, rows, h = packed
    data = shards.PackedShards(root)
    cfg = tiny_config(n_layers=1, d_model=16, n_heads=2, vocab_size=400)
    check = experiments.resume_check(
        cfg, data, batch=2, steps=6, save_at=2, root=tmp_path, num_workers=2
    )
    assert check.straight == check.resumed and len(check.straight) == 4
    assert check.weights_equal
    assert check.prefetched_ahead == 2 * 2 * 2
    assert check.saved_state["offset"] == 2 * 2
    with pytest.raises(ValueError, match="save_at"):
        experiments.resume_check(cfg, data, batch=2, steps=2, save_at=2, root=tmp_path)


# --- the data position: 1 to 4 ranks, through the Checkpointer ------------------------

N_ROWS, BATCH, SEED = (
    48,
    2,
    11,
)  # 48 rows: divisible by 1, 2, 3 and 4, so no epoch drops a row


def _rank_main(argv):
    """One rank of a fork_group: phase 'first' trains to mid-epoch, saves,
    and goes on into the next epoch; 'again' loads and goes on to the same
    step; 'reshard' loads (on another number of ranks) and finishes the
    epoch. Every rank writes what it trained on to result-<phase>-rank<r>.json."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    phase, shard_dir, ckpt_dir, out = argv
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = shards.PackedShards(shard_dir)
    torch.manual_seed(
        0 if phase == "first" else 100 + rank
    )  # a resume starts from other weights
    model = DDP(torch.nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = ShardedSampler(len(data), rank=rank, world_size=world, seed=SEED)
    position = experiments.LoopPosition(sampler)
    ckpt = Checkpointer(ckpt_dir, keep_last=1)
    per_epoch = len(data) // world // BATCH
    save_at, stop = per_epoch // 2, per_epoch + 2
    if (
        phase == "reshard"
    ):  # the step count means another thing on another number of ranks
        stop = math.inf
    step = 0 if phase == "first" else ckpt.load(model, opt, sampler=position).step
    loader = DataLoader(
        experiments.ShardDataset(data, with_index=True),
        batch_size=BATCH,
        sampler=sampler,
    )
    before, after, epochs = [], [], []
    while step < stop:
        position.begin_epoch()
        epochs.append(sampler.state_dict()["epoch"])
        for idx, rows in loader:
            loss = model(rows[:, :4].float() / 400).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            position.advance(len(idx))
            step += 1
            (before if step <= save_at and phase == "first" else after).append(
                [position.state_dict()["epoch"], idx.tolist()]
            )
            if phase == "first" and step == save_at:
                ckpt.save(step, model, opt, sampler=position)
            if step == stop:
                break
        if phase == "reshard":
            break
    ckpt.close()
    weights = [p.detach().numpy().tobytes().hex() for p in model.module.parameters()]
    Path(out, f"result-{phase}-rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "world": world,
                "before": before,
                "after": after,
                "weights": weights,
                "step": step,
            }
        )
    )
    dist.barrier()
    # Leave without running the gloo groups' destructors: with 4 ranks one rank's
    # ProcessGroupGloo joined a gloo thread that was waiting for the GIL to free a
    # thread-local Python object, and the process never exited (gdb, torch 2.13).
    sys.stdout.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def rank_shards(tmp_path_factory):
    rows = np.arange(N_ROWS * 9).reshape(N_ROWS, 9) % 400  # row i starts with 9 i
    root = tmp_path_factory.mktemp("rank-shards")
    shards.write_shards(rows, root, 7, 400, "c" * 64, 0)
    return root


def _group(phase, world, shard_dir, ckpt_dir, out):
    launch = fork_group(
        _rank_main,
        [phase, str(shard_dir), str(ckpt_dir), str(out)],
        nproc=world,
        timeout_s=120,
    )
    assert launch.returncode == 0, launch.output[-3000:]
    return [
        json.loads(Path(out, f"result-{phase}-rank{r}.json").read_text())
        for r in range(world)
    ]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_resume_for_world_sizes_1_to_4(world, rank_shards, tmp_path):
    """Each epoch covers the data exactly once across ranks; a resume on the
    same number of ranks continues exactly (same rows, same order, bitwise
    weights); a resume on another number of ranks finishes the epoch with no
    row repeated and none skipped (48 rows divide evenly on 1-4 ranks)."""
    ckpt = tmp_path / "ckpt"
    first = _group("first", world, rank_shards, ckpt, tmp_path)
    epoch0 = [
        i for r in first for e, idx in r["before"] + r["after"] if e == 0 for i in idx
    ]
    assert sorted(epoch0) == list(range(N_ROWS)), (
        "epoch 0 covers every row exactly once across the ranks"
    )
    assert all(e in (0, 1) for r in first for e, _ in r["after"]) and any(
        e == 1 for e, _ in first[0]["after"]
    )
    perm = ShardedSampler(N_ROWS, seed=SEED).permutation(0).tolist()
    for r in first:  # rank r's share of (seed, epoch)
        mine = [i for e, idx in r["before"] + r["after"] if e == 0 for i in idx]
        assert mine == perm[r["rank"] :: world]

    again = _group("again", world, rank_shards, ckpt, tmp_path)
    for a, b in zip(first, again, strict=True):
        assert b["after"] == a["after"], (
            f"rank {a['rank']}: the resume must train on the same rows in order"
        )
        assert b["weights"] == a["weights"], (
            f"rank {a['rank']}: and end with bitwise-equal weights"
        )

    other = world % 4 + 1
    moved = _group("reshard", other, rank_shards, ckpt, tmp_path)
    done = [i for r in first for _, idx in r["before"] for i in idx]
    rest = [i for r in moved for e, idx in r["after"] for i in idx if e == 0]
    assert not set(done) & set(rest) and len(rest) == len(set(rest)), (
        "nothing repeated after re-sharding"
    )
    dropped = N_ROWS - len(done) - len(rest)
    assert 0 <= dropped < other and sorted(done + rest) == sorted(
        set(perm) - set(perm[N_ROWS - dropped :])
    )


# --- torch experiments: behaviour, not speed ------------------------------------------


def test_loader_sweep_is_never_faster_than_its_sleeps():
    """Sleeps are lower bounds: with no workers an epoch sleeps every item
    and every compute; with w workers the first batch arrives after one
    batch's load and the workers sleep ceil(n / w) batches each."""
    n_items, batch, cost, compute = 12, 3, 0.004, 0.01
    n, load = n_items // batch, batch * cost
    points = experiments.loader_sweep(
        [
            experiments.LoaderSetting(0),
            experiments.LoaderSetting(2),
            experiments.LoaderSetting(2, persistent_workers=True),
        ],
        n_items,
        batch,
        cost,
        compute,
        1024,
        epochs=2,
        device="cpu",
    )
    assert [p.n_batches for p in points] == [n] * 3 and all(
        len(p.epochs_s) == 2 for p in points
    )
    assert points[0].epoch_s >= n * (load + compute)
    for p in points[1:]:
        assert p.epoch_s >= max(load + n * compute, math.ceil(n / 2) * load + compute)
    assert points[0].overhead_s == pytest.approx(points[0].epoch_s - n * compute)
    with pytest.raises(ValueError, match="pin_memory"):
        experiments.loader_sweep(
            [experiments.LoaderSetting(1, pin_memory=True)],
            4,
            2,
            0.0,
            0.01,
            4,
            1,
            "cpu",
        )
    assert (
        experiments.LoaderSetting(2, prefetch_factor=4, persistent_workers=True).label
        == "w=2 prefetch=4 persistent"
    )


def test_profile_loop_marks_a_data_wait_and_a_step_per_step(packed):
    root, rows, h = packed
    data = shards.PackedShards(root)
    slow = experiments.CostlyDataset(
        len(data), 0.002, base=experiments.ShardDataset(data)
    )
    cfg = tiny_config(n_layers=1, d_model=16, n_heads=2, vocab_size=400)
    line = experiments.profile_loop(
        cfg, DataLoader(slow, batch_size=2), 3, "cpu", "w=0", data.seq_len
    )
    assert [s.kind for s in line.spans] == ["data", "step"] * 3
    assert all(s.end_s > s.start_s >= 0 for s in line.spans)
    assert all(
        a.end_s <= b.start_s + 1e-6 for a, b in itertools.pairwise(line.spans)
    )  # in order, no overlap
    assert line.total_s("data") >= 3 * 2 * 0.002  # two rows of 2 ms slept per batch
    assert line.wall_s >= line.total_s("data") + line.total_s("step") - 1e-6


def test_step_time_ab_feeds_the_same_step_three_ways(packed, corpus, tok):
    root, rows, h = packed
    data = shards.PackedShards(root)
    cfg = tiny_config(
        n_layers=1, d_model=16, n_heads=2, vocab_size=tok.get_vocab_size()
    )
    ab = experiments.step_time_ab(
        cfg, tok, corpus.texts, data, batch=2, steps=3, device="cpu"
    )
    assert list(ab) == ["tokenise in loop", "pre-tokenised", "synthetic"]
    for t in ab.values():
        assert len(t.data_s) == len(t.compute_s) == 3 and t.tokens_per_step == 2 * 16
        assert (
            t.step_s > 0 and 0 <= t.idle_fraction < 1 and math.isfinite(t.tokens_per_s)
        )
    assert ab["pre-tokenised"].tokens_encoded == ab["synthetic"].tokens_encoded == 0


def test_attention_mask_cost_agrees_with_the_mask():
    row = np.array([5, 6, 0, 7, 8, 9, 0, 3, 4, 2, 1, 0, 5, 5, 5, 5])
    cost = experiments.attention_mask_cost(
        row, 0, n_heads=2, head_dim=8, device="cpu", repeats=2
    )
    assert cost.n_docs == 4 and cost.seq_len == 16
    assert cost.density == pytest.approx(packing.mask_density(row, 0))
    assert min(cost.causal_s, cost.masked_s, cost.per_doc_s) > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_h2d_copy_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        experiments.h2d_copy(1024, pinned=True, device="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_h2d_copy_pinned_returns_before_the_copy_ends():
    pinned = experiments.h2d_copy(64 * 2**20, pinned=True)
    pageable = experiments.h2d_copy(64 * 2**20, pinned=False)
    assert pinned.bytes_per_s > 0 and pageable.bytes_per_s > 0
    assert (
        pinned.host_return_s < pinned.seconds
    )  # asynchronous: returns before the DMA ends


# --- figures: what they draw ----------------------------------------------------------


def test_figures_draw_labelled_axes(packed):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlbook.input_pipeline import figures as figs

    root, rows, h = packed
    figures = [
        figs.padding_vs_seq_len([3, 50, 700, 9000], [64, 256, 1024], 4, 256, "test"),
        figs.document_mask(np.array([5, 0, 7, 8, 0, 1]), 0),
        figs.tokens_per_s_budget([("a", 1e6, "produce"), ("b", 1e3, "consume")], "CPU"),
        figs.timelines(
            [
                experiments.Timeline(
                    "w=0",
                    (experiments.Span("data", 0, 1), experiments.Span("step", 1, 2)),
                )
            ],
            "CPU",
        ),
    ]
    for fig in figures:
        for ax in fig.axes:  # a labelled axis, or categories named by their tick labels
            assert ax.get_xlabel() or any(t.get_text() for t in ax.get_xticklabels())
            assert ax.get_ylabel() or any(t.get_text() for t in ax.get_yticklabels())
        plt.close(fig)


def test_to_model_batch_widens_every_id_exactly():
    """ids at and above 2^15 travel as negative int16 and must come back unchanged."""
    ids = torch.tensor([[0, 1, 32767, 32768, 40000, 65535]])
    for dtype in (torch.uint16, torch.uint32, torch.int64):
        x, y = experiments.to_model_batch(ids.to(dtype), "cpu")
        assert (
            x.dtype == torch.int64
            and torch.equal(x, ids[:, :-1])
            and torch.equal(y, ids[:, 1:])
        )


def test_sleep_is_never_shorter_than_asked():
    assert experiments.sleep_s(0.001, repeats=5) >= 0.001
    with pytest.raises(ValueError, match="duration_s"):
        experiments.sleep_s(0)


@pytest.mark.parametrize(
    "w0_wait_s,w2_wait_s,verdict",
    [
        # steady state with workers that keep up: only the warm-up remains
        (1.0, 0.004, "workers hid most of the wait"),
        (1.0, 0.3, "workers hid most of the wait"),  # test sizes: short runs
        # one core for the trainer and two workers: they share it
        (1.0, 0.7, "workers hid some of the wait"),
        # process start-up and pickling cost more than the load they hide
        (1.0, 1.2, "workers hid none of the wait"),
        (1.0, 0.0, "workers hid most of the wait"),
    ],
)
def test_the_wait_verdict_on_synthetic_waits(w0_wait_s, w2_wait_s, verdict):
    from mlbook.input_pipeline.formulas import wait_verdict

    assert wait_verdict(w2_wait_s / w0_wait_s) == verdict


def test_the_wait_verdict_refuses_a_negative_ratio():
    from mlbook.input_pipeline.formulas import wait_verdict

    with pytest.raises(ValueError, match="wait_ratio"):
        wait_verdict(-0.1)


# --- the loop's timings to diagnose --------------------------------------------------


def test_two_workers_deliver_in_pairs_by_hand():
    """Load 0.5 s a batch, compute 0.2 s, 2 workers, no jitter. Both workers
    start at 0: batches 1 and 2 are ready at 0.5, 3 and 4 at 1.0, ...
    Step 1 waits 0.5 and ends at 0.7; batch 2 is ready: step 2 waits 0, ends
    at 0.9; batch 3 is ready at 1.0: step 3 waits 0.1, ends at 1.2; batch 4
    (1.0) is ready: step 4 waits 0; batch 5 at 1.5: step 5 waits 0.1. So a
    pair of steps takes 0.5 s, load / w per step, as the model says."""
    from mlbook.input_pipeline import artifacts

    log = artifacts.loader_log(0, 2, steps=6, jitter=0.0, load_s=0.5, compute_s=0.2)
    waits = [round(r.wait_s, 12) for r in log.rows]
    assert waits == [0.5, 0.0, 0.1, 0.0, 0.1, 0.0]
    assert log.loader_bound


def test_loader_log_refuses_bad_inputs():
    from mlbook.input_pipeline import artifacts

    with pytest.raises(ValueError, match="workers must be an integer"):
        artifacts.loader_log(1, -1)
    with pytest.raises(ValueError, match="seed must be an integer"):
        artifacts.loader_log(-3, 2)
    with pytest.raises(ValueError, match="steps"):
        artifacts.loader_log(1, 2, steps=0)
    with pytest.raises(ValueError, match="load_s"):
        artifacts.loader_log(1, 2, load_s=0.0)


def test_the_published_tokenizer_rate():
    """The tokenizers README: "less than 20 seconds to tokenize a GB of text on a
    server's CPU", at least 1e9 / 20 = 50 MB/s."""
    from mlbook.input_pipeline import formulas

    assert formulas.HF_TOKENIZERS_SERVER.bytes_per_s == 50e6
