"""Tests of the faults chapter's figures: they draw, label their axes, and the slider is cheap."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mlbook.faults import formulas as faults  # noqa: E402
from mlbook.faults import experiments as faults_demos  # noqa: E402
from mlbook.plotting import widgets  # noqa: E402
from mlbook.faults import figures as figs  # noqa: E402


def _labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_static_figures_draw_with_labels():
    _labelled(figs.llama3_causes())
    _labelled(figs.drain_thresholds(ns=[2, 16, 1024]))
    times = faults.simulate_step_times(16, 0.2, 0.05, steps=50, straggler_rank=3)
    _labelled(figs.straggler_waits(times, straggler_rank=3))


@pytest.mark.parametrize("n,delta,sigma", [(1024, 0.1, 0.05), (2, 0.0, 0.0), (1, 0.3, 0.1), (16384, 1.0, 0.3)])
def test_straggler_slider_draws_everywhere_on_its_range(n, delta, sigma):
    _labelled(figs.straggler_curves(n, delta, sigma))


def test_straggler_slider_redraw_is_cheap():
    # the book's budget is 100 ms on an idle machine; allow for a shared, loaded one
    assert widgets.redraw_seconds(figs.straggler_curves, n_ranks=1024, delta=0.1, sigma=0.05) < widgets.redraw_budget_s()


def test_spike_and_timeline_figures():
    plain = faults_demos.spike_run(steps=80)
    rescued = faults_demos.spike_run(steps=80, policy=faults.RewindPolicy(rewind_steps=5, skip_batches=15))
    _labelled(figs.spike_runs(plain, rescued, bad=(60, 64)))
    ev = [{"kind": "step", "attempt": 0, "rank": 0, "t": float(s), "step": s} for s in range(1, 6)]
    ev += [{"kind": "checkpoint", "attempt": 0, "rank": 0, "t": 4.1, "step": 4},
           {"kind": "fail", "attempt": 0, "rank": 1, "t": 5.5, "step": 5},
           {"kind": "resume", "attempt": 1, "rank": 0, "t": 8.0, "step": 4}]
    ev += [{"kind": "step", "attempt": 1, "rank": 0, "t": 8.0 + s, "step": s} for s in range(5, 9)]
    run = faults_demos.ElasticRun(launch=faults_demos.Launch(0, 9.0, ""), events=ev, final_state={},
                                  summary=faults.summarize_timeline(ev), t0=0.0)
    _labelled(figs.elastic_timeline(run, reference=run))
