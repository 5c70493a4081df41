"""Figures of the scaling chapter. Each returns a matplotlib Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from mlbook.common import accelerators, transformer
from mlbook.common.units import KIB, MIB
from mlbook.mfu import flops
from mlbook.plotting.style import new_figure, plain_log_axis
from mlbook.scaling import formulas, pipeline, ring

STAGE_COLOURS = {0: "#444444", 1: "#1f77b4", 2: "#2ca02c", 3: "#d62728"}


def _size_label(n_bytes: float) -> str:
    if n_bytes >= MIB:
        return f"{n_bytes / MIB:g} MiB"
    return f"{n_bytes / KIB:g} KiB"


def allreduce_fit(sweep, fit, device: str):
    """Measured all-reduce times against the fitted alpha-beta model (left),
    and measured / fitted per size (right)."""
    fig, (ax, ax2) = new_figure(ncols=2, size=(9.0, 3.6))
    sizes = list(sweep.sizes_bytes)
    fitted = [fit.predict_s(s) for s in sizes]
    ax.loglog(sizes, [t * 1e3 for t in sweep.best_s], "o", label="measured")
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
    ax2.axhline(1, color="0.3", lw=0.8)
    ax2.set_xticks(sizes[::2], [_size_label(s) for s in sizes[::2]])
    ax2.minorticks_off()
    ax2.set_xlabel("message size")
    ax2.set_ylabel("measured / fitted")
    ax2.set_ylim(0, max(2.0, max(ratio) * 1.1))
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


# --- the ring all-reduce, step by step ---------------------------------------------


def _decimal_bytes(n_bytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes:.3g} B"


def _ring_panel(ax, n: int, held, sends, title: str, cmap):
    """One step: rank r is column r, chunk c row c; a cell is shaded by how
    many ranks' values it sums and says which; an arrow per transfer."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    for r in range(n):
        for c in range(n):
            share = len(held[r][c]) / n
            done = share == 1
            ax.add_patch(
                Rectangle(
                    (r - 0.3, c - 0.36),
                    0.6,
                    0.72,
                    facecolor=cmap(0.12 + 0.75 * share),
                    edgecolor="0.35",
                    lw=0.6,
                    gid=f"cell rank {r} chunk {c} sums {len(held[r][c])}",
                )
            )
            label = "all" if done else "".join(str(k) for k in sorted(held[r][c]))
            ax.text(
                r,
                c,
                label,
                ha="center",
                va="center",
                fontsize=7 if n <= 4 else 5,
                color="white" if share > 0.6 else "black",
            )
    for s in sends:
        wrap = s.dst != s.src + 1
        start = (s.src + 0.3, s.chunk)
        end = (s.src + 0.75, s.chunk) if wrap else (s.dst - 0.3, s.chunk)
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle="-|>",
                mutation_scale=8,
                color="#d62728",
                lw=1.2,
                gid=f"send {s.src}->{s.dst} chunk {s.chunk}",
            )
        )
        if wrap:  # the last rank's piece goes round to rank 0
            ax.text(
                s.src + 0.97,
                s.chunk,
                f"to {s.dst}",
                fontsize=6,
                va="center",
                color="#d62728",
            )
            ax.add_patch(
                FancyArrowPatch(
                    (-0.75, s.chunk),
                    (-0.3, s.chunk),
                    arrowstyle="-|>",
                    mutation_scale=8,
                    color="#d62728",
                    lw=1.2,
                )
            )
    ax.set_xlim(-0.8, n - 0.05)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xticks(range(n), [str(r) for r in range(n)], fontsize=7)
    ax.set_xlabel("rank", fontsize=7, labelpad=1)
    ax.set_yticks(range(n), [f"chunk {c}" for c in range(n)], fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=8)


def ring_allreduce(n_bytes: float, n_ranks: int = 4):
    """A ring all-reduce of ``n_bytes`` over ``n_ranks``, step by step: the
    start, the N - 1 reduce-scatter steps (top row) and the N - 1 all-gather
    steps (bottom row). Each panel shows every rank's buffer as N chunks,
    shaded by how many ranks' values a chunk sums (and which), with an arrow
    for each chunk sent; each step's title gives the bytes a rank sends, S/N,
    and the figure's the total, 2(N - 1)/N x S."""
    steps = ring.ring_allreduce_steps(n_ranks, n_bytes)
    n = n_ranks
    fig, axes = plt.subplots(
        2, n, figsize=(9.0, 1.0 + 0.62 * n * 2), layout="constrained"
    )
    cmap = plt.get_cmap("Blues")
    _ring_panel(axes[0][0], n, ring.start_state(n), (), "start: each rank's own", cmap)
    for step in steps:
        row = 0 if step.phase == "reduce-scatter" else 1
        ax = axes[row][step.step]
        title = (
            f"{step.phase} {step.step}: each rank\nsends "
            f"{_decimal_bytes(step.bytes_per_rank)} (S/N)"
        )
        _ring_panel(ax, n, step.held, step.sends, title, cmap)
        ax.set_gid(f"{step.phase} {step.step}")
    note = axes[1][0]
    note.axis("off")
    sent = ring.bytes_sent_per_rank(steps)[0]
    note.text(
        0.0,
        0.5,
        f"S = {_decimal_bytes(n_bytes)}, N = {n}\n"
        f"{2 * (n - 1)} steps of S/N each:\n"
        f"{_decimal_bytes(sent)} sent a rank\n= 2(N - 1)/N x S",
        fontsize=8,
        va="center",
    )
    fig.suptitle(
        f"Ring all-reduce of {_decimal_bytes(n_bytes)} over {n} ranks: "
        f"reduce-scatter (top), then all-gather (bottom); each rank sends "
        f"{_decimal_bytes(sent)}",
        fontsize=9,
    )
    return fig


# --- ZeRO and FSDP: what each rank holds --------------------------------------------

ITEM_COLOURS = {"weights": "#1f77b4", "grads": "#ff7f0e", "optimizer": "#2ca02c"}


def zero_states(n_dp: int = 4, k: float = 12, n_units: int = 4):
    """Bytes per parameter each of ``n_dp`` ranks holds: plain data
    parallelism, ZeRO-1, -2 and -3, and FSDP (ZeRO-3 as PyTorch runs it, with
    one of ``n_units`` units' weights gathered while it computes, hatched).
    Mixed-precision Adam: 2 bytes of weights, 2 of gradients, K of optimizer
    state per parameter; a sharded item is each rank's 1/N_d slice of it."""
    panels = [
        (0, "plain data parallel"),
        (1, "ZeRO-1"),
        (2, "ZeRO-2"),
        (3, "ZeRO-3"),
        (3, "FSDP, a unit computing"),
    ]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(9.0, 3.4), layout="constrained", sharey=True
    )
    top = 2 + 2 + k
    for i, (ax, (stage, name)) in enumerate(zip(axes, panels, strict=True)):
        state = formulas.zero_state(1.0, n_dp, stage, k)
        fsdp = i == len(panels) - 1
        for r in range(n_dp):
            base = 0.0
            for item, size in (
                ("weights", state.weights),
                ("grads", state.grads),
                ("optimizer", state.optimizer),
            ):
                sharded = size < {"weights": 2, "grads": 2, "optimizer": k}[item]
                ax.bar(
                    r,
                    size,
                    bottom=base,
                    color=ITEM_COLOURS[item],
                    edgecolor="white",
                    lw=0.8,
                    gid=f"{name} rank {r} {item}",
                    label=item if r == 0 and i == 0 else None,
                )
                if sharded and size > 0.6:
                    ax.text(
                        r,
                        base + size / 2,
                        f"1/{n_dp}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white",
                    )
                base += size
            if fsdp:
                gathered = formulas.fsdp_gathered_bytes(1.0, n_units)
                ax.bar(
                    r,
                    gathered,
                    bottom=base,
                    color="white",
                    edgecolor=ITEM_COLOURS["weights"],
                    hatch="////",
                    lw=0.8,
                    gid=f"{name} rank {r} gathered",
                    label="one unit's weights, gathered" if r == 0 else None,
                )
                base += gathered
            ax.text(r, base + 0.2, f"{base:.3g}", ha="center", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(n_dp), [f"{r}" for r in range(n_dp)], fontsize=7)
        ax.set_xlabel("rank", fontsize=8)
        ax.set_ylim(0, top * 1.12)
    axes[0].set_ylabel("bytes per parameter")
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle(
        f"Model state each of N_d = {n_dp} ranks holds, mixed-precision Adam "
        f"(2 + 2 + K, K = {k:g}); FSDP with {n_units} units",
        fontsize=9,
    )
    return fig
