"""The DCP training-state checkpointer, the resumable sampler,
and the chapter's runs."""

import json
import os
import random

import numpy as np
import pytest
import torch

from mlbook.cadence import experiments as cx
from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler
from mlbook.common_torch.launch import fork_group
from mlbook.common_torch.timing import cpu_threads
from tests.helpers import checkpoint_worker as worker

# DCP says on every call outside a process group that it assumes one
# process: intended here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small models; threads only fight each other on a shared CPU. Scoped to
    this module so that later tests keep torch's default thread count."""
    with cpu_threads(1):
        yield


TINY = cx.RunSpec(
    n_layers=1,
    d_model=32,
    n_heads=2,
    vocab_size=64,
    seq_len=16,
    batch_size=4,
    n_samples=128,
    steps=12,
    warmup=3,
)


# --- the sampler -------------------------------------------------------------------


def test_sampler_shards_are_disjoint_and_cover_the_epoch():
    n, world = 103, 4
    shards = [
        list(ShardedSampler(n, rank=r, world_size=world, seed=1)) for r in range(world)
    ]
    assert all(len(s) == n // world for s in shards)
    flat = [i for s in shards for i in s]
    assert len(set(flat)) == len(flat) == (n // world) * world
    perm = ShardedSampler(n, seed=1).permutation(0).tolist()
    assert set(flat) == set(
        perm[: (n // world) * world]
    )  # only the uneven tail is dropped


def test_sampler_epochs_differ_and_are_deterministic():
    a, b = ShardedSampler(50, seed=3), ShardedSampler(50, seed=3)
    e0, e1 = list(a), list(a)
    assert e0 == list(b) and e1 == list(b)
    assert e0 != e1 and sorted(e0) == sorted(e1) == list(range(50))
    assert a.epoch == 2
    assert list(ShardedSampler(50, seed=4)) != e0
    assert list(ShardedSampler(10, shuffle=False)) == list(range(10))


def test_sampler_resumes_mid_epoch():
    ref = ShardedSampler(40, rank=1, world_size=2, seed=9)
    stream = iter(ref)
    first = [next(stream) for _ in range(7)]
    state = ref.state_dict()
    rest = list(stream) + list(ref)  # the rest of epoch 0, then epoch 1
    resumed = ShardedSampler(40, rank=1, world_size=2, seed=9)
    resumed.load_state_dict(state)
    assert list(resumed) + list(resumed) == rest
    assert state["offset"] == 7 and len(first) == 7


def test_sampler_at_epoch_end_rolls_over():
    s = ShardedSampler(8, seed=0)
    stream = iter(s)
    for _ in range(8):
        next(stream)
    state = s.state_dict()  # epoch used up, generator not yet closed
    t = ShardedSampler(8, seed=0)
    t.load_state_dict(state)
    assert list(t) == s.permutation(1).tolist()


def test_sampler_reshards_when_world_size_changes():
    n = 64
    old = [ShardedSampler(n, rank=r, world_size=2, seed=5) for r in range(2)]
    for s in old:
        stream = iter(s)
        for _ in range(10):
            next(stream)
    consumed = {i for s in old for i in s.permutation(0)[s.rank : 20 : 2].tolist()}
    new = [ShardedSampler(n, rank=r, world_size=4, seed=5) for r in range(4)]
    for s in new:
        s.load_state_dict(old[0].state_dict())
    rest = [i for s in new for i in s]
    perm = old[0].permutation(0).tolist()
    assert set(rest) | consumed == set(perm[: 20 + 4 * ((n - 20) // 4)])
    assert not set(rest) & consumed and len(set(rest)) == len(rest)
    assert old[0].global_position() == 20


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="n_samples"):
        ShardedSampler(0)
    with pytest.raises(ValueError, match="rank"):
        ShardedSampler(10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        ShardedSampler(10, world_size=0)
    with pytest.raises(ValueError, match="seed"):
        ShardedSampler(10, seed=1.5)
    with pytest.raises(ValueError, match="n_samples=3"):
        ShardedSampler(3, world_size=4)
    with pytest.raises(ValueError, match="consumed"):
        ShardedSampler(10).state_dict(consumed=-1)
    with pytest.raises(ValueError, match="seed"):
        ShardedSampler(10, seed=1).load_state_dict(
            ShardedSampler(10, seed=2).state_dict()
        )


# --- the checkpointer in one process --------------------------------------------------


def _trained(spec=TINY, steps=4):
    run = cx.build_run(spec)
    cx.train(run, steps)
    return run


def test_round_trip_restores_everything(tmp_path):
    run = _trained()
    ckpt = Checkpointer(tmp_path)
    ckpt.save(
        run.done,
        run.model,
        run.optimizer,
        run.scheduler,
        run.sampler,
        extra={"note": "x"},
    )
    w, opt_sd = cx.weights(run), run.optimizer.state_dict()
    draws = (random.random(), np.random.rand(), torch.rand(2))
    fresh = cx.build_run(TINY)
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    loaded = ckpt.load(fresh.model, fresh.optimizer, fresh.scheduler, fresh.sampler)
    assert loaded.step == 4 and loaded.extra == {"note": "x"} and loaded.rng_restored
    assert all(torch.equal(w[k], v) for k, v in cx.weights(fresh).items())
    got = fresh.optimizer.state_dict()
    for i, st in opt_sd["state"].items():
        for k, v in st.items():
            assert torch.equal(v, got["state"][i][k]), (i, k)
    assert got["param_groups"][0]["lr"] == opt_sd["param_groups"][0]["lr"]
    assert fresh.scheduler.state_dict() == run.scheduler.state_dict()
    assert fresh.sampler.state_dict() == run.sampler.state_dict()
    assert (random.random(), np.random.rand()) == draws[:2] and torch.equal(
        torch.rand(2), draws[2]
    )


def test_keep_last_and_milestones(tmp_path):
    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path, keep_last=2, keep_every=4)
    for step in range(1, 10):
        ckpt.save(step, run.model, run.optimizer)
    assert ckpt.steps() == [4, 8, 9]
    assert ckpt.latest() == ckpt.path(9)
    assert (tmp_path / "latest").read_text().strip() == "step-00000009"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "step-00000004",
        "step-00000008",
        "step-00000009",
    ]
    ckpt2 = Checkpointer(tmp_path / "b", keep_last=1)
    for step in (1, 2, 3):
        ckpt2.save(step, run.model, run.optimizer)
    assert ckpt2.steps() == [3]


def test_latest_pointer_wins_and_falls_back(tmp_path):
    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path, keep_last=5)
    for step in (10, 20):
        ckpt.save(step, run.model, run.optimizer)
    ckpt.save(
        15, run.model, run.optimizer
    )  # a rewind: the pointer names 15, not the highest
    assert ckpt.latest() == ckpt.path(15)
    (tmp_path / "latest").unlink()
    assert ckpt.latest() == ckpt.path(20)
    (tmp_path / "latest").write_text("step-00000099\n")  # stale pointer
    assert ckpt.latest() == ckpt.path(20)
    assert Checkpointer(tmp_path / "empty").latest() is None


def test_same_step_saved_again_replaces_it(tmp_path):
    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(3, run.model, run.optimizer, extra={"v": 1})
    ckpt.save(3, run.model, run.optimizer, extra={"v": 2})
    fresh = cx.build_run(TINY)
    assert ckpt.load(fresh.model, fresh.optimizer).extra == {"v": 2}
    assert ckpt.steps() == [3]


def test_async_save_is_a_snapshot(tmp_path):
    run = _trained(steps=2)
    ckpt = Checkpointer(tmp_path)
    w = cx.weights(run)
    stats = ckpt.save(2, run.model, run.optimizer, async_=True)
    with torch.no_grad():  # training goes on while the write runs
        for p in run.model.parameters():
            p.add_(1.0)
    ckpt.wait()
    assert (
        stats.async_ and stats.total_s is not None and stats.total_s >= stats.blocking_s
    )
    fresh = cx.build_run(TINY)
    ckpt.load(fresh.model, fresh.optimizer)
    assert all(torch.equal(w[k], v) for k, v in cx.weights(fresh).items())


def test_async_then_sync_then_close(tmp_path):
    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path, keep_last=3)
    ckpt.save(1, run.model, run.optimizer, async_=True)
    ckpt.save(2, run.model, run.optimizer, async_=True)  # waits for step 1 first
    ckpt.save(3, run.model, run.optimizer)
    ckpt.close()
    assert ckpt.steps() == [1, 2, 3] and len(ckpt.history) == 3


def test_a_background_save_that_never_ends_is_a_bounded_wait(tmp_path, monkeypatch):
    """wait() gives up on a writer that stopped, naming the step and the folder."""
    from concurrent.futures import Future

    from mlbook.common_torch import checkpoint

    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path)
    monkeypatch.setattr(checkpoint.dcp, "async_save", lambda state, **kw: Future())
    monkeypatch.setattr(checkpoint, "ASYNC_SAVE_WAIT_S", 0.2)
    ckpt.save(1, run.model, run.optimizer, async_=True)
    with pytest.raises(TimeoutError, match="background save of step 1 to .*step"):
        ckpt.wait()


def test_load_model_alone(tmp_path):
    run = _trained(steps=2)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(2, run.model, run.optimizer)
    fresh = cx.build_run(TINY)
    assert ckpt.load_model(fresh.model) == ckpt.path(2)
    assert all(torch.equal(cx.weights(run)[k], v) for k, v in cx.weights(fresh).items())
    assert len(fresh.optimizer.state) == 0


def test_checkpointer_bad_input(tmp_path):
    run = _trained(steps=1)
    with pytest.raises(ValueError, match="keep_last"):
        Checkpointer(tmp_path, keep_last=0)
    with pytest.raises(ValueError, match="keep_every"):
        Checkpointer(tmp_path, keep_every=-2)
    ckpt = Checkpointer(tmp_path)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="step"):
            ckpt.save(bad, run.model, run.optimizer)
    with pytest.raises(FileNotFoundError):
        ckpt.load(run.model, run.optimizer)
    with pytest.raises(FileNotFoundError):
        ckpt.load_model(run.model)
    ckpt.save(1, run.model, run.optimizer)
    with pytest.raises(FileNotFoundError, match="step 7"):
        ckpt.load(run.model, run.optimizer, step=7)
    with pytest.raises(ValueError, match="scheduler"):
        ckpt.load(run.model, run.optimizer, scheduler=run.scheduler)
    with pytest.raises(ValueError, match="sampler"):
        ckpt.load(run.model, run.optimizer, sampler=run.sampler)


# --- two ranks in a process group -----------------------------------------------------


def test_two_gloo_ranks(tmp_path):
    """Two ranks of a gloo group (forked from fork_group's warm server with
    torchrun's environment; the faults tests cover torchrun itself)."""
    launch = fork_group(worker.ranks_main, [str(tmp_path)], nproc=2, timeout_s=240)
    assert launch.returncode == 0, launch.output[-3000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"result-rank{rank}.json").read_text())
        assert r.get("ok"), r
        assert (
            r["steps"] == [3, 4]
            and r["latest"] == "step-00000004"
            and r["loaded_step"] == 4
        )
        assert r["weights_equal"] and r["rng_equal"]
        assert r["sampler"]["offset"] == 16 and r["sampler"]["rank"] == rank
        assert r["next_index"] == r["expected_next_index"]


# --- the chapter's experiments --------------------------------------------------------


def test_exact_resume_is_bitwise_and_naive_is_not(tmp_path):
    spec = cx.RunSpec(
        n_layers=1,
        d_model=32,
        n_heads=2,
        vocab_size=64,
        seq_len=16,
        batch_size=4,
        n_samples=128,
        steps=16,
        warmup=3,
    )
    r = cx.resume_experiment(spec, tmp_path, save_every=5, crash_at=8)
    assert r.resumed_from == 5 and r.lost_steps == 3
    assert (
        r.exact_losses_equal
        and r.exact_weights_equal
        and r.exact_max_weight_diff == 0.0
    )
    assert r.exact_extra == r.exact_missing == 0
    # the naive resume restarts the stream at the checkpoint's step 5:
    # steps 6..16 of the resumed run read the batches of steps 1..11, so it sees
    # the 5 batches of steps 1..5 twice and never the 5 of steps 12..16 (128 samples,
    # one epoch covers 32 steps)
    assert r.naive_extra == r.naive_missing == 5 * spec.batch_size
    assert r.naive_max_weight_diff > 0 and r.naive_max_loss_diff > 0
    assert len(r.ref_losses) == 16 and len(r.exact_losses) == len(r.naive_losses) == 11


def test_without_dataloader_generator_the_resume_would_drift(tmp_path):
    # the fix in Run.next_batch matters: a DataLoader iterator draws from the global RNG
    torch.manual_seed(0)
    before = torch.get_rng_state()
    iter(torch.utils.data.DataLoader(range(4)))
    assert not torch.equal(before, torch.get_rng_state())
    torch.manual_seed(0)
    iter(
        torch.utils.data.DataLoader(
            range(4), generator=torch.Generator().manual_seed(0)
        )
    )
    assert torch.equal(before, torch.get_rng_state())


def test_compare_save_modes(tmp_path):
    spec = cx.RunSpec(
        n_layers=1,
        d_model=32,
        n_heads=2,
        vocab_size=64,
        seq_len=16,
        batch_size=4,
        n_samples=128,
        steps=6,
        warmup=2,
    )
    m = cx.compare_save_modes(spec, tmp_path, save_every=3)
    assert set(m.modes) == {"none", "sync", "async"} and m.device.endswith("1 thread")
    assert (
        m["none"].blocking_s == ()
        and len(m["sync"].blocking_s) == len(m["async"].blocking_s) == 2
    )
    assert all(
        t is not None and t >= b
        for t, b in zip(m["async"].total_s, m["async"].blocking_s, strict=True)
    )
    assert m["sync"].checkpoint_bytes > 0 and len(m["none"].step_s) == 6
    assert m["none"].checkpoint_bytes == 0


def test_experiment_bad_input(tmp_path):
    with pytest.raises(ValueError, match="crash_at"):
        cx.resume_experiment(TINY, tmp_path, save_every=5, crash_at=3)
    with pytest.raises(ValueError, match="crash_at"):
        cx.resume_experiment(TINY, tmp_path, save_every=5, crash_at=TINY.steps)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="save_every"):
            cx.resume_experiment(TINY, tmp_path, save_every=bad, crash_at=6)
        with pytest.raises(ValueError, match="save_every"):
            cx.compare_save_modes(TINY, tmp_path, save_every=bad)
    with pytest.raises(ValueError, match="threads"):
        cx.resume_experiment(TINY, tmp_path, save_every=5, crash_at=6, threads=0)
    with pytest.raises(ValueError, match="batch_size"):
        cx.RunSpec(batch_size=9, n_samples=8)
    with pytest.raises(ValueError, match="dropout"):
        cx.RunSpec(dropout=1.0)
    with pytest.raises(ValueError, match="steps"):
        cx.RunSpec(steps=0)
    run = cx.build_run(TINY)
    with pytest.raises(ValueError, match="save_every"):
        cx.train(run, 2, save_every=2)
    cx.train(run, 2)
    with pytest.raises(ValueError, match="until"):
        cx.train(run, 1)


def test_a_new_checkpointer_cleans_up_after_a_crash(tmp_path):
    """What a save killed halfway leaves (tests/test_kill_anywhere.py makes the real
    thing): a moved-aside copy whose replacement never arrived goes back; a
    half-pruned checkpoint, an unfinished .tmp- directory and a stray pointer
    temporary go."""
    run = _trained(steps=1)
    ckpt = Checkpointer(tmp_path, keep_last=5)
    for step in (1, 2, 3):
        ckpt.save(step, run.model, run.optimizer, extra={"step": step})
    os.replace(tmp_path / "step-00000003", tmp_path / ".replaced-step-00000003")
    (
        tmp_path / "step-00000001" / "COMPLETE"
    ).unlink()  # pruning killed after the marker
    (tmp_path / ".tmp-step-00000004").mkdir()
    (tmp_path / ".latest.tmp").write_text("step-00000004\n")
    again = Checkpointer(tmp_path, keep_last=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "step-00000002",
        "step-00000003",
    ]
    fresh = cx.build_run(TINY)
    assert again.load(fresh.model, fresh.optimizer).extra == {"step": 3}
    # a moved-aside copy whose replacement did arrive is simply removed
    ckpt.save(3, run.model, run.optimizer, extra={"step": 3, "again": True})
    os.replace(tmp_path / "step-00000002", tmp_path / ".replaced-step-00000003")
    Checkpointer(tmp_path, keep_last=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000003"]
    assert again.load(fresh.model, fresh.optimizer).extra == {"step": 3, "again": True}


def test_sequential_write_times_every_byte_and_leaves_no_file(tmp_path, monkeypatch):
    """The large-file probe writes exactly nbytes of random bytes, in chunks, into
    a new file, fsyncs it once a repeat, and removes it; a fake clock that
    advances 0.5 s a reading gives 0.5 s a repeat."""
    written, synced = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(cx.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    ticks = iter(range(100))
    monkeypatch.setattr(cx.time, "perf_counter", lambda: 0.5 * next(ticks))
    path = tmp_path / "large.bin"
    real_open = open

    def spy_open(p, mode="r", *a, **k):
        f = real_open(p, mode, *a, **k)
        if "w" in mode:
            write = f.write
            f.write = lambda b: (written.append(bytes(b)), write(b))[1]
        return f

    monkeypatch.setattr("builtins.open", spy_open)
    seq = cx.sequential_write(path, 10_000, repeats=3, chunk_bytes=4096)
    monkeypatch.undo()
    assert not path.exists() and list(tmp_path.iterdir()) == []
    assert [len(b) for b in written] == [4096, 4096, 1808] * 3
    assert b"".join(written[:3]) == b"".join(written[3:6])  # the same bytes
    assert len(set(b"".join(written[:3]))) > 200  # random, not zeros
    assert len(synced) == 3
    assert seq.nbytes == 10_000 and seq.seconds == (0.5, 0.5, 0.5)
    assert seq.median_s == 0.5 and seq.bytes_per_s == 20_000
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="nbytes must"):
            cx.sequential_write(path, bad)
        with pytest.raises(ValueError, match="repeats must"):
            cx.sequential_write(path, 10, repeats=bad)
        with pytest.raises(ValueError, match="chunk_bytes must"):
            cx.sequential_write(path, 10, chunk_bytes=bad)
