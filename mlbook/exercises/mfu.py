"""Exercises of the MFU chapter (notebooks/mfu.md)."""

from __future__ import annotations

from mlbook.common import accelerators, transformer
from mlbook.exercises._core import Mistake, Real, exercise, register
from mlbook.mfu import flops, formulas


def _mfu_1(model, tokens_per_s, seq_len, gpu, dtype):
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    return {
        "mfu": formulas.mfu(tokens_per_s, cfg, seq_len, peak),
        "mfu_6n": formulas.mfu_from_six_nd(flops.n_params(cfg), tokens_per_s, peak),
    }


def _six_n(model, tokens_per_s, gpu, dtype, matmul_only=False, **_):
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    n = flops.matmul_params(cfg) if matmul_only else flops.n_params(cfg)
    return formulas.mfu_from_six_nd(n, tokens_per_s, peak)


def _all_params_with_attention(model, tokens_per_s, seq_len, gpu, dtype):
    """6N + 12Lhs with N = every parameter, the embedding gather included."""
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    attention = 3 * flops.attention_flops_per_token(cfg, seq_len)  # 12 L h s
    per_token = 6 * flops.n_params(cfg) + attention
    return tokens_per_s * per_token / peak


def _with_peak(answer, gpu=None, dtype=None):
    """The answer computed against another peak (another GPU or dtype)."""

    def wrong(**inputs):
        changed = dict(inputs, gpu=gpu or inputs["gpu"], dtype=dtype or inputs["dtype"])
        return _mfu_1(**changed)[answer]

    return wrong


def _times(answer, factor):
    """The ``answer`` times ``factor``: a FLOP count off by that factor."""
    return lambda **inputs: _mfu_1(**inputs)[answer] * factor


_HALF_HINT = (
    "half the right MFU. The peak is H100's dense BF16 one (989 TFLOP/s, not "
    "FP8's or the 2:4 sparse figure), and a multiply-add counts as 2 FLOPs."
)
_PCIE_HINT = "the job runs on H100 SXM GPUs, whose BF16 peak is the SXM one."
_FORWARD_HINT = (
    "the forward pass only. Training costs three forwards' worth: the "
    "backward pass is twice the forward."
)

MFU_1 = exercise(
    "mfu-1",
    level=1,
    kind="compute",
    inputs={
        "model": "Llama-2-7B",
        "tokens_per_s": 12_000,
        "seq_len": 4096,
        "gpu": "H100 SXM",
        "dtype": "bf16",
    },
    answers={
        "mfu": Real(
            "fraction", "MFU with the attention term, 6 N_matmul + 12Lhs", 0.005
        ),
        "mfu_6n": Real("fraction", "MFU with 6N only, N = all parameters", 0.005),
    },
    key=_mfu_1,
    mistakes=(
        Mistake(
            "mfu",
            "6N instead of 6N + 12Lhs",
            "that leaves out the attention term: 12Lhs FLOPs a token more, a "
            "seventh of the total at s = 4096.",
            lambda **i: _six_n(**i),
        ),
        Mistake(
            "mfu",
            "6 N_matmul instead of 6N + 12Lhs",
            "that leaves out the attention term: 12Lhs FLOPs a token more.",
            lambda **i: _six_n(**i, matmul_only=True),
        ),
        Mistake(
            "mfu",
            "N = all parameters in 6N + 12Lhs",
            "the input embedding is a gather, not a matmul: count N_matmul there.",
            _all_params_with_attention,
        ),
        Mistake("mfu", "a halved MFU", _HALF_HINT, _with_peak("mfu", dtype="fp8")),
        Mistake(
            "mfu",
            "the H100 PCIe peak",
            _PCIE_HINT,
            _with_peak("mfu", gpu="H100 PCIe"),
        ),
        Mistake("mfu", "forward FLOPs only", _FORWARD_HINT, _times("mfu", 1 / 3)),
        Mistake(
            "mfu_6n",
            "the MFU with the attention term",
            "this answer counts 6N FLOPs a token only, without 12Lhs.",
            lambda **i: _mfu_1(**i)["mfu"],
        ),
        Mistake(
            "mfu_6n",
            "N_matmul instead of all parameters",
            "here N counts every parameter, the embedding too, as papers that "
            "quote 6N usually do.",
            lambda **i: _six_n(**i, matmul_only=True),
        ),
        Mistake(
            "mfu_6n", "a halved MFU", _HALF_HINT, _with_peak("mfu_6n", dtype="fp8")
        ),
        Mistake(
            "mfu_6n",
            "the H100 PCIe peak",
            _PCIE_HINT,
            _with_peak("mfu_6n", gpu="H100 PCIe"),
        ),
        Mistake("mfu_6n", "forward FLOPs only", _FORWARD_HINT, _times("mfu_6n", 1 / 3)),
    ),
)

MFU_2 = exercise(
    "mfu-2",
    level=1,
    kind="predict",
    answers={
        "mfu_nominal": Real(
            "fraction", "your prediction: the step's MFU against the nominal peak", 0.1
        ),
    },
)

EXERCISES = register(MFU_1, MFU_2)
