"""Seeded artifacts for the chapter's diagnosis exercises, made from its
tested formulas (Korthikanti et al.'s count for a GPT block with dropout and
a 4h GELU MLP, 16-bit activations) and the same on every machine (the
standard library's ``random``, seeded).

- ``memory_bill``: the memory bill of one GPU of a run that does not fit:
  the model state sharded by ZeRO-3, the activations kept without recompute,
  the fp32 logits, against the GPU's memory. Which strategy fits, at what
  cost?
- ``checkpoint_trace``: the activation memory a run keeps after each layer's
  forward, with full recompute configured but some layers left without a
  checkpoint (a wrapping policy that missed them). Which layers, and what
  would wrapping them save?
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mlbook.common import accelerators, validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common.units import GIB
from mlbook.mfu.flops import n_params
from mlbook.recompute import formulas

BILL_GPU = "H100 SXM"
BILL_VOCAB = 50_304  # GPT-2's 50,257 padded to a multiple of 64
BILL_SHARDS = 8  # ZeRO-3 over one node
STATE_BYTES_PER_PARAM = 16  # bf16 weights and gradients, fp32 master and Adam
LOGIT_BYTES = 4  # the loss reads fp32 logits


def _check_seed(seed) -> int:
    """A seed is a whole number at or above 0 (a ValueError names it)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer at or above 0, got {seed!r}")
    return seed


@dataclass(frozen=True)
class MemoryBill:
    """One GPU's memory for a GPT block model (GELU MLP of 4h, dropout, head
    dimension 128, Korthikanti's count), in GiB."""

    seed: int
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    micro_batch: int
    vocab_size: int
    n_params: int
    shards: int
    gpu: str
    hbm_gib: float  # what the GPU gives a process
    state_gib: float  # 16 bytes a parameter over the shards
    activations_gib: float  # kept for backward without recompute
    logits_gib: float  # fp32 logits of the micro-batch

    @property
    def total_gib(self) -> float:
        return self.state_gib + self.activations_gib + self.logits_gib

    def plans(self) -> dict:
        """recompute.checkpoint_plans for the bill's shape."""
        return formulas.checkpoint_plans(
            self.seq_len, self.micro_batch, self.d_model, self.n_heads, self.n_layers
        )

    def total_with(self, strategy: str) -> float:
        """The bill's total in GiB with ``strategy``'s activations."""
        validate.one_of("strategy", strategy, formulas.STRATEGIES)
        kept = self.plans()[strategy].memory_bytes / GIB
        return self.state_gib + kept + self.logits_gib


def _bill(seed, L, h, s, b) -> MemoryBill:
    a = h // 128
    cfg = TransformerConfig(
        L, h, a, 4 * h, BILL_VOCAB, mlp="gelu", tied_embeddings=True
    )
    params = n_params(cfg)
    none = formulas.checkpoint_plans(s, b, h, a, L)["none"].memory_bytes
    return MemoryBill(
        seed=seed,
        n_layers=L,
        d_model=h,
        n_heads=a,
        seq_len=s,
        micro_batch=b,
        vocab_size=BILL_VOCAB,
        n_params=params,
        shards=BILL_SHARDS,
        gpu=BILL_GPU,
        hbm_gib=accelerators.accelerator(BILL_GPU).hbm_usable_bytes / GIB,
        state_gib=STATE_BYTES_PER_PARAM * params / BILL_SHARDS / GIB,
        activations_gib=none / GIB,
        logits_gib=LOGIT_BYTES * b * s * BILL_VOCAB / GIB,
    )


def memory_bill(seed: int) -> MemoryBill:
    """A bill that overflows the GPU without recompute and fits with full
    recompute: layers, width, sequence length and micro-batch drawn by the
    seed until both hold."""
    _check_seed(seed)
    rng = random.Random(seed)
    while True:
        bill = _bill(
            seed,
            rng.choice((24, 32, 40, 48)),
            rng.choice((2048, 2560, 3072, 4096)),
            rng.choice((2048, 4096, 8192)),
            rng.choice((1, 2, 4)),
        )
        if bill.total_gib > bill.hbm_gib >= bill.total_with("full"):
            return bill


def fix(bill: MemoryBill) -> str:
    """The strategy that fits at the fewest extra FLOPs: selective if it
    fits, else full (sqrt(L) segments cost full's third and keep more)."""
    return "selective" if bill.total_with("selective") <= bill.hbm_gib else "full"


def extra_flops(bill: MemoryBill) -> float:
    """The fix's extra FLOPs, a share of a step without recompute."""
    return bill.plans()[fix(bill)].extra_flops_fraction


def headroom_gib(bill: MemoryBill) -> float:
    """What the GPU has left with the fix, GiB."""
    return bill.hbm_gib - bill.total_with(fix(bill))


# --- a memory trace with layers left unwrapped ------------------------------------

# Which layers a wrapping policy left without a checkpoint (0-based indices).
PATTERNS = ("even", "odd", "first_quarter", "last_quarter")


def unwrapped_layers(pattern: str, n_layers: int) -> tuple:
    """The layers ``pattern`` leaves without a checkpoint."""
    validate.one_of("pattern", pattern, PATTERNS)
    L = validate.positive_int("n_layers", n_layers)
    quarter = max(1, L // 4)
    return {
        "even": tuple(range(0, L, 2)),
        "odd": tuple(range(1, L, 2)),
        "first_quarter": tuple(range(quarter)),
        "last_quarter": tuple(range(L - quarter, L)),
    }[pattern]


@dataclass(frozen=True)
class CheckpointTrace:
    """Activation memory kept after each layer's forward (GiB, cumulative),
    with full recompute meant for every layer."""

    seed: int
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    micro_batch: int
    pattern: str  # the planted defect
    kept_gib: tuple

    @property
    def layer(self) -> formulas.LayerBytes:
        """Korthikanti's count for one layer of the trace's shape."""
        return formulas.layer_bytes(
            self.seq_len, self.micro_batch, self.d_model, self.n_heads
        )


def checkpoint_trace(seed: int) -> CheckpointTrace:
    """A run of 16 to 32 layers whose wrapping policy missed the layers of a
    pattern (PATTERNS, by the seed): a checkpointed layer adds its input I
    to what the forward keeps, an unwrapped one all of its A bytes."""
    _check_seed(seed)
    rng = random.Random(seed)
    L, h = rng.choice((16, 24, 32)), rng.choice((2048, 4096))
    s, b, pattern = rng.choice((2048, 4096)), rng.choice((1, 2)), rng.choice(PATTERNS)
    a = h // 128
    layer = formulas.layer_bytes(s, b, h, a)
    missed = set(unwrapped_layers(pattern, L))
    kept, total = [], 0.0
    for i in range(L):
        total += layer.none if i in missed else layer.full
        kept.append(total / GIB)
    return CheckpointTrace(seed, L, h, a, s, b, pattern, tuple(kept))


def wrapping_saves_gib(trace: CheckpointTrace) -> float:
    """What checkpointing the missed layers too saves: (A - I) each, GiB."""
    n = len(unwrapped_layers(trace.pattern, trace.n_layers))
    return n * (trace.layer.none - trace.layer.full) / GIB
