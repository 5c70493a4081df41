"""Exercises of the capstone chapter (notebooks/capstone.md)."""

from __future__ import annotations

import math

from mlbook.capstone import cases, formulas
from mlbook.common import accelerators, transformer
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
from mlbook.mfu import flops
from mlbook.mfu import formulas as mfu

# Each defect of the slow loop, named by the fix that removes it.
DEFECTS = {
    "pretokenise": "text tokenised inside the loop",
    "log_every_n": "a host sync and a print every micro-step",
    "sdpa": "written-out (unfused) attention",
    "pad_vocab": "a vocabulary not padded to a multiple of 64",
    "fused_adamw": "AdamW's for-loop over parameters",
    "no_recompute": "full activation recompute",
    "bigger_micro_batch": "micro-batches of one sequence",
}
_LADDER = {f.name: f for f in formulas.ladder_fixes(bf16_fast=False, compile_on=False)}
assert set(DEFECTS) == set(_LADDER), "one label per defect of the fp32 ladder"

CAPSTONE_1 = exercise(
    "capstone-1",
    level=2,
    kind="measure",
    inputs={"defects_back": 2},
    answers={
        "defects": Choice(
            "the two defects back in (each named by the fix that removes it)",
            options=DEFECTS,
            hints={
                name: (
                    f"{label}: that defect would show in the {fix.bucket} "
                    "bucket; compare that row with the fixed fp32 rung's."
                )
                for name, label in DEFECTS.items()
                for fix in (_LADDER[name],)
            },
        )
    },
    key=lambda defects_back: {"defects": formulas.MYSTERY_DEFECTS},
)

CAPSTONE_2 = exercise(
    "capstone-2",
    level=1,
    kind="predict",
    answers={
        "mfu_first": Real("fraction", "your prediction: the slow loop's MFU", 0.1),
        "mfu_final": Real("fraction", "your prediction: the final rung's MFU", 0.1),
    },
    # why: the final step's share in the weight matmuls bounds its MFU
    reasons=(
        Reason(
            "The fixes took out work that was not the model's (tokenising inside "
            "the step, printing, recomputing, a loop over parameters), and the "
            "final step spends most of its time in the weight matmuls, so its MFU "
            "nears the share of the peak those matmuls reach on this machine.",
            when=(("final_matmul_share", ">=", 0.5),),
        ),
        Reason(
            "Even with every fix the weight matmuls take under half of the final "
            "step; norms, casts, attention, the loss and the optimizer take the "
            "rest, and a step reaches at most about its matmuls' share of what the "
            "matmuls alone could do (Amdahl's law).",
        ),
    ),
)


# --- capstone-3: the published ladder's last rung, as MFU ----------------------------


def _gpt2_124m(n_layers, d_model, n_heads, d_ff, vocab_size):
    return transformer.TransformerConfig(
        n_layers, d_model, n_heads, d_ff, vocab_size, mlp="gelu", tied_embeddings=True
    )


def _capstone_3(
    tokens_per_s, n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, gpu
):
    cfg = _gpt2_124m(n_layers, d_model, n_heads, d_ff, vocab_size)
    peak = accelerators.peak_flops_per_s(gpu, "bf16")
    return {"mfu": mfu.mfu(tokens_per_s, cfg, seq_len, peak, 1)}


def _capstone_3_six_n(tokens_per_s, n_layers, d_model, n_heads, d_ff, vocab_size, **i):
    cfg = _gpt2_124m(n_layers, d_model, n_heads, d_ff, vocab_size)
    peak = accelerators.peak_flops_per_s(i["gpu"], "bf16")
    return tokens_per_s * 6 * flops.matmul_params(cfg) / peak


CAPSTONE_3 = exercise(
    "capstone-3",
    level=1,
    kind="compute",
    inputs={
        "tokens_per_s": 142_156,
        "n_layers": 12,
        "d_model": 768,
        "n_heads": 12,
        "d_ff": 3072,
        "vocab_size": 50_257,
        "seq_len": 1024,
        "gpu": "A100 SXM",
    },
    answers={"mfu": Real("fraction", "MFU with the attention term", 0.02)},
    key=_capstone_3,
    mistakes=(
        Mistake(
            "mfu",
            "6N instead of 6N + 12Lhs",
            "at s = 1024 the attention matmuls are not negligible beside a "
            "768-wide model: add 12 L h s per token.",
            _capstone_3_six_n,
        ),
        Mistake(
            "mfu",
            "forward FLOPs only",
            "a training step runs the forward and a backward twice its cost.",
            lambda **i: _capstone_3(**i)["mfu"] / 3,
        ),
    ),
)


# --- capstone-4: the waterfall for another model and cluster --------------------------


def _capstone_4(
    model, n_gpus, gpu, seq_len, tokens_per_step, step_s, adamw_s, recompute_s
):
    cfg = transformer.PRESETS[model]
    peak = n_gpus * accelerators.peak_flops_per_s(gpu, "bf16")  # the job's
    per_step = tokens_per_step * flops.flops_per_token(cfg, seq_len)
    savings = {"fused_adamw": adamw_s, "no_recompute": recompute_s}
    _, without = formulas.waterfall(peak, peak, per_step, step_s, savings, [])
    return {
        "mfu_all": mfu.mfu(
            tokens_per_step / step_s, cfg, seq_len, peak / n_gpus, n_gpus
        ),
        "mfu_without": without,
    }


CAPSTONE_4 = exercise(
    "capstone-4",
    level=2,
    kind="compute",
    inputs={
        "model": "Llama-3-8B",
        "n_gpus": 64,
        "gpu": "H100 SXM",
        "seq_len": 8192,
        "tokens_per_step": 4_194_304,
        "step_s": 9.0,
        "adamw_s": 0.4,
        "recompute_s": 2.0,
    },
    answers={
        "mfu_all": Real("fraction", "MFU with every fix", 0.02),
        "mfu_without": Real(
            "fraction", "MFU without fused AdamW and without recompute dropped", 0.02
        ),
    },
    key=_capstone_4,
    mistakes=(
        Mistake(
            "mfu_all",
            "per-GPU instead of per-job peak",
            "the step's tokens are the whole job's: divide by G x peak.",
            lambda **i: _capstone_4(**i)["mfu_all"] * i["n_gpus"],
        ),
        Mistake(
            "mfu_without",
            "the extra time taken off the MFU as a share",
            "the FLOPs stay the same while the step grows: MFU scales as "
            "the step time's inverse, not down by the share of time added.",
            lambda **i: (
                _capstone_4(**i)["mfu_all"]
                * (1 - (i["adamw_s"] + i["recompute_s"]) / i["step_s"])
            ),
        ),
    ),
)


# --- capstone-5: what removing a bucket buys ------------------------------------------


def _capstone_5(mfu, bucket_share):
    return {
        "mfu_after": formulas.mfu_after_fix(mfu, bucket_share),
        "mfu_half": formulas.mfu_after_fix(mfu, bucket_share / 2),
    }


CAPSTONE_5 = exercise(
    "capstone-5",
    level=2,
    kind="derive",
    inputs={"mfu": 0.08, "bucket_share": 0.35},
    answers={
        "mfu_after": Real("fraction", "MFU with the bucket gone", 0.01),
        "mfu_half": Real("fraction", "MFU with the bucket halved", 0.01),
    },
    key=_capstone_5,
    mistakes=(
        Mistake(
            "mfu_after",
            "the share added to the MFU",
            "MFU and a bucket's share are shares of different things: one of "
            "the peak, one of the step time.",
            lambda mfu, bucket_share: mfu + bucket_share,
        ),
        Mistake(
            "mfu_after",
            "MFU times (1 + share)",
            "the step becomes (1 - share) as long, so the rate grows by the "
            "inverse of that, more than 1 + share.",
            lambda mfu, bucket_share: mfu * (1 + bucket_share),
        ),
        Mistake(
            "mfu_half",
            "MFU times (1 + share / 2)",
            "halving the bucket removes share / 2 of the step: divide by what is left.",
            lambda mfu, bucket_share: mfu * (1 + bucket_share / 2),
        ),
    ),
)


# --- capstone-6: write the idle-gap rule ----------------------------------------------


def _idle_arguments(st):
    """(window_s, intervals): a window and up to eight intervals that may
    overlap each other and reach past either end of the window."""
    interval = st.tuples(st.floats(-5.0, 60.0), st.floats(0.0, 30.0)).map(
        lambda p: (p[0], p[0] + p[1])
    )
    return st.tuples(st.floats(0.5, 50.0), st.lists(interval, max_size=8).map(tuple))


def _same_seconds(expected, got) -> bool:
    return (
        isinstance(got, int | float)
        and not isinstance(got, bool)
        and math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-9)
    )


def _summed_lengths(window_s, intervals):
    covered = sum(max(0.0, min(e, window_s) - max(s, 0.0)) for s, e in intervals)
    return window_s - covered


def _unclipped(window_s, intervals):
    covered, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if e > end:
            covered += e - max(s, end)
            end = e
    return window_s - covered


CAPSTONE_6 = exercise(
    "capstone-6",
    level=2,
    kind="code",
    code=Code(
        name="idle_s",
        params=("window_s", "intervals"),
        reference=formulas.idle_s,
        cases=(
            (10.0, ((1.0, 3.0), (2.0, 4.0), (8.0, 12.0))),
            (10.0, ()),
            (10.0, ((0.0, 10.0),)),
            (10.0, ((1.0, 3.0), (2.0, 4.0))),
            (10.0, ((8.0, 12.0),)),
            (4.0, ((-2.0, 1.0), (3.0, 3.0), (0.5, 2.0))),
            (5.0, ((1.0, 4.0), (2.0, 3.0), (6.0, 9.0))),
        ),
        arguments=_idle_arguments,
        same=_same_seconds,
        mistakes=(
            WrongFunction(
                "overlaps counted twice",
                "two operators that overlap cover one stretch of time once: "
                "merge the intervals before adding their lengths.",
                _summed_lengths,
            ),
            WrongFunction(
                "the window not clipped",
                "only the part of an interval inside [0, window_s] is in the "
                "step; cut each at the window's ends.",
                _unclipped,
            ),
            WrongFunction(
                "the example's answer typed in",
                "the function must work out any window and intervals, not "
                "return the statement's number.",
                lambda window_s, intervals: 5.0,
            ),
        ),
    ),
)

# --- capstone-7: a profile with one planted defect -----------------------------------


def _capstone_7(seed):
    p = cases.planted_profile(seed)
    return {"defect": p.defect, "step_ms": p.fixed_step_ms}


def _whole_bucket_removed(seed):
    p = cases.planted_profile(seed)
    if p.healthy_ms[p.bucket] == 0:  # a bucket the defect made: the same as the key
        return None
    return p.today_step_ms - p.today_ms[p.bucket]


CAPSTONE_7 = exercise(
    "capstone-7",
    level=2,
    kind="diagnose",
    inputs={"seed": 1},
    answers={
        "defect": Choice(
            "the defect planted (named by the fix that removes it)",
            options=DEFECTS,
            hints={
                name: (
                    f"{label}: that would grow the {fix.bucket} bucket; is that "
                    "row much larger today than last week?"
                )
                for name, label in DEFECTS.items()
                for fix in (_LADDER[name],)
            },
        ),
        "step_ms": Real("ms", "today's step once the fix is applied", 0.01),
    },
    key=_capstone_7,
    mistakes=(
        Mistake(
            "step_ms",
            "the whole bucket removed",
            "the fix returns the bucket to what it took before the defect, not "
            "to nothing: take off only the excess over last week's.",
            _whole_bucket_removed,
        ),
        Mistake(
            "step_ms",
            "last week's step time",
            "the other buckets measured a little differently today as well; "
            "the fix removes only its own bucket's excess from today's step.",
            lambda seed: cases.planted_profile(seed).healthy_step_ms,
        ),
    ),
)


# --- capstone-8: HFU above MFU: which recompute ------------------------------------


def _capstone_8(seed):
    r = cases.recompute_report(seed)
    return {"setting": r.setting, "step_s": r.step_s_without}


_SETTINGS = {
    "none": "no recompute",
    "selective": "selective recompute (the attention core)",
    "full": "full recompute (every block's forward again)",
}

CAPSTONE_8 = exercise(
    "capstone-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 1},
    answers={
        "setting": Choice(
            "the recompute the run is using",
            options=_SETTINGS,
            hints={
                "none": "with nothing run twice, the hardware does only the "
                "model's FLOPs: HFU would equal MFU.",
                "selective": "selective recompute repeats only the attention "
                "core, 4Lhs a token against 6N + 12Lhs: HFU a few per cent "
                "above MFU. Divide HFU by MFU.",
                "full": "full recompute adds a whole forward: HFU = 4/3 MFU. "
                "Divide HFU by MFU.",
            },
        ),
        "step_s": Real("s", "the step with the recompute dropped", 0.01),
    },
    key=_capstone_8,
    mistakes=(
        Mistake(
            "step_s",
            "a third of the step taken off",
            "the extra forward is one of four passes the hardware runs (a "
            "forward, the backward at twice its cost, the forward again), not "
            "one of three.",
            lambda seed: cases.recompute_report(seed).step_s * 2 / 3,
        ),
        Mistake(
            "step_s",
            "the HFU - MFU gap taken off as a share of the step",
            "HFU and MFU are shares of the peak, not of the step's time: at the "
            "same FLOP rate the step shrinks in proportion to the FLOPs, MFU / HFU.",
            lambda seed: (
                (r := cases.recompute_report(seed)).step_s * (1 - (r.hfu - r.mfu))
            ),
        ),
    ),
)

EXERCISES = register(
    CAPSTONE_1,
    CAPSTONE_2,
    CAPSTONE_3,
    CAPSTONE_4,
    CAPSTONE_5,
    CAPSTONE_6,
    CAPSTONE_7,
    CAPSTONE_8,
)
