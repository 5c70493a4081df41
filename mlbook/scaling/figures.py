"""Figures of the scaling chapter. Each returns a matplotlib Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from mlbook.common import accelerators, transformer
from mlbook.common.units import KIB, MIB
from mlbook.mfu import flops
from mlbook.plotting.style import new_figure, plain_log_axis
from mlbook.scaling import formulas, pipeline

STAGE_COLOURS = {0: "#444444", 1: "#1f77b4", 2: "#2ca02c", 3: "#d62728"}


def _size_label(n_bytes: float) -> str:
    if n_bytes >= MIB:
        return f"{n_bytes / MIB:g} MiB"
    return f"{n_bytes / KIB:g} KiB"


def allreduce_fit(
    sweep, fit, device: str, check_above_bytes: float = 64 * KIB, band: float = 0.25
):
    """Measured all-reduce times against the fitted alpha-beta model (left),
    and measured / fitted per size with the +-band (right)."""
    fig, (ax, ax2) = new_figure(ncols=2, size=(9.0, 3.6))
    sizes = list(sweep.sizes_bytes)
    fitted = [fit.predict_s(s) for s in sizes]
    ax.loglog(
        sizes,
        [t * 1e3 for t in sweep.best_s],
        "o",
        label="measured (best block's median)",
    )
    lo, hi = sizes[0], sizes[-1]
    grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    ax.loglog(
        grid,
        [fit.predict_s(s) * 1e3 for s in grid],
        "-",
        color="C3",
        label=(
            f"fit: alpha = {fit.alpha_s * 1e6:.0f} us, "
            f"B = {fit.link_bytes_per_s / 1e9:.2f} GB/s"
        ),
    )
    ax.set_xticks(sizes[::2], [_size_label(s) for s in sizes[::2]])
    ax.minorticks_off()
    ax.set_xlabel("message size")
    ax.set_ylabel("all-reduce time (ms)")
    ax.legend(fontsize=8)
    ratio = [t / f for t, f in zip(sweep.best_s, fitted, strict=True)]
    ax2.semilogx(sizes, ratio, "o-")
    ax2.axhspan(
        1 - band,
        1 + band,
        xmin=0,
        xmax=1,
        color="C2",
        alpha=0.12,
        label=f"within {band:.0%}",
    )
    ax2.axvline(
        check_above_bytes,
        color="0.5",
        ls=":",
        lw=1,
        label=f"checked above {_size_label(check_above_bytes)}",
    )
    ax2.axhline(1, color="0.3", lw=0.8)
    ax2.set_xticks(sizes[::2], [_size_label(s) for s in sizes[::2]])
    ax2.minorticks_off()
    ax2.set_xlabel("message size")
    ax2.set_ylabel("measured / fitted")
    ax2.set_ylim(0, max(2.0, max(ratio) * 1.1))
    ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"All-reduce on {sweep.n_ranks} ranks, measured on {device}", fontsize=10
    )
    return fig


def overlap_bars(run, device: str):
    """Forward + backward without synchronisation, plus the exposed
    communication, per DDP bucket size; the line is one all-reduce of all the
    gradients on its own."""
    fig, ax = new_figure()
    labels = [
        f"{r.bucket_cap_mb:g} MiB\n({r.buckets} bucket{'s' if r.buckets != 1 else ''})"
        for r in run.rows
    ]
    x = range(len(run.rows))
    base = [r.no_sync_s * 1e3 for r in run.rows]
    exposed = [r.exposed_s * 1e3 for r in run.rows]
    ax.bar(
        x, base, color="0.75", label="forward + backward, no_sync (no communication)"
    )
    ax.bar(
        x,
        exposed,
        bottom=base,
        color="C3",
        label="exposed communication = sync - no_sync",
    )
    ax.axhline(
        run.allreduce_s * 1e3,
        color="C0",
        ls="--",
        label=f"one all-reduce of all {run.grad_bytes / MIB:.0f} MiB of gradients",
    )
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_xlabel("DDP bucket_cap_mb")
    ax.set_ylabel("ms per step (median)")
    ax.set_title(f"DDP on {run.n_ranks} ranks, {device}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def tp_vs_links(
    cfg: transformer.TransformerConfig,
    seq_len: int,
    b: int,
    gpu: str,
    mfu: float = 0.4,
    ts=(2, 4, 8, 16, 32, 64),
):
    """Per layer and training step: the compute each tensor-parallel rank does
    (at ``mfu`` of the GPU's bf16 peak) against the time its all-reduces take
    over NVLink and over InfiniBand, for t ranks."""
    links = accelerators.interconnect(gpu)
    peak = accelerators.peak_flops_per_s(gpu, "bf16")
    h = cfg.d_model
    layer_flops = (
        3
        * b
        * seq_len
        * (
            2
            * (flops.attention_params_per_layer(cfg) + flops.mlp_params_per_layer(cfg))
            + 4 * h * seq_len
        )
    )
    fig, ax = new_figure()
    ts = list(ts)
    ax.plot(
        ts,
        [layer_flops / t / (peak * mfu) * 1e3 for t in ts],
        "o-",
        color="0.3",
        label=f"compute per rank at {mfu:.0%} MFU",
    )
    for name, bw, c in (
        ("NVLink", links.nvlink_bytes_per_s, "C2"),
        ("InfiniBand", links.ib_bytes_per_s, "C3"),
    ):
        ax.plot(
            ts,
            [formulas.tp_comm_s_per_layer(b, seq_len, h, t, bw) * 1e3 for t in ts],
            "s-",
            color=c,
            label=f"TP all-reduces over {name} ({bw / 1e9:g} GB/s each way)",
        )
    ax.axvline(8, color="0.5", ls=":", lw=1)
    ax.text(
        8.4,
        0.04,
        "8 GPUs: one node",
        fontsize=8,
        color="0.4",
        transform=ax.get_xaxis_transform(),
    )
    plain_log_axis(ax, "x", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensor-parallel ranks t")
    ax.set_ylabel("ms per layer per step")
    ax.set_title(f"{cfg.name}, b={b}, s={seq_len}, {links.name} (bf16)", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def schedule(timeline: pipeline.Timeline, ax=None, title: str | None = None):
    """A pipeline timeline as a chart: one row per device, a box per
    operation (forward light, backward dark, colour by micro-batch), idle time
    white. Returns the figure."""
    own = ax is None
    if own:
        fig, ax = plt.subplots(
            figsize=(9.0, 0.45 * timeline.p + 1.2), layout="constrained"
        )
    else:
        fig = ax.figure
    cmap = plt.get_cmap("tab10")
    for op in timeline.ops:
        colour = cmap(op.micro % 10)
        alpha = 0.55 if op.kind == "F" else 1.0
        ax.barh(
            op.device,
            float(op.end - op.start),
            left=float(op.start),
            height=0.8,
            color=colour,
            alpha=alpha,
            edgecolor="white",
            linewidth=0.6,
        )
        if float(op.end - op.start) >= float(timeline.makespan) / 60:
            label = (
                f"{op.micro + 1}"
                if timeline.v == 1
                else f"{op.micro + 1}{'abcdefgh'[op.chunk]}"
            )
            ax.text(
                float(op.start + op.end) / 2,
                op.device,
                label,
                ha="center",
                va="center",
                fontsize=6,
                color="black" if op.kind == "F" else "white",
            )
    ax.set_yticks(
        range(timeline.p), [f"device {d}" for d in range(timeline.p)], fontsize=8
    )
    ax.invert_yaxis()
    ax.set_xlim(0, float(timeline.makespan))
    ax.set_xlabel("time (one micro-batch's forward through one device = 1)")
    ax.set_ylabel("pipeline stage")
    name = {
        "gpipe": "GPipe",
        "1f1b": "1F1B",
        "interleaved": f"interleaved 1F1B, v={timeline.v}",
    }[timeline.schedule]
    ax.set_title(
        title
        or f"{name}: p={timeline.p}, m={timeline.m}, idle {float(timeline.bubble):.1%}",
        fontsize=9,
    )
    return fig


def schedules(timelines):
    """Several timelines, one panel each, on a shared time axis."""
    n = len(timelines)
    p = max(t.p for t in timelines)
    fig, axes = plt.subplots(
        n, 1, figsize=(9.0, n * (0.42 * p + 0.9)), layout="constrained", sharex=True
    )
    for ax, t in zip(axes if n > 1 else [axes], timelines, strict=True):
        schedule(t, ax=ax)
    end = max(float(t.makespan) for t in timelines)
    for ax in axes if n > 1 else [axes]:
        ax.set_xlim(0, end)
        ax.label_outer()
    fig.legend(
        handles=[
            Patch(color="C0", alpha=0.55, label="forward (F)"),
            Patch(color="C0", label="backward (B)"),
        ],
        loc="upper right",
        fontsize=8,
        ncols=2,
    )
    return fig
