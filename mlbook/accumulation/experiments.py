"""Gradient accumulation: the identity, where it breaks, and what it costs.

For a mean-reduced loss over a batch of B = k b examples split into k equal
micro-batches, L = (1/k) sum_j L_j, so summing grad(L_j / k) over the k
micro-batches gives grad L, the full-batch gradient, up to float rounding.
It breaks where a layer mixes examples (BatchNorm normalises with micro-batch
statistics), where clipping acts before the last micro-batch, and where a
token-level loss is averaged per micro-batch over a varying number of tokens.

The functions here work on any ``model`` (an nn.Module) and ``loss_fn(output,
target)``; the caller's model is never changed (each works on a deep copy, so
BatchNorm running statistics and ``.grad`` stay as they were). The two-process
DDP run is in ``experiments_ddp`` (which imports the toy model from here); the
pure-number cost model in ``formulas``.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from mlbook.accumulation.formulas import KSweep, SweepRow, check_k
from mlbook.common import validate
from mlbook.common_torch import timing

NORMS = ("layernorm", "batchnorm")
IGNORE_INDEX = -100  # the target of a padding position (torch's cross_entropy default)


# --- the model ------------------------------------------------------------------


def make_mlp(
    norm: str = "layernorm",
    d_in: int = 8,
    d_hidden: int = 32,
    d_out: int = 4,
    seed: int = 0,
    dtype=torch.float32,
    out_std: float | None = None,
) -> nn.Sequential:
    """A small seeded MLP, Linear -> norm -> GELU -> Linear, with the given
    normalisation in the middle: LayerNorm (per example) or BatchNorm1d
    (statistics over the batch). ``out_std`` redraws the output layer's
    weights with that standard deviation (small-output inits, as GPT-2-style
    models use, make the gradients reaching the first layer small)."""
    validate.one_of("norm", norm, NORMS)
    for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        validate.positive_int(name, value)
    if out_std is not None:
        validate.positive("out_std", out_std)
    with torch.random.fork_rng(
        devices=[]
    ):  # seeding the model must not reseed the caller
        torch.manual_seed(seed)
        middle = (
            nn.LayerNorm(d_hidden) if norm == "layernorm" else nn.BatchNorm1d(d_hidden)
        )
        model = nn.Sequential(
            nn.Linear(d_in, d_hidden), middle, nn.GELU(), nn.Linear(d_hidden, d_out)
        )
        if out_std is not None:
            nn.init.normal_(model[-1].weight, std=out_std)
    return model.to(dtype)


def regression_batch(
    batch_size: int, d_in: int = 8, d_out: int = 4, seed: int = 0, dtype=torch.float32
):
    """Seeded random inputs (batch_size, d_in) and targets (batch_size, d_out)."""
    validate.positive_int("batch_size", batch_size)
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(batch_size, d_in, generator=gen, dtype=dtype)  # (B, d_in)
    y = torch.randn(batch_size, d_out, generator=gen, dtype=dtype)  # (B, d_out)
    return X, y


# --- the identity ---------------------------------------------------------------


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in model.parameters()
    ]


def _check_batch(X, y, k: int | None = None, scale: float | None = None) -> int:
    """The batch's size; an error if X and y differ in length, the batch is
    empty, k does not split it or a loss scale is not above 0."""
    if scale is not None:
        validate.positive("scale", scale)
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} examples but y has {len(y)}; they must match")
    if len(X) == 0:
        raise ValueError("the batch is empty; it needs at least one example")
    if k is not None:
        check_k(k, len(X))
    return len(X)


def full_batch_grads(model: nn.Module, loss_fn, X, y) -> list[torch.Tensor]:
    """Gradients of loss_fn(model(X), y) over the whole batch in one backward."""
    _check_batch(X, y)
    m = copy.deepcopy(model)
    m.zero_grad(set_to_none=True)
    loss_fn(m(X), y).backward()
    return _grads(m)


def accumulated_grads(model: nn.Module, loss_fn, X, y, k: int) -> list[torch.Tensor]:
    """Gradients summed over k equal micro-batches of loss_fn(...) / k.

    k must divide the batch. For a loss that is a mean over examples and a
    model whose examples do not interact, this equals ``full_batch_grads``.
    """
    _check_batch(X, y, k)
    m = copy.deepcopy(model)
    m.zero_grad(set_to_none=True)
    for X_j, y_j in zip(X.chunk(k), y.chunk(k), strict=True):
        (loss_fn(m(X_j), y_j) / k).backward()  # .grad accumulates across calls
    return _grads(m)


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """Largest absolute element-wise difference between two gradient lists."""
    if len(a) != len(b):
        raise ValueError(f"the gradient lists differ in length: {len(a)} and {len(b)}")
    if not a:
        raise ValueError("the gradient lists are empty")
    worst = 0.0
    for i, (x, z) in enumerate(zip(a, b, strict=True)):
        if x.shape != z.shape:
            raise ValueError(
                f"gradient {i} has shape {tuple(x.shape)} in one list and "
                f"{tuple(z.shape)} in the other"
            )
        worst = max(worst, (x.double() - z.double()).abs().max().item())
    return worst


def grad_norm(grads: list[torch.Tensor]) -> float:
    """The global L2 norm of a gradient list (what clip_grad_norm_ measures)."""
    return torch.linalg.vector_norm(
        torch.stack([g.double().norm() for g in grads])
    ).item()


def cosine(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """Cosine similarity of two gradient lists seen as one long vector each."""
    va = torch.cat([g.double().flatten() for g in a])
    vb = torch.cat([g.double().flatten() for g in b])
    return (va @ vb / (va.norm() * vb.norm())).item()


# --- clipping -------------------------------------------------------------------

CLIP_WHERE = ("accumulated", "every_micro_batch")


def clipped_accumulated_grads(
    model: nn.Module, loss_fn, X, y, k: int, max_norm: float, where: str = "accumulated"
) -> list[torch.Tensor]:
    """Accumulate over k micro-batches and clip with torch's clip_grad_norm_.

    where="accumulated" clips once, after the last micro-batch (right: the
    same as clipping the full-batch gradient). where="every_micro_batch"
    clips the running sum after every backward, the bug of putting the clip
    inside the accumulation loop: early micro-batches get shrunk again and
    again, so the update changes direction as well as length.
    """
    _check_batch(X, y, k)
    validate.positive("max_norm", max_norm)
    validate.one_of("where", where, CLIP_WHERE)
    m = copy.deepcopy(model)
    m.zero_grad(set_to_none=True)
    for X_j, y_j in zip(X.chunk(k), y.chunk(k), strict=True):
        (loss_fn(m(X_j), y_j) / k).backward()
        if where == "every_micro_batch":
            torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm)
    if where == "accumulated":
        torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm)
    return _grads(m)


# --- token-level losses with variable-length sequences ----------------------------


def variable_length_batch(
    n_seqs: int,
    max_len: int,
    vocab_size: int,
    min_len: int = 1,
    seed: int = 0,
    sort: bool = True,
):
    """Token ids (n_seqs, max_len) and next-token targets padded with -100.

    Lengths are drawn uniformly from [min_len, max_len]; sort=True orders the
    sequences by length, as length-bucketed loaders do, so micro-batches hold
    very different token counts. Returns (idx, targets, lengths).
    """
    validate.positive_int("n_seqs", n_seqs)
    validate.positive_int("max_len", max_len)
    validate.positive_int("vocab_size", vocab_size)
    validate.positive_int("min_len", min_len)
    if min_len > max_len:
        raise ValueError(f"min_len={min_len} must be at most max_len={max_len}")
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n_seqs,), generator=gen)
    if sort:
        lengths = lengths.sort().values
    ids = torch.randint(0, vocab_size, (n_seqs, max_len + 1), generator=gen)
    idx, targets = ids[:, :-1].clone(), ids[:, 1:].clone()  # (n, s)
    pad = torch.arange(max_len)[None, :] >= lengths[:, None]  # (n, s)
    idx[pad] = 0
    targets[pad] = IGNORE_INDEX
    return idx, targets, lengths


def token_count(targets) -> int:
    """Tokens that carry a loss (targets that are not padding)."""
    return int((targets != IGNORE_INDEX).sum())


def token_mean_loss(logits, targets):
    """Cross-entropy averaged over the real tokens of this batch (padding skipped)."""
    return F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX
    )


def token_sum_loss(logits, targets):
    """Cross-entropy summed over the real tokens (padding skipped)."""
    return F.cross_entropy(
        logits.flatten(0, 1),
        targets.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def _check_tokens(idx, targets, k: int) -> int:
    """The batch's real-token count; an error if k does not split it or it has
    no real token."""
    _check_batch(idx, targets, k)
    n_tokens = token_count(targets)
    if n_tokens == 0:
        raise ValueError("the batch has no real tokens (every target is padding)")
    return n_tokens


def naive_token_grads(model: nn.Module, idx, targets, k: int) -> list[torch.Tensor]:
    """The bug: each micro-batch's own token mean, divided by k. A token in a
    short micro-batch weighs more than one in a long micro-batch."""
    return accumulated_grads(model, token_mean_loss, idx, targets, k)


def token_normalised_grads(
    model: nn.Module, idx, targets, k: int
) -> list[torch.Tensor]:
    """The fix: sum each micro-batch's token losses and divide by the token
    count of the whole batch, counted before the first micro-batch."""
    n_tokens = _check_tokens(idx, targets, k)  # the whole batch's real tokens
    m = copy.deepcopy(model)
    m.zero_grad(set_to_none=True)
    for idx_j, t_j in zip(idx.chunk(k), targets.chunk(k), strict=True):
        (token_sum_loss(m(idx_j), t_j) / n_tokens).backward()
    return _grads(m)


def token_weights(targets, k: int, how: str = "naive") -> torch.Tensor:
    """The weight each micro-batch gives each of its tokens in the accumulated
    loss: 1 / (k N_j) for the naive mean, 1 / N for the fix (N tokens in all,
    N_j in micro-batch j). Returns a (k,) tensor."""
    validate.one_of("how", how, ("naive", "normalised"))
    check_k(k, len(targets))
    counts = torch.tensor(
        [token_count(t) for t in targets.chunk(k)], dtype=torch.float64
    )
    if how == "naive":
        return 1.0 / (k * counts)
    return torch.full((k,), 1.0 / counts.sum().item(), dtype=torch.float64)


# --- fp16 loss scaling inside accumulation (the exercise) --------------------------


def fp16_accumulated_grads(model: nn.Module, loss_fn, X, y, k: int, scale: float = 1.0):
    """Accumulate in fp16 with the loss of each micro-batch scaled by S / k,
    then unscale once (divide by S) in fp32.

    The model and data are cast to fp16, so the forward, the backward and the
    running .grad sum are fp16; the loss itself is computed in fp32 from the
    fp16 output. Returns (grads in fp32, found_inf): found_inf is True when a
    gradient overflowed, in which case a real trainer skips the step and
    lowers S (torch.amp.GradScaler does both).
    """
    _check_batch(X, y, k, scale)
    m = copy.deepcopy(model).half()
    m.zero_grad(set_to_none=True)
    for X_j, y_j in zip(X.chunk(k), y.chunk(k), strict=True):
        loss = loss_fn(m(X_j.half()).float(), y_j.float())
        (loss * (scale / k)).backward()
    grads = [g.float() / scale for g in _grads(m)]  # unscale once
    found_inf = not all(torch.isfinite(g).all() for g in grads)
    return grads, found_inf


def zero_fraction(
    got: list[torch.Tensor], reference: list[torch.Tensor], index: int = 0
) -> float:
    """Share of entries of gradient ``index`` that are exactly zero in ``got``
    while the reference has them non-zero: gradients lost to underflow."""
    if not 0 <= index < len(got):
        raise ValueError(f"index={index} is out of range for {len(got)} gradients")
    lost = (got[index] == 0) & (reference[index] != 0)
    return lost.double().mean().item()


# --- measuring a step against k -----------------------------------------------------


def saved_activation_bytes(model: nn.Module, loss_fn, X, y) -> int:
    """Bytes the autograd graph keeps for backward in one forward of (X, y).

    Counted with torch.autograd.graph.saved_tensors_hooks, on any device:
    each saved tensor's storage once, parameters left out (they are there
    whether or not a forward runs). This is the activation memory a
    micro-batch holds from its forward to its backward.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(X), y)
    del loss
    return sum(saved.values())


def accumulation_step(model: nn.Module, optimizer, loss_fn, micro_batches) -> float:
    """One optimizer step over a list of (X, y) micro-batches, each loss / k.
    Returns the mean loss as a float."""
    k = len(micro_batches)
    if k == 0:
        raise ValueError("micro_batches is empty; a step needs at least one")
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for X_j, y_j in micro_batches:
        loss = loss_fn(model(X_j), y_j) / k
        loss.backward()
        total += loss.detach()
    optimizer.step()
    return float(total)


def measure_k_sweep(
    model: nn.Module,
    loss_fn,
    X,
    y,
    ks,
    steps: int = 3,
    device: str = "cpu",
    threads: int | None = None,
    on_round=None,
) -> KSweep:
    """Step time and activation memory against k at the fixed global batch (X, y).

    For each k: the median wall time of ``steps`` optimizer steps and the
    bytes saved for backward by one micro-batch. The k values are timed in
    interleaved rounds (one step of each k per round, after one warm-up
    round), so a burst of load from elsewhere hits every k alike. ``threads``
    sets torch's CPU threads for the sweep only (one thread keeps timings
    steady on a shared machine). On CUDA it also records the peak memory
    allocated during a step above what was allocated before it
    (torch.cuda.max_memory_allocated). The optimizer step alone is timed
    too, to split the step's fixed cost from its per-example cost.
    ``on_round(r, steps)``, if given, is called after each round r (0 is the
    warm-up), so that a long cell can show it is alive.
    """
    B = _check_batch(X, y)
    ks = [check_k(k, B) for k in ks]
    if not ks:
        raise ValueError("ks is empty; give at least one k")
    validate.positive_int("steps", steps)
    model = copy.deepcopy(model).to(device)
    X, y = X.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    micro = {k: list(zip(X.chunk(k), y.chunk(k), strict=True)) for k in ks}
    steps_of = {
        k: (lambda mb=micro[k]: accumulation_step(model, opt, loss_fn, mb)) for k in ks
    }
    with timing.cpu_threads(threads, name="threads"):
        used_threads = torch.get_num_threads()
        times = {k: [] for k in ks}
        for r in range(steps + 1):  # round 0 warms up
            for k in ks:
                t = timing.time_steps(steps_of[k], steps=1, warmup=0, device=device)
                if r:
                    times[k] += t
            if on_round is not None:
                on_round(r, steps)
        opt_s = timing.median_s(
            timing.time_steps(opt.step, steps=max(steps, 3), warmup=1, device=device)
        )
        rows = []
        for k in ks:
            peak = None
            if device == "cuda":
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                steps_of[k]()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
            rows.append(
                SweepRow(
                    k=k,
                    micro_batch=B // k,
                    step_s=timing.median_s(times[k]),
                    saved_bytes=saved_activation_bytes(model, loss_fn, *micro[k][0]),
                    times_s=tuple(times[k]),
                    peak_bytes=peak,
                )
            )
    return KSweep(
        global_batch=B,
        rows=tuple(rows),
        optimizer_s=opt_s,
        device=device,
        threads=used_threads,
    )
