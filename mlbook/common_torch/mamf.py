"""The maximum achievable matmul FLOP/s (MAMF) of a device: a ceiling a
training step cannot beat.

One square matmul is not a ceiling: a step whose own GEMMs have friendlier
shapes can run faster than it (this book saw a step at 110 % of a 1024^3
probe). In the style of Bekman's MAMF finder (ML Engineering, "maximum
achievable matmul FLOPS"), ``find_ceiling`` sweeps matmul shapes (m, n, k)
over a grid of multiples of 64/128 plus the shapes the model itself runs,
times each with torch.utils.benchmark (which synchronises CUDA and warms up),
and keeps the best, within a budget of seconds. Bekman's published H100 SXM
BF16 figure is about 794.5 of 989 TFLOP/s (80 %), A100 SXM BF16 about 271 of
312 (87 %).

``refine`` re-times the best shapes found so far; a page calls it between
measurements of the step it compares against, so that a machine whose speed
drifts is probed at the same times as the step.

Threads: torch.utils.benchmark.Timer runs its statement on ONE thread unless
told otherwise, while a training step uses every thread torch has. A ceiling
timed on one thread is no ceiling for a step on two (on a 2-core CPU the step
beat it by half). Every timing here therefore runs on ``num_threads``, by
default ``torch.get_num_threads()``, the count the step runs on.

Layout: as in Bekman's finder, B is stored (n x k) and transposed, the layout
of a linear layer's weight (Y = X W^T).

Clock: by default a timing is wall time, right for a GPU or for several
threads. A step that a page times by its thread's CPU time (one CPU thread,
on a machine other processes share) is compared with a ceiling timed the
same way, ``clock="thread"``: timed by the wall, a matmul loses the time
another process held the core and the ceiling comes out low, so that a step
"beats" it (seen at test sizes on a 2-core machine under load).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch
from torch.utils import benchmark

from mlbook.common import validate
from mlbook.common_torch.dtypes import DTYPES

# The dtypes a matmul ceiling is probed in (fp8 matmuls need scaled
# kernels, not torch.mm).
MATMUL_DTYPES = ("fp32", "bf16", "fp16")

# "wall": the wall clock; "thread": the calling thread's CPU time (one thread only)
CLOCKS = ("wall", "thread")


@dataclass(frozen=True)
class MatmulTiming:
    m: int
    n: int
    k: int
    flops_per_s: float

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)


@dataclass(frozen=True)
class MatmulCeiling:
    """The best matmul found: its FLOP/s, shape and dtype, and every shape timed."""

    flops_per_s: float
    m: int
    n: int
    k: int
    dtype: str
    device: str
    timings: tuple  # MatmulTiming for every shape timed, best first
    grid_size: int  # how many shapes the sweep had to choose from
    seconds: float  # wall time the sweep took
    clock: str = "wall"  # what each timing was timed by (CLOCKS)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)


def shape_grid(
    max_dim: int = 2048, min_dim: int = 256, step: int = 256, include: tuple = ()
) -> list[tuple[int, int, int]]:
    """(m, n, k) shapes: every combination of multiples of ``step`` from
    ``min_dim`` to ``max_dim`` (step a multiple of 64), plus ``include`` (the
    model's own GEMM shapes), duplicates removed, the model's shapes first."""
    validate.positive_int("max_dim", max_dim)
    validate.positive_int("min_dim", min_dim)
    validate.positive_int("step", step)
    if step % 64:
        raise ValueError(
            f"step={step} must be a multiple of 64 (the tile sizes matmul kernels use)"
        )
    if min_dim > max_dim:
        raise ValueError(f"min_dim={min_dim} must not exceed max_dim={max_dim}")
    dims = range(min_dim, max_dim + 1, step)
    out, seen = [], set()
    for shape in list(include) + list(itertools.product(dims, dims, dims)):
        shape = tuple(int(x) for x in shape)
        if len(shape) != 3 or any(x <= 0 for x in shape):
            raise ValueError(
                f"a matmul shape is three positive sizes (m, n, k), got {shape!r}"
            )
        if shape not in seen:
            seen.add(shape)
            out.append(shape)
    return out


def _order(grid, include_count: int):
    """The model's shapes first, then the grid from large to small volume,
    interleaved with a deterministic shuffle so a short budget still samples
    every size."""
    own, rest = grid[:include_count], grid[include_count:]
    rest = sorted(rest, key=lambda s: -(s[0] * s[1] * s[2]))
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(rest), generator=g).tolist()
    # alternate: biggest remaining, random remaining
    order, used = [], set()
    big = iter(range(len(rest)))
    for r in perm:
        for idx in (next(big, None), r):
            if idx is not None and idx not in used:
                used.add(idx)
                order.append(rest[idx])
    return own + order


def _threads(num_threads) -> int:
    return (
        torch.get_num_threads()
        if num_threads is None
        else validate.positive_int("num_threads", num_threads)
    )


def _timer_kwargs(clock: str, threads: int, device: str) -> dict:
    """benchmark.Timer's ``timer``: its own default for the wall clock (which
    synchronises CUDA before reading the clock), the thread's CPU time else."""
    validate.one_of("clock", clock, CLOCKS)
    if clock == "wall":
        return {}
    if threads != 1 or str(device).startswith("cuda"):
        raise ValueError(
            f"clock='thread' times the calling thread's CPU time, so it needs one CPU "
            f"thread; got num_threads={threads} on {device}"
        )
    return {"timer": time.thread_time}


def time_matmul(
    m: int,
    n: int,
    k: int,
    dtype: str = "fp32",
    device: str = "cpu",
    min_run_time_s: float = 0.05,
    num_threads: int | None = None,
    clock: str = "wall",
) -> float:
    """Best-of-blocks FLOP/s of one (m x k) @ (k x n) matmul: 2 m n k FLOPs,
    on ``num_threads`` CPU threads (default: torch's current count), timed
    by ``clock`` (module docstring)."""
    validate.one_of("dtype", dtype, MATMUL_DTYPES)
    for name, v in (("m", m), ("n", n), ("k", k)):
        validate.positive_int(name, v)
    validate.positive("min_run_time_s", min_run_time_s)
    threads = _threads(num_threads)
    timer_kwargs = _timer_kwargs(clock, threads, device)
    a = torch.randn(m, k, device=device, dtype=DTYPES[dtype])
    b = torch.randn(
        n, k, device=device, dtype=DTYPES[dtype]
    ).t()  # (k, n), a linear weight's layout
    timer = benchmark.Timer(
        stmt="torch.mm(a, b)",
        globals={"torch": torch, "a": a, "b": b},
        num_threads=threads,
        **timer_kwargs,
    )
    seconds = min(timer.blocked_autorange(min_run_time=min_run_time_s).times)
    return 2 * m * n * k / seconds


def find_ceiling(
    dtype: str = "fp32",
    device: str = "cpu",
    budget_s: float = 5.0,
    include: tuple = (),
    max_dim: int | None = None,
    min_dim: int = 256,
    step: int | None = None,
    min_run_time_s: float = 0.02,
    num_threads: int | None = None,
    clock: str = "wall",
) -> MatmulCeiling:
    """Sweep matmul shapes for ``budget_s`` seconds and return the best.

    The grid runs to 2048 on a CPU and 8192 on a GPU in steps of 256 (512 on
    a GPU) unless told otherwise; ``include`` adds the model's own shapes,
    which are timed first. At least one shape is always timed.
    """
    validate.one_of("dtype", dtype, MATMUL_DTYPES)
    validate.positive("budget_s", budget_s)
    on_gpu = str(device).startswith("cuda")
    max_dim = max_dim or (8192 if on_gpu else 2048)
    step = step or (512 if on_gpu else 256)
    grid = shape_grid(max_dim, min_dim, step, include)
    start = time.perf_counter()
    timings = []
    for m, n, k in _order(grid, len(set(map(tuple, include)))):
        if timings and time.perf_counter() - start > budget_s:
            break
        timings.append(
            MatmulTiming(
                m,
                n,
                k,
                time_matmul(m, n, k, dtype, device, min_run_time_s, num_threads, clock),
            )
        )
    return _ceiling(
        timings, dtype, device, len(grid), time.perf_counter() - start, clock
    )


def _ceiling(timings, dtype, device, grid_size, seconds, clock="wall") -> MatmulCeiling:
    timings = sorted(timings, key=lambda t: -t.flops_per_s)
    best = timings[0]
    return MatmulCeiling(
        best.flops_per_s,
        best.m,
        best.n,
        best.k,
        dtype,
        str(device),
        tuple(timings),
        grid_size,
        seconds,
        clock,
    )


def refine(
    ceiling: MatmulCeiling,
    top: int = 3,
    min_run_time_s: float = 0.05,
    num_threads: int | None = None,
) -> MatmulCeiling:
    """Time the ``top`` best shapes again and keep, per shape, the better of
    the two measurements: call it between measurements of a step, so the
    ceiling is probed while the machine runs as fast as it did for the step.
    The shapes are timed by the ceiling's own clock."""
    validate.positive_int("top", top)
    again = {(t.m, t.n, t.k): t for t in ceiling.timings}
    for t in ceiling.timings[:top]:
        f = time_matmul(
            t.m,
            t.n,
            t.k,
            ceiling.dtype,
            ceiling.device,
            min_run_time_s,
            num_threads,
            ceiling.clock,
        )
        if f > t.flops_per_s:
            again[(t.m, t.n, t.k)] = MatmulTiming(t.m, t.n, t.k, f)
    return _ceiling(
        list(again.values()),
        ceiling.dtype,
        ceiling.device,
        ceiling.grid_size,
        ceiling.seconds,
        ceiling.clock,
    )


def merge(a: MatmulCeiling, b: MatmulCeiling) -> MatmulCeiling:
    """Two sweeps of the same dtype, device and clock as one: each shape at the
    better of its measurements, the best shape the ceiling."""
    if (a.dtype, a.device, a.clock) != (b.dtype, b.device, b.clock):
        raise ValueError(
            "can only merge sweeps of one dtype, device and clock, got "
            f"{a.dtype}/{a.device}/{a.clock} and {b.dtype}/{b.device}/{b.clock}"
        )
    best = {}
    for t in a.timings + b.timings:
        key = (t.m, t.n, t.k)
        if key not in best or t.flops_per_s > best[key].flops_per_s:
            best[key] = t
    return _ceiling(
        list(best.values()),
        a.dtype,
        a.device,
        max(a.grid_size, b.grid_size),
        a.seconds + b.seconds,
        a.clock,
    )
