"""Mixed precision by the numbers: each format's limits from its bit layout,
rounding to a format, the dynamic loss scaler, per-tensor fp8 scales, and
where a histogram of gradient magnitudes falls against a format's range.

Imports neither torch nor matplotlib, nor numpy at import: the scalar paths
(a format's limits, rounding one number, the loss scaler and its fp16 and
fp32 roundings, fp8 scales) use the standard library alone, so a live figure
runs them in the reader's browser; ``struct``'s formats 'e' and 'f' round to
fp16 and fp32 exactly as numpy's casts do (round to nearest, ties to even).
What takes or makes arrays (rounding an array, the synthetic gradient run,
the histogram) imports numpy when it is called.
``mlbook.precision.experiments`` checks every number here against torch
itself: the limits against ``torch.finfo``, the rounding against real casts,
the loss scaler against ``torch.amp.GradScaler``.

A binary floating-point format with e exponent bits and m stored mantissa
bits has bias 2^(e-1) - 1. Normal numbers are 1.f x 2^E with E from 1 - bias
up to emax; subnormals are 0.f x 2^(1 - bias). IEEE 754 keeps the all-ones
exponent for inf and NaN, so emax = 2^e - 2 - bias and the largest mantissa
is 2 - 2^-m. OCP FP8 E4M3 has no inf: its all-ones exponent holds normal
numbers and only the all-ones mantissa there is NaN, so emax = 2^e - 1 - bias
and the largest mantissa is 2 - 2^(1-m) (OCP 8-bit Floating Point
Specification, rev. 1.0, 2023, Table 1; Micikevicius et al. 2022,
arXiv:2209.05433, Table 1).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING

from mlbook.common import validate

if TYPE_CHECKING:
    import numpy as np

# name -> (exponent bits, stored mantissa bits). IEEE 754-2008 binary32 and
# binary16; bfloat16 (fp32's exponent, 7 mantissa bits); OCP FP8 E4M3 and E5M2.
LAYOUTS = {
    "fp32": (8, 23),
    "fp16": (5, 10),
    "bf16": (8, 7),
    "fp8 E4M3": (4, 3),
    "fp8 E5M2": (5, 2),
}
FORMATS = tuple(LAYOUTS)
FP8_FORMATS = ("fp8 E4M3", "fp8 E5M2")
NO_INF = ("fp8 E4M3",)  # the top exponent holds numbers; out-of-range values saturate


# --- the formats ---------------------------------------------------------------------


@dataclass(frozen=True)
class FloatFormat:
    """One floating-point format's limits."""

    name: str
    bits: int  # sign + exponent + mantissa
    exponent_bits: int
    mantissa_bits: int  # stored fraction bits; precision is mantissa_bits + 1
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float  # gap between 1 and the next representable number
    has_inf: bool


def float_format(name: str) -> FloatFormat:
    """The limits of format ``name`` (one of FORMATS), from its bit layout."""
    validate.one_of("name", name, FORMATS)
    e, m = LAYOUTS[name]
    bias = 2 ** (e - 1) - 1
    if name in NO_INF:
        emax, top_mantissa = 2**e - 1 - bias, 2 - 2.0 ** (1 - m)
    else:
        emax, top_mantissa = 2**e - 2 - bias, 2 - 2.0**-m
    return FloatFormat(
        name=name,
        bits=1 + e + m,
        exponent_bits=e,
        mantissa_bits=m,
        max=math.ldexp(top_mantissa, emax),
        smallest_normal=math.ldexp(1.0, 1 - bias),
        smallest_subnormal=math.ldexp(1.0, 1 - bias - m),
        eps=math.ldexp(1.0, -m),
        has_inf=name not in NO_INF,
    )


def format_table() -> list[FloatFormat]:
    """fp32, fp16, bf16, fp8 E4M3 and fp8 E5M2, in that order."""
    return [float_format(name) for name in FORMATS]


def numbers_between_one_and_two(name: str) -> int:
    """How many numbers of format ``name`` lie strictly between 1 and 2:
    2^m - 1 for m stored mantissa bits (1 + k 2^-m for k = 1 .. 2^m - 1).
    Every binade [2^E, 2^(E+1)) of normal numbers holds as many, so this is
    the format's resolution in one number."""
    return 2 ** float_format(name).mantissa_bits - 1


def values_between_one_and_two(name: str) -> list[float]:
    """The numbers of format ``name`` strictly between 1 and 2, in order:
    1 + k x eps for k = 1 .. 2^m - 1 (eps = 2^-m)."""
    eps = float_format(name).eps
    return [1 + k * eps for k in range(1, numbers_between_one_and_two(name) + 1)]


def flush_threshold(name: str) -> float:
    """Magnitudes at or below this round to zero in format ``name``: half the
    smallest subnormal (round to nearest, ties to even: exactly half goes to
    the even neighbour, zero)."""
    return float_format(name).smallest_subnormal / 2


def overflow_threshold(name: str) -> float:
    """The smallest magnitude that rounds to inf in format ``name``: the max
    plus half the gap just below it (2^(emax - m)), where the tie goes to the
    even neighbour, which is inf. E4M3 has no inf and raises."""
    fmt = float_format(name)
    if not fmt.has_inf:
        raise ValueError(f"name={name!r} has no inf: values past its max saturate")
    gap = fmt.max * fmt.eps / (2 - fmt.eps)  # 2^emax * 2^-m
    return fmt.max + gap / 2


def _finite_array(name: str, values) -> np.ndarray:
    import numpy as np

    try:
        raw = np.asarray(values)
    except (TypeError, ValueError):
        raw = np.asarray([None])
    if raw.dtype.kind not in "iuf":  # bools, strings and objects are not numbers
        raise ValueError(f"{name} must be numbers, got {values!r}")
    if raw.size == 0:
        raise ValueError(f"{name} must hold at least one number, got {values!r}")
    x = raw.astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite; it holds inf or NaN")
    return x


def round_to_format(values, name: str) -> float | np.ndarray:
    """``values`` rounded to format ``name`` (round to nearest, ties to even),
    as float64. Past the range: inf for formats that have it, the max for
    E4M3 (saturation; the OCP spec leaves the mode to the implementation, and
    torch's cast and the fp8 recipes saturate).

    Each value is |x| = r x 2^E with the quantum 2^(E - m) of its binade,
    never below the subnormal quantum 2^(1 - bias - m); dividing by a power
    of two is exact in float64, so np.rint (ties to even) does the rounding.
    A single number comes back as a float, rounded with the standard
    library the same way (``round`` ties to even too).
    """
    fmt = float_format(name)
    bias = 2 ** (fmt.exponent_bits - 1) - 1
    if isinstance(values, Real):
        if isinstance(values, bool):
            raise ValueError(f"values must be numbers, got {values!r}")
        x = float(values)
        if not math.isfinite(x):
            raise ValueError("values must be finite; it holds inf or NaN")
        _, exp = math.frexp(abs(x))  # |x| = f 2^exp, f in [0.5, 1)
        quantum = math.ldexp(1.0, max(exp - 1, 1 - bias) - fmt.mantissa_bits)
        r = round(abs(x) / quantum) * quantum
        if r > fmt.max:
            r = math.inf if fmt.has_inf else fmt.max
        return math.copysign(r, x)
    import numpy as np

    x = _finite_array("values", values)
    a = np.abs(x)
    _, exp = np.frexp(a)  # a = f 2^exp, f in [0.5, 1)
    quantum = np.ldexp(1.0, np.maximum(exp - 1, 1 - bias) - fmt.mantissa_bits)
    r = np.rint(a / quantum) * quantum
    r = np.where(r > fmt.max, np.inf if fmt.has_inf else fmt.max, r)
    return np.copysign(r, x)


def bf16_absorbs(weight: float, update: float) -> bool:
    """Does a bf16 weight change when a bf16 update is added and the sum is
    stored in bf16? False means the update rounded away."""
    validate.at_least("weight", weight, -math.inf)
    validate.at_least("update", update, -math.inf)
    w = round_to_format(weight, "bf16")
    return bool(round_to_format(w + round_to_format(update, "bf16"), "bf16") != w)


def absorb_limit(weight: float, name: str = "bf16") -> float:
    """Half the gap between the numbers of format ``name`` around ``weight``:
    2^(E - m - 1) for 2^E <= |weight| < 2^(E+1) and m mantissa bits (the
    subnormal quantum's half below the normals). An update smaller than this,
    added to the weight and the sum stored in the format, rounds away; one of
    exactly this size rounds away too when the weight's last mantissa bit is
    even (the tie goes to the even neighbour, the weight itself)."""
    fmt = float_format(name)
    if not validate.is_real(weight):
        raise ValueError(f"weight must be a number, got {weight!r}")
    if not math.isfinite(weight) or weight == 0:
        raise ValueError(f"weight must be finite and non-zero, got {weight!r}")
    bias = 2 ** (fmt.exponent_bits - 1) - 1
    binade = math.frexp(abs(float(weight)))[1] - 1  # E: 2^E <= |w| < 2^(E+1)
    return math.ldexp(1.0, max(binade, 1 - bias) - fmt.mantissa_bits - 1)


def stall_log2(update: float, name: str = "bf16") -> int:
    """The stagnation bound: the smallest E from which on every weight with
    |w| >= 2^E, stored in format ``name``, ignores an update of ``update``.

    The update, rounded to the format, must lie below half the gap of every
    weight of the binade, 2^(E - m - 1) (a weight whose last mantissa bit is
    odd takes an update of exactly half a gap upwards), so E is the smallest
    integer above log2|u| + m + 1: floor(log2|u|) + m + 2. Gaps grow with E,
    so every larger weight ignores the update too."""
    fmt = float_format(name)
    if not validate.is_real(update):
        raise ValueError(f"update must be a number, got {update!r}")
    if not math.isfinite(update) or update == 0:
        raise ValueError(f"update must be finite and non-zero, got {update!r}")
    stored = abs(round_to_format(float(update), name))
    if stored == 0:
        raise ValueError(f"update={update!r} rounds to zero in {name}")
    if not math.isfinite(stored):
        raise ValueError(f"update={update!r} overflows {name}")
    floor_log2 = math.frexp(stored)[1] - 1  # exact, where math.log2 may round
    return floor_log2 + fmt.mantissa_bits + 2


# --- Gaussian tensors: the share a threshold cuts off ------------------------------


def _check_threshold_sigma(threshold, sigma):
    for label, value in (("threshold", threshold), ("sigma", sigma)):
        validate.positive(label, value)
        if not math.isfinite(value):
            raise ValueError(f"{label} must be finite, got {value!r}")


def gaussian_share_within(threshold: float, sigma: float) -> float:
    """The share of a Gaussian tensor's values (mean 0, standard deviation
    ``sigma``) with |x| <= ``threshold``: erf(t / (sigma sqrt 2)). With the
    format's flush threshold divided by the scale, what a cast flushes."""
    _check_threshold_sigma(threshold, sigma)
    return math.erf(threshold / (sigma * math.sqrt(2)))


def gaussian_share_beyond(threshold: float, sigma: float) -> float:
    """The share with |x| > ``threshold``: erfc(t / (sigma sqrt 2)), exact far
    into the tail where 1 - erf loses every digit. With the format's max
    divided by the scale, what a cast saturates (or overflows)."""
    _check_threshold_sigma(threshold, sigma)
    return math.erfc(threshold / (sigma * math.sqrt(2)))


# --- dynamic loss scaling -------------------------------------------------------------


def _round_struct(x: float, code: str) -> float:
    """``x`` rounded to the format of struct code ``code`` ('f' fp32, 'e'
    fp16): to nearest, ties to even, inf past the max, as numpy casts."""
    try:
        return struct.unpack(code, struct.pack(code, x))[0]
    except OverflowError:  # finite, but it rounds past the format's max
        return math.copysign(math.inf, x)


def _f32(x: float) -> float:
    """Round to fp32 the way a float32 tensor stores a double (inf past the max)."""
    return _round_struct(float(x), "f")


def _f16(x: float) -> float:
    """Round to fp16 (inf past the max), as np.float16 does."""
    return _round_struct(float(x), "e")


def _is_bool(value) -> bool:
    """A bool, or numpy's bool (which a tensor's ``.item()`` comparisons give)."""
    kind = type(value)
    return isinstance(value, bool) or (
        kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    )


def _check_flag(found_inf) -> None:
    """A ValueError unless ``found_inf`` is a bool (numpy's too)."""
    if not _is_bool(found_inf):
        raise ValueError(f"found_inf must be a bool, got {found_inf!r}")


def _check_scaler(init_scale, growth_factor, backoff_factor, growth_interval):
    """A ValueError naming the first of a loss scaler's settings that breaks
    its rule (a positive scale, a growth above 1, a back-off in (0, 1), a
    whole interval of at least one step)."""
    validate.positive("init_scale", init_scale)
    if (
        not validate.is_real(growth_factor)
        or not math.isfinite(growth_factor)
        or growth_factor <= 1
    ):
        raise ValueError(
            f"growth_factor must be a finite number above 1, got {growth_factor!r}"
        )
    validate.fraction("backoff_factor", backoff_factor, allow_one=False)
    validate.positive_int("growth_interval", growth_interval)


class DynamicLossScaler:
    """Dynamic loss scaling, written out to show the mechanism.

    Multiply the loss by ``scale`` before backward; every gradient is then
    ``scale`` times too big, which lifts small values out of fp16's underflow
    zone. Unscale the gradients before clipping and the optimizer step. If any
    is inf or NaN the step is skipped and the scale shrinks by
    ``backoff_factor``; after ``growth_interval`` good steps in a row it grows
    by ``growth_factor``. The defaults are torch.amp.GradScaler's, and so are
    the rules, step for step: the scale is held in fp32 (as GradScaler holds it
    in a float32 tensor) and a growth that would reach inf is not taken.

    It imports no torch: ``unscale_`` works on any parameters whose ``.grad``
    has ``mul_`` and ``isfinite`` (torch tensors), and ``update`` alone runs
    the tensor-free simulation.
    """

    def __init__(
        self,
        init_scale: float = 65536.0,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        _check_scaler(init_scale, growth_factor, backoff_factor, growth_interval)
        self.scale = _f32(init_scale)  # held in fp32, as GradScaler holds it
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.good_steps = 0  # finite steps since the last change of scale

    def scale_loss(self, loss):
        """loss x scale: call backward on this."""
        return loss * self.scale

    def unscale_(self, params) -> bool:
        """Divide every gradient by the scale in place; True if any is inf/NaN."""
        inv = 1.0 / self.scale
        found_inf = False
        for p in params:
            if p.grad is None:
                continue
            p.grad.mul_(inv)
            found_inf = found_inf or not bool(p.grad.isfinite().all())
        return found_inf

    def update(self, found_inf: bool) -> bool:
        """Adjust the scale after a step; returns True if the step must be skipped."""
        _check_flag(found_inf)
        if found_inf:
            self.scale = _f32(self.scale * self.backoff_factor)
            self.good_steps = 0
            return True
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            grown = _f32(self.scale * self.growth_factor)
            if math.isfinite(grown):
                self.scale = grown
            self.good_steps = 0
        return False

    def step(self, optimizer, params) -> bool:
        """Unscale, step the optimizer unless a gradient is inf/NaN, update the
        scale. Returns True if the optimizer stepped."""
        params = list(params)
        skipped = self.update(self.unscale_(params))
        if not skipped:
            optimizer.step()
        return not skipped


class HysteresisLossScaler(DynamicLossScaler):
    """DynamicLossScaler with a hysteresis, as Megatron-LM's DynamicGradScaler
    has one: an overflow always skips its step, but the scale backs off only
    at the ``hysteresis``-th overflow since the last growth (or the start),
    and at every overflow after it until the next growth refills the count.
    A good step does not refill it. With ``hysteresis=1`` every overflow
    backs off: GradScaler's rule, step for step."""

    def __init__(
        self,
        init_scale: float = 65536.0,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        hysteresis: int = 2,
    ):
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval)
        self.hysteresis = validate.positive_int("hysteresis", hysteresis)
        self.overflows_left = self.hysteresis  # before the next back-off

    def update(self, found_inf: bool) -> bool:
        if not _is_bool(found_inf):
            raise ValueError(f"found_inf must be a bool, got {found_inf!r}")
        if found_inf:
            self.good_steps = 0
            self.overflows_left -= 1
            if self.overflows_left <= 0:
                self.scale = _f32(self.scale * self.backoff_factor)
            return True
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            grown = _f32(self.scale * self.growth_factor)
            if math.isfinite(grown):
                self.scale = grown
            self.good_steps = 0
            self.overflows_left = self.hysteresis
        return False


def _flags(found_inf) -> list:
    if isinstance(found_inf, (str, bytes)):
        raise ValueError(f"found_inf must be a sequence of bools, got {found_inf!r}")
    try:
        flags = list(found_inf)
    except TypeError:
        raise ValueError(
            f"found_inf must be a sequence of bools, got {found_inf!r}"
        ) from None
    for f in flags:
        if not _is_bool(f):
            raise ValueError(f"found_inf entries must be bools, got {f!r}")
    return flags


def scales_with_hysteresis(
    found_inf,
    growth_interval: int,
    hysteresis: int,
    init_scale: float = 65536.0,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
) -> list[float]:
    """The loss scale after each step of a run whose steps overflow where
    ``found_inf`` is True, under HysteresisLossScaler (GradScaler's factors
    by default)."""
    flags = _flags(found_inf)
    scaler = HysteresisLossScaler(
        init_scale, growth_factor, backoff_factor, growth_interval, hysteresis
    )
    out = []
    for f in flags:
        scaler.update(bool(f))
        out.append(scaler.scale)
    return out


@dataclass(frozen=True)
class ScalerTrace:
    """What a loss scaler did over a run: the scale after each step and which
    steps it skipped."""

    scales: tuple
    skipped: tuple

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped)


def _grad_maxima(grad_max) -> list[float]:
    if isinstance(grad_max, (str, bytes)):
        raise ValueError(f"grad_max must be a sequence of numbers, got {grad_max!r}")
    try:
        values = list(grad_max)
    except TypeError:
        raise ValueError(
            f"grad_max must be a sequence of numbers, got {grad_max!r}"
        ) from None
    if not values:
        raise ValueError("grad_max must hold at least one step")
    out = []
    for g in values:
        if not validate.is_real(g):
            raise ValueError(f"grad_max entries must be numbers, got {g!r}")
        g = float(g)
        if math.isfinite(g) and g <= 0:
            raise ValueError(
                f"grad_max entries must be above 0 (or inf/nan to inject), got {g!r}"
            )
        out.append(g)
    return out


def fp16_overflows(scale: float, grad_max: float) -> bool:
    """Does the largest gradient, scaled in fp32 and stored in fp16, overflow?
    (inf or NaN for ``grad_max`` always does.)"""
    validate.positive("scale", scale)
    if not validate.is_real(grad_max):
        raise ValueError(f"grad_max must be a number, got {grad_max!r}")
    # The product of two fp32 numbers is exact in a double (24 + 24 bits), so
    # rounding it to fp32 is fp32's multiply; then fp32 to fp16, as a cast does.
    value = _f16(_f32(_f32(scale) * _f32(grad_max)))
    return not math.isfinite(value)


def simulate_scaler(
    grad_max,
    init_scale: float = 65536.0,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> ScalerTrace:
    """The scaler's decisions without tensors: at step t the largest gradient
    is ``grad_max[t]`` (inf or nan for an injected overflow) and the step
    overflows when scale x grad_max[t] is not finite in fp16."""
    steps = _grad_maxima(grad_max)
    scaler = DynamicLossScaler(
        init_scale, growth_factor, backoff_factor, growth_interval
    )
    scales, skipped = [], []
    for g in steps:
        skipped.append(scaler.update(fp16_overflows(scaler.scale, g)))
        scales.append(scaler.scale)
    return ScalerTrace(tuple(scales), tuple(skipped))


def scripted_grad_max(
    n_steps: int, overflow_steps=(), base: float = 1.0
) -> list[float]:
    """A gradient-size script: ``base`` everywhere, inf at ``overflow_steps``."""
    validate.positive_int("n_steps", n_steps)
    validate.positive("base", base)
    out = [float(base)] * n_steps
    for t in overflow_steps:
        if not (isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_steps):
            raise ValueError(
                f"overflow step {t!r} must be an integer in [0, {n_steps})"
            )
        out[t] = math.inf
    return out


def drifting_grad_max(
    n_steps: int,
    seed: int = 0,
    start: float = 0.5,
    end: float = 0.05,
    noise: float = 0.3,
    n_spikes: int = 4,
    spike: float = 1e3,
) -> np.ndarray:
    """A synthetic run's largest gradient per step: a log-linear drift from
    ``start`` to ``end`` with lognormal noise, and ``n_spikes`` steps (never in
    the first tenth) where it jumps ``spike`` times higher (a bad batch)."""
    validate.positive_int("n_steps", n_steps)
    for name, v in (("start", start), ("end", end), ("spike", spike)):
        validate.positive(name, v)
    validate.non_negative("noise", noise)
    if not isinstance(n_spikes, int) or isinstance(n_spikes, bool) or n_spikes < 0:
        raise ValueError(f"n_spikes must be an integer at or above 0, got {n_spikes!r}")
    import numpy as np

    rng = np.random.default_rng(seed)
    g = np.geomspace(start, end, n_steps) * np.exp(noise * rng.standard_normal(n_steps))
    candidates = np.arange(n_steps // 10, n_steps)
    if n_spikes:
        at = rng.choice(candidates, size=min(n_spikes, candidates.size), replace=False)
        g[at] *= spike
    return g


def max_safe_scale(amax: float, name: str = "fp16") -> float:
    """The largest power of two S with amax x S at most the format's max: the
    scale a dynamic scaler hunts for, given the largest gradient."""
    validate.positive("amax", amax)
    fmax = float_format(name).max
    k = math.floor(math.log2(fmax / amax))
    while amax * 2.0 ** (k + 1) <= fmax:  # log2 may round down a step
        k += 1
    while amax * 2.0**k > fmax:
        k -= 1
    return 2.0**k


# --- the bytes a parameter keeps ----------------------------------------------------


@dataclass(frozen=True)
class StateRecipe:
    """What mixed-precision Adam keeps per parameter, item by item (bytes),
    and how many bytes a parameter's gradient takes in the data-parallel
    reduction (its storage dtype)."""

    name: str
    bytes_per_param: dict
    reduced_bytes: int
    source: str

    @property
    def total(self) -> int:
        return sum(self.bytes_per_param.values())


_BF16_GRADS = {
    "bf16 weights": 2,
    "bf16 gradients": 2,
    "fp32 master weights": 4,
    "Adam m (fp32)": 4,
    "Adam v (fp32)": 4,
}
_FP32_GRADS = {
    **dict(list(_BF16_GRADS.items())[:3]),
    "fp32 gradients (accumulated, reduced)": 4,
    **dict(list(_BF16_GRADS.items())[3:]),
}
STATE_RECIPES = {
    "bf16 gradients": StateRecipe(
        "bf16 gradients",
        _BF16_GRADS,
        2,
        "Rajbhandari et al. 2020 (ZeRO), Sec. 3.1: 2 + 2 + 12 bytes",
    ),
    "fp32 gradients": StateRecipe(
        "fp32 gradients",
        _FP32_GRADS,
        4,
        "Tazi et al. 2025 (the Ultra-Scale Playbook): bf16 weights and gradients, "
        "fp32 copies of both, fp32 Adam moments",
    ),
}


def state_recipe(name: str) -> StateRecipe:
    """One of STATE_RECIPES: gradients kept and reduced in bf16 (ZeRO's 16
    bytes a parameter) or accumulated and reduced in fp32 (the Playbook's 20):
    an fp32 gradient keeps every micro-batch's small contribution that a bf16
    sum would round away, and the all-reduce then moves 4 bytes a parameter."""
    validate.one_of("name", name, tuple(STATE_RECIPES))
    return STATE_RECIPES[name]


# --- fp8 per-tensor scaling -----------------------------------------------------------


def fp8_scale(amax: float, name: str = "fp8 E4M3", margin: int = 0) -> float:
    """The per-tensor scale that maps ``amax`` to the format's max / 2^margin."""
    validate.positive("amax", amax)
    validate.one_of("name", name, FP8_FORMATS)
    if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an integer at or above 0, got {margin!r}")
    return float_format(name).max / amax / 2**margin


def normal_span(name: str = "fp8 E4M3") -> float:
    """max / smallest normal: how far below a tensor's amax a value may lie
    and keep the format's full precision under one scale that maps the amax
    to the max (E4M3: 448 / 2^-6 = 28,672). A value further down is
    subnormal, with fewer significant bits, or flushed to zero."""
    fmt = float_format(name)
    return fmt.max / fmt.smallest_normal


def mx_scale(amax: float, name: str = "fp8 E4M3") -> float:
    """The scale a Microscaling (MX) block applies before the cast: 2^-X with
    the shared exponent X = floor(log2 amax) - emax, emax the exponent of the
    element format's largest power of two (E4M3: 8, E5M2: 15). It is a power
    of two (stored as E8M0); the block's amax lands in [2^emax, 2^(emax+1)),
    so a few of the largest values may pass the max and saturate (OCP
    Microscaling Formats Specification v1.0, 2023, Sec. 6.3)."""
    validate.positive("amax", amax)
    validate.one_of("name", name, FP8_FORMATS)
    if not math.isfinite(amax):
        raise ValueError(f"amax must be finite, got {amax!r}")
    emax = math.frexp(float_format(name).max)[1] - 1  # 448 = 1.75 x 2^8: 8
    shared = math.frexp(float(amax))[1] - 1 - emax  # floor(log2 amax) - emax
    return math.ldexp(1.0, -shared)


# --- where magnitudes fall: a histogram of log2 |v| -----------------------------------


@dataclass(frozen=True, eq=False)
class Log2Histogram:
    """Counts of log2|v| of the non-zero values in bins of equal width, and
    the sorted magnitudes, from which fractions are read exactly."""

    edges_log2: np.ndarray
    counts: np.ndarray
    sorted_abs: np.ndarray

    @property
    def n(self) -> int:
        return int(self.sorted_abs.size)


def log2_histogram(values, bin_width: float = 0.25) -> Log2Histogram:
    """Histogram of log2|v| over the non-zero ``values`` in bins of
    ``bin_width`` (a divisor of 1, so that scaling by a power of two shifts
    whole bins)."""
    validate.positive("bin_width", bin_width)
    if abs(1 / bin_width - round(1 / bin_width)) > 1e-9:
        raise ValueError(
            f"bin_width must divide 1 exactly (1, 0.5, 0.25, ...), got {bin_width!r}"
        )
    import numpy as np

    mags = np.abs(_finite_array("values", values)).ravel()
    mags = np.sort(mags[mags > 0])
    if mags.size == 0:
        raise ValueError("values must contain at least one non-zero value")
    logs = np.log2(mags)
    lo, hi = math.floor(logs.min()), math.ceil(logs.max()) + bin_width
    edges = np.arange(lo, hi + bin_width / 2, bin_width)
    counts, _ = np.histogram(logs, bins=edges)
    return Log2Histogram(edges, counts, mags)


def fraction_below(
    hist: Log2Histogram, threshold: float, scale: float = 1.0, inclusive: bool = False
) -> float:
    """Fraction of a histogram's magnitudes with |v| x scale below
    ``threshold`` (or at it too, with ``inclusive``)."""
    validate.positive("threshold", threshold)
    validate.positive("scale", scale)
    validate.boolean("inclusive", inclusive)
    import numpy as np

    side = "right" if inclusive else "left"
    return (
        float(np.searchsorted(hist.sorted_abs, threshold / scale, side=side)) / hist.n
    )


@dataclass(frozen=True)
class Zones:
    """Where magnitudes land in a format after scaling (fractions that sum to 1)."""

    flushed: float  # rounded to zero
    subnormal: float  # kept, with fewer significant bits
    normal: float
    overflow: float  # inf (or, for E4M3, saturated at the max)


def zone_fractions(
    hist: Log2Histogram, name: str = "fp16", scale: float = 1.0
) -> Zones:
    """Where a histogram's magnitudes land in format ``name`` after scaling by
    ``scale``: flushed to zero, subnormal, normal, or past the range."""
    fmt = float_format(name)
    flushed = fraction_below(hist, flush_threshold(name), scale, inclusive=True)
    below_normal = fraction_below(hist, fmt.smallest_normal, scale)
    past = overflow_threshold(name) if fmt.has_inf else fmt.max
    kept = fraction_below(hist, past, scale, inclusive=not fmt.has_inf)
    return Zones(
        flushed=flushed,
        subnormal=below_normal - flushed,
        normal=kept - below_normal,
        overflow=1 - kept,
    )


ZONES = ("flushed", "subnormal", "normal", "overflow")  # Zones' fields, in order


def histogram_summary(
    hists: dict, name: str = "fp16", log2_scales=range(0, 31)
) -> dict:
    """What a live figure of gradient histograms needs, as plain JSON data: per
    group (``hists`` maps a label to a Log2Histogram) the share of values in
    each bin and the zone fractions (ZONES, read exactly from the sorted
    magnitudes by ``zone_fractions``) at every scale 2^k, k in
    ``log2_scales``. Kilobytes, where the magnitudes are megabytes.

    Returns {"format", "bin_width", "log2_scales", "groups": [{"label",
    "first_edge_log2", "shares", "zones"}]}, ``zones[i]`` being the four
    fractions at ``log2_scales[i]``."""
    validate.one_of("name", name, FORMATS)
    if not isinstance(hists, dict) or not hists:
        raise ValueError(f"hists must map labels to Log2Histograms, got {hists!r}")
    ks = list(log2_scales)
    if not ks or not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
        raise ValueError(f"log2_scales must be integers, got {log2_scales!r}")
    widths = set()
    groups = []
    for label, h in hists.items():
        if not isinstance(h, Log2Histogram):
            raise ValueError(f"hists[{label!r}] must be a Log2Histogram, got {h!r}")
        edges = [float(e) for e in h.edges_log2]
        widths.add(edges[1] - edges[0])
        zones = [zone_fractions(h, name, 2.0**k) for k in ks]
        groups.append(
            {
                "label": str(label),
                "first_edge_log2": edges[0],
                "shares": [float(c) / h.n for c in h.counts],
                "zones": [[float(getattr(z, f)) for f in ZONES] for z in zones],
            }
        )
    if len(widths) != 1:
        raise ValueError(f"the histograms' bin widths differ: {sorted(widths)}")
    return {
        "format": name,
        "bin_width": widths.pop(),
        "log2_scales": ks,
        "groups": groups,
    }
