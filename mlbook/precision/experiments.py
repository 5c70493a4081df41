"""Mixed precision in torch: formats read from torch.finfo, real casts, the
loss scaler through real backward passes against torch.amp.GradScaler, the
gradients of a real network, master weights, fp8 casts and matmul throughput.

The numbers that need no tensors (each format's limits from its bit layout,
rounding, the scaler's rules, fp8 scales, histograms) are in
``mlbook.precision.formulas``; this module checks them against torch. The fp8
helpers quantise a tensor the way per-tensor scaling recipes do (Micikevicius
et al. 2022, arXiv:2209.05433): multiply by a scale, saturate to the format's
largest value, cast, and divide the scale back out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mlbook.common import validate
from mlbook.common_torch import device as devices
from mlbook.common_torch.dtypes import dtype_name, torch_dtype
from mlbook.common_torch.timing import cpu_threads
from mlbook.precision.formulas import (
    FP8_FORMATS,
    DynamicLossScaler,
    FloatFormat,
    ScalerTrace,
    float_format,
    fp8_scale,
)

# --- the formats, read from torch -----------------------------------------------------


def finfo_format(dtype) -> FloatFormat:
    """The FloatFormat of ``dtype`` (a name in DTYPES or a torch dtype), read
    from torch.finfo.

    finfo gives bits, eps, max and the smallest normal. The rest follows:
    eps = 2^-m, so m = -log2(eps) stored mantissa bits; the sign takes one
    bit, so the exponent has bits - 1 - m; the smallest subnormal is the
    smallest normal times eps (the last mantissa bit at the lowest exponent).
    A format has inf when casting twice its max gives inf.
    """
    dt = torch_dtype(dtype)
    fi = torch.finfo(dt)
    mantissa = int(round(-math.log2(fi.eps)))
    has_inf = bool(torch.isinf(torch.tensor(2 * float(fi.max)).to(dt).float()))
    return FloatFormat(
        name=dtype_name(dt),
        bits=fi.bits,
        exponent_bits=fi.bits - 1 - mantissa,
        mantissa_bits=mantissa,
        max=float(fi.max),
        smallest_normal=float(fi.smallest_normal),
        smallest_subnormal=float(fi.smallest_normal) * float(fi.eps),
        eps=float(fi.eps),
        has_inf=has_inf,
    )


_UINT_OF_BITS = {8: torch.uint8, 16: torch.int16}


def _every_value(dtype) -> torch.Tensor:
    """Every one of the 2^bits bit patterns of an 8- or 16-bit ``dtype``,
    viewed as that format and widened to fp32 (NaNs included)."""
    dt = torch_dtype(dtype)
    bits = torch.finfo(dt).bits
    if bits not in _UINT_OF_BITS:
        raise ValueError(
            f"dtype must be an 8- or 16-bit float, got {dtype!r} ({bits} bits)"
        )
    every = torch.arange(2**bits, dtype=torch.int32).to(_UINT_OF_BITS[bits])
    return every.view(dt).float()


def nan_bit_patterns(dtype) -> int:
    """How many of the 2^bits bit patterns of an 8- or 16-bit ``dtype`` (a name
    in DTYPES or a torch dtype) are NaN: every pattern, viewed as the format
    and tested. E4M3 has two, S.1111.111 for either sign; E5M2 six, fp16 2,046."""
    return int(_every_value(dtype).isnan().sum())


def count_between(dtype, low: float = 1.0, high: float = 2.0) -> int:
    """How many bit patterns of an 8- or 16-bit ``dtype`` are numbers strictly
    between ``low`` and ``high``: every pattern viewed as the format and
    compared, a count that reads nothing of the format's layout."""
    validate.positive("low", low)
    validate.positive("high", high)
    values = _every_value(dtype)
    return int(((values > low) & (values < high)).sum())


def _as_float_tensor(name: str, values) -> torch.Tensor:
    t = torch.as_tensor(values)
    if not t.is_floating_point():
        t = t.to(torch.float64)
    if t.numel() == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty tensor")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite; it holds inf or NaN")
    return t


def cast_roundtrip(values, dtype, scale: float = 1.0) -> torch.Tensor:
    """values x scale cast to ``dtype`` and back, in fp32 (an fp16 or E5M2
    value past the max becomes inf). The values are taken as fp32 first, as
    gradients are: torch casts fp64 to a 16-bit type through fp32, and that
    double rounding would blur the edges of the ranges."""
    validate.positive("scale", scale)
    t = _as_float_tensor("values", values)
    return (t.to(torch.float32) * scale).to(torch_dtype(dtype)).to(torch.float32)


def underflow_fraction(values, dtype, scale: float = 1.0) -> float:
    """Fraction of the non-zero ``values`` that become zero when multiplied by
    ``scale`` and cast to ``dtype`` (a real cast, round to nearest)."""
    t = _as_float_tensor("values", values)
    nonzero = t != 0
    n = int(nonzero.sum())
    if n == 0:
        raise ValueError("values must contain at least one non-zero value")
    return float((cast_roundtrip(t[nonzero], dtype, scale) == 0).sum()) / n


def overflow_fraction(values, dtype, scale: float = 1.0) -> float:
    """Fraction of ``values`` that overflow when multiplied by ``scale`` and
    cast to ``dtype``: they become inf, or for E4M3 (which has no inf) they
    lie past its max and saturate."""
    t = _as_float_tensor("values", values)
    fmt = finfo_format(dtype)
    if not fmt.has_inf:
        validate.positive("scale", scale)
        return float(((t.to(torch.float64).abs() * scale) > fmt.max).sum()) / t.numel()
    return float(torch.isinf(cast_roundtrip(t, dtype, scale)).sum()) / t.numel()


# --- the loss scaler through real backward passes -------------------------------------

SCALERS = ("mlbook", "torch")


def loss_scaling_run(
    grad_max,
    scaler: str = "mlbook",
    init_scale: float = 65536.0,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
    fp16_grads: bool = True,
) -> ScalerTrace:
    """Train a tiny model through real backward passes under a loss scaler.

    The model is one weight vector w and the loss at step t is sum(w * c_t),
    so the gradient is c_t, whose largest entry is ``grad_max[t]`` (inf or
    nan injects a non-finite gradient). With ``fp16_grads`` a hook stores the
    scaled gradient in fp16, as fp16 training does, so a scale that is too
    big overflows. ``scaler`` is "mlbook" (formulas.DynamicLossScaler) or
    "torch" (torch.amp.GradScaler on the CPU); both see the same gradients.
    """
    validate.one_of("scaler", scaler, SCALERS)
    grad_max = [float(g) for g in grad_max]
    if not grad_max:
        raise ValueError("grad_max must hold at least one step")
    for g in grad_max:
        if math.isfinite(g) and g <= 0:
            raise ValueError(
                f"grad_max entries must be above 0 (or inf/nan to inject), got {g!r}"
            )
    w = torch.zeros(4, requires_grad=True)
    if fp16_grads:
        w.register_hook(lambda g: g.to(torch.float16).to(torch.float32))
    opt = torch.optim.SGD([w], lr=1e-3)
    stepped = []
    opt.register_step_post_hook(lambda *_: stepped.append(True))
    shape = torch.tensor([1.0, 0.5, 0.25, 0.125])  # entries of c_t relative to its max
    if scaler == "torch":
        amp = torch.amp.GradScaler(
            "cpu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
    else:
        amp = DynamicLossScaler(
            init_scale, growth_factor, backoff_factor, growth_interval
        )
    scales, skipped = [], []
    with cpu_threads(1):
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
    return ScalerTrace(tuple(scales), tuple(skipped))


# --- gradients of a real network ------------------------------------------------------

GRADIENT_GROUPS = ("logits", "activations", "weights")


@dataclass(frozen=True, eq=False)
class GradientSample:
    """Gradients of one backward pass in three groups, as flat fp32 CPU
    tensors (sampled down where a group is large), and how many values each
    group held before sampling."""

    logits: torch.Tensor  # d loss / d (LM head output)
    activations: torch.Tensor  # d loss / d (each block's output)
    weights: torch.Tensor  # every parameter's .grad
    n_logits: int
    n_activations: int
    n_weights: int


def capture_gradients(
    model, idx, targets, max_values: int | None = 1_000_000, seed: int = 0
) -> GradientSample:
    """One forward and backward in fp32 of the book's GPT; the three groups of
    gradients. A group larger than ``max_values`` is sampled uniformly at
    random (with replacement) down to that size: the logits alone hold
    b x s x V values, and a histogram or a fraction needs far fewer."""
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
        "logits": torch.cat(logits),
        "activations": torch.cat(acts),
        "weights": torch.cat(
            [
                p.grad.detach().flatten().float()
                for p in model.parameters()
                if p.grad is not None
            ]
        ),
    }
    gen = torch.Generator().manual_seed(seed)
    kept, counts = {}, {}
    for name, values in groups.items():
        counts[f"n_{name}"] = values.numel()
        values = values.cpu()
        if max_values is not None and values.numel() > max_values:
            values = values[torch.randint(values.numel(), (max_values,), generator=gen)]
        kept[name] = values
    return GradientSample(**kept, **counts)


# --- master weights -------------------------------------------------------------------

MASTER_MODES = ("fp32", "bf16 + fp32 master", "pure bf16")


@dataclass(frozen=True)
class MasterRun:
    """One precision mode of master_weight_experiment."""

    loss: tuple  # mean squared error per step
    weight: tuple  # the first weight per step
    final_error: float  # largest |w - w_true| at the end
    unchanged_updates: float  # share of (step, weight) updates that changed nothing

    @property
    def first_loss(self) -> float:
        return self.loss[0]

    @property
    def last_loss(self) -> float:
        return self.loss[-1]


@dataclass(frozen=True)
class MasterWeightResult:
    runs: dict  # mode -> MasterRun
    w0: float  # the first weight at the start
    w_true: float  # and its target
    initial_error: float  # largest |w0 - w_true|


def _check_master(steps, lr, n_features, batch_size, offset):
    """A ValueError naming the first setting of master_weight_experiment that
    is not a positive count (steps, features, batch) or a positive number."""
    for name, v in (("steps", steps), ("n_features", n_features)):
        validate.positive_int(name, v)
    validate.positive_int("batch_size", batch_size)
    validate.positive("lr", lr)
    validate.positive("offset", offset)


def master_weight_experiment(
    steps: int = 400,
    lr: float = 1e-4,
    n_features: int = 64,
    batch_size: int = 256,
    offset: float = 0.02,
    seed: int = 0,
    device: str = "cpu",
) -> MasterWeightResult:
    """Fit a linear model whose weights start near 1 and must move by about
    ``offset``, with Adam at learning rate ``lr`` (updates of about lr each).

    Three runs on the same batches:
    - "fp32": everything in fp32 (the reference);
    - "bf16 + fp32 master": weights kept in fp32, matmuls in bf16 under
      torch.autocast, so the optimizer adds each small update to fp32;
    - "pure bf16": the model cast to bf16, so the weights and Adam's state are
      bf16 and an update below half a bf16 step (2^-8 relative) rounds away.
    """
    _check_master(steps, lr, n_features, batch_size, offset)
    gen = torch.Generator().manual_seed(seed)
    w0 = 1 + 0.25 * torch.rand(n_features, generator=gen)  # (d,)
    w_true = w0 + offset * torch.randn(n_features, generator=gen)  # (d,)
    batches = [
        torch.randn(batch_size, n_features, generator=gen)
        for _ in range(min(steps, 64))
    ]
    with cpu_threads(1, device):
        runs = {
            mode: _master_run(mode, w0, w_true, batches, steps, lr, device)
            for mode in MASTER_MODES
        }
    return MasterWeightResult(
        runs, float(w0[0]), float(w_true[0]), float((w0 - w_true).abs().max())
    )


def _master_run(mode, w0, w_true, batches, steps, lr, device) -> MasterRun:
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
        x = batches[t % len(batches)].to(device)  # (b, d)
        y = x @ w_true.to(device)  # (b,)
        before = model.weight.detach().clone()
        with torch.autocast(
            device_type=device, dtype=torch.bfloat16, enabled=mode != "fp32"
        ):
            pred = model(x.to(model.weight.dtype)).squeeze(-1)  # (b,)
        loss = ((pred.float() - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        unchanged += int((model.weight.detach() == before).sum())
        total += before.numel()
        losses.append(loss.item())
        first.append(float(model.weight.detach()[0, 0]))
    return MasterRun(
        tuple(losses),
        tuple(first),
        float((model.weight.detach().float().cpu()[0] - w_true).abs().max()),
        unchanged / total,
    )


# --- fp8 per-tensor scaling -----------------------------------------------------------


def _fp8_name(dtype) -> str:
    name = dtype_name(dtype)
    if name not in FP8_FORMATS:
        raise ValueError(
            f"dtype must be one of {', '.join(FP8_FORMATS)}; got {dtype!r}"
        )
    return name


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
        fp8_scale(1.0, self.dtype, margin)  # validates margin
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
            self.history = (self.history + [amax])[-self.history_len :]
        return q, err


@dataclass(frozen=True)
class ScalingRun:
    """Per step of scaling_run: the error under each policy, the tensor's
    amax and the scale delayed scaling used."""

    none: tuple  # QuantError per step, no scale
    current: tuple  # scale from this tensor's own amax
    delayed: tuple  # scale from the amax history
    amax: tuple
    delayed_scale: tuple


def scaling_run(
    tensors, dtype="fp8 E4M3", history_len: int = 16, margin: int = 0
) -> ScalingRun:
    """Quantisation error per step of a sequence of tensors under three
    policies: no scale, the current tensor's own amax ("just in time"), and
    delayed scaling from the amax history."""
    name = _fp8_name(dtype)
    delayed = DelayedScaler(name, history_len, margin)
    out = {"none": [], "current": [], "delayed": [], "amax": [], "delayed_scale": []}
    for x in tensors:
        x = _as_float_tensor("tensor", x).to(torch.float32)
        amax = float(x.abs().max())
        out["amax"].append(amax)
        out["delayed_scale"].append(delayed.scale)
        out["none"].append(quant_error(x, name, 1.0))
        out["current"].append(quant_error(x, name, fp8_scale(amax, name, margin)))
        out["delayed"].append(delayed.quantize(x)[1])
    return ScalingRun(**{k: tuple(v) for k, v in out.items()})


def drifting_tensors(
    n_steps: int,
    size: int = 4096,
    seed: int = 0,
    start: float = 1e-3,
    growth: float = 1.02,
    jump_at: int | None = None,
    jump: float = 8.0,
):
    """Gaussian tensors whose standard deviation starts at ``start`` and grows
    by ``growth`` a step, with one jump by ``jump`` at step ``jump_at``:
    activations whose range drifts in training."""
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


@dataclass(frozen=True)
class Fp8Sweep:
    """Relative RMS error per standard deviation, without and with a
    per-tensor scale."""

    none: tuple
    scaled: tuple


def fp8_error_sweep(sigmas, size: int = 4096, seed: int = 0) -> dict:
    """Relative RMS error of Gaussian tensors of standard deviation sigma cast
    to each fp8 format, without a scale and with a per-tensor scale from the
    tensor's own amax. Returns {format: Fp8Sweep}."""
    validate.positive_int("size", size)
    sigmas = [validate.positive("sigma", float(s)) for s in sigmas]
    base = torch.randn(size, generator=torch.Generator().manual_seed(seed))
    out = {}
    for name in FP8_FORMATS:
        none, scaled = [], []
        for sigma in sigmas:
            x = sigma * base
            none.append(quant_error(x, name).rel_rms_error)
            scaled.append(
                quant_error(
                    x, name, fp8_scale(float(x.abs().max()), name)
                ).rel_rms_error
            )
        out[name] = Fp8Sweep(tuple(none), tuple(scaled))
    return out


# --- fp8 with a scale per block ------------------------------------------------------

# The granularities the page compares: (label, values a block along the last
# dimension, None for one scale for the whole tensor, power-of-two scales).
# DeepSeek-V3 scales activations per 1 x 128 tile and weights per 128 x 128
# block with fp32 scales (arXiv:2412.19437, Sec. 3.3); MXFP8 shares one
# power-of-two (E8M0) scale among 32 consecutive values (OCP MX v1.0).
BLOCKINGS = (
    ("per tensor", None, False),
    ("1 x 128 tiles", 128, False),
    ("MXFP8, 1 x 32", 32, True),
)


def _block_scales(blocks: torch.Tensor, fmt: FloatFormat, power_of_two: bool):
    """One scale per row of ``blocks`` (n_blocks, block): max / amax, or the
    MX power of two (formulas.mx_scale, for every block at once); 1 for a
    block of zeros."""
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # (n_blocks, 1)
    if power_of_two:
        emax = math.frexp(fmt.max)[1] - 1
        shared = torch.frexp(amax).exponent - 1 - emax  # floor(log2 amax) - emax
        scales = torch.ldexp(torch.ones_like(amax), -shared)
    else:
        scales = fmt.max / amax
    return torch.where(amax > 0, scales, 1.0)


def _blocks(x: torch.Tensor, block: int | None) -> torch.Tensor:
    """x as (n_blocks, block) tiles along its last dimension (one for None)."""
    if block is None:
        return x.reshape(1, -1)
    validate.positive_int("block", block)
    if x.shape[-1] % block:
        raise ValueError(f"block={block} must divide the last dimension, {x.shape[-1]}")
    return x.reshape(-1, block)


def _scaled_and_back(x, block, fmt, power_of_two):
    """(x times its tiles' scales, its fp8 round trip), both of x's shape."""
    blocks = _blocks(x, block)  # (n_blocks, block)
    scales = _block_scales(blocks, fmt, power_of_two)
    scaled = blocks * scales
    cast = scaled.clamp(-fmt.max, fmt.max).to(torch_dtype(fmt.name)).float()
    return scaled.reshape(x.shape), (cast / scales).reshape(x.shape)


def quantize_blocks(
    x, block: int | None = 128, dtype="fp8 E4M3", power_of_two: bool = False
) -> torch.Tensor:
    """x in fp8 and back with one scale per tile of ``block`` consecutive
    values along its last dimension (None: one scale for the whole tensor).
    Each tile is multiplied by its scale (max / amax, or with
    ``power_of_two`` the MX scale), saturated at the max, cast, and divided
    by its scale again. Returns fp32 values of x's shape."""
    fmt = float_format(_fp8_name(dtype))
    x = _as_float_tensor("x", x).to(torch.float32)
    validate.boolean("power_of_two", power_of_two)
    return _scaled_and_back(x, block, fmt, power_of_two)[1]


@dataclass(frozen=True)
class BlockError:
    """What one granularity lost on a tensor with an outlier: the mean
    relative error over every other value (the bulk), and the shares of the
    bulk that landed below the format's smallest normal, and at zero."""

    label: str
    mean_rel_error: float
    below_normal: float
    flushed: float


def outlier_tensor(rows: int, cols: int, ratio: float, seed: int = 0) -> torch.Tensor:
    """Gaussian values of standard deviation 1 (rows, cols), with the first
    replaced by ``ratio``: one outlier ``ratio`` times the typical value."""
    validate.positive_int("rows", rows)
    validate.positive_int("cols", cols)
    validate.positive("ratio", ratio)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen)  # (rows, cols)
    x[0, 0] = ratio
    return x


def block_errors(x, blockings=BLOCKINGS, dtype="fp8 E4M3") -> list[BlockError]:
    """Each granularity of ``blockings`` on the same tensor ``x`` (whose first
    value is the outlier): the bulk's mean relative error and where it fell."""
    fmt = float_format(_fp8_name(dtype))
    x = _as_float_tensor("x", x).to(torch.float32)
    bulk = x != 0
    bulk.view(-1)[0] = False  # the outlier
    out = []
    for label, block, power_of_two in blockings:
        scaled, q = _scaled_and_back(x, block, fmt, power_of_two)
        rel = ((q - x).abs() / x.abs())[bulk]
        out.append(
            BlockError(
                label,
                float(rel.double().mean()),
                float((scaled.abs() < fmt.smallest_normal)[bulk].double().mean()),
                float((q == 0)[bulk].double().mean()),
            )
        )
    return out


def block_scaling_sweep(
    ratios, rows: int, cols: int, seed: int = 0, blockings=BLOCKINGS
) -> dict:
    """block_errors on outlier_tensor(rows, cols, ratio, seed) for each of
    ``ratios``: {ratio: [BlockError, ...]} (the same bulk every time)."""
    return {
        float(r): block_errors(outlier_tensor(rows, cols, r, seed), blockings)
        for r in ratios
    }


# --- matmul throughput by dtype -------------------------------------------------------


@dataclass(frozen=True)
class MatmulRate:
    flops_per_s: float
    n: int  # the n of the n x n x n matmul that was timed


def matmul_throughput_by_dtype(
    device: str,
    n: int,
    probe_n: int = 128,
    min_run_time_s: float = 0.3,
    max_call_s: float = 0.25,
) -> dict:
    """Measured FLOP/s of an n^3 matmul in fp32, bf16 and fp16 on ``device``:
    {dtype: MatmulRate}.

    Many CPUs have no fast fp16 matmul kernel, where a large fp16 matmul takes
    seconds. So on a CPU fp16 is first probed at ``probe_n``; only if that
    rate would finish an n^3 matmul within ``max_call_s`` is it measured at n
    too. (The bound is loose on purpose: a slow kernel runs at about 1
    GFLOP/s, a fast one at tens or hundreds, and a busy machine should not
    move a CPU from one class to the other.)
    """
    validate.positive_int("n", n)
    validate.positive_int("probe_n", probe_n)
    validate.positive("max_call_s", max_call_s)
    results = {}
    for dtype in ("fp32", "bf16", "fp16"):
        if device == "cpu" and dtype == "fp16":
            probe = devices.measure_matmul_flops_per_s(
                dtype, probe_n, device, min_run_time_s
            )
            if 2 * n**3 / probe > max_call_s:
                results[dtype] = MatmulRate(probe, probe_n)
                continue
        results[dtype] = MatmulRate(
            devices.measure_matmul_flops_per_s(dtype, n, device, min_run_time_s), n
        )
    return results
