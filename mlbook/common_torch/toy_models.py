"""The small training problem that the fault demos share.

A classification task whose labels come from a fixed random "teacher" matrix,
an MLP to learn it, and batches that are a pure function of (seed, batch
index): any process can rebuild any batch, which is what makes rewinding,
skipping and resuming exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mlbook.common import validate

D_IN, D_HIDDEN, N_CLASSES = 32, 128, 8


def teacher(seed: int = 0) -> torch.Tensor:
    """The fixed matrix that labels the data: y = argmax(x W)."""
    return torch.randn(
        D_IN, N_CLASSES, generator=torch.Generator().manual_seed(10_007 + seed)
    )


def make_model(seed: int = 0, hidden: int = D_HIDDEN) -> nn.Module:
    """A two-layer MLP, initialised from ``seed`` alone."""
    validate.positive_int("hidden", hidden)
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(D_IN, hidden), nn.GELU(), nn.Linear(hidden, N_CLASSES)
    )


def batch(index: int, batch_size: int = 64, seed: int = 0, bad: bool = False, w=None):
    """Batch number ``index`` of the stream: inputs (b, D_IN) and labels (b,).

    A bad batch stands for corrupt data: inputs blown up 8x and random labels.
    """
    validate.non_negative("index", index)
    validate.positive_int("batch_size", batch_size)
    g = torch.Generator().manual_seed(seed * 1_000_003 + int(index))
    x = torch.randn(batch_size, D_IN, generator=g)  # (b, D_IN)
    y = (x @ (teacher(seed) if w is None else w)).argmax(dim=1)  # (b,)
    if bad:
        x = 8 * x
        y = torch.randint(0, N_CLASSES, (batch_size,), generator=g)
    return x, y


def dataset(n_samples: int, seed: int = 0):
    """A fixed table of samples (for sampler-driven demos): x (n, D_IN), y (n,)."""
    validate.positive_int("n_samples", n_samples)
    g = torch.Generator().manual_seed(seed + 77)
    x = torch.randn(n_samples, D_IN, generator=g)
    return x, (x @ teacher(seed)).argmax(dim=1)


def loss_fn(model, x, y):
    return F.cross_entropy(model(x), y)
