"""The activation-recompute chapter's live figures (mlbook.common.live): the
four strategies placed by memory and extra FLOPs, and the memory of c
checkpointed segments with c* = sqrt(L A / I) marked. Both use Korthikanti
et al.'s count (16-bit activations) and share one set of controls, the
model's shape. Standard library and mlbook's torch-free modules only: the
HTML book runs them in the reader's browser."""

from __future__ import annotations

from mlbook.common import live
from mlbook.common import vegalite as vl
from mlbook.common.units import GIB
from mlbook.recompute import formulas as recompute

LABELS = {
    "none": "none",
    "selective": "selective",
    "sqrt": "sqrt(L) segments",
    "full": "full",
}
COLORS = {"none": vl.C[0], "selective": vl.C[1], "sqrt": vl.C[2], "full": vl.C[3]}
COUNT = "Korthikanti's count, 16-bit activations"
GIB_TICKS = ",.3~r"  # d3: three digits, plainly written (0.5, 90, 1,000)

# The model's shape, the same for both figures (the page's default is
# Llama-2-7B's at s = 4096). Every a divides every h: both are powers of two.
CONTROLS = (
    live.select_slider(
        "s", "sequence length s (tokens)", tuple(2**k for k in range(9, 18)), 4096
    ),
    live.select_slider(
        "h", "hidden size h (values a token)", tuple(2**k for k in range(10, 15)), 4096
    ),
    live.select_slider("a", "heads a (count)", tuple(2**k for k in range(3, 8)), 32),
    live.slider("L", "layers L (count)", 32, 1, 128, 1),
    live.slider("b", "micro-batch b (sequences)", 1, 1, 16, 1),
)


def _shape(s: int, h: int, a: int, L: int, b: int) -> str:
    return f"s={s:,}, h={h:,}, a={a}, L={L}, b={b}"


@live.figure(*CONTROLS)
def strategy_tradeoff(s: int, h: int, a: int, L: int, b: int) -> dict:
    """Activation memory against extra FLOPs for the four strategies
    (checkpoint_plans), one point each, its memory in the legend."""
    plans = recompute.checkpoint_plans(s, b, h, a, L)
    kept = {
        "none": "every activation",
        "selective": "all but the s x s attention core",
        "sqrt": f"{plans['sqrt'].segments} layer inputs and one segment",
        "full": f"{L} layer inputs and one layer",
    }
    rows = [
        {
            "label": f"{LABELS[k]}: {p.memory_bytes / GIB:,.1f} GiB",
            "strategy": LABELS[k],
            "gib": p.memory_bytes / GIB,
            "extra": p.extra_flops_fraction,
            "kept": kept[k],
        }
        for k, p in plans.items()
    ]
    top = max(r["gib"] for r in rows)
    x = vl.channel(
        "extra",
        vl.title_of("extra FLOPs", "% of a training step"),
        domain=[-0.05, 0.4],
        percent=True,
        nice=False,
    )
    y = vl.channel(
        "gib",
        vl.title_of("activation memory", "GiB"),
        domain=[0, 1.1 * top],
        format=GIB_TICKS,
    )
    points = {
        "data": {"values": rows},
        "mark": {"type": "point", "filled": True, "size": 160, "clip": True},
        "encoding": {
            "x": x,
            "y": y,
            "color": {
                "field": "label",
                "type": "nominal",
                "scale": {
                    "domain": [r["label"] for r in rows],
                    "range": [COLORS[k] for k in plans],
                },
                "legend": {"title": None, "orient": "top-right"},
            },
            "tooltip": [
                vl.tip("strategy", "strategy", nominal=True),
                vl.tip("gib", "memory (GiB)"),
                vl.tip("extra", "extra FLOPs", ".2%"),
                vl.tip("kept", "keeps", nominal=True),
            ],
        },
    }
    return vl.chart([points], title=f"{_shape(s, h, a, L, b)}, {COUNT}")


@live.figure(*CONTROLS)
def segments_memory(s: int, h: int, a: int, L: int, b: int) -> dict:
    """The memory of c segments, c I + ceil(L/c) A for c = 1..L, with
    c* = sqrt(L A / I) ruled (at L where it lies beyond), the best whole c
    and Chen et al.'s ceil(sqrt L) marked."""
    A = recompute.activation_bytes_per_layer(s, b, h, a, "none")
    input_bytes = recompute.activation_bytes_per_layer(s, b, h, a, "full")

    def gib(c: int) -> float:
        return recompute.segments_memory_bytes(c, L, A, input_bytes) / GIB

    curve = "c I + ceil(L/c) A"
    rows = [{"curve": curve, "c": c, "gib": gib(c)} for c in range(1, L + 1)]
    c_star = recompute.optimal_segments(L, A, input_bytes)
    best = recompute.best_segments(L, A, input_bytes)
    chen = recompute.sqrt_segments(L)
    beyond = " > L" if c_star > L else ""
    x = vl.channel("c", vl.title_of("segments c", "layer inputs kept"))
    y = vl.channel(
        "gib", vl.title_of("activation memory", "GiB"), zero=True, format=GIB_TICKS
    )
    c_tip, gib_tip = vl.tip("c", "segments c"), vl.tip("gib", "memory (GiB)")
    return vl.chart(
        [
            vl.lines(
                rows,
                x,
                y,
                styles={curve: {"color": COLORS["sqrt"]}},
                tooltip=[c_tip, gib_tip],
            ),
            vl.vrule(
                {"c": min(c_star, L), "c_star": c_star, "label": f"c*{beyond}"},
                x,
                tooltip=[
                    vl.tip("label", "", nominal=True),
                    vl.tip("c_star", "c* = sqrt(L A / I)"),
                ],
                color=COLORS["full"],
            ),
            vl.marker(
                {"c": best, "gib": gib(best)},
                x,
                y,
                tooltip=[vl.tip("c", "best whole c"), gib_tip],
                shape="circle",
                color=COLORS["full"],
                size=140,
            ),
            vl.marker(
                {"c": chen, "gib": gib(chen)},
                x,
                y,
                tooltip=[vl.tip("c", "Chen's ceil(sqrt L)"), gib_tip],
                shape="square",
                color=COLORS["sqrt"],
                size=140,
            ),
        ],
        title=(
            f"{_shape(s, h, a, L, b)}: A/I = {A / input_bytes:,.0f}, "
            f"c* = {c_star:,.1f}{beyond}, best whole c = {best}, "
            f"ceil(sqrt L) = {chen}"
        ),
    )
