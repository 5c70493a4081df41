"""A real two-process data-parallel run (DDP over gloo on the CPU) that counts
and times the gradient all-reduces of each optimizer step, with and without
``no_sync`` on the first k - 1 micro-batches.

DDP all-reduces gradients during every backward, bucket by bucket, unless the
backward runs inside ``model.no_sync()``; then the gradients just accumulate
locally and the next synchronised backward all-reduces the sum. The count
comes from a DDP communication hook that wraps torch's own ``allreduce_hook``
(so the reduction is the library's), adding a counter and a timer.

Two processes are started as fresh interpreters (``python -m`` this module,
as torchrun would), bound to 127.0.0.1 on a free port; each loop is bounded,
and both are killed if they outlive ``timeout_s`` or one of them fails. The
model and data are the toy pieces of ``mlbook.accumulation.experiments``,
which does not import this module back.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from mlbook.accumulation.experiments import (
    full_batch_grads,
    make_mlp,
    max_abs_diff,
    regression_batch,
)
from mlbook.common import validate
from mlbook.common_torch.launch import free_port

WORLD_SIZE = 2
MODES = ("sync every micro-batch", "no_sync until the last")


class _Counter:
    """Per-backward tally the comm hook fills in."""

    def __init__(self):
        self.calls, self.bytes, self.seconds = 0, 0, 0.0


def counting_allreduce_hook(counter: _Counter, bucket):
    """torch's default all-reduce hook, counted and timed (launch to result)."""
    buf = bucket.buffer()
    counter.calls += 1
    counter.bytes += buf.numel() * buf.element_size()
    start = time.perf_counter()
    fut = default_hooks.allreduce_hook(None, bucket)

    def done(f):
        counter.seconds += time.perf_counter() - start
        return f.value()

    return fut.then(done)


def _worker(
    rank: int,
    port: int,
    k: int,
    steps: int,
    micro_batch: int,
    d_hidden: int,
    seed: int,
    out_dir: str,
):
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=30),
    )
    try:
        d_in, d_out = 32, 8
        model = make_mlp("layernorm", d_in, d_hidden, d_out, seed=seed)
        ddp = DDP(model)
        counter = _Counter()
        ddp.register_comm_hook(counter, counting_allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        # Every rank draws the whole global batch and keeps its own slice, so
        # rank 0 can check the synchronised gradient against one process.
        per_rank = k * micro_batch
        X_all, y_all = regression_batch(
            WORLD_SIZE * per_rank, d_in, d_out, seed=seed + 1
        )
        X, y = (
            X_all[rank * per_rank : (rank + 1) * per_rank],
            y_all[rank * per_rank : (rank + 1) * per_rank],
        )
        micro = list(zip(X.chunk(k), y.chunk(k), strict=True))
        result = {
            "rank": rank,
            "k": k,
            "world_size": WORLD_SIZE,
            "micro_batch": micro_batch,
            "n_params": sum(p.numel() for p in model.parameters()),
            "modes": {},
        }
        for mode in MODES:
            rows = []
            for step in range(steps + 1):  # step 0 is a warm-up
                reference = (
                    full_batch_grads(ddp.module, F.mse_loss, X_all, y_all)
                    if step == 0
                    else None
                )
                dist.barrier()
                counter.__init__()
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                for j, (X_j, y_j) in enumerate(micro):
                    skip = mode == MODES[1] and j < k - 1
                    with ddp.no_sync() if skip else nullcontext():
                        (F.mse_loss(ddp(X_j), y_j) / k).backward()
                grads = [p.grad.clone() for p in ddp.module.parameters()]
                opt.step()
                elapsed = time.perf_counter() - start
                if step == 0:
                    result["modes"].setdefault(mode, {})["grad_diff"] = max_abs_diff(
                        grads, reference
                    )
                else:
                    rows.append(
                        {
                            "step_s": elapsed,
                            "allreduces": counter.calls,
                            "allreduce_bytes": counter.bytes,
                            "allreduce_s": counter.seconds,
                        }
                    )
            result["modes"][mode]["steps"] = rows
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        del ddp, opt  # the reducer before the group (see the capstone's comm run)
        gc.collect()
        # both ranks done before either tears the group down: a rank whose peer
        # closed its sockets first once aborted in gloo's teardown ("terminate
        # called without an active exception", exit -6) in a loaded make test
        dist.barrier()
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class ModeSummary:
    """One mode of allreduce_counts: medians over the timed steps of rank 0."""

    allreduces_per_step: int
    allreduce_bytes_per_step: int
    allreduce_s_per_step: float  # time inside the all-reduces, launch to result
    step_s: float
    ranks_agree: bool  # rank 1 counted the same all-reduces at every step
    grad_diff: float  # largest |DDP gradient - one process's full global batch|


@dataclass(frozen=True)
class DDPCounts:
    k: int
    world_size: int
    micro_batch: int
    n_params: int
    modes: dict  # mode (one of MODES) -> ModeSummary


def allreduce_counts(
    k: int = 4,
    steps: int = 3,
    micro_batch: int = 8,
    d_hidden: int = 256,
    timeout_s: float = 60.0,
    seed: int = 0,
) -> DDPCounts:
    """Two gloo ranks, k micro-batches per optimizer step, ``steps`` timed
    steps per mode (after a warm-up step). Per mode: all-reduces per step,
    bytes, seconds inside all-reduce and step time (medians over steps), and
    the largest difference between the DDP gradient and one process's
    full-global-batch gradient."""
    validate.positive_int("k", k)
    validate.positive_int("steps", steps)
    validate.positive_int("micro_batch", micro_batch)
    validate.positive_int("d_hidden", d_hidden)
    validate.positive("timeout_s", timeout_s)
    if steps > 50 or k > 64:
        raise ValueError(
            f"steps={steps} and k={k} must stay at most 50 and 64: this is a demo"
        )
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        # Each rank is a fresh interpreter running this module (as torchrun
        # would start it), so no caller's __main__ is re-imported.
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    __name__,
                    str(rank),
                    str(port),
                    str(k),
                    str(steps),
                    str(micro_batch),
                    str(d_hidden),
                    str(seed),
                    tmp,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            for rank in range(WORLD_SIZE)
        ]
        deadline = time.monotonic() + timeout_s
        try:
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the DDP demo did not finish in timeout_s={timeout_s} s"
                    )
                if any(p.returncode not in (None, 0) for p in procs):
                    break  # one failed: stop the other
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
        failed = [
            (r, p.returncode, p.stdout.read()[-2000:])
            for r, p in enumerate(procs)
            if p.returncode
        ]
        for p in procs:
            p.stdout.close()
        if failed:
            rank, code, log = failed[0]
            raise RuntimeError(f"DDP rank {rank} exited with code {code}:\n{log}")
        results = [
            json.loads(Path(tmp, f"rank{r}.json").read_text())
            for r in range(WORLD_SIZE)
        ]
    first, other = results
    modes = {}
    for mode in MODES:
        rows = first["modes"][mode]["steps"]
        counts_other = [r["allreduces"] for r in other["modes"][mode]["steps"]]
        modes[mode] = ModeSummary(
            allreduces_per_step=statistics.median_low(r["allreduces"] for r in rows),
            allreduce_bytes_per_step=statistics.median_low(
                r["allreduce_bytes"] for r in rows
            ),
            allreduce_s_per_step=statistics.median(r["allreduce_s"] for r in rows),
            step_s=statistics.median(r["step_s"] for r in rows),
            ranks_agree=counts_other == [r["allreduces"] for r in rows],
            grad_diff=first["modes"][mode]["grad_diff"],
        )
    return DDPCounts(
        k=first["k"],
        world_size=first["world_size"],
        micro_batch=first["micro_batch"],
        n_params=first["n_params"],
        modes=modes,
    )


if __name__ == "__main__":
    rank_, port_, k_, steps_, b_, d_, seed_ = (int(a) for a in sys.argv[1:8])
    _worker(rank_, port_, k_, steps_, b_, d_, seed_, sys.argv[8])
