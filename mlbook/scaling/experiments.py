"""The scaling chapter's measurements with PyTorch's own engines: gloo
all-reduce times, DDP's bucketed overlap, and the state each rank holds under
ZeroRedundancyOptimizer (ZeRO-1) and FSDP2 (ZeRO-3).

Each function forks a process group on this host
(``mlbook.common_torch.launch.fork_group``; the ranks run
``mlbook.scaling.dist_script``) over gloo on the loopback interface, one CPU
thread per rank, and returns a frozen dataclass of numbers.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch.launch import fork_group_formed
from mlbook.scaling import dist_script

# 1 KiB to 64 MiB, a factor of 4 apart
DEFAULT_SIZES = tuple(1024 * 4**i for i in range(9))


def _launch(
    task: str, args: list[str], nproc: int, timeout_s: float
) -> tuple[dict, float, int]:
    with tempfile.TemporaryDirectory(prefix=f"mlbook-scaling-{task}-") as tmp:
        out = Path(tmp) / "report.json"
        argv = ["--task", task, "--out", str(out), "--timeout-s", str(timeout_s), *args]
        launch, redone = fork_group_formed(
            dist_script.main, argv, nproc=nproc, timeout_s=timeout_s
        )
        if launch.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"the {task} ranks failed (exit {launch.returncode}):\n"
                f"{launch.output[-4000:]}"
            )
        return json.loads(out.read_text()), launch.wall_s, redone


def _model_args(cfg: TransformerConfig, seq_len: int, batch: int) -> list[str]:
    if (
        cfg.mlp != "gelu"
        or cfg.d_ff != 4 * cfg.d_model
        or cfg.tied_embeddings
        or cfg.n_kv_heads != cfg.n_heads
    ):
        raise ValueError(
            "cfg must be a tiny_config() shape (GELU MLP, d_ff = 4 h, untied, no GQA): "
            f"got {cfg}"
        )
    validate.positive_int("seq_len", seq_len)
    validate.positive_int("batch", batch)
    return [
        "--layers",
        str(cfg.n_layers),
        "--d-model",
        str(cfg.d_model),
        "--heads",
        str(cfg.n_heads),
        "--vocab",
        str(cfg.vocab_size),
        "--seq",
        str(seq_len),
        "--batch",
        str(batch),
    ]


def _check_ranks(n_ranks):
    validate.positive_int("n_ranks", n_ranks)
    if n_ranks < 2:
        raise ValueError(
            "n_ranks must be at least 2 (one rank has no one to talk to), "
            f"got {n_ranks}"
        )


# ---------------------------------------------------------------------------
# all-reduce sweep
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AllReduceSweep:
    """Seconds of one all-reduce per message size: ``best_s`` is the best
    block's median; ``blocks_s`` every block's median."""

    n_ranks: int
    sizes_bytes: tuple
    best_s: tuple
    blocks_s: tuple
    rounds: int  # re-measurement rounds of sizes far from the fit
    flush_bytes: int  # scratch each rank writes over before each all-reduce
    wall_s: float
    setup_retries: int
    method: str = ""  # how it was measured, in words (the flush and its cap)


def l3_bytes() -> int | None:
    """This CPU's last-level (L3) cache in bytes, from sysfs; None where it
    does not say."""
    try:
        text = (
            Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        )
    except OSError:
        return None
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    try:
        return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)
    except ValueError:
        return None


FLUSH_FLOOR_BYTES = 64 * 2**20
# What the flush may write is capped by what the measurement needs, not by the
# cache the machine reports: a 2-core VM can report its host's whole L3 (300
# and 480 MiB seen), and twice that, written by every rank before every
# all-reduce, made the sweep slower than its page's budget. Four times the
# largest message covers the bytes one all-reduce touches (its buffer, the
# received pieces and the sums), the most a flush has to push out.
FLUSH_CAP_MESSAGES = 4


def flush_bytes_for(sizes_bytes, l3: int | None = None) -> int:
    """The scratch each rank writes over before each all-reduce: twice the
    last-level cache (``l3``, by default what ``l3_bytes`` reports), at least
    64 MiB, and at most four times the largest message (256 MiB for the
    default sizes up to 64 MiB)."""
    sizes = [
        validate.positive_int(f"sizes_bytes[{i}]", s) for i, s in enumerate(sizes_bytes)
    ]
    if not sizes:
        raise ValueError("sizes_bytes must name at least one message size")
    cache = l3_bytes() if l3 is None else validate.non_negative("l3", l3)
    cap = max(FLUSH_FLOOR_BYTES, FLUSH_CAP_MESSAGES * max(sizes))
    return int(min(cap, max(FLUSH_FLOOR_BYTES, 2 * (cache or 0))))


def flush_method(flush_bytes: int, sizes_bytes, l3: int | None, chosen=True) -> str:
    """The flush in words, with its cap (``chosen``: sized by
    ``flush_bytes_for``, not by the caller), for the sweep's ``method``."""
    mib = 2**20
    if not flush_bytes:
        return "no cache flush (0 MiB) before the all-reduces"
    said = f"before each all-reduce every rank writes over {flush_bytes / mib:,.0f} MiB"
    if not chosen:
        return said + " of scratch"
    reported = f"{l3 / mib:,.0f} MiB" if l3 else "none"
    cap = max(FLUSH_FLOOR_BYTES, FLUSH_CAP_MESSAGES * max(sizes_bytes))
    return (
        f"{said} of scratch: twice the last-level cache the CPU reports "
        f"({reported}), at least {FLUSH_FLOOR_BYTES / mib:.0f} MiB and capped at "
        f"{cap / mib:,.0f} MiB ({FLUSH_CAP_MESSAGES} x the largest message)"
    )


def allreduce_sweep(
    sizes_bytes=DEFAULT_SIZES,
    n_ranks: int = 2,
    blocks: int = 3,
    budget_s: float = 0.1,
    rounds: int = 3,
    flush_bytes: int | None = None,
    timeout_s: float = 120.0,
    repeats: int = 5,
    blocks_again: int | None = None,
) -> AllReduceSweep:
    """Time ``dist.all_reduce`` of fp32 buffers of each size over ``n_ranks``
    gloo ranks. Each round times a block of ``repeats`` all-reduces of every
    size in turn and keeps each block's median; as many rounds as fit in
    about ``budget_s`` seconds per size, and at least ``blocks``.

    Before every all-reduce each rank writes over ``flush_bytes`` of scratch
    memory (default ``flush_bytes_for(sizes_bytes)``: twice this CPU's L3
    cache, at least 64 MiB, at most four times the largest message; 0 turns
    it off), so each one starts with cold caches, as bytes arriving over a
    link would. Without it, messages that fit a cache run at that cache's
    speed and the loopback "link" looks faster for mid-sized messages. The
    result's ``method`` says what was written.

    While some size's best block lies more than 25 % from the alpha-beta
    fit, all sizes are measured again (``blocks_again`` blocks, by default
    ``blocks``), up to ``rounds`` more times:
    interference from other processes only ever adds time, so more blocks
    can only find the undisturbed ones."""
    _check_ranks(n_ranks)
    sizes = tuple(sizes_bytes)
    for i, s in enumerate(sizes):
        validate.positive_int(f"sizes_bytes[{i}]", s)
        if s % 4:
            raise ValueError(
                f"sizes_bytes[{i}]={s} must be a multiple of 4 (fp32 values)"
            )
    validate.positive_int("blocks", blocks)
    validate.positive_int("repeats", repeats)
    blocks_again = blocks if blocks_again is None else blocks_again
    validate.positive_int("blocks_again", blocks_again)
    validate.positive("budget_s", budget_s)
    validate.non_negative("rounds", rounds)
    l3, chosen = l3_bytes(), flush_bytes is None
    if chosen:
        flush_bytes = flush_bytes_for(sizes, l3 or 0)
    validate.non_negative("flush_bytes", flush_bytes)
    validate.positive("timeout_s", timeout_s)
    rep, wall, redone = _launch(
        "allreduce",
        [
            "--sizes",
            ",".join(map(str, sizes)),
            "--blocks",
            str(blocks),
            "--budget-s",
            str(budget_s),
            "--rounds",
            str(int(rounds)),
            "--flush-bytes",
            str(int(flush_bytes)),
            "--repeats",
            str(repeats),
            "--blocks-again",
            str(blocks_again),
        ],
        n_ranks,
        timeout_s,
    )
    return AllReduceSweep(
        rep["n_ranks"],
        tuple(rep["sizes"]),
        tuple(min(b) for b in rep["blocks"]),
        tuple(tuple(b) for b in rep["blocks"]),
        rep["rounds"],
        int(flush_bytes),
        wall,
        redone,
        flush_method(int(flush_bytes), sizes, l3, chosen),
    )


# ---------------------------------------------------------------------------
# DDP overlap
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OverlapRow:
    """One bucket size: medians of forward + backward with DDP's all-reduce
    (sync) and inside ``no_sync`` (no communication), and the exposed
    communication: the median over steps of sync - no_sync, each pair timed
    back to back so that a change in the machine's load hits both."""

    bucket_cap_mb: float
    buckets: int
    sync_s: float
    no_sync_s: float
    exposed_s: float


@dataclass(frozen=True)
class OverlapRun:
    n_ranks: int
    n_params: int
    grad_bytes: int
    tokens_per_rank: int
    rows: tuple
    allreduce_s: float  # one all-reduce of all the gradients at once, on its own
    steps: int
    wall_s: float
    setup_retries: int


def ddp_overlap(
    cfg: TransformerConfig,
    seq_len: int,
    batch: int,
    bucket_caps_mb=(1, 4, 25, 1000),
    steps: int = 6,
    n_ranks: int = 2,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> OverlapRun:
    """Forward + backward of the small GPT under DDP on ``n_ranks`` gloo ranks
    (``batch`` sequences of ``seq_len`` per rank), with gradient all-reduce
    and without (``no_sync``), alternating, ``steps`` of each per bucket size.
    Also times one all-reduce of a buffer as large as all the gradients."""
    _check_ranks(n_ranks)
    caps = tuple(bucket_caps_mb)
    if not caps:
        raise ValueError("bucket_caps_mb must name at least one bucket size")
    for i, c in enumerate(caps):
        validate.positive(f"bucket_caps_mb[{i}]", c)
    validate.positive_int("steps", steps)
    validate.positive("timeout_s", timeout_s)
    args = _model_args(cfg, seq_len, batch) + [
        "--caps",
        ",".join(map(str, caps)),
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        "--blocks",
        "3",
        "--budget-s",
        "0.3",
    ]
    rep, wall, redone = _launch("overlap", args, n_ranks, timeout_s)
    rows = tuple(
        OverlapRow(
            r["bucket_cap_mb"],
            r["buckets"],
            statistics.median(r["sync_s"]),
            statistics.median(r["no_sync_s"]),
            statistics.median(
                a - b for a, b in zip(r["sync_s"], r["no_sync_s"], strict=True)
            ),
        )
        for r in rep["rows"]
    )
    return OverlapRun(
        rep["n_ranks"],
        rep["n_params"],
        rep["grad_bytes"],
        rep["tokens_per_rank"],
        rows,
        min(rep["allreduce_blocks"]),
        steps,
        wall,
        redone,
    )


# ---------------------------------------------------------------------------
# ZeRO-1 and FSDP2
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """Bytes of one kind of tensor a rank holds: logical (elements x element
    size, what a formula counts) and in storage (what was allocated)."""

    bytes: int
    storage_bytes: int
    tensors: int


@dataclass(frozen=True)
class RankState:
    rank: int
    weights: Held
    grads: Held
    moments: Held  # Adam's exp_avg and exp_avg_sq
    steps: Held  # Adam's step counters: one scalar per parameter tensor
    owned_params: (
        int  # elements of the parameters whose optimizer state this rank keeps
    )
    owned_tensors: int

    @property
    def held_bytes(self) -> int:
        """Weights, gradients and Adam's moments, as a formula counts them."""
        return self.weights.bytes + self.grads.bytes + self.moments.bytes

    @property
    def padding_bytes(self) -> int:
        """Storage allocated for weights and gradients beyond their elements."""
        return sum(h.storage_bytes - h.bytes for h in (self.weights, self.grads))


@dataclass(frozen=True)
class ShardedRun:
    """One sharded engine's run: each rank's state and the training it did."""

    engine: str  # "ZeroRedundancyOptimizer" or "FSDP2 fully_shard"
    stage: int  # the ZeRO stage it implements
    ranks: tuple  # RankState per rank
    losses: tuple  # mean loss over ranks, per step
    weight_gap: float  # largest |w - w_ref| over ranks after the last step
    weight_gap_rel: float  # ||w - w_ref|| / ||w_ref - w_0||, the largest over ranks


@dataclass(frozen=True)
class ShardedRuns:
    n_ranks: int
    n_params: int
    shapes: dict  # parameter name -> shape
    ref_losses: tuple  # one process, whole batch
    zero1: ShardedRun
    fsdp2: ShardedRun
    wall_s: float
    setup_retries: int

    @property
    def max_loss_gap(self) -> float:
        return max(
            abs(a - b)
            for run in (self.zero1, self.fsdp2)
            for a, b in zip(run.losses, self.ref_losses, strict=True)
        )


def _held(d: dict) -> Held:
    return Held(d["bytes"], d["storage_bytes"], d["tensors"])


def _sharded(engine: str, stage: int, per_rank: list) -> ShardedRun:
    ranks = tuple(
        RankState(
            r,
            _held(d["weights"]),
            _held(d["grads"]),
            _held(d["moments"]),
            _held(d["steps"]),
            d["owned_params"],
            d["owned_tensors"],
        )
        for r, d in enumerate(per_rank)
    )
    return ShardedRun(
        engine,
        stage,
        ranks,
        tuple(per_rank[0]["losses"]),
        max(d["weight_gap"] for d in per_rank),
        max(d["weight_gap_rel"] for d in per_rank),
    )


def sharded_state(
    cfg: TransformerConfig,
    seq_len: int,
    batch: int,
    steps: int = 3,
    n_ranks: int = 3,
    lr: float = 1e-3,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> ShardedRuns:
    """Train the small GPT ``steps`` Adam steps (fp32) on ``n_ranks`` gloo
    ranks, ``batch`` sequences each, under ZeroRedundancyOptimizer (with DDP)
    and under FSDP2 ``fully_shard`` (each block, then the root); count the
    bytes each rank holds after the last step, and compare losses and weights
    with one process training on the whole batch (``batch * n_ranks``)."""
    _check_ranks(n_ranks)
    validate.positive_int("steps", steps)
    validate.positive("lr", lr)
    validate.positive("timeout_s", timeout_s)
    args = _model_args(cfg, seq_len, batch) + [
        "--steps",
        str(steps),
        "--lr",
        str(lr),
        "--seed",
        str(seed),
    ]
    rep, wall, redone = _launch("sharded", args, n_ranks, timeout_s)
    return ShardedRuns(
        rep["n_ranks"],
        rep["n_params"],
        {k: tuple(v) for k, v in rep["shapes"].items()},
        tuple(rep["ref_losses"]),
        _sharded("ZeroRedundancyOptimizer", 1, rep["zero1"]),
        _sharded("FSDP2 fully_shard", 3, rep["fsdp2"]),
        wall,
        redone,
    )
