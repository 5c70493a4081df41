"""Workers of the scaling chapter's measurements (``mlbook.scaling.experiments``
forks them with ``mlbook.common_torch.launch.fork_group``; torchrun could start
them the same way with ``python -m mlbook.scaling.dist_script``).

Every worker joins a gloo process group over the loopback interface, runs
one task, and rank 0 writes a JSON report to ``--out``:

- ``allreduce``: times ``dist.all_reduce`` of fp32 buffers of each size;
- ``overlap``: times forward + backward of the small GPT under DDP, with and
  without gradient synchronisation, for several bucket sizes;
- ``sharded``: trains the small GPT a few Adam steps under
  ``ZeroRedundancyOptimizer`` (ZeRO-1) and FSDP2 ``fully_shard`` (ZeRO-3),
  counts the bytes of the tensors each rank holds, and compares losses and
  weights with one process training on the whole batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist

# Imported here, not in the tasks: the ranks are forks of the process that
# imported this module, so they share these imports instead of paying for
# them once each.
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from mlbook.common_torch.gpt import GPT, random_batch, tiny_config
from mlbook.scaling import formulas

CHECK_BAND = (
    0.25  # a size whose best time lies further than this from the fit is measured again
)


# ---------------------------------------------------------------------------
# all-reduce times
# ---------------------------------------------------------------------------


def _decide(value: float) -> float:
    """Rank 0's number, given to every rank (so all run the same loop counts)."""
    t = torch.tensor([value], dtype=torch.float64)
    dist.broadcast(t, src=0)
    return float(t.item())


def _timed_allreduce(x: torch.Tensor, scratch: torch.Tensor | None = None) -> float:
    """Seconds of one all-reduce of ``x``. With ``scratch``, each rank first
    writes over it (not timed), which pushes everything else out of the CPU's
    caches; a barrier then starts the ranks together, so the all-reduce
    starts cold."""
    if scratch is not None:
        scratch.add_(1.0)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    return time.perf_counter() - t0


def _rounds(
    buffers: list, min_rounds: int, budget_s: float, scratch=None, repeats: int = 5
) -> list[list]:
    """Per buffer, the median seconds of ``repeats`` all-reduces in each
    round. A round measures every buffer in turn, so a busy spell on the
    machine slows every size a little rather than a few sizes a lot; as many
    rounds as fit in ``budget_s``, at least ``min_rounds``."""
    for x in buffers:  # warm-up, and what a round costs
        _timed_allreduce(x, scratch)
    start = time.perf_counter()
    for x in buffers:
        _timed_allreduce(x, scratch)
    per_round = _decide(repeats * (time.perf_counter() - start))
    count = int(max(min_rounds, min(100, budget_s / max(per_round, 1e-6))))
    medians = [[] for _ in buffers]
    for _ in range(count):
        for i, x in enumerate(buffers):
            medians[i].append(
                statistics.median(_timed_allreduce(x, scratch) for _ in range(repeats))
            )
    return medians


def _far_from_fit(sizes: list, blocks: list, world: int) -> bool:
    """Whether some size's best block lies more than CHECK_BAND from the
    alpha-beta fit of the best blocks, or no fit exists (times that do not
    grow with the message size, which only interference makes)."""
    best = [min(b) for b in blocks]
    try:
        fit = formulas.fit_alpha_beta(sizes, best, world)
    except ValueError:
        return True
    return any(
        abs(t / fit.predict_s(s) - 1) > CHECK_BAND
        for s, t in zip(sizes, best, strict=True)
    )


def task_allreduce(args) -> dict:
    sizes = [int(s) for s in args.sizes.split(",")]
    world = dist.get_world_size()
    scratch = torch.zeros(args.flush_bytes // 4) if args.flush_bytes else None
    buffers = [torch.ones(s // 4) for s in sizes]  # fp32: 4 bytes a value
    budget = args.budget_s * len(sizes)
    blocks = _rounds(buffers, args.blocks, budget, scratch, args.repeats)
    rounds = 0
    # Interference from other processes only ever adds time: while a size's
    # best block lies far from the fit, every size is measured again and the
    # best blocks kept.
    for rounds in range(1, args.rounds + 1):
        far = 0.0
        if dist.get_rank() == 0:
            far = float(_far_from_fit(sizes, blocks, world))
        if not _decide(far):
            rounds -= 1
            break
        for b, more in zip(
            blocks,
            _rounds(buffers, args.blocks_again, budget, scratch, args.repeats),
            strict=True,
        ):
            b.extend(more)
    return {"n_ranks": world, "sizes": sizes, "blocks": blocks, "rounds": rounds}


# ---------------------------------------------------------------------------
# DDP: overlap of the gradient all-reduce with backward
# ---------------------------------------------------------------------------


def _cfg(args):
    return tiny_config(
        n_layers=args.layers,
        d_model=args.d_model,
        n_heads=args.heads,
        vocab_size=args.vocab,
    )


def _model(args) -> GPT:
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    return GPT(_cfg(args), max_seq_len=args.seq)


def _global_batch(args, step: int):
    """The whole step's batch (b per rank, every rank's share): (b N, s)
    ids and targets."""
    g = torch.Generator().manual_seed(args.seed * 1000 + step)
    return random_batch(
        _cfg(args), args.batch * dist.get_world_size(), args.seq, generator=g
    )


def _my_slice(x, rank, world):
    per = x.shape[0] // world
    return x[rank * per : (rank + 1) * per]


def _counting_hook(calls: list, bucket):
    """DDP's own all-reduce hook, counting the buckets it is called for."""
    calls.append(bucket.buffer().numel())
    return default_hooks.allreduce_hook(None, bucket)


def task_overlap(args) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    caps = [float(c) for c in args.caps.split(",")]
    idx, tgt = (_my_slice(t, rank, world) for t in _global_batch(args, 0))
    # one copy of the model per bucket size (same weights), so that the sizes
    # can take turns step by step and a busy spell hits them all alike
    wrapped, calls = [], []
    for cap in caps:
        ddp = DDP(_model(args), bucket_cap_mb=cap, gradient_as_bucket_view=True)
        calls.append([])
        ddp.register_comm_hook(calls[-1], _counting_hook)
        wrapped.append(ddp)
    params = list(wrapped[0].module.parameters())
    n_params = sum(p.numel() for p in params)
    grad_bytes = sum(p.numel() * p.element_size() for p in params)

    def step(ddp, sync: bool) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        with nullcontext() if sync else ddp.no_sync():
            _, loss = ddp(idx, tgt)
            loss.backward()
        return time.perf_counter() - t0

    for ddp in wrapped:  # warm-up both paths (DDP rebuilds its buckets)
        step(ddp, True)
        step(ddp, False)
    for c in calls:
        c.clear()
    sync_s = [[] for _ in caps]
    nosync_s = [[] for _ in caps]
    for i in range(args.steps):
        for j, ddp in enumerate(wrapped):
            for sync in (True, False) if (i + j) % 2 == 0 else (False, True):
                (sync_s if sync else nosync_s)[j].append(step(ddp, sync))
    rows = [
        {
            "bucket_cap_mb": cap,
            "buckets": len(calls[j]) // args.steps,
            "sync_s": sync_s[j],
            "no_sync_s": nosync_s[j],
        }
        for j, cap in enumerate(caps)
    ]
    flat = torch.zeros(n_params)
    (ar,) = _rounds([flat], args.blocks, args.budget_s)
    return {
        "n_ranks": world,
        "n_params": n_params,
        "grad_bytes": grad_bytes,
        "rows": rows,
        "allreduce_blocks": ar,
        "tokens_per_rank": args.batch * args.seq,
    }


# ---------------------------------------------------------------------------
# ZeRO-1 and FSDP2: what each rank holds, and whether training is unchanged
# ---------------------------------------------------------------------------


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _count(tensors) -> dict:
    """Logical bytes (elements x element size) and the bytes of the distinct
    storages behind them (what the allocator really gave: padding included)."""
    logical, storages = 0, {}
    for t in tensors:
        t = _local(t)
        logical += t.numel() * t.element_size()
        st = t.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
    return {
        "bytes": logical,
        "storage_bytes": sum(storages.values()),
        "tensors": len(storages),
    }


def _state_tensors(opt_state: dict):
    moments, steps = [], []
    for state in opt_state.values():
        for t in state.values():
            if isinstance(t, torch.Tensor):
                (steps if _local(t).dim() == 0 else moments).append(t)
    return moments, steps


def _reference(args) -> tuple[list, dict]:
    """One process, whole global batch: the losses and final weights to match."""
    model = _model(args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    for step in range(args.steps):
        idx, tgt = _global_batch(args, step)
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, tgt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def _weight_gaps(weights: dict, ref_weights: dict, init_weights: dict) -> dict:
    """Largest |w - w_ref| over all weights, and ||w - w_ref|| / ||w_ref - w_0||:
    the difference as a share of how far training moved the weights."""
    diff = torch.cat([(weights[n] - ref_weights[n]).flatten() for n in ref_weights])
    moved = torch.cat(
        [(ref_weights[n] - init_weights[n]).flatten() for n in ref_weights]
    )
    return {
        "weight_gap": float(diff.abs().max()),
        "weight_gap_rel": float(
            torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(moved)
        ),
    }


def _mean_over_ranks(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def _train(args, model, opt) -> list:
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = []
    for step in range(args.steps):
        idx, tgt = (_my_slice(t, rank, world) for t in _global_batch(args, step))
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, tgt)
        loss.backward()
        opt.step()
        losses.append(_mean_over_ranks(loss.item()))
    return losses


def _run_zero1(args, ref_weights, init_weights) -> dict:
    model = _model(args)
    ddp = DDP(model, gradient_as_bucket_view=True)
    opt = ZeroRedundancyOptimizer(
        ddp.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr
    )
    losses = _train(args, ddp, opt)
    params = list(model.parameters())
    owned = [p for g in opt.optim.param_groups for p in g["params"]]
    moments, steps = _state_tensors(opt.optim.state)
    gaps = _weight_gaps(
        {n: p.detach() for n, p in model.named_parameters()}, ref_weights, init_weights
    )
    return {
        "weights": _count(params),
        "grads": _count([p.grad for p in params]),
        "moments": _count(moments),
        "steps": _count(steps),
        "owned_params": sum(p.numel() for p in owned),
        "owned_tensors": len(owned),
        "losses": losses,
        **gaps,
    }


def _run_fsdp2(args, ref_weights, init_weights) -> dict:
    model = _model(args)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses = _train(args, model, opt)
    params = list(model.parameters())
    moments, steps = _state_tensors(opt.state)
    local = sum(_local(p).numel() for p in params)
    gaps = _weight_gaps(
        {n: p.full_tensor().detach() for n, p in model.named_parameters()},
        ref_weights,
        init_weights,
    )
    return {
        "weights": _count(params),
        "grads": _count([p.grad for p in params]),
        "moments": _count(moments),
        "steps": _count(steps),
        "owned_params": local,
        "owned_tensors": len(params),
        "losses": losses,
        **gaps,
    }


def task_sharded(args) -> dict:
    ref_losses, ref_weights = _reference(args)
    init_weights = {n: p.detach() for n, p in _model(args).named_parameters()}
    n_params = sum(p.numel() for p in ref_weights.values())
    out = {
        "n_ranks": dist.get_world_size(),
        "n_params": n_params,
        "ref_losses": ref_losses,
        "shapes": {n: list(p.shape) for n, p in ref_weights.items()},
    }
    for name, run in (("zero1", _run_zero1), ("fsdp2", _run_fsdp2)):
        mine = run(args, ref_weights, init_weights)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        out[name] = gathered
    return out


TASKS = {"allreduce": task_allreduce, "overlap": task_overlap, "sharded": task_sharded}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, choices=sorted(TASKS))
    p.add_argument("--out", required=True)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    # all-reduce sweep
    p.add_argument("--sizes", default="1024,65536")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--blocks-again", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--flush-bytes", type=int, default=64 << 20)
    # the small GPT
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--caps", default="1,25")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    try:
        report = TASKS[args.task](args)
        if dist.get_rank() == 0:
            with open(args.out, "w") as f:
                json.dump(report, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
