"""The operator counter against FlopCounterMode and against operand sizes
worked out by hand: the step model's inputs are counted once, and counted
right."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mlbook.common_torch.gpt import GPT, random_batch, tiny_config
from mlbook.common_torch.opcount import count_ops

F32 = 4


def test_bytes_of_simple_operators_by_hand():
    a = torch.randn(8, 16)
    b = torch.randn(16, 32)
    bias = torch.randn(32)

    def run():
        c = a @ b  # reads 8x16 and 16x32, writes 8x32
        d = c + bias  # reads 8x32 and 32, writes 8x32
        e = d.view(16, 16)  # a view: nothing moves
        e.add_(1.0)  # reads and writes 16x16
        return e.relu()  # reads 16x16, writes 16x16

    ops = {o.name: o for o in count_ops(run)}
    assert ops["aten::mm"].bytes == F32 * (8 * 16 + 16 * 32 + 8 * 32)
    assert ops["aten::mm"].flops == 2 * 8 * 32 * 16
    assert ops["aten::mm"].gemm == (8, 32, 16)
    assert ops["aten::add"].bytes == F32 * (8 * 32 + 32 + 8 * 32)
    assert ops["aten::view"].bytes == 0
    assert ops["aten::add_"].bytes == F32 * (256 + 256)
    assert ops["aten::relu"].bytes == F32 * (256 + 256)
    assert all(o.dtype == "fp32" for o in ops.values())


def _step(attn_impl, fused=True):
    torch.manual_seed(0)
    cfg = tiny_config(n_layers=2, d_model=64, n_heads=2, vocab_size=128)
    model = GPT(cfg, max_seq_len=16, attn_impl=attn_impl)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    idx, tgt = random_batch(cfg, 2, 16)

    def step():
        _, loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer's state exists from here on
    return cfg, model, step


@pytest.mark.parametrize("attn_impl", ["math", "sdpa"])
def test_flops_are_flop_counter_modes_plus_the_cpu_attention_kernel(attn_impl):
    cfg, _, step = _step(attn_impl)
    ops = count_ops(step)
    with FlopCounterMode(display=False) as counter:
        step()
    expected = counter.get_total_flops()
    if attn_impl == "sdpa":  # the counter sees 0 for the CPU's fused kernel:
        # by hand, the book's 12 L h s a token and the 2 L h s of the Q K^T the
        # backward recomputes (the count for the GPU's kernel), L = 2, h = 64,
        # s = 16, on b = 2 sequences of 16 tokens
        expected += (12 + 2) * 2 * 64 * 16 * (2 * 16)
    assert sum(o.flops for o in ops) == expected


def test_every_operator_moves_its_operands_sizes():
    cfg, model, step = _step("sdpa")
    ops = count_ops(step)
    for o in ops:
        if o.gemm is not None and o.batch == 1:  # a matmul's three operands
            m, n, k = o.gemm
            assert o.bytes == F32 * (m * k + k * n + m * n), o
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    adamw = next(o for o in ops if o.name == "aten::_fused_adamw_")
    # params, grads, exp_avg and exp_avg_sq read; the schema marks all four as
    # written; the step counts (one fp32 each) read
    assert adamw.bytes == F32 * (8 * n_params + n_tensors)
    views = [o for o in ops if o.name in ("aten::view", "aten::t", "aten::transpose")]
    assert views and all(o.bytes == 0 for o in views)


def test_where_each_operator_ran():
    _, _, step = _step("math")

    def scoped():
        with torch.profiler.record_function("ladder/step"):
            step()

    ops = count_ops(scoped)
    assert all(o.scopes[0] == "ladder/step" for o in ops)
    forward = [o for o in ops if not o.backward and o.name == "aten::mm"]
    backward = [o for o in ops if o.backward and o.name == "aten::mm"]
    assert forward and all(o.top == "aten::linear" for o in forward)
    assert backward and all("MmBackward" in o.top for o in backward)
    bmm = [o for o in ops if o.name == "aten::bmm" and not o.backward]
    assert bmm and all(o.batch == 2 * 2 for o in bmm)  # b x heads
