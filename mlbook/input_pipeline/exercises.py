"""Exercises of the input-pipeline chapter (notebooks/input_pipeline.md)."""

from __future__ import annotations

import math

from mlbook.common import accelerators, transformer
from mlbook.input_pipeline import formulas, packing
from mlbook.judge import (
    Code,
    Integer,
    Mistake,
    Real,
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
)

EXERCISES = register(
    INPUT_PIPELINE_1,
    INPUT_PIPELINE_2,
    INPUT_PIPELINE_3,
    INPUT_PIPELINE_4,
    INPUT_PIPELINE_5,
    INPUT_PIPELINE_6,
)
