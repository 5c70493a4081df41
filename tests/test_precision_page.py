"""The mixed-precision chapter's claims, read from the values it glued into its
prose in the test build (test sizes, notebooks/precision.md with SMALL=True).
Each number is checked against its source (IEEE 754, the OCP FP8 spec, the
GradScaler documentation, the H100 datasheet, the ZeRO paper), a hand
computation written out here, a physical bound, or the page's own asserts; each
tolerance says where it comes from."""

import json
import math
from pathlib import Path

import pytest

from conftest import page_values
from helpers.live import live_payloads

pytestmark = pytest.mark.book
PAGE = Path(__file__).resolve().parent.parent / "notebooks" / "precision.md"

# The test sizes of the page's parameters cell (SMALL=True).
GRAD_LAYERS, GRAD_H, GRAD_B, GRAD_S = 2, 64, 2, 64
SCALER_STEPS, SCALER_INTERVAL, MASTER_STEPS, FP8_STEPS = 300, 20, 150, 60
LLAMA2_VOCAB = 32_000  # Touvron et al. 2023 (Llama 2), Sec. 2.1: a 32k-token vocabulary

LABELS = {"device_name", "mm_kind"}
GLUED = LABELS | {
    # formats
    "n12_fp32",
    "n12_fp16",
    "n12_bf16",
    "n12_e4m3",
    "n12_e5m2",
    "fp16_max",
    "fp16_normal",
    "fp16_sub",
    "fp16_normal_log2",
    "fp16_sub_log2",
    "fp16_eps",
    "fp32_max",
    "bf16_max",
    "bf16_eps",
    "bf16_exp_bits",
    "bf16_mant_bits",
    "bf16_sig_bits",
    "e4m3_max",
    "e4m3_nan_patterns",
    "e4m3_mant_bits",
    "e5m2_max",
    "e5m2_mant_bits",
    # gradients
    "g_vocab",
    "g_n_logits",
    "g_n_hidden",
    "g_1_over_bsv",
    "g_bsv",
    "g_flush",
    "g_flush_log2",
    "g_inv_flush",
    "g_safe",
    "g_safe_log2",
    "g_bf16_zero",
    "g_weights_ratio",
    "g_sub_scaled_max",
    *(
        f"g_{k}_{what}"
        for k in ("logits", "activations", "weights")
        for what in ("median", "zero", "sub", "zero_scaled")
    ),
    # loss scaling
    "gs_init",
    "gs_growth",
    "gs_backoff",
    "gs_interval",
    "sc_spike",
    "sc_spikes",
    "sc_steps",
    "sc_interval",
    "sc_same",
    "sc_skipped",
    "sc_skipped_frac",
    "sc_final",
    # bf16 and master weights
    "bf16_half_gap",
    "bf16_half_gap_log2",
    "mw_lr",
    "mw_offset",
    "mw_steps",
    "mw_loss0",
    "mw_fp32_loss",
    "mw_master_loss",
    "mw_pure_loss",
    "mw_pure_lost",
    "mw_initial_error",
    "mw_master_error",
    "mw_pure_error",
    "master_bytes",
    "p5_gap",
    "p5_step_error",
    "p5_lost",
    "p5_decay",
    # fp8, per tensor, delayed and per block
    "f8_grad_std",
    "f8_E5M2_plain",
    "f8_E5M2_flushed",
    "f8_E5M2_scaled",
    "f8_E4M3_scaled",
    "f8_jump_step",
    "f8_delayed_median",
    "f8_current_median",
    "f8_none_median",
    "f8_jump_sat",
    "f8_jump_err",
    "f8_after_err",
    "bs_r_below",
    "bs_r_past",
    "bs_rows",
    "bs_cols",
    "bs_span",
    "bs_tensor_1e3",
    "bs_tile_1e3",
    "bs_tensor_1e5",
    "bs_tile_1e5",
    "bs_mx_1e5",
    "bs_below_1e3",
    "bs_below_1e5",
    "bs_flushed_1e5",
    # matmul throughput, the units, and memory
    "mm_n",
    "mm_fp32",
    "mm_bf16",
    "mm_fp16",
    "mm_fp16_n",
    "mm_bf16_over_fp32",
    "mm_fp16_over_fp32",
    "mm_library",
    "units_avx512_bf16",
    "units_amx",
    "units_here",
    "zen5_units",
    "zen5_ratio",
    "zen5_fp32",
    "zen5_fp32_avx2",
    "xeon_fp32",
    "xeon_fp32_avx2",
    "xeon_units",
    "xeon_ratio",
    "h100_bf16_over_fp32",
    "h100_fp8_over_bf16",
    "acc_bf16",
    "acc_fp32",
    "state_per_param",
    "state_fp32_grads",
    "reduced_bf16",
    "reduced_fp32",
    "state_7b",
    "state_70b",
    "state_405b",
    "state20_7b",
    "state20_70b",
    "state20_405b",
    # the diagnosis exercise's solution
    "p7_gap",
    "p7_lost_share",
}
FRACTIONS = (
    {k for k in GLUED if k.endswith(("_zero", "_sub", "_zero_scaled", "_lost"))}
    | {
        "g_bf16_zero",
        "g_sub_scaled_max",
        "sc_skipped_frac",
        "f8_E5M2_flushed",
        "f8_jump_sat",
        "p7_lost_share",
    }
    | {k for k in GLUED if k.startswith(("bs_tensor", "bs_tile", "bs_mx", "bs_below"))}
)
FRACTIONS |= {"bs_flushed_1e5"}


@pytest.fixture(scope="module")
def v(book):
    assert book["chapters"]["precision"]["error"] is None
    return page_values("precision")


def test_every_glued_value_is_named_here_and_is_a_number_or_a_label(v):
    assert set(v) == GLUED  # a new glue needs a check in this file
    assert v["device_name"].startswith(("CPU:", "GPU:")) and len(v["device_name"]) < 80
    assert all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        for k, x in v.items()
        if k not in LABELS
    )
    assert all(0 <= v[k] <= 1 for k in FRACTIONS)


def test_formats_against_ieee_754_and_ocp_fp8(v):
    # IEEE 754-2008 Table 3.5, binary16: emax 15, p 11 -> max (2 - 2^-10) 2^15 = 65504,
    # smallest normal 2^-14, smallest subnormal 2^-24, eps 2^-10
    assert v["fp16_max"] == 65504
    assert (v["fp16_normal"], v["fp16_sub"], v["fp16_eps"]) == (
        2.0**-14,
        2.0**-24,
        2.0**-10,
    )
    assert (v["fp16_normal_log2"], v["fp16_sub_log2"]) == (-14, -24)
    # binary32: emax 127, p 24; bfloat16: binary32's 8 exponent bits, p 8
    assert v["fp32_max"] == (2 - 2.0**-23) * 2.0**127
    assert v["bf16_max"] == (2 - 2.0**-7) * 2.0**127
    assert (v["bf16_exp_bits"], v["bf16_mant_bits"], v["bf16_sig_bits"]) == (8, 7, 8)
    assert v["bf16_eps"] == 2.0**-7
    # OCP 8-bit Floating Point Specification rev. 1.0, Table 1 (and Micikevicius
    # et al. 2022, Table 1): E4M3 max 448, E5M2 max 57344; 3 and 2 mantissa bits
    assert (v["e4m3_max"], v["e4m3_mant_bits"]) == (448, 3)
    assert (v["e5m2_max"], v["e5m2_mant_bits"]) == (57344, 2)
    # OCP FP8 spec, Table 1: E4M3 NaN is S.1111.111, one
    # mantissa pattern per sign, so two bit patterns (0x7F and 0xFF).
    assert v["e4m3_nan_patterns"] == 2


def test_the_numbers_between_one_and_two(v):
    # 1 + k 2^-m for k = 1 .. 2^m - 1, m the stored mantissa bits (23, 10, 7, 3, 2):
    # the counts, e4m3 7, e5m2 3, bf16 127, fp16 1023
    counts = {k: v[f"n12_{k}"] for k in ("fp32", "fp16", "bf16", "e4m3", "e5m2")}
    assert counts == {
        "fp32": 2**23 - 1,
        "fp16": 1023,
        "bf16": 127,
        "e4m3": 7,
        "e5m2": 3,
    }


def test_gradients_of_the_small_gpt(v):
    assert v["g_vocab"] == LLAMA2_VOCAB
    # by hand: b s V = 2 x 64 x 32,000 = 4,096,000 logits;
    # L b s h = 2 x 2 x 64 x 64 = 16,384
    assert v["g_bsv"] == v["g_n_logits"] == 4.096
    assert v["g_n_hidden"] == 16384 / 1e6
    assert v["g_1_over_bsv"] == pytest.approx(1 / 4_096_000, rel=1e-15)
    # fp16 flushes at or below half its smallest subnormal: 2^-25;
    # 1 / 2^-25 = 33.554432 M
    assert (v["g_flush"], v["g_flush_log2"], v["g_inv_flush"]) == (
        2.0**-25,
        -25,
        33.554432,
    )
    # "close to 1/(bsV)": near-uniform softmax at initialisation gives p ~ 1/V,
    # so each non-target logit's gradient is p / (b s); the page asserts
    # a factor of 2 either way
    assert 0.5 < v["g_logits_median"] * 4_096_000 < 2
    assert v["g_weights_ratio"] > 0 and v["g_weights_median"] > 0
    # the safe scale is a power of two, and scaling up never flushes more
    assert v["g_safe"] == 2.0 ** v["g_safe_log2"] and v["g_safe_log2"] == int(
        v["g_safe_log2"]
    )
    for k in ("logits", "activations", "weights"):
        assert v[f"g_{k}_zero_scaled"] <= v[f"g_{k}_zero"]
        assert v[f"g_{k}_zero"] + v[f"g_{k}_sub"] <= 1 + 1e-12  # disjoint zones
    # "the same values in bf16 lose": bf16's smallest subnormal is 2^-133, far
    # below any of them
    assert v["g_bf16_zero"] == 0
    # the live figure's fixed data: 3 groups of at most a few hundred bins and
    # 31 x 4 zone fractions, kilobytes (docs/live-figures.md caps it at 200 KB)
    payload = live_payloads("precision")["mlbook.precision.live:gradient_histogram"]
    assert 0 < len(json.dumps(payload["fixed"])) < 200e3
    # scaling up only lifts values out of the low zones: what is subnormal at the safe
    # scale was subnormal or flushed unscaled
    assert v["g_sub_scaled_max"] <= max(
        v[f"g_{k}_zero"] + v[f"g_{k}_sub"] for k in ("logits", "activations", "weights")
    )


def test_the_loss_scaler_matches_gradscaler(v):
    # torch.amp.GradScaler's documented defaults (the brief: init 65536, growth
    # factor 2, backoff 0.5, growth interval 2000)
    assert (v["gs_init"], v["gs_growth"], v["gs_backoff"], v["gs_interval"]) == (
        65536,
        2,
        0.5,
        2000,
    )
    assert (v["sc_steps"], v["sc_interval"], v["sc_spike"], v["sc_spikes"]) == (
        SCALER_STEPS,
        SCALER_INTERVAL,
        1000,
        4,
    )
    assert v["sc_same"] == v["sc_steps"]  # the same scale after every step
    assert (
        v["sc_spikes"] <= v["sc_skipped"] < v["sc_steps"]
    )  # every spike is skipped (the page asserts it)
    assert v["sc_skipped_frac"] * SCALER_STEPS == pytest.approx(
        v["sc_skipped"], rel=1e-12
    )
    # the scale starts at 2^16 and is only ever doubled or halved
    assert math.log2(v["sc_final"]) == int(math.log2(v["sc_final"]))


def test_bf16_master_weights(v):
    # bf16 has 8 significant bits: at 1 the gap is 2^-7, half of it 2^-8
    assert (v["bf16_half_gap"], v["bf16_half_gap_log2"]) == (2.0**-8, -8)
    assert (v["mw_lr"], v["mw_offset"], v["mw_steps"]) == (1e-4, 0.02, MASTER_STEPS)
    # Adam's step is at most lr (1 - beta1) / sqrt(1 - beta2) = 3.2e-4 (Kingma and
    # Ba 2015, Sec. 2.1), below 2^-8 = 3.9e-3: every pure-bf16 update near 1 rounds away
    assert v["mw_pure_lost"] == 1
    # unchanged weights: the error is the start's, up to rounding w0 to bf16 once (2^-8)
    assert abs(v["mw_pure_error"] - v["mw_initial_error"]) <= 2.0**-8
    assert (
        v["mw_master_error"] < v["mw_initial_error"]
    )  # the master copy learns (page asserts)
    assert (
        min(v["mw_loss0"], v["mw_fp32_loss"], v["mw_master_loss"], v["mw_pure_loss"])
        > 0
    )
    # ZeRO (Rajbhandari et al. 2020), Sec. 3.1: the fp32 master copy
    # is 4 bytes a parameter
    assert v["master_bytes"] == 4


def test_fp8_scaling(v):
    assert v["f8_grad_std"] == 1e-6
    # E5M2 flushes at or below 2^-17 = 7.6e-6, 7.6 sigmas: P(|Z| > 7.6) ~ 3e-14 per
    # value, so all 4096 values flush and the error is the whole tensor
    assert v["f8_E5M2_flushed"] == 1 and v["f8_E5M2_plain"] == 1
    # scaled: round to nearest moves each (normal) value by at most eps / 2
    assert 0 < v["f8_E4M3_scaled"] <= 0.125 / 2 and 0 < v["f8_E5M2_scaled"] <= 0.25 / 2
    assert v["f8_E4M3_scaled"] < v["f8_E5M2_scaled"]  # one more mantissa bit
    assert v["f8_jump_step"] == FP8_STEPS * 3 // 4 + 1
    assert v["f8_current_median"] <= 0.125 / 2
    # delayed: at a typical step the history's amax is within a few percent
    # of the tensor's, so at most a few values saturate, by a few percent;
    # rounding's eps / 2 bounds the rest
    assert v["f8_delayed_median"] <= 0.125 / 2
    # no scale: sigma 1e-3 to 2.4e-3 puts most values among E4M3's subnormals
    # (below 2^-6), where the relative error exceeds the scaled cast's
    assert v["f8_none_median"] > v["f8_current_median"]
    assert v["f8_after_err"] < v["f8_jump_err"]  # the page asserts it
    # At the jump the tensor's sigma grows 8 x 1.02. The history's amax is the largest
    # of 16 x 1024 draws whose sigmas run from 1.02^-15 to 1 times the old sigma:
    # between 3.11 and 5.56 old sigmas (the 1e-4 and 1 - 1e-4 quantiles of a 20,000-run
    # Monte Carlo of that maximum), so the threshold is 0.38 to 0.68 new sigmas
    # and P(|Z| > t) is 0.50 to 0.70; 0.05 either way is three binomial standard
    # deviations of 1024 values (0.016).
    assert 0.45 < v["f8_jump_sat"] < 0.75


def test_matmul_and_the_h100_datasheet(v):
    assert v["mm_n"] in (256, 4096)  # CPU or GPU test size
    assert v["mm_fp16_n"] in (128, v["mm_n"])  # the probe size, or full
    assert min(v["mm_fp32"], v["mm_bf16"], v["mm_fp16"]) > 0
    assert v["mm_bf16_over_fp32"] > 0 and v["mm_fp16_over_fp32"] > 0
    # the page states the kind of machine it measured, not a claim about CPUs
    from mlbook.common.machine import matmul_kind

    assert v["mm_kind"] == matmul_kind(v["mm_bf16_over_fp32"])
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5, dense: fp32 67 TFLOPS, bf16 989.4,
    # fp8 1,978.9; the table keeps three or four digits (989, 1979), so 1e-3 relative
    assert v["h100_bf16_over_fp32"] == pytest.approx(989.4 / 67, rel=1e-3)
    assert v["h100_fp8_over_bf16"] == pytest.approx(1978.9 / 989.4, rel=1e-3)


def test_model_state_bytes(v):
    # ZeRO, Sec. 3.1: mixed-precision Adam keeps 2 + 2 + 4 + 4 + 4 = 16 bytes
    # a parameter
    assert v["state_per_param"] == 16
    # by hand: 7e9 x 16 = 1.12e11 bytes / 2^30 = 104.31 GiB; 70B:
    # 1,043.08 GiB; 405B: 6,034.97 GiB
    for n, gib in ((7, 104.31), (70, 1043.08), (405, 6034.97)):
        assert v[f"state_{n}b"] == pytest.approx(
            gib, abs=0.005
        )  # the hand values' last digit


def test_precision_5_a_typical_weight_still_moves_coarsely(v):
    """precision-5's solution, by hand. A weight of 0.02 (GPT-2's and Llama's
    initialisation std) lies in [2^-6, 2^-5), where bf16's 8 significant bits
    space numbers 2^-13 = 1.2207e-4 apart; stored, it is 164 x 2^-13 =
    0.0200195. Adding 0.0003 gives 166.46 steps, rounded to 166: the weight
    moves 2 x 2^-13 = 2.4414e-4, 18.6 % short of the update. An update below
    half a step, 2^-14 = 6.1035e-5 (0.0003 / 4.92), is lost. The old solution
    said the weights that stall at this rate (from 2^-3 = 0.125 on) hold most
    weights of a trained network; at 0.02 they move, coarsely."""
    assert v["p5_gap"] == 2.0**-13
    assert v["p5_step_error"] == pytest.approx(1 - 2 * 2.0**-13 / 0.0003, rel=1e-12)
    assert v["p5_step_error"] == pytest.approx(0.1862, abs=1e-4)
    assert v["p5_lost"] == 2.0**-14
    assert v["p5_decay"] == pytest.approx(0.0003 * 2**14, rel=1e-12)  # 4.92


def test_the_scaler_figure_carries_gradscalers_measured_scale(v):
    # The page passes GradScaler's scale, where it changed, as fixed data; the default
    # spec (the figure opened from disk, and in the executed notebook) draws it as
    # circles on the simulation's corners: the two agree at every step (sc_same).
    payload = live_payloads("precision")["mlbook.precision.live:scaler_run"]
    measured = payload["fixed"]["measured"]
    assert measured["growth_interval"] == v["sc_interval"] == SCALER_INTERVAL
    assert measured["backoff_factor"] == v["gs_backoff"] == 0.5
    assert measured["device"].startswith(("CPU:", "GPU:"))
    steps, log2 = measured["step"], measured["log2"]
    assert steps[0] == 1 and steps[-1] == v["sc_steps"]
    assert 2.0 ** log2[-1] == v["sc_final"]
    # every skipped step halves the scale, so the scale changes at least that often
    assert len(steps) >= v["sc_skipped"]
    scale = next(
        lay
        for lay in payload["spec"]["layer"]
        if lay["mark"]["type"] == "line" and "interpolate" in lay["mark"]
    )
    circles = next(
        lay
        for lay in payload["spec"]["layer"]
        if lay["mark"]["type"] == "point" and "color" in lay["encoding"]
    )
    corners = [(r["step"], r["log2"]) for r in scale["data"]["values"]]
    assert [(r["step"], r["log2"]) for r in circles["data"]["values"]] == corners
    assert corners == list(zip(steps, log2, strict=True))


def test_block_scaling(v):
    # E4M3 keeps full precision from its smallest normal 2^-6 to 448:
    # 448 / 2^-6 = 28,672 (OCP FP8 spec, Table 1)
    assert v["bs_span"] == 28_672
    # the two outliers the prose reads: one below the span and one past it
    assert (v["bs_r_below"], v["bs_r_past"]) == (1e3, 1e5)
    assert v["bs_r_below"] < v["bs_span"] < v["bs_r_past"]
    assert (v["bs_rows"], v["bs_cols"]) == (64, 256)  # the test sizes
    # With one scale 448 / r, a bulk value x is below the smallest normal where
    # |x| < r 2^-6 / 448. At r = 1e3 that is |x| < 0.0349 for N(0, 1): a share of
    # erf(0.0349 / sqrt 2) = 0.0278; 0.01 is over 5 binomial standard deviations of
    # 16,383 values (0.0013). At r = 1e5 the bound is 3.49: all but 0.05 %.
    assert abs(v["bs_below_1e3"] - math.erf(1e3 / 64 / 448 / math.sqrt(2))) < 0.01
    assert v["bs_below_1e5"] > 1 - 2 * math.erfc(3.4 / math.sqrt(2))
    # a block's scale keeps its values normal: rounding to 3 mantissa bits errs
    # by at most 1/16 relative, for the tiles and MXFP8 alike
    for key in ("bs_tile_1e3", "bs_tile_1e5", "bs_mx_1e5"):
        assert 0 < v[key] < 1 / 16
    # past the span one scale loses far more than a tile's: a fifth of the bulk
    # below 2^-9 x 1e5 / 448 = 0.4 flushes, each an error of 1 (P(|Z| < 0.44) = 0.34,
    # half of which rounds to zero) and the rest is subnormal
    assert v["bs_flushed_1e5"] > 0.1 and v["bs_tensor_1e5"] > 2 * v["bs_tile_1e5"]
    assert v["bs_tensor_1e3"] < 1 / 16


def test_the_state_recipes_and_the_bf16_sum(v):
    # ZeRO (Rajbhandari et al. 2020), Sec. 3.1: 2 + 2 + 4 + 4 + 4 = 16 bytes; the
    # Ultra-Scale Playbook with fp32 gradients: + 4 = 20, reduced in fp32 (4 bytes)
    # rather than bf16 (2)
    assert (v["state_per_param"], v["state_fp32_grads"]) == (16, 20)
    assert (v["reduced_bf16"], v["reduced_fp32"]) == (2, 4)
    # 7e9 x 20 / 2^30 = 130.385 GiB; 70B 1,303.85; 405B 7,543.71
    for n, gib in ((7, 130.385), (70, 1303.852), (405, 7543.713)):
        assert v[f"state20_{n}b"] == pytest.approx(gib, abs=0.001)
    # bf16 at 1 has neighbours 2^-7 apart: 1 + 2^-9 rounds back to 1 every time;
    # fp32 adds all 256: 1 + 256 x 2^-9 = 1.5
    assert (v["acc_bf16"], v["acc_fp32"]) == (1.0, 1.5)


def test_the_units_and_the_libraries(v):
    """Errata item 12: an AVX-512-BF16 unit runs bf16 at 2 x fp32, not 2 to 4.5:
    VDPBF16PS does 4 FLOPs per fp32 lane a cycle (two products, two sums) where an
    FMA does 2 (Intel SDM). AMX: a 16 x 32 by 32 x 16 bf16 tile product, 16,384
    FLOPs, every 16 cycles per core, against 2 x 16 x 2 = 64 for two 512-bit FMA
    units: 16. What a machine measures beyond its units' ratio is the libraries'."""
    assert v["units_avx512_bf16"] == 4 / 2
    assert v["units_amx"] == (16 * 32 * 16 * 2 / 16) / (2 * 16 * 2)
    if math.isfinite(v["units_here"]):
        assert v["mm_library"] == pytest.approx(
            v["mm_bf16_over_fp32"] / v["units_here"], rel=1e-12
        )
    text = PAGE.read_text()
    assert "four and a half" not in text and "4.5 x" not in text
    assert "the libraries" in text


def test_the_diagnosis_solution(v):
    # precision-7, seed 3: the run's scale is 2^11 and the largest safe one 2^38
    # (tests/test_keys_precision.py works both out with torch's fp16 casts); 1,307
    # of the 20,000 values flush
    assert v["p7_gap"] == 38 - 11
    assert v["p7_lost_share"] == 1307 / 20_000


def test_the_kept_calibrations(v):
    """The Zen 5 and Xeon figures are the kept calibrations' (book/measured/),
    read here as plain JSON, not through mlbook.calibrate: the MAMF medians in
    FLOP/s, and the units' ratio from the nominal peaks. Zen 5 has two 512-bit
    FMA pipes (AMD, Software Optimization Guide for the AMD Zen5
    Microarchitecture): 2 x 16 x 2 = 64 fp32 FLOP/cycle, and VDPBF16PS's 4 FLOPs
    a lane on them, 128: a ratio of 2. The Xeon's AMX: 16 (as above)."""
    root = PAGE.parent.parent / "book" / "measured"

    def machine(name):
        return json.loads((root / name / "machine.json").read_text())

    def mamf(name, dtype):
        return machine(name)["measurements"][f"mamf_{dtype}"]["median"] / 1e9

    def units(name):
        peaks = machine(name)["device"]["peaks"]
        return peaks["bf16"]["flops_per_s"] / peaks["fp32"]["flops_per_s"]

    assert v["zen5_units"] == units("zen5-2core") == 2
    assert v["xeon_units"] == units("intel-amx-2core") == 16
    zen5, xeon = "zen5-2core", "intel-amx-2core"
    for machine_name, key in ((zen5, "zen5"), (xeon, "xeon")):
        assert v[f"{key}_fp32"] == pytest.approx(mamf(machine_name, "fp32"), rel=1e-12)
        assert v[f"{key}_fp32_avx2"] == pytest.approx(
            mamf(f"{machine_name}-cap-avx2", "fp32"), rel=1e-12
        )
    for key, name in (("zen5_ratio", zen5), ("xeon_ratio", xeon)):
        ratio = mamf(name, "bf16") / mamf(name, "fp32")
        assert v[key] == pytest.approx(ratio, rel=1e-12)
    # "its fp32 matmuls ran no faster with AVX-512 than without" (within 5 %),
    # and bf16 measured above the units' ratio there, below it on the Xeon
    assert abs(v["zen5_fp32"] / v["zen5_fp32_avx2"] - 1) < 0.05
    # "the Xeon's fp32 fell ... under the same cap"
    assert v["xeon_fp32_avx2"] < v["xeon_fp32"]
    assert v["zen5_ratio"] > v["zen5_units"] and v["xeon_ratio"] < v["xeon_units"]
