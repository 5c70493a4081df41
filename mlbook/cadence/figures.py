"""Figures of the checkpoint-cadence chapter."""

from __future__ import annotations

import math

import numpy as np

from mlbook.cadence import formulas as cadence
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis

MIN = 60.0


def interval_vs_cluster(
    node_mtbf_s: float, checkpoint_s_values, n_nodes=None, gpus_per_node: int = 8
):
    """Optimal interval and the waste at it against cluster size, for several C."""
    n_nodes = (
        n_nodes
        if n_nodes is not None
        else np.unique(np.geomspace(8, 4096, 40).astype(int))
    )
    fig, (left, right) = new_figure(ncols=2, size=(7.5, 3.4))
    for j, c_s in enumerate(checkpoint_s_values):
        t = [cadence.cluster_mtbf(node_mtbf_s, int(n)) for n in n_nodes]
        opt = [cadence.daly_interval(c_s, ti) for ti in t]
        waste = [
            cadence.waste_fraction(i, c_s, ti, exact=True)
            for i, ti in zip(opt, t, strict=True)
        ]
        gpus = np.asarray(n_nodes) * gpus_per_node
        left.loglog(gpus, np.asarray(opt) / MIN, color=f"C{j}", label=f"C = {c_s:g} s")
        right.semilogx(gpus, waste, color=f"C{j}", label=f"C = {c_s:g} s")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"GPUs ({gpus_per_node} per node)")
        ax.legend(fontsize=8)
    left.set_ylabel("optimal interval (minutes)")
    right.set_ylabel("time lost at the optimum")
    percent_axis(right)
    left.set_title("I* falls as the square root of T", fontsize=9)
    right.set_title("so the loss grows unless C shrinks", fontsize=9)
    return fig


def save_stall(results, device: str):
    """Per-save training stall (sync against async_save) and the loop's wall
    time, from a SaveModes (mlbook.cadence.experiments.compare_save_modes)."""
    sync, async_ = results["sync"], results["async"]
    fig, (left, right) = new_figure(ncols=2, size=(7.5, 3.8), layout="constrained")
    n = len(sync.blocking_s)
    x = np.arange(1, n + 1)
    left.bar(
        x - 0.2, np.asarray(sync.blocking_s) * 1e3, 0.4, color="C0", label="sync: stall"
    )
    left.bar(
        x + 0.2,
        np.asarray(async_.blocking_s) * 1e3,
        0.4,
        color="C1",
        label="async_save: stall (staging)",
    )
    left.plot(
        x + 0.2,
        np.asarray(async_.total_s) * 1e3,
        "o",
        color="C3",
        label="async_save: until published",
    )
    top = max(max(sync.blocking_s), max(async_.total_s)) * 1e3
    left.set_ylim(0, 1.1 * top)
    left.set_xlabel("save number")
    left.set_ylabel("milliseconds")
    left.set_xticks(x)
    # below both panels, clear of the title and the ticks
    fig.legend(
        *left.get_legend_handles_labels(),
        loc="outside lower center",
        ncols=3,
        fontsize=7,
        frameon=False,
    )
    left.set_title("each save", fontsize=9)
    modes = ["none", "sync", "async"]
    step_ms = [results[m].median_step_s * 1e3 for m in modes]
    wall = [results[m].wall_s for m in modes]
    bars = right.bar(["no saves", "sync", "async_save"], wall, color=["C2", "C0", "C1"])
    for b, s in zip(bars, step_ms, strict=True):
        right.annotate(
            f"step {s:.0f} ms",
            (b.get_x() + b.get_width() / 2, b.get_height()),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    right.set_xlabel("checkpointing")
    right.set_ylabel("wall time of the whole loop (s)")
    right.set_title("the whole run (median step time on top)", fontsize=9)
    fig.suptitle(f"measured on {device}", fontsize=9)
    return fig


def resume_losses(r):
    """Loss per step: uninterrupted, the crashed run, exact and naive resumes
    (a ResumeResult from mlbook.cadence.experiments.resume_experiment)."""
    fig, ax = new_figure()
    steps = np.arange(1, len(r.ref_losses) + 1)
    start = r.resumed_from
    resumed = np.arange(start + 1, len(r.ref_losses) + 1)
    ax.plot(steps, r.ref_losses, color="k", lw=3, alpha=0.3, label="uninterrupted")
    crashed = np.arange(1, len(r.crashed_losses) + 1)
    ax.plot(crashed, r.crashed_losses, color="C7", ls=":", label="crashed run")
    ax.axvspan(start, r.crash_at, color="C3", alpha=0.1, label="work lost to the crash")
    ax.plot(resumed, r.exact_losses, ".", color="C2", label="exact resume (full state)")
    ax.plot(resumed, r.naive_losses, color="C3", label="naive resume (weights only)")
    ax.axvline(start, color="C2", ls="--", lw=1)
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.legend(fontsize=7)
    return fig


def checkpoint_storage(
    n_params: float,
    name: str,
    writer_bytes_per_s: float,
    storage_bytes_per_s: float,
    writers=None,
):
    """What a checkpoint holds (bars) and its write time against the
    number of writers."""
    parts = cadence.checkpoint_bytes(n_params, breakdown=True)
    total = sum(parts.values())
    n_sat = storage_bytes_per_s / writer_bytes_per_s  # writers that saturate storage
    if writers is None:  # far enough past saturation that the floor shows
        last = 2 ** math.ceil(math.log2(max(8192, 8 * n_sat)))
        writers = np.unique(np.geomspace(1, last, 60).astype(int))
    fig, (left, right) = new_figure(ncols=2, size=(7.5, 3.4), layout="constrained")
    left.barh(list(parts), [v / 1e9 for v in parts.values()], color="C0")
    left.invert_yaxis()
    left.set_xlabel("GB (10^9 bytes)")
    left.set_ylabel("what is saved")
    left.set_title(f"{name}: {total / 1e12:.2f} TB per checkpoint", fontsize=9)
    left.tick_params(axis="y", labelsize=8)
    c = [
        cadence.write_time_s(total, int(w), writer_bytes_per_s, storage_bytes_per_s)
        for w in writers
    ]
    right.plot(writers, c, color="C1")
    plain_log_axis(right, "x")
    plain_log_axis(right, "y")
    floor = total / storage_bytes_per_s
    right.axhline(floor, color="k", ls=":", lw=1)
    right.axvline(n_sat, color="k", ls="--", lw=1)
    right.annotate(
        f"storage floor {floor:.1f} s",
        (writers[0], floor),
        xytext=(2, 3),
        textcoords="offset points",
        ha="left",
        va="bottom",
        fontsize=7,
    )
    right.annotate(
        f"{n_sat:,.0f} writers\nsaturate storage",
        (n_sat, max(c)),
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        va="top",
        fontsize=7,
    )
    right.set_xlabel("ranks writing a shard each")
    right.set_ylabel("checkpoint write time C (s)")
    mb_s = writer_bytes_per_s / 1e6
    rate = (
        f"{mb_s:,.0f}" if mb_s >= 10 else f"{mb_s:.2g}"
    )  # a slow disk shows 0.85, not 1
    right.set_title(
        f"{rate} MB/s per writer,\n"
        f"{storage_bytes_per_s / 1e9:.0f} GB/s storage ceiling",
        fontsize=9,
    )
    return fig
