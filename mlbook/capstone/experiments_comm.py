"""Two processes: exposed communication and a straggler, measured.

Two forked processes train the small GPT with DDP over gloo, one thread
each, in four modes taking turns (``COMM_MODES``); ``comm_run`` returns each
rank's step times and the time before it waited on the collective.
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mlbook.common import validate
from mlbook.common_torch.device import device_description
from mlbook.common_torch.gpt import GPT, tiny_config
from mlbook.common_torch.timing import cpu_threads

# --- two processes: exposed communication and a straggler -----------------------------


@dataclass(frozen=True)
class CommRun:
    """Per-mode, per-rank step times (seconds) of a two-process gloo DDP run."""

    ranks: int
    steps: int
    delay_s: float  # the extra time the slow rank spent each straggler step
    slow_rank: int
    step_s: dict  # mode -> (steps, ranks) nested tuples: wall time of the whole step
    compute_s: (
        dict  # mode -> (steps, ranks): time before the rank waited on the collective
    )
    grad_bytes: int
    device: str

    def median(self, mode: str, what: str = "step_s") -> float:
        """The median over steps of the slowest rank's time: a step ends when
        the last rank ends."""
        rows = getattr(self, what)[mode]
        return statistics.median(max(r) for r in rows)

    def waits_s(self, mode: str) -> tuple:
        """Per rank, the median over steps of the time it waited at the
        collective (its step minus its own work; of an even count, the upper
        of the two middle values)."""
        out = []
        for r in range(self.ranks):
            waits = sorted(
                s[r] - c[r]
                for s, c in zip(self.step_s[mode], self.compute_s[mode], strict=True)
            )
            out.append(waits[len(waits) // 2])
        return tuple(out)


COMM_MODES = ("local", "overlap", "no_overlap", "straggler")


def _ddp_worker(argv):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    opts = json.loads(argv[0])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    cfg = tiny_config(**opts["model"])
    model = GPT(cfg, max_seq_len=opts["seq_len"], attn_impl="sdpa")
    ddp = DDP(model, bucket_cap_mb=opts["bucket_cap_mb"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(rank)
    ids = torch.randint(
        cfg.vocab_size, (opts["batch"], opts["seq_len"] + 1), generator=g
    )
    idx, tgt = ids[:, :-1], ids[:, 1:]
    params = [p for p in model.parameters() if p.requires_grad]
    out = {
        "step_s": {},
        "compute_s": {},
        "delay_s": 0.0,
        "grad_bytes": sum(p.numel() * p.element_size() for p in params),
    }

    def run(mode, delay):
        dist.barrier()
        start = time.perf_counter()
        if mode == "overlap":  # DDP: buckets all-reduced while backward runs
            _, loss = ddp(idx, tgt)
            loss.backward()
            computed = time.perf_counter()  # the last bucket's wait is inside backward
        else:
            with ddp.no_sync():
                _, loss = ddp(idx, tgt)
                loss.backward()
            if mode == "straggler" and rank == opts["slow_rank"]:
                time.sleep(delay)
            computed = time.perf_counter()
            if mode != "local":  # one all-reduce after backward: nothing overlaps it
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                dist.all_reduce(flat)
                flat /= dist.get_world_size()
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = time.perf_counter()
        return end - start, computed - start

    # The local step first (it sets the straggler's delay), then every
    # mode in turn, round after round, so that a machine whose speed drifts
    # drifts under all four alike.
    local = [run("local", 0.0)[0] for _ in range(opts["warmup"] + 2)][opts["warmup"] :]
    t = torch.tensor([min(local)])
    dist.broadcast(t, 0)
    delay = opts["delay_fraction"] * float(t)
    out["delay_s"] = delay
    for mode in COMM_MODES:
        out["step_s"][mode], out["compute_s"][mode] = [], []
        for _ in range(opts["warmup"]):
            run(mode, delay)
    for _ in range(opts["steps"]):
        for mode in COMM_MODES:
            total, computed = run(mode, delay)
            out["step_s"][mode].append(total)
            out["compute_s"][mode].append(computed)
    Path(opts["out"], f"rank{rank}.json").write_text(json.dumps(out))
    # DDP's reducer holds work of the process group: it goes first. Left to
    # the return, after the group was destroyed, a rank once sat in that
    # teardown (its stacks: at the worker's call of this function, no frame
    # below) past fork_group's 120 s limit, at reader sizes here.
    ddp = opt = None  # (run() holds them too: its cells are cleared with these)
    gc.collect()
    dist.destroy_process_group()


def comm_run(
    steps: int = 9,
    warmup: int = 1,
    slow_rank: int = 1,
    delay_fraction: float = 1.0,
    model: dict | None = None,
    seq_len: int = 64,
    batch: int = 4,
    bucket_cap_mb: float = 0.25,
    timeout_s: float = 120.0,
) -> CommRun:
    """Two forked processes train the small GPT with DDP over gloo (one
    thread each) in four modes: ``local`` (no all-reduce: compute alone),
    ``overlap`` (DDP's buckets all-reduced during backward), ``no_overlap``
    (one all-reduce after backward), ``straggler`` (as no_overlap, with
    ``slow_rank`` sleeping ``delay_fraction`` of the fastest local step
    before it). The modes take turns, one step each, ``steps`` rounds."""
    from mlbook.common_torch.launch import fork_group

    validate.positive_int("steps", steps)
    validate.fraction("delay_fraction", delay_fraction)
    model = model or dict(n_layers=2, d_model=128, n_heads=2, vocab_size=512)
    with tempfile.TemporaryDirectory(prefix="mlbook-comm-") as tmp:
        opts = dict(
            steps=steps,
            warmup=warmup,
            slow_rank=slow_rank,
            delay_fraction=delay_fraction,
            model=model,
            seq_len=seq_len,
            batch=batch,
            bucket_cap_mb=bucket_cap_mb,
            out=tmp,
        )
        launch = fork_group(
            _ddp_worker, [json.dumps(opts)], nproc=2, timeout_s=timeout_s
        )
        if launch.returncode != 0:
            raise RuntimeError(
                f"the gloo run failed (exit {launch.returncode}):\n"
                f"{launch.output[-3000:]}"
            )
        per_rank = [
            json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)
        ]
    step_s = {
        m: tuple(zip(*(r["step_s"][m] for r in per_rank), strict=True))
        for m in COMM_MODES
    }
    compute_s = {
        m: tuple(zip(*(r["compute_s"][m] for r in per_rank), strict=True))
        for m in COMM_MODES
    }
    with cpu_threads(1):
        who = device_description("cpu") + " per process"
    return CommRun(
        2,
        steps,
        per_rank[0]["delay_s"],
        slow_rank,
        step_s,
        compute_s,
        per_rank[0]["grad_bytes"],
        who,
    )
