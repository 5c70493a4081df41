"""Resumable training state on torch.distributed.checkpoint (DCP).

Two pieces, both usable in a single process and inside an initialised
process group (every rank calls the same methods in the same order):

``Checkpointer``
    Saves and loads the whole training state: model and optimizer (through
    ``torch.distributed.checkpoint.state_dict``, so DDP/FSDP wrappers are
    handled), the LR schedule, the RNG states (Python, NumPy, torch and CUDA)
    and the data position (a ``ShardedSampler``'s epoch seed, epoch and
    per-rank offset), synchronously with ``dcp.save`` or in the background
    with ``dcp.async_save``. Layout under ``root``::

        root/step-00000040/      a published checkpoint (DCP files + COMPLETE)
        root/latest              the name of the newest published checkpoint
        root/.tmp-step-00000050/ a checkpoint being written (never loaded)
        root/.replaced-step-00000040/  step 40's previous copy, while step 40
                                 is being published again (e.g. after a rewind)

    A checkpoint is written into a ``.tmp-`` directory; only when DCP has
    finished (its ``.metadata`` is written after every rank's data) does rank
    0 write the ``COMPLETE`` marker, rename the directory to ``step-N``
    (atomic on POSIX) and replace ``latest`` atomically. Publishing a step
    that already exists first moves the old copy aside, complete, and removes
    it only once the new one is in place. ``keep_last`` checkpoints are kept,
    plus every ``keep_every``-th step as a milestone; older ones are pruned
    after each publish, each one unpublished (marker removed) before its
    files are deleted.

    A process killed at any moment of a save (SIGKILL included: nothing runs
    on the way out) therefore leaves a checkpoint that ``load`` restores
    bitwise: the previous latest one until ``latest`` names the new one (for a
    re-published step, until the new copy is renamed into place), the new one
    after. The next ``Checkpointer`` on the same root (rank 0, in its
    constructor) finishes the clean-up: it deletes unfinished ``.tmp-``
    directories and half-pruned checkpoints, and puts a moved-aside copy back
    when its replacement never arrived. tests/test_kill_anywhere.py kills a
    save at every file-system step, synchronous and async.

``ShardedSampler``
    A deterministic, resumable, rank-sharded sampler: epoch ``e`` is a
    permutation seeded by ``seed + e``; sample ``g`` of that stream goes to
    rank ``g % world_size``. Its state is (seed, epoch, base, offset), so a
    resumed run continues from the same position of the same shuffled stream
    and, with a different world size, re-shards the rest of the epoch.

Typical use::

    ckpt = Checkpointer(tmpdir, keep_last=3)
    if ckpt.latest() is not None:
        step = ckpt.load(model, opt, scheduler=sched, sampler=sampler).step
    ...
    ckpt.save(step, model, opt, scheduler=sched, sampler=sampler, async_=True)
    ...
    ckpt.close()            # waits for a pending async save and publishes it

Stable API (other chapters build on it): ``Checkpointer(root, keep_last,
keep_every, process_group)`` with ``save``, ``wait``, ``close``, ``load``,
``load_model``, ``latest``, ``steps``, ``path`` and ``is_complete``, returning
``SaveStats`` and ``Loaded``; ``ShardedSampler(n_samples, rank, world_size,
seed, shuffle)`` with ``state_dict``/``load_state_dict``, ``permutation``,
``global_position``; ``directory_bytes``. One Checkpointer per root at a time:
a new one cleans up what it takes to be a crashed save's leftovers.

Checkpoints hold pickled Python objects (RNG and sampler state): load only
checkpoints you wrote.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import shutil
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from mlbook.common import validate
from mlbook.common.files import write_atomic


def _dcp():
    """torch.distributed.checkpoint, imported where a save or a load needs it:
    it brings in sympy, about 700 modules (2 s an import here, and 5.6 s more
    the first time, when they are compiled), which a process importing this
    module for anything else (every test worker's collection) need not pay.
    ``checkpoint.dcp`` still names it (module __getattr__)."""
    import torch.distributed.checkpoint as dcp

    return dcp


def _get_state_dict(*args, **kwargs):
    """DCP's get_state_dict, imported as _dcp is."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(*args, **kwargs)


def _set_state_dict(*args, **kwargs):
    """DCP's set_state_dict, imported as _dcp is."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    return set_state_dict(*args, **kwargs)


def __getattr__(name: str):
    if name == "dcp":
        return _dcp()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MARKER = "COMPLETE"
LATEST = "latest"
# How long wait() waits for a background save to be written: far beyond any
# save here (milliseconds to seconds), so only a writer that stopped reaches it.
ASYNC_SAVE_WAIT_S = 300.0
_PREFIX = "step-"
_TMP_PREFIX = ".tmp-step-"
# a published step moved aside while the same step is re-published
_REPLACED_PREFIX = ".replaced-step-"

# Outside a process group DCP warns on every call (also from async_save's
# background thread) that it assumes a single process: that is the intent.
warnings.filterwarnings(
    "ignore", message="torch.distributed is disabled, unavailable or uninitialized"
)


def _dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _dist_on() else 0


def _world() -> int:
    return dist.get_world_size() if _dist_on() else 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the data position -----------------------------------------------------------


class ShardedSampler(torch.utils.data.Sampler):
    """Deterministic, resumable sampler that gives each rank its share of an epoch.

    Epoch ``e`` shuffles ``range(n_samples)`` with a generator seeded by
    ``seed + e`` (the same permutation on every rank). Starting at position
    ``base`` of that permutation, rank ``r`` of ``world_size`` takes
    ``perm[base + r :: world_size]``, cut to an equal length on every rank (the
    tail that does not divide evenly is dropped, as DistributedSampler does
    with drop_last=True). ``offset`` counts the indices this rank has handed
    out in the current epoch; iterating resumes from it and, at the end of an
    epoch, moves to the next epoch with ``base = offset = 0``.

    The offset counts what was handed out, which is what the training loop
    consumed when a DataLoader has ``num_workers=0`` (it pulls indices one
    batch at a time). With worker processes prefetching, save the loop's own
    count instead (``state_dict(consumed=...)``).
    """

    def __init__(
        self,
        n_samples: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
    ):
        self.n_samples = validate.positive_int("n_samples", n_samples)
        self.world_size = validate.positive_int("world_size", world_size)
        if (
            not isinstance(rank, int)
            or isinstance(rank, bool)
            or not 0 <= rank < world_size
        ):
            raise ValueError(
                f"rank must be an integer in [0, world_size={world_size}), got {rank!r}"
            )
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if n_samples < world_size:
            raise ValueError(
                f"n_samples={n_samples} must be at least world_size={world_size}"
            )
        self.rank, self.seed, self.shuffle = rank, seed, bool(shuffle)
        self.epoch = 0
        self.base = (
            0  # position of the epoch's stream where the current sharding starts
        )
        self.offset = 0  # indices this rank has handed out since ``base``

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's order of all samples, identical on every rank."""
        if not self.shuffle:
            return torch.arange(self.n_samples)
        g = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.n_samples, generator=g)

    def _shard(self) -> torch.Tensor:
        rest = self.n_samples - self.base
        per_rank = rest // self.world_size
        perm = self.permutation(self.epoch)
        return perm[self.base + self.rank :: self.world_size][:per_rank]

    def __len__(self) -> int:
        """Indices left in the current epoch for this rank."""
        return max(0, (self.n_samples - self.base) // self.world_size - self.offset)

    def __iter__(self):
        if len(self) == 0:  # the last epoch was used up: start the next one
            self._next_epoch()
        shard = self._shard().tolist()
        while self.offset < len(shard):
            i = shard[self.offset]
            self.offset += 1
            yield i
        self._next_epoch()

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.base = self.offset = 0

    def global_position(self) -> int:
        """Samples of this epoch's stream consumed by all ranks together (ranks
        move in lockstep)."""
        return self.base + self.offset * self.world_size

    def state_dict(self, consumed: int | None = None) -> dict:
        """The data position: epoch seed, epoch, and this rank's offset.

        ``consumed`` overrides the offset with the number of this epoch's
        samples the loop really used on this rank (for prefetching loaders).
        """
        offset = self.offset if consumed is None else consumed
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(
                f"consumed must be an integer at or above 0, got {consumed!r}"
            )
        return {
            "n_samples": self.n_samples,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "base": self.base,
            "offset": offset,
            "world_size": self.world_size,
            "rank": self.rank,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved position; re-shards if the world size changed."""
        for key in ("n_samples", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"checkpointed sampler has {key}={state[key]!r}, "
                    f"this sampler has {getattr(self, key)!r}: not the same data stream"
                )
        self.epoch = state["epoch"]
        if state["world_size"] == self.world_size:
            self.base, self.offset = state["base"], state["offset"]
        else:  # the rest of the epoch is dealt out again over the new ranks
            self.base = state["base"] + state["offset"] * state["world_size"]
            self.offset = 0


# --- the checkpointer ----------------------------------------------------------


@dataclass
class Loaded:
    """What ``Checkpointer.load`` restored."""

    step: int
    path: Path
    extra: dict = field(default_factory=dict)
    rng_restored: bool = True


@dataclass
class SaveStats:
    """Timing of one save: ``blocking_s`` is how long training was stalled."""

    step: int
    async_: bool
    blocking_s: float
    total_s: float | None = (
        None  # until the checkpoint was published (set later for async)
    )


def _rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """Training-state checkpoints under ``root`` with atomic publication.

    Args:
        root: directory that holds the checkpoints (created if missing).
        keep_last: how many of the newest checkpoints to keep (at least 1).
        keep_every: also keep every checkpoint whose step is a multiple of
            this (milestones); None keeps no milestones.
        process_group: the group DCP coordinates over. Inside an initialised
            default group, None makes a dedicated gloo group (so a background
            save never shares a communicator with training); every rank must
            then construct its Checkpointer at the same point.

    Every rank calls ``save``/``load``/``wait``/``close`` in the same order.
    Only rank 0 touches the directory layout (marker, rename, ``latest``,
    pruning); the DCP files are written by every rank.
    """

    def __init__(
        self,
        root,
        keep_last: int = 3,
        keep_every: int | None = None,
        process_group=None,
    ):
        self.root = Path(root)
        self.keep_last = validate.positive_int("keep_last", keep_last)
        self.keep_every = (
            None
            if keep_every is None
            else validate.positive_int("keep_every", keep_every)
        )
        self._dist = _dist_on()
        if self._dist and process_group is None:
            process_group = dist.new_group(backend="gloo")
        self.pg = process_group
        self.rank, self.world_size = _rank(), _world()
        self._lock = threading.Lock()
        self._pending = None  # the async save in flight, if any
        self._error: BaseException | None = None
        self.history: list[SaveStats] = []
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            self._recover()
        self._barrier()

    def _recover(self) -> None:
        """Rank 0: undo what a save killed halfway left behind."""
        for old in self.root.glob(_REPLACED_PREFIX + "*"):
            final = self.root / (_PREFIX + old.name[len(_REPLACED_PREFIX) :])
            if not self.is_complete(final) and self.is_complete(old):
                shutil.rmtree(
                    final, ignore_errors=True
                )  # the replacement never arrived: put it back
                os.replace(old, final)
            else:
                shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(_TMP_PREFIX + "*"):  # a save that never finished
            shutil.rmtree(stale, ignore_errors=True)
        for path in self.root.glob(
            _PREFIX + "*"
        ):  # pruning killed after the marker went
            if path.is_dir() and not self.is_complete(path):
                shutil.rmtree(path, ignore_errors=True)
        for stale in self.root.glob(f".{LATEST}.*tmp"):  # a pointer never renamed
            stale.unlink(missing_ok=True)
        _fsync_dir(self.root)

    # -- paths --------------------------------------------------------------

    def path(self, step: int) -> Path:
        """Where the published checkpoint of ``step`` lives."""
        return self.root / f"{_PREFIX}{step:08d}"

    def _tmp(self, step: int) -> Path:
        return self.root / f"{_TMP_PREFIX}{step:08d}"

    @staticmethod
    def is_complete(path) -> bool:
        """A published checkpoint has DCP's metadata and the book's marker."""
        path = Path(path)
        return (path / MARKER).is_file() and (path / ".metadata").is_file()

    def steps(self) -> list[int]:
        """Steps of the complete, published checkpoints, oldest first."""
        found = []
        for p in self.root.glob(_PREFIX + "*"):
            try:
                step = int(p.name[len(_PREFIX) :])
            except ValueError:
                continue
            if self.is_complete(p):
                found.append(step)
        return sorted(found)

    def latest(self) -> Path | None:
        """The newest published checkpoint (what ``latest`` names), or None."""
        pointer = self.root / LATEST
        try:
            candidate = self.root / pointer.read_text().strip()
            if candidate.parent == self.root and self.is_complete(candidate):
                return candidate
        except (OSError, ValueError):
            pass
        steps = (
            self.steps()
        )  # no or stale pointer: fall back to the highest complete step
        return self.path(steps[-1]) if steps else None

    # -- saving ---------------------------------------------------------------

    def _barrier(self) -> None:
        if self._dist:
            dist.barrier(group=self.pg)

    def _state(self, model, optimizer, scheduler, sampler, extra, step) -> dict:
        model_sd, optim_sd = _get_state_dict(model, optimizer)
        own = {
            "step": step,
            "rng": _rng_state(),
            "world_size": self.world_size,
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "sampler": None if sampler is None else sampler.state_dict(),
            "extra": dict(extra or {}),
        }
        # Each rank's RNG and data position is its own entry; DCP writes
        # replicated model and optimizer tensors once.
        return {
            "model": model_sd,
            "optim": optim_sd,
            f"train_state/rank{self.rank}": io.BytesIO(pickle.dumps(own)),
        }

    def save(
        self,
        step: int,
        model,
        optimizer,
        scheduler=None,
        sampler=None,
        extra: dict | None = None,
        async_: bool = False,
    ) -> SaveStats:
        """Checkpoint the training state reached after ``step`` steps.

        Synchronous: returns once the checkpoint is published. ``async_=True``:
        returns once DCP has staged a copy of the state in host memory; the
        write runs in a background thread and the checkpoint is published when
        it completes. At most one save is in flight: a new save first waits
        for the previous one. Returns the save's SaveStats (``blocking_s`` is
        the training stall).
        """
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be an integer at or above 0, got {step!r}")
        self.wait()
        start = time.perf_counter()
        tmp = self._tmp(step)
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self._barrier()
        state = self._state(model, optimizer, scheduler, sampler, extra, step)
        writer = _dcp().FileSystemWriter(tmp)
        kw = {
            "storage_writer": writer,
            "process_group": self.pg,
            "no_dist": not self._dist,
        }
        stats = SaveStats(step=step, async_=bool(async_), blocking_s=0.0)
        if async_:
            future = _dcp().async_save(state, **kw)
            stats.blocking_s = time.perf_counter() - start
            pending = {
                "step": step,
                "tmp": tmp,
                "future": future,
                "stats": stats,
                "start": start,
                "done": threading.Event(),
            }
            self._pending = pending
            future.add_done_callback(lambda f: self._finish_async(pending))
        else:
            _dcp().save(state, **kw)
            if self.rank == 0:
                self._publish(step, tmp)
            self._barrier()
            stats.blocking_s = stats.total_s = time.perf_counter() - start
        self.history.append(stats)
        return stats

    def _finish_async(self, pending: dict) -> None:
        """Runs in DCP's background thread when an async save has finished."""
        try:
            pending["future"].result()
            if self.rank == 0:
                self._publish(pending["step"], pending["tmp"])
            pending["stats"].total_s = time.perf_counter() - pending["start"]
        except BaseException as exc:  # surfaced by wait()
            self._error = exc
        finally:
            pending["done"].set()

    def wait(self) -> None:
        """Block until a pending async save is written and published (at most
        ASYNC_SAVE_WAIT_S, then a TimeoutError naming the step and folder)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            if not pending["done"].wait(ASYNC_SAVE_WAIT_S):
                raise TimeoutError(
                    f"waited {ASYNC_SAVE_WAIT_S:.0f} s for the background save of "
                    f"step {pending['step']} to {pending['tmp']}"
                )
            self._barrier()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(
                f"a background checkpoint save failed: {error!r}"
            ) from error

    def close(self) -> None:
        """Finish any pending save. Call before the process exits."""
        self.wait()

    def _publish(self, step: int, tmp: Path) -> None:
        """Rank 0: marker, atomic rename, atomic ``latest``, then prune."""
        with self._lock:
            marker = {"step": step, "world_size": self.world_size, "time": time.time()}
            with open(tmp / MARKER, "w") as f:
                json.dump(marker, f)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(tmp)
            final = self.path(step)
            old = None
            if final.exists():  # the same step saved again (e.g. after a rewind)
                old = self.root / f"{_REPLACED_PREFIX}{step:08d}"
                shutil.rmtree(old, ignore_errors=True)
                os.replace(
                    final, old
                )  # still complete: _recover puts it back if we die now
                _fsync_dir(self.root)
            os.replace(tmp, final)
            _fsync_dir(self.root)
            write_atomic(self.root / LATEST, final.name + "\n")
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            self._prune(keep=final)

    def _prune(self, keep: Path) -> None:
        steps = self.steps()
        newest = set(steps[-self.keep_last :])
        for step in steps:
            p = self.path(step)
            milestone = self.keep_every is not None and step % self.keep_every == 0
            if step in newest or milestone or p == keep:
                continue
            (p / MARKER).unlink(
                missing_ok=True
            )  # unpublish first, so half-deleted is incomplete
            shutil.rmtree(p, ignore_errors=True)

    # -- loading --------------------------------------------------------------

    def load(
        self,
        model,
        optimizer,
        scheduler=None,
        sampler=None,
        step: int | None = None,
        restore_rng: bool = True,
    ) -> Loaded:
        """Restore the training state from the checkpoint of ``step`` (default:
        the latest).

        Model and optimizer are loaded in place (the optimizer's state is
        created if it has none yet). The scheduler, sampler and RNG states are
        restored from this rank's entry; a rank that did not exist when the
        checkpoint was written gets rank 0's scheduler and data position
        (re-sharded) and keeps its own RNG. Raises FileNotFoundError if there
        is no such checkpoint.
        """
        self.wait()
        if step is None:
            path = self.latest()
            if path is None:
                raise FileNotFoundError(f"no complete checkpoint under {self.root}")
        else:
            path = self.path(step)
            if not self.is_complete(path):
                raise FileNotFoundError(
                    f"no complete checkpoint for step {step} under {self.root}"
                )
        reader = _dcp().FileSystemReader(path)
        saved_keys = reader.read_metadata().state_dict_metadata.keys()
        key = f"train_state/rank{self.rank}"
        own_entry = key in saved_keys
        if not own_entry:
            key = "train_state/rank0"
        model_sd, optim_sd = _get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, key: io.BytesIO()}
        _dcp().load(
            state, storage_reader=reader, process_group=self.pg, no_dist=not self._dist
        )
        _set_state_dict(
            model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd
        )
        blob = state[key]
        blob.seek(0)
        own = pickle.loads(blob.read())
        if scheduler is not None:
            if own["scheduler"] is None:
                raise ValueError(
                    f"{path} holds no LR-scheduler state, but a scheduler was given"
                )
            scheduler.load_state_dict(own["scheduler"])
        if sampler is not None:
            if own["sampler"] is None:
                raise ValueError(
                    f"{path} holds no sampler state, but a sampler was given"
                )
            sampler.load_state_dict(own["sampler"])
        rng = restore_rng and own_entry
        if rng:
            _set_rng_state(own["rng"])
        self._barrier()
        return Loaded(step=own["step"], path=path, extra=own["extra"], rng_restored=rng)

    def load_model(self, model, step: int | None = None) -> Path:
        """Load the weights alone (no optimizer, schedule, RNG or data
        position): what a naive resume does. Returns the checkpoint's path."""
        path = self.latest() if step is None else self.path(step)
        if path is None or not self.is_complete(path):
            raise FileNotFoundError(
                f"no complete checkpoint{'' if step is None else f' for step {step}'} "
                f"under {self.root}"
            )
        model_sd, _ = _get_state_dict(model, [])
        state = {"model": model_sd}
        dcp = _dcp()
        dcp.load(
            state,
            storage_reader=dcp.FileSystemReader(path),
            process_group=self.pg,
            no_dist=not self._dist,
        )
        _set_state_dict(model, [], model_state_dict=model_sd, optim_state_dict={})
        self._barrier()
        return path


def directory_bytes(path) -> int:
    """Bytes of all files under ``path`` (what one checkpoint weighs on disk)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
