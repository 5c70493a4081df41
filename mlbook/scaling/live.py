"""The scaling chapter's live figures (mlbook.common.live): model state per
GPU against the data-parallel size for ZeRO stages 0-3, with the GPU's usable
HBM as a line; and the pipeline bubble against the number of micro-batches.
Standard library and mlbook's torch-free modules only: the HTML book runs
them in the reader's browser."""

from __future__ import annotations

from mlbook.common import accelerators, live, transformer
from mlbook.common import vegalite as vl
from mlbook.common.units import GIB
from mlbook.mfu import flops
from mlbook.scaling import formulas

DP_SIZES = tuple(2**i for i in range(15))  # 1 .. 16384
STAGE_COLOURS = {0: "#444444", 1: vl.C[0], 2: vl.C[2], 3: vl.C[3]}
HBM_COLOUR = "#000000"
MODELS = tuple(transformer.PRESETS)
GPUS = tuple(accelerators.ACCELERATORS)
BUBBLE_PS = (2, 4, 8, 16, 32, 64)
BUBBLE_VS = (1, 2, 4, 8)
M_MAX = 256
OTHER_P = "#bbbbbb"  # the other stage counts, at the chosen v


@live.figure(
    live.dropdown("model", "model", MODELS, "Llama-3-70B"),
    live.dropdown("gpu", "GPU", GPUS, "H100 SXM"),
    live.select_slider("n_dp", "data-parallel ranks N_d (GPUs)", DP_SIZES, 64),
    live.slider("k", "K, optimizer state (bytes per parameter)", 12, 4, 16, 2),
)
def zero_memory(model: str, gpu: str, n_dp: int, k: int = 12) -> dict:
    """Model-state GiB per GPU against the data-parallel size for ZeRO
    stages 0-3 (mixed-precision Adam, 2 + 2 + K bytes per parameter), with the
    HBM the GPU's driver makes usable as a dashed line and the chosen N_d
    marked on every stage's curve."""
    cfg = transformer.PRESETS[model]
    n = flops.n_params(cfg)
    hbm_gib = accelerators.accelerator(gpu).hbm_usable_bytes / GIB
    names = formulas.ZERO_STAGE_NAMES
    hbm_label = f"{gpu} usable HBM, {hbm_gib:,.1f} GiB"

    def gib(d: int, stage: int) -> float:
        return formulas.zero_state_bytes(n, d, stage, k) / GIB

    rows = [
        {"curve": names[s], "N_d": d, "GiB": gib(d, s)}
        for s in formulas.ZERO_STAGES
        for d in DP_SIZES
    ]
    rows += [{"curve": hbm_label, "N_d": d, "GiB": hbm_gib} for d in DP_SIZES[::14]]
    styles = {names[s]: {"color": STAGE_COLOURS[s]} for s in formulas.ZERO_STAGES}
    styles[hbm_label] = {"color": HBM_COLOUR, "dash": vl.DASHED}
    x = vl.channel(
        "N_d",
        vl.title_of("data-parallel ranks N_d", "GPUs"),
        scale="log",
        base=2,
        format=",",
    )
    y = vl.channel(
        "GiB", vl.title_of("model state per GPU", "GiB"), scale="log", format=",~g"
    )
    tips = [vl.tip("N_d", "N_d", ","), vl.tip("GiB", "GiB per GPU")]
    markers = [
        vl.marker(
            {"N_d": n_dp, "GiB": gib(n_dp, s), "stage": names[s]},
            x,
            y,
            tooltip=[vl.tip("stage", "stage", nominal=True), *tips],
            shape="circle",
            color=STAGE_COLOURS[s],
            size=90,
        )
        for s in formulas.ZERO_STAGES
    ]
    fits = [s for s in formulas.ZERO_STAGES if gib(n_dp, s) <= hbm_gib]
    verdict = f"fits from stage {fits[0]}" if fits else "no stage fits"
    title = (
        f"{model} ({n / 1e9:.1f} B parameters), K = {k:g}, N_d = {n_dp:,}: "
        f"{verdict} in {hbm_gib:,.1f} GiB (activations come on top)"
    )
    return vl.chart(
        [vl.lines(rows, x, y, styles=styles, tooltip=tips), *markers], title=title
    )


def bubble_ranges(p: int, v: int, **_) -> dict:
    """Interleaving needs m to be a multiple of p (Megatron-LM's rule): with
    v > 1 the m slider steps in multiples of p."""
    if v > 1:
        return {"m": {"min": p, "max": M_MAX // p * p, "step": p}}
    return {"m": {"min": 1, "max": M_MAX, "step": 1}}


def micro_batch_grid(m: int) -> list[int]:
    """The m at which the curves are drawn: 1 to 256 in about 40 log steps,
    and ``m`` itself."""
    return sorted({round(2 ** (i / 6)) for i in range(49)} | {m})


def _bubble_label(p: int, v: int) -> str:
    return f"p={p}, v={v}"


@live.figure(
    live.select_slider("p", "pipeline stages p (devices)", BUBBLE_PS, 8),
    live.slider("m", "micro-batches per step m (count)", 32, 1, M_MAX, 1, on_grid=True),
    live.select_slider("v", "model chunks per device v (count)", BUBBLE_VS, 1),
    ranges=bubble_ranges,
)
def bubble_share(p: int, m: int, v: int) -> dict:
    """Idle share against micro-batches m: for the chosen p, one curve per v
    (the chosen one solid, the others dashed), grey curves for the other p at
    the chosen v, and the chosen m marked."""
    ms = micro_batch_grid(m)
    curves = [(p, vv) for vv in BUBBLE_VS] + [(q, v) for q in BUBBLE_PS if q != p]
    rows = [
        {
            "curve": _bubble_label(q, vv),
            "m": x,
            "idle": formulas.bubble_fraction(q, x, vv),
        }
        for q, vv in curves
        for x in ms
    ]
    styles = {}
    for i, vv in enumerate(BUBBLE_VS):
        dash = {} if vv == v else {"dash": vl.DASHED}
        styles[_bubble_label(p, vv)] = {"color": vl.C[i], **dash}
    for q in BUBBLE_PS:
        if q != p:
            styles[_bubble_label(q, v)] = {"color": OTHER_P}
    here = formulas.bubble_fraction(p, m, v)
    x = vl.channel(
        "m",
        vl.title_of("micro-batches per step m", "count"),
        scale="log",
        base=2,
        format=",",
    )
    y = vl.channel(
        "idle", vl.title_of("idle share of the step", "%"), domain=[0, 1], percent=True
    )
    tips = [vl.tip("m", "m", ","), vl.tip("idle", "idle", ".2%")]
    point = {"m": m, "idle": here, "label": _bubble_label(p, v)}
    return vl.chart(
        [
            vl.lines(rows, x, y, styles=styles, tooltip=tips),
            vl.marker(
                point,
                x,
                y,
                tooltip=[vl.tip("label", "curve", nominal=True), *tips],
                shape="circle",
                color="black",
                size=90,
            ),
        ],
        title=(f"Pipeline bubble (p-1)/(vm+p-1): p={p}, m={m}, v={v}: {here:.1%} idle"),
    )
