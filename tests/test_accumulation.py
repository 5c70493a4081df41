"""Gradient accumulation: the identity, its caveats, the cost model, the DDP count.
(The page's claims are in test_accumulation_page.py, the cost model's
properties in test_accumulation_properties.py.)"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlbook.accumulation import experiments as acc
from mlbook.accumulation import experiments_ddp, live
from mlbook.accumulation import figures as figs
from mlbook.accumulation import formulas as cost
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config

TINY_GPT = tiny_config(n_layers=1, d_model=32, n_heads=2, vocab_size=64)


def lm_loss(logits, t):
    return F.cross_entropy(logits.flatten(0, 1), t.flatten())


# --- the identity: property tests over batch sizes and k ----------------------------
# The bars are the brief's (section 2): accumulated and full-batch gradients of the
# LayerNorm MLP within 1e-6 (fp32 rounding of O(1) sums: a few steps of 2^-23), the
# BatchNorm MLP's apart by more than 1e-4 (a hundred times that: a different gradient).

CASES = [(B, k) for B in (4, 6, 12, 16, 30) for k in cost.divisors(B)]


@pytest.mark.parametrize("B,k", CASES)
def test_layernorm_accumulation_equals_full_batch(B, k):
    for seed in (0, 1):
        X, y = acc.regression_batch(B, seed=seed)
        model = acc.make_mlp("layernorm", seed=seed)
        diff = acc.max_abs_diff(
            acc.full_batch_grads(model, F.mse_loss, X, y),
            acc.accumulated_grads(model, F.mse_loss, X, y, k),
        )
        assert diff < 1e-6


@pytest.mark.parametrize("B,k", [(B, k) for B, k in CASES if 1 < k < B and B // k >= 2])
def test_batchnorm_breaks_the_identity(B, k):
    # BatchNorm normalises a micro-batch by its own statistics (b >= 2 so that
    # training-mode BatchNorm has a variance to use).
    X, y = acc.regression_batch(B, seed=3)
    model = acc.make_mlp("batchnorm", seed=3)
    diff = acc.max_abs_diff(
        acc.full_batch_grads(model, F.mse_loss, X, y),
        acc.accumulated_grads(model, F.mse_loss, X, y, k),
    )
    assert diff > 1e-4


@pytest.mark.parametrize("norm", acc.NORMS)
def test_k_equal_1_is_the_full_batch_exactly(norm):
    X, y = acc.regression_batch(8)
    model = acc.make_mlp(norm)
    assert (
        acc.max_abs_diff(
            acc.full_batch_grads(model, F.mse_loss, X, y),
            acc.accumulated_grads(model, F.mse_loss, X, y, 1),
        )
        == 0
    )


def test_gradients_match_a_hand_written_loop_and_leave_the_model_alone():
    X, y = acc.regression_batch(8)
    model = acc.make_mlp("batchnorm")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    got = acc.accumulated_grads(model, F.mse_loss, X, y, 4)
    for (
        k,
        v,
    ) in model.state_dict().items():  # running stats untouched, no .grad left behind
        assert torch.equal(v, before[k])
    assert all(p.grad is None for p in model.parameters())
    ref = acc.make_mlp("batchnorm")
    for X_j, y_j in zip(X.chunk(4), y.chunk(4), strict=True):
        (F.mse_loss(ref(X_j), y_j) / 4).backward()
    assert acc.max_abs_diff(got, [p.grad for p in ref.parameters()]) == 0


def test_make_mlp_is_seeded_and_does_not_touch_the_global_rng():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a, b = acc.make_mlp(seed=5), acc.make_mlp(seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(
        torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )
    assert isinstance(acc.make_mlp("batchnorm")[1], nn.BatchNorm1d)
    assert isinstance(acc.make_mlp("layernorm")[1], nn.LayerNorm)
    assert acc.make_mlp(out_std=1e-5)[-1].weight.std() < 1e-4


def test_max_abs_diff_known_answer():
    a = [torch.tensor([1.0, 2.0]), torch.tensor([[0.0]])]
    b = [torch.tensor([1.0, 2.5]), torch.tensor([[-1.0]])]
    assert acc.max_abs_diff(a, b) == 1.0
    assert acc.max_abs_diff(a, a) == 0.0
    assert acc.grad_norm([torch.tensor([3.0]), torch.tensor([4.0])]) == pytest.approx(
        5.0
    )
    assert acc.cosine(a, a) == pytest.approx(1.0)


# --- clipping -----------------------------------------------------------------------


def test_clip_after_the_last_micro_batch_equals_clipping_the_full_batch():
    X, y = acc.regression_batch(32, seed=2)
    model = acc.make_mlp(seed=2)
    full = acc.full_batch_grads(model, F.mse_loss, X, y)
    max_norm = 0.5 * acc.grad_norm(full)
    reference = [g * (max_norm / acc.grad_norm(full)) for g in full]
    right = acc.clipped_accumulated_grads(
        model, F.mse_loss, X, y, 8, max_norm, "accumulated"
    )
    wrong = acc.clipped_accumulated_grads(
        model, F.mse_loss, X, y, 8, max_norm, "every_micro_batch"
    )
    assert acc.max_abs_diff(right, reference) < 1e-6
    assert acc.max_abs_diff(wrong, reference) > 1e-4
    assert (
        acc.cosine(wrong, reference) < 0.999
    )  # a different direction, not just length
    # A threshold that never bites makes both the plain accumulated gradient.
    big = 1e6
    for where in acc.CLIP_WHERE:
        g = acc.clipped_accumulated_grads(model, F.mse_loss, X, y, 8, big, where)
        assert acc.max_abs_diff(g, full) < 1e-6


# --- token-level losses -------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 4, 8])
def test_token_normalisation_fixes_variable_lengths(k):
    gpt = GPT(TINY_GPT, max_seq_len=16)
    idx, targets, lengths = acc.variable_length_batch(
        8, 16, TINY_GPT.vocab_size, seed=k
    )
    assert len(set(lengths.tolist())) > 1
    full = acc.full_batch_grads(gpt, acc.token_mean_loss, idx, targets)
    assert (
        acc.max_abs_diff(acc.token_normalised_grads(gpt, idx, targets, k), full) < 1e-6
    )
    assert acc.max_abs_diff(acc.naive_token_grads(gpt, idx, targets, k), full) > 1e-4


def test_naive_token_mean_is_right_when_every_micro_batch_has_the_same_count():
    gpt = GPT(TINY_GPT, max_seq_len=8)
    idx, targets, lengths = acc.variable_length_batch(
        4, 8, TINY_GPT.vocab_size, min_len=8
    )
    assert (lengths == 8).all()
    full = acc.full_batch_grads(gpt, acc.token_mean_loss, idx, targets)
    assert acc.max_abs_diff(acc.naive_token_grads(gpt, idx, targets, 2), full) < 1e-6


def test_variable_length_batch_pads_with_ignore_index():
    idx, targets, lengths = acc.variable_length_batch(6, 10, 50, min_len=2, seed=4)
    assert idx.shape == targets.shape == (6, 10)
    assert lengths.tolist() == sorted(lengths.tolist())
    assert acc.token_count(targets) == int(lengths.sum())
    for row, n in zip(targets, lengths, strict=True):
        assert (row[n:] == acc.IGNORE_INDEX).all() and (row[:n] >= 0).all()


def test_token_weights_known_answer():
    targets = torch.full((4, 4), acc.IGNORE_INDEX)
    targets[0, :1] = targets[1, :1] = 1  # micro-batch 1: 2 tokens
    targets[2, :4] = targets[3, :2] = 1  # micro-batch 2: 6 tokens
    naive = acc.token_weights(targets, 2)
    assert naive.tolist() == pytest.approx([1 / 4, 1 / 12])
    assert acc.token_weights(targets, 2, "normalised").tolist() == pytest.approx(
        [1 / 8, 1 / 8]
    )
    assert float((naive * torch.tensor([2.0, 6.0])).sum()) == pytest.approx(1.0)


# --- fp16 loss scaling (the exercise) -------------------------------------------------


def test_fp16_without_scale_zeroes_first_layer_gradients_and_scaling_recovers_them():
    model = acc.make_mlp(out_std=1e-5)
    X, y = acc.regression_batch(64)
    ref = acc.accumulated_grads(model, F.mse_loss, X, y, 8)
    g1, inf1 = acc.fp16_accumulated_grads(model, F.mse_loss, X, y, 8, 1.0)
    gS, infS = acc.fp16_accumulated_grads(model, F.mse_loss, X, y, 8, 1024.0)
    assert not inf1 and not infS
    assert acc.zero_fraction(g1, ref) > 0
    assert acc.zero_fraction(gS, ref) == 0

    def rel(g):
        return ((g[0] - ref[0]).abs().max() / ref[0].abs().max()).item()

    assert rel(gS) < 1e-2 < rel(g1)
    assert all(g.dtype == torch.float32 for g in gS)


def test_fp16_overflow_is_reported():
    model = acc.make_mlp()
    X, y = acc.regression_batch(8)
    _, found_inf = acc.fp16_accumulated_grads(model, F.mse_loss, X, y, 2, 1e12)
    assert found_inf


# --- measurement --------------------------------------------------------------------


def test_saved_bytes_of_a_linear_layer_is_its_input():
    lin = nn.Linear(16, 3, bias=False)
    X = torch.randn(10, 16)
    # A linear layer keeps its input for the weight gradient; the weight is a
    # parameter and is not counted; sum() keeps nothing.
    assert (
        acc.saved_activation_bytes(lin, lambda out, _: out.sum(), X, None)
        == 10 * 16 * 4
    )


def test_saved_bytes_grow_with_the_micro_batch():
    gpt = GPT(TINY_GPT, max_seq_len=16)
    X, y = random_batch(TINY_GPT, 8, 16)
    small = acc.saved_activation_bytes(gpt, lm_loss, X[:2], y[:2])
    large = acc.saved_activation_bytes(gpt, lm_loss, X, y)
    assert large / small == pytest.approx(4, rel=0.05)


def test_measure_k_sweep_on_cpu():
    gpt = GPT(TINY_GPT, max_seq_len=8)
    X, y = random_batch(TINY_GPT, 4, 8)
    threads = torch.get_num_threads()
    rounds = []
    sweep = acc.measure_k_sweep(
        gpt,
        lm_loss,
        X,
        y,
        [1, 2, 4],
        steps=1,
        threads=1,
        on_round=lambda r, n: rounds.append((r, n)),
    )
    assert rounds == [(0, 1), (1, 1)]  # the warm-up round, then one timed round
    assert torch.get_num_threads() == threads and sweep.threads == 1
    assert [r.k for r in sweep.rows] == [1, 2, 4]
    assert [r.micro_batch for r in sweep.rows] == [4, 2, 1]
    assert all(
        r.step_s > 0 and len(r.times_s) == 1 and r.peak_bytes is None
        for r in sweep.rows
    )
    saved = [r.saved_bytes for r in sweep.rows]
    assert saved[0] > saved[1] > saved[2]
    model = cost.fit_cost_model(sweep)
    assert model.per_example_bytes > 0
    # the live figure draws the sweep (no CUDA peak on a CPU: no squares)
    fixed = live.cost_data(model, sweep, "CPU test")
    spec = live.cost_explorer(4, 2, **fixed)
    grey = [lay for lay in spec["layer"] if lay["mark"].get("color") == "#666666"]
    assert [[r["k"] for r in lay["data"]["values"]] for lay in grey] == [[1, 2, 4]] * 2
    assert spec["title"]["subtitle"][1] == "measured on CPU test"


def test_accumulation_step_averages_micro_batch_losses():
    model = acc.make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    X, y = acc.regression_batch(8)
    loss = acc.accumulation_step(
        model, opt, F.mse_loss, list(zip(X.chunk(4), y.chunk(4), strict=True))
    )
    assert loss == pytest.approx(F.mse_loss(model(X), y).item(), rel=1e-6)


# --- the cost model -------------------------------------------------------------------


def test_cost_model_known_answers():
    m = cost.StepCostModel(
        optimizer_s=0.01,
        per_micro_batch_s=0.002,
        per_example_s=0.001,
        per_example_bytes=1000,
        fixed_bytes=10,
    )
    assert m.step_s(32, 4) == pytest.approx(0.01 + 4 * 0.002 + 32 * 0.001)
    assert m.activation_bytes(8) == 8010
    assert m.slowdown(32, 1) == 1
    assert m.slowdown(32, 32) == pytest.approx(
        (0.01 + 0.064 + 0.032) / (0.01 + 0.002 + 0.032)
    )
    assert cost.divisors(12) == [1, 2, 3, 4, 6, 12]


def test_fit_recovers_a_synthetic_model():
    truth = cost.StepCostModel(0.005, 0.003, 0.0002, 2048, 100)
    B = 64
    rows = tuple(
        cost.SweepRow(k, B // k, truth.step_s(B, k), truth.activation_bytes(B // k))
        for k in (1, 2, 4, 8, 16)
    )
    fit = cost.fit_cost_model(cost.KSweep(B, rows, optimizer_s=0.005))
    for name in (
        "optimizer_s",
        "per_micro_batch_s",
        "per_example_s",
        "per_example_bytes",
        "fixed_bytes",
    ):
        assert getattr(fit, name) == pytest.approx(
            getattr(truth, name), rel=1e-9, abs=1e-9
        )


def test_other_figures_have_labelled_axes():
    for fig in (
        figs.identity_vs_k([2, 4], {"a": [1e-8, 2e-8], "b": [1e-3, 1e-2]}),
        figs.token_weights([3, 9], 2),
    ):
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)


# --- the two-process DDP run ----------------------------------------------------------


def _ddp_children() -> list[int]:
    """Live processes started from the DDP module (its workers)."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (
                    b"mlbook.accumulation.experiments_ddp"
                    in (p / "cmdline").read_bytes()
                ):
                    found.append(int(p.name))
            except OSError:
                pass
    return found


def test_ddp_counts_allreduces_with_and_without_no_sync():
    k = 3
    out = experiments_ddp.allreduce_counts(k=k, steps=1, micro_batch=4, d_hidden=32)
    sync, skip = (out.modes[mode] for mode in experiments_ddp.MODES)
    assert out.world_size == 2 and out.k == k
    # the MLP Linear(32, 32) -> LayerNorm(32) -> Linear(32, 8), by hand:
    # 32*32 + 32 + 2*32 + 32*8 + 8
    assert out.n_params == 1384
    # A model this small is one DDP bucket: one all-reduce per synchronised backward.
    assert sync.allreduces_per_step == k and skip.allreduces_per_step == 1
    assert sync.ranks_agree and skip.ranks_agree
    assert (
        sync.allreduce_bytes_per_step
        == k * skip.allreduce_bytes_per_step
        == k * 4 * 1384
    )
    # Either way the result is the gradient of the global batch of both ranks (fp32 sums
    # of O(1) values: 1e-6 is about ten fp32 rounding steps at 1).
    assert sync.grad_diff < 1e-6 and skip.grad_diff < 1e-6
    assert sync.allreduce_s_per_step > 0 and skip.step_s > 0
    assert not _ddp_children()


def test_ddp_timeout_kills_the_workers():
    with pytest.raises(TimeoutError, match="timeout_s=0.2"):
        experiments_ddp.allreduce_counts(k=2, steps=1, timeout_s=0.2)
    assert not _ddp_children()


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -2, 3, 5, 2.0, True, "4"])
def test_bad_k_is_refused_naming_the_value(k):
    X, y = acc.regression_batch(8)
    model = acc.make_mlp()
    with pytest.raises(ValueError, match=rf"k.*{k!r}|k={k!r}"):
        acc.accumulated_grads(model, F.mse_loss, X, y, k)
    with pytest.raises(ValueError, match="k"):
        cost.check_k(k, 8)


def test_k_that_does_not_divide_says_so():
    X, y = acc.regression_batch(10)
    with pytest.raises(ValueError, match=r"k=4 must divide batch_size=10"):
        acc.accumulated_grads(acc.make_mlp(), F.mse_loss, X, y, 4)
    with pytest.raises(ValueError, match=r"k=3"):
        cost.StepCostModel(0, 0, 0, 0).step_s(16, 3)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: acc.make_mlp("groupnorm"), "norm"),
        (lambda: acc.make_mlp(d_hidden=0), "d_hidden"),
        (lambda: acc.make_mlp(out_std=-1.0), "out_std"),
        (lambda: acc.regression_batch(0), "batch_size"),
        (
            lambda: acc.full_batch_grads(
                acc.make_mlp(), F.mse_loss, torch.zeros(4, 8), torch.zeros(3, 4)
            ),
            "4 examples",
        ),
        (lambda: acc.max_abs_diff([torch.zeros(2)], []), "length"),
        (lambda: acc.max_abs_diff([torch.zeros(2)], [torch.zeros(3)]), "shape"),
        (lambda: acc.max_abs_diff([], []), "empty"),
        (
            lambda: acc.clipped_accumulated_grads(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), 2, 0.0
            ),
            "max_norm",
        ),
        (
            lambda: acc.clipped_accumulated_grads(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), 2, 1.0, "before"
            ),
            "where",
        ),
        (lambda: acc.variable_length_batch(4, 8, 10, min_len=9), "min_len=9"),
        (lambda: acc.variable_length_batch(0, 8, 10), "n_seqs"),
        (
            lambda: acc.token_weights(torch.zeros(4, 2, dtype=torch.long), 2, "mean"),
            "how",
        ),
        (lambda: acc.token_weights(torch.zeros(4, 2, dtype=torch.long), 3), "k=3"),
        (
            lambda: acc.token_normalised_grads(
                GPT(TINY_GPT, 4),
                torch.zeros(2, 4, dtype=torch.long),
                torch.full((2, 4), acc.IGNORE_INDEX),
                2,
            ),
            "no real tokens",
        ),
        (
            lambda: acc.fp16_accumulated_grads(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), 2, 0
            ),
            "scale",
        ),
        (lambda: acc.zero_fraction([torch.zeros(1)], [torch.zeros(1)], 3), "index=3"),
        (lambda: acc.accumulation_step(acc.make_mlp(), None, F.mse_loss, []), "empty"),
        (
            lambda: acc.measure_k_sweep(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), [3]
            ),
            "k=3",
        ),
        (
            lambda: acc.measure_k_sweep(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), []
            ),
            "ks",
        ),
        (
            lambda: acc.measure_k_sweep(
                acc.make_mlp(), F.mse_loss, *acc.regression_batch(4), [1], threads=0
            ),
            "threads",
        ),
        (lambda: experiments_ddp.allreduce_counts(k=0), "k"),
        (lambda: experiments_ddp.allreduce_counts(steps=100), "steps=100"),
        (lambda: experiments_ddp.allreduce_counts(timeout_s=-1), "timeout_s"),
        (lambda: cost.StepCostModel(-1, 0, 0, 0), "optimizer_s"),
        (lambda: cost.StepCostModel(0, 0, 0, 0).activation_bytes(0), "micro_batch"),
        (lambda: cost.fit_line([1, 1], [2, 3]), "two distinct"),
        (lambda: cost.fit_line([1, 2], [2]), "must match"),
        (lambda: cost.divisors(0), "n"),
        (lambda: figs.token_weights([1, 2, 3], 2), "counts"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
