"""The roofline's live figure: its rooflines are the table's (and this
machine's measurements), every operator sits on its roofline at the
intensity worked out by hand, and the measured matmuls are drawn only at the
T and h they ran at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.mfu import live

PROPERTY_COVERS = {
    "mlbook.mfu.live.roofline_data",
    "mlbook.mfu.live.roofline_explorer",
}

FEW = examples(40)
MACHINE = live.roofline_data(
    "a CPU", "fp32", 140e9, 14e9, [(2048, 256, 256, 90e9), (256, 256, 2048, 80e9)],
    2048, 256,
)  # fmt: skip


def layer(spec, mark):
    return [lay for lay in spec["layer"] if lay["mark"]["type"] == mark]


def test_the_h100_point_of_a_projection_by_hand():
    spec = live.roofline_explorer(64, 4096)
    pts = layer(spec, "point")[0]["data"]["values"]
    h100 = {p["operator"]: p for p in pts if p["curve"].startswith("H100")}
    # 64 tokens through 4096 x 4096 in bf16: 2*64*4096^2 / (2*(2*64*4096 + 4096^2))
    i = 2 * 64 * 4096**2 / (2 * (2 * 64 * 4096 + 4096**2))
    assert h100[live.PROJECTION]["intensity"] == pytest.approx(i)
    # below the ridge of 989 / 3.35 = 295: the rate is intensity x 3.35 TB/s
    assert h100[live.PROJECTION]["flops_per_s"] == pytest.approx(i * 3.35e12)
    assert h100[live.ADD]["intensity"] == pytest.approx(1 / 6)  # 1 FLOP, 3 x 2 bytes
    assert h100[live.ADAMW]["intensity"] == pytest.approx(14 / 14)  # 7 x 2 bytes
    assert "H100 SXM 295" in spec["title"]["text"]


def test_this_machines_roofline_and_its_measured_matmuls():
    spec = live.roofline_explorer(2048, 256, machine=MACHINE)
    rows = layer(spec, "line")[0]["data"]["values"]
    mine = [r for r in rows if r["curve"].startswith("this machine")]
    assert max(r["flops_per_s"] for r in mine) == pytest.approx(140e9)
    assert "this machine 10" in spec["title"]["text"]  # 140 / 14
    crosses = [
        lay for lay in layer(spec, "point") if lay["mark"].get("shape") == "cross"
    ]
    assert len(crosses) == 1 and len(crosses[0]["data"]["values"]) == 2
    # fp32: 2*2048*256*256 / (4*(2048*256 + 256*256 + 2048*256))
    i = 2 * 2048 * 256 * 256 / (4 * (2 * 2048 * 256 + 256 * 256))
    assert crosses[0]["data"]["values"][0]["intensity"] == pytest.approx(i)
    elsewhere = live.roofline_explorer(1024, 256, machine=MACHINE)
    assert all(lay["mark"].get("shape") != "cross" for lay in layer(elsewhere, "point"))
    assert "T = 2,048, h = 256 only" in elsewhere["title"]["subtitle"]


@FEW
@given(st.integers(0, 16), st.integers(6, 14))
def test_every_point_sits_on_its_roofline_and_grows_with_tokens(t_exp, h_exp):
    t, h = 2**t_exp, 2**h_exp
    spec = live.roofline_explorer(t, h, machine=MACHINE)
    rows = layer(spec, "line")[0]["data"]["values"]
    peak = {
        r["curve"]: max(x["flops_per_s"] for x in rows if x["curve"] == r["curve"])
        for r in rows
    }
    pts = layer(spec, "point")[0]["data"]["values"]
    for p in pts:
        bw = peak[p["curve"]] / p["ridge"]
        assert p["flops_per_s"] == pytest.approx(
            min(peak[p["curve"]], p["intensity"] * bw)
        )
    more = layer(live.roofline_explorer(2 * t, h, machine=MACHINE), "point")[0]
    for a, b in zip(pts, more["data"]["values"], strict=True):
        assert b["intensity"] >= a["intensity"] * (1 - 1e-12)


@FEW
@given(st.floats(1e6, 1e15), st.floats(1e6, 1e13))
def test_roofline_data_keeps_what_it_was_given(ceiling, bw):
    got = live.roofline_data("x", "bf16", ceiling, bw)
    assert got["ceiling_flops_per_s"] == ceiling and got["bytes_per_s"] == bw
    assert got["measured"] == []


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"name": ""}, "name"),
        ({"dtype": "int8"}, "dtype"),
        ({"ceiling_flops_per_s": 0}, "peak_flops_per_s"),
        ({"measured": [(1, 2, 3)]}, "measured"),
        ({"tokens": None}, "tokens"),
    ],
)
def test_roofline_data_refuses_bad_input(kw, words):
    args = dict(
        name="x", dtype="fp32", ceiling_flops_per_s=1e9, bytes_per_s=1e9,
        measured=[(1, 1, 1, 1e9)], tokens=1, d_model=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=words):
        live.roofline_data(**(args | kw))
