"""Figures of the gradient-accumulation chapter."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from mlbook.common import validate
from mlbook.plotting.style import new_figure


def _plain_log2(ax, axis: str = "x"):
    """A base-2 log axis labelled 1, 2, 4, ... rather than 2^0, 2^1, ..."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(fmt)


def _power_label(v: float) -> str:
    """1e-06 -> "1e-6": a power of ten written as the text would write it."""
    mant, exp = f"{v:.0e}".split("e")
    return f"{mant}e{int(exp)}"


def identity_vs_k(
    ks, diffs: dict, exact_below: float = 1e-6, broken_above: float = 1e-4
):
    """Largest |accumulated - full-batch| gradient entry against k, one line
    per model (``diffs`` maps a label to a list aligned with ``ks``)."""
    fig, ax = new_figure(layout="constrained")
    for i, (label, values) in enumerate(diffs.items()):
        ax.plot(ks, values, marker="o", color=f"C{i}", label=label)
    ax.axhline(
        exact_below,
        color="C2",
        ls="--",
        lw=1,
        label=f"{_power_label(exact_below)}: float rounding",
    )
    ax.axhline(
        broken_above,
        color="C3",
        ls=":",
        lw=1,
        label=_power_label(broken_above),
    )
    _plain_log2(ax)
    ax.set_yscale("log")
    ax.set_xlabel("accumulation steps k (global batch fixed)")
    ax.set_ylabel("max |grad difference|")
    ax.legend(fontsize=8)
    ax.set_title("Accumulated vs full-batch gradient")
    return fig


def token_weights(counts, k: int):
    """Tokens per micro-batch and the weight each of their tokens gets in the
    accumulated loss, naive per-micro-batch mean against the global token mean."""
    counts = np.asarray(counts, dtype=float)
    validate.positive_int("k", k)
    if len(counts) != k or (counts <= 0).any():
        raise ValueError(
            f"counts must hold k={k} positive token counts, got {counts.tolist()}"
        )
    total = counts.sum()
    fig, (left, right) = new_figure(ncols=2, layout="constrained")
    j = np.arange(1, k + 1)
    left.bar(j, counts, color="C0")
    left.set_xlabel("micro-batch j")
    left.set_ylabel("real tokens N_j")
    left.set_title(f"{int(total)} tokens in {k} micro-batches")
    right.bar(
        j - 0.2, total / (k * counts), width=0.4, color="C3", label="naive: N / (k N_j)"
    )
    right.bar(j + 0.2, np.ones(k), width=0.4, color="C2", label="normalised by N: 1")
    right.set_xlabel("micro-batch j")
    right.set_ylabel("weight per token (x 1/N)")
    right.legend(fontsize=8)
    right.set_title("Weight of one token in the loss")
    return fig
