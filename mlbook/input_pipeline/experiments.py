"""The input pipeline measured: torch's side of the chapter.

- ``ShardDataset``: a map-style Dataset over ``shards.PackedShards`` whose
  items are tensors that share memory with the memory map (no copy).
- ``step_time_ab``: the small GPT's step fed three ways (tokenised in the
  loop, pre-tokenised shards, a synthetic tensor), steps interleaved.
- ``profile_loop``: a torch.profiler timeline of the data wait and the step.
- ``CostlyDataset`` and ``loader_sweep``: a DataLoader over items of a set
  cost (a sleep, as in Bekman's num-workers-bench) under a list of settings.
- ``h2d_copy``: pinned against pageable host-to-device copies (CUDA only).
- ``attention_mask_cost``: causal attention against the document mask.
- ``LoopPosition`` and ``resume_check``: the data position a checkpoint must
  hold when the loader prefetches, through the cadence chapter's
  ``Checkpointer`` and ``ShardedSampler``.
"""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler
from mlbook.common_torch.gpt import GPT, train_step
from mlbook.common_torch.timing import cpu_threads, sync
from mlbook.input_pipeline import packing
from mlbook.input_pipeline.shards import PackedShards


def _device(device: str) -> str:
    return validate.one_of("device", device, ("cpu", "cuda"))


# --- reading the shards --------------------------------------------------------------


class ShardDataset(Dataset):
    """Map-style Dataset over packed shards: item ``i`` is row ``i`` as a
    uint16/uint32 tensor of seq_len + 1 ids that shares memory with the
    memory map (``torch.from_numpy`` on a view: nothing is copied until the
    DataLoader collates the batch). ``with_index=True`` returns (i, row), so
    a loop can record which rows it trained on."""

    def __init__(self, shards: PackedShards, with_index: bool = False):
        self.shards = validate.instance_of("shards", shards, PackedShards)
        self.with_index = validate.boolean("with_index", with_index)

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, i):
        row = torch.from_numpy(self.shards[i])  # (s + 1,) shares the mapped pages
        return (i, row) if self.with_index else row


_SIGNED_VIEW = {
    torch.uint16: (torch.int16, 0xFFFF),
    torch.uint32: (torch.int32, 0xFFFFFFFF),
}


def to_model_batch(rows: torch.Tensor, device: str, non_blocking: bool = False):
    """(b, s + 1) stored ids -> inputs and targets, int64 on ``device``.

    The narrow ids cross to the device first and are widened there, so the
    copy moves 2 bytes a token (uint16), not 8. They travel as the signed
    type of the same width (a view, no copy: every device handles int16,
    not every one uint16) and the mask undoes the sign on the way to int64."""
    if rows.dtype in _SIGNED_VIEW:
        signed, mask = _SIGNED_VIEW[rows.dtype]
        ids = (
            rows.view(signed).to(device, non_blocking=non_blocking).long() & mask
        )  # (b, s + 1)
    else:
        ids = rows.to(device, non_blocking=non_blocking).long()
    return ids[:, :-1], ids[:, 1:]  # (b, s), (b, s)


# --- the step-time A/B ----------------------------------------------------------------


@dataclass(frozen=True)
class LoopTimes:
    """Per-step seconds of one way of feeding the same training step."""

    name: str
    data_s: tuple  # waiting for the batch: tokenise, read, or nothing
    compute_s: tuple  # forward, backward, optimizer step
    tokens_per_step: int
    tokens_encoded: int = 0  # tokens the loop itself encoded during the timed steps

    @property
    def data_mean_s(self) -> float:
        """Mean, not median: a loader that tokenises as it goes pays in bursts
        (a whole document every few steps), and the mean is what it costs."""
        return statistics.fmean(self.data_s)

    @property
    def compute_median_s(self) -> float:
        return statistics.median(self.compute_s)

    @property
    def step_s(self) -> float:
        return self.data_mean_s + self.compute_median_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def idle_fraction(self) -> float:
        """Share of the step the model waited for data."""
        return self.data_mean_s / self.step_s


def step_time_ab(
    cfg: TransformerConfig,
    tok,
    texts,
    shards: PackedShards,
    batch: int,
    steps: int,
    device: str,
    warmup: int = 1,
    threads: int | None = 1,
    seed: int = 0,
    log=None,
) -> dict:
    """Time the same GPT training step fed three ways, steps interleaved
    (one of each in turn, so a busy neighbour slows all three alike):

    ``tokenise in loop``: ``packing.StreamPacker`` encodes documents with
    ``tok.encode`` as the loop needs them (the same rows as the shards);
    ``pre-tokenised``: a DataLoader (no workers) over ``ShardDataset``;
    ``synthetic``: one fixed random tensor of the right shape.

    Returns {name: LoopTimes}. ``threads`` caps torch's CPU threads (on a
    shared 2-core machine one thread is fastest and steadiest).
    """
    device = _device(device)
    validate.positive_int("batch", batch)
    validate.positive_int("steps", steps)
    seq_len = shards.seq_len
    eos = shards.index["eos_id"]
    torch.manual_seed(seed)
    with cpu_threads(threads, device):
        model = GPT(cfg, max_seq_len=seq_len).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        packer = packing.StreamPacker(lambda t: tok.encode(t).ids, texts, seq_len, eos)
        loader = DataLoader(
            ShardDataset(shards),
            batch_size=batch,
            sampler=ShardedSampler(len(shards), seed=seed),
            num_workers=0,
        )
        stream = iter(loader)
        fixed = torch.randint(
            0,
            cfg.vocab_size,
            (batch, seq_len + 1),
            generator=torch.Generator().manual_seed(seed),
        )

        def from_shards():
            nonlocal stream
            try:
                return next(stream)
            except StopIteration:
                stream = iter(loader)
                return next(stream)

        sources = {
            "tokenise in loop": lambda: torch.from_numpy(packer.next_rows(batch)),
            "pre-tokenised": from_shards,
            "synthetic": lambda: fixed,
        }
        times = {name: ([], []) for name in sources}
        encoded = 0
        for i in range(warmup + steps):
            for name, source in sources.items():
                before = packer.tokens_encoded
                t0 = time.perf_counter()
                x, y = to_model_batch(source(), device)
                sync(device)
                t1 = time.perf_counter()
                train_step(model, opt, x, y)
                sync(device)
                t2 = time.perf_counter()
                if i >= warmup:
                    times[name][0].append(t1 - t0)
                    times[name][1].append(t2 - t1)
                    encoded += packer.tokens_encoded - before
            if log is not None and i >= warmup:
                log(
                    f"  step {i - warmup + 1}/{steps}: "
                    + ", ".join(
                        f"{n} {times[n][0][-1] * 1e3:.1f} "
                        f"+ {times[n][1][-1] * 1e3:.0f} ms"
                        for n in sources
                    )
                )
    return {
        name: LoopTimes(
            name,
            tuple(d),
            tuple(c),
            batch * seq_len,
            encoded if name == "tokenise in loop" else 0,
        )
        for name, (d, c) in times.items()
    }


# --- a profiler timeline --------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    kind: str  # "data" (waiting for the batch) or "step" (the training step)
    start_s: float  # from the first span's start
    end_s: float


@dataclass(frozen=True)
class Timeline:
    label: str
    spans: tuple

    def total_s(self, kind: str) -> float:
        return sum(s.end_s - s.start_s for s in self.spans if s.kind == kind)

    @property
    def wall_s(self) -> float:
        return max(s.end_s for s in self.spans) - min(s.start_s for s in self.spans)


def profile_loop(
    cfg: TransformerConfig,
    loader,
    steps: int,
    device: str,
    label: str,
    seq_len: int,
    threads: int | None = 1,
    seed: int = 0,
) -> Timeline:
    """Run ``steps`` training steps on batches from ``loader`` (rows of
    seq_len + 1 ids) under ``torch.profiler`` and return the timeline of the
    two ranges the loop marks: "data" (``next(loader)``) and "step".

    The ranges come from the profiler's own events (``record_function``), so
    the picture is what a trace viewer would show for these two rows.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    # Kineto prints its start/stop notices (log level "USDT", torch 2.13) to stderr,
    # which lands in the page; the level is read when the profiler first starts,
    # and 6 is above all of its levels.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    device = _device(device)
    validate.positive_int("steps", steps)
    torch.manual_seed(seed)
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if device == "cuda" else []
    )
    with cpu_threads(threads, device):
        model = GPT(cfg, max_seq_len=seq_len).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        it = iter(loader)
        x, y = to_model_batch(next(it), device)  # warm-up step, outside the trace
        train_step(model, opt, x, y)
        sync(device)
        with profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function("data"):
                    x, y = to_model_batch(next(it), device)
                    sync(device)
                with record_function("step"):
                    train_step(model, opt, x, y)  # .item() waits for the device
                    sync(device)
        del it
    # the CPU-side ranges (on CUDA the profiler also mirrors them as GPU annotations)
    events = [
        e
        for e in prof.events()
        if e.name in ("data", "step") and e.device_type == DeviceType.CPU
    ]
    t0 = min(e.time_range.start for e in events)
    spans = sorted(
        (
            Span(e.name, (e.time_range.start - t0) / 1e6, (e.time_range.end - t0) / 1e6)
            for e in events
        ),
        key=lambda s: s.start_s,
    )
    return Timeline(label, tuple(spans))


# --- a DataLoader over items of a set cost --------------------------------------------


class CostlyDataset(Dataset):
    """``n_items`` items, each costing ``item_cost_s`` to produce (a sleep,
    which emulates waiting on storage or a transform without using a core, as
    Bekman's benchmark does) and returning the same tensor of ``item_bytes``.
    ``base``, if given, is another Dataset whose item is returned instead (so
    a real row can cost a set time)."""

    def __init__(
        self, n_items: int, item_cost_s: float, item_bytes: int = 4, base=None
    ):
        self.n_items = validate.positive_int("n_items", n_items)
        self.item_cost_s = validate.non_negative("item_cost_s", item_cost_s)
        validate.positive_int("item_bytes", item_bytes)
        self.tensor = torch.ones(max(1, item_bytes // 4))  # float32
        self.base = base

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, i):
        time.sleep(self.item_cost_s)
        return self.tensor if self.base is None else self.base[i % len(self.base)]


def sleep_s(duration_s: float, repeats: int = 50) -> float:
    """Mean wall seconds that ``time.sleep(duration_s)`` really takes here: a
    sleep ends when the scheduler next runs the process, later than asked on
    a busy machine. The set per-item cost of ``CostlyDataset`` is this."""
    validate.positive("duration_s", duration_s)
    validate.positive_int("repeats", repeats)
    start = time.perf_counter()
    for _ in range(repeats):
        time.sleep(duration_s)
    return (time.perf_counter() - start) / repeats


# A DataLoader with workers waits this long at most for a batch, then fails
# ("DataLoader timed out after 60 seconds") instead of waiting forever on a worker
# that stopped; no batch here takes more than a second.
LOADER_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LoaderSetting:
    num_workers: int
    pin_memory: bool = False
    prefetch_factor: int | None = (
        None  # None: torch's default (2) when there are workers
    )
    persistent_workers: bool = False

    def kwargs(self) -> dict:
        kw = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kw["prefetch_factor"] = (
                2 if self.prefetch_factor is None else self.prefetch_factor
            )
            kw["persistent_workers"] = self.persistent_workers
            kw["timeout"] = LOADER_TIMEOUT_S
        return kw

    @property
    def label(self) -> str:
        parts = [f"w={self.num_workers}"]
        if self.pin_memory:
            parts.append("pin")
        if self.num_workers and self.prefetch_factor not in (None, 2):
            parts.append(f"prefetch={self.prefetch_factor}")
        if self.persistent_workers:
            parts.append("persistent")
        return " ".join(parts)


@dataclass(frozen=True)
class SweepPoint:
    setting: LoaderSetting
    n_batches: int
    compute_s: float
    epochs_s: tuple  # wall seconds of each epoch

    @property
    def epoch_s(self) -> float:
        return statistics.fmean(self.epochs_s)

    @property
    def overhead_s(self) -> float:
        """Epoch time minus the emulated compute: Bekman's "average time"."""
        return self.epoch_s - self.n_batches * self.compute_s

    @property
    def step_s(self) -> float:
        return self.epoch_s / self.n_batches


def loader_sweep(
    settings,
    n_items: int,
    batch_size: int,
    item_cost_s: float,
    compute_s: float,
    item_bytes: int,
    epochs: int,
    device: str,
    log=None,
) -> list:
    """Bekman's num-workers-bench under each of ``settings``: for every batch,
    copy it to ``device`` (non-blocking when pinned) and sleep ``compute_s``
    (emulated compute, which leaves the cores to the workers); time each
    epoch. Returns one SweepPoint per setting."""
    device = _device(device)
    validate.positive("compute_s", compute_s)
    validate.positive_int("epochs", epochs)
    validate.positive_int("batch_size", batch_size)
    ds = CostlyDataset(n_items, item_cost_s, item_bytes)
    points = []
    for setting in settings:
        validate.instance_of("setting", setting, LoaderSetting)
        if setting.pin_memory and device != "cuda":
            raise ValueError(
                f"{setting.label}: pin_memory needs a CUDA device (on "
                f"{device} it does nothing)"
            )
        times, n_batches = [], 0
        with warnings.catch_warnings():
            # torch warns when workers outnumber the cores; these workers
            # sleep, they need none
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = DataLoader(ds, batch_size=batch_size, **setting.kwargs())
            for _ in range(epochs):
                start = time.perf_counter()
                n_batches = 0
                for batch in loader:
                    batch = batch.to(device, non_blocking=setting.pin_memory)
                    time.sleep(compute_s)
                    n_batches += 1
                sync(device)
                times.append(time.perf_counter() - start)
            del loader  # persistent workers end with their loader
        gc.collect()
        point = SweepPoint(setting, n_batches, compute_s, tuple(times))
        points.append(point)
        if log is not None:
            log(
                f"  {setting.label:<24} epochs {', '.join(f'{t:.3f}' for t in times)} s"
            )
    return points


# --- pinned against pageable copies ---------------------------------------------------


@dataclass(frozen=True)
class CopyResult:
    nbytes: int
    pinned: bool
    seconds: float  # median time of the copy itself (CUDA events)
    host_return_s: (
        float  # median time until copy_(non_blocking=True) returned to Python
    )

    @property
    def bytes_per_s(self) -> float:
        return self.nbytes / self.seconds


def h2d_copy(
    nbytes: int, pinned: bool, device: str = "cuda", repeats: int = 10
) -> CopyResult:
    """Copy ``nbytes`` from host to GPU ``repeats`` times with
    ``non_blocking=True``, from pinned or from pageable host memory.

    From pinned memory the copy is a DMA the GPU runs on its own, and the call
    returns at once; from pageable memory the driver first copies into a
    pinned staging buffer, so the call returns only when it is done and the
    bandwidth is lower. Needs CUDA."""
    validate.positive_int("nbytes", nbytes)
    validate.boolean("pinned", pinned)
    validate.positive_int("repeats", repeats)
    if _device(device) != "cuda" or not torch.cuda.is_available():
        raise ValueError(
            f"h2d_copy needs a CUDA device, got device={device!r} "
            f"(CUDA available: {torch.cuda.is_available()})"
        )
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)  # warm-up
    torch.cuda.synchronize()
    copy_s, return_s = [], []
    for _ in range(repeats):
        start, end = (
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(enable_timing=True),
        )
        start.record()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        return_s.append(time.perf_counter() - t0)
        end.record()
        torch.cuda.synchronize()
        copy_s.append(start.elapsed_time(end) / 1e3)
    return CopyResult(
        nbytes, pinned, statistics.median(copy_s), statistics.median(return_s)
    )


# --- what the document mask costs -----------------------------------------------------


@dataclass(frozen=True)
class MaskCost:
    seq_len: int
    n_docs: int
    density: float  # share of the causal pairs the document mask keeps
    causal_s: float  # fused causal attention, documents see each other
    masked_s: float  # the same kernel with the block-diagonal mask as a tensor
    per_doc_s: float  # one causal call per document (what a varlen kernel does in one)


def attention_mask_cost(
    row,
    eos_id: int,
    n_heads: int,
    head_dim: int,
    device: str,
    repeats: int = 20,
    seed: int = 0,
) -> MaskCost:
    """Forward + backward of scaled_dot_product_attention over one packed row
    (batch 1) three ways; median seconds of ``repeats``."""
    device = _device(device)
    validate.positive_int("n_heads", n_heads)
    validate.positive_int("head_dim", head_dim)
    validate.positive_int("repeats", repeats)
    arr = np.asarray(row)
    mask = torch.from_numpy(packing.document_mask(arr, eos_id)).to(device)  # (s, s)
    ids = packing.document_ids(arr, eos_id)
    bounds = np.concatenate(
        [[0], np.flatnonzero(np.diff(ids)) + 1, [len(ids)]]
    ).tolist()
    s = len(arr)
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(1, n_heads, s, head_dim, generator=g).to(device).requires_grad_()
        for _ in range(3)
    )

    def causal():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def masked():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def per_doc():
        return torch.cat(
            [
                F.scaled_dot_product_attention(
                    q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True
                )
                for a, b in itertools.pairwise(bounds)
            ],
            dim=2,
        )

    def timed(fn):
        out = []
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            fn().sum().backward()
            sync(device)
            if i:
                out.append(time.perf_counter() - t0)
        return statistics.median(out)

    with torch.no_grad():
        same = torch.allclose(masked(), per_doc(), atol=1e-5)
    if not same:
        raise RuntimeError(
            "the document mask and the per-document calls disagree: a bug in the mask"
        )
    return MaskCost(
        s,
        len(bounds) - 1,
        packing.mask_density(arr, eos_id),
        timed(causal),
        timed(masked),
        timed(per_doc),
    )


# --- the data position in a checkpoint ------------------------------------------------


class LoopPosition:
    """The data position as the training loop consumed it, for a checkpoint.

    A DataLoader with workers pulls indices from the sampler ahead of the
    loop (prefetch_factor x num_workers batches), so the sampler's own offset
    runs ahead of what was trained on: a resume from it would skip the
    prefetched samples. Call ``begin_epoch()`` before ``iter(loader)`` and
    ``advance(n)`` after training on a batch of n; ``state_dict()`` is then
    the sampler's state at the loop's true position (what
    ``ShardedSampler.state_dict(consumed=...)`` offers, with the epoch pinned
    to the one the loop is in). Pass it to ``Checkpointer.save/load`` as the
    ``sampler``.
    """

    def __init__(self, sampler: ShardedSampler):
        self.sampler = validate.instance_of("sampler", sampler, ShardedSampler)
        self.start = None
        self.consumed = 0

    def begin_epoch(self) -> None:
        state = self.sampler.state_dict()
        if (
            len(self.sampler) == 0
        ):  # the last epoch was used up: iterating starts the next one
            state = {**state, "epoch": state["epoch"] + 1, "base": 0, "offset": 0}
        self.start, self.consumed = state, 0

    def advance(self, n: int) -> None:
        self.consumed += validate.positive_int("n", n)

    def state_dict(self) -> dict:
        if self.start is None:
            return self.sampler.state_dict()
        return {**self.start, "offset": self.start["offset"] + self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
        self.start = None


@dataclass(frozen=True)
class ResumeCheck:
    save_at: int  # the step whose checkpoint was loaded
    steps: int
    straight: tuple  # row indices trained on at each step after save_at, uninterrupted
    resumed: tuple  # the same, after loading the checkpoint into fresh objects
    weights_equal: bool  # final weights bitwise equal
    prefetched_ahead: (
        int  # sampler offset minus the loop's count when the checkpoint was saved
    )
    saved_state: dict


def _train_from_shards(
    cfg,
    shards,
    batch,
    seq_len,
    stop,
    num_workers,
    seed,
    ckpt=None,
    save_at=None,
    load=False,
    device="cpu",
):
    torch.manual_seed(
        seed + (1000 if load else 0)
    )  # a resumed run starts from other weights
    model = GPT(cfg, max_seq_len=seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = ShardedSampler(len(shards), seed=seed)
    position = LoopPosition(sampler)
    step, ahead, saved = 0, 0, None
    if load:
        step = ckpt.load(model, opt, sampler=position).step
    loader = DataLoader(
        ShardDataset(shards, with_index=True),
        batch_size=batch,
        sampler=sampler,
        num_workers=num_workers,
        **({"prefetch_factor": 2, "timeout": LOADER_TIMEOUT_S} if num_workers else {}),
    )
    trained = []
    while step < stop:
        position.begin_epoch()
        for idx, rows in loader:
            x, y = to_model_batch(rows, device)
            train_step(model, opt, x, y)
            position.advance(len(idx))
            step += 1
            if step > (save_at or 0) or load:
                trained.append(tuple(idx.tolist()))
            if ckpt is not None and step == save_at and not load:
                saved = position.state_dict()
                ahead = sampler.state_dict()["offset"] - saved["offset"]
                ckpt.save(step, model, opt, sampler=position)
            if step == stop:
                break
    del loader
    return model, tuple(trained), ahead, saved


def resume_check(
    cfg: TransformerConfig,
    shards: PackedShards,
    batch: int,
    steps: int,
    save_at: int,
    root,
    num_workers: int = 2,
    seed: int = 0,
    threads: int | None = 1,
) -> ResumeCheck:
    """Train ``steps`` steps from the shards with a prefetching DataLoader,
    checkpointing at ``save_at`` (the cadence chapter's Checkpointer, with a
    LoopPosition as the data position); then load that checkpoint into a
    fresh model, optimizer and sampler and train to ``steps`` again. A
    correct resume trains on the same rows in the same order and ends with
    bitwise-equal weights (CPU)."""
    validate.positive_int("steps", steps)
    validate.positive_int("save_at", save_at)
    if save_at >= steps:
        raise ValueError(f"save_at must be below steps={steps}, got {save_at!r}")
    with cpu_threads(threads, "cpu"):
        ckpt = Checkpointer(root, keep_last=1)
        ref, straight, ahead, saved = _train_from_shards(
            cfg,
            shards,
            batch,
            shards.seq_len,
            steps,
            num_workers,
            seed,
            ckpt=ckpt,
            save_at=save_at,
        )
        ckpt.close()
        again, resumed, _, _ = _train_from_shards(
            cfg,
            shards,
            batch,
            shards.seq_len,
            steps,
            num_workers,
            seed,
            ckpt=Checkpointer(root, keep_last=1),
            load=True,
        )
    equal = all(
        torch.equal(a, b)
        for a, b in zip(
            ref.state_dict().values(), again.state_dict().values(), strict=True
        )
    )
    return ResumeCheck(save_at, steps, straight, resumed, equal, ahead, saved)
