"""Model FLOPs utilisation (MFU), hardware FLOPs utilisation (HFU) and the
planning arithmetic that turns a FLOP budget into days.

MFU = tokens/s x (6 N_matmul + 12 L h s) / (G x peak)   (PaLM, Chowdhery et
al. 2022, Sec. 4.1 and App. B, who write 6N for the matmul weights).
tokens_per_s is the throughput of the whole job, over all n_gpus;
peak_flops_per_s is one GPU's dense peak for the dtype trained in.

Two FLOP conventions meet in planning. The MFU equation counts 6 N_matmul +
12 L h s FLOPs a token, and so does the book's plan by default; the rule of
thumb T = 6 N D / (G x peak x MFU), with N all parameters, counts 6 N, so the
MFU it divides by is one counted without attention. ``training_days`` takes
the attention term as an option so both can be shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbook.common import validate
from mlbook.common.transformer import TransformerConfig
from mlbook.common.units import DAY_S
from mlbook.mfu.flops import flops_per_token, six_nd

# Rounding of a product of floats: a throughput computed as exactly 100 % of the
# peak may come back as 1.0000000000000002. Far below any real measurement's error.
ROUNDING = 1e-9


class ImpossibleUtilisation(ValueError):
    """A utilisation above 100 %: the peak or the FLOPs convention is wrong."""


def _check_inputs(tokens_per_s, peak_flops_per_s, n_gpus):
    validate.positive("tokens_per_s", tokens_per_s)
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive_int("n_gpus", n_gpus)


def _utilisation(
    what: str, achieved_flops_per_s: float, peak_flops_per_s: float, n_gpus: int
) -> float:
    u = achieved_flops_per_s / (n_gpus * peak_flops_per_s)
    if u > 1 + ROUNDING:
        raise ImpossibleUtilisation(
            f"{what} of {u:.1%} is above 100 %: the peak FLOP/s "
            f"({peak_flops_per_s:.3g} per GPU x {n_gpus}) or the FLOPs "
            "convention must be wrong"
        )
    return u


def mfu(
    tokens_per_s: float,
    cfg: TransformerConfig,
    seq_len: int,
    peak_flops_per_s: float,
    n_gpus: int = 1,
) -> float:
    """MFU with the attention term, 6 N_matmul + 12 L h s FLOPs a token: the
    model's FLOPs, not the hardware's."""
    _check_inputs(tokens_per_s, peak_flops_per_s, n_gpus)
    flops = tokens_per_s * flops_per_token(cfg, seq_len, "train")
    return _utilisation("MFU", flops, peak_flops_per_s, n_gpus)


def hfu(
    tokens_per_s: float,
    cfg: TransformerConfig,
    seq_len: int,
    peak_flops_per_s: float,
    n_gpus: int = 1,
    recompute: bool = True,
) -> float:
    """HFU: the FLOPs the hardware executed, a second forward included when
    activations are recomputed. With full recompute HFU = 4/3 MFU."""
    _check_inputs(tokens_per_s, peak_flops_per_s, n_gpus)
    validate.boolean("recompute", recompute)
    flops = tokens_per_s * flops_per_token(cfg, seq_len, "train", recompute=recompute)
    return _utilisation("HFU", flops, peak_flops_per_s, n_gpus)


def mfu_from_six_nd(
    n_params: float, tokens_per_s: float, peak_flops_per_s: float, n_gpus: int = 1
) -> float:
    """MFU with 6 N FLOPs per token: no attention term, no config needed."""
    _check_inputs(tokens_per_s, peak_flops_per_s, n_gpus)
    validate.positive("n_params", n_params)
    return _utilisation("MFU", 6 * n_params * tokens_per_s, peak_flops_per_s, n_gpus)


def max_tokens_per_s(
    cfg: TransformerConfig, seq_len: int, peak_flops_per_s: float, n_gpus: int = 1
) -> float:
    """The job throughput at 100 % MFU: G x peak / (6 N + 12 L h s).

    No run reaches it; it is where a tokens/s slider must end."""
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive_int("n_gpus", n_gpus)
    return n_gpus * peak_flops_per_s / flops_per_token(cfg, seq_len, "train")


def training_days(
    n_params: float,
    tokens: float,
    peak_flops_per_s: float,
    n_gpus: int,
    mfu: float,
    attention_flops_per_token: float = 0.0,
) -> float:
    """T_days = (6 N + A) D / (G x peak x MFU x 86 400).

    The book plans with N = N_matmul and A = 12 L h s (``3 *
    flops.attention_flops_per_token(cfg, s)``), for an MFU counted as the MFU
    equation counts it. With the default A = 0 and N all parameters it is the
    rule of thumb 6 N D, and ``mfu`` must then be an MFU counted as 6 N.
    """
    _check_plan(peak_flops_per_s, n_gpus, mfu, attention_flops_per_token)
    total_flops = six_nd(n_params, tokens) + attention_flops_per_token * tokens
    return total_flops / (n_gpus * peak_flops_per_s * mfu * DAY_S)


def _check_plan(peak_flops_per_s, n_gpus, mfu, attention_flops_per_token) -> None:
    validate.positive("peak_flops_per_s", peak_flops_per_s)
    validate.positive_int("n_gpus", n_gpus)
    validate.non_negative("attention_flops_per_token", attention_flops_per_token)
    if isinstance(mfu, (int, float)) and not isinstance(mfu, bool) and mfu > 1:
        raise ImpossibleUtilisation(
            f"mfu={mfu!r} is above 1: no job runs faster than its peak"
        )
    validate.fraction("mfu", mfu)


def nanogpt_estimate_mfu(
    n_params: float,
    n_layers: int,
    n_heads: int,
    head_dim: int,
    seq_len: int,
    tokens_per_s: float,
    peak_flops_per_s: float = 312e12,
) -> float:
    """nanoGPT's estimate_mfu convention: 6 N + 12 L H Q T per token, where N
    excludes position embeddings, H Q = h and T = s; per-GPU, A100 bf16 peak.
    Written here to show that it is the same formula as ``mfu``."""
    validate.positive("n_params", n_params)
    for name, value in (
        ("n_layers", n_layers),
        ("n_heads", n_heads),
        ("head_dim", head_dim),
        ("seq_len", seq_len),
    ):
        validate.positive_int(name, value)
    _check_inputs(tokens_per_s, peak_flops_per_s, 1)
    flops_per_tok = 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len
    return _utilisation("MFU", flops_per_tok * tokens_per_s, peak_flops_per_s, 1)


@dataclass(frozen=True)
class PublishedRun:
    model: str
    hardware: str
    n_chips: int | None  # None where the source gives no count
    mfu: float
    source: str
    hfu: float | None = None  # where the source reports it too


PUBLISHED_MFU = (
    PublishedRun("GPT-3 175B", "V100", None, 0.213, "PaLM, arXiv:2204.02311, Table 3"),
    PublishedRun(
        "Gopher 280B", "TPU v3", 4096, 0.325, "PaLM, arXiv:2204.02311, Table 3"
    ),
    PublishedRun("MT-NLG 530B", "A100", 2240, 0.302, "PaLM, arXiv:2204.02311, Table 3"),
    PublishedRun(
        "PaLM 540B", "TPU v4", 6144, 0.462, "PaLM, arXiv:2204.02311, Table 3", hfu=0.578
    ),
    PublishedRun(
        "Llama 3 405B, s=8192", "H100", 8192, 0.43, "Llama 3, arXiv:2407.21783, Table 4"
    ),
    PublishedRun(
        "Llama 3 405B, s=8192",
        "H100",
        16_384,
        0.41,
        "Llama 3, arXiv:2407.21783, Table 4",
    ),
    PublishedRun(
        "Llama 3 405B, s=131072",
        "H100",
        16_384,
        0.38,
        "Llama 3, arXiv:2407.21783, Table 4",
    ),
)
