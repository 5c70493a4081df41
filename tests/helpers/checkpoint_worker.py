"""Child processes for the checkpointing tests.

``serve`` (started once by tests/test_kill_anywhere.py)
    A fork server of the test's own: it imports torch, torch._dynamo (what an
    optimizer's constructor imports) and DCP once, runs one throw-away save
    outside the test's directories so that DCP's first-call set-up is done,
    then forks one ``save_with_stall`` child per request. Whatever fork
    server the rest of the suite started first (multiprocessing keeps one per
    process, with the preload of whoever started it), every kill costs a fork.

``save_with_stall`` (a child of ``serve``, one per kill)
    Saves one checkpoint of a small model whose state is a deterministic
    function of (step, version) (``deterministic_state``), with every
    file-system step of the save counted: each open of a file under the root,
    each tensor or byte item DCP writes, each fsync, mkdir, rename, replace,
    unlink and rmdir. With ``stall_at=k`` it stops just before the k-th such
    step, tells the parent ("stall", k, label) and sleeps, so the parent can
    end it with SIGKILL at exactly that point. Without it, it finishes and
    sends ("done", events): the list of (label, seconds since the save
    began), which is how the parent learns the offsets to try.

``ranks_main`` (``fork_group(ranks_main, [ROOT], nproc=2)``, as
tests/test_checkpointing.py runs it), or by hand under torchrun:
    python -m torch.distributed.run --nproc-per-node 2 \\
            -m tests.helpers.checkpoint_worker ranks ROOT
        Two gloo ranks: a DDP model and a ShardedSampler per rank, a
        synchronous and an async save, then a load into fresh objects on every
        rank. Each rank writes ROOT/result-rank<r>.json.

Every wait is bounded: a child that is not killed exits after 60 s.
"""

from __future__ import annotations

import builtins
import importlib
import io
import json
import multiprocessing
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler


def _model(fill: float | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    )
    if fill is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(fill)
    return model


# --- kill anywhere --------------------------------------------------------------------


def deterministic_state(step: int, version: int = 1):
    """A small model and its AdamW state after one step, both a deterministic
    function of (step, version) on the CPU: what the parent expects to load
    back, bit for bit, from the checkpoint of that step."""
    torch.manual_seed(1000 * step + version)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()
    return model, opt


def save_state(
    root, step: int, version: int, keep_last: int, async_: bool = False
) -> None:
    """Save deterministic_state(step, version) as the checkpoint of ``step``."""
    ckpt = Checkpointer(root, keep_last=keep_last)
    model, opt = deterministic_state(step, version)
    ckpt.save(step, model, opt, extra={"step": step, "version": version}, async_=async_)
    ckpt.close()


class _Counter:
    """Counts file-system steps under ``root`` while armed; stalls at ``stall_at``."""

    def __init__(self, root: Path, stall_at: int | None, conn):
        self.root, self.stall_at, self.conn = str(root), stall_at, conn
        self.events: list[tuple[str, float]] = []
        self.armed, self.t0 = False, 0.0
        self.lock = threading.Lock()

    def under_root(self, path) -> bool:
        try:
            return os.fspath(path).startswith(self.root)
        except TypeError:  # a file descriptor
            return False

    def hit(self, label: str) -> None:
        if not self.armed:
            return
        with self.lock:
            self.events.append((label, time.perf_counter() - self.t0))
            k = len(self.events)
        if k == self.stall_at:
            self.conn.send(("stall", k, label))
            time.sleep(60)
            os._exit(3)  # never killed: the parent sees exit code 3 and fails


def _short(root: str, path) -> str:
    """The path under the root, an atomic write's random temporary name as
    ``.NAME.tmp`` (so that every child's steps carry the same labels)."""
    short = os.fspath(path).removeprefix(root).lstrip("/")
    return re.sub(r"^(\.[^/]+)\.[0-9a-f]{8}\.tmp$", r"\1.tmp", short)


def _install(counter: _Counter) -> None:
    # imported here, not with the module: the tests that import this module
    # (collection, in every worker) need none of DCP (and its sympy)
    import torch.distributed.checkpoint.filesystem as dcp_fs

    real = {
        name: getattr(os, name)
        for name in ("fsync", "replace", "rename", "unlink", "rmdir", "mkdir")
    }
    real_open, real_write_item = builtins.open, dcp_fs._write_item
    root = counter.root

    def two_paths(name):
        def f(src, dst, *a, **kw):
            if counter.under_root(src):
                counter.hit(f"{name} {_short(root, src)} -> {_short(root, dst)}")
            return real[name](src, dst, *a, **kw)

        return f

    def one_path(name):
        def f(path, *a, **kw):
            # rmtree passes names relative to a directory descriptor (dir_fd=...)
            if counter.under_root(path) or kw.get("dir_fd") is not None:
                counter.hit(f"{name} {_short(root, path)}")
            return real[name](path, *a, **kw)

        return f

    def fsync(fd):
        counter.hit("fsync")
        return real["fsync"](fd)

    def open_(file, mode="r", *a, **kw):
        if counter.under_root(file) and any(c in mode for c in "wax+"):
            counter.hit(f"open {_short(root, file)}")
        return real_open(file, mode, *a, **kw)

    def write_item(*a, **kw):
        counter.hit(
            f"write item {a[3].index.fqn}"
        )  # (transforms, stream, data, write_item, ...)
        return real_write_item(*a, **kw)

    os.fsync, os.replace, os.rename = fsync, two_paths("replace"), two_paths("rename")
    os.unlink, os.rmdir, os.mkdir = (
        one_path("unlink"),
        one_path("rmdir"),
        one_path("mkdir"),
    )
    builtins.open = io.open = open_
    dcp_fs._write_item = write_item


def save_with_stall(
    root: str,
    step: int,
    version: int,
    keep_last: int,
    async_: bool,
    stall_at: int | None,
    conn,
) -> None:
    """The child of one kill: save (step, version) under ``root`` with every
    file-system step counted, stalling before step ``stall_at`` (see the
    module docstring). Sends ("done", events) if it is not stopped."""
    torch.set_num_threads(1)
    counter = _Counter(Path(root), stall_at, conn)
    ckpt = Checkpointer(
        root, keep_last=keep_last
    )  # recovery runs here, before counting
    model, opt = deterministic_state(step, version)
    _install(counter)
    counter.t0, counter.armed = time.perf_counter(), True
    ckpt.save(step, model, opt, extra={"step": step, "version": version}, async_=async_)
    ckpt.wait()
    counter.armed = False
    conn.send(("done", counter.events))


def _threads() -> tuple[int, int]:
    """(Python threads, native threads) of this process (Linux)."""
    return threading.active_count(), len(os.listdir("/proc/self/task"))


def serve(conn) -> None:
    """The kill-anywhere fork server (see the module docstring).

    Requests on ``conn``: ("save", root, step, version, keep_last, async_,
    stall_at) forks a child running ``save_with_stall`` and answers (pid,
    message) once the child stalled or finished, or (pid, ("timeout",)) if
    it did neither within 60 s; ("reap",) answers the last child's exit code
    once it has ended (the caller kills a stalled child first). A save
    requested before the last child was reaped (its caller failed) kills that
    child first. None, or the caller gone, ends the server. Every fork is
    made while this process runs one Python thread and no more native threads
    than importing torch left (as in multiprocessing's forkserver), so no child
    inherits a lock that a busy thread held."""
    importlib.import_module("torch.distributed.checkpoint.filesystem")
    imported = _threads()
    importlib.import_module("torch._dynamo")  # so that no child imports it
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="kill-anywhere-warm-up-") as scratch:
        save_state(Path(scratch) / "ckpt", 1, 1, keep_last=1)
    fork = multiprocessing.get_context("fork")
    conn.send(("ready", imported, _threads()))
    last = None
    try:
        while (request := conn.recv()) is not None:
            if request == ("reap",):
                last.join(30)
                conn.send(last.exitcode)
                last = None
                continue
            if last is not None:
                last.kill()
                last.join()
            python, native = _threads()
            if python != 1 or native > imported[1]:
                raise RuntimeError(
                    f"the fork server runs {python} Python and {native} native "
                    f"threads; importing torch left {imported}"
                )
            parent, child = fork.Pipe(duplex=False)
            last = fork.Process(target=save_with_stall, args=(*request[1:], child))
            last.start()
            child.close()
            if parent.poll(60):
                conn.send((last.pid, parent.recv()))
            else:
                last.kill()
                conn.send((last.pid, ("timeout",)))
            parent.close()
    except EOFError:  # the test process is gone
        pass
    finally:
        if last is not None:
            last.kill()
            last.join()


# --- two ranks ------------------------------------------------------------------------


def ranks(root: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"rank": rank, "world": world}
    try:
        model = DDP(_model())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sampler = ShardedSampler(64, rank=rank, world_size=world, seed=7)
        ckpt = Checkpointer(Path(root) / "ckpt", keep_last=2)
        stream = iter(sampler)
        for step in range(1, 5):
            idx = torch.tensor([next(stream) for _ in range(4)])
            x = torch.randn(
                4, 32, generator=torch.Generator().manual_seed(int(idx.sum()))
            )
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            ckpt.save(step, model, opt, sampler=sampler, async_=(step == 4))
        ckpt.wait()
        ref = {k: v.clone() for k, v in model.module.state_dict().items()}
        ref_rng = torch.rand(3).tolist()
        result["steps"] = ckpt.steps()
        result["latest"] = ckpt.latest().name

        fresh = DDP(_model(fill=0.5))
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
        fresh_sampler = ShardedSampler(64, rank=rank, world_size=world, seed=7)
        torch.manual_seed(999)
        loaded = ckpt.load(fresh, fresh_opt, sampler=fresh_sampler)
        result["loaded_step"] = loaded.step
        result["weights_equal"] = all(
            torch.equal(ref[k], v) for k, v in fresh.module.state_dict().items()
        )
        result["rng_equal"] = torch.rand(3).tolist() == ref_rng
        result["sampler"] = fresh_sampler.state_dict()
        result["next_index"] = next(iter(fresh_sampler))
        result["expected_next_index"] = next(stream)
        ckpt.close()
        result["ok"] = True
    except Exception as exc:  # reported to the parent test, not swallowed
        result["error"] = repr(exc)
    finally:
        Path(root, f"result-rank{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()


def ranks_main(argv: list[str]) -> None:
    """``ranks`` as a fork_group body: one thread per rank, as OMP_NUM_THREADS=1
    gives a torchrun worker."""
    torch.set_num_threads(1)
    ranks(argv[0])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "ranks":
        ranks(sys.argv[2])
    else:
        raise SystemExit(__doc__)
