"""Child processes for the checkpointing tests (and anyone who wants to watch).

    python -m mlbook.checkpointing_worker crash ROOT WHERE
        Saves steps 1 and 2 of a small model whose weights all equal the step
        number, then starts saving step 3 and stops at WHERE ("write": DCP's
        data files are written, its metadata is not; "publish": the COMPLETE
        marker is written, the rename is not), prints READY and sleeps, so a
        parent can end it with SIGKILL at exactly that point.

    python -m torch.distributed.run --nproc-per-node 2 -m mlbook.checkpointing_worker ranks ROOT
        Two gloo ranks: a DDP model and a ShardedSampler per rank, a
        synchronous and an async save, then a load into fresh objects on every
        rank. Each rank writes ROOT/result-rank<r>.json.

Every wait is bounded: a child that is not killed exits after 60 s.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from mlbook.common_torch.checkpoint import Checkpointer, ShardedSampler


def _model(fill: float | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    if fill is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(fill)
    return model


def _stall(tag: str) -> None:
    print(tag, flush=True)
    time.sleep(60)
    sys.exit(3)   # never killed: fail loudly


def crash(root: str, where: str) -> None:
    import torch.distributed.checkpoint as dcp

    if where not in ("write", "publish"):
        raise SystemExit(f"where must be 'write' or 'publish', got {where!r}")
    ckpt = Checkpointer(root, keep_last=5)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(step))
        ckpt.save(step, model, opt, extra={"fill": float(step)})
    print("SAVED", ckpt.steps(), flush=True)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(3.0)
    if where == "write":
        real_finish = dcp.FileSystemWriter.finish

        def finish(self, metadata, results):   # the data files are on disk, .metadata is not
            _stall("READY")
            return real_finish(self, metadata, results)

        dcp.FileSystemWriter.finish = finish
    else:
        real_replace = os.replace

        def replace(src, dst, *a, **kw):       # the marker is written, the rename is not
            if Path(src).name.startswith(".tmp-step-00000003"):
                _stall("READY")
            return real_replace(src, dst, *a, **kw)

        os.replace = replace
    ckpt.save(3, model, opt, extra={"fill": 3.0})
    print("NOT KILLED", flush=True)
    sys.exit(4)


def ranks(root: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"rank": rank, "world": world}
    try:
        model = DDP(_model())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sampler = ShardedSampler(64, rank=rank, world_size=world, seed=7)
        ckpt = Checkpointer(Path(root) / "ckpt", keep_last=2)
        stream = iter(sampler)
        for step in range(1, 5):
            idx = torch.tensor([next(stream) for _ in range(4)])
            x = torch.randn(4, 32, generator=torch.Generator().manual_seed(int(idx.sum())))
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            ckpt.save(step, model, opt, sampler=sampler, async_=(step == 4))
        ckpt.wait()
        ref = {k: v.clone() for k, v in model.module.state_dict().items()}
        ref_rng = torch.rand(3).tolist()
        result["steps"] = ckpt.steps()
        result["latest"] = ckpt.latest().name

        fresh = DDP(_model(fill=0.5))
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
        fresh_sampler = ShardedSampler(64, rank=rank, world_size=world, seed=7)
        torch.manual_seed(999)
        loaded = ckpt.load(fresh, fresh_opt, sampler=fresh_sampler)
        result["loaded_step"] = loaded.step
        result["weights_equal"] = all(torch.equal(ref[k], v) for k, v in fresh.module.state_dict().items())
        result["rng_equal"] = torch.rand(3).tolist() == ref_rng
        result["sampler"] = fresh_sampler.state_dict()
        result["next_index"] = next(iter(fresh_sampler))
        result["expected_next_index"] = next(stream)
        ckpt.close()
        result["ok"] = True
    except Exception as exc:   # reported to the parent test, not swallowed
        result["error"] = repr(exc)
    finally:
        Path(root, f"result-rank{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "crash":
        crash(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "write")
    elif len(sys.argv) == 3 and sys.argv[1] == "ranks":
        ranks(sys.argv[2])
    else:
        raise SystemExit(__doc__)
