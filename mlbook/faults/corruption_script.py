"""Worker of the silent-corruption demo (``mlbook.faults.experiments.run_corruption``
forks it).

Data-parallel replicas of the shared MLP over gloo. Every step, before the
optimizer step, the replicas compare two fingerprints of their gradients
(``mlbook.faults.formulas.CorruptionCheck``):

1. the norm of each replica's *local* gradient, gathered before the
   all-reduce (only gross outliers can be flagged: the data differ);
2. a bit-exact checksum of the *averaged* gradient after the all-reduce,
   which every replica must hold bit for bit.

If either check alarms, every replica skips the step (they all see the same
gathered fingerprints, so they all decide alike). The scenarios, run one after
another in the same process group, each from the same initial weights:

- ``clean``: no fault; no alarm may fire.
- ``exponent_before``: at ``--flip-step`` rank ``--flip-rank`` flips an exponent
  bit (bit 30) of its local gradient before the all-reduce (a miscomputing GPU).
  The all-reduce spreads it to everyone, so checksums still agree;
  the norm check catches it.
- ``mantissa_after``: the same rank flips a mantissa bit (bit 21: the value
  moves by a quarter or so) in its copy of the averaged gradient (a bad
  memory cell). Norms cannot see it; the
  checksum does.
- ``mantissa_after_unchecked``: the same flip with the checks off: training
  goes on and the replicas silently drift apart.

Rank 0 writes a JSON report to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mlbook.common_torch import toy_models
from mlbook.faults import formulas as faults

SCENARIOS = {  # name: (where the bit is flipped, which bit, checks on)
    "clean": (None, None, True),
    "exponent_before": ("before", 30, True),
    "mantissa_after": ("after", 21, True),
    "mantissa_after_unchecked": ("after", 21, False),
}
FLIP_INDEX = 7  # which gradient element is hit


def flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # (n_params,)


def set_grad(model, flat: torch.Tensor) -> None:
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def flip(flat: torch.Tensor, bit: int) -> torch.Tensor:
    return torch.from_numpy(faults.flip_bit(flat.numpy(), FLIP_INDEX, bit))


def gather_fingerprints(norm: float, checksum: int) -> tuple[list, list]:
    """Every replica's (local norm, checksum) in one all_gather: the float
    travels as its 64 bits reinterpreted as an integer."""
    mine = torch.tensor([norm], dtype=torch.float64).view(torch.int64)
    both = torch.cat([mine, torch.tensor([checksum], dtype=torch.int64)])  # (2,)
    out = [torch.zeros_like(both) for _ in range(dist.get_world_size())]
    dist.all_gather(out, both)
    return ([o[:1].view(torch.float64).item() for o in out], [o[1].item() for o in out])


def gather(value, dtype) -> list:
    t = torch.tensor([value], dtype=dtype)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [o.item() for o in out]


def run_scenario(name: str, args, check: faults.CorruptionCheck) -> dict:
    where, bit, checks_on = SCENARIOS[name]
    rank, world = dist.get_rank(), dist.get_world_size()
    model = toy_models.make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    records = []
    for step in range(args.steps):
        x, y = toy_models.batch(
            step * world + rank, seed=args.seed
        )  # each replica its own data
        opt.zero_grad(set_to_none=False)
        toy_models.loss_fn(model, x, y).backward()
        local = flat_grad(model)
        hit = step == args.flip_step and rank == args.flip_rank
        if hit and where == "before":
            local = flip(local, bit)
        norm = float(
            torch.linalg.vector_norm(local)
        )  # before the all-reduce mixes them
        dist.all_reduce(local, op=dist.ReduceOp.SUM)
        local /= world
        if hit and where == "after":
            local = flip(local, bit)
        norms, sums = gather_fingerprints(norm, faults.checksum(local.numpy()))
        by_norm, by_sum = check.compare_norms(norms), check.compare_checksums(sums)
        alarm = checks_on and (by_norm.alarm or by_sum.alarm)
        if not alarm:
            set_grad(model, local)
            opt.step()
        records.append(
            {
                "step": step,
                "norms": norms,
                "checksums": sums,
                "norm_alarm": by_norm.alarm,
                "norm_suspects": list(by_norm.suspects),
                "checksum_alarm": by_sum.alarm,
                "checksum_suspects": list(by_sum.suspects),
                "skipped": alarm,
            }
        )
    # Do the replicas still hold the same weights? Compare weight checksums.
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    wsum = gather(faults.checksum(weights.numpy()), torch.int64)
    diff = weights.clone()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    max_gap = float((diff - weights).abs().max())
    gap = gather(max_gap, torch.float64)
    return {
        "steps": records,
        "replicas_agree": len(set(wsum)) == 1,
        "max_weight_gap": max(gap),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--flip-step", type=int, default=3)
    p.add_argument("--flip-rank", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    check = faults.CorruptionCheck()
    start = time.perf_counter()
    report = {name: run_scenario(name, args, check) for name in SCENARIOS}
    report["_world_size"] = dist.get_world_size()
    report["_seconds"] = time.perf_counter() - start
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(report, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
