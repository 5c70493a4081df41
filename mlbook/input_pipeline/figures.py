"""Figures of the input-pipeline chapter. Each measured figure names its device."""

from __future__ import annotations

import numpy as np

from mlbook.input_pipeline import packing
from mlbook.plotting.style import new_figure, percent_axis, plain_log_axis


def padding_vs_seq_len(doc_lens, seq_lens, batch_size: int, chosen: int, corpus: str):
    """Left: the corpus's document lengths. Right: padding share of per-document
    batches (fixed and dynamic) and of packing, against s."""
    fig, (ax, bx) = new_figure(ncols=2, size=(9.0, 3.6), layout="constrained")
    lens = np.asarray(doc_lens)
    bins = np.logspace(np.log10(max(1, lens.min())), np.log10(lens.max()), 30)
    ax.hist(lens, bins=bins, color="C0")
    ax.axvline(chosen, color="C3", ls="--", label=f"s = {chosen:,}")
    plain_log_axis(ax, "x")
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel("documents")
    ax.set_title(f"{len(lens):,} documents: {corpus}", fontsize=9)
    ax.legend()
    fixed = [packing.padding_waste(doc_lens, int(s)) for s in seq_lens]
    longest = [packing.padding_waste(doc_lens, int(s), batch_size) for s in seq_lens]
    packed = [packing.packing_waste(doc_lens, int(s)) for s in seq_lens]
    bx.plot(seq_lens, fixed, marker="o", label="per document, padded to s")
    bx.plot(
        seq_lens,
        longest,
        marker="s",
        label=f"per document, padded to the batch's longest (b={batch_size})",
    )
    bx.plot(seq_lens, packed, marker="^", label="packed")
    plain_log_axis(bx, "x", base=2)
    percent_axis(bx)
    bx.set_xlabel("sequence length s (tokens)")
    bx.set_ylabel("slots that hold padding")
    bx.set_title("padding wasted", fontsize=10)
    bx.legend(fontsize=8)
    return fig


def document_mask(row, eos_id: int):
    """Left: causal mask against the document mask of one packed row (keys the
    causal mask allows but the document mask forbids in orange). Right: the
    position ids, plain and reset at each document."""
    mask = packing.document_mask(row, eos_id)
    causal = np.tril(np.ones_like(mask))
    image = np.where(mask, 2, np.where(causal, 1, 0))
    fig, (ax, bx) = new_figure(ncols=2, size=(9.0, 3.8), layout="constrained")
    from matplotlib.colors import ListedColormap

    ax.imshow(
        image,
        cmap=ListedColormap(["white", "#f28e2b", "#4e79a7"]),
        interpolation="nearest",
    )
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(
        "blue: attended; orange: another document's\n"
        "(causal allows it, the document mask does not)",
        fontsize=9,
    )
    pos = packing.reset_positions(row, eos_id)
    bx.plot(np.arange(len(row)), np.arange(len(row)), label="plain positions")
    bx.plot(np.arange(len(row)), pos, label="reset at each document")
    bx.set_xlabel("position in the packed row")
    bx.set_ylabel("position id")
    bx.legend()
    bx.set_title(
        f"{int(packing.document_ids(row, eos_id)[-1]) + 1} documents in "
        f"a row of {len(row)}",
        fontsize=10,
    )
    return fig


def timelines(lines, device_name: str):
    """One row per Timeline: data waits in orange, training steps in blue."""
    fig, ax = new_figure(size=(9.0, 0.9 + 0.7 * len(lines)), layout="constrained")
    for k, line in enumerate(lines):
        y = len(lines) - 1 - k
        for kind, color in (("data", "#f28e2b"), ("step", "#4e79a7")):
            bars = [
                (s.start_s, s.end_s - s.start_s) for s in line.spans if s.kind == kind
            ]
            ax.broken_barh(
                bars,
                (y - 0.35, 0.7),
                facecolor=color,
                edgecolor="white",
                linewidth=0.8,
                label=kind if k == 0 else None,
            )
    ax.set_yticks(range(len(lines)), [line.label for line in reversed(lines)])
    ax.set_xlabel("time since the first traced range (s)")
    ax.set_title(
        f"torch.profiler ranges on {device_name}: orange = waiting for data, "
        "blue = step",
        fontsize=10,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncols=2, fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def tokens_per_s_budget(rows, device_name: str):
    """Horizontal bars of tokens/s: (label, tokens/s, kind) with kind
    'produce' (a tokenizer) or 'consume' (a trainer), on a log axis."""
    fig, ax = new_figure(size=(9.0, 0.8 + 0.45 * len(rows)), layout="constrained")
    labels = [r[0] for r in rows]
    values = [r[1] for r in rows]
    colors = ["C2" if r[2] == "produce" else "C0" for r in rows]
    ax.barh(range(len(rows)), values, color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    plain_log_axis(ax, "x")
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlim(min(values) / 3, max(values) * 30)
    ax.set_xlabel("tokens/s (log scale)")
    ax.set_title(
        f"green: the tokenizer makes (measured on {device_name}); blue: a trainer eats",
        fontsize=9,
    )
    return fig
