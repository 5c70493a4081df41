"""The cadence chapter's live figure (mlbook.cadence.live.waste_explorer) as
the page draws it: its starting point, read back by hand, and, for any
cluster, the rule that a bigger cluster checkpoints more often."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.cadence import live

FEW = examples(40)


def _point(spec, mark):
    return next(lay for lay in spec["layer"] if lay["mark"]["type"] == mark)


def test_the_pages_start_is_the_1024_gpu_rate_on_the_sliders_grid():
    # The page passes node_mtbf_h = 7.9 h x 128 nodes = 1,011.2 h (Kokolis et al.
    # 2024, 1,024-GPU jobs, 8 GPUs a node). The slider steps by 10^(1/20) from
    # 100 h: 100 x 10^(40/20) = 1,000 h and 100 x 10^(41/20) = 1,122 h, so it
    # starts at 1,000 h, "rounded to the control's step" as the prose says.
    drawn = live.waste_explorer.live.draw({"node_mtbf_h": 7.9 * 128})
    assert drawn.values == {
        "checkpoint_s": 30.0,
        "node_mtbf_h": pytest.approx(1000.0, rel=1e-9),
        "restart_s": 0,
        "n_nodes": 128,
    }
    # T = 1,000 h / 128 = 7.8125 h = 28,125 s; Daly at C = 30 s:
    # sqrt(2 x 30 x 28,125) = 1,299.04 s, x = 30 / 56,250:
    # 1,299.04 x (1 + 0.00769800 + 0.0000592593) - 30 = 1,279.12 s = 21.32 min
    star = _point(drawn.spec, "point")["data"]["values"][0]
    assert star["I_min"] * 60 == pytest.approx(1279.12, abs=0.01)
    assert star["T_h"] == pytest.approx(7.8125, rel=1e-12)
    assert "T = 7.81 h" in drawn.spec["title"]["text"]
    assert "I* = 21.3 min" in drawn.spec["title"]["text"]


def test_the_fixed_data_is_small():
    # no build-time data: the payload is the declaration and the default spec
    payload = live.waste_explorer.live.payload()
    assert len(json.dumps(payload)) < 200_000


@FEW
@given(
    st.floats(3, 3000), st.floats(100, 100_000), st.integers(1, 2048), st.integers(2, 4)
)
def test_more_nodes_checkpoint_more_often_and_lose_more(c, node_h, n, factor):
    # T = node MTBF / n falls by the factor, so Young's sqrt(2CT) shrinks by
    # sqrt(factor) and the optimum's loss grows
    small = live.waste_explorer(c, node_h, 0, n)
    big = live.waste_explorer(c, node_h, 0, n * factor)
    rule = [_point(s, "rule")["data"]["values"][0]["I_min"] for s in (small, big)]
    assert rule[1] == pytest.approx(rule[0] / math.sqrt(factor), rel=1e-9)
    w = [_point(s, "point")["data"]["values"][0]["W"] for s in (small, big)]
    assert w[1] >= w[0]
