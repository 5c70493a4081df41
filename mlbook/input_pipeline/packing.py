"""Packing documents into fixed-length rows, and what packing does to attention.

Conventions. A document is a sequence of token ids; every document is
followed by one end-of-document token (``eos_id``), which belongs to the
document it ends. A packed row holds ``seq_len + 1`` tokens: the model reads
the first ``seq_len`` and predicts the last ``seq_len`` (each row is a
training sample on its own, so no token is shared between rows).

Per-document batching gives every document rows of its own: a document of
``l`` tokens takes ceil(l / s) rows, the last one padded. Packing
concatenates the documents (with their end tokens) into one stream and cuts
it every ``s`` tokens, so only the end of the stream is padded. The padding
functions count in slots of ``s`` tokens (the +1 target token is the same
for both schemes and is left out).

Numpy only: no torch, so these run in a slider and in the tests without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlbook.common import validate


def _lengths(doc_lens) -> np.ndarray:
    if isinstance(doc_lens, (str, bytes)) or not isinstance(
        doc_lens, (Sequence, np.ndarray)
    ):
        raise ValueError(
            f"doc_lens must be a sequence of document lengths, got {doc_lens!r}"
        )
    if len(doc_lens) == 0:
        raise ValueError(
            "doc_lens must hold at least one document length, got an empty sequence"
        )
    for i, n in enumerate(doc_lens):
        if (
            isinstance(n, (bool, np.bool_))
            or not isinstance(n, (int, np.integer))
            or n <= 0
        ):
            raise ValueError(f"doc_lens[{i}] must be an integer above 0, got {n!r}")
    return np.asarray(doc_lens, dtype=np.int64)


def per_document_rows(doc_lens, seq_len: int) -> int:
    """Rows of ``seq_len`` slots that per-document batches need: sum ceil(l / s)."""
    lens = _lengths(doc_lens)
    s = validate.positive_int("seq_len", seq_len)
    return int(np.sum(-(-lens // s)))


def padding_waste(doc_lens, seq_len: int, batch_size: int | None = None) -> float:
    """Share of the slots that per-document batches fill with padding.

    Each document is cut into chunks of at most ``seq_len`` tokens, each chunk
    a row. ``batch_size=None`` pads every row to ``seq_len`` (fixed shapes);
    an integer pads each batch of ``batch_size`` consecutive rows to its
    longest row ("dynamic padding"), which wastes less and changes shape
    every step.
    """
    lens = _lengths(doc_lens)
    s = validate.positive_int("seq_len", seq_len)
    order = []  # chunk lengths, each document's chunks together, in order
    for n in lens.tolist():
        order.extend([s] * (n // s))
        if n % s:
            order.append(n % s)
    chunks = np.asarray(order, dtype=np.int64)
    tokens = int(chunks.sum())
    if batch_size is None:
        slots = len(chunks) * s
    else:
        b = validate.positive_int("batch_size", batch_size)
        slots = sum(
            len(chunks[i : i + b]) * int(chunks[i : i + b].max())
            for i in range(0, len(chunks), b)
        )
    return 1.0 - tokens / slots


def packing_waste(doc_lens, seq_len: int) -> float:
    """Share of the slots packing fills with padding: only the last row's
    tail, ceil(T / s) s - T of ceil(T / s) s slots for T tokens in all."""
    lens = _lengths(doc_lens)
    s = validate.positive_int("seq_len", seq_len)
    tokens = int(lens.sum())
    slots = -(-tokens // s) * s
    return 1.0 - tokens / slots


def pack_documents(docs, seq_len: int, eos_id: int) -> np.ndarray:
    """Pack token-id documents into rows of ``seq_len + 1`` tokens.

    Every document is followed by ``eos_id``; the stream is cut into
    consecutive rows of seq_len + 1 tokens and the incomplete tail is dropped
    (fewer than seq_len + 1 tokens of the whole corpus). Returns an int64
    array of shape (rows, seq_len + 1).
    """
    s = validate.positive_int("seq_len", seq_len)
    if (
        isinstance(eos_id, bool)
        or not isinstance(eos_id, (int, np.integer))
        or eos_id < 0
    ):
        raise ValueError(f"eos_id must be an integer at or above 0, got {eos_id!r}")
    if isinstance(docs, (str, bytes)) or not isinstance(docs, (Sequence, np.ndarray)):
        raise ValueError(
            f"docs must be a sequence of token-id sequences, got {type(docs).__name__}"
        )
    parts = []
    for i, d in enumerate(docs):
        arr = np.asarray(d)
        if arr.ndim != 1 or (
            arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0)
        ):
            raise ValueError(
                f"docs[{i}] must be a flat sequence of token ids at or above 0, "
                f"got {d!r:.60}"
            )
        parts.append(arr.astype(np.int64))
        parts.append(np.array([eos_id], dtype=np.int64))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    rows = len(stream) // (s + 1)
    return stream[: rows * (s + 1)].reshape(rows, s + 1)


def _row(row, eos_id) -> np.ndarray:
    arr = np.asarray(row)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"row must be a non-empty flat sequence of token ids, got {row!r:.60}"
        )
    if (
        isinstance(eos_id, bool)
        or not isinstance(eos_id, (int, np.integer))
        or eos_id < 0
    ):
        raise ValueError(f"eos_id must be an integer at or above 0, got {eos_id!r}")
    return arr


def document_ids(row, eos_id: int) -> np.ndarray:
    """Which document of the row each position belongs to: 0, 0, .., 1, 1, ..

    The count goes up after each ``eos_id`` (the end token belongs to the
    document it ends)."""
    arr = _row(row, eos_id)
    ends = (arr == eos_id).astype(np.int64)
    return np.concatenate([[0], np.cumsum(ends)[:-1]])


def reset_positions(row, eos_id: int) -> np.ndarray:
    """Position ids that restart at 0 at the start of each document of the
    row: what a packed row feeds a position embedding (or RoPE) so that every
    document sees the positions it would see alone."""
    ids = document_ids(row, eos_id)
    idx = np.arange(len(ids))
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1])
    return idx - starts[ids]


def document_mask(row, eos_id: int) -> np.ndarray:
    """Boolean (s, s) attention mask for a packed row: query i may attend key j
    when j <= i and both lie in the same document (block-diagonal causal).
    The plain causal mask is the same without the second condition."""
    ids = document_ids(row, eos_id)
    causal = np.tril(np.ones((len(ids), len(ids)), dtype=bool))
    return causal & (ids[:, None] == ids[None, :])


def mask_density(row, eos_id: int) -> float:
    """Share of the causal (query, key) pairs the document mask keeps:
    sum l_i (l_i + 1) / 2 over the row's documents, over s (s + 1) / 2.
    A kernel that skips masked blocks does that share of the causal work."""
    ids = document_ids(row, eos_id)
    s = len(ids)
    lens = np.bincount(ids)
    return float(np.sum(lens * (lens + 1)) / (s * (s + 1)))


class StreamPacker:
    """Packing done inside the training loop: what a loader that tokenises as
    it goes does.

    ``next_rows(n)`` returns the next ``n`` rows of seq_len + 1 tokens,
    calling ``encode(text) -> ids`` on the next documents (cycling over
    ``texts``) whenever its buffer runs short. On the same texts it yields
    exactly the rows that ``pack_documents`` writes offline, so an A/B of the
    two compares the same data, tokenised at different times.
    """

    def __init__(self, encode, texts, seq_len: int, eos_id: int):
        if not callable(encode):
            raise ValueError(f"encode must be a callable text -> ids, got {encode!r}")
        if isinstance(texts, (str, bytes)) or not texts:
            raise ValueError("texts must be a non-empty sequence of strings")
        self.encode, self.texts = encode, list(texts)
        self.seq_len = validate.positive_int("seq_len", seq_len)
        if (
            isinstance(eos_id, bool)
            or not isinstance(eos_id, (int, np.integer))
            or eos_id < 0
        ):
            raise ValueError(f"eos_id must be an integer at or above 0, got {eos_id!r}")
        self.eos_id = int(eos_id)
        self.next_doc = 0
        self.buffer = np.zeros(0, dtype=np.int64)
        self.tokens_encoded = 0

    def next_rows(self, n: int) -> np.ndarray:
        n = validate.positive_int("n", n)
        need = n * (self.seq_len + 1)
        parts = [self.buffer]
        have = len(self.buffer)
        while have < need:
            ids = np.asarray(
                self.encode(self.texts[self.next_doc % len(self.texts)]), dtype=np.int64
            )
            self.next_doc += 1
            self.tokens_encoded += len(ids)
            parts += [ids, np.array([self.eos_id], dtype=np.int64)]
            have += len(ids) + 1
        stream = np.concatenate(parts)
        self.buffer = stream[need:]
        return stream[:need].reshape(n, self.seq_len + 1)
