"""The checkpoint-cadence chapter's live figure (mlbook.common.live): the
waste of a cluster's run against the checkpoint interval, from the closed
forms, with Daly's optimum marked. Standard library and mlbook's torch-free
modules only: the HTML book runs it in the reader's browser."""

from __future__ import annotations

from mlbook.cadence import formulas as cadence
from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.units import HOUR_S, MINUTE_S

FIRST_ORDER = "first order  C/I + I/(2T) + R/T"
EXACT = "exact expectation (exponential failures)"
CURVES = {FIRST_ORDER: {"color": vl.C[0]}, EXACT: {"color": vl.C[1]}}
STEP = 10 ** (1 / 20)  # log sliders: 20 steps a decade


@live.figure(
    live.slider("checkpoint_s", "C, checkpoint write (s)", 30, 3, 3000, STEP, "log"),
    live.slider("node_mtbf_h", "node MTBF (h)", 1000, 100, 100_000, STEP, "log"),
    live.slider("restart_s", "restart R (s)", 0, 0, 1800, 30),
    live.slider("n_nodes", "nodes", 128, 1, 4096, 1),
)
def waste_explorer(
    checkpoint_s: float, node_mtbf_h: float, restart_s: float, n_nodes: int
) -> dict:
    """Waste against the interval I for a cluster of ``n_nodes`` nodes of the
    given MTBF (T = node MTBF / nodes): Young's first order and the exact
    expectation, Young's sqrt(2CT) dashed, Daly's optimum starred. Closed
    forms only; the chapter's static figure carries the Monte Carlo."""
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
    optimum = {"I_min": daly / MINUTE_S, "W": w_daly, "T_h": mtbf_s / HOUR_S}
    title = (
        f"{int(n_nodes):,} nodes x {vl.sig3(node_mtbf_h)} h: "
        f"T = {mtbf_s / HOUR_S:.2f} h, "
        f"C = {vl.sig3(checkpoint_s)} s, R = {restart_s:g} s -> "
        f"I* = {daly / MINUTE_S:.1f} min, {w_daly:.1%} lost"
    )
    return vl.chart(
        [
            vl.lines(
                rows,
                x,
                y,
                styles=CURVES,
                tooltip=[interval_tip, vl.tip("W", "lost", ".3%")],
            ),
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
