"""The "Your machine" page's claims, read from the test build's glued values
and held against values worked out here by hand, and against the kept
calibrations under book/measured/, read here as JSON."""

import json
from pathlib import Path

import pytest

from conftest import page_values

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "machine.md"
XEON = (
    "intel-amx-2core",
    "intel-amx-2core-cap-avx512_bf16",
    "intel-amx-2core-cap-avx2",
)
ZEN5 = ("zen5-2core", "zen5-2core-cap-avx512_bf16", "zen5-2core-cap-avx2")


@pytest.fixture(scope="module")
def v(book):
    return page_values("machine")


def kept(name: str) -> dict:
    return json.loads((ROOT / "book" / "measured" / name / "machine.json").read_text())


def median(name: str, what: str) -> float:
    return kept(name)["measurements"][what]["median"]


def prose() -> str:
    return " ".join(PAGE.read_text().split())


def test_the_reference_step_counts_its_flops_as_the_mfu_chapter_does(v):
    """At test sizes on a CPU the reference step is the capstone's final loop:
    L = 1, h = 768, a = 6, the vocabulary 1,000 padded to 1,024, s = 128.
    N_matmul = L (4 h^2 + 8 h^2) + V h = 7,077,888 + 786,432 = 7,864,320, and a
    token costs 6 N_matmul + 12 L h s = 47,185,920 + 1,179,648 FLOPs."""
    if not v["device_name"].startswith("CPU"):
        pytest.skip("the GPU's test sizes differ")
    assert v["flops_per_token"] == 48_365_568
    tokens = 2 * 128  # batch 2 of s = 128
    assert v["step_gflops"] == pytest.approx(48_365_568 * tokens / v["step_ms"] / 1e6)


def test_the_step_is_no_faster_than_its_ceiling_allows(v):
    """A step does not beat its own FLOPs at the best matmul: measured /
    predicted at least 1 less the step's spread (the page asserts it on the
    fastest repeat; the median is slower still)."""
    assert v["ratio_step_bound"] >= 1 - v["step_spread"]
    assert v["ratio_step_bound"] == pytest.approx(v["step_ms"] / v["step_bound_ms"])
    # an MFU against the peak is the share of the ceiling times the ceiling's
    # share of the peak
    assert v["step_mfu"] == pytest.approx(v["step_of_mamf"] * v["mamf_of_peak"])
    assert 0 < v["mamf_of_peak"] <= 1


def test_the_block_keeps_korthikantis_items_and_the_named_extras(v):
    """One GPT block, fp32, no dropout, attention written out, at s = 128,
    b = 2, h = 768, a = 6 (the CPU test sizes): Korthikanti's 34 sbh + 5 as^2 b
    at 2-byte values and 1-byte masks becomes, with no dropout masks or
    dropout outputs, 16 sbh + as^2 b values of 4 bytes."""
    if not v["device_name"].startswith("CPU"):
        pytest.skip("the GPU's test sizes differ")
    s, b, h, a = 128, 2, 768, 6
    assert v["act_predicted_bytes"] == 4 * (16 * s * b * h + a * s * s * b)
    extra = v["act_measured_bytes"] - v["act_predicted_bytes"]
    # the norms' per-token statistics (mean and rstd, fp32, 2 norms) and the
    # causal mask: bytes, not a share of the block
    assert 0 < extra < 0.01 * v["act_predicted_bytes"]
    assert v["ratio_activations"] == pytest.approx(
        v["act_measured_bytes"] / v["act_predicted_bytes"]
    )


def test_bekmans_h100_row(v):
    """Bekman, ML Engineering, MAMF table: H100 SXM BF16 794.5 of 989 TFLOP/s."""
    assert v["bekman_h100_of_peak"] == pytest.approx(794.5 / 989)


def test_the_stated_rows_are_there(v):
    for key in ("checkpoint", "allreduce", "tokenise", "loader", "accumulation"):
        assert v[f"ratio_{key}"] > 0  # stated, not held to a bar


def test_the_xeon_and_zen5_calibrations_are_kept_and_drawn(v):
    """The Intel Xeon with AMX, as built and under both caps, kept beside the
    Zen 5 under its own names; the page counts and draws all six."""
    for name in XEON + ZEN5:
        assert (ROOT / "book" / "measured" / name / "machine.json").is_file(), name
    assert v["kept_count"] == 6
    assert kept(XEON[0])["torch"]["isa_caps"]["ONEDNN_MAX_CPU_ISA"] is None
    assert kept(XEON[1])["torch"]["isa_caps"]["ONEDNN_MAX_CPU_ISA"] == (
        "AVX512_CORE_BF16"
    )
    assert kept(XEON[2])["torch"]["isa_caps"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    flags = kept(XEON[0])["device"]["isa_flags"]
    assert (
        "amx_bf16" in flags and "amx_bf16" not in kept(ZEN5[0])["device"]["isa_flags"]
    )


def test_the_sentences_about_the_hardware_are_what_the_files_show(v):
    """The same Xeon with and without its AMX tiles: its bf16 ceiling falls
    fifteenfold without them, below its fp32 one; its memory bandwidth does
    not move. The Zen 5 has no AMX, so the AVX512_BF16 cap takes nothing
    away; its memory moved with the load the files record, not the cap."""
    x_bf16 = [median(n, "mamf_bf16") / 1e9 for n in XEON[:2]]
    assert v["xeon_bf16"] == pytest.approx(x_bf16[0])
    assert v["xeon_bf16_no_amx"] == pytest.approx(x_bf16[1])
    assert x_bf16[0] / x_bf16[1] > 10  # AMX: more than tenfold, here 15
    assert v["xeon_fp32_no_amx"] == pytest.approx(median(XEON[1], "mamf_fp32") / 1e9)
    assert v["xeon_fp32_avx2"] == pytest.approx(median(XEON[2], "mamf_fp32") / 1e9)
    assert v["xeon_bf16_no_amx"] < v["xeon_fp32_no_amx"]  # "below its own fp32"
    assert "mamf_bf16" not in kept(XEON[2])["measurements"]  # "emulated"
    assert v["xeon_fp32_avx2"] < v["xeon_fp32_no_amx"]  # "fp32 falls"
    mem = [median(n, "memory_bandwidth") / 1e9 for n in XEON]
    assert (v["xeon_mem_lo"], v["xeon_mem_hi"]) == pytest.approx((min(mem), max(mem)))
    assert max(mem) / min(mem) < 1.02  # "stays": within 2 % across the three
    steps = [median(n, "reference_step") * 1e3 for n in XEON]
    got = (v["xeon_step_ms"], v["xeon_step_ms_no_amx"], v["xeon_step_ms_avx2"])
    assert got == pytest.approx(tuple(steps))
    assert steps[0] < steps[1] < steps[2]  # "the step follows the matmuls"
    z_bf16 = [median(n, "mamf_bf16") / 1e9 for n in ZEN5[:2]]
    assert (v["zen5_bf16"], v["zen5_bf16_capped"]) == pytest.approx(tuple(z_bf16))
    assert v["zen5_bf16_capped"] >= 0.95 * v["zen5_bf16"]  # "removes nothing"
    loads = [kept(n)["created"]["load_average_1min"] for n in ZEN5]
    assert (v["zen5_load_lo"], v["zen5_load_hi"]) == (min(loads), max(loads))
    assert min(loads) > 2  # busy: more than its two cores' worth
    z_mem = [median(n, "memory_bandwidth") / 1e9 for n in ZEN5]
    assert (v["zen5_mem_lo"], v["zen5_mem_hi"]) == pytest.approx(
        (min(z_mem), max(z_mem))
    )


def test_the_peak_is_named_by_its_basis_and_cores_are_counted(v):
    """On a CPU the peak is an upper bound, an assumed clock or unknown: the
    page glues the basis this run recorded and links the kinds of peak; and it
    counts cores as the cell does ("1 core", "2 cores")."""
    assert v["peak_basis"] in ("datasheet", "upper bound", "assumed clock", "unknown")
    text = prose()
    assert "{glue:text}`peak_basis`" in text and "<peak-kinds>" in text
    assert "On a CPU the peak is an upper bound" not in text
    n = int(v["cores_phrase"].split()[0])
    assert v["cores_phrase"] == f"{n} core" + ("s" if n != 1 else "")
    assert "{glue:text}`cores` cores" not in text


def test_the_reference_step_is_described_as_it_runs():
    """Every fix of the ladder but torch.compile, one thread on a CPU; the
    model FLOPs with N_matmul; the ceiling a measured bound with its two
    exceptions, not a physical one."""
    text = prose()
    assert "every fix of its ladder but `torch.compile`" in text
    assert "one thread" in text
    assert "every fix applied" not in text and "every thread torch has" not in text
    assert "$6N + 12Lhs$" not in text and "$6N_\\text{matmul} + 12Lhs$" in text
    assert "The bound is measured, not physical" in text
    assert "fused causal kernel skips" in text and "the sweep is finite" in text
    doc = (ROOT / "mlbook" / "calibrate" / "experiments.py").read_text()
    assert "on every thread torch has" not in doc and "torch.compile" in doc
    formulas = (ROOT / "mlbook" / "calibrate" / "formulas.py").read_text()
    assert "6N + 12Lhs" not in formulas and "a lower bound on every machine" not in (
        formulas
    )


def test_the_step_row_is_the_step_models_prediction(v):
    """The row named step is the capstone's step model: its ratio is the
    glued step over the glued prediction (stated, not held to a bar)."""
    assert v["ratio_step"] == pytest.approx(v["step_ms"] / v["step_model_ms"])
    assert v["ratio_step"] > 0


def test_the_kept_calibrations_without_the_model_are_counted_from_the_files(v):
    """A kept file of schema version 1 keeps no step model's inputs."""
    no_model = [
        n for n in XEON + ZEN5 if "step_model" not in kept(n).get("reference", {})
    ]
    assert v["kept_without_model"] == len(no_model)
    text = prose()
    assert "`kept_without_model:.0f` of the kept calibrations predate" in text
