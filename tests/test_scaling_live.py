"""The scaling chapter's live figures (mlbook.scaling.live): ZeRO's model
state per GPU against the data-parallel size, and the pipeline bubble
against the micro-batches, against the formulas worked out here by hand;
and, for any setting of their controls, the numbers they draw against the
closed forms and the marked points against the curves they sit on."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import accelerators, transformer
from mlbook.scaling import live

PROPERTY_COVERS = {
    "mlbook.scaling.live.zero_memory",
    "mlbook.scaling.live.bubble_share",
    "mlbook.scaling.live.bubble_ranges",
    "mlbook.scaling.live.micro_batch_grid",
    "mlbook.scaling.live.pipeline_schedule",
    "mlbook.scaling.live.schedule_ranges",
    "mlbook.scaling.live.idle_slots",
}

GIB = 2**30
FEW = examples(60)
# Llama-3-70B by hand (tests/test_scaling_page.py writes it out): 70,553,706,496
N70 = 70_553_706_496
# nvidia-smi on an H100 SXM 80GB reports 81,559 MiB in total (the accelerators
# table's hbm_usable_source); 81,559 / 1024 = 79.6474609375 GiB
H100_USABLE_GIB = 81_559 / 1024


def _layers(spec, mark):
    return [lay for lay in spec["layer"] if lay["mark"]["type"] == mark]


def _curves(spec) -> dict[str, list[dict]]:
    (lines,) = _layers(spec, "line")
    out: dict[str, list[dict]] = {}
    for r in lines["data"]["values"]:
        out.setdefault(r["curve"], []).append(r)
    return out


def _points(spec) -> list[dict]:
    return [lay["data"]["values"][0] for lay in _layers(spec, "point")]


# --- the controls -------------------------------------------------------------------


def test_the_controls_and_their_defaults_are_the_old_sliders():
    z = live.zero_memory.live
    assert z.values() == {
        "model": "Llama-3-70B",
        "gpu": "H100 SXM",
        "n_dp": 64,
        "k": 12,
    }
    n_dp = next(c for c in z.controls if c.name == "n_dp")
    assert n_dp.kind == "select-slider" and n_dp.options == tuple(
        2**i for i in range(15)
    )
    k = next(c for c in z.controls if c.name == "k")
    assert (k.min, k.max, k.step) == (4, 16, 2)
    b = live.bubble_share.live
    assert b.values() == {"p": 8, "m": 32, "v": 1}
    for c in (*z.controls, *b.controls):
        if c.name not in ("model", "gpu"):
            assert "(" in c.label and c.label.endswith(")"), c.label
    for fig in (z, b):  # no build-time data: a few tens of KB of JSON
        assert not fig.fixed and len(json.dumps(fig.payload())) < 50_000


def test_interleaving_keeps_m_a_multiple_of_p():
    assert live.bubble_ranges(p=8, v=2) == {"m": {"min": 8, "max": 256, "step": 8}}
    assert live.bubble_ranges(p=64, v=4)["m"]["max"] == 256
    assert live.bubble_ranges(p=8, v=1) == {"m": {"min": 1, "max": 256, "step": 1}}
    settled = live.bubble_share.live.settle({"p": 8, "m": 30, "v": 2}).values()
    assert settled["m"] == 32  # the nearest multiple of 8 on the slider's grid


# --- ZeRO ---------------------------------------------------------------------------


def test_zero_memory_at_llama3_70b_on_h100_by_hand():
    spec = live.zero_memory("Llama-3-70B", "H100 SXM", 64, 12)
    curves = _curves(spec)
    assert len(curves) == 5  # four stages and the HBM line
    by_dp = {
        name: {r["N_d"]: r["GiB"] for r in rows}
        for name, rows in curves.items()
        if "HBM" not in name
    }
    stage0, stage1, stage2, stage3 = by_dp.values()
    # 16 Psi on every GPU whatever N_d; stage 3: 16 Psi / N_d
    assert stage0[1] == stage0[16384] == pytest.approx(16 * N70 / GIB, rel=1e-12)
    assert stage3[64] == pytest.approx(16 * N70 / 64 / GIB, rel=1e-12)  # 16.43 GiB
    assert stage1[64] == pytest.approx((4 + 12 / 64) * N70 / GIB, rel=1e-12)
    assert stage2[64] == pytest.approx((2 + 14 / 64) * N70 / GIB, rel=1e-12)
    (hbm,) = [rows for name, rows in curves.items() if "HBM" in name]
    assert [r["GiB"] for r in hbm] == [pytest.approx(H100_USABLE_GIB, rel=1e-12)] * 2
    assert [r["N_d"] for r in hbm] == [1, 16384]
    marks = _points(spec)
    assert [m["N_d"] for m in marks] == [64] * 4
    assert marks[3]["GiB"] == pytest.approx(16 * N70 / 64 / GIB, rel=1e-12)
    title = spec["title"]["text"]
    assert "Llama-3-70B (70.6 B parameters)" in title and "K = 12" in title
    assert "fits from stage 3" in title and "79.6 GiB" in title


def test_zero_memory_says_when_no_stage_fits():
    # Llama-3-405B on one V100: 16 x 405.85e9 bytes is about 6 TB, far over 32 GB
    title = live.zero_memory("Llama-3-405B", "V100 SXM2", 1, 12)["title"]["text"]
    assert "no stage fits" in title


# --- the bubble ---------------------------------------------------------------------


def test_bubble_share_by_hand():
    spec = live.bubble_share(8, 32, 2)
    curves = _curves(spec)
    # (p - 1) / (v m + p - 1): p = 8, m = 32, v = 2 -> 7 / 71
    (point,) = _points(spec)
    assert point == {"m": 32, "idle": 7 / 71, "label": "p=8, v=2"}
    assert "9.9% idle" in spec["title"]["text"]
    ones = {r["m"]: r["idle"] for r in curves["p=8, v=1"]}
    assert ones[1] == 7 / 8 and ones[256] == 7 / 263
    # the other stage counts at the chosen v, grey
    assert {r["idle"] for r in curves["p=2, v=2"] if r["m"] == 1} == {1 / 3}
    assert set(curves) == {f"p=8, v={v}" for v in (1, 2, 4, 8)} | {
        f"p={p}, v=2" for p in (2, 4, 16, 32, 64)
    }
    (lines,) = _layers(spec, "line")
    dash = lines["encoding"]["strokeDash"]["scale"]
    solid = dict(zip(dash["domain"], dash["range"], strict=True))
    assert solid["p=8, v=2"] == [1, 0] and solid["p=8, v=1"] != [1, 0]


def test_the_micro_batch_grid_spans_1_to_256_and_holds_m():
    grid = live.micro_batch_grid(37)
    assert grid[0] == 1 and grid[-1] == 256 and 37 in grid
    assert grid == sorted(set(grid)) and 30 <= len(grid) <= 60


# --- properties ---------------------------------------------------------------------


@FEW
@given(
    st.sampled_from(live.MODELS),
    st.sampled_from(live.GPUS),
    st.sampled_from(live.DP_SIZES),
    st.sampled_from((4, 6, 8, 10, 12, 14, 16)),
)
def test_zero_memory_draws_the_closed_forms(model, gpu, n_dp, k):
    spec = live.zero_memory(model, gpu, n_dp, k)
    n = None
    curves = _curves(spec)
    stages = [rows for name, rows in curves.items() if "HBM" not in name]
    for rows in stages:
        ys = [r["GiB"] for r in rows]
        assert all(a >= b for a, b in zip(ys, ys[1:], strict=False))  # never grows
    plain = stages[0][0]["GiB"] * GIB
    n = plain / (4 + k)  # stage 0 is (2 + 2 + K) Psi
    for rows, stage in zip(stages, range(4), strict=True):
        at = {r["N_d"]: r["GiB"] * GIB for r in rows}
        expected = {
            0: (4 + k) * n,
            1: 4 * n + k * n / n_dp,
            2: 2 * n + (2 + k) * n / n_dp,
            3: (4 + k) * n / n_dp,
        }[stage]
        assert at[n_dp] == pytest.approx(expected, rel=1e-9)
    # every stage's marker sits on its curve; stage 3 at N_d = 1 is stage 0
    for mark, rows in zip(_points(spec), stages, strict=True):
        assert mark["GiB"] == next(r["GiB"] for r in rows if r["N_d"] == n_dp)
    hbm = accelerators.accelerator(gpu).hbm_usable_bytes / GIB
    assert {
        r["GiB"] for name, rows in curves.items() if "HBM" in name for r in rows
    } == {hbm}
    cfg = transformer.PRESETS[model]
    assert f"{cfg.name}" in spec["title"]["text"]
    json.dumps(spec, allow_nan=False)


@FEW
@given(
    st.sampled_from(live.BUBBLE_PS),
    st.integers(1, 256),
    st.sampled_from(live.BUBBLE_VS),
)
def test_bubble_share_draws_the_formula(p, m, v):
    values = live.bubble_share.live.settle({"p": p, "m": m, "v": v}).values()
    assert values["v"] == 1 or values["m"] % p == 0
    spec = live.bubble_share(**values)
    (point,) = _points(spec)
    expected = (p - 1) / (v * values["m"] + p - 1)
    assert point["idle"] == pytest.approx(expected, rel=1e-12)
    for name, rows in _curves(spec).items():
        q, vv = (int(part.split("=")[1]) for part in name.split(", "))
        idle = [r["idle"] for r in rows]
        assert idle == [(q - 1) / (vv * r["m"] + q - 1) for r in rows]
        assert all(a >= b for a, b in zip(idle, idle[1:], strict=False))
        assert any(r["m"] == values["m"] for r in rows)
    ranges = live.bubble_ranges(p=p, v=v)["m"]
    assert ranges["max"] % ranges["step"] == 0 and ranges["max"] <= 256
    grid = live.micro_batch_grid(values["m"])
    assert values["m"] in grid and grid[0] == 1 and grid[-1] == 256


# --- one pipeline step, drawn -------------------------------------------------------


def _slots(spec):
    (rects,) = _layers(spec, "rect")
    return rects["data"]["values"]


def _idle_share(spec, p):
    rows = _slots(spec)
    makespan = max(r["end"] for r in rows)
    idle = sum(r["end"] - r["start"] for r in rows if r["slot"] == "idle")
    return idle / (p * makespan)


def test_the_schedule_at_its_default_by_hand():
    """1F1B, p = 4, m = 8: 2 p m = 64 boxes; a forward takes 1, a backward 2,
    so the busy time is 4 x 8 x 3 = 96 and the bubble (p - 1)/(m + p - 1) =
    3/11 makes the step 96 / (4 x 8/11) = 33 long; 3/11 of 4 x 33 = 36 idle."""
    assert live.pipeline_schedule.live.values() == {"p": 4, "m": 8, "v": 1}
    spec = live.pipeline_schedule(4, 8, 1)
    rows = _slots(spec)
    ops = [r for r in rows if r["slot"] != "idle"]
    assert len(ops) == 64 and max(r["end"] for r in rows) == 33
    idle = sum(r["end"] - r["start"] for r in rows if r["slot"] == "idle")
    assert idle == 36 and _idle_share(spec, 4) == pytest.approx(3 / 11)
    assert "27.3%" in spec["title"]["text"] and "3/11" in spec["title"]["text"]
    # device 0 runs F1 first; device 3 waits 3 forwards for its first input
    first = {d: min(r["start"] for r in ops if r["device"] == d) for d in range(4)}
    assert first == {0: 0, 1: 1, 2: 2, 3: 3}


def test_schedule_ranges_keep_m_a_multiple_of_p_when_interleaved():
    assert live.schedule_ranges(p=4, v=2) == {"m": {"min": 4, "max": 32, "step": 4}}
    assert live.schedule_ranges(p=3, v=4)["m"] == {"min": 3, "max": 30, "step": 3}
    assert live.schedule_ranges(p=8, v=1)["m"] == {"min": 1, "max": 32, "step": 1}


@FEW
@given(
    st.sampled_from(live.SCHEDULE_PS),
    st.integers(1, 32),
    st.sampled_from(live.SCHEDULE_VS),
)
def test_the_shaded_idle_time_is_the_bubble(p, m, v):
    """For any setting the controls allow, the idle spans the figure shades
    are (p - 1) / (v m + p - 1) of p x the step, and every operation is drawn
    once: 2 p m v boxes."""
    values = live.pipeline_schedule.live.settle({"p": p, "m": m, "v": v}).values()
    m = values["m"]
    ranges = live.schedule_ranges(p=p, v=v)["m"]
    assert (
        ranges["min"] <= m <= ranges["max"]
        and (m - ranges["min"]) % ranges["step"] == 0
    )
    assert v == 1 or m % p == 0
    spec = live.pipeline_schedule(**values)
    assert _idle_share(spec, p) == pytest.approx(
        (p - 1) / (v * m + p - 1), rel=1e-9, abs=1e-12
    )
    assert len([r for r in _slots(spec) if r["slot"] != "idle"]) == 2 * p * m * v
    from mlbook.scaling import pipeline

    tl = pipeline.simulate("1f1b" if v == 1 else "interleaved", p, m, v)
    spans = live.idle_slots(tl)
    assert sum(b - a for _, a, b in spans) == tl.bubble * p * tl.makespan
    json.dumps(spec)
