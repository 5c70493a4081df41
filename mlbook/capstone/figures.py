"""Figures of the capstone chapter: where each rung's step time goes, one
step's timeline, a schematic step with its all-reduce overlapped or not, and
the per-rank times of the two-process run. (The MFU waterfall is a live
figure: mlbook/capstone/live.py.)"""

from __future__ import annotations

import numpy as np

from mlbook.capstone import formulas as cf
from mlbook.plotting.style import new_figure

COLORS = {
    "matmul": "C0",
    "attention": "C1",
    "elementwise": "C2",
    "optimizer": "C4",
    "data": "C3",
    "sync": "C6",
    "comm": "C8",
    "recompute": "C5",
    "idle": "0.85",
}


def ladder_buckets(labels, buckets, step_s, vs_ceiling, device_name: str):
    """One stacked bar per rung: the buckets of its profiled step (ms) and,
    hatched, the residual (unprofiled step time minus the buckets' sum; drawn
    below zero where the profiled step was the longer). Each bar is labelled
    with the rung's fraction of the MAMF ceiling."""
    n = len(labels)
    fig, ax = new_figure(size=(7.0, 5.0), layout="constrained")
    x = np.arange(n)
    bottom = np.zeros(n)
    for b in cf.BUCKETS:
        ms = np.array([bk[b] * 1e3 for bk in buckets])
        if ms.any():
            ax.bar(
                x,
                ms,
                bottom=bottom,
                color=COLORS[b],
                label=cf.BUCKET_LABELS[b],
                width=0.7,
            )
            bottom += ms
    residual = np.array([s * 1e3 for s in step_s]) - bottom
    ax.bar(
        x,
        np.abs(residual),
        bottom=np.minimum(bottom, bottom + residual),
        color="white",
        edgecolor="k",
        hatch="//",
        width=0.7,
        label="residual (unprofiled - buckets)",
        linewidth=0.5,
    )
    for i, (top, frac) in enumerate(
        zip(np.maximum(bottom, bottom + residual), vs_ceiling, strict=True)
    ):
        ax.text(i, top, f"{frac:.0%}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(
        x,
        [f"{i}: {lab}" for i, lab in enumerate(labels)],
        rotation=35,
        ha="right",
        fontsize=7,
    )
    ax.set_ylabel("step time (ms)")
    ax.set_title(
        "Where each rung's step goes (labels: share of the MAMF ceiling)\n"
        f"{device_name}",
        fontsize=9,
    )
    fig.legend(fontsize=7, ncol=4, loc="outside lower center")
    return fig


def step_timeline(rows, device_name: str):
    """One step per row, drawn from its top-level intervals: ``rows`` are
    (label, window_s, timeline) with timeline (start_s, end_s, bucket). The
    white stretches are the idle gaps: no operator ran."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(rows),
        1,
        figsize=(7.0, 1.2 + 1.0 * len(rows)),
        layout="constrained",
        squeeze=False,
    )
    seen = set()
    for ax, (label, window_s, timeline) in zip(axes[:, 0], rows, strict=True):
        for b in cf.BUCKETS:
            spans = [
                (a * 1e3, (e - a) * 1e3) for a, e, bucket in timeline if bucket == b
            ]
            if spans:
                ax.broken_barh(
                    spans,
                    (0, 1),
                    color=COLORS[b],
                    label=None if b in seen else cf.BUCKET_LABELS[b],
                )
                seen.add(b)
        ax.set_xlim(0, window_s * 1e3)
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
        ax.set_xlabel("time since the step began (ms)", fontsize=8)
        ax.grid(False)
    axes[0, 0].set_title(
        f"One profiled step; white = no operator running\n{device_name}", fontsize=9
    )
    fig.legend(fontsize=7, ncol=5, loc="outside lower center")
    return fig


def rank_times(comm, device_name: str):
    """Per mode and rank of the two-process run: the median time of the rank's
    own work, and the time it then waited (hatched) until the step ended."""
    modes = list(comm.step_s)
    fig, ax = new_figure(size=(7.0, 3.4))
    width = 0.38
    for r in range(comm.ranks):
        comp = [np.median([row[r] for row in comm.compute_s[m]]) * 1e3 for m in modes]
        step = [np.median([row[r] for row in comm.step_s[m]]) * 1e3 for m in modes]
        x = np.arange(len(modes)) + (r - 0.5) * width
        ax.bar(x, comp, width=width, color=f"C{r}", label=f"rank {r}: own work")
        ax.bar(
            x,
            np.array(step) - np.array(comp),
            bottom=comp,
            width=width,
            color="white",
            edgecolor=f"C{r}",
            hatch="//",
            label=f"rank {r}: waiting / all-reduce",
        )
    ax.set_xticks(range(len(modes)), [m.replace("_", " ") for m in modes])
    ax.set_ylabel("median time per step (ms)")
    ax.set_title(
        f"Two processes, DDP over gloo: rank {comm.slow_rank} slowed in 'straggler'\n"
        f"{device_name}",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    return fig


PHASE_COLORS = {
    "data": COLORS["data"],
    "forward": "C0",
    "backward": "C9",
    "all-reduce": COLORS["comm"],
    "optimizer": COLORS["optimizer"],
}


def overlap_schematic(phases: cf.StepPhases):
    """One data-parallel step drawn twice from formulas.step_schedule: its
    all-reduce after the backward pass, then in buckets overlapped with it.
    Each step has a compute lane and a network lane; the bracket under each
    marks the all-reduce's exposed time (formulas.exposed_allreduce_s), the
    time it adds to the step."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        2, 1, figsize=(7.0, 3.4), layout="constrained", sharex=True
    )
    lanes = {"compute": 1.0, "network": 0.0}
    end = max(s.end_s for s in cf.step_schedule(phases, False))
    seen = set()
    titles = {False: "not overlapped", True: f"overlapped, {phases.buckets} buckets"}
    for ax, overlap in zip(axes, (False, True), strict=True):
        spans = cf.step_schedule(phases, overlap)
        for s in spans:
            ax.broken_barh(
                [(s.start_s * 1e3, (s.end_s - s.start_s) * 1e3)],
                (lanes[s.lane] + 0.1, 0.8),
                facecolor=PHASE_COLORS[s.phase],
                edgecolor="white",
                label=None if s.phase in seen else s.phase,
            )
            seen.add(s.phase)
        backward_end = next(s.end_s for s in spans if s.phase == "backward")
        exposed = cf.exposed_allreduce_s(
            phases.backward_s, phases.allreduce_s, phases.buckets, overlap
        )
        a, b = backward_end * 1e3, (backward_end + exposed) * 1e3
        ax.annotate(
            "",
            xy=(a, -0.25),
            xytext=(b, -0.25),
            arrowprops={"arrowstyle": "|-|", "color": "k", "lw": 1},
        )
        ax.text(
            (a + b) / 2,
            -0.55,
            f"exposed {exposed * 1e3:.0f} ms",
            ha="center",
            va="top",
            fontsize=8,
        )
        ax.set_ylim(-1.1, 2.0)
        ax.set_yticks([0.5, 1.5], ["network", "compute"], fontsize=8)
        ax.set_xlim(0, end * 1e3 * 1.02)
        ax.set_title(titles[overlap], fontsize=9, loc="left")
        ax.grid(False)
    axes[-1].set_xlabel("time since the step began (ms)", fontsize=8)
    fig.legend(fontsize=7, ncol=5, loc="outside lower center")
    return fig
