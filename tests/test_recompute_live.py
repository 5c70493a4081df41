"""The recompute chapter's live figures (mlbook.recompute.live): their specs
against Korthikanti's count worked out here by hand, and, for any setting of
their shared controls, the numbers they draw against the formulas and the
marked points against the curve they sit on."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.recompute import formulas as rc
from mlbook.recompute import live

PROPERTY_COVERS = {
    "mlbook.recompute.live.strategy_tradeoff",
    "mlbook.recompute.live.segments_memory",
}

GIB = 2**30
FEW = examples(60)


def _layers(spec, mark):
    return [lay for lay in spec["layer"] if lay["mark"]["type"] == mark]


def _points(spec):
    return {r["strategy"]: r for r in _layers(spec, "point")[0]["data"]["values"]}


# --- the controls -------------------------------------------------------------------


def test_both_figures_share_the_controls_and_start_at_llama2_7b():
    a, b = live.strategy_tradeoff.live, live.segments_memory.live
    assert a.controls == b.controls == live.CONTROLS
    # Llama-2-7B: h = 4096, a = 32, L = 32 (Touvron et al. 2023), at s = 4096, b = 1
    assert a.values() == {"s": 4096, "h": 4096, "a": 32, "L": 32, "b": 1}
    options = {c.name: c.options for c in live.CONTROLS if c.options}
    assert options["s"] == tuple(2**k for k in range(9, 18))  # 512 to 131,072
    # every head count divides every width, so no setting is refused
    assert all(h % a == 0 for h in options["h"] for a in options["a"])
    for c in live.CONTROLS:
        assert "(" in c.label and c.label.endswith(")"), c.label
    assert not a.fixed and not b.fixed  # no build-time data: a few KB of JSON
    assert len(json.dumps(a.payload())) < 10_000


# --- the strategies ---------------------------------------------------------------


def test_strategy_tradeoff_at_llama2_7b_by_hand():
    # s = h = 4096, a = L = 32, b = 1: sbh = 2^24, a s^2 b = 2^29 (bytes per unit);
    # A = 34 * 2^24 + 5 * 2^29 = 3.03125 GiB, I = 2^25 bytes (1/32 GiB).
    spec = live.strategy_tradeoff(4096, 4096, 32, 32, 1)
    p = _points(spec)
    assert p["none"]["gib"] == 32 * 3.03125  # 97.0 GiB
    assert p["selective"]["gib"] == 32 * 34 * 2**24 / GIB  # 17 GiB
    # c = ceil(sqrt 32) = 6: 6 I + ceil(32 / 6) A = 0.1875 + 6 * 3.03125
    assert p["sqrt(L) segments"]["gib"] == 0.1875 + 6 * 3.03125
    assert p["full"]["gib"] == 1 + 3.03125  # 32 I + A
    # selective's extra at s = h, GELU d_ff = 4h: 4h^2 / (24h^2 + 4h^2) / 3 = 1/21
    assert p["selective"]["extra"] == pytest.approx(1 / 21, rel=1e-12)
    assert p["none"]["extra"] == 0
    assert p["full"]["extra"] == p["sqrt(L) segments"]["extra"] == 1 / 3
    assert p["sqrt(L) segments"]["kept"] == "6 layer inputs and one segment"
    assert p["none"]["label"] == "none: 97.0 GiB"
    title = spec["title"]["text"]
    assert "s=4,096, h=4,096, a=32, L=32, b=1" in title and "16-bit" in title
    color = _layers(spec, "point")[0]["encoding"]["color"]["scale"]
    assert color["domain"] == [r["label"] for r in p.values()]
    assert len(set(color["range"])) == 4


# --- the segments -----------------------------------------------------------------


def test_segments_memory_at_llama2_7b_by_hand():
    spec = live.segments_memory(4096, 4096, 32, 32, 1)
    rows = _layers(spec, "line")[0]["data"]["values"]
    assert [r["c"] for r in rows] == list(range(1, 33))
    # m(c) = c I + ceil(32 / c) A in GiB, I = 1/32, A = 3.03125
    for r in rows:
        assert r["gib"] == r["c"] / 32 + math.ceil(32 / r["c"]) * 3.03125
    rule = _layers(spec, "rule")[0]["data"]["values"][0]
    # c* = sqrt(32 * 97) = 55.7, beyond L: ruled at L
    assert rule["c"] == 32 and rule["c_star"] == pytest.approx(math.sqrt(32 * 97))
    best, chen = (lay["data"]["values"][0] for lay in _layers(spec, "point"))
    assert best == {"c": 32, "gib": 1 + 3.03125}
    assert chen == {"c": 6, "gib": 0.1875 + 6 * 3.03125}
    title = spec["title"]["text"]
    assert "A/I = 97" in title and "c* = 55.7 > L" in title
    assert "best whole c = 32" in title and "ceil(sqrt L) = 6" in title


def test_segments_memory_where_c_star_is_below_l():
    # s = 512, h = 4096, a = 32, L = 128, b = 1: 5as/h = 20, A = 54 sbh = 27 I.
    # c* = sqrt(128 * 27) = 58.8. Whole c: c >= 64 gives segments of 2 layers,
    # m(64) = 64 + 2 * 27 = 118 I; c from 43 to 63 gives 3, m >= 43 + 81 = 124;
    # c = 128 gives 155. So c = 64, and I = 2 * 512 * 4096 bytes = 2^22.
    spec = live.segments_memory(512, 4096, 32, 128, 1)
    rule = _layers(spec, "rule")[0]["data"]["values"][0]
    assert rule["c"] == pytest.approx(math.sqrt(128 * 27)) and rule["label"] == "c*"
    best, chen = (lay["data"]["values"][0] for lay in _layers(spec, "point"))
    assert best == {"c": 64, "gib": 118 * 2**22 / GIB}
    assert chen["c"] == 12  # ceil(sqrt 128)
    assert "> L" not in spec["title"]["text"]


def test_one_layer_is_one_segment():
    spec = live.segments_memory(512, 1024, 8, 1, 1)
    rows = _layers(spec, "line")[0]["data"]["values"]
    assert [r["c"] for r in rows] == [1]
    best, chen = (lay["data"]["values"][0] for lay in _layers(spec, "point"))
    assert best["c"] == chen["c"] == 1 and best["gib"] == rows[0]["gib"]


# --- any setting ------------------------------------------------------------------


def _options(name):
    return next(c for c in live.CONTROLS if c.name == name).options


settings_of_the_controls = st.tuples(
    st.sampled_from(_options("s")),
    st.sampled_from(_options("h")),
    st.sampled_from(_options("a")),
    st.integers(1, 128),
    st.integers(1, 16),
)


@FEW
@given(settings_of_the_controls)
def test_the_strategies_are_the_plans_and_fit_the_axes(shape):
    s, h, a, L, b = shape
    spec = live.strategy_tradeoff(s, h, a, L, b)
    json.dumps(spec, allow_nan=False)
    plans = rc.checkpoint_plans(s, b, h, a, L)
    points = _points(spec)
    assert len(points) == 4
    for k, plan in plans.items():
        p = points[live.LABELS[k]]
        assert p["gib"] == plan.memory_bytes / GIB
        assert p["extra"] == plan.extra_flops_fraction
        assert p["label"].endswith(f"{plan.memory_bytes / GIB:,.1f} GiB")
    x = _layers(spec, "point")[0]["encoding"]["x"]["scale"]["domain"]
    y = _layers(spec, "point")[0]["encoding"]["y"]["scale"]["domain"]
    assert all(
        x[0] <= p["extra"] <= x[1] and 0 < p["gib"] <= y[1] for p in points.values()
    )
    # selective keeps less than none; full too, but for one layer, where it keeps
    # the input besides (L I + A > L A at L = 1); and full no more than sqrt(L)
    none = points["none"]["gib"]
    assert points["selective"]["gib"] < none
    assert (points["full"]["gib"] < none) == (L > 1)
    assert points["full"]["gib"] <= points["sqrt(L) segments"]["gib"]


@FEW
@given(settings_of_the_controls)
def test_the_best_segment_count_is_the_curves_least_point(shape):
    s, h, a, L, b = shape
    spec = live.segments_memory(s, h, a, L, b)
    json.dumps(spec, allow_nan=False)
    rows = _layers(spec, "line")[0]["data"]["values"]
    curve = {r["c"]: r["gib"] for r in rows}
    assert sorted(curve) == list(range(1, L + 1))
    best, chen = (lay["data"]["values"][0] for lay in _layers(spec, "point"))
    assert best["gib"] == min(curve.values()) == curve[best["c"]]
    assert best["c"] == min(c for c, m in curve.items() if m == best["gib"])
    assert chen == {"c": math.ceil(math.sqrt(L)), "gib": curve[chen["c"]]}
    rule = _layers(spec, "rule")[0]["data"]["values"][0]
    A = rc.activation_bytes_per_layer(s, b, h, a)
    c_star = math.sqrt(L * A / (2 * s * b * h))  # I = 2 sbh
    assert rule["c_star"] == pytest.approx(c_star) and rule["c"] == min(c_star, L)
    # the continuous bound 2 sqrt(L A I) lies below every whole c
    bound = 2 * math.sqrt(L * A * 2 * s * b * h) / GIB
    assert all(m >= bound * (1 - 1e-12) for m in curve.values())
