"""A loader in closed form, and what a trainer asks of it.

The loader model (BRIEF section 7). A batch costs ``load_s`` seconds of one
worker's time to produce (read, decode, tokenise, collate) and ``compute_s``
seconds of the device's time to train on.

- ``workers = 0``: the training process loads the batch itself, then
  computes; nothing overlaps, so a step costs ``load_s + compute_s``.
- ``workers >= 1``: the workers load ahead while the device computes. Each
  finishes a batch every ``load_s``, so together they deliver one every
  ``load_s / workers``; the device takes one every ``compute_s``. The steady
  state runs at the slower of the two: ``max(compute_s, load_s / workers)``.
  The first batch of an epoch still takes ``load_s`` to arrive (the warm-up).

What the model leaves out, on purpose: starting worker processes, collating
and moving the batch between processes, pinning and the host-to-device copy,
jitter in the per-item cost, and cores: it assumes every worker has a core of
its own. The chapter measures each of these against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.mfu.formulas import max_tokens_per_s


def _workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer at or above 0, got {workers!r}")
    return workers


def _check(load_s, compute_s, workers) -> int:
    validate.positive("load_s", load_s)
    validate.positive("compute_s", compute_s)
    return _workers(workers)


def loader_step_s(load_s: float, compute_s: float, workers: int) -> float:
    """Seconds per step in the steady state.

    load_s + compute_s with no workers; max(compute_s, load_s / workers) with
    ``workers`` loading in parallel while the device computes.
    """
    w = _check(load_s, compute_s, workers)
    return load_s + compute_s if w == 0 else max(compute_s, load_s / w)


def device_idle_fraction(load_s: float, compute_s: float, workers: int) -> float:
    """Share of each steady-state step in which the device waits for data:
    1 - compute_s / step. Zero once the workers outrun the device."""
    return max(0.0, 1.0 - compute_s / loader_step_s(load_s, compute_s, workers))


# What two workers did to the wait before each step, by the ratio of their
# measured wait to the wait with none. The steady-state model says they remove
# it when a batch loads no slower than a step computes; what remains is the
# warm-up (the first batches, loaded before any step ran) and, on a machine with
# fewer free cores than workers plus the trainer, the cores they share. Seen on
# 2-core CPUs: 0.003-0.007 at reader sizes, 0.22-0.32 at test sizes (fewer steps
# to spread the warm-up over).
WAIT_VERDICTS = (
    (0.5, "workers hid most of the wait"),
    (1.0, "workers hid some of the wait"),
    (math.inf, "workers hid none of the wait"),
)


def wait_verdict(wait_ratio: float) -> str:
    """The label of the first WAIT_VERDICTS bound ``wait_ratio`` (the wait
    with workers over the wait without) is below."""
    validate.non_negative("wait_ratio", wait_ratio)
    return next(label for bound, label in WAIT_VERDICTS if wait_ratio < bound)


def loader_epoch_s(
    n_batches: int, load_s: float, compute_s: float, workers: int
) -> float:
    """Seconds for ``n_batches`` steps, warm-up included.

    No workers: n (load_s + compute_s). With workers: the first batch arrives
    after load_s, the next n - 1 come one steady-state step apart, and the
    last one is computed: load_s + (n - 1) max(compute_s, load_s / w) +
    compute_s. (With prefetching the steady state can start a little sooner;
    on Bekman's benchmark with two workers this form is 0.05 s above the exact
    schedule of 10 batches.)
    """
    validate.positive_int("n_batches", n_batches)
    w = _check(load_s, compute_s, workers)
    if w == 0:
        return n_batches * (load_s + compute_s)
    return load_s + (n_batches - 1) * max(compute_s, load_s / w) + compute_s


def loader_overhead_s(
    n_batches: int, load_s: float, compute_s: float, workers: int
) -> float:
    """What the loader adds to an epoch: epoch time minus n x compute_s.

    This is what Bekman's ``num-workers-bench.py`` reports ("average time"):
    the wall time of an epoch minus the emulated compute it slept.
    """
    return loader_epoch_s(n_batches, load_s, compute_s, workers) - n_batches * compute_s


def workers_needed(load_s: float, compute_s: float) -> int:
    """The fewest workers that keep the device busy: ceil(load_s / compute_s).

    Fewer leave the device idle for part of every step; more buy nothing in
    this model (they absorb jitter, which the model leaves out). A relative
    slack of 1e-9 keeps a ratio such as 0.3 / 0.1 = 2.9999999999999996 or
    3.0000000000000004 at 3.
    """
    validate.positive("load_s", load_s)
    validate.positive("compute_s", compute_s)
    return max(1, math.ceil(load_s / compute_s * (1 - 1e-9)))


def trainer_tokens_per_s(
    cfg: TransformerConfig,
    seq_len: int,
    peak_flops_per_s: float,
    mfu: float,
    n_gpus: int = 1,
) -> float:
    """Tokens per second a trainer consumes at a given MFU: what the loader
    must deliver, summed over ``n_gpus`` GPUs.

    tokens/s = MFU x G x peak / (6 N_matmul + 12 L h s), the MFU equation
    solved for tokens/s (``mlbook.mfu.formulas.max_tokens_per_s`` is the same
    at MFU = 1).
    """
    validate.fraction("mfu", mfu)
    return mfu * max_tokens_per_s(cfg, seq_len, peak_flops_per_s, n_gpus)


@dataclass(frozen=True)
class PublishedLoaderBench:
    """A published DataLoader benchmark: its settings and what it reported."""

    n_items: int
    item_cost_s: float  # a time.sleep per item: an emulated slow transform
    item_bytes: int  # what each item returns
    batch_size: int
    compute_s: float  # a time.sleep per batch: emulated compute
    runs: int  # epochs averaged
    pin_memory: bool
    persistent_workers: bool
    overhead_s: dict  # num_workers -> epoch time minus compute, seconds
    machine: str
    source: str

    @property
    def n_batches(self) -> int:
        return self.n_items // self.batch_size

    @property
    def load_s(self) -> float:
        """Per-batch load time of one worker: batch_size x item_cost_s."""
        return self.batch_size * self.item_cost_s


BEKMAN_NUM_WORKERS = PublishedLoaderBench(
    n_items=1000,
    item_cost_s=0.005,
    item_bytes=2**20,
    batch_size=100,
    compute_s=0.2,
    runs=10,
    pin_memory=True,
    persistent_workers=False,
    overhead_s={0: 5.388, 1: 3.900, 2: 1.333, 3: 0.839, 4: 0.875},
    machine=(
        "a CUDA machine (the script copies each batch to cuda:0; "
        "the README does not name the GPU)"
    ),
    source="Bekman, ML Engineering open book, training/performance/README.md and "
    "benchmarks/dataloader/num-workers-bench.py",
)


# The same README's pinned-memory benchmark (pin-memory-non-block-bench.py): the
# setup above without the per-item sleep, five workers, each batch copied to
# the GPU; "average time" per epoch minus compute, on an A100 80GB PCIe.
BEKMAN_PIN_MEMORY_S = {
    (True, True): 0.459,  # (pin_memory, non_blocking): seconds
    (True, False): 0.522,
    (False, True): 0.658,
    (False, False): 0.646,
}


@dataclass(frozen=True)
class PublishedThroughput:
    """A tokenizer's published throughput: text bytes a second (a bound
    where the source gives one), on what, and where it is said."""

    what: str
    bytes_per_s: float
    source: str


# Hugging Face tokenizers' README (bindings/python/README.md): "Takes less than
# 20 seconds to tokenize a GB of text on a server's CPU": at least 1e9 / 20 =
# 50 MB/s, on all of a server's cores (encode_batch), a vendor's claim.
HF_TOKENIZERS_SERVER = PublishedThroughput(
    "tokenizers, a server's CPU, all cores (at least)",
    1e9 / 20,
    "Hugging Face tokenizers README",
)
