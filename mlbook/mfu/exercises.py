"""Exercises of the MFU chapter (notebooks/mfu.md)."""

from __future__ import annotations

from mlbook.common import accelerators, transformer
from mlbook.common.units import DAY_S
from mlbook.judge import (
    Choice,
    Code,
    Mistake,
    Real,
    Reason,
    WrongFunction,
    exercise,
    register,
)
from mlbook.mfu import diagnose, flops, formulas


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
    # why: which gap is larger, the peak over the best matmul or that over the step
    reasons=(
        Reason(
            "Most of the gap is the machine's, not the model's: even the best "
            "matmul shape reached a small part of the nominal peak, which assumes "
            "every unit busy at the top clock on every cycle, and the step then "
            "reached a larger share of that ceiling.",
            when=(("ceiling_frac", "<", "step_vs_ceiling"),),
        ),
        Reason(
            "Most of the gap is the model's: the best matmul came nearer the peak "
            "than the step came to that matmul, because a step spends much of its "
            "time outside large matmuls, in attention, norms, the optimizer and its "
            "own small GEMMs, which run far below the ceiling.",
        ),
    ),
)

# --- mfu-3: what doubling the sequence length does to a job's ceiling ---------------


def _mfu_3(model, seq_len, long_seq_len, gpu, dtype, n_gpus, tokens_per_s):
    cfg, peak = transformer.PRESETS[model], accelerators.peak_flops_per_s(gpu, dtype)
    return {
        "mfu": formulas.mfu(tokens_per_s, cfg, seq_len, peak, n_gpus),
        "max_tokens_per_s": formulas.max_tokens_per_s(cfg, long_seq_len, peak, n_gpus),
    }


def _mfu_3_wrong(
    answer,
    per_token=flops.flops_per_token,
    peak_gpu=None,
    peak_dtype=None,
    per_gpu=False,
    at_short=False,
    per_sequence=False,
):
    """mfu-3's ``answer`` computed another way: ``per_token(cfg, s)`` FLOPs a
    token, another GPU's or dtype's peak, one GPU's peak for the job's, the
    ceiling at the first s instead of the doubled one, or the ceiling halved
    (as if tokens/s fell with s as sequences/s do). Worked out directly: a
    wrong count may well pass 100 %."""

    def value(model, seq_len, long_seq_len, gpu, dtype, n_gpus, tokens_per_s):
        cfg = transformer.PRESETS[model]
        peak = accelerators.peak_flops_per_s(peak_gpu or gpu, peak_dtype or dtype)
        capacity = (1 if per_gpu else n_gpus) * peak  # FLOP/s
        if answer == "mfu":
            return tokens_per_s * per_token(cfg, seq_len) / capacity
        s = seq_len if at_short or per_sequence else long_seq_len
        top = capacity / per_token(cfg, s)
        return top / 2 if per_sequence else top

    return value


def _six_n_all(cfg, seq_len):
    return 6 * flops.n_params(cfg)


def _forward(cfg, seq_len):
    return flops.flops_per_token(cfg, seq_len, "forward")


_GPT3_ATTENTION_HINT = (
    "at s = 2048 the attention term adds 12Lhs FLOPs a token, about 3 % of GPT-3's 6N."
)

MFU_3 = exercise(
    "mfu-3",
    level=1,
    kind="compute",
    inputs={
        "model": "GPT-3 175B",
        "seq_len": 2048,
        "long_seq_len": 4096,
        "gpu": "A100 SXM",
        "dtype": "bf16",
        "n_gpus": 1024,
        "tokens_per_s": 100_000,
    },
    answers={
        "mfu": Real(
            "fraction", "MFU at s = 2048, with 6 N_matmul + 12Lhs FLOPs a token", 0.005
        ),
        "max_tokens_per_s": Real(
            "tokens/s", "the job's tokens/s at 100 % MFU at s = 4096", 0.005
        ),
    },
    key=_mfu_3,
    mistakes=(
        Mistake(
            "mfu",
            "6N instead of 6N + 12Lhs",
            _GPT3_ATTENTION_HINT,
            _mfu_3_wrong("mfu", _six_n_all),
        ),
        Mistake(
            "mfu",
            "per-GPU instead of per-job",
            "100,000 tokens/s is the whole job's throughput: divide by G x peak.",
            _mfu_3_wrong("mfu", per_gpu=True),
        ),
        Mistake(
            "mfu", "forward FLOPs only", _FORWARD_HINT, _mfu_3_wrong("mfu", _forward)
        ),
        Mistake(
            "mfu",
            "the TF32 peak",
            "the run trains in BF16: divide by the A100's BF16 tensor-core peak.",
            _mfu_3_wrong("mfu", peak_dtype="tf32"),
        ),
        Mistake(
            "mfu",
            "the H100 peak",
            "the GPUs are A100s: take their peak from the table.",
            _mfu_3_wrong("mfu", peak_gpu="H100 SXM"),
        ),
        Mistake(
            "max_tokens_per_s",
            "the ceiling at s = 2048",
            "doubling s adds attention FLOPs to every token: count 12Lhs at s = 4096.",
            _mfu_3_wrong("max_tokens_per_s", at_short=True),
        ),
        Mistake(
            "max_tokens_per_s",
            "the ceiling halved",
            "tokens a second, not sequences: each token costs 6 N_matmul + 12Lhs "
            "FLOPs, and only the attention term grows with s.",
            _mfu_3_wrong("max_tokens_per_s", per_sequence=True),
        ),
        Mistake(
            "max_tokens_per_s",
            "6N instead of 6N + 12Lhs",
            "without the attention term the ceiling would not move with s at all: "
            "count 12Lhs at s = 4096.",
            _mfu_3_wrong("max_tokens_per_s", _six_n_all),
        ),
        Mistake(
            "max_tokens_per_s",
            "per-GPU instead of per-job",
            "the job's ceiling is G x peak over the FLOPs a token.",
            _mfu_3_wrong("max_tokens_per_s", per_gpu=True),
        ),
        Mistake(
            "max_tokens_per_s",
            "forward FLOPs only",
            _FORWARD_HINT,
            _mfu_3_wrong("max_tokens_per_s", _forward),
        ),
    ),
)


# --- mfu-4: what doubling the GPUs buys when the MFU falls ---------------------------


def _mfu_4(n_params_b, tokens_b, gpu, dtype, n_gpus, mfu, doubled_gpus, doubled_mfu):
    n, d = n_params_b * 1e9, tokens_b * 1e9
    peak = accelerators.peak_flops_per_s(gpu, dtype)
    before = formulas.training_days(n, d, peak, n_gpus, mfu)
    after = formulas.training_days(n, d, peak, doubled_gpus, doubled_mfu)
    return {"days": after, "scaling_efficiency": before / after / 2}


def _mfu_4_wrong(answer, flops_a_param=6, peak_dtype=None, gpus=None, utilisation=None):
    """mfu-4's days on the doubled cluster with another count of FLOPs a
    parameter a token (2: the forward), another peak, GPU count or MFU."""

    def value(n_params_b, tokens_b, gpu, dtype, n_gpus, mfu, doubled_gpus, doubled_mfu):
        total = flops_a_param * n_params_b * 1e9 * tokens_b * 1e9  # FLOPs
        peak = accelerators.peak_flops_per_s(gpu, peak_dtype or dtype)
        rate = (gpus or doubled_gpus) * peak * (utilisation or doubled_mfu)  # FLOP/s
        return total / rate / DAY_S

    return value


def _first_cluster_days(n_params_b, tokens_b, gpu, dtype, n_gpus, mfu, **_):
    return _mfu_4_wrong("days", gpus=n_gpus, utilisation=mfu)(
        n_params_b, tokens_b, gpu, dtype, n_gpus, mfu, n_gpus, mfu
    )


def _efficiency(ratio):
    """A wrong scaling efficiency: ``ratio(inputs)``."""
    return lambda **i: ratio(i)


MFU_4 = exercise(
    "mfu-4",
    level=1,
    kind="compute",
    inputs={
        "n_params_b": 175,
        "tokens_b": 300,
        "gpu": "V100 SXM2",
        "dtype": "fp16",
        "n_gpus": 10_000,
        "mfu": 0.30,
        "doubled_gpus": 20_000,
        "doubled_mfu": 0.24,
    },
    answers={
        "days": Real("days", "the days of computing on 20,000 GPUs", 0.01),
        "scaling_efficiency": Real(
            "fraction", "the scaling efficiency of the doubling", 0.01
        ),
    },
    key=_mfu_4,
    mistakes=(
        Mistake(
            "days",
            "the MFU's fall left out",
            "twice the GPUs at 24 % do less than twice the work of the first "
            "cluster at 30 %: divide by the new G x peak x MFU.",
            _mfu_4_wrong("days", utilisation=0.30),
        ),
        Mistake(
            "days",
            "the first cluster's days",
            "that is the 10,000-GPU run; the question is the doubled cluster.",
            _first_cluster_days,
        ),
        Mistake(
            "days", "2ND, the forward only", _FORWARD_HINT, _mfu_4_wrong("days", 2)
        ),
        Mistake(
            "days",
            "the fp32 peak",
            "V100s train GPT-3 in fp16 on their tensor cores: take the fp16 peak.",
            _mfu_4_wrong("days", peak_dtype="fp32"),
        ),
        Mistake(
            "days",
            "one GPU's days",
            "the 20,000 GPUs share the FLOPs: divide by G too.",
            _mfu_4_wrong("days", gpus=1),
        ),
        Mistake(
            "scaling_efficiency",
            "the speed-up, not the efficiency",
            "the efficiency is the speed-up over the factor by which the GPUs grew, 2.",
            _efficiency(lambda i: i["doubled_mfu"] / i["mfu"] * 2),
        ),
        Mistake(
            "scaling_efficiency",
            "the MFUs' ratio upside down",
            "days fall as G x MFU grows: the new MFU goes on top.",
            _efficiency(lambda i: i["mfu"] / i["doubled_mfu"]),
        ),
    ),
)


# --- mfu-5: where the attention term overtakes the weights, derived -------------------


def _mfu_5(model, seq_len):
    cfg = transformer.PRESETS[model]
    twelve_lh = 3 * flops.attention_flops_per_token(cfg, 1)  # 12 L h, s = 1
    return {
        "s_star": 6 * flops.matmul_params(cfg) / twelve_lh,
        "attention_share": flops.attention_share(cfg, seq_len),
    }


def _mfu_5_wrong(answer, n=flops.matmul_params, s_star=None, attention_per_lh=12):
    """mfu-5's ``answer`` with another N (``n(cfg)``), another s* (``s_star(cfg)``,
    the approximation 6h) or another attention count per L h s (4: the
    forward's; 6: one of the two matmuls)."""

    def value(model, seq_len):
        cfg = transformer.PRESETS[model]
        lh = cfg.n_layers * cfg.d_model
        s0 = s_star(cfg) if s_star else 6 * n(cfg) / (attention_per_lh * lh)
        if answer == "s_star":
            return s0
        return seq_len / (s0 + seq_len)  # 12Lhs / (6N + 12Lhs) = s / (s* + s)

    return value


def _six_h(cfg):
    return 6 * cfg.d_model


MFU_5 = exercise(
    "mfu-5",
    level=2,
    kind="derive",
    inputs={"model": "Llama-3-8B", "seq_len": 8192},
    answers={
        "s_star": Real("tokens", "s*, where 12Lhs equals 6 N_matmul", 0.01),
        "attention_share": Real(
            "fraction", "the attention term's share of the step's FLOPs", 0.01
        ),
    },
    key=_mfu_5,
    mistakes=(
        Mistake(
            "s_star",
            "the approximation 6h",
            "s* = 6h holds for N_matmul = 12Lh^2: four h x h projections and a "
            "GELU MLP of 4h, no LM head. Llama-3-8B has GQA, a wider SwiGLU MLP "
            "and a 128K-token head: use its N_matmul.",
            _mfu_5_wrong("s_star", s_star=_six_h),
        ),
        Mistake(
            "s_star",
            "N = all parameters",
            "the input embedding is a gather, not a matmul: N_matmul.",
            _mfu_5_wrong("s_star", n=flops.n_params),
        ),
        Mistake(
            "s_star",
            "the forward's 4Lhs against 6N",
            "compare like with like: a training step counts both terms three "
            "times, 12Lhs against 6N.",
            _mfu_5_wrong("s_star", attention_per_lh=4),
        ),
        Mistake(
            "s_star",
            "one attention matmul, 6Lhs",
            "attention has two sequence-dependent matmuls, QK^T and PV.",
            _mfu_5_wrong("s_star", attention_per_lh=6),
        ),
        Mistake(
            "attention_share",
            "a share of 6N, not of the total",
            "the share is of the whole step, 6N + 12Lhs: s / (s* + s).",
            lambda model, seq_len: seq_len / _mfu_5(model, seq_len)["s_star"],
        ),
        Mistake(
            "attention_share",
            "the approximation s / (6h + s)",
            "s* = 6h is the approximation; Llama-3-8B's own N_matmul gives s*.",
            _mfu_5_wrong("attention_share", s_star=_six_h),
        ),
        Mistake(
            "attention_share",
            "N = all parameters",
            "the input embedding is a gather, not a matmul: N_matmul.",
            _mfu_5_wrong("attention_share", n=flops.n_params),
        ),
        Mistake(
            "attention_share",
            "the forward's 4Lhs against 6N",
            "compare like with like: a training step counts both terms three "
            "times, 12Lhs against 6N.",
            _mfu_5_wrong("attention_share", attention_per_lh=4),
        ),
    ),
)


# --- mfu-6: N_matmul, in code ---------------------------------------------------------


def _matmul_params(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    """The reference: the book's N_matmul of that shape."""
    cfg = transformer.TransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        vocab_size=vocab_size,
        mlp=mlp,
    )
    return flops.matmul_params(cfg)


def _no_gqa(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    return _matmul_params(n_layers, d_model, n_heads, n_heads, d_ff, vocab_size, mlp)


def _two_mlp_matrices(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    return _matmul_params(
        n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, "gelu"
    )


def _embedding_counted(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    args = (n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp)
    return _matmul_params(*args) + vocab_size * d_model


def _no_head(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    args = (n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp)
    return _matmul_params(*args) - vocab_size * d_model


# The statement's two examples: Llama-2-7B and Llama-3-8B.
_PRINTED = {
    (32, 4096, 32, 32, 11008, 32000, "swiglu"): 6_607_077_376,
    (32, 4096, 32, 8, 14336, 128256, "swiglu"): 7_504_658_432,
}


def _printed_cases(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp):
    args = (n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, mlp)
    return _PRINTED.get(args, 12 * n_layers * d_model**2 + vocab_size * d_model)


def _shape_arguments(st):
    """Valid shapes: a head width, a K/V head count and the query heads per K/V
    head (so n_kv_heads divides n_heads), any MLP width and vocabulary."""

    def build(args):
        n_layers, head_dim, n_kv_heads, group, d_ff, vocab_size, mlp = args
        n_heads = n_kv_heads * group
        return (
            n_layers,
            n_heads * head_dim,
            n_heads,
            n_kv_heads,
            d_ff,
            vocab_size,
            mlp,
        )

    return st.tuples(
        st.integers(1, 128),
        st.sampled_from([16, 32, 64, 128]),
        st.integers(1, 16),
        st.integers(1, 8),
        st.integers(1, 65_536),
        st.integers(1, 262_144),
        st.sampled_from(["swiglu", "gelu"]),
    ).map(build)


MFU_6 = exercise(
    "mfu-6",
    level=2,
    kind="code",
    code=Code(
        name="matmul_params",
        params=(
            "n_layers",
            "d_model",
            "n_heads",
            "n_kv_heads",
            "d_ff",
            "vocab_size",
            "mlp",
        ),
        reference=_matmul_params,
        cases=(
            *_PRINTED,
            (96, 12288, 96, 96, 49152, 50257, "gelu"),  # GPT-3 175B
            (80, 8192, 64, 8, 28672, 128256, "swiglu"),  # Llama-3-70B
            (2, 128, 2, 1, 512, 512, "gelu"),
            (1, 64, 4, 2, 256, 100, "swiglu"),
        ),
        arguments=_shape_arguments,
        mistakes=(
            WrongFunction(
                "K and V as wide as Q",
                "under grouped-query attention K and V are h x (n_kv_heads x h/a), "
                "narrower than Q and O.",
                _no_gqa,
            ),
            WrongFunction(
                "two MLP matrices for SwiGLU",
                "a SwiGLU MLP has three h x d_ff matrices (gate, up, down); a GELU "
                "MLP two.",
                _two_mlp_matrices,
            ),
            WrongFunction(
                "the input embedding counted",
                "the embedding is a gather, not a matmul; only the LM head's V x h "
                "weights take part in one.",
                _embedding_counted,
            ),
            WrongFunction(
                "the LM head left out",
                "the LM head is a matmul of h by V for every token: count it.",
                _no_head,
            ),
            WrongFunction(
                "the printed examples hard-coded",
                "the check tries many other shapes: count each matrix of a layer, "
                "times L, and the head.",
                _printed_cases,
            ),
        ),
        max_examples=30,
    ),
)

# --- mfu-7: the step's own matmuls against the ceiling, measured ----------------------

# The reader's own sweep: no key, the solution explains what the timings show.
MFU_7 = exercise("mfu-7", level=2, kind="measure")

# --- mfu-8: a step's profile with one slow bucket, diagnosed -------------------------


def _profile(model, gpu, batch, seq_len, seed):
    return diagnose.step_profile(model, gpu, batch, seq_len, seed)


def _mfu_8(model, gpu, batch, seq_len, seed):
    p = _profile(model, gpu, batch, seq_len, seed)
    return {"bucket": p.defect, "step_ms": p.fixed_step_ms}


def _fixed_at(rate):
    """The step with the slow bucket's FLOPs at ``rate(profile)`` FLOP/s
    (None: the bucket dropped), or with ``counted`` of its FLOPs."""

    def value(model, gpu, batch, seq_len, seed):
        p = _profile(model, gpu, batch, seq_len, seed)
        cfg = transformer.PRESETS[model]
        work = diagnose.bucket_flops(cfg, batch, seq_len)[p.defect]
        fixed = 0.0 if rate is None else 1e3 * work / rate(p)
        return p.step_ms - p.ms(p.defect) + fixed

    return value


def _half_counted(p):
    """Half the square counted at the healthy rate: twice the rate on all."""
    return 2 * p.healthy_flops_per_s


def _dense_peak(p):
    return accelerators.peak_flops_per_s(p.gpu, "bf16")


_NOT_A_MATMUL = (
    "it does no matmul FLOPs to check a rate against, and it is a small share "
    "of the step: look for a matmul bucket slower than its FLOPs say."
)
_HEALTHY = "its FLOPs over its time give the rate the other matmul buckets reach."

MFU_8 = exercise(
    "mfu-8",
    level=2,
    kind="diagnose",
    inputs={
        "model": "Llama-2-7B",
        "gpu": "H100 SXM",
        "batch": 2,
        "seq_len": 4096,
        "seed": 10,
    },
    answers={
        "bucket": Choice(
            "the bucket that runs slower than its FLOPs say",
            dict(diagnose.BUCKETS),
            hints={
                "forward_matmuls": _HEALTHY,
                "backward_matmuls": _HEALTHY,
                "lm_head": _HEALTHY,
                "attention": _HEALTHY,
                "elementwise": _NOT_A_MATMUL,
                "optimizer": _NOT_A_MATMUL,
                "data_wait": _NOT_A_MATMUL,
            },
        ),
        "step_ms": Real("ms", "the step's time once that bucket is fixed", 0.005),
    },
    key=_mfu_8,
    mistakes=(
        Mistake(
            "bucket",
            "the largest bucket",
            "the largest bucket is the one with the most FLOPs: divide each matmul "
            "bucket's FLOPs by its time and compare the rates.",
            lambda **i: _profile(**i).largest,
        ),
        Mistake(
            "step_ms",
            "the slow bucket dropped",
            "a fix makes the bucket run at the healthy rate; its FLOPs still take "
            "time.",
            _fixed_at(None),
        ),
        Mistake(
            "step_ms",
            "the fixed bucket at the dense peak",
            "no matmul runs at the datasheet's peak: the fixed bucket runs as fast "
            "as the step's healthy matmuls.",
            _fixed_at(_dense_peak),
        ),
        Mistake(
            "step_ms",
            "half the attention square counted",
            "count attention's FLOPs as the healthy rate was counted, the full "
            "s x s square, 12Lhs a token.",
            _fixed_at(_half_counted),
        ),
    ),
)


# --- mfu-9 and mfu-10: an MFU dashboard whose logger counts wrongly ------------------


def _dashboard_key(seed, run):
    d = diagnose.mfu_dashboard(seed)
    return {"cause": d.cause, "mfu": d.run(run).mfu}


def _logged(seed, run):
    return diagnose.mfu_dashboard(seed).run(run).logged_mfu


def _recounted(cause):
    """The run's MFU as a logger with the mistake ``cause`` would print it."""

    def value(seed, run):
        r = diagnose.mfu_dashboard(seed).run(run)
        cfg = transformer.PRESETS[r.model]
        peak = accelerators.peak_flops_per_s(r.gpu, "bf16")
        return diagnose.logged_mfu(
            cause, r.tokens_per_s, cfg, r.seq_len, peak, r.n_gpus
        )

    return value


def _cause_choice(label):
    return Choice(
        label,
        dict(diagnose.CAUSES),
        hints={
            "one_gpu_peak": "that would multiply every run's MFU by its GPU count.",
            "per_gpu_tokens": "that would divide every run's MFU by its GPU count.",
            "forward_only": "that would print a third of the right MFU.",
            "recompute_counted": "that would print 4/3 of the right MFU.",
            "sparse_peak": "that would print half the right MFU.",
            "six_n": "that would be a few per cent off, by a different share for "
            "each model and s.",
        },
    )


_PRINTED_HINT = (
    "that is the dashboard's own figure: recount it with 6 N_matmul + 12Lhs "
    "FLOPs a token over G x the dense BF16 peak."
)
_SIX_N_HINT = (
    "the team counts 6 N_matmul + 12Lhs a token; 6N with all parameters leaves "
    "out attention."
)

MFU_9 = exercise(
    "mfu-9",
    level=2,
    kind="diagnose",
    inputs={"seed": 11, "run": "A"},
    answers={
        "cause": _cause_choice("what the logger does wrong"),
        "mfu": Real("fraction", "run A's MFU, counted right", 0.01),
    },
    key=_dashboard_key,
    mistakes=(
        Mistake("mfu", "the dashboard's figure", _PRINTED_HINT, _logged),
        Mistake("mfu", "6N, N = all parameters", _SIX_N_HINT, _recounted("six_n")),
        Mistake(
            "mfu",
            "the printed figure halved",
            "halving undoes a sparse peak, and every run here is off by another "
            "factor: compare your count with the printed one.",
            lambda seed, run: _logged(seed, run) / 2,
        ),
    ),
)

MFU_10 = exercise(
    "mfu-10",
    level=1,
    kind="diagnose",
    inputs={"seed": 28, "run": "C"},
    answers={
        "cause": _cause_choice("what the logger does wrong"),
        "mfu": Real("fraction", "run C's MFU, counted right", 0.01),
    },
    key=_dashboard_key,
    mistakes=(
        Mistake("mfu", "the dashboard's figure", _PRINTED_HINT, _logged),
        Mistake(
            "mfu",
            "divided by the GPUs twice",
            "the job's tokens/s go over the job's peak, G x peak, once.",
            _recounted("per_gpu_tokens"),
        ),
        Mistake("mfu", "6N, N = all parameters", _SIX_N_HINT, _recounted("six_n")),
    ),
)


EXERCISES = register(
    MFU_1, MFU_2, MFU_3, MFU_4, MFU_5, MFU_6, MFU_7, MFU_8, MFU_9, MFU_10
)
