"""The reference training loop's torch-free half: its sizes, the defects it
can switch off and the order the ladder fixes them in, the profiler scopes it
records and the buckets a step's time falls into, and the padded vocabulary
of its model.

The capstone's ladder and ``mlbook.calibrate``'s reference step both run this
loop (``mlbook.common_torch.reference_loop``); the capstone's ``formulas``
names these too, so ``from mlbook import capstone`` keeps
``capstone.ladder_sizes(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbook.common import validate

# The record_function scopes a step is wrapped in ("ladder/step", "ladder/data", ...).
SCOPE_PREFIX = "ladder/"
SCOPES = (
    "step",
    "data",
    "forward",
    "backward",
    "optimizer",
    "log",
    "recompute",
    "comm",
)

BUCKETS = (
    "matmul",
    "attention",
    "elementwise",
    "optimizer",
    "data",
    "sync",
    "comm",
    "recompute",
    "idle",
)
BUCKET_LABELS = {
    "matmul": "matmuls (weights)",
    "attention": "attention",
    "elementwise": "elementwise & norms",
    "optimizer": "optimizer",
    "data": "data loading",
    "sync": "sync & logging",
    "comm": "communication",
    "recompute": "recompute",
    "idle": "idle gaps",
}

# Scopes whose whole duration is one bucket, whatever runs inside them: the
# work there (tokenising in Python, printing, a Python loop over parameters)
# is mostly not operators at all.
SCOPE_BUCKETS = {
    "data": "data",
    "log": "sync",
    "optimizer": "optimizer",
    "recompute": "recompute",
    "comm": "comm",
}

_BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
# Lower-case name fragments, checked in this order (first match wins).
_NAME_RULES = (
    (
        "comm",
        (
            "nccl",
            "gloo",
            "c10d::",
            "allreduce",
            "all_reduce",
            "allgather",
            "all_gather",
            "reduce_scatter",
            "record_param_comms",
        ),
    ),
    ("optimizer", ("optimizer.step", "adam", "multi_tensor_apply", "zero_grad")),
    # the loss's log-softmax is not attention; it must be caught before "softmax"
    ("elementwise", ("log_softmax", "logsoftmax", "nll_loss", "cross_entropy")),
    (
        "attention",
        (
            "scaled_dot_product",
            "flash",
            "fmha",
            "attention",
            "bmm",
            "softmax",
            "masked_fill",
            "triu",
            "aten::matmul",
        ),
    ),
    (
        "matmul",
        (
            "aten::linear",
            "aten::mm",
            "aten::addmm",
            "mmbackward",
            "addmmbackward",
            "linearbackward",
            "gemm",
            "gemv",
            "cutlass",
            "cublas",
            "xmma",
            "wgmma",
            "nvjet",
            "_scaled_mm",
        ),
    ),
    ("data", ("memcpy htod", "memcpyhtod", "pin_memory")),
)


def bucket_of(name: str, scope: str | None = None) -> str:
    """The bucket an interval of a step belongs to, from the operator's (or
    kernel's) name and the innermost ``ladder/`` scope it runs in.

    The scope decides first for data, log (sync), optimizer, recompute and
    comm: everything inside them is that bucket. Otherwise the name does. A
    backward node ("autograd::engine::evaluate_function: MmBackward0") goes
    where its forward op goes. A top-level ``aten::matmul`` is attention:
    in this book's GPT the weight matmuls are ``aten::linear`` and the only
    bare ``@`` are Q K^T and P V. Anything unrecognised is elementwise.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(
            "name must be a non-empty string (an operator or kernel name), "
            f"got {name!r}"
        )
    if scope is not None:
        validate.one_of("scope", scope, SCOPES)
        if scope in SCOPE_BUCKETS:
            return SCOPE_BUCKETS[scope]
    low = name.removeprefix(_BACKWARD_PREFIX).lower()
    for bucket, fragments in _NAME_RULES:
        if any(f in low for f in fragments):
            return bucket
    return "elementwise"


def padded_vocab(vocab_size: int, multiple: int = 64) -> int:
    """The smallest multiple of ``multiple`` at or above ``vocab_size``:
    nanoGPT's 50,257 -> 50,304. The extra rows are never a target; they only
    give the LM head's matmul a width the kernels tile without a ragged edge."""
    validate.positive_int("vocab_size", vocab_size)
    validate.positive_int("multiple", multiple)
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True)
class Fix:
    name: str  # a key: "pretokenise", "sdpa", ...
    label: str  # a short label for tables and figures
    bucket: str  # the bucket the defect shows in, before the fix (what to look at)


# In the order of BRIEF section 8's checklist: is the device busy (data, host
# syncs), kernel efficiency (attention, matmul shapes, unfused optimizer),
# recompute, then the micro-batch, the dtype where the hardware rewards it,
# and the compiler where it pays for itself.
FIXES = (
    Fix("pretokenise", "pre-tokenised data", "data"),
    Fix("log_every_n", "log every N steps", "sync"),
    Fix("sdpa", "fused attention (SDPA)", "attention"),
    Fix("pad_vocab", "vocab padded to 64", "matmul"),
    Fix("fused_adamw", "fused AdamW", "optimizer"),
    Fix("no_recompute", "no recompute", "recompute"),
    Fix("bigger_micro_batch", "bigger micro-batch", "matmul"),
    Fix("bf16", "bf16 autocast", "matmul"),
    Fix("compile", "torch.compile", "elementwise"),
)
FIX_NAMES = tuple(f.name for f in FIXES)


def ladder_fixes(bf16_fast: bool, compile_on: bool) -> tuple:
    """The fixes the ladder applies, in order: bf16 autocast only where the
    probe found bf16 matmuls at least as fast as fp32 on this device, and
    torch.compile only where it is switched on (where its compile time pays)."""
    validate.boolean("bf16_fast", bf16_fast)
    validate.boolean("compile_on", compile_on)
    return tuple(
        f
        for f in FIXES
        if (f.name != "bf16" or bf16_fast) and (f.name != "compile" or compile_on)
    )


@dataclass(frozen=True)
class LadderSizes:
    """Every size the ladder runs at (one place, printed by the page)."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int  # the model's vocabulary before padding (not a multiple of 64)
    seq_len: int
    batch: int  # sequences per optimizer step (the global batch, fixed on every rung)
    small_micro_batch: int  # the defect: sequences per micro-batch before the fix
    steps: int  # timed steps without the profiler, per rung
    profiled_steps: int  # profiled steps, per rung, interleaved with those
    probe_budget_s: float  # seconds for each dtype's MAMF sweep
    tokenizer_vocab: int  # BPE trained at run time (at most vocab_size)
    corpus_bytes: int  # raw text it is trained on and the loop reads
    log_every: int  # after the fix: one .item() every this many steps
    cpu_threads: (
        int | None
    )  # CPU threads the ladder and its ceiling run on (None: torch's default)
    again_budget_s: float  # seconds for measuring rungs again, all rungs together

    @property
    def accumulation(self) -> int:
        """Micro-batches per step before the micro-batch fix (k)."""
        return self.batch // self.small_micro_batch


def ladder_sizes(device: str, small: bool) -> LadderSizes:
    """The sizes for a device: on a GPU a 12-layer model of width 1536 with
    GPT-2's vocabulary (50,257, padded to 50,304 on its rung); otherwise a
    small GPT that fits a 2-core CPU's budget, run on one thread (a second
    thread that another process is using stalls every parallel operator, so a
    shared machine measures one thread far more steadily; the ceiling is then
    probed on one thread too). ``small`` gives test sizes. The seconds for
    measuring rungs again (``again_budget_s``) and, at reader sizes on a CPU,
    two profiled steps a rung keep the page within its 90 s budget: on a
    2-core CPU it took 82-129 s with three and no bound in time (11 runs),
    77-92 s with three and 10 s (4 runs), 78-87 s with two and 8 s (8 runs)."""
    validate.one_of("device", device, ("cpu", "cuda"))
    validate.boolean("small", small)
    if device == "cuda":
        if small:
            return LadderSizes(
                2, 256, 4, 2000, 128, 8, 2, 3, 2, 1.0, 1000, 400_000, 20, None, 10.0
            )
        return LadderSizes(
            12,
            1536,
            12,
            50257,
            1024,
            16,
            2,
            6,
            3,
            10.0,
            4000,
            2_000_000,
            20,
            None,
            30.0,
        )
    if small:
        return LadderSizes(
            1, 768, 6, 1000, 128, 2, 1, 3, 3, 0.8, 1000, 400_000, 20, 1, 5.0
        )  # measuring again for 5 s: a smoke run, whose ladder took 31 s with 15
    return LadderSizes(
        2, 512, 4, 2000, 64, 8, 2, 3, 2, 2.5, 2000, 1_000_000, 20, 1, 8.0
    )
