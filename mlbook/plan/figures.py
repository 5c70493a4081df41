"""Where a planned run's days and memory go."""

from __future__ import annotations

from mlbook.common.units import GIB, MINUTE_S, TERA
from mlbook.plan.planner import Plan, RunSpec, plan
from mlbook.plotting.style import new_figure

DAY_PARTS = (
    ("ideal", "ideal_days", "C0"),
    ("checkpoint writes", "checkpoint_days", "C1"),
    ("rework", "rework_days", "C3"),
    ("restarts", "restart_days", "C2"),
)
MEMORY_PARTS = (
    ("weights", "weights_bytes", "C0"),
    ("gradients", "gradients_bytes", "C1"),
    ("optimizer", "optimizer_bytes", "C2"),
    ("activations", "activations_bytes", "C4"),
)


def budget(p: Plan):
    """Two stacked bars: the expected days by cause, and memory per GPU by item
    against the GPU's HBM."""
    fig, (ax_d, ax_m) = new_figure(ncols=2, size=(8.0, 3.4))
    left = 0.0
    for label, attr, color in DAY_PARTS:
        v = getattr(p, attr)
        ax_d.barh([0], [v], left=left, color=color, label=f"{label} {v:,.1f} d")
        left += v
    ax_d.set_yticks([])
    ax_d.set_xlabel("days of wall-clock time")
    ax_d.set_title(f"{p.expected_days:,.1f} days, goodput {p.goodput:.1%}", fontsize=10)
    ax_d.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.22),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    bottom = 0.0
    for label, attr, color in MEMORY_PARTS:
        v = getattr(p.memory, attr) / GIB
        ax_m.bar(
            [0],
            [v],
            bottom=bottom,
            color=color,
            width=0.5,
            label=f"{label} {v:,.1f} GiB",
        )
        bottom += v
    hbm = p.memory.usable_hbm_bytes / GIB
    ax_m.axhline(hbm, color="k", ls="--", lw=1)
    ax_m.text(0.3, hbm, f" usable HBM {hbm:,.1f} GiB", va="bottom", fontsize=8)
    ax_m.set_xlim(-0.5, 1.2)
    ax_m.set_xticks([])
    ax_m.set_ylabel("GiB per GPU")
    ax_m.set_ylim(0, max(bottom, hbm) * 1.15)
    ax_m.set_title(
        "fits" if p.memory.fits else f"short by {p.memory.short_bytes / GIB:,.1f} GiB",
        fontsize=10,
    )
    ax_m.legend(loc="upper right", fontsize=8, frameon=False)
    fig.subplots_adjust(bottom=0.3, wspace=0.25)
    return fig


def explorer(
    model: str,
    tokens_trillions: float,
    gpu: str,
    n_gpus: int,
    tp: int,
    pp: int,
    mfu: float,
    zero_stage: int,
    recompute: str,
    restart_min: float,
):
    """The budget figure for a slider setting."""
    spec = RunSpec(
        model=model,
        tokens=tokens_trillions * TERA,
        gpu=gpu,
        n_gpus=n_gpus,
        tp=tp,
        pp=pp,
        mfu=mfu,
        zero_stage=zero_stage,
        recompute=recompute,
        restart_s=restart_min * MINUTE_S,
    )
    return budget(plan(spec))
