"""Worker script of the elastic-restart demo, launched by torchrun.

    python -m torch.distributed.run --nproc-per-node 2 --max-restarts 1 \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT \\
        -m mlbook.faults.elastic_script \\
        --workdir DIR --steps 40 --ckpt-every 10 --fail-step 27 --fail-rank 1

Each worker trains the shared toy MLP (``mlbook.common_torch.toy_models``)
with DDP over gloo, reading its shard of a fixed data set through
``mlbook.common_torch.checkpoint.ShardedSampler``, and saves the whole training state
with ``mlbook.common_torch.checkpoint.Checkpointer`` (torch.distributed.checkpoint)
every ``--ckpt-every`` steps. On start it resumes from the latest checkpoint,
if there is one. In the first ``--fail-attempts`` attempts (torchrun's
TORCHELASTIC_RESTART_COUNT counts them from 0; -1: every attempt), rank ``--fail-rank``
dies abruptly with os._exit(1) once ``--fail-step`` steps are done; torchrun then
tears down the group and starts it again, until ``--max-restarts`` runs out. Every rank
appends its events (start, resume, step, checkpoint, fail, done) with wall times to
``DIR/events-rank<r>.jsonl``; rank 0 writes the final weights to ``DIR/final.pt``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from mlbook.common_torch import toy_models
from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler


class EventLog:
    """Append-only JSON lines, flushed per event so a crash loses nothing logged."""

    def __init__(self, path: Path, rank: int, attempt: int):
        self.f = open(path, "a", buffering=1)
        self.rank, self.attempt = rank, attempt

    def __call__(self, kind: str, **fields):
        rec = {
            "kind": kind,
            "t": time.time(),
            "rank": self.rank,
            "attempt": self.attempt,
            **fields,
        }
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def init_gloo(attempt: int, timeout_s: float) -> None:
    """Join the gloo group of this attempt.

    Under torchrun the store at MASTER_ADDR:MASTER_PORT belongs to the agent
    and outlives a restart. Gloo publishes each rank's address in it; if a
    restarted worker read the key its dead predecessor wrote, it would dial
    a closed port. A prefix per attempt keeps every attempt's keys apart.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=rank == 0 and not agent_store,
        timeout=timeout,
    )
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"mlbook/attempt{attempt}", store),
        rank=rank,
        world_size=world,
        timeout=timeout,
    )


def batches(sampler, x, y, batch_size: int):
    """Endless (x, y) batches in the sampler's order, epoch after epoch."""
    while True:
        idx = []
        for i in sampler:
            idx.append(i)
            if len(idx) == batch_size:
                yield x[idx], y[idx]
                idx = []


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--fail-step", type=int, default=-1, help="-1: never fail")
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument(
        "--fail-attempts",
        type=int,
        default=1,
        help="how many attempts fail (the first ones); -1: every attempt",
    )
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--n-samples", type=int, default=512)
    p.add_argument(
        "--step-s",
        type=float,
        default=0.0,
        help="sleep per step, standing in for compute",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    deadline = time.monotonic() + args.timeout_s
    torch.set_num_threads(1)  # the same arithmetic in every run, no oversubscription
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    init_gloo(attempt, args.timeout_s)
    rank, world = dist.get_rank(), dist.get_world_size()
    work = Path(args.workdir)
    log = EventLog(work / f"events-rank{rank}.jsonl", rank, attempt)
    log("start", world_size=world, pid=os.getpid())

    x, y = toy_models.dataset(args.n_samples, args.seed)
    model = DDP(toy_models.make_model(args.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sampler = ShardedSampler(args.n_samples, rank, world, seed=args.seed)
    ckpt = Checkpointer(work / "ckpt", keep_last=2)
    step = 0
    if ckpt.latest() is not None:
        step = ckpt.load(model, opt, sampler=sampler).step
        log("resume", step=step)
    data = batches(sampler, x, y, args.batch_size)

    while step < args.steps:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank {rank}: --timeout-s={args.timeout_s} reached at step {step}"
            )
        failing = args.fail_attempts < 0 or attempt < args.fail_attempts
        if failing and rank == args.fail_rank and step == args.fail_step:
            log("fail", step=step)
            os._exit(1)  # abrupt: no cleanup, no goodbye to the peers
        xb, yb = next(data)
        loss = toy_models.loss_fn(model, xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        if args.step_s:
            time.sleep(args.step_s)
        step += 1
        log("step", step=step, loss=loss.item())
        if step % args.ckpt_every == 0:
            ckpt.save(step, model, opt, sampler=sampler)
            log("checkpoint", step=step)

    ckpt.close()
    if rank == 0:
        torch.save(
            {k: v.detach().clone() for k, v in model.module.state_dict().items()},
            work / "final.pt",
        )
    log("done", step=step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
