"""What the step model needs of a machine beyond its matmul sweep, measured:
the rate of a matmul or a fused attention kernel at a given shape, and what
one operator costs whatever it computes.

- ``gemm_rates``: the FLOP/s of every matmul shape among some operators,
  from a matmul sweep (mlbook.common_torch.mamf) where it timed the shape (it
  times a model's own shapes first) and timed here where it did not;
- ``attention_rates``: the causal fused attention kernel timed, forward and
  backward, at every attention shape among them;
- ``op_cost_s``: the small-operator benchmark: training steps of a stack of
  tiny layers (LayerNorm, a 16 x 16 linear layer, GELU, four times; a batch
  of 4; plain SGD), whose operators do next to no work, so that a step's
  time over its operators is what one operator costs whatever it computes:
  dispatch, autograd's bookkeeping, the Python between calls.

An operator here is anything with the fields of opcount.CountedOp that
matter (``gemm``, ``batch``, ``attention``, ``backward``, ``dtype``,
``flops``): counted operators, or mlbook.common.stepmodel's Operators.
Every timing runs on the current threads and on ``clock``: "wall", or
"thread" (the calling thread's CPU time, for one CPU thread).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

from mlbook.common import validate
from mlbook.common_torch import mamf
from mlbook.common_torch.dtypes import DTYPES
from mlbook.common_torch.opcount import count_ops
from mlbook.common_torch.timing import sync

CLOCKS = ("wall", "thread")


def _clock(clock: str):
    validate.one_of("clock", clock, CLOCKS)
    return time.thread_time if clock == "thread" else time.perf_counter


def gemm_rates(
    operators,
    ceilings: dict,
    device: str = "cpu",
    min_run_time_s: float = 0.02,
    clock: str = "wall",
) -> dict:
    """{(m, n, k, dtype): FLOP/s} for every matmul among ``operators``: the
    sweep's rate where ``ceilings[dtype]`` (a mamf.MatmulCeiling) timed the
    shape, else mamf.time_matmul's now."""
    out = {}
    for op in operators:
        if op.gemm is None or op.batch != 1 or not op.flops:
            continue
        key = (*op.gemm, op.dtype)
        if key in out:
            continue
        ceiling = ceilings.get(op.dtype)
        timed = {} if ceiling is None else {(t.m, t.n, t.k): t for t in ceiling.timings}
        hit = timed.get(op.gemm)
        if hit is not None:
            out[key] = hit.flops_per_s
        else:
            out[key] = mamf.time_matmul(
                *op.gemm, op.dtype, device, min_run_time_s, clock=clock
            )
    return out


def _best_s(fn, repeats: int, now, device: str) -> float:
    fn()  # warm
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = now()
        fn()
        sync(device)
        best = min(best, now() - t0)
    return best


def attention_rates(
    operators, device: str = "cpu", repeats: int = 5, clock: str = "wall"
) -> dict:
    """{(b, heads, s_q, s_k, head_dim, pass, dtype): FLOP/s} of the causal
    fused attention kernel at every attention shape among ``operators``,
    forward and backward: the best of ``repeats`` timings of the forward and
    of a forward and backward together, the backward their difference."""
    now = _clock(clock)
    out = {}
    for op in operators:
        if op.attention is None:
            continue
        b, heads, s_q, s_k, hd = op.attention
        fwd_key = (b, heads, s_q, s_k, hd, "forward", op.dtype)
        if fwd_key in out:
            continue
        dt = DTYPES[op.dtype]
        q = torch.randn(b, heads, s_q, hd, dtype=dt, device=device, requires_grad=True)
        k, v = (
            torch.randn(b, heads, s_k, hd, dtype=dt, device=device, requires_grad=True)
            for _ in range(2)
        )
        grad = torch.randn(b, heads, s_q, hd, dtype=dt, device=device)

        def forward(q=q, k=k, v=v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both(forward=forward, grad=grad):
            forward().backward(grad)

        fwd_s = _best_s(forward, repeats, now, device)
        both_s = _best_s(both, repeats, now, device)
        fwd_flops = sdpa_flop_count(q.shape, k.shape, v.shape)
        bwd_flops = sdpa_backward_flop_count(q.shape, q.shape, k.shape, v.shape)
        out[fwd_key] = fwd_flops / fwd_s
        # the backward alone: never faster than a tenth of the pair (a noisy
        # forward timing could leave nothing)
        out[(*fwd_key[:5], "backward", op.dtype)] = bwd_flops / max(
            both_s - fwd_s, 0.1 * both_s
        )
    return out


def op_cost_s(
    steps: int = 20, clock: str = "wall", width: int = 16, device: str = "cpu"
) -> float:
    """The small-operator benchmark (module docstring): the median step of
    ``steps`` over the operators one step runs, in seconds an operator."""
    validate.positive_int("steps", steps)
    validate.positive_int("width", width)
    now = _clock(clock)
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, width, generator=gen).to(device)
    y = torch.randn(4, width, generator=gen).to(device)

    def step():
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    n_ops = len(count_ops(step))
    times = []
    for _ in range(steps):
        sync(device)
        t0 = now()
        step()
        sync(device)
        times.append(now() - t0)
    return statistics.median(times) / n_ops
