"""The checkpoint-cadence chapter's live figure (mlbook.common.live): the
waste of a cluster's run against the checkpoint interval, from the closed
forms, with Daly's optimum marked and the page's Monte Carlo run drawn on
it. Standard library and mlbook's torch-free modules only: the HTML book runs
it in the reader's browser.

The page passes its Monte Carlo run as fixed data, ``simulated``: the C, T
and R it simulated and the waste at 17 intervals (well under a kilobyte of
JSON). The dots are drawn while the controls give that C, T and R; at any
other cluster the subtitle says where they were simulated."""

from __future__ import annotations

import math

from mlbook.cadence import formulas as cadence
from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.units import HOUR_S, MINUTE_S

FIRST_ORDER = "first order  C/I + I/(2T) + R/T"
EXACT = "exact expectation (exponential failures)"
MONTE_CARLO = "Monte Carlo"
CURVES = {FIRST_ORDER: {"color": vl.C[0]}, EXACT: {"color": vl.C[1]}}
MONTE_CARLO_COLOR = vl.C[3]
STEP = 10 ** (1 / 20)  # log sliders: 20 steps a decade


@live.figure(
    live.slider("checkpoint_s", "C, checkpoint write (s)", 30, 3, 3000, STEP, "log"),
    live.slider("node_mtbf_h", "node MTBF (h)", 1000, 100, 100_000, STEP, "log"),
    live.slider("restart_s", "restart R (s)", 0, 0, 1800, 30),
    live.slider("n_nodes", "nodes", 128, 1, 4096, 1),
)
def waste_explorer(
    checkpoint_s: float,
    node_mtbf_h: float,
    restart_s: float,
    n_nodes: int,
    simulated: dict | None = None,
) -> dict:
    """Waste against the interval I for a cluster of ``n_nodes`` nodes of the
    given MTBF (T = node MTBF / nodes): Young's first order and the exact
    expectation, Young's sqrt(2CT) dashed, Daly's optimum starred, and a
    Monte Carlo run as dots. ``simulated`` is ``monte_carlo_data``'s; its dots
    are drawn when C, T and R are the ones it simulated (None: no dots)."""
    mtbf_s = cadence.cluster_mtbf(node_mtbf_h * HOUR_S, int(n_nodes))
    young = cadence.young_interval(checkpoint_s, mtbf_s)
    daly = cadence.daly_interval(checkpoint_s, mtbf_s)
    w_daly = cadence.waste_fraction(daly, checkpoint_s, mtbf_s, restart_s, exact=True)
    grid = vl.geomspace(young / 8, young * 8, 80)
    rows = [
        {
            "curve": curve,
            "I_min": i / MINUTE_S,
            "W": cadence.waste_fraction(
                i, checkpoint_s, mtbf_s, restart_s, exact=curve == EXACT
            ),
        }
        for curve in CURVES
        for i in grid
    ]
    top = min(1.0, 2.5 * max(w_daly, 1e-3))
    x = vl.channel(
        "I_min",
        vl.title_of("checkpoint interval I", "min"),
        scale="log",
        domain=[grid[0] / MINUTE_S, grid[-1] / MINUTE_S],
        nice=False,
    )
    y = vl.channel(
        "W", vl.title_of("fraction of time lost", "%"), domain=[0, top], percent=True
    )
    interval_tip = vl.tip("I_min", "I (min)")
    dots, note = _monte_carlo(simulated, checkpoint_s, mtbf_s, restart_s)
    optimum = {"I_min": daly / MINUTE_S, "W": w_daly, "T_h": mtbf_s / HOUR_S}
    title = (
        f"{int(n_nodes):,} nodes x {vl.sig3(node_mtbf_h)} h: "
        f"T = {mtbf_s / HOUR_S:.2f} h, "
        f"C = {vl.sig3(checkpoint_s)} s, R = {restart_s:g} s -> "
        f"I* = {daly / MINUTE_S:.1f} min, {w_daly:.1%} lost"
    )
    styles = {**CURVES, MONTE_CARLO: {"color": MONTE_CARLO_COLOR}} if dots else CURVES
    curves = vl.lines(
        rows, x, y, styles=styles, tooltip=[interval_tip, vl.tip("W", "lost", ".3%")]
    )
    layers = []
    if dots:  # on the curves' colour scale, so the legend names them
        tips = [
            vl.tip("curve", "", nominal=True),
            interval_tip,
            vl.tip("W", "lost, simulated", ".3%"),
        ]
        color = curves["encoding"]["color"]
        layers.append(vl.points(dots, x, y, tooltip=tips, color=color))
    spec = vl.chart(
        [
            curves,
            *layers,
            vl.vrule(
                {"I_min": young / MINUTE_S, "label": "Young sqrt(2CT)"},
                x,
                tooltip=[vl.tip("label", "", nominal=True), interval_tip],
            ),
            vl.marker(
                optimum,
                x,
                y,
                tooltip=[
                    vl.tip("I_min", "Daly optimum I* (min)"),
                    vl.tip("W", "lost at I*", ".3%"),
                    vl.tip("T_h", "cluster MTBF T (h)"),
                ],
            ),
        ],
        title=title,
    )
    if note:
        spec["title"]["subtitle"] = note
        spec["title"]["subtitleColor"] = "#555555"
    return spec


def monte_carlo_data(
    interval_s: list, waste: list, checkpoint_s: float, mtbf_s: float, restart_s=0.0
) -> dict:
    """The figure's fixed data: a Monte Carlo run's waste at each interval
    (``formulas.simulate_waste``), and the C, T and R it simulated."""
    if len(interval_s) != len(waste):
        raise ValueError(
            f"one waste per interval: got {len(interval_s)} intervals and "
            f"{len(waste)} wastes"
        )
    return {
        "checkpoint_s": float(checkpoint_s),
        "mtbf_s": float(mtbf_s),
        "restart_s": float(restart_s),
        "points": [
            {"I_min": float(i) / MINUTE_S, "W": float(w)}
            for i, w in zip(interval_s, waste, strict=True)
        ],
    }


def _monte_carlo(simulated, checkpoint_s, mtbf_s, restart_s) -> tuple[list, str]:
    """The dots to draw (none unless C, T and R are the simulated ones, to
    float rounding) and the subtitle that says where they were simulated."""
    if not simulated:
        return [], ""
    where = (
        f"C = {vl.sig3(simulated['checkpoint_s'])} s, "
        f"T = {simulated['mtbf_s'] / HOUR_S:.2f} h, R = {simulated['restart_s']:g} s"
    )
    same = all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        for a, b in (
            (checkpoint_s, simulated["checkpoint_s"]),
            (mtbf_s, simulated["mtbf_s"]),
            (restart_s, simulated["restart_s"]),
        )
    )
    if not same:
        return [], f"Monte Carlo dots: simulated at {where} only"
    dots = [{"curve": MONTE_CARLO, **p} for p in simulated["points"]]
    return dots, f"Monte Carlo: {len(dots)} intervals, one failure trace, at {where}"
