"""Tests of the faults chapter's figures: they draw, label their axes, and draw
what they say (the cause counts, the straggler's bar)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mlbook.common_torch.launch import Launch  # noqa: E402
from mlbook.faults import experiments  # noqa: E402
from mlbook.faults import figures as figs  # noqa: E402
from mlbook.faults import formulas as faults  # noqa: E402


def _labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_static_figures_draw_with_labels():
    _labelled(figs.llama3_causes())
    _labelled(figs.drain_thresholds(ns=[2, 16, 1024]))


def test_the_cause_chart_draws_every_row_of_table_5():
    fig = figs.llama3_causes()
    bars = fig.axes[0].patches
    assert sorted(b.get_width() for b in bars) == sorted(
        r.count for r in faults.LLAMA3_INTERRUPTIONS
    )
    assert sum(b.get_width() for b in bars) == 419
    plt.close(fig)


def test_the_straggler_is_the_bar_at_zero():
    times = faults.simulate_step_times(16, 0.5, 0.05, steps=50, straggler_rank=3)
    fig = figs.straggler_waits(times, straggler_rank=3)
    heights = [b.get_height() for b in fig.axes[0].patches]
    assert len(heights) == 16 and heights[3] == 0 and min(np.delete(heights, 3)) > 0
    _labelled(fig)


def test_spike_and_timeline_figures():
    plain = experiments.spike_run(steps=80)
    rescued = experiments.spike_run(
        steps=80, policy=faults.RewindPolicy(rewind_steps=5, skip_batches=15)
    )
    fig = figs.spike_runs(plain, rescued, bad=(60, 64), device_name="CPU: test")
    assert "CPU: test" in fig.axes[0].get_title()
    _labelled(fig)
    ev = [
        {"kind": "step", "attempt": 0, "rank": 0, "t": float(s), "step": s}
        for s in range(1, 6)
    ]
    ev += [
        {"kind": "checkpoint", "attempt": 0, "rank": 0, "t": 4.1, "step": 4},
        {"kind": "fail", "attempt": 0, "rank": 1, "t": 5.5, "step": 5},
        {"kind": "resume", "attempt": 1, "rank": 0, "t": 8.0, "step": 4},
    ]
    ev += [
        {"kind": "step", "attempt": 1, "rank": 0, "t": 8.0 + s, "step": s}
        for s in range(5, 9)
    ]
    run = experiments.ElasticRun(
        launch=Launch(0, 9.0, ""),
        events=tuple(ev),
        final_state={},
        summary=faults.summarize_timeline(ev),
        t0=0.0,
    )
    fig = figs.elastic_timeline(run, reference=run, device_name="CPU: test")
    assert "CPU: test" in fig.axes[0].get_title()  # a measured figure names its device
    _labelled(fig)
