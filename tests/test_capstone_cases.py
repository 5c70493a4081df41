"""The seeded generators of the capstone's diagnosis exercises
(mlbook.capstone.cases): for any seed, one planted defect that stands out
of its bucket and nothing else that does, a fixed step that is today's less
that bucket's excess, and a run report whose HFU over MFU is the recompute
setting's FLOP ratio, worked out here from the FLOP formula by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import cases
from mlbook.capstone import formulas as cf
from mlbook.common.transformer import PRESETS

PROPERTY_COVERS = {
    "mlbook.capstone.cases.planted_profile",
    "mlbook.capstone.cases.recompute_report",
    "mlbook.capstone.cases.hardware_flops_per_token",
}

FEW = examples(50)
seeds = st.integers(1, 10**6)


@FEW
@given(seeds)
def test_one_defect_stands_out_and_its_fix_takes_off_only_its_excess(seed):
    p = cases.planted_profile(seed)
    assert p == cases.planted_profile(seed)  # the same artifact every time
    assert p.defect in cases.PLANTABLE and p.bucket in cf.BUCKETS
    for b in cf.BUCKETS:
        week, today = p.healthy_ms[b], p.today_ms[b]
        if b == p.bucket:
            assert today > 2 * week  # it stands out
        elif week:
            # two measurements within 3 % of one share each (and 0.1 ms rounding)
            assert abs(today / week - 1) <= 2 * cases.JITTER / (1 - cases.JITTER) + 0.01
        else:
            assert today == 0
    excess = p.today_ms[p.bucket] - p.healthy_ms[p.bucket]
    assert p.fixed_step_ms == pytest.approx(p.today_step_ms - excess, abs=0.051)
    assert p.fixed_step_ms < p.today_step_ms
    rows = p.rows()
    assert rows[-1]["bucket"] == "step"
    assert rows[-1]["today (ms)"] == pytest.approx(
        sum(r["today (ms)"] for r in rows[:-1]), abs=0.051
    )


def test_the_seeds_cover_every_plantable_defect():
    found = {cases.planted_profile(s).defect for s in range(1, 60)}
    assert found == set(cases.PLANTABLE)


def test_full_recompute_adds_a_bucket_of_one_forward():
    seed = next(
        s for s in range(1, 60) if cases.planted_profile(s).defect == "no_recompute"
    )
    p = cases.planted_profile(seed)
    compute = p.today_ms["matmul"] + p.today_ms["attention"] + p.today_ms["elementwise"]
    assert p.healthy_ms["recompute"] == 0
    assert p.today_ms["recompute"] == pytest.approx(compute / 3, abs=0.051)


def test_hardware_flops_by_hand_for_llama_3_8b():
    # Llama-3-8B at s = 8192: N_matmul = 7,504,658,432, 4 L h s = 4 * 32 * 4096 * 8192
    # (the attention core's forward), so the model's 6 N + 12 L h s a token, a
    # fourth pass (2 N + 4 L h s) more with full recompute, 4 L h s with selective.
    n, core = 7_504_658_432, 4 * 32 * 4096 * 8192
    model = 6 * n + 3 * core
    cfg = PRESETS["Llama-3-8B"]
    assert cases.hardware_flops_per_token(cfg, 8192, "none") == model
    assert cases.hardware_flops_per_token(cfg, 8192, "full") == model + 2 * n + core
    assert cases.hardware_flops_per_token(cfg, 8192, "selective") == model + core
    with pytest.raises(ValueError, match="setting"):
        cases.hardware_flops_per_token(cfg, 8192, "partial")


@FEW
@given(seeds)
def test_hfu_over_mfu_is_the_setting_s_flop_ratio(seed):
    r = cases.recompute_report(seed)
    cfg = PRESETS[r.model]
    model = cases.hardware_flops_per_token(cfg, r.seq_len, "none")
    hardware = cases.hardware_flops_per_token(cfg, r.seq_len, r.setting)
    assert r.hfu / r.mfu == pytest.approx(hardware / model, rel=1e-12)
    if r.setting == "full":
        assert r.hfu / r.mfu == pytest.approx(4 / 3, rel=1e-12)
    elif r.setting == "selective":
        assert 1 < r.hfu / r.mfu < 1.2  # only the attention core again
    else:
        assert r.hfu == r.mfu
    assert 0.34 < r.hfu < 0.56  # drawn in 35-55 %, moved a little by rounding
    assert r.step_s_without == pytest.approx(r.step_s * r.mfu / r.hfu, rel=1e-12)
    assert r.tokens_per_step % r.seq_len == 0
    assert [row["quantity"] for row in r.rows()][0] == "model"


def test_the_settings_all_appear():
    found = {cases.recompute_report(s).setting for s in range(1, 40)}
    assert found == set(cases.RECOMPUTE_SETTINGS)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True, None])
def test_a_bad_seed_is_named(bad):
    with pytest.raises(ValueError, match="seed"):
        cases.planted_profile(bad)
    with pytest.raises(ValueError, match="seed"):
        cases.recompute_report(bad)
