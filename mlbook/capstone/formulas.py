"""Finding lost MFU, on paper: where a step's time goes and what each fix buys.

Torch-free. The profiler gives named intervals; these functions decide which
bucket each belongs to, add the buckets up over a step window (the time no
operator covers is the idle gaps), and turn measured step times into rates,
MFU, and a waterfall from the nominal peak down to what the step achieved.

Buckets (BRIEF section 8's checklist, as a step's timeline shows it):

  matmul       the weight matmuls (linear layers, LM head), forward and backward
  attention    the score and context matmuls, softmax and mask, or a fused kernel
  elementwise  everything else a model runs: norms, activations, adds, embedding,
               the loss, casts
  optimizer    the optimizer step, and zeroing the gradients
  data         fetching (and here, tokenising) the next batch
  sync         host synchronisation and logging: ``.item()`` and a print
  comm         collectives (all-reduce) where there are several processes
  recompute    a block's forward run again inside the backward pass
  idle         stretches of the step where no operator runs: host-side Python,
               framework overhead, waiting
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from mlbook.common import validate

# The reference loop's sizes, fixes, scopes and buckets, and its model's matmul
# shapes, live below the chapters (mlbook.calibrate runs the same loop); the chapter
# names them too.
from mlbook.common.reference_loop import BUCKET_LABELS as BUCKET_LABELS
from mlbook.common.reference_loop import BUCKETS as BUCKETS
from mlbook.common.reference_loop import FIX_NAMES, FIXES
from mlbook.common.reference_loop import SCOPE_BUCKETS as SCOPE_BUCKETS
from mlbook.common.reference_loop import SCOPE_PREFIX as SCOPE_PREFIX
from mlbook.common.reference_loop import SCOPES as SCOPES
from mlbook.common.reference_loop import Fix as Fix
from mlbook.common.reference_loop import LadderSizes as LadderSizes
from mlbook.common.reference_loop import bucket_of as bucket_of
from mlbook.common.reference_loop import ladder_fixes as ladder_fixes
from mlbook.common.reference_loop import ladder_sizes as ladder_sizes
from mlbook.common.reference_loop import padded_vocab as padded_vocab
from mlbook.common.transformer import gemm_shapes as gemm_shapes


def _real(name: str, value) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def account(window_s: float, items) -> dict:
    """Split a step window of ``window_s`` seconds into buckets.

    ``items`` are (start_s, end_s, bucket, priority) intervals measured from
    the window's start. Each instant of the window goes to the covering item
    of highest priority (ties: the one that started first), so a scope's
    time can be carved out of an operator that encloses it (a recomputed
    forward inside a backward node). Parts of items outside the window are
    ignored. Instants no item covers are "idle". Returns {bucket: seconds}
    for every bucket in BUCKETS; the values add up to ``window_s``.
    """
    validate.positive("window_s", window_s)
    cuts = {0.0, float(window_s)}
    clean = []
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 4:
            raise ValueError(
                f"items[{i}] must be (start_s, end_s, bucket, priority), got {item!r}"
            )
        start, end, bucket, priority = item
        start, end = (
            _real(f"items[{i}] start_s", start),
            _real(f"items[{i}] end_s", end),
        )
        priority = _real(f"items[{i}] priority", priority)
        validate.one_of(f"items[{i}] bucket", bucket, BUCKETS)
        if end < start:
            raise ValueError(
                f"items[{i}] ends at {end!r}, before it starts at {start!r}"
            )
        start, end = max(0.0, start), min(float(window_s), end)
        if end > start:
            clean.append((start, end, bucket, priority, i))
            cuts.update((start, end))
    out = dict.fromkeys(BUCKETS, 0.0)
    points = sorted(cuts)
    # a sweep over the elementary segments between consecutive cut points
    by_start = sorted(clean, key=lambda c: c[0])
    active, nxt = [], 0
    for lo, hi in itertools.pairwise(points):
        while nxt < len(by_start) and by_start[nxt][0] <= lo:
            active.append(by_start[nxt])
            nxt += 1
        active = [c for c in active if c[1] > lo]
        if active:
            best = max(active, key=lambda c: (c[3], -c[0], -c[4]))
            out[best[2]] += hi - lo
        else:
            out["idle"] += hi - lo
    return out


def residual_fraction(step_s: float, accounted_s: float) -> float:
    """(unprofiled step time - the buckets' sum) / unprofiled step time.

    What the accounting misses (time outside the profiled window) or the
    profiler adds (its own cost per recorded operator, which makes the
    profiled window longer and the residual negative)."""
    validate.positive("step_s", step_s)
    validate.positive("accounted_s", accounted_s)
    return (step_s - accounted_s) / step_s


@dataclass(frozen=True)
class RungRates:
    tokens_per_s: float
    achieved_flops_per_s: float  # model FLOPs (6N + 12Lhs per token) per second
    mfu: float  # against the nominal peak; NaN where the device's peak is unknown
    vs_ceiling: float  # against the MAMF ceiling; above 1 means the ceiling was beaten


def rung_rates(
    tokens_per_step: int,
    step_s: float,
    flops_per_token: float,
    peak_flops_per_s: float | None,
    ceiling_flops_per_s: float,
) -> RungRates:
    """Throughput, MFU and the fraction of the measured ceiling of a step of
    ``tokens_per_step`` tokens that took ``step_s`` seconds. An MFU above 1
    is refused (the peak or the FLOP count is wrong); a peak of None (a
    device whose nominal peak is unknown) gives an MFU of NaN; a fraction of
    the ceiling above 1 is returned, since a probe can miss the best shape."""
    tokens_per_step = validate.positive_int("tokens_per_step", tokens_per_step)
    validate.positive("step_s", step_s)
    validate.positive("flops_per_token", flops_per_token)
    if peak_flops_per_s is not None:
        validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive("ceiling_flops_per_s", ceiling_flops_per_s)
    tokens_per_s = tokens_per_step / step_s
    achieved = tokens_per_s * flops_per_token
    if peak_flops_per_s is None:
        return RungRates(
            tokens_per_s, achieved, math.nan, achieved / ceiling_flops_per_s
        )
    mfu = achieved / peak_flops_per_s
    if mfu > 1 + 1e-9:
        raise ValueError(
            f"an MFU of {mfu:.1%} is above 100 %: "
            f"peak_flops_per_s={peak_flops_per_s!r} or "
            f"flops_per_token={flops_per_token!r} must be wrong"
        )
    return RungRates(tokens_per_s, achieved, mfu, achieved / ceiling_flops_per_s)


# --- what kind of machine, and what bounds its step ---------------------------------


@dataclass(frozen=True)
class StepBound:
    """What a step's time went to: the largest bucket (the one that bounds it
    now) and its share, and the weight matmuls' share."""

    bucket: str
    share: float
    matmul_share: float

    @property
    def label(self) -> str:
        return BUCKET_LABELS[self.bucket]

    @property
    def next_look(self) -> str:
        """Where the next fix is to be found, as a short label: in the
        matmuls' shapes and casts where they bound the step, else in the
        bucket that does, not in the matmuls."""
        if self.bucket == "matmul":
            return "the matmuls' shapes and casts"
        return f"the {self.label} bucket, not the matmuls"


def step_bound(buckets: dict) -> StepBound:
    """The bucket that takes the largest share of a step's accounted time
    ({bucket: seconds}, as account returns), ties going to BUCKETS order."""
    if not isinstance(buckets, dict) or not buckets:
        raise ValueError(f"buckets must be a non-empty dict, got {buckets!r}")
    for name, value in buckets.items():
        validate.one_of("bucket", name, BUCKETS)
        validate.non_negative(f"buckets[{name!r}]", value)
    total = sum(buckets.values())
    if total <= 0:
        raise ValueError(f"buckets must add up to more than 0 s, got {buckets!r}")
    top = max((b for b in BUCKETS if b in buckets), key=lambda b: buckets[b])
    return StepBound(top, buckets[top] / total, buckets.get("matmul", 0.0) / total)


@dataclass(frozen=True)
class CeilingReach:
    """How much of the MAMF ceiling a step reached, split in two: the share
    of its time the matmuls took (the weights' and attention's buckets) and
    the share of the ceiling the step's FLOPs ran at while they ran. The step
    reaches their product, so at most the matmuls' share of its time: were
    they at the ceiling, everything else would still take the rest."""

    matmul_time_share: float
    matmul_vs_ceiling: float  # the model FLOPs over the matmuls' time, / ceiling
    step_vs_ceiling: float  # = matmul_time_share * matmul_vs_ceiling


def ceiling_reach(buckets: dict, step_vs_ceiling: float) -> CeilingReach:
    """Split a step's share of its ceiling (``step_vs_ceiling``, the model
    FLOPs a second over the ceiling) by its profile ({bucket: seconds}, as
    account returns): the matmuls' share of the time (matmul and attention
    buckets) and their own share of the ceiling, step / time share. A step
    with no matmul time is an error: it did no model FLOPs."""
    share = step_bound(buckets)  # checks the buckets
    validate.positive("step_vs_ceiling", step_vs_ceiling)
    total = sum(buckets.values())
    matmul_s = buckets.get("matmul", 0.0) + buckets.get("attention", 0.0)
    if matmul_s <= 0:
        raise ValueError(
            f"buckets hold no matmul or attention time ({share.label} bounds "
            "them): a step that reached its ceiling at all ran matmuls"
        )
    time_share = matmul_s / total
    return CeilingReach(time_share, step_vs_ceiling / time_share, step_vs_ceiling)


def within_ceiling(vs_ceiling: float, spread: float) -> bool:
    """Whether a step's share of its ceiling is at most 1, allowing the
    relative spread of its own repeated steps (slowest / fastest - 1): a
    physical bound, checked with the margin the same run measured."""
    validate.non_negative("vs_ceiling", vs_ceiling)
    validate.non_negative("spread", spread)
    return vs_ceiling <= 1 + spread


def fix_savings(step_times_s) -> tuple:
    """The time each rung saved on the one before it: t[i-1] - t[i] for
    i = 1.. (negative where a fix measured slower)."""
    if isinstance(step_times_s, (str, bytes)) or not hasattr(step_times_s, "__iter__"):
        raise ValueError(
            f"step_times_s must be a sequence of seconds, got {step_times_s!r}"
        )
    times = list(step_times_s)
    if len(times) < 2:
        raise ValueError(f"step_times_s must hold at least two rungs, got {len(times)}")
    for i, t in enumerate(times):
        validate.positive(f"step_times_s[{i}]", t)
    return tuple(float(a) - float(b) for a, b in itertools.pairwise(times))


def exposed_fraction(step_s: float, compute_s: float) -> float:
    """The share of a step spent beyond its own compute (waiting on a
    collective, or on a slower rank): (step - compute) / step."""
    validate.positive("step_s", step_s)
    validate.positive("compute_s", compute_s)
    return (step_s - compute_s) / step_s


# --- a step with its all-reduce, overlapped or not --------------------------------


def exposed_allreduce_s(
    backward_s: float, allreduce_s: float, buckets: int, overlap: bool
) -> float:
    """The time a step's gradient all-reduce adds to it (the part not hidden
    behind the backward pass).

    Not overlapped, all of it: ``allreduce_s``. Overlapped as DDP does it, the
    gradients are cut into ``buckets`` equal buckets, ready one after another
    as the backward pass runs (bucket i at i/n of it) and each all-reduced,
    one at a time, in allreduce_s / n as soon as it is ready. The last bucket
    is ready only when the backward pass ends, so at least its share stays
    exposed; and where the all-reduce is slower than the backward pass, the
    queue of buckets runs on past it:

        exposed = max(c / n, c - (n - 1) / n * b)

    with b = ``backward_s``, c = ``allreduce_s`` and n = ``buckets``."""
    validate.positive("backward_s", backward_s)
    validate.non_negative("allreduce_s", allreduce_s)
    n = validate.positive_int("buckets", buckets)
    validate.boolean("overlap", overlap)
    if not overlap:
        return float(allreduce_s)
    return max(allreduce_s / n, allreduce_s - (n - 1) / n * backward_s)


@dataclass(frozen=True)
class StepPhases:
    """The phases of one data-parallel training step, in seconds, and the
    buckets its gradients are all-reduced in."""

    data_s: float
    forward_s: float
    backward_s: float
    allreduce_s: float
    optimizer_s: float
    buckets: int

    def __post_init__(self):
        for name in ("data_s", "forward_s", "optimizer_s", "allreduce_s"):
            validate.non_negative(name, getattr(self, name))
        validate.positive("backward_s", self.backward_s)
        validate.positive_int("buckets", self.buckets)


@dataclass(frozen=True)
class Span:
    lane: str  # "compute" or "network"
    phase: str  # "data", "forward", "backward", "all-reduce", "optimizer"
    start_s: float
    end_s: float


def step_schedule(phases: StepPhases, overlap: bool) -> tuple:
    """The spans of one step, in time order per lane: data, forward, backward
    and optimizer on the compute lane, the all-reduce on the network lane.
    Not overlapped, the all-reduce starts when the backward pass ends, and the
    optimizer waits for it. Overlapped, one span per bucket, each starting
    when its gradients are ready and the bucket before it is done (see
    exposed_allreduce_s); the optimizer starts when the last one ends."""
    validate.instance_of("phases", phases, StepPhases)
    validate.boolean("overlap", overlap)
    p = phases
    t = 0.0
    spans = []
    for phase, dt in (("data", p.data_s), ("forward", p.forward_s)):
        spans.append(Span("compute", phase, t, t + dt))
        t += dt
    backward_start, backward_end = t, t + p.backward_s
    spans.append(Span("compute", "backward", backward_start, backward_end))
    if not overlap:
        comm = [(backward_end, backward_end + p.allreduce_s)]
    else:
        n, each, comm, free = p.buckets, p.allreduce_s / p.buckets, [], 0.0
        for i in range(1, n + 1):
            start = max(backward_start + i / n * p.backward_s, free)
            comm.append((start, start + each))
            free = start + each
    spans += [Span("network", "all-reduce", a, e) for a, e in comm if e > a]
    opt_start = max(backward_end, comm[-1][1])
    spans.append(Span("compute", "optimizer", opt_start, opt_start + p.optimizer_s))
    return tuple(spans)


# --- the ladder's exercise -------------------------------------------------------


# The two defects the chapter's exercise puts back into the fixed loop: full
# recompute and AdamW's for-loop (experiments.mystery_config undoes these fixes).
MYSTERY_DEFECTS = ("fused_adamw", "no_recompute")


# --- the waterfall ----------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    label: str
    top: float  # MFU before this loss (a fraction of the nominal peak)
    bottom: float  # MFU after it


def waterfall(
    peak_flops_per_s: float,
    ceiling_flops_per_s: float,
    flops_per_step: float,
    fixed_step_s: float,
    savings_s: dict,
    applied,
) -> tuple:
    """MFU lost, bar by bar, from the nominal peak to the MFU of a step
    with only the ``applied`` fixes.

    Bars: the peak down to the MAMF ceiling (the hardware and library), the
    ceiling down to the step with every fix (what no fix here removes), then
    one bar per fix not applied, in ladder order, each adding its measured
    saving back. The model is additive in time: a step without fix i takes
    ``savings_s[i]`` longer, whatever else is applied. On the measured rungs
    (a prefix of the fixes applied) it reproduces the measured times.
    Returns (bars, final MFU).
    """
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive("ceiling_flops_per_s", ceiling_flops_per_s)
    validate.positive("flops_per_step", flops_per_step)
    validate.positive("fixed_step_s", fixed_step_s)
    if not isinstance(savings_s, dict) or not savings_s:
        raise ValueError(
            f"savings_s must be a non-empty dict {{fix: seconds}}, got {savings_s!r}"
        )
    for name, s in savings_s.items():
        _real(f"savings_s[{name!r}]", s)
    if isinstance(applied, str) or not hasattr(applied, "__iter__"):
        raise ValueError(f"applied must be a collection of fix names, got {applied!r}")
    applied = set(applied)
    unknown = applied - set(savings_s)
    if unknown:
        raise ValueError(f"applied names fixes that savings_s lacks: {sorted(unknown)}")
    ceiling_mfu = ceiling_flops_per_s / peak_flops_per_s
    t = float(fixed_step_s)
    level = flops_per_step / (t * peak_flops_per_s)
    bars = [
        Bar("peak to MAMF ceiling", 1.0, ceiling_mfu),
        Bar("ceiling to the fixed step", ceiling_mfu, level),
    ]
    for name, saved in savings_s.items():
        if name in applied:
            continue
        t += saved
        if t <= 0:
            raise ValueError(
                f"without {name!r} the additive model gives a step of {t!r} s: "
                "savings_s is not a set of measured rungs"
            )
        new = flops_per_step / (t * peak_flops_per_s)
        bars.append(Bar(name, level, new))
        level = new
    return tuple(bars), level


# --- published figures the page sets beside its own ----------------------------------


@dataclass(frozen=True)
class PublishedMamf:
    accelerator: str
    mamf_tflops: float  # best measured BF16 matmul
    peak_tflops: float  # the datasheet's dense BF16 peak
    shape: str  # the best shape, M x N x K
    torch: str


# Bekman, ML Engineering open book, compute/accelerator/README.md,
# "Maximum Achievable Matmul FLOPS comparison table", BF16 (benchmark v2:
# mean of 100 iterations after 50 warm-up).
PUBLISHED_MAMF = (
    PublishedMamf("NVIDIA A100 SXM", 271.2, 312, "1024x10240x5120", "2.6.0+cu126"),
    PublishedMamf("NVIDIA H100 SXM", 794.5, 989, "2048x2048x13312", "2.7.0+cu126"),
)


@dataclass(frozen=True)
class PublishedRung:
    change: str
    tokens_per_s: float


# Raschka, LLMs-from-scratch, ch05/10_llm-training-speed/README.md: a 124M GPT on one
# A100, each change applied on top of the ones before ("Avg tok/sec", from torch.compile
# on "Step tok/sec" at the end of epoch 1).
RASCHKA_LADDER = (
    PublishedRung("baseline", 12_525),
    PublishedRung("causal mask on the fly", 12_526),
    PublishedRung("tensor cores (TF32)", 27_648),
    PublishedRung("fused AdamW", 28_399),
    PublishedRung("pinned memory", 28_402),
    PublishedRung("bf16", 45_486),
    PublishedRung("native LayerNorm and GELU", 55_256),
    PublishedRung("FlashAttention (SDPA)", 91_901),
    PublishedRung("torch.compile", 112_046),
    PublishedRung("vocabulary 50,257 -> 50,304", 127_345),
    PublishedRung("bigger batch", 142_156),
)


# Raschka's rungs that make the same change as a rung of this chapter's ladder
# (his "bigger batch" grows the batch a step runs at once, as the micro-batch fix
# does; his vocabulary rung pads 50,257 to a multiple of 64). The other fixes have
# no counterpart there: his loop never tokenised inside the step, synced every
# step or recomputed activations.
PUBLISHED_FIX = {
    "sdpa": "FlashAttention (SDPA)",
    "pad_vocab": "vocabulary 50,257 -> 50,304",
    "fused_adamw": "fused AdamW",
    "bigger_micro_batch": "bigger batch",
    "bf16": "bf16",
    "compile": "torch.compile",
}


def published_speedups() -> dict:
    """{fix: tokens/s after its counterpart in RASCHKA_LADDER over the rung
    before it} for every fix in PUBLISHED_FIX: what the same change bought on
    one A100."""
    by_change = {r.change: i for i, r in enumerate(RASCHKA_LADDER)}
    out = {}
    for fix, change in PUBLISHED_FIX.items():
        i = by_change[change]
        out[fix] = RASCHKA_LADDER[i].tokens_per_s / RASCHKA_LADDER[i - 1].tokens_per_s
    return out


# --- what each fix bought, and the arithmetic of a fix ------------------------------


@dataclass(frozen=True)
class FixEffect:
    """One rung against the one before: the bucket its defect lives in, that
    bucket's time before and after the fix, and what the step saved."""

    fix: str
    bucket: str
    step_before_s: float
    bucket_before_s: float
    bucket_after_s: float
    saved_s: float  # negative where the step got slower

    @property
    def bucket_share(self) -> float:
        """The bucket's share of the step before the fix."""
        return self.bucket_before_s / self.step_before_s

    @property
    def saved_share(self) -> float:
        """The time saved, as a share of the step before the fix."""
        return self.saved_s / self.step_before_s

    def verdict(self, spread: float) -> str:
        """What the saving says, given ``spread``, the relative spread of the
        two rungs' own steps (slowest / fastest - 1, the larger of the two):
        one of SAVING_VERDICTS. A saving no larger than the spread, either
        way, is within the run's noise; one above its bucket's share by more
        than the spread came from elsewhere in the step as well, since the
        fix removes at most its bucket; anything else is the fix's effect."""
        return saving_verdict(self.saved_share, self.bucket_share, spread)


SAVING_VERDICTS = (
    "above the run's noise",
    "within the run's noise",
    "more than its bucket held",
)


def saving_verdict(saved_share: float, bucket_share: float, spread: float) -> str:
    """One of SAVING_VERDICTS for a fix that saved ``saved_share`` of the step
    (negative where it got slower) from a bucket that took ``bucket_share``
    of it, between rungs whose steps spread by ``spread`` (see
    FixEffect.verdict)."""
    saved_share = _real("saved_share", saved_share)
    if saved_share >= 1:
        raise ValueError(
            f"saved_share must be below 1 (a whole step), got {saved_share!r}"
        )
    validate.fraction("bucket_share", bucket_share, allow_zero=True)
    validate.non_negative("spread", spread)
    if abs(saved_share) <= spread:
        return SAVING_VERDICTS[1]
    if saved_share > bucket_share + spread:
        return SAVING_VERDICTS[2]
    return SAVING_VERDICTS[0]


def fix_effects(fixes, step_times_s, buckets) -> tuple:
    """Per rung after the first, what its fix did: ``fixes[i]`` is the fix
    rung i + 1 applied, ``step_times_s`` the rungs' step times (one more than
    the fixes) and ``buckets`` their {bucket: seconds}."""
    fixes, buckets = list(fixes), list(buckets)
    saved = fix_savings(step_times_s)
    if not (len(fixes) == len(saved) == len(buckets) - 1):
        raise ValueError(
            f"{len(fixes)} fixes need {len(fixes) + 1} step times and bucket "
            f"dicts, got {len(saved) + 1} and {len(buckets)}"
        )
    by_name = {f.name: f for f in FIXES}
    out = []
    for i, name in enumerate(fixes):
        validate.one_of(f"fixes[{i}]", name, FIX_NAMES)
        bucket = by_name[name].bucket
        before, after = buckets[i], buckets[i + 1]
        out.append(
            FixEffect(
                name,
                bucket,
                float(step_times_s[i]),
                _real(f"buckets[{i}][{bucket!r}]", before[bucket]),
                _real(f"buckets[{i + 1}][{bucket!r}]", after[bucket]),
                saved[i],
            )
        )
    return tuple(out)


def mfu_after_fix(mfu: float, bucket_share: float) -> float:
    """The MFU of a step once a fix removes a bucket that took
    ``bucket_share`` of it: the FLOPs stay, the time falls to (1 - share),
    so MFU / (1 - share)."""
    validate.fraction("mfu", mfu)
    # below 1: a step cannot take no time
    validate.fraction("bucket_share", bucket_share, allow_zero=True, allow_one=False)
    after = mfu / (1 - bucket_share)
    if after > 1 + 1e-12:
        raise ValueError(
            f"mfu={mfu!r} with bucket_share={bucket_share!r} gives an MFU of "
            f"{after:.1%}, above 100 %"
        )
    return after


def idle_s(window_s: float, intervals) -> float:
    """The time in [0, window_s] that no (start_s, end_s) interval covers:
    a step's idle gaps (overlaps counted once, parts outside the window
    ignored). account's "idle" bucket, for intervals of any bucket."""
    items = []
    for i, iv in enumerate(intervals):
        if not isinstance(iv, (tuple, list)) or len(iv) != 2:
            raise ValueError(f"intervals[{i}] must be (start_s, end_s), got {iv!r}")
        items.append((iv[0], iv[1], "elementwise", 0))
    return account(window_s, items)["idle"]
