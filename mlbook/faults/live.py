"""The faults chapter's live figure (mlbook.common.live): the step time of a
synchronous data-parallel job with one slow rank, waiting for it against
draining it, from the straggler integral. Standard library and mlbook's
torch-free modules only: the HTML book runs it in the reader's browser, where
``mlbook.faults.formulas`` takes its standard-library path (no numpy).

The figure takes no build-time data: it is a function of its three controls.
"""

from __future__ import annotations

import functools

from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.faults import formulas as faults

WAIT = "wait for it"
DRAIN = "drain it, re-shard over N - 1 ranks"
CURVES = {WAIT: {"color": vl.C[0]}, DRAIN: {"color": vl.C[1], "dash": vl.DASHED}}
CHOICE_COLOR, BREAK_EVEN_COLOR = vl.C[3], vl.C[2]
POINTS = 25  # deltas a curve: each is one straggler integral (a few ms in Pyodide)
BREAK_EVEN_TOL = 1e-4  # the bisection's tolerance on delta: a hundredth of a percent


def delta_grid(delta: float) -> list[float]:
    """The deltas the curves are drawn at: 0 to 50 %, or to 1.5 delta when
    the chosen delta is above a third of that, so that it is always inside."""
    return vl.linspace(0.0, max(0.5, 1.5 * delta), POINTS)


@functools.lru_cache(maxsize=64)
def _curves(n: int, sigma: float, grid: tuple[float, ...]) -> tuple:
    """What the chosen delta does not move: the step time without the slow
    rank, the waiting curve on ``grid`` and the drained step relative to it,
    and the break-even. Kept for the last 64 settings, so that moving delta
    alone (the usual drag) costs one integral, not about forty."""
    base = faults.expected_step_time(n, 0.0, sigma)
    wait = tuple(faults.expected_step_time(n, d, sigma) / base for d in grid)
    drain = faults.drop_step_time(n, sigma) / base
    threshold = faults.drain_threshold(n, sigma, tol=BREAK_EVEN_TOL)
    return base, wait, drain, threshold


@live.figure(
    live.slider("n_ranks", "N, data-parallel ranks (count)", 1024, 2, 16384, 2, "log"),
    live.slider("delta", "delta, slow rank's extra time (fraction)", 0.1, 0, 1, 0.01),
    live.slider(
        "sigma", "sigma, spread of log step time (fraction)", 0.05, 0, 0.3, 0.01
    ),
)
def straggler_explorer(n_ranks: float, delta: float, sigma: float) -> dict:
    """Expected step time, relative to the step without the slow rank, against
    the slow rank's extra time delta: waiting for it (the integral
    ``expected_step_time``), and draining it and re-sharding its work over
    N - 1 ranks (``drop_step_time``, flat in delta). The chosen delta is
    marked, and the break-even (``drain_threshold``) drawn where it falls
    inside the axis."""
    n = int(round(n_ranks))
    grid = delta_grid(delta)
    base, wait, drain, threshold = _curves(n, sigma, tuple(grid))
    rows = [
        {"curve": WAIT, "delta": d, "ratio": r} for d, r in zip(grid, wait, strict=True)
    ]
    rows += [{"curve": DRAIN, "delta": d, "ratio": drain} for d in (grid[0], grid[-1])]
    now = faults.expected_step_time(n, delta, sigma) / base
    x = vl.channel(
        "delta",
        vl.title_of("slow rank's extra time per step delta", "%"),
        domain=[0, grid[-1]],
        nice=False,
        percent=True,
    )
    top = max(r["ratio"] for r in rows)
    y = vl.channel(
        "ratio",
        vl.title_of("step time", "x the step without the slow rank"),
        domain=[1, 1.02 * top],
        nice=False,
        zero=False,
        format=".2f",
    )
    delta_tip = vl.tip("delta", "delta", ".2%")
    layers = [
        vl.lines(
            rows,
            x,
            y,
            styles=CURVES,
            tooltip=[delta_tip, vl.tip("ratio", "step time (x)", ".5f")],
        )
    ]
    if threshold <= grid[-1]:
        layers.append(
            vl.vrule(
                {"delta": threshold, "label": "break-even: draining wins above"},
                x,
                tooltip=[vl.tip("label", "", nominal=True), delta_tip],
                color=BREAK_EVEN_COLOR,
            )
        )
    chosen = {"delta": delta, "ratio": now, "cost": now - 1, "drain": drain}
    layers.append(
        vl.marker(
            chosen,
            x,
            y,
            tooltip=[
                vl.tip("delta", "chosen delta", ".2%"),
                vl.tip("ratio", "step time, waiting (x)", ".5f"),
                vl.tip("drain", "step time, drained (x)", ".5f"),
            ],
            shape="circle",
            color=CHOICE_COLOR,
            size=110,
        )
    )
    verdict = "drain it" if drain < now else "wait for it"  # at the chosen delta
    title = (
        f"N={n:,}, sigma={sigma:.0%}, delta={delta:.0%}: waiting costs "
        f"{now - 1:+.2%} a step, draining {drain - 1:+.2%}"
    )
    spec = vl.chart(layers, title=title)
    spec["title"]["subtitle"] = f"break-even delta = {threshold:.2%}: {verdict}"
    spec["title"]["subtitleColor"] = "#555555"
    return spec
