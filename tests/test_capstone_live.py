"""The capstone chapter's live figure (mlbook.capstone.live.mfu_waterfall):
its bars against the additive time model worked out here by hand, its
controls (one checkbox per fix, two left out at first), and, for any run
and any ticks, bars that chain from the peak to the MFU the model gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import formulas as cf
from mlbook.capstone import live
from mlbook.common.accelerators import PEAK_BASES

PROPERTY_COVERS = {
    "mlbook.capstone.live.mfu_waterfall",
    "mlbook.capstone.live.waterfall_rows",
    "mlbook.capstone.live.peak_label",
}

FEW = examples(60)

# A made-up run: peak 100 GFLOP/s, ceiling 60, 3 GFLOP a step in 0.1 s with
# every fix (30 % MFU); without pre-tokenising 0.35 s, then 0.39 s without
# dropping recompute too.
RUN = {
    "peak_basis": "datasheet",
    "peak_flops_per_s": 100e9,
    "ceiling_flops_per_s": 60e9,
    "flops_per_step": 3e9,
    "fixed_step_s": 0.1,
    "savings_s": {"pretokenise": 0.25, "sdpa": 0.02, "no_recompute": 0.04},
    "device": "CPU: test",
}


def _bars(spec):
    return spec["layer"][0]["data"]["values"]


def test_the_controls_are_one_checkbox_per_fix_two_left_out_and_no_comm():
    fig = live.mfu_waterfall.live
    *boxes, comm = fig.controls
    assert [c.name for c in boxes] == list(cf.FIX_NAMES)
    assert {c.kind for c in boxes} == {"checkbox"}
    assert [c.label for c in boxes] == [f.label for f in cf.FIXES]
    assert (comm.name, comm.kind, comm.value, comm.min, comm.max) == (
        "comm_pct",
        "slider",
        0,
        0,
        100,
    )
    assert "(% of the fixed step)" in comm.label
    off = {c.name for c in boxes if not c.value}
    assert off == {"pretokenise", "no_recompute"}
    assert fig.fixed == ("run",)
    assert len(json.dumps(fig.payload({"run": RUN})["fixed"])) < 2_000


def test_the_default_bars_by_hand():
    spec = live.mfu_waterfall.live.draw(None, {"run": RUN}).spec
    bars = {b["bar"]: b for b in _bars(spec)}
    assert list(bars) == [
        "datasheet peak",
        "MAMF ceiling",
        "all fixes",
        "pre-tokenised data",
        "no recompute",
        "achieved",
    ]
    assert bars["MAMF ceiling"]["lo"] == pytest.approx(0.6)  # 60 of 100
    assert bars["all fixes"]["lo"] == pytest.approx(0.3)  # 3e9 / (0.1 * 100e9)
    # 3e9 / (0.35 * 100e9) = 0.0857; then 3e9 / (0.39 * 100e9) = 0.0769
    assert bars["pre-tokenised data"]["lo"] == pytest.approx(3 / 35)
    assert bars["no recompute"]["change"] == pytest.approx(3 / 39 - 3 / 35)
    assert bars["achieved"]["hi"] == pytest.approx(3 / 39)
    assert bars["no recompute"]["kind"] == "MFU lost"
    title = spec["title"]["text"]
    assert title.startswith("1 of 3 fixes applied: MFU 7.7%, CPU: test")
    # bf16 and torch.compile were not rungs of this run: the title says so
    assert "bf16 autocast, torch.compile: not rungs of this run" in title


def test_every_fix_applied_ends_at_the_fixed_step_and_unmeasured_boxes_do_nothing():
    fig = live.mfu_waterfall.live
    on = dict.fromkeys(cf.FIX_NAMES, True)
    spec = fig.draw(on, {"run": RUN}).spec
    assert _bars(spec)[-1]["hi"] == pytest.approx(0.3)
    assert spec == fig.draw(on | {"bf16": False}, {"run": RUN}).spec
    # a fix measured slower (negative saving) is a bar that gains MFU
    slower = RUN | {"savings_s": {"sdpa": -0.01}}
    spec = fig.draw(dict.fromkeys(cf.FIX_NAMES, False), {"run": slower}).spec
    assert _bars(spec)[3]["kind"] == "MFU gained"
    assert _bars(spec)[-1]["hi"] == pytest.approx(3 / 9)


def test_exposed_communication_is_a_last_loss_by_hand():
    # 50 % of the fixed 0.1 s: every fix applied, the step takes 0.15 s,
    # so 3e9 / (0.15 * 100e9) = 20 % MFU
    on = dict.fromkeys(cf.FIX_NAMES, True)
    spec = live.mfu_waterfall.live.draw(on | {"comm_pct": 50}, {"run": RUN}).spec
    *_, comm, achieved = _bars(spec)
    assert comm["bar"] == "exposed communication" and comm["kind"] == "MFU lost"
    assert comm["lo"] == pytest.approx(0.2) and achieved["hi"] == pytest.approx(0.2)
    assert "50 % exposed communication: MFU 20.0%" in spec["title"]["text"]


def test_the_example_run_draws_without_a_page():
    spec = live.mfu_waterfall()
    assert _bars(spec)[0]["bar"] == "upper-bound peak"  # a CPU's, as the example's
    assert "example run" in spec["title"]["text"]


@pytest.mark.parametrize(
    "basis,label",
    [
        ("datasheet", "datasheet peak"),
        ("upper bound", "upper-bound peak"),
        ("assumed clock", "assumed-clock peak"),
        ("unknown", "MAMF ceiling"),
    ],
)
def test_the_peak_is_named_from_its_basis_wherever_the_figure_names_it(basis, label):
    """A CPU's peak is an upper bound or a peak at an assumed clock, never a
    datasheet's: the first bar, the y axis and the legend say which."""
    spec = live.mfu_waterfall(run=RUN | {"peak_basis": basis})
    first = _bars(spec)[0]
    assert first["bar"] == first["kind"] == label
    bars = spec["layer"][0]["encoding"]
    assert bars["y"]["title"] == f"MFU (% of the {label})"
    assert bars["color"]["scale"]["domain"][0] == label
    assert len(bars["color"]["scale"]["domain"]) == len(bars["color"]["scale"]["range"])
    others = {p for p in ("datasheet peak", "upper-bound peak", "assumed-clock peak")}
    assert not (others - {label}) & set(json.dumps(spec).split('"'))


@FEW
@given(st.one_of(st.text(), st.none(), st.integers()))
def test_a_run_without_a_known_basis_is_refused_by_name(basis):
    if basis in PEAK_BASES:
        return
    with pytest.raises(ValueError, match="peak_basis"):
        live.peak_label({"peak_basis": basis})
    with pytest.raises(ValueError, match="peak_basis"):
        live.peak_label({})


@st.composite
def runs(draw):
    names = draw(st.lists(st.sampled_from(cf.FIX_NAMES), min_size=1, unique=True))
    peak = draw(st.floats(1e9, 1e15))
    fixed = draw(st.floats(1e-3, 1.0))
    return {
        "peak_basis": draw(st.sampled_from(PEAK_BASES)),
        "peak_flops_per_s": peak,
        "ceiling_flops_per_s": peak * draw(st.floats(0.1, 1.0)),
        "flops_per_step": peak * fixed * draw(st.floats(0.01, 0.9)),
        "fixed_step_s": fixed,
        "savings_s": {n: draw(st.floats(0.0, 1.0)) for n in names},
        "device": "CPU: test",
    }


@FEW
@given(
    runs(),
    st.lists(st.booleans(), min_size=9, max_size=9),
    st.integers(0, 20).map(lambda k: 5 * k),
)
def test_bars_chain_from_the_peak_to_the_additive_model(run, ticks, comm_pct):
    applied = dict(zip(cf.FIX_NAMES, ticks, strict=True))
    spec = live.mfu_waterfall(run=run, comm_pct=comm_pct, **applied)
    rows = _bars(spec)
    assert rows[0]["hi"] == 1 and rows[0]["lo"] == 0
    left_out = [n for n in run["savings_s"] if not applied[n]]
    assert len(rows) == 3 + len(left_out) + (comm_pct > 0) + 1
    comm_s = comm_pct / 100 * run["fixed_step_s"]
    t = run["fixed_step_s"] + sum(run["savings_s"][n] for n in left_out) + comm_s
    final = run["flops_per_step"] / (t * run["peak_flops_per_s"])
    assert rows[-1]["hi"] == pytest.approx(final)
    assert rows[0]["kind"] == rows[0]["bar"] == live.peak_label(run)
    for r in rows[1:-1]:
        assert r["lo"] <= r["hi"] and r["kind"] in live.KINDS
    json.dumps(spec, allow_nan=False)
    chosen = [n for n in run["savings_s"] if applied[n]]
    assert live.waterfall_rows(run, chosen, comm_s) == rows
