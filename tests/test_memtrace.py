"""A training step's memory traced on fake tensors (mlbook.common_torch.memtrace)
and held against the planner (mlbook.plan.experiments), with expected bytes
written out by hand from the models' shapes."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from mlbook.common import transformer
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch import memtrace as mt
from mlbook.plan import cli
from mlbook.plan import experiments as trace
from mlbook.plan.planner import RunSpec

TINY = TransformerConfig(
    n_layers=3,
    d_model=64,
    n_heads=4,
    d_ff=160,
    vocab_size=256,
    n_kv_heads=2,
    mlp="swiglu",
    name="tiny Llama",
)


def llama_params(L, h, kv, d_ff, V):
    """Parameters of a Llama with untied embeddings: per layer Q and O (h x h),
    K and V (h x kv), gate, up and down (h x d_ff), two norm gains; then the
    embedding and the head (V x h) and the final norm."""
    return L * (2 * h * h + 2 * h * kv + 3 * h * d_ff + 2 * h) + 2 * V * h + h


@pytest.fixture(scope="module")
def _traces() -> dict:
    return {}


@pytest.fixture
def shared_traces(_traces, monkeypatch) -> dict:
    """mt.trace_steps remembered by its arguments across the module's tests
    that ask for it: a trace is a pure function of them (seeded), and a fake
    one costs about 0.4 core-s a layer, so the tests that trace one shape
    (the tiny model's 2 layers, the plans' 1 and 2) trace it once."""
    real = mt.trace_steps
    signature = inspect.signature(real)

    def remembered(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = tuple(bound.arguments.values())
        if key not in _traces:
            _traces[key] = real(*args, **kwargs)
        return list(_traces[key])

    monkeypatch.setattr(mt, "trace_steps", remembered)
    return _traces


@pytest.mark.parametrize(
    "strategy, tp", [(s, 1) for s in mt.STRATEGIES] + [("selective", 2), ("full", 2)]
)
def test_fake_tensors_account_a_step_as_a_real_one_does(strategy, tp, shared_traces):
    fake = mt.trace_steps(TINY, 32, 2, tp, strategy, n_layers=2, fake=True)
    real = mt.trace_steps(TINY, 32, 2, tp, strategy, n_layers=2, fake=False)
    assert fake == real  # every kind at every moment, to the byte
    assert real[1].after_forward.activations > 0 and real[1].peak.total > 0


def test_the_master_copy_optimizer_updates_as_adamw_does():
    torch.manual_seed(0)
    w = torch.randn(16, 8)
    a, b = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    kw = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ours, ref = mt.MasterAdamW([a], **kw), torch.optim.AdamW([b], **kw)
    for _ in range(4):
        g = torch.randn(16, 8)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    state = ours.state[a]
    assert set(state) == {"master", "exp_avg", "exp_avg_sq"}  # 12 bytes a parameter
    assert all(t.dtype == torch.float32 for t in state.values())


def test_llama3_8b_state_is_the_planners_to_the_byte(shared_traces):
    cfg = transformer.LLAMA3_8B
    n = llama_params(32, 4096, 1024, 14336, 128256)  # 8,030,261,248
    # the shape the command's plan traces (s = 8192, b = 1, selective
    # recompute, the plan's layers), so this test and that one share a trace
    bill = mt.traced_bill(cfg, 8192, 1, 1, "selective", trace.LAYERS)
    assert bill.parameters_bytes == 2 * n  # bf16 weights
    assert bill.gradients_bytes == 2 * n  # bf16 gradients
    assert bill.optimizer_bytes == 12 * n  # fp32 master, m and v
    # RoPE's two tables (s x head_dim, bf16) and the causal mask (s x s, bool)
    assert bill.at("after step")["buffers"] == 2 * 8192 * 128 * 2 + 8192 * 8192


def test_a_layers_activations_by_strategy_are_the_chapters_count():
    # Llama-2-7B at s = 4096, b = 1: sbh(16 + 8 d_ff/h) + 2 a s^2 b without
    # recompute (no dropout; K and V at every head), sbh(16 + 8 d_ff/h) with the
    # attention core recomputed, 2 sbh (the input) with full recompute; plus two
    # fp32 inverse RMS per token (8 s b bytes), which the count leaves out
    s, b, h, a, d_ff = 4096, 1, 4096, 32, 11008
    sbh, norm_stats = s * b * h, 8 * s * b
    expected = {
        "none": (16 + 8 * d_ff / h) * sbh + 2 * a * s * s * b + norm_stats,
        "selective": (16 + 8 * d_ff / h) * sbh + norm_stats,
        "full": 2 * sbh,
    }
    for strategy, per_layer in expected.items():
        acts = mt.traced_activations(transformer.LLAMA2_7B, s, b, 1, strategy)
        assert acts.per_layer_bytes == per_layer, strategy
        # outside the layers: the final norm's input (2 sbh), its statistics,
        # the head's input (2 sbh), the fp32 log-probabilities (4 s b V), and two
        # fp32 scalars (the loss, and nll_loss's total weight)
        outside = 4 * sbh + 4 * s * b + 4 * s * b * 32000 + 8
        assert acts.outside_layers_bytes == outside
    matmuls = mt.traced_activations(transformer.LLAMA2_7B, s, b, 1, "selective_matmuls")
    # the chapter's PyTorch policy keeps less than Megatron's selective
    assert expected["full"] < matmuls.per_layer_bytes < expected["selective"]


def test_tensor_parallelism_with_sequence_parallelism_splits_a_layer_tp_ways():
    cfg = transformer.LLAMA3_70B
    one = mt.traced_activations(cfg, 1024, 1, 1, "none").per_layer_bytes
    eight = mt.traced_activations(cfg, 1024, 1, 8, "none").per_layer_bytes
    assert eight == one / 8


def test_a_plan_traced_kind_by_kind(shared_traces):
    spec = RunSpec(model="Llama-3-70B", tokens=15e12, gpu="H100 SXM", n_gpus=4096, tp=8)
    t = trace.trace_plan(spec)
    weights, grads, opt, acts = t.kinds
    # the norm gains ((2L + 1) h, bf16) are whole on each of the 8 ranks, where
    # the planner splits every parameter 8 ways
    replicated = (2 * 80 + 1) * 8192 * 2 * (1 - 1 / 8)
    assert weights.traced_bytes - weights.planned_bytes == pytest.approx(replicated)
    assert grads.traced_bytes - grads.planned_bytes == pytest.approx(replicated)
    assert acts.traced_bytes == pytest.approx(acts.planned_bytes, rel=1e-12)
    assert opt.traced_bytes == pytest.approx(opt.planned_bytes, rel=2e-4)
    named = {line.item for line in t.left_out}
    assert "embedding, final norm, head and fp32 loss" in named
    assert any(n.startswith("temporaries at the peak") for n in named)
    assert t.peak_bytes is not None and t.peak_phase in mt.PHASES


def test_a_pipeline_plan_is_traced_without_a_peak(shared_traces):
    # the shape of test_a_plan_traced_kind_by_kind's (one trace for both), in
    # 3 stages, which do not divide the 80 layers: each stage holds 27
    spec = RunSpec(
        model="Llama-3-70B", tokens=15e12, gpu="H100 SXM", n_gpus=3072, tp=8, pp=3
    )
    t = trace.trace_plan(spec)
    assert t.peak_bytes is None
    acts = t.kinds[3]
    assert acts.traced_bytes == pytest.approx(acts.planned_bytes, rel=1e-12)


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--recompute", "sqrt"], "--recompute"),
        (["--model", "GPT-3 175B", "--tp", "8"], "--trace-memory"),
    ],
)
def test_the_command_refuses_what_it_cannot_trace_in_one_line(capsys, flags, flag):
    argv = ["--model", "Llama-3-8B", "--tokens", "1e12", "--gpu", "H100 SXM"]
    argv += ["--gpus", "64", "--trace-memory", *flags]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and flag in err, err


def test_the_planners_errors_come_before_any_trace(capsys, monkeypatch):
    monkeypatch.setattr(trace, "trace_plan", lambda spec: pytest.fail("traced"))
    argv = ["--model", "Llama-3-8B", "--tokens", "-1", "--gpu", "H100 SXM"]
    assert cli.main([*argv, "--gpus", "64", "--trace-memory"]) == 2
    assert "--tokens" in capsys.readouterr().err


def test_the_command_prints_the_traced_bill_beside_the_planned_one(
    capsys, shared_traces
):
    argv = ["--model", "Llama-3-8B", "--tokens", "15e12", "--gpu", "H100 SXM"]
    assert cli.main([*argv, "--gpus", "1024", "--trace-memory"]) == 0
    out = capsys.readouterr().out
    traced = out[out.index("memory traced on fake tensors") :].splitlines()
    row = next(ln for ln in traced if ln.strip().startswith("weights"))
    planned, traced = (float(x.replace(",", "")) for x in row.split()[-2:])
    n = llama_params(32, 4096, 1024, 14336, 128256)
    assert planned == traced == round(2 * n / 2**30, 2)
    assert math.isfinite(planned)


def test_one_and_two_layers_compose_what_two_and_three_do(shared_traces):
    """The plan traces one and two layers (experiments.LAYERS): every kind
    at every moment of the composed bill is the same as from two and three."""
    assert trace.LAYERS == (1, 2)
    for strategy, tp in (("none", 1), ("selective", 2), ("full", 2)):
        a = mt.traced_bill(TINY, 32, 2, tp, strategy, layers=(1, 2))
        b = mt.traced_bill(TINY, 32, 2, tp, strategy, layers=(2, 3))
        assert all(a.at(m) == b.at(m) for m in mt.MOMENTS), (strategy, tp)


def test_plans_of_one_shape_share_a_trace(monkeypatch, shared_traces):
    """Plans that differ only in pp, dp or the GPU count are traced once;
    a bill of another shape (here another recompute) is refused."""
    calls = []
    real = mt.traced_bill
    monkeypatch.setattr(
        mt, "traced_bill", lambda *a, **k: calls.append(a) or real(*a, **k)
    )

    def spec(**kw):  # the shapes the composing test traces (b = 2)
        return RunSpec(
            model=TINY, tokens=1e9, gpu="H100 SXM", seq_len=32, micro_batch=2, **kw
        )

    full = spec(n_gpus=8, tp=2, recompute="full")
    flat, piped, other = trace.trace_plans(
        [spec(n_gpus=8, tp=2), spec(n_gpus=8, tp=2, pp=2), full]
    )
    assert len(calls) == 2  # selective recompute once, full once
    assert piped.bill is flat.bill and other.bill is not flat.bill
    assert piped.peak_bytes is None and flat.peak_bytes is not None
    # a stage holds half the model state of the same trace: tp 2, pp 2
    assert piped.kinds[0].traced_bytes == flat.kinds[0].traced_bytes / 2
    (again,) = trace.trace_plans([spec(n_gpus=16, tp=2)], known=[flat])
    assert again.bill is flat.bill and len(calls) == 2
    with pytest.raises(ValueError, match="bill traced for"):
        trace.trace_plan(full, flat.bill)
