import pytest
import torch

from mlbook.common_torch import timing as measure
from mlbook.common_torch.gpt import GPT, random_batch, tiny_config
from mlbook.mfu import flops


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
@pytest.mark.parametrize("kv", [None, 1])
def test_parameter_count_matches_formula(mlp, kv):
    cfg = tiny_config(
        n_layers=2, d_model=64, n_heads=4, vocab_size=100, mlp=mlp, n_kv_heads=kv
    )
    model = GPT(cfg, max_seq_len=16)
    n_model = sum(p.numel() for p in model.parameters()) - model.pos_emb.weight.numel()
    assert n_model == flops.n_params(cfg)


@pytest.mark.parametrize("kv", [None, 2])
def test_counted_flops_equal_formula(kv):
    cfg = tiny_config(n_layers=2, d_model=64, n_heads=4, vocab_size=128, n_kv_heads=kv)
    model = GPT(cfg, max_seq_len=32)
    idx, tgt = random_batch(cfg, 2, 32)
    tokens = 2 * 32
    fwd = measure.counted_flops(model, idx, tgt, backward=False)["total"]
    train = measure.counted_flops(model, idx, tgt, backward=True)["total"]
    assert fwd == flops.flops_per_token(cfg, 32, "forward") * tokens
    assert train == flops.flops_per_token(cfg, 32, "train") * tokens


def test_sdpa_and_math_agree():
    cfg = tiny_config(n_layers=1, d_model=32, n_heads=2, vocab_size=50)
    torch.manual_seed(0)
    a = GPT(cfg, max_seq_len=8, attn_impl="math")
    b = GPT(cfg, max_seq_len=8, attn_impl="sdpa")
    b.load_state_dict(a.state_dict())
    idx, _ = random_batch(cfg, 2, 8)
    torch.testing.assert_close(a(idx), b(idx), rtol=1e-5, atol=1e-5)


def test_causal():
    cfg = tiny_config(n_layers=1, d_model=32, n_heads=2, vocab_size=50)
    model = GPT(cfg, max_seq_len=8).eval()
    idx, _ = random_batch(cfg, 1, 8)
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 50
    torch.testing.assert_close(model(idx)[:, :-1], model(changed)[:, :-1])


def test_bad_inputs():
    cfg = tiny_config(n_layers=1, d_model=32, n_heads=2, vocab_size=50)
    with pytest.raises(ValueError, match="attn_impl"):
        GPT(cfg, attn_impl="flash")
    with pytest.raises(ValueError, match="dropout"):
        GPT(cfg, dropout=1.0)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        GPT(cfg, max_seq_len=8)(torch.zeros(1, 9, dtype=torch.long))


def test_time_steps_counts():
    calls = []
    times = measure.time_steps(lambda: calls.append(1), steps=3, warmup=2)
    assert len(times) == 3 and len(calls) == 5


def test_cpu_threads_sets_and_restores_and_leaves_gpus_alone():
    before = torch.get_num_threads()
    with measure.cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with measure.cpu_threads(1, device="cuda"):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be an integer above 0"):
        with measure.cpu_threads(0, name="threads"):
            pass
