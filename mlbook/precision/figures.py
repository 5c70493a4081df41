"""The mixed-precision chapter's static figures (matplotlib): the formats'
ranges and the numbers each has between 1 and 2, master weights, fp8 errors,
delayed and block scaling, and matmul throughput.
The figures a reader moves are live figures, in mlbook.precision.live (the
loss scaler's run among them, with GradScaler's measured scale on it)."""

from __future__ import annotations

import numpy as np

from mlbook.plotting.style import new_figure
from mlbook.precision import formulas as P


def format_ranges(formats=None):
    """Each format's magnitudes on one log axis: subnormals thin, normals thick."""
    formats = formats or P.format_table()
    fig, ax = new_figure(size=(7.0, 3.0))
    for i, f in enumerate(formats):
        ax.barh(
            i,
            f.smallest_normal - f.smallest_subnormal,
            left=f.smallest_subnormal,
            height=0.25,
            color="C1",
            label="subnormal" if i == 0 else None,
        )
        ax.barh(
            i,
            f.max - f.smallest_normal,
            left=f.smallest_normal,
            height=0.6,
            color="C0",
            label="normal" if i == 0 else None,
        )
        ax.text(
            f.max * 4, i, f"max {f.max:.3g}, eps {f.eps:.3g}", va="center", fontsize=7
        )
    ax.set_xscale("log")
    ax.set_xlim(1e-46, 1e60)
    ax.set_yticks(range(len(formats)), [f.name for f in formats])
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8, alpha=0.5)
    ax.set_xlabel("magnitude (smallest subnormal to max, log scale)")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("Range of each format: smallest subnormal to max")
    return fig


# the formats narrow enough to draw every number between 1 and 2 (fp32 has
# 8,388,607 of them)
NUMBER_LINE_FORMATS = ("fp8 E5M2", "fp8 E4M3", "bf16", "fp16")


def numbers_between_one_and_two(names=NUMBER_LINE_FORMATS):
    """One number line per format from 1 to 2, a tick at each of its numbers
    strictly between them (formulas.values_between_one_and_two), the count
    written beside it: fp8 has a handful, fp16 a thousand."""
    fig, ax = new_figure(size=(7.0, 2.8), layout="constrained")
    for i, name in enumerate(names):
        values = P.values_between_one_and_two(name)
        ax.eventplot(
            values,
            lineoffsets=i,
            linelengths=0.6,
            linewidths=0.4 if len(values) > 200 else 1.2,
            colors=f"C{i}",
        )
        ax.text(2.02, i, f"{len(values):,} numbers", va="center", fontsize=8)
    ax.set_xlim(0.98, 2.25)
    ax.set_xticks([1.0, 1.25, 1.5, 1.75, 2.0])
    ax.set_yticks(range(len(names)), list(names))
    ax.set_xlabel("value")
    for edge in (1.0, 2.0):
        ax.axvline(edge, color="k", lw=0.8)
    ax.set_title("The numbers strictly between 1 and 2 in each format", fontsize=9)
    return fig


def master_weights(result):
    """Loss and one weight against step, with and without an fp32 master
    (``result`` is experiments.master_weight_experiment's)."""
    fig, (ax_loss, ax_w) = new_figure(ncols=2, size=(8.0, 3.8), layout="constrained")
    for i, (mode, run) in enumerate(result.runs.items()):
        steps = np.arange(1, len(run.loss) + 1)
        ls = "--" if mode == "fp32" else "-"
        ax_loss.plot(steps, run.loss, ls, color=f"C{i}", label=mode)
        ax_w.plot(steps, run.weight, ls, color=f"C{i}", label=mode)
    ax_w.axhline(result.w_true, color="k", lw=1.0, ls=":", label="target")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("mean squared error")
    ax_w.set_xlabel("step")
    ax_w.set_ylabel("first weight")
    # One legend for both panels, below them, so that no line is hidden behind it.
    fig.legend(
        *ax_w.get_legend_handles_labels(),
        loc="outside lower center",
        ncols=4,
        fontsize=7,
    )
    fig.suptitle(
        "Adam, lr small against |w| ~ 1: pure bf16 weights do not move", fontsize=9
    )
    return fig


def fp8_error_vs_magnitude(sigmas, sweep: dict):
    """Relative error of an fp8 cast against the tensor's magnitude."""
    fig, ax = new_figure()
    for i, name in enumerate(P.FP8_FORMATS):
        ax.plot(
            sigmas,
            sweep[name].none,
            "-o",
            ms=3,
            color=f"C{i}",
            label=f"{name}, no scale",
        )
        ax.plot(
            sigmas,
            sweep[name].scaled,
            "--",
            color=f"C{i}",
            label=f"{name}, per-tensor scale",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("standard deviation of the tensor (log scale)")
    ax.set_ylabel("relative RMS error after the cast")
    ax.legend(fontsize=7)
    ax.set_title("fp8 without a scale works only in a window of magnitudes", fontsize=9)
    return fig


def delayed_scaling(run, dtype="fp8 E4M3"):
    """Delayed scaling over a run: the tensor's amax against the largest value
    the delayed scale can hold, and the error of each policy per step."""
    fig, (ax_a, ax_e) = new_figure(ncols=2, size=(8.0, 3.4))
    steps = np.arange(1, len(run.amax) + 1)
    fmax = P.float_format(dtype).max
    ax_a.plot(steps, run.amax, color="k", lw=1.2, label="amax of this step's tensor")
    ax_a.plot(
        steps,
        [fmax / s for s in run.delayed_scale],
        color="C2",
        lw=1.2,
        label="largest value the delayed scale holds",
    )
    ax_a.set_yscale("log")
    ax_a.set_xlabel("step")
    ax_a.set_ylabel("magnitude (log)")
    ax_a.legend(fontsize=7)
    for i, (key, label) in enumerate(
        (
            ("none", "no scale"),
            ("current", "scale from this tensor"),
            ("delayed", "delayed (amax history)"),
        )
    ):
        ax_e.plot(
            steps,
            [e.rel_rms_error for e in getattr(run, key)],
            color=f"C{i}",
            lw=1.2,
            label=label,
        )
    ax_e.set_yscale("log")
    ax_e.set_xlabel("step")
    ax_e.set_ylabel("relative RMS error")
    ax_e.legend(fontsize=7)
    fig.suptitle(f"{dtype}: delayed scaling lags a jump by one step", fontsize=9)
    return fig


def block_scaling(sweep: dict, dtype="fp8 E4M3"):
    """Mean relative error of the bulk against the outlier's size, one line
    per granularity (``sweep`` is experiments.block_scaling_sweep's), with
    the size past which one scale pushes the typical value below the
    format's smallest normal (formulas.normal_span) ruled."""
    fig, ax = new_figure()
    ratios = list(sweep)
    labels = [e.label for e in sweep[ratios[0]]]
    for i, label in enumerate(labels):
        errors = [next(e for e in sweep[r] if e.label == label) for r in ratios]
        ax.plot(
            ratios,
            [e.mean_rel_error for e in errors],
            "-o",
            ms=3,
            color=f"C{i}",
            label=label,
        )
    span = P.normal_span(dtype)
    ax.axvline(span, color="0.4", ls=":", label=f"max / smallest normal = {span:,.0f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("outlier / typical value (log scale)")
    ax.set_ylabel("mean relative error of the other values")
    ax.legend(fontsize=7)
    ax.set_title(f"{dtype}: one outlier, one scale or one per block", fontsize=9)
    return fig


def matmul_throughput(results: dict, device_name: str):
    """Measured matmul GFLOP/s per dtype; ``results`` maps dtype -> MatmulRate."""
    fig, ax = new_figure(size=(7.0, 2.8))
    names = list(results)
    values = [results[d].flops_per_s / 1e9 for d in names]
    ax.barh(names, values, color="C0")
    for i, d in enumerate(names):
        ax.text(
            values[i],
            i,
            f" {values[i]:,.1f} GFLOP/s (n={results[d].n})",
            va="center",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 3, max(values) * 30)
    ax.invert_yaxis()
    ax.set_xlabel("measured n x n x n matmul throughput (GFLOP/s, log scale)")
    ax.set_title(device_name, fontsize=9)
    return fig
