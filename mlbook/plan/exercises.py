"""Exercises of the planning page (book/plan.md): whole runs budgeted with
the planner (mlbook.plan), and the first-order account it adds up."""

from __future__ import annotations

from dataclasses import replace

from mlbook.common.units import DAY_S, GIB, HOUR_S, MINUTE_S, TERA
from mlbook.faults.formulas import LLAMA3_405B_LOG
from mlbook.judge import Integer, Mistake, Real, exercise, register
from mlbook.plan.planner import (
    RunSpec,
    memory_per_gpu,
    plan,
    restart_for_goodput,
    wall_clock_s,
)
from mlbook.recompute.formulas import activation_bytes_per_layer, layer_bytes

H100, H200 = "H100 SXM", "H200 SXM"


# --- plan-1: a 70B run on 2,048 H100s, a worse fleet and slower storage -----------


def _spec_1(
    model,
    tokens_trillions,
    gpu,
    n_gpus,
    mfu,
    seq_len,
    tp,
    micro_batch,
    gpu_hours_per_failure,
    storage_gb_per_s,
    restart_min,
):
    return RunSpec(
        model=model,
        tokens=tokens_trillions * TERA,
        gpu=gpu,
        n_gpus=n_gpus,
        mfu=mfu,
        seq_len=seq_len,
        tp=tp,
        zero_stage=1,
        micro_batch=micro_batch,
        recompute="selective",
        failures_per_gpu_hour=1 / gpu_hours_per_failure,
        storage_bytes_per_s=storage_gb_per_s * 1e9,
        restart_s=restart_min * MINUTE_S,
    )


def _plan_1(
    model,
    tokens_trillions,
    gpu,
    n_gpus,
    mfu,
    seq_len,
    tp,
    micro_batch,
    gpu_hours_per_failure,
    storage_gb_per_s,
    restart_min,
):
    p = plan(_spec_1(**locals()))
    return {
        "expected_days": p.expected_days,
        "memory_gib": p.memory.total_bytes / GIB,
        "interval_min": p.young_interval_s / MINUTE_S,
        "goodput": p.goodput,
    }


def _changed_1(inputs, **change):
    """The plan of plan-1's run with some RunSpec fields changed."""
    return plan(replace(_spec_1(**inputs), **change))


# The mistake of counting a SwiGLU model's activations with Korthikanti et al.'s
# GPT block, 34 sbh a layer under selective recompute, where the planner (and the
# statements) count Llama's own block, 16 + 8 d_ff/h sbh.
_GPT_SBH_NAME = "34 sbh for a SwiGLU model"
_GPT_SBH_HINT = (
    "34 sbh a layer is Korthikanti's GPT block; Llama's SwiGLU block keeps four "
    "d_ff-wide tensors where a GELU MLP keeps two: (16 + 8 d_ff/h) sbh under "
    "selective recompute."
)


# The mistake of splitting every activation over tp: without sequence
# parallelism the norms' inputs and the inputs of the first linear of attention
# and of the MLP stay whole on every tensor-parallel rank.
_NO_SP_NAME = "no sequence parallelism"
_NO_SP_HINT = (
    "the statement assumes sequence parallelism: with it every activation of a "
    "layer splits over the tp ranks, the norms' inputs and the linears' inputs "
    "included; without it those stay whole on every rank."
)


def _no_sp_gib(spec) -> float:
    """The memory per GPU (GiB) of ``spec`` without sequence parallelism."""
    return memory_per_gpu(spec, sequence_parallel=False).total_bytes / GIB


def _gpt_sbh_gib(p) -> float:
    """The plan's memory per GPU (GiB) with its activations counted at
    Korthikanti's 34 sbh a layer instead of the model's own block."""
    spec, cfg, m = p.spec, p.spec.config, p.memory
    own = layer_bytes(
        spec.seq_len,
        spec.micro_batch,
        cfg.d_model,
        cfg.n_heads,
        dropout=False,
        d_ff_mult=cfg.d_ff / cfg.d_model,
        mlp="swiglu",
    ).selective
    gpt = activation_bytes_per_layer(
        spec.seq_len, spec.micro_batch, cfg.d_model, cfg.n_heads, "selective"
    )
    return (m.total_bytes - m.activations_bytes * (1 - gpt / own)) / GIB


PLAN_1 = exercise(
    "plan-1",
    level=1,
    kind="compute",
    inputs={
        "model": "Llama-3-70B",
        "tokens_trillions": 15,
        "gpu": H100,
        "n_gpus": 2048,
        "mfu": 0.40,
        "seq_len": 8192,
        "tp": 8,
        "micro_batch": 1,
        "gpu_hours_per_failure": 20_000,
        "storage_gb_per_s": 100,
        "restart_min": 10,
    },
    answers={
        "expected_days": Real("days", "expected wall-clock days", 0.005),
        "memory_gib": Real("GiB", "memory per GPU", 0.005),
        "interval_min": Real("min", "Young's checkpoint interval", 0.002),
        "goodput": Real("fraction", "goodput (useful / wall-clock time)", 0.002),
    },
    key=_plan_1,
    mistakes=(
        Mistake(
            "expected_days",
            "the ideal days",
            "the ideal days are pure compute; failures, rework, restarts and "
            "checkpoint writes come on top.",
            lambda **i: plan(_spec_1(**i)).ideal_days,
        ),
        Mistake(
            "expected_days",
            "6ND instead of 6N_matmul + 12Lhs",
            "an MFU counted as PaLM counts it divides the FLOPs with the attention "
            "term, 6 N_matmul + 12 L h s a token.",
            lambda **i: (lambda p: p.expected_days * p.ideal_days_6nd / p.ideal_days)(
                plan(_spec_1(**i))
            ),
        ),
        Mistake(
            "memory_gib",
            "the optimizer state not sharded (ZeRO-0)",
            "ZeRO-1 splits Adam's 12 bytes a parameter over the data-parallel ranks.",
            lambda **i: _changed_1(i, zero_stage=0).memory.total_bytes / GIB,
        ),
        Mistake(
            "memory_gib",
            "every activation kept (no recompute)",
            "under selective recompute the attention scores are recomputed, not kept.",
            lambda **i: _changed_1(i, recompute="none").memory.total_bytes / GIB,
        ),
        Mistake(
            "memory_gib",
            _GPT_SBH_NAME,
            _GPT_SBH_HINT,
            lambda **i: _gpt_sbh_gib(plan(_spec_1(**i))),
        ),
        Mistake(
            "memory_gib",
            _NO_SP_NAME,
            _NO_SP_HINT,
            lambda **i: _no_sp_gib(_spec_1(**i)),
        ),
        Mistake(
            "interval_min",
            "Daly's interval",
            "Young's interval is sqrt(2CT), without Daly's corrections.",
            lambda **i: plan(_spec_1(**i)).daly_interval_s / MINUTE_S,
        ),
        Mistake(
            "interval_min",
            "one GPU's MTBF instead of the job's",
            "the job fails when any of its GPUs does: T = 1 / (G x rate).",
            lambda **i: (
                plan(_spec_1(**i)).young_interval_s * i["n_gpus"] ** 0.5 / MINUTE_S
            ),
        ),
        Mistake(
            "goodput",
            "restarts left out",
            "each failure also costs the restart time R.",
            lambda **i: _changed_1(i, restart_s=0.0).goodput,
        ),
        Mistake(
            "goodput",
            "the fraction lost instead of the goodput",
            "goodput is the useful share of the wall-clock time.",
            lambda **i: 1 - plan(_spec_1(**i)).goodput,
        ),
    ),
)


# --- plan-2: Llama 3 405B on half the GPUs, as H200s ---------------------------------


def _spec_2(
    model,
    tokens_trillions,
    gpu,
    n_gpus,
    mfu,
    seq_len,
    tp,
    pp,
    micro_batch,
    storage_gb_per_s,
    restart_min,
):
    """plan-2's run, at Llama 3's failure rate (the planner's default)."""
    return RunSpec(
        model=model,
        tokens=tokens_trillions * TERA,
        gpu=gpu,
        n_gpus=n_gpus,
        mfu=mfu,
        seq_len=seq_len,
        tp=tp,
        pp=pp,
        zero_stage=1,
        micro_batch=micro_batch,
        recompute="selective",
        storage_bytes_per_s=storage_gb_per_s * 1e9,
        restart_s=restart_min * MINUTE_S,
    )


def _llama3_mtbf_s(p):
    """The job MTBF of Llama 3's own 16,384 GPUs at the plan's failure rate."""
    return p.job_mtbf_s * p.spec.n_gpus / LLAMA3_405B_LOG.gpus


def _memory_2(inputs, state=1.0, activations=1.0):
    """plan-2's memory per GPU (GiB) with the model state and the activations
    scaled (how a mistake miscounts them)."""
    m = plan(_spec_2(**inputs)).memory
    kept = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    return (kept * state + m.activations_bytes * activations) / GIB


def _layers_2(inputs) -> int:
    """The model's own layer count."""
    return _spec_2(**inputs).config.n_layers


def _stage_layers_2(inputs) -> int:
    """Layers' worth of activations the fullest stage keeps: ceil(L/pp) layers
    for each of pp micro-batches in flight."""
    spec = _spec_2(**inputs)
    return -(-spec.config.n_layers // spec.pp) * spec.pp


def _plan_2(
    model,
    tokens_trillions,
    gpu,
    n_gpus,
    mfu,
    seq_len,
    tp,
    pp,
    micro_batch,
    storage_gb_per_s,
    restart_min,
):
    p = plan(_spec_2(**locals()))
    return {
        "memory_gib": p.memory.total_bytes / GIB,
        "expected_days": p.expected_days,
        "failures": p.expected_failures,
    }


PLAN_2 = exercise(
    "plan-2",
    level=2,
    kind="compute",
    inputs={
        "model": "Llama-3-405B",
        "tokens_trillions": 15.6,
        "gpu": H200,
        "n_gpus": 8192,
        "mfu": 0.41,
        "seq_len": 8192,
        "tp": 8,
        "pp": 8,
        "micro_batch": 1,
        "storage_gb_per_s": 200,
        "restart_min": 10,
    },
    answers={
        "memory_gib": Real("GiB", "memory per GPU", 0.005),
        "expected_days": Real("days", "expected wall-clock days", 0.005),
        "failures": Real("count", "expected failures over the run", 0.01),
    },
    key=_plan_2,
    mistakes=(
        Mistake(
            "memory_gib",
            "one micro-batch's activations per stage",
            "with 1F1B the first stage keeps pp micro-batches in flight, each for "
            "its ceil(L/pp) layers.",
            lambda **i: _memory_2(i, activations=1 / i["pp"]),
        ),
        Mistake(
            "memory_gib",
            "the model split over tp only",
            "weights, gradients and optimizer state are split over tp x pp GPUs.",
            lambda **i: _memory_2(i, state=i["pp"]),
        ),
        Mistake(
            "memory_gib",
            _GPT_SBH_NAME,
            _GPT_SBH_HINT,
            lambda **i: _gpt_sbh_gib(plan(_spec_2(**i))),
        ),
        Mistake(
            "memory_gib",
            _NO_SP_NAME,
            _NO_SP_HINT,
            lambda **i: _no_sp_gib(_spec_2(**i)),
        ),
        Mistake(
            "memory_gib",
            "126 layers' worth of activations",
            "the fullest stage holds ceil(126/8) = 16 layers and keeps 8 "
            "micro-batches in flight: 128 layers' worth, not the model's 126.",
            lambda **i: _memory_2(i, activations=_layers_2(i) / _stage_layers_2(i)),
        ),
        Mistake(
            "expected_days",
            "the ideal days",
            "failures, rework, restarts and checkpoint writes come on top of the "
            "compute.",
            lambda **i: plan(_spec_2(**i)).ideal_days,
        ),
        Mistake(
            "failures",
            "failures over the ideal days",
            "failures keep coming during rework and restarts too: count them over "
            "the wall-clock time.",
            lambda **i: (lambda p: p.ideal_days * DAY_S / p.job_mtbf_s)(
                plan(_spec_2(**i))
            ),
        ),
        Mistake(
            "failures",
            "Llama 3's 16,384-GPU failure interval",
            "the job's MTBF grows as the GPU count falls: T = 1 / (G x rate).",
            lambda **i: (lambda p: p.expected_days * DAY_S / _llama3_mtbf_s(p))(
                plan(_spec_2(**i))
            ),
        ),
    ),
)


# --- plan-3: the first-order account, derived -------------------------------------


def _plan_3(mtbf_h, write_s, interval_min, restart_min, goodput):
    t, i = mtbf_h * HOUR_S, interval_min * MINUTE_S
    return {
        "goodput_now": 1 / wall_clock_s(1.0, i, write_s, restart_min * MINUTE_S, t),
        "restart_min": restart_for_goodput(goodput, i, write_s, t) / MINUTE_S,
    }


PLAN_3 = exercise(
    "plan-3",
    level=2,
    kind="derive",
    inputs={
        "mtbf_h": 3,
        "write_s": 30,
        "interval_min": 10,
        "restart_min": 10,
        "goodput": 0.90,
    },
    answers={
        "goodput_now": Real("fraction", "goodput with 10-minute restarts", 0.002),
        "restart_min": Real("min", "the restart time that gives the goodput", 0.005),
    },
    key=_plan_3,
    mistakes=(
        Mistake(
            "goodput_now",
            "the checkpoint writes left out",
            "the useful time W also pays W/I writes of C each: the 1 + C/I.",
            lambda mtbf_h, write_s, interval_min, restart_min, goodput: (
                1
                - (restart_min * 60 + (interval_min * 60 + write_s) / 2)
                / (mtbf_h * 3600)
            ),
        ),
        Mistake(
            "goodput_now",
            "a whole segment lost at each failure",
            "a failure strikes, on average, halfway through a segment: (I + C)/2.",
            lambda mtbf_h, write_s, interval_min, restart_min, goodput: (
                (1 - (restart_min * 60 + interval_min * 60 + write_s) / (mtbf_h * 3600))
                / (1 + write_s / (interval_min * 60))
            ),
        ),
        Mistake(
            "goodput_now",
            "Young's first-order loss C/I + I/(2T), restarts left out",
            "each failure also costs R, and the loss terms compound: solve for the "
            "wall-clock time.",
            lambda mtbf_h, write_s, interval_min, restart_min, goodput: (
                1
                - write_s / (interval_min * 60)
                - interval_min * 60 / (2 * mtbf_h * 3600)
            ),
        ),
        Mistake(
            "restart_min",
            "the half segment left out",
            "each failure costs R plus the half segment (I + C)/2 of lost work.",
            lambda mtbf_h, write_s, interval_min, restart_min, goodput: (
                mtbf_h * 3600 * (1 - goodput * (1 + write_s / (interval_min * 60))) / 60
            ),
        ),
        Mistake(
            "restart_min",
            "the checkpoint writes left out",
            "solve g = (1 - (R + (I + C)/2)/T) / (1 + C/I): the 1 + C/I stays.",
            lambda mtbf_h, write_s, interval_min, restart_min, goodput: (
                (mtbf_h * 3600 * (1 - goodput) - (interval_min * 60 + write_s) / 2) / 60
            ),
        ),
    ),
)


# --- plan-4: fit by tensor parallelism, or by recompute ------------------------------


def _spec_4(model, tokens_trillions, gpu, n_gpus, mfu, tp, recompute):
    return RunSpec(
        model=model,
        tokens=tokens_trillions * TERA,
        gpu=gpu,
        n_gpus=n_gpus,
        mfu=mfu,
        seq_len=8192,
        tp=tp,
        zero_stage=1,
        recompute=recompute,
    )


TP_CHOICES = (1, 2, 4, 8)


def _smallest_tp(fits, **inputs):
    """The smallest tp of TP_CHOICES for which ``fits(plan)``; None if none."""
    for tp in TP_CHOICES:
        if fits(plan(_spec_4(**inputs, tp=tp))):
            return tp
    return None


def _option(run, mfu, recompute, tp=None):
    """An option of plan-4: (its smallest tp that fits, its plan there); a
    given ``tp`` is planned as it is."""
    tp = tp or _smallest_tp(lambda p: p.fits, **run, mfu=mfu, recompute=recompute)
    return tp, plan(_spec_4(**run, mfu=mfu, tp=tp, recompute=recompute))


def _plan_4(model, tokens_trillions, gpu, n_gpus, mfu, full_mfu):
    run = dict(model=model, tokens_trillions=tokens_trillions, gpu=gpu, n_gpus=n_gpus)
    tp_sel, sel = _option(run, mfu, "selective")
    tp_full, full = _option(run, full_mfu, "full")
    return {
        "tp_selective": tp_sel,
        "tp_full": tp_full,
        "days_selective": sel.expected_days,
        "days_full": full.expected_days,
    }


def _run_4(model, tokens_trillions, gpu, n_gpus, **_):
    return dict(model=model, tokens_trillions=tokens_trillions, gpu=gpu, n_gpus=n_gpus)


def _state_only(p):
    """Fits when weights, gradients and optimizer state fit (activations forgotten)."""
    m = p.memory
    return m.total_bytes - m.activations_bytes <= m.usable_hbm_bytes


PLAN_4 = exercise(
    "plan-4",
    level=3,
    kind="compute",
    inputs={
        "model": "Llama-3-70B",
        "tokens_trillions": 15,
        "gpu": H100,
        "n_gpus": 4096,
        "mfu": 0.40,
        "full_mfu": 0.30,
    },
    answers={
        "tp_selective": Integer("GPUs", "smallest tp that fits, selective recompute"),
        "tp_full": Integer("GPUs", "smallest tp that fits, full recompute"),
        "days_selective": Real("days", "expected days, selective recompute", 0.005),
        "days_full": Real("days", "expected days, full recompute", 0.005),
    },
    key=_plan_4,
    mistakes=(
        Mistake(
            "tp_selective",
            "the activations forgotten",
            "weights, gradients and optimizer state are not all: count the "
            "activations of the micro-batch in flight.",
            lambda **i: _smallest_tp(
                _state_only, **_run_4(**i), mfu=i["mfu"], recompute="selective"
            ),
        ),
        Mistake(
            "days_full",
            "full recompute at the selective run's MFU",
            "the forward runs twice: 8N_matmul + 16Lhs a token of hardware work "
            "for 6N_matmul + 12Lhs of model FLOPs, so the same hardware rate is "
            "3/4 the MFU.",
            lambda **i: (
                _option(_run_4(**i), i["mfu"], "full", tp=_plan_4(**i)["tp_full"])[
                    1
                ].expected_days
            ),
        ),
        Mistake(
            "days_selective",
            "the ideal days",
            "failures, rework, restarts and checkpoint writes come on top.",
            lambda **i: _option(_run_4(**i), i["mfu"], "selective")[1].ideal_days,
        ),
    ),
)

EXERCISES = register(PLAN_1, PLAN_2, PLAN_3, PLAN_4)
