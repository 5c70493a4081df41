"""Property tests for the shared torch-free modules: validation (valid in,
returned unchanged; invalid, a ValueError naming the argument), the
accelerator table and model-state bytes. (Activation bytes are the recompute
chapter's: mlbook.recompute.formulas and its tests.)"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import accelerators, memory, validate
from mlbook.common.transformer import LLAMA2_7B, TransformerConfig

PROPERTY_COVERS = {
    "mlbook.common.validate.positive",
    "mlbook.common.validate.non_negative",
    "mlbook.common.validate.positive_int",
    "mlbook.common.validate.non_negative_int",
    "mlbook.common.validate.is_real",
    "mlbook.common.validate.at_least",
    "mlbook.common.validate.fraction",
    "mlbook.common.validate.one_of",
    "mlbook.common.validate.divides",
    "mlbook.common.validate.boolean",
    "mlbook.common.validate.instance_of",
    "mlbook.common.accelerators.accelerator",
    "mlbook.common.accelerators.peak_flops_per_s",
    "mlbook.common.accelerators.match_cuda_name",
    "mlbook.common.accelerators.cpu_nominal_peak_flops_per_s",
    "mlbook.common.accelerators.cpu_peak_from_cpuinfo",
    "mlbook.common.memory.model_state_bytes",
}

FEW = examples(50)

finite = st.floats(allow_nan=False, allow_infinity=False)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
not_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, True, False, "1", None, [1], 1j]
)


# --- validate -----------------------------------------------------------------------


@FEW
@given(
    names,
    st.one_of(
        st.floats(min_value=1e-300, allow_nan=False, allow_infinity=False),
        st.integers(1, 10**18),
    ),
)
def test_positive_returns_what_it_accepts(name, value):
    assert validate.positive(name, value) is value
    assert validate.non_negative(name, value) is value
    assert validate.at_least(name, value, value) is value


@FEW
@given(
    names,
    st.one_of(
        not_numbers, st.floats(max_value=0, allow_nan=False), st.integers(max_value=0)
    ),
)
def test_positive_names_what_it_refuses(name, bad):
    with pytest.raises(
        ValueError, match=f"^{name} must be a finite number above 0, got"
    ):
        validate.positive(name, bad)


@FEW
@given(
    names,
    st.one_of(
        not_numbers,
        st.floats(max_value=-1e-300, allow_nan=False),
        st.integers(max_value=-1),
    ),
)
def test_non_negative_names_what_it_refuses(name, bad):
    assert validate.non_negative(name, 0) == 0
    with pytest.raises(
        ValueError, match=f"^{name} must be a finite number at or above 0"
    ):
        validate.non_negative(name, bad)


@FEW
@given(names, finite, finite)
def test_at_least_splits_at_its_minimum(name, value, minimum):
    if value >= minimum:
        assert validate.at_least(name, value, minimum) is value
    else:
        with pytest.raises(
            ValueError, match=f"^{name} must be a finite number at or above"
        ):
            validate.at_least(name, value, minimum)
    with pytest.raises(ValueError, match=f"^{name} "):
        validate.at_least(name, math.nan, minimum)


@FEW
@given(
    st.one_of(
        st.floats(), st.integers(), st.fractions(), st.sampled_from([math.nan, -0.0])
    )
)
def test_a_real_number_is_real_and_a_flag_is_not(value):
    import numpy as np

    assert validate.is_real(value) and validate.is_real(np.float32(1.5))
    assert validate.is_real(np.int64(3))
    for flag in (True, False, np.bool_(True)):
        assert not validate.is_real(flag)
    for other in (str(value), complex(value, 1), None, [value]):
        assert not validate.is_real(other)


@FEW
@given(
    names,
    st.integers(0, 10**18),
    st.one_of(not_numbers, st.integers(max_value=-1), st.floats(0.5, 1e6)),
)
def test_non_negative_int_splits_at_zero(name, value, bad):
    assert validate.non_negative_int(name, value) == value
    assert validate.non_negative_int(name, 0) == 0
    with pytest.raises(
        ValueError, match=f"^{name} must be an integer at or above 0, got"
    ):
        validate.non_negative_int(name, bad)


@FEW
@given(names, st.integers(1, 10**18))
def test_positive_int_returns_what_it_accepts(name, value):
    assert validate.positive_int(name, value) == value


@FEW
@given(names, st.one_of(not_numbers, st.integers(max_value=0), st.floats(0.5, 1e6)))
def test_positive_int_names_what_it_refuses(name, bad):
    with pytest.raises(ValueError, match=f"^{name} must be an integer above 0, got"):
        validate.positive_int(name, bad)


@FEW
@given(names, st.floats(0, 1), st.booleans(), st.booleans())
def test_fraction_keeps_its_ends_as_asked(name, value, allow_zero, allow_one):
    inside = (value > 0 or (allow_zero and value == 0)) and (
        value < 1 or (allow_one and value == 1)
    )
    if inside:
        assert (
            validate.fraction(name, value, allow_zero=allow_zero, allow_one=allow_one)
            is value
        )
    else:
        with pytest.raises(ValueError, match=f"^{name} must lie in"):
            validate.fraction(name, value, allow_zero=allow_zero, allow_one=allow_one)


@FEW
@given(names, st.one_of(not_numbers, st.floats(1.0000001, 1e9), st.floats(-1e9, -1e-9)))
def test_fraction_names_what_it_refuses(name, bad):
    with pytest.raises(ValueError, match=f"^{name} must "):
        validate.fraction(name, bad)


@FEW
@given(
    names, st.lists(st.text(max_size=5), min_size=1, max_size=5, unique=True), st.data()
)
def test_one_of_accepts_only_its_choices(name, allowed, data):
    choice = data.draw(st.sampled_from(allowed))
    assert validate.one_of(name, choice, tuple(allowed)) is choice
    other = data.draw(st.text(max_size=6).filter(lambda t: t not in allowed))
    with pytest.raises(ValueError, match=f"^{name} must be one of"):
        validate.one_of(name, other, tuple(allowed))


@FEW
@given(st.integers(1, 1000), st.integers(1, 1000))
def test_divides_accepts_exact_divisors_only(divisor, quotient):
    assert validate.divides("k", divisor, "batch", divisor * quotient) == divisor
    if divisor > 1:
        with pytest.raises(
            ValueError, match=f"^k={divisor} must divide batch={divisor * quotient + 1}"
        ):
            validate.divides("k", divisor, "batch", divisor * quotient + 1)


@FEW
@given(st.one_of(not_numbers, st.integers(max_value=0), st.floats(0.5, 100)))
def test_divides_names_a_bad_divisor_or_dividend(bad):
    with pytest.raises(ValueError, match="^k must be an integer above 0"):
        validate.divides("k", bad, "batch", 8)
    with pytest.raises(ValueError, match="^batch must be an integer above 0"):
        validate.divides("k", 2, "batch", bad)


@FEW
@given(
    names,
    st.booleans(),
    st.one_of(st.integers(), st.text(max_size=3), st.none(), st.floats()),
)
def test_boolean_accepts_only_true_and_false(name, flag, bad):
    assert validate.boolean(name, flag) is flag
    with pytest.raises(ValueError, match=f"^{name} must be True or False"):
        validate.boolean(name, bad)


@FEW
@given(
    names,
    st.one_of(
        st.integers(), st.text(max_size=3), st.none(), st.floats(allow_nan=False)
    ),
)
def test_instance_of_checks_the_type(name, bad):
    assert validate.instance_of(name, LLAMA2_7B, TransformerConfig) is LLAMA2_7B
    with pytest.raises(ValueError, match=f"^{name} must be a TransformerConfig"):
        validate.instance_of(name, bad, TransformerConfig)


# --- the accelerator table ------------------------------------------------------------

known_devices = st.sampled_from(
    list(accelerators.ACCELERATORS) + list(accelerators.ALIASES)
)


@FEW
@given(known_devices)
def test_every_listed_device_has_finite_peaks_falling_with_precision(name):
    row = accelerators.accelerator(name)
    peaks = row.peak_flops_per_s
    assert all(math.isfinite(p) and p > 0 for p in peaks.values())
    # narrower numbers, more FLOPs: fp8 >= the 16-bit types >= tf32 >= fp32
    order = ["fp32", "tf32", "bf16", "fp8"]
    present = [peaks[d] for d in order if d in peaks]
    assert present == sorted(present)
    for dtype in peaks:
        assert accelerators.peak_flops_per_s(name, dtype) == peaks[dtype]


@FEW
@given(
    st.text(max_size=12).filter(
        lambda t: t not in accelerators.ACCELERATORS and t not in accelerators.ALIASES
    )
)
def test_unknown_device_names_are_refused_by_name(name):
    with pytest.raises(ValueError, match="unknown device"):
        accelerators.accelerator(name)
    with pytest.raises(ValueError, match="unknown device"):
        accelerators.peak_flops_per_s(name)


@FEW
@given(
    known_devices, st.text(max_size=6).filter(lambda t: t not in accelerators.DTYPES)
)
def test_unknown_dtypes_are_refused_by_name(name, dtype):
    with pytest.raises(ValueError, match="^dtype must be one of"):
        accelerators.peak_flops_per_s(name, dtype)


@FEW
@given(
    st.one_of(st.integers(), st.none(), st.floats(), st.lists(st.text(), max_size=2))
)
def test_device_names_must_be_strings(bad):
    with pytest.raises(ValueError, match="device must be a name"):
        accelerators.accelerator(bad)
    with pytest.raises(ValueError, match="cuda_name must be a string"):
        accelerators.match_cuda_name(bad)


def _words(text):
    """The whole upper-case words of a name, as match_cuda_name reads them."""
    upper = text.upper()
    return set(
        "".join(c if c.isascii() and c.isalnum() else " " for c in upper).split()
    )


# Each chip as torch spells it inside a device name, and its table row
CUDA_CHIPS = [
    ("H200", "H200 SXM"),
    ("H100", "H100 SXM"),
    ("H100 NVL", "H100 NVL"),
    ("H200 NVL", "H200 NVL"),
    ("A100", "A100 SXM"),
    ("V100", "V100 SXM2"),
    ("B200", "B200 SXM"),
    ("L40S", "L40S PCIe"),
    ("L4", "L4 PCIe"),
    ("A10G", "A10G PCIe"),
    ("T4", "T4 PCIe"),
    ("RTX 3090", "GeForce RTX 3090"),
    ("RTX 4090", "GeForce RTX 4090"),
    ("RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("RTX A6000", "RTX A6000"),
]
# Words that name a chip, or that after a chip name another card ("3090 Ti")
CHIP_WORDS = set().union(*(_words(chip) for chip, _ in CUDA_CHIPS)) | {
    "PCIE",
    "NVL",
    "TI",
    "SUPER",
    "D",
    "LAPTOP",
}
no_chip = st.text(max_size=20).filter(lambda t: not _words(t) & CHIP_WORDS)


@FEW
@given(no_chip, no_chip, st.sampled_from(CUDA_CHIPS), st.sampled_from("GX0"))
def test_cuda_names_match_the_chip_they_contain(prefix, suffix, chip_row, glue):
    chip, row = chip_row
    match = accelerators.match_cuda_name
    assert match(f"{prefix} {chip} {suffix}").name == row
    # "PCIe" after the chip moves only a plain H100 to another row
    assert match(f"{prefix} {chip.lower()} PCIe {suffix}").name == (
        "H100 PCIe" if chip == "H100" else row
    )
    # glued into a longer word the chip is another one ("GH200", "XA100", "0T4")
    assert match(f"{prefix} {glue}{chip} {suffix}") is None
    assert match(f"{prefix} {suffix}") is None


@FEW
@given(st.sampled_from(["fp32", "bf16"]))
def test_cpu_peak_is_finite_and_bf16_is_no_slower(dtype):
    peak, how = accelerators.cpu_nominal_peak_flops_per_s(dtype)
    if peak is None:  # a CPU whose /proc/cpuinfo does not say enough
        pytest.skip(how)
    assert math.isfinite(peak) and peak > 0 and "GHz" in how
    assert (
        accelerators.cpu_nominal_peak_flops_per_s("bf16")[0]
        >= accelerators.cpu_nominal_peak_flops_per_s("fp32")[0]
    )


def _cpuinfo_text(vendor, family, model, name, flags):
    return (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
        f"model\t\t: {model}\nmodel name\t: {name}\nflags\t\t: {flags}\n"
    )


X86_FLAGS = ["avx", "fma", "avx2", "avx512f", "avx512_bf16", "amx_bf16"]


@FEW
@given(
    st.sampled_from(["AuthenticAMD", "GenuineIntel"]),
    st.sampled_from([6, 23, 25, 26]),
    st.sampled_from([1, 17, 49, 85, 143, 160, 207]),
    st.sampled_from(["AMD EPYC", "AMD EPYC 7763 64-Core Processor", "Intel Xeon"]),
    st.lists(st.sampled_from(X86_FLAGS), min_size=1, unique=True),
    st.integers(1, 512),
)
def test_cpu_peak_scales_with_cores_and_is_bounded(
    vendor, family, model, name, flags, cores
):
    if "avx512f" in flags and "avx2" not in flags:
        flags = [*flags, "avx2"]  # every AVX-512 x86 core has AVX2 too
    text = _cpuinfo_text(vendor, family, model, name, " ".join(flags))
    fp32, how = accelerators.cpu_peak_from_cpuinfo(text, cores, "fp32")
    if fp32 is None:  # no fp32 vector unit the table knows: an unknown peak
        assert "none of the vector units" in how
        assert not {"avx2", "avx512f"} & set(flags)
        return
    one, _ = accelerators.cpu_peak_from_cpuinfo(text, 1, "fp32")
    bf16, _ = accelerators.cpu_peak_from_cpuinfo(text, cores, "bf16")
    assert fp32 == pytest.approx(cores * one, rel=1e-12)
    assert fp32 <= bf16  # bf16 never slower than fp32 on the same units
    # no x86 core is rated above 6.2 GHz, nor does more than AMX's 1,024 FLOP/cycle
    assert bf16 <= cores * accelerators.X86_MAX_BOOST_GHZ * 1e9 * 1024
    assert "GHz" in how
    # a design the table knows is held to its fastest cited clock, an upper
    # bound; one it does not know has its units assumed: an estimate, no bound
    basis = accelerators.cpu_peak_from_cpuinfo(text, cores, "fp32").basis
    assert ("an upper bound" in how) == (basis == "upper bound")
    assert ("an estimate, not a bound" in how) == (basis == "assumed clock")


@FEW
@given(st.text(max_size=6).filter(lambda t: t not in ("fp32", "bf16")))
def test_cpu_peak_names_a_bad_dtype(dtype):
    with pytest.raises(ValueError, match="^dtype must be one of"):
        accelerators.cpu_nominal_peak_flops_per_s(dtype)


# --- model state ----------------------------------------------------------------------


@FEW
@given(st.floats(1, 1e13))
def test_model_state_is_sixteen_bytes_a_parameter(n):
    # ZeRO (Rajbhandari et al. 2020, Sec. 3.1): 2 + 2 + 4 + 4 + 4 bytes of
    # mixed-precision Adam state
    total = memory.model_state_bytes(n)
    assert total == pytest.approx(16 * n, rel=1e-12)
    assert memory.model_state_bytes(2 * n) > total
    parts = memory.model_state_bytes(n, breakdown=True)
    assert (
        sum(parts.values()) == pytest.approx(total, rel=1e-12)
        and min(parts.values()) > 0
    )


@FEW
@given(
    st.one_of(not_numbers, st.floats(max_value=0, allow_nan=False)),
    st.one_of(st.integers(), st.none()),
)
def test_model_state_names_its_bad_argument(bad, bad_flag):
    with pytest.raises(ValueError, match="^n_params must be"):
        memory.model_state_bytes(bad)
    with pytest.raises(ValueError, match="^breakdown must be True or False"):
        memory.model_state_bytes(7e9, breakdown=bad_flag)
