"""Exercises of the input-pipeline chapter (notebooks/input_pipeline.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.input_pipeline import artifacts, formulas, packing
from mlbook.judge import (
    Choice,
    Code,
    Integer,
    Mistake,
    Real,
    Reason,
    WrongFunction,
    exercise,
    register,
)
from mlbook.mfu import flops


def _input_pipeline_1(compute_ms, load_s):
    compute_s = compute_ms / 1e3
    need = formulas.workers_needed(load_s, compute_s)
    return {
        "workers": need,
        "idle": formulas.device_idle_fraction(load_s, compute_s, need - 1),
    }


def _one_fewer(compute_ms, load_s):
    compute_s = compute_ms / 1e3
    w = formulas.workers_needed(load_s, compute_s) - 1
    return compute_s, formulas.loader_step_s(load_s, compute_s, w)


INPUT_PIPELINE_1 = exercise(
    "input_pipeline-1",
    level=1,
    kind="compute",
    inputs={"compute_ms": 350, "load_s": 1.2},
    answers={
        "workers": Integer("workers", "workers that keep the GPU busy (the fewest)"),
        "idle": Real(
            "fraction", "share of each step the GPU is idle with one fewer", 0.01
        ),
    },
    key=_input_pipeline_1,
    mistakes=(
        Mistake(
            "workers",
            "the ratio rounded down",
            "with that many workers a batch arrives less often than a step "
            "computes, and the GPU waits.",
            lambda compute_ms, load_s: math.floor(load_s / (compute_ms / 1e3)),
        ),
        Mistake(
            "workers",
            "a spare worker",
            "the question asks for the fewest that keep the GPU busy.",
            lambda **i: _input_pipeline_1(**i)["workers"] + 1,
        ),
        Mistake(
            "idle",
            "idle time as a share of the compute time",
            "the share is of the whole step, which now waits for the loader.",
            lambda **i: (lambda c, step: (step - c) / c)(*_one_fewer(**i)),
        ),
        Mistake(
            "idle",
            "the idle share with a single worker",
            "the question asks about one worker fewer than the number that "
            "keeps the GPU busy.",
            lambda compute_ms, load_s: formulas.device_idle_fraction(
                load_s, compute_ms / 1e3, 1
            ),
        ),
        Mistake(
            "idle",
            "the idle seconds instead of a share",
            "give the idle time as a share of the step.",
            lambda **i: (lambda c, step: step - c)(*_one_fewer(**i)),
        ),
    ),
)


# --- input_pipeline-2: what a node of A100s eats --------------------------------------


def _node(model, seq_len, gpu, mfu, gpus_per_node, six_n_only=False):
    cfg = transformer.PRESETS[model]
    peak = accelerators.peak_flops_per_s(gpu, "bf16")
    if six_n_only:  # 6 N_matmul a token, the attention term left out
        return gpus_per_node * mfu * peak / (6 * flops.matmul_params(cfg))
    return formulas.trainer_tokens_per_s(cfg, seq_len, peak, mfu, gpus_per_node)


def _input_pipeline_2(model, seq_len, gpu, mfu, gpus_per_node, thread_tokens_per_s):
    node = _node(model, seq_len, gpu, mfu, gpus_per_node)
    per_gpu = node / gpus_per_node
    return {
        "node_tokens_per_s": node,
        "threads": math.ceil(node / thread_tokens_per_s),
        # tokenised in the loop: per token 1 / (tokenizer rate) of loading,
        # 1 / (one GPU's rate) of compute, nothing overlapped
        "idle": formulas.device_idle_fraction(
            1 / thread_tokens_per_s, 1 / per_gpu, workers=0
        ),
    }


INPUT_PIPELINE_2 = exercise(
    "input_pipeline-2",
    level=1,
    kind="compute",
    inputs={
        "model": "Llama-2-7B",
        "seq_len": 4096,
        "gpu": "A100 SXM",
        "mfu": 0.5,
        "gpus_per_node": 8,
        "thread_tokens_per_s": 20_000,
    },
    answers={
        "node_tokens_per_s": Real(
            "tokens/s", "tokens/s the node's eight GPUs eat together", 0.01
        ),
        "threads": Integer("count", "tokenizer threads that keep the node fed"),
        "idle": Real(
            "fraction",
            "share of the time a GPU idles, tokenising in its own loop",
            0.01,
        ),
    },
    key=_input_pipeline_2,
    mistakes=(
        Mistake(
            "node_tokens_per_s",
            "6N instead of 6N + 12Lhs",
            "at s = 4096 the attention matmuls add 12Lhs FLOPs a token to 6N.",
            lambda **i: _node(
                **{k: v for k, v in i.items() if k != "thread_tokens_per_s"},
                six_n_only=True,
            ),
        ),
        Mistake(
            "node_tokens_per_s",
            "per-GPU instead of per-node",
            "the question asks what all the node's GPUs eat together.",
            lambda **i: (
                _input_pipeline_2(**i)["node_tokens_per_s"] / i["gpus_per_node"]
            ),
        ),
        Mistake(
            "threads",
            "the ratio rounded down",
            "with that many threads the node eats faster than they tokenise.",
            lambda **i: math.floor(
                _input_pipeline_2(**i)["node_tokens_per_s"] / i["thread_tokens_per_s"]
            ),
        ),
        Mistake(
            "idle",
            "idle time as a share of the compute time",
            "the share is of the whole step: tokenising plus computing.",
            lambda **i: (
                _node(**{k: v for k, v in i.items() if k != "thread_tokens_per_s"})
                / i["gpus_per_node"]
                / i["thread_tokens_per_s"]
            ),
        ),
    ),
)


# --- input_pipeline-3: the epoch with its warm-up -------------------------------------


def _input_pipeline_3(n_batches, load_s, compute_s, workers):
    return {
        "overhead": formulas.loader_overhead_s(n_batches, load_s, compute_s, workers),
        "floor": formulas.loader_overhead_s(
            n_batches,
            load_s,
            compute_s,
            formulas.workers_needed(load_s, compute_s),
        ),
    }


def _steady_only(n_batches, load_s, compute_s, workers):
    step = formulas.loader_step_s(load_s, compute_s, workers)
    return n_batches * (step - compute_s)


INPUT_PIPELINE_3 = exercise(
    "input_pipeline-3",
    level=2,
    kind="derive",
    inputs={"n_batches": 50, "load_s": 0.6, "compute_s": 0.25, "workers": 2},
    answers={
        "overhead": Real("s", "overhead of the epoch with 2 workers", 0.01),
        "floor": Real("s", "the least overhead any number of workers reaches", 0.01),
    },
    key=_input_pipeline_3,
    mistakes=(
        Mistake(
            "overhead",
            "the steady state only, no warm-up",
            "the first batch of the epoch arrives only after a whole load time, "
            "and nothing computes meanwhile.",
            _steady_only,
        ),
        Mistake(
            "overhead",
            "no overlap, as with no workers",
            "with workers, loading runs while the device computes.",
            lambda n_batches, load_s, **_: n_batches * load_s,
        ),
        Mistake(
            "overhead",
            "one worker's rate",
            "two workers together deliver a batch every load time / 2.",
            lambda workers, **i: _steady_only(workers=1, **i) + i["load_s"],
        ),
        Mistake(
            "floor",
            "the load time shared among the workers",
            "the first batch is loaded by one worker alone, before the first "
            "step: the warm-up does not shrink with more workers.",
            lambda n_batches, load_s, compute_s, workers: (
                load_s / formulas.workers_needed(load_s, compute_s)
            ),
        ),
    ),
)


# --- input_pipeline-4: padding waste, in code -----------------------------------------


def _padding_waste_reference(doc_lens, seq_len):
    """Share of the slots per-document rows of ``seq_len`` fill with padding."""
    return packing.padding_waste(list(doc_lens), seq_len)


def _one_row_per_document(doc_lens, seq_len):
    """Every document padded (or cut) to a single row."""
    kept = sum(min(n, seq_len) for n in doc_lens)
    return 1 - kept / (len(doc_lens) * seq_len)


def _packed(doc_lens, seq_len):
    """The waste of packing: only the last row is padded."""
    tokens = sum(doc_lens)
    return 1 - tokens / (math.ceil(tokens / seq_len) * seq_len)


EXAMPLE_WASTE = _padding_waste_reference((100, 300, 50), 128)  # 0.296875


def _hard_coded(doc_lens, seq_len):
    """The statement's example, whatever the input."""
    return 0.296875


def _waste_arguments(st):
    lens = st.lists(st.integers(1, 5000), min_size=1, max_size=30)
    return st.tuples(lens, st.integers(1, 4096))


INPUT_PIPELINE_4 = exercise(
    "input_pipeline-4",
    level=2,
    kind="code",
    code=Code(
        name="padding_waste",
        params=("doc_lens", "seq_len"),
        reference=_padding_waste_reference,
        cases=(
            ([100, 300, 50], 128),
            ([128, 128], 128),
            ([1], 64),
            ([5000, 3, 70], 4096),
            ([10, 20, 30, 40], 16),
        ),
        arguments=_waste_arguments,
        same=lambda expected, got: math.isclose(
            expected, got, rel_tol=1e-9, abs_tol=1e-12
        ),
        mistakes=(
            WrongFunction(
                "one row per document",
                "a document longer than s does not fit in one row: it is cut "
                "into ceil(n / s) rows, and only its last one is padded.",
                _one_row_per_document,
            ),
            WrongFunction(
                "the packed waste",
                "per-document rows pad the last row of every document, not "
                "only the last row of the corpus.",
                _packed,
            ),
            WrongFunction(
                "the example's answer hard-coded",
                "the check runs your function on many other corpora too.",
                _hard_coded,
            ),
        ),
    ),
)


# --- input_pipeline-5: a sleep on your machine ----------------------------------------

INPUT_PIPELINE_5 = exercise("input_pipeline-5", level=1, kind="measure")


# --- input_pipeline-6: predict the wait with two workers ------------------------------

INPUT_PIPELINE_6 = exercise(
    "input_pipeline-6",
    level=1,
    kind="predict",
    answers={
        "wait_ratio": Real(
            "fraction",
            "your prediction: two workers' wait a step over no workers' wait",
            0.1,
        ),
    },
    # why: how much of the wait two workers hid (formulas.WAIT_VERDICTS's bounds)
    reasons=(
        Reason(
            "Two workers load the next batches while a step runs, and a batch takes "
            "no longer to load than a step to compute, so after the first batches, "
            "loaded before any step could start, the data was ready when the step "
            "asked for it.",
            when=(("wait_ratio", "<", 0.5),),
        ),
        Reason(
            "The workers hid only part of the wait: the first batches load before "
            "any step runs, a large share of a short run, and two workers and the "
            "trainer need three free cores to load while the step computes.",
            when=(("wait_ratio", "<", 1),),
        ),
        Reason(
            "The workers hid none of the wait: with fewer free cores than two "
            "workers and the trainer need, a worker loads only while the step "
            "leaves a core free, and starting the workers adds to the first wait.",
        ),
    ),
)


# --- input_pipeline-7: diagnose a loop's timings: is the loader the bottleneck? -----

BOTTLENECK = {
    "loader": "the input pipeline: the device waits for data every few steps",
    "compute": "compute: the batches are ready before the device is",
}


def _input_pipeline_7(seed, workers, steps):
    log = artifacts.loader_log(seed, workers, steps)
    return {
        "bottleneck": "loader" if log.loader_bound else "compute",
        "idle": formulas.device_idle_fraction(log.load_s, log.compute_s, workers),
        "workers_needed": formulas.workers_needed(log.load_s, log.compute_s),
    }


def _workers_from(seed, workers, steps, how):
    """Workers from a load time backed out of the trace a wrong way: one
    step's wait (a peak, not the mean over the two workers' pairs), or the
    mean wait alone as the load."""
    log = artifacts.loader_log(seed, workers, steps, jitter=0.0)
    steady = log.rows[1:]
    mean_wait = sum(r.wait_s for r in steady) / len(steady)
    if how == "peak":
        load = workers * (max(r.wait_s for r in steady) + log.compute_s)
    else:
        load = mean_wait
    return formulas.workers_needed(load, log.compute_s)


INPUT_PIPELINE_7 = exercise(
    "input_pipeline-7",
    level=2,
    kind="diagnose",
    inputs={"seed": 40, "workers": 2, "steps": 12},
    answers={
        "bottleneck": Choice(
            "what limits this loop",
            BOTTLENECK,
            hints={
                "compute": "look past the first step: the device still waits "
                "for data on every other step.",
            },
        ),
        "idle": Real(
            "fraction", "the share of a step the device waits, after step 1", 0.1
        ),
        "workers_needed": Integer("workers", "workers that keep the device busy"),
    },
    key=_input_pipeline_7,
    mistakes=(
        Mistake(
            "idle",
            "the wait over the compute",
            "the share is of the whole step, the wait plus the compute.",
            lambda seed, workers, steps: (
                (
                    formulas.loader_step_s(*_truth(seed, workers, steps), workers)
                    - _truth(seed, workers, steps)[1]
                )
                / _truth(seed, workers, steps)[1]
            ),
        ),
        Mistake(
            "workers_needed",
            "one step's wait taken for the steady state",
            "two workers finish their batches together, so waits come in "
            "pairs: average over the steps after the first.",
            lambda **i: _workers_from(**i, how="peak"),
        ),
        Mistake(
            "workers_needed",
            "the wait taken for the load time",
            "a worker's load time is what it takes to make a batch: with w "
            "workers a batch arrives every load / w = wait + compute.",
            lambda **i: _workers_from(**i, how="wait"),
        ),
    ),
)


def _truth(seed, workers, steps):
    log = artifacts.loader_log(seed, workers, steps)
    return log.load_s, log.compute_s


# --- input_pipeline-8: the same loader, a CPU step and a GPU step -------------------


def _input_pipeline_8(seed, workers, steps, gpu_step_ms):
    load, compute = _truth(seed, workers, steps)
    gpu = gpu_step_ms / 1e3
    return {
        "idle_cpu": formulas.device_idle_fraction(load, compute, workers),
        "idle_gpu": formulas.device_idle_fraction(load, gpu, workers),
        "bottleneck_gpu": "loader" if load > gpu else "compute",
        "workers_needed": formulas.workers_needed(load, gpu),
    }


INPUT_PIPELINE_8 = exercise(
    "input_pipeline-8",
    level=2,
    kind="diagnose",
    inputs={"seed": 22, "workers": 0, "steps": 12, "gpu_step_ms": 4},
    answers={
        "idle_cpu": Real("fraction", "the share of a CPU step spent waiting", 0.1),
        "idle_gpu": Real(
            "fraction", "the share of a 4 ms GPU step it would spend waiting", 0.1
        ),
        "bottleneck_gpu": Choice(
            "what limits the GPU's loop",
            BOTTLENECK,
            hints={
                "compute": "the same batch takes as long to load as before, and "
                "the step is now far shorter than the load.",
            },
        ),
        "workers_needed": Integer("workers", "workers that keep the GPU busy"),
    },
    key=_input_pipeline_8,
    mistakes=(
        Mistake(
            "idle_gpu",
            "the CPU's share carried over",
            "the wait stays the same while the step shrinks: recompute the "
            "share with the GPU's step.",
            lambda **i: _input_pipeline_8(**i)["idle_cpu"],
        ),
        Mistake(
            "idle_gpu",
            "the wait over the compute",
            "the share is of the whole step, the wait plus the compute.",
            lambda seed, workers, steps, gpu_step_ms: (
                _truth(seed, workers, steps)[0] / (gpu_step_ms / 1e3)
            ),
        ),
        Mistake(
            "workers_needed",
            "rounded down",
            "with fewer workers than load / compute, a batch still arrives "
            "later than the step that needs it: round up.",
            lambda seed, workers, steps, gpu_step_ms: math.floor(
                _truth(seed, workers, steps)[0] / (gpu_step_ms / 1e3)
            ),
        ),
    ),
)

EXERCISES = register(
    INPUT_PIPELINE_1,
    INPUT_PIPELINE_2,
    INPUT_PIPELINE_3,
    INPUT_PIPELINE_4,
    INPUT_PIPELINE_5,
    INPUT_PIPELINE_6,
    INPUT_PIPELINE_7,
    INPUT_PIPELINE_8,
)
