"""The precision chapter's new pieces: the numbers between 1 and 2 (counted
from every bit pattern torch knows, and drawn), block and MX scaling (against
a rounding written here with numpy and the OCP MX rule), the bytes a
parameter keeps (ZeRO's 16, the Playbook's 20), and the seeded artifacts of
the diagnosis exercises (property tests for every public function)."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.precision import cases, experiments, figures
from mlbook.precision import formulas as F

matplotlib.use("Agg")

PROPERTY_COVERS = {
    "mlbook.precision.formulas.numbers_between_one_and_two",
    "mlbook.precision.formulas.values_between_one_and_two",
    "mlbook.precision.formulas.state_recipe",
    "mlbook.precision.formulas.normal_span",
    "mlbook.precision.formulas.mx_scale",
    "mlbook.precision.cases.loss_scale_case",
    "mlbook.precision.cases.flushed_count",
    "mlbook.precision.cases.overflow_count",
    "mlbook.precision.cases.diagnosis",
    "mlbook.precision.cases.safe_scale_log2",
    "mlbook.precision.cases.stalled_run",
    "mlbook.precision.cases.absorbed_log2",
    "mlbook.precision.cases.updates_per_bf16_step",
}

# IEEE 754 binary16: 10 stored mantissa bits; bfloat16: 7; OCP FP8 E4M3: 3, E5M2: 2
# (OCP 8-bit Floating Point Specification rev. 1.0, Table 1).
MANTISSA_BITS = {"fp16": 10, "bf16": 7, "fp8 E4M3": 3, "fp8 E5M2": 2}


# --- numbers between 1 and 2 ------------------------------------------------------


@pytest.mark.parametrize(("name", "m"), MANTISSA_BITS.items())
def test_numbers_between_one_and_two_are_two_to_the_m_minus_one(name, m):
    # every bit pattern torch reads as the format, counted between 1 and 2
    assert F.numbers_between_one_and_two(name) == 2**m - 1
    assert experiments.count_between(name, 1.0, 2.0) == 2**m - 1
    values = F.values_between_one_and_two(name)
    assert values == sorted(values) and len(values) == 2**m - 1
    assert values[0] == 1 + 2.0**-m and values[-1] == 2 - 2.0**-m


def test_the_issues_counts():
    counts = {n: F.numbers_between_one_and_two(n) for n in MANTISSA_BITS}
    assert counts == {"fp16": 1023, "bf16": 127, "fp8 E4M3": 7, "fp8 E5M2": 3}
    assert F.numbers_between_one_and_two("fp32") == 2**23 - 1


def test_every_binade_holds_as_many_numbers():
    for name in ("fp16", "bf16", "fp8 E4M3"):
        assert experiments.count_between(name, 4.0, 8.0) == 2 ** MANTISSA_BITS[name] - 1
        assert experiments.count_between(name, 0.5, 1.0) == 2 ** MANTISSA_BITS[name] - 1


def test_the_number_line_draws_each_formats_numbers():
    fig = figures.numbers_between_one_and_two()
    rows = [c for c in fig.axes[0].collections if hasattr(c, "get_positions")]
    drawn = {
        name: sorted(rows[i].get_positions())
        for i, name in enumerate(figures.NUMBER_LINE_FORMATS)
    }
    for name, positions in drawn.items():
        m = MANTISSA_BITS[name]
        assert positions == [1 + k * 2.0**-m for k in range(1, 2**m)]
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["3 numbers", "7 numbers", "127 numbers", "1,023 numbers"]


def test_count_between_rejects_wide_formats_and_bad_bounds():
    with pytest.raises(ValueError, match="8- or 16-bit"):
        experiments.count_between("fp32")
    with pytest.raises(ValueError, match="low"):
        experiments.count_between("fp16", 0.0)


@given(st.sampled_from(F.FORMATS))
@examples(10)
def test_values_between_one_and_two_are_representable(name):
    values = F.values_between_one_and_two(name)
    assert len(values) == F.numbers_between_one_and_two(name)
    sample = values[:: max(1, len(values) // 50)]
    assert all(F.round_to_format(v, name) == v for v in sample)
    gaps = {b - a for a, b in zip(values, values[1:], strict=False)}
    assert gaps <= {F.float_format(name).eps}


# --- block scaling and MX -------------------------------------------------------------


def test_normal_span_known_values():
    assert F.normal_span("fp8 E4M3") == 448 / 2.0**-6 == 28_672
    assert F.normal_span("fp16") == 65504 / 2.0**-14


@pytest.mark.parametrize(
    ("amax", "scale"),
    [(1.0, 2.0**8), (448.0, 1.0), (512.0, 0.5), (1.5, 2.0**8), (0.75, 2.0**9)],
)
def test_mx_scale_follows_the_spec(amax, scale):
    # OCP MX v1.0, Sec. 6.3: X = floor(log2 amax) - emax_elem, emax(E4M3) = 8
    assert F.mx_scale(amax) == scale == 2.0 ** -(math.floor(math.log2(amax)) - 8)
    assert 2**8 <= amax * scale < 2**9


def _round_e4m3(x: np.ndarray) -> np.ndarray:
    """E4M3 round to nearest even, saturating: the quantum is 2^(E - 3) in the
    binade [2^E, 2^(E+1)), never below the subnormal quantum 2^-9."""
    a = np.abs(x)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    quantum = 2.0 ** (np.maximum(e, -6) - 3)
    return np.sign(x) * np.minimum(np.rint(a / quantum) * quantum, 448.0)


@pytest.mark.parametrize(
    ("block", "power_of_two"), [(None, False), (128, False), (32, True)]
)
def test_quantize_blocks_against_a_rounding_written_here(block, power_of_two):
    x = experiments.outlier_tensor(8, 256, 1e4, seed=1)
    got = experiments.quantize_blocks(x, block, "fp8 E4M3", power_of_two).numpy()
    tiles = (
        x.numpy().astype(np.float64).reshape(-1, x.numel() if block is None else block)
    )
    amax = np.abs(tiles).max(axis=1, keepdims=True)
    if power_of_two:
        scale = 2.0 ** -(np.floor(np.log2(amax)) - 8)
    else:
        scale = (448.0 / amax).astype(np.float32).astype(np.float64)
    want = (_round_e4m3((tiles * scale).astype(np.float32)) / scale).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_one_scale_sinks_the_bulk_past_the_normal_span():
    """The outlier at 1e3 leaves the bulk normal (a Gaussian's few values below
    1e3 x 2^-6 / 448 = 0.035 aside); at 1e5, past 28,672, one scale pushes the
    bulk below the smallest normal while a tile's scale does not."""
    sweep = experiments.block_scaling_sweep((1e3, 1e5), 64, 256, seed=0)
    at = {(r, e.label): e for r, errs in sweep.items() for e in errs}
    # P(|Z| < 0.0349) = 0.028 for a standard normal
    assert at[1e3, "per tensor"].below_normal == pytest.approx(0.028, abs=0.01)
    assert at[1e5, "per tensor"].below_normal > 0.99
    for r in (1e3, 1e5):
        for label in ("1 x 128 tiles", "MXFP8, 1 x 32"):
            # rounding to 3 mantissa bits: the relative error is at most 1/16
            assert at[r, label].mean_rel_error < 1 / 16
    assert (
        at[1e5, "per tensor"].mean_rel_error
        > 4 * at[1e5, "1 x 128 tiles"].mean_rel_error
    )


def test_block_errors_and_quantize_blocks_bad_input():
    x = torch.ones(4, 100)
    with pytest.raises(ValueError, match="block=128 must divide"):
        experiments.quantize_blocks(x, 128)
    with pytest.raises(ValueError, match="dtype"):
        experiments.quantize_blocks(x, 4, "fp16")
    with pytest.raises(ValueError, match="ratio"):
        experiments.outlier_tensor(2, 2, 0.0)


def test_the_block_figure_marks_the_normal_span():
    sweep = experiments.block_scaling_sweep((1e2, 1e5), 8, 128, seed=0)
    fig = figures.block_scaling(sweep)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_ylabel()
    assert any("28,672" in t.get_text() for t in ax.get_legend().get_texts())


# --- the bytes a parameter keeps ----------------------------------------------------


def test_the_state_recipes_by_hand():
    # ZeRO (Rajbhandari et al. 2020), Sec. 3.1: 2 + 2 + 4 + 4 + 4 = 16; the
    # Ultra-Scale Playbook: bf16 weights and gradients (2 + 2), fp32 copies of both
    # (4 + 4), Adam's two fp32 moments (4 + 4) = 20
    assert F.state_recipe("bf16 gradients").total == 16
    assert F.state_recipe("fp32 gradients").total == 20
    assert (F.state_recipe("bf16 gradients").reduced_bytes, 2) == (2, 2)
    assert F.state_recipe("fp32 gradients").reduced_bytes == 4
    with pytest.raises(ValueError, match="name"):
        F.state_recipe("fp8")


@given(st.sampled_from(tuple(F.STATE_RECIPES)))
@examples(5)
def test_a_recipe_is_its_items(name):
    r = F.state_recipe(name)
    assert r.total == sum(r.bytes_per_param.values()) and r.reduced_bytes in (2, 4)
    assert r.bytes_per_param["fp32 master weights"] == 4


@given(st.floats(1e-30, 1e30), st.sampled_from(F.FP8_FORMATS))
@examples(50)
def test_mx_scale_puts_amax_in_the_top_binade(amax, name):
    s = F.mx_scale(amax, name)
    emax = math.frexp(F.float_format(name).max)[1] - 1
    assert math.log2(s).is_integer() and 2**emax <= amax * s < 2 ** (emax + 1)


@given(st.sampled_from(F.FORMATS))
@examples(10)
def test_normal_span_is_max_over_smallest_normal(name):
    f = F.float_format(name)
    assert F.normal_span(name) == f.max / f.smallest_normal > 1


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "1", None])
def test_mx_scale_rejects_bad_amax(bad):
    with pytest.raises(ValueError, match="amax"):
        F.mx_scale(bad)


# --- the diagnosis artifacts -------------------------------------------------------


@given(st.integers(0, 10_000))
@examples(15)
def test_a_loss_scale_case_is_wrong_one_way(seed):
    case = cases.loss_scale_case(seed, n_values=2000)
    assert sum(n for _, n in case.bins) == case.n_values
    k = case.scale_log2
    cause = cases.diagnosis(case)
    assert cause in ("underflow", "overflow")
    over, flushed = cases.overflow_count(case, k), cases.flushed_count(case, k)
    assert (over > 0) == (cause == "overflow")
    safe = cases.safe_scale_log2(case)
    assert cases.overflow_count(case, safe) == 0 < cases.overflow_count(case, safe + 1)
    assert cases.flushed_count(case, safe) <= flushed
    assert case.amax_scaled == max(case.magnitudes) * 2.0**k
    assert cases.loss_scale_case(seed, n_values=2000).bins == case.bins  # seeded


def test_the_loss_scale_case_against_torchs_cast():
    case = cases.loss_scale_case(3)
    g = torch.tensor(case.magnitudes, dtype=torch.float32) * 2.0**case.scale_log2
    assert cases.flushed_count(case, case.scale_log2) == int((g.half() == 0).sum())
    assert cases.overflow_count(case, case.scale_log2) == int(g.half().isinf().sum())


@given(st.integers(0, 10_000))
@examples(10)
def test_a_stalled_run_never_moves(seed):
    run = cases.stalled_run(seed, steps=30, n_weights=8, log_every=10)
    assert all(r.changed == 0 and r.grad_norm > 0 and r.lr > 0 for r in run.rows)
    assert all(r.update_median == run.lr for r in run.rows)
    assert len({r.loss for r in run.rows}) == 1
    half_gap = 2.0 ** cases.absorbed_log2(run)
    assert run.lr < half_gap == F.absorb_limit(run.weight_median, "bf16")
    assert cases.updates_per_bf16_step(run) == 2 * half_gap / run.lr > 2


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None])
def test_the_generators_reject_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        cases.loss_scale_case(bad)
    with pytest.raises(ValueError, match="seed"):
        cases.stalled_run(bad)


def test_machine_py_names_the_units_ratio_and_the_library():
    """Errata item 12 in mlbook/common/machine.py: the AVX-512-BF16 units' ratio is
    2 (from the design table: bf16 FLOP/cycle over fp32), and the rest of a Zen 5's
    4.5 x is its fp32 library path."""
    from pathlib import Path

    from mlbook.common import accelerators, machine

    text = " ".join(Path(machine.__file__).read_text().replace("#", " ").split())
    assert "a ratio of 2" in text and "fp32 path ran at the AVX2 rate" in text
    zen5 = next(c for c in accelerators.CPU_CORES if c.name == "Zen 5")
    bf16 = dict(zen5.flops_per_cycle["bf16"])["avx512_bf16"]
    fp32 = dict(zen5.flops_per_cycle["fp32"])["avx512f"]
    assert bf16 / fp32 == 2
