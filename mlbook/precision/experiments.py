"""Mixed precision: number formats, underflow, loss scaling, master weights, fp8.

Every limit of every format is read from ``torch.finfo``; nothing is typed in.
The dynamic loss scaler is written from scratch to show the mechanism and is
checked against ``torch.amp.GradScaler`` (``loss_scaling_run`` drives either
one through the same real backward passes). The fp8 helpers quantise a tensor
the way per-tensor scaling recipes do (Micikevicius et al. 2022,
arXiv:2209.05433): multiply by a scale, saturate to the format's largest value,
cast, and divide the scale back out.

This is a torch demo module: it imports torch.
"""

from __future__ import annotations

from mlbook.common_torch import device as devices

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np
import torch

from mlbook.common import validate
from mlbook.common_torch.timing import cpu_threads

# The formats the chapter compares, by the names the page prints.
DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8 E4M3": torch.float8_e4m3fn,
    "fp8 E5M2": torch.float8_e5m2,
}
FP8_DTYPES = ("fp8 E4M3", "fp8 E5M2")


def torch_dtype(dtype) -> torch.dtype:
    """A torch dtype from a name in DTYPES (or a torch dtype that is in it)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        return dtype
    validate.one_of("dtype", dtype, tuple(DTYPES))
    return DTYPES[dtype]


# --- the formats ----------------------------------------------------------------

@dataclass(frozen=True)
class FloatFormat:
    """One floating-point format, every number derived from torch.finfo."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int        # stored fraction bits; precision is mantissa_bits + 1
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float                # gap between 1 and the next representable number


def float_format(dtype) -> FloatFormat:
    """The FloatFormat of ``dtype`` (a name in DTYPES or a torch dtype).

    finfo gives bits, eps, max and the smallest normal. The rest follows:
    eps = 2^-m, so m = -log2(eps) stored mantissa bits; the sign takes one
    bit, so the exponent has bits - 1 - m; the smallest subnormal is the
    smallest normal times eps (the last mantissa bit at the lowest exponent).
    """
    dt = torch_dtype(dtype)
    name = next(k for k, v in DTYPES.items() if v == dt)
    fi = torch.finfo(dt)
    mantissa = int(round(-math.log2(fi.eps)))
    return FloatFormat(
        name=name, bits=fi.bits, exponent_bits=fi.bits - 1 - mantissa, mantissa_bits=mantissa,
        max=float(fi.max), smallest_normal=float(fi.smallest_normal),
        smallest_subnormal=float(fi.smallest_normal) * float(fi.eps), eps=float(fi.eps),
    )


def format_table() -> list[FloatFormat]:
    """fp32, fp16, bf16, fp8 E4M3 and fp8 E5M2, in that order."""
    return [float_format(name) for name in DTYPES]


def _as_float_tensor(name: str, values) -> torch.Tensor:
    t = torch.as_tensor(values)
    if not (t.is_floating_point()):
        t = t.to(torch.float64)
    if t.numel() == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty tensor")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite; it holds inf or NaN")
    return t


def cast_roundtrip(values, dtype, scale: float = 1.0) -> torch.Tensor:
    """values x scale cast to ``dtype`` and back, in fp32 (no saturation: an
    fp16 or E5M2 value past the max becomes inf). The values are taken as fp32
    first, as gradients are: torch casts fp64 to a 16-bit type through fp32,
    and that double rounding would blur the edges of the ranges."""
    validate.positive("scale", scale)
    t = _as_float_tensor("values", values)
    return (t.to(torch.float32) * scale).to(torch_dtype(dtype)).to(torch.float32)


def underflow_fraction(values, dtype, scale: float = 1.0) -> float:
    """Fraction of the non-zero ``values`` that become zero when multiplied by
    ``scale`` and cast to ``dtype`` (round to nearest, as every cast does)."""
    t = _as_float_tensor("values", values)
    nonzero = t != 0
    n = int(nonzero.sum())
    if n == 0:
        raise ValueError("values must contain at least one non-zero value")
    cast = cast_roundtrip(t[nonzero], dtype, scale)
    return float((cast == 0).sum()) / n


def overflow_threshold(dtype) -> float:
    """The smallest magnitude that rounds to inf when cast to ``dtype``: the
    max plus half the gap just below it. For the IEEE-style formats (all but
    E4M3) max = (2 - eps) 2^emax and that gap is eps 2^emax."""
    fmt = float_format(dtype)
    if fmt.name == "fp8 E4M3":
        raise ValueError("fp8 E4M3 has no inf: values past its max saturate (or become NaN)")
    return fmt.max + fmt.max * fmt.eps / (2 - fmt.eps) / 2


def overflow_fraction(values, dtype, scale: float = 1.0) -> float:
    """Fraction of ``values`` that overflow when multiplied by ``scale`` and
    cast to ``dtype``: they become inf, or for E4M3 (which has no inf) they
    lie past its max and are clipped to it."""
    t = _as_float_tensor("values", values)
    if float_format(dtype).name == "fp8 E4M3":
        validate.positive("scale", scale)
        return float(((t.to(torch.float64).abs() * scale) > float_format(dtype).max).sum()) / t.numel()
    return float(torch.isinf(cast_roundtrip(t, dtype, scale)).sum()) / t.numel()


# --- dynamic loss scaling ---------------------------------------------------------

def _f32(x: float) -> float:
    """Round to fp32 the way a float32 tensor stores a double (inf past the max)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


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
    """

    def __init__(self, init_scale: float = 65536.0, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        validate.positive("init_scale", init_scale)
        if (not isinstance(growth_factor, Real) or isinstance(growth_factor, bool)
                or not math.isfinite(growth_factor) or growth_factor <= 1):
            raise ValueError(f"growth_factor must be a finite number above 1, got {growth_factor!r}")
        validate.fraction("backoff_factor", backoff_factor, allow_one=False)
        self.growth_interval = validate.positive_int("growth_interval", growth_interval)
        self.scale = _f32(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.good_steps = 0   # finite steps since the last change of scale

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
            found_inf = found_inf or not bool(torch.isfinite(p.grad).all())
        return found_inf

    def update(self, found_inf: bool) -> bool:
        """Adjust the scale after a step; returns True if the step must be skipped."""
        if not isinstance(found_inf, (bool, np.bool_)):
            raise ValueError(f"found_inf must be a bool, got {found_inf!r}")
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


@dataclass(frozen=True)
class ScalerTrace:
    """What a loss scaler did over a run: the scale after each step and which
    steps it skipped."""

    scales: list
    skipped: list

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped)


SCALERS = ("mlbook", "torch")


def _fp16_overflow(scale: float, grad_max: float) -> bool:
    """Does the largest gradient, scaled in fp32 and stored in fp16, overflow?"""
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.float16(np.float32(scale) * np.float32(grad_max))
    return not np.isfinite(value)


def simulate_scaler(grad_max, init_scale: float = 65536.0, growth_factor: float = 2.0,
                    backoff_factor: float = 0.5, growth_interval: int = 2000) -> ScalerTrace:
    """The scaler's decisions without tensors: at step t the largest gradient
    is ``grad_max[t]`` (inf for an injected overflow) and the step overflows
    when scale x grad_max[t] is not finite in fp16. Pure Python and numpy, so
    a slider can redraw it."""
    scaler = DynamicLossScaler(init_scale, growth_factor, backoff_factor, growth_interval)
    scales, skipped = [], []
    for g in grad_max:
        skipped.append(scaler.update(bool(_fp16_overflow(scaler.scale, g))))
        scales.append(scaler.scale)
    return ScalerTrace(scales, skipped)


def loss_scaling_run(grad_max, scaler: str = "mlbook", init_scale: float = 65536.0,
                     growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000, fp16_grads: bool = True) -> ScalerTrace:
    """Train a tiny model through real backward passes under a loss scaler.

    The model is one weight vector w and the loss at step t is sum(w * c_t),
    so the gradient is c_t, whose largest entry is ``grad_max[t]`` (inf or
    nan injects a non-finite gradient). With ``fp16_grads`` a hook stores the
    scaled gradient in fp16, as fp16 training does, so a scale that is too
    big overflows. ``scaler`` is "mlbook" (DynamicLossScaler) or "torch"
    (torch.amp.GradScaler on the CPU); both see the same gradients.
    """
    validate.one_of("scaler", scaler, SCALERS)
    grad_max = [float(g) for g in grad_max]
    if not grad_max:
        raise ValueError("grad_max must hold at least one step")
    for g in grad_max:
        if math.isfinite(g) and g <= 0:
            raise ValueError(f"grad_max entries must be above 0 (or inf/nan to inject), got {g!r}")
    w = torch.zeros(4, requires_grad=True)
    if fp16_grads:
        w.register_hook(lambda g: g.to(torch.float16).to(torch.float32))
    opt = torch.optim.SGD([w], lr=1e-3)
    stepped = []
    opt.register_step_post_hook(lambda *_: stepped.append(True))
    shape = torch.tensor([1.0, 0.5, 0.25, 0.125])       # entries of c_t relative to its max
    if scaler == "torch":
        amp = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                   backoff_factor=backoff_factor, growth_interval=growth_interval)
    else:
        amp = DynamicLossScaler(init_scale, growth_factor, backoff_factor, growth_interval)
    scales, skipped = [], []
    with cpu_threads(1):
        _scaler_loop(grad_max, scaler, amp, w, opt, shape, stepped, scales, skipped)
    return ScalerTrace(scales, skipped)


def _scaler_loop(grad_max, scaler, amp, w, opt, shape, stepped, scales, skipped):
    for g in grad_max:
        opt.zero_grad(set_to_none=True)
        before = len(stepped)
        c = shape * g if math.isfinite(g) else torch.full((4,), g)
        loss = (w * c).sum()
        if scaler == "torch":
            amp.scale(loss).backward()
            amp.step(opt)
            amp.update()
            scales.append(amp.get_scale())
        else:
            amp.scale_loss(loss).backward()
            amp.step(opt, [w])
            scales.append(amp.scale)
        skipped.append(len(stepped) == before)


def scripted_grad_max(n_steps: int, overflow_steps=(), base: float = 1.0) -> list:
    """A gradient-size script: ``base`` everywhere, inf at ``overflow_steps``."""
    validate.positive_int("n_steps", n_steps)
    validate.positive("base", base)
    out = [float(base)] * n_steps
    for t in overflow_steps:
        if not (isinstance(t, int) and 0 <= t < n_steps):
            raise ValueError(f"overflow step {t!r} must be an integer in [0, {n_steps})")
        out[t] = math.inf
    return out


def drifting_grad_max(n_steps: int, seed: int = 0, start: float = 0.5, end: float = 0.05,
                      noise: float = 0.3, n_spikes: int = 4, spike: float = 1e3) -> np.ndarray:
    """A synthetic run's largest gradient per step: a log-linear drift from
    ``start`` to ``end`` with lognormal noise, and ``n_spikes`` steps where it
    jumps ``spike`` times higher (a bad batch)."""
    validate.positive_int("n_steps", n_steps)
    for name, v in (("start", start), ("end", end), ("spike", spike)):
        validate.positive(name, v)
    validate.non_negative("noise", noise)
    rng = np.random.default_rng(seed)
    trend = np.geomspace(start, end, n_steps)
    g = trend * np.exp(noise * rng.standard_normal(n_steps))
    if n_spikes:
        at = rng.choice(np.arange(n_steps // 10, n_steps), size=min(n_spikes, n_steps), replace=False)
        g[at] *= spike
    return g


# --- gradients of a real network ---------------------------------------------------

def capture_gradients(model, idx, targets, max_values: int | None = 1_000_000,
                      seed: int = 0) -> dict:
    """One forward and backward in fp32; returns flat fp32 tensors of three
    groups of gradients: "weights", "activations" (the gradient of the loss
    with respect to each block's output) and "logits" (with respect to the
    LM head's output), and how many values each group held ("n_weights", ...). A group larger than ``max_values`` is sampled
    uniformly at random (with replacement) down to that size: the logits alone
    hold b x s x V values, and a histogram or a fraction needs far fewer."""
    if max_values is not None:
        validate.positive_int("max_values", max_values)
    acts, logits = [], []

    def keeper(store):
        def keep(module, args, out):
            t = out[0] if isinstance(out, tuple) else out
            t.register_hook(lambda g: store.append(g.detach().flatten().float()))
        return keep

    handles = [b.register_forward_hook(keeper(acts)) for b in model.blocks]
    handles.append(model.head.register_forward_hook(keeper(logits)))
    try:
        model.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    groups = {
        "weights": torch.cat([p.grad.detach().flatten().float() for p in model.parameters()
                              if p.grad is not None]),
        "activations": torch.cat(acts),
        "logits": torch.cat(logits),
    }
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, values in groups.items():
        out[f"n_{name}"] = values.numel()
        if max_values is not None and values.numel() > max_values:
            values = values[torch.randint(values.numel(), (max_values,), generator=gen)]
        out[name] = values.cpu()
    return out


def max_safe_scale(values, dtype="fp16") -> float:
    """The largest power of two that multiplies ``values`` without any of
    them passing the format's max: the scale a dynamic scaler hunts for."""
    t = _as_float_tensor("values", values)
    amax = float(t.abs().max())
    if amax == 0:
        raise ValueError("values must contain at least one non-zero value")
    return 2.0 ** math.floor(math.log2(float_format(dtype).max / amax))


def log2_histogram(values, bin_width: float = 0.25) -> dict:
    """Counts of log2|v| for the non-zero values in bins of ``bin_width``
    (a divisor of 1, so that scaling by a power of two shifts whole bins), and
    the sorted magnitudes, from which a figure reads fractions quickly."""
    validate.positive("bin_width", bin_width)
    if abs(1 / bin_width - round(1 / bin_width)) > 1e-9:
        raise ValueError(f"bin_width must divide 1 exactly (1, 0.5, 0.25, ...), got {bin_width!r}")
    t = _as_float_tensor("values", values).to(torch.float64).abs()
    mags = np.sort(t[t > 0].numpy())
    logs = np.log2(mags)
    lo, hi = math.floor(logs.min()), math.ceil(logs.max()) + bin_width
    edges = np.arange(lo, hi + bin_width / 2, bin_width)
    counts, _ = np.histogram(logs, bins=edges)
    return {"edges_log2": edges, "counts": counts, "sorted_abs": mags, "n": mags.size}


def fraction_below(hist: dict, threshold: float, scale: float = 1.0,
                   inclusive: bool = False) -> float:
    """Fraction of a log2_histogram's magnitudes with |v| x scale below
    ``threshold`` (or at it too, with ``inclusive``)."""
    side = "right" if inclusive else "left"
    return float(np.searchsorted(hist["sorted_abs"], threshold / scale, side=side)) / hist["n"]


def fp16_fractions(hist: dict, scale: float = 1.0) -> dict:
    """Where a log2_histogram's magnitudes land in fp16 after scaling: flushed
    to zero, subnormal (fewer significant bits), normal, or overflowed to inf."""
    fmt = float_format("fp16")
    flushed = fraction_below(hist, fp16_flush_threshold(), scale, inclusive=True)
    below_normal = fraction_below(hist, fmt.smallest_normal, scale)
    inf = 1 - fraction_below(hist, overflow_threshold("fp16"), scale)
    return {"flushed": flushed, "subnormal": below_normal - flushed,
            "normal": 1 - below_normal - inf, "overflow": inf}


def fp16_flush_threshold() -> float:
    """Magnitudes at or below half the smallest fp16 subnormal round to zero
    (round to nearest, ties to even: exactly half rounds to the even zero)."""
    return float_format("fp16").smallest_subnormal / 2


# --- master weights ---------------------------------------------------------------

MASTER_MODES = ("fp32", "bf16 + fp32 master", "pure bf16")


def master_weight_experiment(steps: int = 400, lr: float = 1e-4, n_features: int = 64,
                             batch_size: int = 256, offset: float = 0.02, seed: int = 0,
                             device: str = "cpu") -> dict:
    """Fit a linear model whose weights start near 1 and must move by about
    ``offset``, with Adam at learning rate ``lr`` (updates of about lr each).

    Three runs on the same batches:
    - "fp32": everything in fp32 (the reference);
    - "bf16 + fp32 master": weights kept in fp32, matmuls in bf16 under
      torch.autocast, so the optimizer adds each small update to fp32;
    - "pure bf16": the model cast to bf16, so the weights and Adam's state are
      bf16 and an update below half a bf16 step (2^-8 relative) rounds away.

    Returns {mode: {"loss": [...], "weight": [...]}} where "weight" follows the
    first weight, plus "lost_updates": the fraction of (step, weight) updates
    of the pure-bf16 run that left the weight unchanged.
    """
    validate.positive_int("steps", steps)
    validate.positive("lr", lr)
    validate.positive_int("n_features", n_features)
    validate.positive_int("batch_size", batch_size)
    validate.positive("offset", offset)
    gen = torch.Generator().manual_seed(seed)
    w0 = 1 + 0.25 * torch.rand(n_features, generator=gen)                    # (d,)
    w_true = w0 + offset * torch.randn(n_features, generator=gen)            # (d,)
    batches = [torch.randn(batch_size, n_features, generator=gen) for _ in range(min(steps, 64))]
    with cpu_threads(1, device):
        out = {mode: _master_run(mode, w0, w_true, batches, steps, lr, device) for mode in MASTER_MODES}
    out["w0"] = float(w0[0])
    out["w_true"] = float(w_true[0])
    out["initial_error"] = float((w0 - w_true).abs().max())
    return out


def _master_run(mode, w0, w_true, batches, steps, lr, device) -> dict:
    """One run of master_weight_experiment in one precision mode."""
    n_features = w0.numel()
    model = torch.nn.Linear(n_features, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(w0[None, :])
    if mode == "pure bf16":
        model = model.to(torch.bfloat16)
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, first, unchanged, total = [], [], 0, 0
    for t in range(steps):
        x = batches[t % len(batches)].to(device)                        # (b, d)
        y = x @ w_true.to(device)                                        # (b,)
        before = model.weight.detach().clone()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=mode != "fp32"):
            pred = model(x.to(model.weight.dtype)).squeeze(-1)           # (b,)
        loss = ((pred.float() - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        unchanged += int((model.weight.detach() == before).sum())
        total += before.numel()
        losses.append(loss.item())
        first.append(float(model.weight.detach()[0, 0]))
    return {"loss": losses, "weight": first,
            "final_error": float((model.weight.detach().float().cpu()[0] - w_true).abs().max()),
            "unchanged_updates": unchanged / total}


def bf16_absorbs(weight: float, update: float) -> bool:
    """Does weight + update, stored in bf16, differ from weight in bf16?"""
    w = torch.tensor(weight, dtype=torch.bfloat16)
    return bool((w + torch.tensor(update, dtype=torch.bfloat16)) != w)


# --- fp8 per-tensor scaling --------------------------------------------------------

def _fp8_name(dtype) -> str:
    name = float_format(dtype).name
    if name not in FP8_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(FP8_DTYPES)}; got {dtype!r}")
    return name


def fp8_scale(amax: float, dtype="fp8 E4M3", margin: int = 0) -> float:
    """The per-tensor scale that maps ``amax`` to the format's max / 2^margin."""
    validate.positive("amax", amax)
    if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an integer at or above 0, got {margin!r}")
    return float_format(_fp8_name(dtype)).max / amax / 2**margin


def quantize_fp8(x, dtype="fp8 E4M3", scale: float = 1.0) -> torch.Tensor:
    """x in fp8 and back: multiply by ``scale``, saturate at the format's max,
    cast, divide by ``scale``. Returns fp32 values (what a later op reads)."""
    validate.positive("scale", scale)
    fmt = float_format(_fp8_name(dtype))
    x = _as_float_tensor("x", x).to(torch.float32)
    scaled = (x * scale).clamp(-fmt.max, fmt.max)
    return scaled.to(torch_dtype(fmt.name)).to(torch.float32) / scale


@dataclass(frozen=True)
class QuantError:
    """How much a quantisation lost: relative RMS error, and the fractions of
    non-zero values flushed to zero and of values clipped at the max."""

    rel_rms_error: float
    underflow: float
    saturated: float


def quant_error(x, dtype="fp8 E4M3", scale: float = 1.0) -> QuantError:
    """Quantise ``x`` with ``quantize_fp8`` and measure what was lost."""
    fmt = float_format(_fp8_name(dtype))
    x = _as_float_tensor("x", x).to(torch.float32)
    q = quantize_fp8(x, fmt.name, scale)
    err = (q - x).double().norm() / x.double().norm().clamp_min(1e-300)
    nonzero = x != 0
    under = float(((q == 0) & nonzero).sum()) / max(int(nonzero.sum()), 1)
    sat = float(((x.abs().double() * scale) > fmt.max).sum()) / x.numel()
    return QuantError(float(err), under, sat)


class DelayedScaler:
    """Delayed scaling: the scale for this step comes from the largest |x|
    (amax) seen over the last ``history_len`` steps, not from the tensor being
    cast, so no extra pass over the tensor is needed before the cast. Each
    step records its own amax for the next one. A tensor that jumps above the
    history saturates until the history catches up."""

    def __init__(self, dtype="fp8 E4M3", history_len: int = 16, margin: int = 0):
        self.dtype = _fp8_name(dtype)
        self.history_len = validate.positive_int("history_len", history_len)
        fp8_scale(1.0, self.dtype, margin)            # validates margin
        self.margin = margin
        self.history: list[float] = []

    @property
    def scale(self) -> float:
        if not self.history:
            return 1.0
        return fp8_scale(max(self.history), self.dtype, self.margin)

    def quantize(self, x) -> tuple[torch.Tensor, QuantError]:
        """Quantise with the current scale, then record x's amax."""
        scale = self.scale
        x = _as_float_tensor("x", x).to(torch.float32)
        q, err = quantize_fp8(x, self.dtype, scale), quant_error(x, self.dtype, scale)
        amax = float(x.abs().max())
        if amax > 0:
            self.history = (self.history + [amax])[-self.history_len:]
        return q, err


def scaling_run(tensors, dtype="fp8 E4M3", history_len: int = 16, margin: int = 0) -> dict:
    """Quantisation error per step of a sequence of tensors under three
    policies: no scale, the current tensor's own amax ("just in time"), and
    delayed scaling from the amax history. Returns lists per policy, plus the
    amax and the delayed scale per step."""
    delayed = DelayedScaler(dtype, history_len, margin)
    out = {"none": [], "current": [], "delayed": [], "amax": [], "delayed_scale": []}
    for x in tensors:
        x = _as_float_tensor("tensor", x).to(torch.float32)
        amax = float(x.abs().max())
        out["amax"].append(amax)
        out["delayed_scale"].append(delayed.scale)
        out["none"].append(quant_error(x, dtype, 1.0))
        out["current"].append(quant_error(x, dtype, fp8_scale(amax, dtype, margin)))
        out["delayed"].append(delayed.quantize(x)[1])
    return out


def drifting_tensors(n_steps: int, size: int = 4096, seed: int = 0, start: float = 1e-3,
                     growth: float = 1.02, jump_at: int | None = None, jump: float = 8.0):
    """Gaussian tensors whose scale grows by ``growth`` a step, with one jump
    by ``jump`` at step ``jump_at``: activations whose range drifts in training."""
    validate.positive_int("n_steps", n_steps)
    validate.positive_int("size", size)
    validate.positive("start", start)
    validate.positive("growth", growth)
    validate.positive("jump", jump)
    gen = torch.Generator().manual_seed(seed)
    sigma = start
    out = []
    for t in range(n_steps):
        if jump_at is not None and t == jump_at:
            sigma *= jump
        out.append(sigma * torch.randn(size, generator=gen))
        sigma *= growth
    return out


def fp8_error_sweep(sigmas, size: int = 4096, seed: int = 0) -> dict:
    """Relative RMS error of Gaussian tensors of standard deviation sigma cast
    to each fp8 format, without a scale and with a per-tensor scale from the
    tensor's own amax. Returns {format: {"none": [...], "scaled": [...]}}."""
    validate.positive_int("size", size)
    sigmas = [validate.positive("sigma", float(s)) for s in sigmas]
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(size, generator=gen)
    out = {}
    for name in FP8_DTYPES:
        none, scaled = [], []
        for sigma in sigmas:
            x = sigma * base
            none.append(quant_error(x, name).rel_rms_error)
            scaled.append(quant_error(x, name, fp8_scale(float(x.abs().max()), name)).rel_rms_error)
        out[name] = {"none": none, "scaled": scaled}
    return out


# --- matmul throughput by dtype ------------------------------------------------------

def matmul_throughput_by_dtype(device: str, n: int, probe_n: int = 128,
                               min_run_time_s: float = 0.3, max_call_s: float = 0.25) -> dict:
    """Measured FLOP/s of an n^3 matmul in fp32, bf16 and fp16 on ``device``.

    Many CPUs have no fast fp16 matmul kernel, where a large fp16 matmul takes
    seconds. So on a CPU fp16 is first probed at ``probe_n``; only if that
    rate would finish an n^3 matmul within ``max_call_s`` is it measured at n
    too. (The bound is loose on purpose: a slow kernel runs at about 1
    GFLOP/s, a fast one at tens or hundreds, and a busy machine should not
    move a CPU from one class to the other.) Returns {dtype: (flops_per_s, size measured)}.
    """
    from mlbook.common import accelerators as hardware

    validate.positive_int("n", n)
    validate.positive_int("probe_n", probe_n)
    validate.positive("max_call_s", max_call_s)
    results = {}
    for dtype in ("fp32", "bf16", "fp16"):
        size = n
        if device == "cpu" and dtype == "fp16":
            probe = devices.measure_matmul_flops_per_s(dtype, probe_n, device, min_run_time_s)
            if 2 * n**3 / probe > max_call_s:
                results[dtype] = (probe, probe_n)
                continue
        results[dtype] = (devices.measure_matmul_flops_per_s(dtype, size, device, min_run_time_s), size)
    return results


# --- page helpers: the chapter's printed tables and glued texts --------------------
# Each *_texts function returns {glue key: text}; the page glues them in a loop.

LLAMA2_VOCAB = 32000  # Llama 2's tokenizer vocabulary (Touvron et al. 2023)


def percent(fraction: float) -> str:
    """A fraction as a percentage that never hides a small non-zero value:
    one decimal from 0.1 % up, two significant digits below, "0%" for zero."""
    fraction = float(fraction)
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    if fraction == 0:
        return "0%"
    if fraction >= 1e-3:
        return f"{fraction:.1%}"
    pct = fraction * 100
    digits = 1 - math.floor(math.log10(pct))
    return f"{pct:.{digits}f}%" if digits <= 6 else f"{pct:.1e}%"


def _pow2(x: float) -> str:
    return f"2^{math.log2(x):.0f}"


def format_table_text(table) -> str:
    """The formats' limits as a fixed-width text table."""
    lines = [f"{'format':>9} {'exp':>4} {'mant':>5} {'max':>11} {'min normal':>11} "
             f"{'min subnormal':>14} {'eps':>10}"]
    for f in table:
        lines.append(f"{f.name:>9} {f.exponent_bits:>4} {f.mantissa_bits:>5} {f.max:>11.4g} "
                     f"{f.smallest_normal:>11.3g} {f.smallest_subnormal:>14.3g} {f.eps:>10.3g}")
    return "\n".join(lines)


def format_texts(table) -> dict:
    """Glue texts for the formats section."""
    fmt = {f.name: f for f in table}
    fp16, bf16, e4, e5 = fmt["fp16"], fmt["bf16"], fmt["fp8 E4M3"], fmt["fp8 E5M2"]
    out = {
        "fp16_max": f"{fp16.max:,.0f}", "fp16_normal": f"{fp16.smallest_normal:.2e}",
        "fp16_sub": f"{fp16.smallest_subnormal:.2e}",
        "fp16_normal_pow": _pow2(fp16.smallest_normal),
        "fp16_sub_pow": _pow2(fp16.smallest_subnormal),
        "bf16_max": f"{bf16.max:.2e}", "fp32_max": f"{fmt['fp32'].max:.2e}",
        "e4m3_max": f"{e4.max:,.0f}", "e5m2_max": f"{e5.max:,.0f}",
        "bf16_exp_bits": f"{bf16.exponent_bits}", "bf16_mant_bits": f"{bf16.mantissa_bits}",
        "bf16_sig_bits": f"{bf16.mantissa_bits + 1}", "fp8_payload_bits": f"{e4.bits - 1}",
        "e4m3_mant_bits": f"{e4.mantissa_bits}", "e5m2_mant_bits": f"{e5.mantissa_bits}",
        "e4m3_eps": f"{e4.eps:g}", "e5m2_eps": f"{e5.eps:g}",
    }
    for f in (bf16, fp16):
        out[f"{f.name}_eps"] = f"{f.eps:.2g} ({_pow2(f.eps)})"
    return out


GRADIENT_GROUPS = {"logits": "logit gradients", "activations": "hidden-state gradients",
                   "weights": "weight gradients"}


@dataclass
class GradientStudy:
    """Gradients of one backward pass, their histograms and the largest safe
    fp16 loss scale (``hists`` is keyed by the printed labels)."""

    grads: dict
    hists: dict
    everything: torch.Tensor
    hist_all: dict
    safe_scale: float


def gradient_study(grads: dict) -> GradientStudy:
    """Histograms and the largest safe fp16 scale of capture_gradients' output."""
    missing = [k for k in GRADIENT_GROUPS if k not in grads]
    if missing:
        raise ValueError(f"grads must hold the groups {list(GRADIENT_GROUPS)}, missing {missing}")
    hists = {label: log2_histogram(grads[key]) for key, label in GRADIENT_GROUPS.items()}
    everything = torch.cat([grads[key] for key in GRADIENT_GROUPS])
    return GradientStudy(grads, hists, everything, log2_histogram(everything),
                         max_safe_scale(everything, "fp16"))


def gradient_report(study: GradientStudy) -> str:
    """Per group: how many values, the median, and what fp16 does to them
    unscaled and at the safe scale; then the figure's fractions checked
    against a real cast."""
    lines = []
    g = study.grads
    for key, label in GRADIENT_GROUPS.items():
        lines.append(f"{label}: {g['n_' + key]:,} values ({g[key].numel():,} sampled), "
                     f"median |g| {g[key].abs().median():.2e}")
        for scale in (1.0, study.safe_scale):
            fr = fp16_fractions(study.hists[label], scale)
            lines.append(f"    scale {scale:>13,.0f}: "
                         f"{percent(underflow_fraction(g[key], 'fp16', scale)):>9} become 0, "
                         f"{percent(fr['subnormal']):>6} subnormal, "
                         f"{percent(overflow_fraction(g[key], 'fp16', scale))} inf")
    fig_frac = fp16_fractions(study.hists["logit gradients"])["flushed"]
    lines.append(f"logits flushed to zero: {fig_frac:.4%} read from the figure's sorted "
                 f"magnitudes,\n{'':>23}{underflow_fraction(g['logits'], 'fp16'):.4%} from "
                 f"a real cast")
    return "\n".join(lines)


def gradient_texts(study: GradientStudy, cfg, batch: int, seq: int) -> dict:
    """Glue texts for the gradients section, including the sentences whose
    claim depends on the measured result (how many logit gradients flush)."""
    g, safe = study.grads, study.safe_scale
    vocab = cfg.vocab_size
    bsv = batch * seq * vocab
    threshold = fp16_flush_threshold()
    out = {
        "g_model": f"{cfg.n_layers} layers, h={cfg.d_model}, V={vocab:,}, b={batch}, s={seq}",
        "g_vocab": f"{vocab:,}",
        "g_vocab_whose": ("the size of Llama 2's" if vocab == LLAMA2_VOCAB else
                          f"{'smaller' if vocab < LLAMA2_VOCAB else 'larger'} than "
                          f"Llama 2's {LLAMA2_VOCAB:,}"),
        "g_n_logits": f"{g['n_logits'] / 1e6:.1f}",
        "g_n_hidden": f"{g['n_activations'] / 1e6:.2f}",
        "g_1_over_bsv": f"{1 / bsv:.1e}", "g_bsv": f"{bsv / 1e6:.1f}",
        "g_flush": f"{threshold:.1e}", "g_flush_pow": _pow2(threshold),
        "g_inv_flush": f"{1 / threshold / 1e6:.0f}",
        "g_safe": f"{safe:,.0f}", "g_safe_pow": _pow2(safe),
        "g_bf16_zero": percent(underflow_fraction(study.everything, "bf16")),
    }
    frac = {key: fp16_fractions(study.hists[label]) for key, label in GRADIENT_GROUPS.items()}
    for key in GRADIENT_GROUPS:
        out[f"g_{key}_median"] = f"{float(g[key].abs().median()):.1e}"
        out[f"g_{key}_zero"] = percent(underflow_fraction(g[key], "fp16"))
        out[f"g_{key}_sub"] = percent(frac[key]["subnormal"])
        out[f"g_{key}_zero_scaled"] = percent(underflow_fraction(g[key], "fp16", safe))
    zero = underflow_fraction(g["logits"], "fp16")
    median = float(g["logits"].abs().median())
    if zero >= 0.01:
        where = "at or below" if median <= threshold else "just above"
        out["g_logits_verdict"] = (f"That is {where} the threshold, and unscaled "
                                   f"{percent(zero)} of them become zero in fp16")
    else:
        few = "none of them becomes" if zero == 0 else f"only {percent(zero)} of them become"
        out["g_logits_verdict"] = (f"That is above the threshold, so with this small "
                                   f"micro-batch {few} zero in fp16")
    ratio = float(g["weights"].abs().median()) / median
    out["g_weights_ratio"] = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"
    sub = max(fp16_fractions(h, safe)["subnormal"] for h in study.hists.values())
    out["g_sub_scaled_clause"] = ("no value of any group is subnormal" if sub == 0 else
                                  f"no group has more than {percent(sub)} subnormal")
    return out


def scaler_comparison(grad_max, growth_interval: int) -> dict:
    """Run the from-scratch scaler and GradScaler on the same scripted
    gradients and the tensor-free simulation; return the three traces, the
    agreement counts, a printable report and the glue texts."""
    n = len(grad_max)
    ours = loss_scaling_run(grad_max, "mlbook", growth_interval=growth_interval)
    theirs = loss_scaling_run(grad_max, "torch", growth_interval=growth_interval)
    sim = simulate_scaler(grad_max, growth_interval=growth_interval)
    same_scale = sum(a == b for a, b in zip(ours.scales, theirs.scales))
    same_skip = sum(a == b for a, b in zip(ours.skipped, theirs.skipped))
    sim_agrees = sim.scales == ours.scales and sim.skipped == ours.skipped
    report = "\n".join([
        f"same scale after {same_scale} of {n} steps, same skip decision on {same_skip}",
        f"skipped steps: mlbook {ours.n_skipped}, GradScaler {theirs.n_skipped}; "
        f"final scale {ours.scales[-1]:,.0f} vs {theirs.scales[-1]:,.0f}",
        f"the tensor-free simulation (used by the slider) agrees: {sim_agrees}"])
    texts = {"sc_steps": f"{n:,}", "sc_interval": f"{growth_interval:,}",
             "sc_same": f"{same_scale:,}", "sc_skipped": f"{ours.n_skipped:,}",
             "sc_skipped_frac": f"{ours.n_skipped / n:.1%}", "sc_final": f"{ours.scales[-1]:,.0f}"}
    return {"ours": ours, "theirs": theirs, "sim": sim, "same_scale": same_scale,
            "same_skip": same_skip, "sim_agrees": sim_agrees, "report": report, "texts": texts}


def master_weight_report(mw: dict) -> str:
    """One line per mode of master_weight_experiment's result."""
    lines = []
    for mode in MASTER_MODES:
        r = mw[mode]
        lines.append(f"{mode:>18}: loss {r['loss'][0]:.2e} -> {r['loss'][-1]:.2e}, "
                     f"{r['unchanged_updates']:.1%} of weight updates lost")
        lines.append(f"{'':>20}largest weight error {mw['initial_error']:.3f} -> "
                     f"{r['final_error']:.3f}")
    return "\n".join(lines)


def master_weight_texts(mw: dict) -> dict:
    """Glue texts for the master-weights result."""
    out = {"mw_loss0": f"{mw['pure bf16']['loss'][0]:.2e}"}
    for key, mode in (("fp32", "fp32"), ("master", "bf16 + fp32 master"), ("pure", "pure bf16")):
        out[f"mw_{key}_loss"] = f"{mw[mode]['loss'][-1]:.2e}"
        out[f"mw_{key}_lost"] = f"{mw[mode]['unchanged_updates']:.1%}"
    return out


def fp8_gradient_cast(std: float = 1e-6, size: int = 4096, seed: int = 0) -> tuple[str, dict]:
    """A Gaussian tensor of gradient-sized values cast to each fp8 format with
    and without a per-tensor scale; returns (report, glue texts)."""
    validate.positive("std", std)
    x = std * torch.randn(size, generator=torch.Generator().manual_seed(seed))
    lines, out = [], {"f8_grad_std": f"{std:.0e}"}
    for name in FP8_DTYPES:
        plain = quant_error(x, name)
        scaled = quant_error(x, name, fp8_scale(float(x.abs().max()), name))
        lines.append(f"{name}, a tensor with std {std:g}: no scale {plain.rel_rms_error:.1%} "
                     f"error ({plain.underflow:.1%} flushed),\n{'':>10}per-tensor scale "
                     f"{scaled.rel_rms_error:.1%} error")
        tag = name[-4:]
        out[f"f8_{tag}_plain"] = f"{plain.rel_rms_error:.0%}"
        out[f"f8_{tag}_flushed"] = f"{plain.underflow:.0%}"
        out[f"f8_{tag}_scaled"] = f"{scaled.rel_rms_error:.1%}"
    return "\n".join(lines), out


def scaling_run_report(run: dict, jump_at: int) -> tuple[str, dict]:
    """Median and worst error per policy of scaling_run, the delayed
    scaler at the jump; returns (report, glue texts)."""
    err = {k: [e.rel_rms_error for e in run[k]] for k in ("none", "current", "delayed")}
    lines = [f"{k:>8}: median error {np.median(err[k]):.1%}, worst {max(err[k]):.1%}"
             for k in err]
    lines.append(f"delayed scaling at the jump: {run['delayed'][jump_at].saturated:.1%} "
                 f"of values saturated")
    out = {"f8_jump_step": f"{jump_at + 1}",
           "f8_delayed_median": f"{np.median(err['delayed']):.1%}",
           "f8_current_median": f"{np.median(err['current']):.1%}",
           "f8_none_median": f"{np.median(err['none']):.0%}",
           "f8_jump_sat": f"{run['delayed'][jump_at].saturated:.0%}",
           "f8_jump_err": f"{err['delayed'][jump_at]:.0%}",
           "f8_after_err": f"{err['delayed'][jump_at + 1]:.1%}"}
    return "\n".join(lines), out


def matmul_report(results: dict, device: str, n: int) -> tuple[str, dict]:
    """Printable rates of matmul_throughput_by_dtype's result and glue texts,
    including which kind of machine measured them."""
    from mlbook.common import accelerators as hardware

    lines = [f"{d:>5}: {rate / 1e9:10,.1f} GFLOP/s  (n = {size})" for d, (rate, size) in results.items()]
    fp32, bf16, (fp16, fp16_n) = results["fp32"][0], results["bf16"][0], results["fp16"]
    if device != "cpu":
        note = f"a GPU, so every dtype ran at n = {n}"
    elif fp16_n == n:
        note = ("a CPU whose fp16 probe was fast, so fp16 ran at full size too: this CPU "
                "has a fast fp16 path, which many CPUs lack. No GPU was used, so no "
                "tensor-core figure was measured; run the chapter on a GPU to get one")
    else:
        note = (f"a CPU with no fast fp16 kernel: the probe at n = {fp16_n} was too slow "
                "to run fp16 at full size, so its figure is for that tiny matmul. No GPU was "
                "used, so no tensor-core figure was measured; run the chapter on a GPU to get one")
    h100 = {d: hardware.peak_flops_per_s("H100", d) for d in ("fp32", "bf16", "fp8")}
    out = {"mm_n": f"{n}", "mm_fp32": f"{fp32 / 1e9:,.1f}", "mm_bf16": f"{bf16 / 1e9:,.1f}",
           "mm_fp16": f"{fp16 / 1e9:,.1f}", "mm_bf16_over_fp32": f"{bf16 / fp32:.1f}",
           "mm_fp16_over_fp32": f"{fp16 / fp32:.1f}", "mm_note": note,
           "h100_bf16_over_fp32": f"{h100['bf16'] / h100['fp32']:.0f}",
           "h100_fp8_over_bf16": f"{h100['fp8'] / h100['bf16']:.1f}"}
    return "\n".join(lines), out
