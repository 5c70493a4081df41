"""The matmul ceiling probe: it keeps the best shape, respects its budget and
stays below the nominal peak."""

import pytest
import torch

from mlbook.common.accelerators import cpu_nominal_peak_flops_per_s
from mlbook.common_torch import mamf


def test_grid_holds_multiples_of_64_and_the_models_shapes_first():
    grid = mamf.shape_grid(
        max_dim=512, min_dim=256, step=128, include=((100, 200, 300), (256, 256, 256))
    )
    assert grid[0] == (100, 200, 300) and grid[1] == (256, 256, 256)
    assert (
        len(grid) == 1 + 3**3
    )  # 256, 384, 512 in each of m, n, k; the duplicate dropped
    assert all(d % 64 == 0 for shape in grid[1:] for d in shape)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(step=100), "multiple of 64"),
        (dict(min_dim=1024, max_dim=512), "min_dim"),
        (dict(include=((0, 1, 1),)), "three positive sizes"),
        (dict(max_dim=0), "max_dim"),
    ],
)
def test_grid_rejects_bad_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mamf.shape_grid(**kwargs)


def test_ceiling_is_the_best_timed_shape_and_below_the_nominal_peak():
    with torch.inference_mode():
        c = mamf.find_ceiling("fp32", budget_s=0.5, max_dim=512, min_run_time_s=0.01)
    assert c.flops_per_s == max(t.flops_per_s for t in c.timings)
    assert (c.m, c.n, c.k) == (c.timings[0].m, c.timings[0].n, c.timings[0].k)
    peak, _ = cpu_nominal_peak_flops_per_s("fp32")
    assert (
        0 < c.flops_per_s < peak
    )  # a measurement above the datasheet is a broken probe


def test_a_tiny_budget_still_times_one_shape_and_stops():
    c = mamf.find_ceiling("fp32", budget_s=1e-6, max_dim=1024, min_run_time_s=0.01)
    assert len(c.timings) == 1 and c.grid_size == 64


def test_the_models_own_shapes_are_timed_first():
    c = mamf.find_ceiling(
        "fp32", budget_s=1e-6, include=((64, 96, 160),), min_run_time_s=0.01
    )
    assert c.shape == (64, 96, 160)


def test_refine_never_lowers_the_ceiling():
    c = mamf.find_ceiling("fp32", budget_s=0.2, max_dim=512, min_run_time_s=0.01)
    r = mamf.refine(c, top=2, min_run_time_s=0.01)
    assert r.flops_per_s >= c.flops_per_s and len(r.timings) == len(c.timings)


def test_time_matmul_counts_2mnk():
    """A 1x1x1 matmul still counts 2 FLOPs; a bigger one proportionally more work,
    so its rate is finite and positive."""
    f = mamf.time_matmul(64, 64, 64, min_run_time_s=0.01)
    assert f > 0
    with pytest.raises(ValueError, match="dtype"):
        mamf.time_matmul(64, 64, 64, dtype="int8")
    with pytest.raises(ValueError, match="budget_s"):
        mamf.find_ceiling(budget_s=0)


def test_merge_keeps_each_shapes_best_and_refuses_mixed_dtypes():
    a = mamf._ceiling(
        [mamf.MatmulTiming(64, 64, 64, 1e9), mamf.MatmulTiming(128, 64, 64, 3e9)],
        "fp32",
        "cpu",
        2,
        1.0,
    )
    b = mamf._ceiling([mamf.MatmulTiming(64, 64, 64, 4e9)], "fp32", "cpu", 5, 2.0)
    m = mamf.merge(a, b)
    assert m.flops_per_s == 4e9 and m.shape == (64, 64, 64) and len(m.timings) == 2
    assert m.grid_size == 5 and m.seconds == 3.0
    with pytest.raises(ValueError, match="one dtype"):
        mamf.merge(
            a,
            mamf._ceiling([mamf.MatmulTiming(64, 64, 64, 1e9)], "bf16", "cpu", 1, 0.0),
        )


def test_time_matmul_runs_on_torchs_thread_count(monkeypatch):
    """benchmark.Timer defaults to one thread; the probe must pass torch's count,
    or a two-thread step beats a one-thread 'ceiling'."""
    seen = {}
    real = mamf.benchmark.Timer

    def spy(*args, **kwargs):
        seen["num_threads"] = kwargs.get("num_threads")
        return real(*args, **kwargs)

    monkeypatch.setattr(mamf.benchmark, "Timer", spy)
    mamf.time_matmul(64, 64, 64, min_run_time_s=0.01)
    assert seen["num_threads"] == torch.get_num_threads()


def test_the_bibliography_points_to_the_mamf_finders_chapter():
    """Bekman's MAMF finder is in compute/accelerator
    (compute/accelerator/benchmarks/mamf-finder.py in stas00/ml-engineering),
    not training/performance."""
    import re
    from pathlib import Path

    bib = (
        Path(__file__).resolve().parent.parent / "book" / "references.bib"
    ).read_text()
    entry = bib[bib.index("@misc{bekman2024mlengineering") :].split("\n}", 1)[0]
    (note,) = re.findall(r"note = \{(.*)\}", entry)
    assert "compute/accelerator (MAMF finder" in note
    assert not re.search(r"training/performance \([^)]*MAMF", note)


# --- the clock: a ceiling timed like the step it bounds -------------------------


def test_the_thread_clock_needs_one_cpu_thread():
    with pytest.raises(ValueError, match="clock='thread'.*one CPU thread"):
        mamf.time_matmul(64, 64, 64, num_threads=2, clock="thread")
    with pytest.raises(ValueError, match="clock"):
        mamf.time_matmul(64, 64, 64, num_threads=1, clock="cpu")


def test_sweeps_on_different_clocks_do_not_merge():
    wall = mamf.find_ceiling(budget_s=0.01, max_dim=256, min_run_time_s=0.005)
    thread = mamf.find_ceiling(
        budget_s=0.01, max_dim=256, min_run_time_s=0.005, num_threads=1, clock="thread"
    )
    assert (wall.clock, thread.clock) == ("wall", "thread")
    assert mamf.refine(thread, 1, 0.005, num_threads=1).clock == "thread"
    with pytest.raises(ValueError, match="clock"):
        mamf.merge(wall, thread)


@pytest.mark.alone  # another worker's processes on that core would share it too
def test_a_process_sharing_the_core_lowers_the_wall_clock_ceiling_only():
    """Physics, not the code under test: with a busy process pinned to the same
    CPU, the wall clock charges the matmul for the time the other process
    held the core, and the thread's CPU time does not."""
    import os
    import subprocess
    import sys

    cpu = min(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    # the hog says when it spins: a Python start-up can outlast a 0.3 s timing,
    # and a wall clock timed before it spins is not shared (a flaky failure)
    spin = "print('spinning', flush=True)\nwhile True: pass"
    hog = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        assert hog.stdout.readline() == b"spinning\n"
        # one 1024^3 matmul takes ~30 ms here, longer than the scheduler's
        # slices: every timed block spans the hog's turns. A 256^3 one (0.4 ms)
        # fits inside the test's own slice, so a best-of-blocks wall clock
        # could miss the hog entirely (3 failures in 14 runs here)
        kw = dict(num_threads=1, min_run_time_s=0.3)
        wall = mamf.time_matmul(1024, 1024, 1024, clock="wall", **kw)
        thread = mamf.time_matmul(1024, 1024, 1024, clock="thread", **kw)
    finally:
        os.sched_setaffinity(0, mine)
        hog.kill()
        hog.wait()
    assert thread > 1.3 * wall, (thread, wall)
