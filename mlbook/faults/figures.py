"""Figures of the faults chapter."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from mlbook.faults import formulas as faults
from mlbook.plotting.style import new_figure, plain_log_axis

CATEGORY_COLORS = {
    "GPU": "C3",
    "Dependency": "C0",
    "Network": "C1",
    "Unplanned maintenance": "C2",
    "Host": "C4",
    "Unknown": "C7",
}


def llama3_causes(rows=faults.LLAMA3_INTERRUPTIONS, log=faults.LLAMA3_405B_LOG):
    """The 419 unexpected interruptions of Llama 3 405B by root cause,
    coloured by category."""
    rows = sorted(rows, key=lambda r: r.count)
    fig, ax = new_figure(size=(7.0, 4.6), layout="constrained")
    colors = [CATEGORY_COLORS.get(r.category, "C8") for r in rows]
    ax.barh([r.component for r in rows], [r.count for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(r.count + 1, i, str(r.count), va="center", fontsize=8)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in CATEGORY_COLORS.items()],
        loc="lower right",
        fontsize=8,
        title="category",
    )
    ax.set_xlabel("unexpected interruptions (count)")
    ax.set_ylabel("root cause")
    ax.set_title(
        f"{log.name}: {log.unexpected} unexpected interruptions in {log.days:g} days",
        fontsize=10,
    )
    ax.tick_params(axis="y", labelsize=8)
    return fig


def drain_thresholds(sigmas=(0.0, 0.02, 0.05, 0.1), ns=None, mark_n: int | None = 1024):
    """The slowdown above which draining a slow rank beats waiting, against N."""
    ns = (
        ns
        if ns is not None
        else np.unique(np.round(np.logspace(1, 15, 29, base=2)).astype(int))
    )
    fig, ax = new_figure(layout="constrained")
    for i, sigma in enumerate(sigmas):
        thr = [faults.drain_threshold(int(n), sigma, tol=1e-5) for n in ns]
        label = "no spread: 1/(N-1)" if sigma == 0 else f"spread sigma={sigma:.0%}"
        ax.plot(
            ns,
            thr,
            marker=".",
            color=f"C{i}",
            ls=":" if sigma == 0 else "-",
            label=label,
        )
    if mark_n is not None:
        ax.axvline(mark_n, color="C7", lw=1)
    plain_log_axis(ax, "x", base=4)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:.3g}%"))
    ax.set_xlabel("ranks N")
    ax.set_ylabel("delta above which draining wins")
    ax.legend(fontsize=8)
    ax.set_title("when is a slow rank worth draining?", fontsize=10)
    return fig


def straggler_waits(times: np.ndarray, straggler_rank: int | None = None):
    """Mean seconds each rank waits in the all-reduce (a Monte Carlo run)."""
    wait = faults.allreduce_wait(times).mean(axis=0)
    fig, ax = new_figure(size=(7.0, 3.0), layout="constrained")
    colors = ["C3" if r == straggler_rank else "C0" for r in range(len(wait))]
    ax.bar(np.arange(len(wait)), wait * 1e3, color=colors, width=1.0)
    ax.set_xlabel("rank")
    ax.set_ylabel("mean wait at the barrier (ms)")
    ax.set_title("a straggler is the rank that never waits", fontsize=10)
    return fig


def elastic_timeline(run, reference=None, device_name: str | None = None):
    """Steps completed against wall time, per attempt, with the failure, the
    restart gap and the redone steps marked; ``device_name`` says where the
    wall times were measured."""
    fig, ax = new_figure(size=(9.0, 3.8), layout="constrained")
    t0 = run.t0
    events = [e for e in run.events if e["rank"] == 0 or e["kind"] == "fail"]
    attempts = sorted({e["attempt"] for e in events})
    for a in attempts:
        steps = [e for e in events if e["kind"] == "step" and e["attempt"] == a]
        ax.plot(
            [e["t"] - t0 for e in steps],
            [e["step"] for e in steps],
            ".-",
            ms=4,
            color=f"C{a}",
            label=f"attempt {a} (TORCHELASTIC_RESTART_COUNT={a})",
        )
        ck = [e for e in events if e["kind"] == "checkpoint" and e["attempt"] == a]
        ax.plot(
            [e["t"] - t0 for e in ck],
            [e["step"] for e in ck],
            "s",
            color="k",
            ms=6,
            label="checkpoint" if a == attempts[0] else None,
        )
    if reference is not None:
        ref = [e for e in reference.events if e["rank"] == 0 and e["kind"] == "step"]
        ax.plot(
            [e["t"] - reference.t0 for e in ref],
            [e["step"] for e in ref],
            color="C7",
            lw=1,
            ls=":",
            label="uninterrupted run",
        )
    s = run.summary
    fails = [e for e in events if e["kind"] == "fail"]
    if fails:
        tf = fails[0]["t"] - t0
        ax.axvline(tf, color="C3", lw=1)
        ax.text(
            tf,
            1,
            f" rank {fails[0]['rank']} dies",
            color="C3",
            fontsize=8,
            rotation=90,
            va="bottom",
        )
        resumed = [
            e for e in events if e["kind"] == "step" and e["attempt"] == attempts[-1]
        ]
        if resumed:
            ax.axvspan(
                tf,
                resumed[0]["t"] - t0,
                color="C3",
                alpha=0.1,
                label=f"down {s.downtime_s:.1f} s",
            )
        ax.axhspan(
            s.resumed_from_step,
            s.failed_at_step,
            color="C1",
            alpha=0.15,
            label=f"{s.redone_steps} steps redone",
        )
    ax.set_xlabel("wall time since the first worker started (s)")
    ax.set_ylabel("optimizer steps completed")
    if device_name:
        ax.set_title(f"torchrun restart, measured on {device_name}", fontsize=10)
    # Outside the axes: inside, it would cover the first steps or the restart.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def spike_runs(
    plain, rescued, clean=None, bad=(60, 64), device_name: str | None = None
):
    """Loss per step: a run hit by bad batches, the same run with rewind-and-skip,
    and a run that never saw them; ``device_name`` says where they trained."""
    fig, ax = new_figure(size=(9.0, 3.6), layout="constrained")
    if clean is not None:
        ax.plot(clean.losses, color="C7", lw=1, label="never saw the bad batches")
    ax.plot(plain.losses, color="C3", lw=1, label="ploughs on")
    ax.plot(rescued.losses, color="C0", lw=1.2, label="rewind and skip")
    ax.axvspan(*bad, color="C3", alpha=0.15, label="bad batches")
    for p in rescued.rewinds:
        ax.plot([p.spike_step], [plain.losses[p.spike_step]], "v", color="C3", ms=8)
        ax.annotate(
            f"spike: rewind to step {p.resume_step},\n"
            f"skip batches {p.skip_start}-{p.skip_end - 1}",
            xy=(p.resume_step, rescued.losses[p.resume_step]),
            xytext=(p.spike_step + 8, plain.losses[p.spike_step]),
            fontsize=8,
            color="C0",
            va="top",
            arrowprops={"arrowstyle": "->", "color": "C0", "ls": "--"},
        )
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (cross-entropy)")
    if device_name:
        ax.set_title(f"trained on {device_name}", fontsize=10)
    # Outside the axes, so that it never covers the annotation of the rewind.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig
