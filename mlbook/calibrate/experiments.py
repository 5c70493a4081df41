"""Calibrate the machine this runs on: the chapters' own measurements, each
repeated so that it keeps its spread, brought together in one ``Machine``
(mlbook.calibrate.formulas), in about a minute on a 2-core CPU.

What is measured, and by whose code:

- the MAMF ceiling of each dtype the device runs fast (mlbook.common_torch.mamf,
  the capstone's sweep with the reference model's own GEMM shapes first);
- memory bandwidth: a triad a = b + 2c over arrays four times the last-level
  cache the machine reports, at least 64 MiB and at most
  cal.TRIAD_MAX_BYTES each (a VM reports its host's whole L3), and never
  more than a sixteenth of the free memory (1 GiB on a GPU);
- all-reduce alpha and beta between 2 local ranks (the scaling chapter's
  sweep over gloo, fitted per round; one size, not among the fitted ones, is
  held out of the fit), each rank writing over cal.FLUSH_MAX_BYTES of
  scratch (a fixed size, not twice the reported L3) before each all-reduce
  to flush its caches;
- checkpoint write bandwidth and the cost of an fsync in the working folder,
  and the reference model's own checkpoint written (mlbook.cadence's item);
- tokenizer and loader throughput at the input pipeline's settings (the
  capstone's BPE on Python sources, a DataLoader over packed shards), and
  the step fed by a loader that tokenises, with no workers and with the
  workers the loader model says it needs;
- one reference training step: the capstone's final configuration at its
  sizes, every fix of its ladder applied but torch.compile (three
  compilations would take most of the minute), on one thread on a CPU (the
  capstone's convention) and on the GPU where there is one, and the same
  step accumulated over k micro-steps (the accumulation chapter);
- the bytes one of its blocks keeps for backward (the recompute chapter);
- what the capstone's step model needs to predict that step: its operators
  counted once, the rates of its shapes (the sweeps' where they timed them),
  a triad on the step's threads and the small-operator benchmark
  (mlbook.common_torch.opbench).

Nothing here prints: progress lines go to ``log``. The peak resident memory
of the process and of its children is kept in the machine file's
``created`` (mlbook.calibrate.resources).
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from mlbook.calibrate import formulas as cal
from mlbook.calibrate import resources
from mlbook.common import stepmodel, validate
from mlbook.common.accelerators import (
    cpu_model,
    match_cuda_name,
    read_cpuinfo,
    usable_cores,
)
from mlbook.common.reference_loop import LadderSizes, ladder_fixes, ladder_sizes
from mlbook.common.tokenizer import encode_documents, tokenizer_sha256
from mlbook.common.transformer import gemm_shapes
from mlbook.common_torch import mamf, opbench
from mlbook.common_torch.bandwidth import triad_bytes_per_s
from mlbook.common_torch.device import (
    device_description,
    pick_device,
)
from mlbook.common_torch.gpt import tiny_config
from mlbook.common_torch.opcount import count_ops
from mlbook.common_torch.reference_loop import (
    Loop,
    LoopConfig,
    TextData,
    apply_fix,
    model_config,
    nominal_peak,
    slow_loop,
    step_clock,
)
from mlbook.common_torch.timing import cpu_threads, time_steps
from mlbook.input_pipeline import formulas as pipeline
from mlbook.input_pipeline import shards as shard_files
from mlbook.mfu import flops
from mlbook.recompute.experiments import compare_block
from mlbook.scaling import experiments as scaling
from mlbook.scaling.formulas import fit_alpha_beta

ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


@dataclass(frozen=True)
class Sizes:
    """How much each measurement does (quick: the test build's)."""

    quick: bool
    mamf_budget_s: float  # seconds of each dtype's sweep
    repeats: int  # repeats of a timed measurement
    triad_min_bytes: int  # each array of the triad, at least
    allreduce_sizes: tuple  # bytes, fitted
    allreduce_heldout: int  # bytes, left out of the fit
    allreduce_budget_s: float  # per size and round
    write_bytes: int  # the file the write bandwidth is measured with
    fsyncs: int
    tokenizer_texts: int  # documents each tokenizer pass encodes
    steps: int  # timed reference steps
    accumulation_k: int
    loader_steps: int  # timed steps fed by each loader
    max_workers: int  # at most this many loader workers

    def __post_init__(self):
        if self.allreduce_heldout in self.allreduce_sizes:
            raise ValueError(
                f"allreduce_heldout={self.allreduce_heldout:,} bytes is one of the "
                "fitted allreduce_sizes: the held-out size must be one the fit "
                "never saw"
            )


def sizes_for(quick: bool) -> Sizes:
    """Full: about 45 s on a 2-core CPU, imports included (a Zen 5 took 48 s
    and a Xeon with AMX 62 s with 8 s sweeps, three 1.9 GiB triad arrays and
    960 MiB flushes; each sweep now takes 5 s, three dtypes' on a CPU with
    fast fp16, and the buffers are capped); quick: about 15 s. The held-out
    all-reduce lies between two fitted sizes, a factor of 4 (quick) or 2
    (full) from each."""
    kib = 1024
    if quick:
        return Sizes(
            True, 0.6, 3, 16 * 2**20, tuple(kib * 16**i for i in range(4)),
            64 * kib, 0.03, 8 * 2**20, 4, 40, 3, 2, 3, 2,
        )  # fmt: skip
    return Sizes(
        False, 5.0, 7, 64 * 2**20, tuple(kib * 4**i for i in range(9)),
        2 * 2**20, 0.1, 128 * 2**20, 10, 200, 8, 4, 8, 4,
    )  # fmt: skip


# --- the device -----------------------------------------------------------------------


def device_info(device: str, threads: int | None = None) -> dict:
    """What measured: kind, names, cores, ISA flags and nominal peaks (on a
    CPU, of the cores ``threads`` threads occupy)."""
    info = {"kind": device, "name": device_description(device)}
    if device == "cuda":
        model = torch.cuda.get_device_name()
        row = match_cuda_name(model)
        info |= {
            "model": model,
            "accelerator": row.name if row else None,
            "gpus": torch.cuda.device_count(),
        }
        dtypes = cal.MAMF_DTYPES
    else:
        text = read_cpuinfo() or ""
        model = cpu_model(text)
        flags = next(
            (ln.split(":", 1)[1].split() for ln in text.splitlines()
             if ln.startswith("flags")),
            [],
        )  # fmt: skip
        info |= {"model": model, "accelerator": None, "gpus": 0}
        info["isa_flags"] = [f for f in ISA_FLAGS if f in flags]
        dtypes = ("fp32", "bf16")
    info["cores"] = usable_cores()
    peaks = {}
    for d in dtypes:
        p = nominal_peak(device, d, threads)
        peaks[d] = {"flops_per_s": p.flops_per_s, "basis": p.basis, "how": p.how}
    info["peaks"] = peaks
    return info


def torch_info() -> dict:
    cap = getattr(torch.backends.cpu, "get_cpu_capability", lambda: None)()
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "cpu_capability": cap,
        "isa_caps": {k: os.environ.get(k) for k in cal.ISA_VARIABLES},
    }


# --- the matmul ceiling ---------------------------------------------------------------


def matmul_probe(device: str, rounds: int = 5, clock: str = "wall") -> dict:
    """FLOP/s of a 512^3 matmul per dtype, the best of ``rounds`` rounds that
    time every dtype in turn (so that a busy moment slows one round, not one
    dtype): which dtypes run fast here."""
    best = dict.fromkeys(cal.MAMF_DTYPES, 0.0)
    with torch.inference_mode():
        for _ in range(rounds):
            for d in cal.MAMF_DTYPES:
                f = mamf.time_matmul(512, 512, 512, d, device, 0.01, clock=clock)
                best[d] = max(best[d], f)
    return best


def fast_dtypes(probe: dict, device: str) -> tuple:
    """fp32, and the 16-bit dtypes whose probe ran at least half as fast (on a
    GPU every dtype): a dtype the device emulates gets no minute-long sweep."""
    return tuple(
        d
        for d in cal.MAMF_DTYPES
        if d == "fp32" or device == "cuda" or probe[d] >= 0.5 * probe["fp32"]
    )


def mamf_ceiling(
    dtype: str,
    device: str,
    budget_s: float,
    include: tuple,
    repeats: int,
    clock: str = "wall",
) -> tuple[mamf.MatmulCeiling, cal.Measurement]:
    """The sweep's best shape, then that shape timed ``repeats`` more times:
    the spread of the ceiling, the sweep's best among the values."""
    with torch.inference_mode():
        c = mamf.find_ceiling(dtype, device, budget_s, include=include, clock=clock)
        again = [
            mamf.time_matmul(c.m, c.n, c.k, dtype, device, 0.05, clock=clock)
            for _ in range(repeats - 1)
        ]
    method = (
        f"MAMF: best of {len(c.timings)} matmul shapes swept in {c.seconds:.1f} s "
        f"({c.m} x {c.n} x {c.k}), then that shape timed {repeats - 1} more times, "
        f"{torch.get_num_threads()} thread(s), {clock} clock"
    )
    return c, cal.Measurement.of([c.flops_per_s, *again], "FLOP/s", method)


# --- memory, links and storage --------------------------------------------------------


def triad_bytes(device: str, min_bytes: int) -> int:
    """Each triad array's bytes: on a CPU four times the last-level cache the
    machine reports, at least ``min_bytes``, at most cal.TRIAD_MAX_BYTES and
    a sixteenth of the free memory; 1 GiB on a GPU."""
    if device == "cuda":
        return 2**30
    want = 4 * (scaling.l3_bytes() or 0)
    return cal.bounded_bytes(
        want, min_bytes, cal.TRIAD_MAX_BYTES, resources.available_bytes()
    )


def flush_bytes() -> int:
    """The scratch each all-reduce rank writes over before each all-reduce:
    cal.FLUSH_MAX_BYTES, a fixed size past a core's own caches and a VM's
    share of the last level, whatever L3 the machine reports; less where a
    sixteenth of the free memory is less."""
    cap = cal.FLUSH_MAX_BYTES
    return cal.bounded_bytes(cap, cap, cap, resources.available_bytes())


def _l3_words() -> str:
    l3 = scaling.l3_bytes()
    return "no L3 reported" if l3 is None else f"L3 reported {l3 / 2**20:,.0f} MiB"


def memory_bandwidth(device: str, repeats: int, min_bytes: int) -> cal.Measurement:
    """A triad a = b + 2c over three fp32 arrays of ``triad_bytes`` each:
    12 bytes moved a value."""
    n_bytes = triad_bytes(device, min_bytes)
    rates = triad_bytes_per_s(n_bytes, repeats, device)
    bound = (
        ""
        if device == "cuda"
        else f" (4x the last-level cache, at least {min_bytes / 2**20:,.0f} and "
        f"at most {cal.TRIAD_MAX_BYTES / 2**20:,.0f} MiB: {_l3_words()})"
    )
    method = (
        f"triad a = b + 2c, 3 fp32 arrays of {n_bytes / 2**20:,.0f} MiB{bound}, "
        f"{repeats} passes, 12 bytes a value"
    )
    return cal.Measurement.of(rates, "bytes/s", method)


def allreduce(sz: Sizes) -> tuple[dict, dict]:
    """alpha and beta fitted to each round of the scaling chapter's sweep
    (2 gloo ranks), and the held-out size's times."""
    sizes = tuple(sorted((*sz.allreduce_sizes, sz.allreduce_heldout)))
    flush = flush_bytes()
    sweep = scaling.allreduce_sweep(
        sizes, 2, 3, sz.allreduce_budget_s, rounds=1, flush_bytes=flush
    )
    held = sizes.index(sz.allreduce_heldout)
    fit_sizes = [s for i, s in enumerate(sizes) if i != held]
    rounds = min(len(b) for b in sweep.blocks_s)
    alphas, betas = [], []
    for r in range(rounds):
        times = [b[r] for i, b in enumerate(sweep.blocks_s) if i != held]
        try:
            fit = fit_alpha_beta(fit_sizes, times, sweep.n_ranks)
        except ValueError:  # a round whose times did not grow with size
            continue
        alphas.append(fit.alpha_s)
        betas.append(fit.beta_s_per_byte)
    if not alphas:
        best = [t for i, t in enumerate(sweep.best_s) if i != held]
        fit = fit_alpha_beta(fit_sizes, best, sweep.n_ranks)
        alphas, betas = [fit.alpha_s], [fit.beta_s_per_byte]
    how = (
        f"2 gloo ranks on one thread each, {len(fit_sizes)} sizes from "
        f"{fit_sizes[0]:,} to {fit_sizes[-1]:,} bytes, caches flushed (each rank "
        f"writes over {flush / 2**20:,.0f} MiB before each all-reduce, a fixed "
        f"size at most {cal.FLUSH_MAX_BYTES / 2**20:,.0f} MiB whatever the cache: "
        f"{_l3_words()}); "
        f"alpha-beta fitted to each of {len(alphas)} rounds' block medians"
    )
    out = {
        "allreduce_alpha": cal.Measurement.of(alphas, "s", how),
        "allreduce_beta": cal.Measurement.of(betas, "s/byte", how),
        "allreduce_heldout": cal.Measurement.of(
            sweep.blocks_s[held],
            "s",
            f"all-reduce of {sz.allreduce_heldout:,} bytes, left out of the fit, "
            f"median of 5 per round, {len(sweep.blocks_s[held])} rounds",
        ),
    }
    return out, {"allreduce_heldout_bytes": sz.allreduce_heldout, "allreduce_ranks": 2}


def _write_fsync(path: Path, write) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def storage(folder: Path, sz: Sizes) -> dict:
    """Write bandwidth of a file of ``sz.write_bytes`` (write and fsync), and
    the time of an fsync of 4 KiB, in ``folder``."""
    data = os.urandom(2**20) * (sz.write_bytes // 2**20)
    rates = []
    for i in range(max(2, sz.repeats // 2)):
        path = folder / f"write-{i}.bin"
        rates.append(len(data) / _write_fsync(path, lambda f: f.write(data)))
        path.unlink()
    syncs = []
    small = folder / "fsync.bin"
    with open(small, "wb") as f:
        for _ in range(sz.fsyncs):
            f.write(os.urandom(4096))
            f.flush()
            t0 = time.perf_counter()
            os.fsync(f.fileno())
            syncs.append(time.perf_counter() - t0)
    small.unlink()
    return {
        "checkpoint_write_bandwidth": cal.Measurement.of(
            rates,
            "bytes/s",
            f"a {len(data) / 2**20:,.0f} MiB file written and fsynced, "
            f"{len(rates)} times, in the working folder",
        ),
        "fsync": cal.Measurement.of(
            syncs, "s", f"fsync after a 4 KiB write, {len(syncs)} times"
        ),
    }


# --- data: the tokenizer and the loaders ----------------------------------------------


def tokenizer_throughput(data: TextData, sz: Sizes) -> cal.Measurement:
    texts = data.texts[: sz.tokenizer_texts]
    rates = []
    for _ in range(sz.repeats):
        t0 = time.perf_counter()
        n = sum(len(d) for d in encode_documents(data.tok, texts, batched=False))
        rates.append(n / (time.perf_counter() - t0))
    return cal.Measurement.of(
        rates,
        "tokens/s",
        f"byte-level BPE (V = {data.vocab_size:,}) encoding {len(texts)} Python "
        f"files one at a time on one thread, {sz.repeats} passes",
    )


def loader_throughput(data: TextData, batch: int, folder: Path, sz: Sizes):
    """Tokens/s a DataLoader (no workers) delivers from packed shards."""
    from mlbook.common_torch.checkpoint import ShardedSampler
    from mlbook.input_pipeline.experiments import ShardDataset

    s = data.seq_len
    n_rows = (len(data.stream) - 1) // (s + 1)
    rows = data.stream[: n_rows * (s + 1)].view(n_rows, s + 1).numpy()
    shard_files.write_shards(
        rows, folder, 256, data.vocab_size, tokenizer_sha256(data.tok), data.eos
    )
    loader = DataLoader(
        ShardDataset(shard_files.PackedShards(folder)),
        batch_size=batch,
        sampler=ShardedSampler(n_rows, seed=0),
        num_workers=0,
    )
    rates = []
    for _ in range(sz.repeats):
        t0, tokens = time.perf_counter(), 0
        for b in loader:
            tokens += b.shape[0] * s
        rates.append(tokens / (time.perf_counter() - t0))
    return cal.Measurement.of(
        rates,
        "tokens/s",
        f"DataLoader, no workers, batches of {batch} rows of {s} tokens from "
        f"packed shards ({n_rows:,} rows), {sz.repeats} epochs",
    )


class RawWindows(Dataset):
    """Item i: a window of raw text from a place seeded by i, tokenised, its
    first s + 1 ids (the capstone's loader that tokenises as it goes)."""

    def __init__(self, data: TextData, n_items: int):
        self.tok, self.raw, self.s = data.tok, data.raw, data.seq_len
        self.chars, self.n_items = data.raw_chars, n_items

    def __len__(self) -> int:
        return self.n_items

    def _ids(self, i) -> list:
        g = torch.Generator().manual_seed(i)
        start = int(torch.randint(len(self.raw) - self.chars, (1,), generator=g))
        return self.tok.encode(self.raw[start : start + self.chars]).ids

    def encoded(self, i) -> int:
        """Tokens the tokenizer produces for item i (all of them are paid for)."""
        return len(self._ids(i))

    def __getitem__(self, i):
        return torch.tensor(self._ids(i)[: self.s + 1])  # (s + 1,)


class _Fed:
    """A Loop's data source that takes batches from a DataLoader and keeps
    how long each one was waited for."""

    def __init__(self, loader):
        self.it, self.waits = iter(loader), []

    def batch(self, b: int, in_loop: bool = False):
        t0 = time.perf_counter()
        rows = next(self.it)  # (b, s + 1)
        self.waits.append(time.perf_counter() - t0)
        return rows[:, :-1], rows[:, 1:]


def fed_step(config, sizes, data, device, workers: int, steps: int):
    """Steps of the reference loop fed by a DataLoader of RawWindows with
    ``workers`` workers: (step seconds, wait seconds) of each timed step."""
    n = (steps + 2) * sizes.batch
    kw = {"num_workers": workers}
    if workers:
        kw |= {"prefetch_factor": 2, "timeout": 60.0}
    loader = DataLoader(RawWindows(data, n), batch_size=sizes.batch, **kw)
    fed = _Fed(loader)
    loop = Loop(replace(config, tokenise_in_loop=False), sizes, fed, device)
    step_s = time_steps(loop.step, steps, warmup=1, device=device)
    del fed.it
    return step_s, fed.waits[1:]


# --- the reference step ---------------------------------------------------------------


def timed(step, steps: int, warmup: int, device: str, clock: str) -> list:
    """Seconds of each of ``steps`` calls of ``step()`` after ``warmup``: by
    the wall clock, or (``clock="thread"``, one CPU thread) by the thread's
    CPU time, so that the time another process held the core is not the
    step's (the capstone's convention)."""
    if clock == "wall":
        return time_steps(step, steps, warmup=warmup, device=device)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.thread_time()
        step()
        times.append(time.thread_time() - t0)
    return times


def final_config(sizes: LadderSizes, bf16_fast: bool, device: str) -> LoopConfig:
    """The capstone ladder's last rung, every fix applied but torch.compile:
    the reference step is built three times (plain, accumulated, fed by a
    loader), and three compilations would take most of the minute."""
    config = slow_loop(sizes)
    for fix in ladder_fixes(bf16_fast=bf16_fast, compile_on=False):
        config = apply_fix(config, fix.name, sizes)
    return config


def calibrate(
    quick: bool = False,
    device: str = "auto",
    workdir=".",
    log=None,
    seed: int = 0,
) -> cal.Machine:
    """Measure this machine (module docstring) and return its Machine. Scratch
    files live in a temporary folder inside ``workdir``, removed however the
    run ends."""
    validate.boolean("quick", quick)
    log = log or (lambda *_: None)
    start = time.perf_counter()
    # how busy the machine was (every process on it, others' too): the
    # spreads are read against it
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    device = pick_device(device)
    sz = sizes_for(quick)
    # the loader's workers fork after the tokenizer has run: its thread pool
    # cannot follow them, and it would say so on stderr
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.manual_seed(seed)
    sizes = ladder_sizes(device, quick)
    cfg = model_config(sizes, pad_vocab=True)
    with cpu_threads(sizes.cpu_threads, device):
        info = device_info(device, sizes.cpu_threads)
    log(f"calibrating {info['name']} ({'quick' if quick else 'full'})")
    scratch = tempfile.TemporaryDirectory(prefix=".mlbook-calibrate-", dir=workdir)
    watcher = resources.PeakWatcher()
    with watcher, scratch as tmp, cpu_threads(sizes.cpu_threads, device):
        m, ref, sweeps = _hardware(device, cfg, sizes, sz, Path(tmp), log)
        data = TextData(sizes, seed)
        m |= _data(data, sizes, sz, Path(tmp), log)
        _release_memory()
        m |= _steps(m, data, sizes, device, sz, Path(tmp), ref, seed, log, sweeps)
        _release_memory()
        m["activation_bytes"], extras = activation_bytes(cfg, sizes, device, ref)
        ref["activation_extra_bytes"] = extras
    peak = watcher.peak
    log(
        f"peak resident memory: {peak.main_bytes / 2**20:,.0f} MiB this process, "
        f"{peak.children_bytes / 2**20:,.0f} MiB its largest child"
    )
    ref |= {
        "model": {
            "n_layers": cfg.n_layers,
            "d_model": cfg.d_model,
            "n_heads": cfg.n_heads,
            "vocab_size": cfg.vocab_size,
            "n_params": flops.n_params(cfg),
        },
        "seq_len": sizes.seq_len,
        "batch": sizes.batch,
        "tokens_per_step": sizes.batch * sizes.seq_len,
        "flops_per_token": flops.flops_per_token(cfg, sizes.seq_len),
    }
    created = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - start, 1),
        "quick": quick,
        "load_average_1min": None if load is None else round(load[0], 2),
        "peak_resident_bytes": peak.as_dict(),
    }
    # torch's own thread count, and the count the matmuls and steps ran on
    threads = {"step_threads": sizes.cpu_threads or torch.get_num_threads()}
    machine = cal.Machine(info, torch_info() | threads, m, ref, created)
    # the step against the peak and the ceiling, kept in the file beside it
    ref["step_mfu"] = cal.reference_mfu(machine)
    ref["step_of_mamf"] = cal.step_of_mamf(machine)
    return machine


def _release_memory() -> None:
    """Hand freed memory back to the system between stages, so that what one
    stage freed does not stand under the next stage's peak: collect cycles (a
    model and its optimizer can hold each other), then glibc's malloc_trim,
    which returns the free pages of every arena (each of torch's threads
    allocates from its own). Nothing where the C library has no malloc_trim."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _hardware(device, cfg, sizes, sz: Sizes, folder: Path, log) -> tuple:
    """Memory bandwidth, matmul ceilings, all-reduce and storage; and each
    fast dtype's sweep (for the step model's rates at the step's shapes)."""
    m, ref, sweeps = {}, {}, {}
    # the triad's three arrays are the run's largest allocation: first, before
    # the sweeps, the data and the models have left anything in memory
    _release_memory()
    with cpu_threads(usable_cores(), device):  # memory is the whole machine's
        bandwidth = memory_bandwidth(device, sz.repeats, sz.triad_min_bytes)
    log(f"memory bandwidth: {bandwidth.median / 1e9:,.2f} GB/s")
    clock = step_clock(device, sizes.cpu_threads)
    ref["clock"] = clock
    probe = matmul_probe(device, clock=clock)
    ref["matmul_probe_flops_per_s"] = probe
    include = gemm_shapes(cfg, sizes.batch * sizes.seq_len)
    fast = fast_dtypes(probe, device)
    ref["slow_dtypes"] = [d for d in cal.MAMF_DTYPES if d not in fast]
    for d in fast:
        budget = sz.mamf_budget_s
        sweep, ceiling = mamf_ceiling(d, device, budget, include, sz.repeats, clock)
        if d != "fp32" and device == "cpu" and ceiling.max < 0.5 * m["mamf_fp32"].max:
            ref["slow_dtypes"].append(d)  # the probe was fooled by a busy moment
            log(f"mamf_{d}: {ceiling.max / 1e9:,.1f} GFLOP/s at best, not fast here")
            continue
        m[f"mamf_{d}"], sweeps[d] = ceiling, sweep
        log(f"mamf_{d}: {ceiling.median / 1e9:,.1f} GFLOP/s")
    m["memory_bandwidth"] = bandwidth
    _release_memory()
    ar, ar_ref = allreduce(sz)
    m |= ar
    ref |= ar_ref
    alpha, beta = m["allreduce_alpha"].median, m["allreduce_beta"].median
    log(f"all-reduce: alpha {alpha * 1e6:,.1f} us, 1/beta {1 / beta / 1e9:,.2f} GB/s")
    m |= storage(folder, sz)
    bw, fsync = m["checkpoint_write_bandwidth"].median, m["fsync"].median
    log(f"storage: {bw / 1e9:,.2f} GB/s, fsync {fsync * 1e3:,.2f} ms")
    return m, ref, sweeps


def _data(data: TextData, sizes, sz: Sizes, folder: Path, log) -> dict:
    """Tokenizer and loader throughput."""
    m = {"tokenizer_throughput": tokenizer_throughput(data, sz)}
    (folder / "shards").mkdir()
    m["loader_throughput"] = loader_throughput(data, sizes.batch, folder / "shards", sz)
    log(
        f"tokenizer {m['tokenizer_throughput'].median:,.0f} tokens/s, "
        f"loader {m['loader_throughput'].median:,.0f} tokens/s"
    )
    return m


def _save(path: Path, model, opt) -> float:
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    return _write_fsync(path, lambda f: torch.save(state, f))


def _steps(m, data, sizes, device, sz: Sizes, folder, ref, seed, log, sweeps) -> dict:
    """The reference step, its checkpoint, the step model's inputs,
    accumulated, and fed by loaders."""
    out = {}
    fast = "mamf_bf16" in m and m["mamf_bf16"].median >= m["mamf_fp32"].median
    config = final_config(sizes, fast, device)
    loop = Loop(config, sizes, data, device, seed)
    warmup = 2 if config.compile else 1
    clock = step_clock(device, sizes.cpu_threads)
    for _ in range(warmup):
        loop.step()
    ops = stepmodel.operators_of(count_ops(loop.step))  # one more step, counted
    steps, rates = steps_and_rates(loop.step, ops, device, clock, sz)
    path = folder / "reference.pt"
    writes = [_save(path, loop.model, loop.opt) for _ in range(sz.repeats)]
    del loop
    _release_memory()  # before the next triad and the next loop
    out["reference_step"] = cal.Measurement.of(
        steps,
        "s",
        f"the capstone's final loop ({config.dtype}), {sz.steps} steps of "
        f"{sizes.batch} x {sizes.seq_len} tokens in {len(rates)} rounds, each "
        f"followed by its matmul and attention shapes timed again, "
        f"{torch.get_num_threads()} thread(s), {clock} clock",
    )
    log(f"reference step: {out['reference_step'].median * 1e3:,.1f} ms")
    out |= step_model_inputs(ops, rates, sweeps, device, sz, ref, clock)
    log(
        f"step model: {len(ref['step_model']['operators'])} kinds of operator, "
        f"{out['step_bandwidth'].median / 1e9:,.2f} GB/s on the step's threads, "
        f"{out['op_cost'].median * 1e6:,.1f} us an operator"
    )
    ref["checkpoint_bytes"] = path.stat().st_size
    out["checkpoint_write"] = cal.Measurement.of(
        writes,
        "s",
        f"torch.save of the reference model and AdamW state "
        f"({ref['checkpoint_bytes']:,} bytes) and fsync, {sz.repeats} times",
    )
    k = sz.accumulation_k
    micro = replace(config, micro_batch=sizes.batch // k)
    acc = Loop(micro, sizes, data, device, seed)
    out["accumulated_step"] = cal.Measurement.of(
        timed(acc.step, sz.steps, warmup, device, clock),
        "s",
        f"the reference step as {k} micro-steps of {sizes.batch // k} sequences, "
        f"{sz.steps} steps",
    )
    del acc
    _release_memory()
    log(f"accumulated over k = {k}: {out['accumulated_step'].median * 1e3:,.1f} ms")
    out |= loader_waits(config, sizes, data, device, sz, ref)
    log(
        f"loader: {ref['loader_workers']} worker(s) needed, step "
        f"{out['loader_step_workers'].median * 1e3:,.1f} ms with them"
    )
    ref |= {"step_dtype": config.dtype, "accumulation_k": k}
    return out


def steps_and_rates(step, ops, device: str, clock: str, sz: Sizes) -> tuple:
    """The reference step timed in rounds, each round's steps followed by
    the rates of the step's matmul and attention shapes timed again, so that
    the step and its operators' rates see the same load of a shared machine
    (as the MFU chapter times its ceiling in turns with its step): the step
    times, and each round's (matmul rates, attention rates)."""
    rounds = min(4, sz.steps)
    times, rates = [], []
    for r in range(rounds):
        n = sz.steps // rounds + (r < sz.steps % rounds)
        times += timed(step, n, 0, device, clock)
        with torch.inference_mode():
            gemm = opbench.gemm_rates(ops, {}, device, 0.01, clock)
        rates.append((gemm, opbench.attention_rates(ops, device, 2, clock)))
    return times, rates


def step_model_inputs(ops, rates, sweeps: dict, device, sz: Sizes, ref: dict, clock):
    """What the capstone's step model needs to predict the reference step:
    its Operators ``ops``, counted once; each matmul shape's rate, the
    median of the sweep's timing of it (``sweeps``, each dtype's MAMF sweep,
    which timed the step's shapes first) and of the timings taken in turns
    with the step (``rates``, steps_and_rates's); the fused attention's, the
    median of those; the triad's bandwidth on the step's threads and the
    small-operator benchmark's cost. The rates and operators go to
    ``ref["step_model"]``; the two measurements are returned."""
    gemm, attention = {}, {}
    for key in rates[0][0]:
        m, n, k, dtype = key
        sweep = {
            t.shape: t.flops_per_s for t in getattr(sweeps.get(dtype), "timings", ())
        }
        samples = [r[0][key] for r in rates] + (
            [sweep[(m, n, k)]] if (m, n, k) in sweep else []
        )
        gemm[key] = statistics.median(samples)
    for key in rates[0][1]:
        attention[key] = statistics.median(r[1][key] for r in rates)
    bandwidths = triad_bytes_per_s(sz.triad_min_bytes, sz.repeats, device, clock)
    costs = [opbench.op_cost_s(10, clock, device=device) for _ in range(sz.repeats)]
    ref["step_model"] = {  # as stepmodel.MachineModel.to_json writes them
        "gemm_flops_per_s": [[*k, v] for k, v in gemm.items()],
        "attention_flops_per_s": [[*k, v] for k, v in attention.items()],
        "ceiling_flops_per_s": {d: c.flops_per_s for d, c in sweeps.items()},
        "operators": stepmodel.operators_to_json(ops),
    }
    threads = torch.get_num_threads()
    return {
        "step_bandwidth": cal.Measurement.of(
            bandwidths,
            "bytes/s",
            f"triad a = b + 2c, 3 fp32 arrays of {sz.triad_min_bytes / 2**20:,.0f} "
            f"MiB (a fixed size), {len(bandwidths)} passes, {threads} thread(s) as "
            f"the step, {clock} clock",
        ),
        "op_cost": cal.Measurement.of(
            costs,
            "s",
            "the small-operator benchmark: the median of 10 training steps of 4 x "
            "(LayerNorm, 16 x 16 linear, GELU), batch 4, SGD, over the operators a "
            f"step runs; {len(costs)} times, {threads} thread(s), {clock} clock",
        ),
    }


def loader_waits(config, sizes, data, device, sz: Sizes, ref: dict) -> dict:
    """The reference step fed by a loader that tokenises: no workers (the
    wait is the load), then the workers the loader model needs."""
    steps, waits = fed_step(config, sizes, data, device, 0, sz.loader_steps)
    compute = [s - w for s, w in zip(steps, waits, strict=True)]
    need = pipeline.workers_needed(statistics.median(waits), statistics.median(compute))
    workers = min(need, sz.max_workers)
    steps_w, waits_w = fed_step(config, sizes, data, device, workers, sz.loader_steps)
    windows = RawWindows(data, sizes.batch)
    per_window = statistics.fmean(windows.encoded(i) for i in range(sizes.batch))
    ref |= {
        "loader_workers": workers,
        "loader_workers_needed": need,
        "loader_tokens_encoded_per_batch": per_window * sizes.batch,
        "loader_wait_workers_s": statistics.median(waits_w),
    }
    n = len(steps)
    return {
        "loader_wait_inline": cal.Measurement.of(
            waits, "s", f"waiting for a batch tokenised in the process, {n} steps"
        ),
        "loader_compute_inline": cal.Measurement.of(
            compute, "s", f"the step's own time beside that wait, {n} steps"
        ),
        "loader_step_workers": cal.Measurement.of(
            steps_w, "s", f"the step fed by {workers} loader worker(s), {n} steps"
        ),
    }


def activation_bytes(cfg, sizes, device: str, ref: dict):
    """Bytes one block of the reference model keeps for backward (fp32,
    attention written out, no dropout), beside Korthikanti's items."""
    block = tiny_config(n_layers=1, d_model=cfg.d_model, n_heads=cfg.n_heads)
    r = compare_block(block, sizes.seq_len, sizes.batch, "fp32", 0.0, device, "math")
    ref["activation_formula_bytes"] = r.formula_bytes
    method = (
        f"saved_tensors_hooks on one block (h = {cfg.d_model}, a = {cfg.n_heads}, "
        f"s = {sizes.seq_len}, b = {sizes.batch}, fp32, attention written out)"
    )
    v = r.measured_bytes
    return cal.Measurement(v, v, v, "bytes", method), dict(r.extras)
