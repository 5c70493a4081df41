"""Memory bandwidth, measured with a triad: a = b + 2c over three arrays.

STREAM's convention (McCalpin): each pass reads b and c and writes a, 12
bytes a value in fp32, and the bandwidth is those bytes over the pass's
time (the cache lines a write must first fetch are not counted, as in
STREAM). The arrays are sized by what the measurement needs, capped, and
never by the last-level cache a machine reports: a virtual machine may report
its host's whole cache, hundreds of MiB, and arrays grown from it would take
seconds and gigabytes. Large enough that the three do not fit the caches of
the cores that run the triad is what matters.
"""

from __future__ import annotations

import time

import torch

from mlbook.common import validate
from mlbook.common_torch.timing import sync

# each array at most (three of them are allocated); a GPU's arrays live in its
# own memory, tens of GiB, and must outgrow an L2 of up to ~100 MiB
MAX_ARRAY_BYTES = 256 * 2**20
MAX_GPU_ARRAY_BYTES = 2**30


def triad_bytes_per_s(
    array_bytes: int = 64 * 2**20,
    repeats: int = 5,
    device: str = "cpu",
    clock: str = "wall",
) -> list[float]:
    """Bytes a second of ``repeats`` triad passes (each after one untimed
    pass that faults the pages in) over three fp32 arrays of ``array_bytes``
    each, at most MAX_ARRAY_BYTES (MAX_GPU_ARRAY_BYTES on a GPU).
    ``clock="thread"`` times each pass by the calling thread's CPU time (one
    CPU thread: the time another process held the core is not the pass's),
    else by the wall clock."""
    array_bytes = validate.positive_int("array_bytes", array_bytes)
    cap = MAX_GPU_ARRAY_BYTES if device == "cuda" else MAX_ARRAY_BYTES
    if array_bytes > cap:
        raise ValueError(
            f"array_bytes={array_bytes:,} is above the cap of {cap:,} on {device} "
            "(three arrays are allocated)"
        )
    validate.positive_int("repeats", repeats)
    validate.one_of("clock", clock, ("wall", "thread"))
    if clock == "thread" and (device != "cpu" or torch.get_num_threads() != 1):
        raise ValueError(
            "clock='thread' times one CPU thread: set torch's threads to 1 on the "
            f"CPU, got {torch.get_num_threads()} on {device}"
        )
    now = time.thread_time if clock == "thread" else time.perf_counter
    n = array_bytes // 4
    a, b, c = (torch.ones(n, device=device) for _ in range(3))
    rates = []
    for i in range(repeats + 1):
        sync(device)
        t0 = now()
        torch.add(b, c, alpha=2.0, out=a)
        sync(device)
        if i:  # the first pass faults the pages in
            rates.append(12 * n / (now() - t0))
    del a, b, c
    return rates
