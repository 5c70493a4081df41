"""A real tokenizer, trained offline: byte-level BPE on the Python sources that
ship with the interpreter.

Nothing is downloaded. The corpus is a deterministic subset of the standard
library's ``.py`` files (sorted paths, every k-th file so that the subset
spans the whole library, whole files up to a byte cap), so a given Python
version always gives the same corpus, the same tokenizer and the same hash.
Each file is one document. The tokenizer is Hugging Face ``tokenizers``' BPE
with a byte-level pre-tokenizer (as GPT-2 uses), trained at run time; it
reserves one special token, ``EOS``, that ends every document.

No torch here: ``tokenizers`` is a Rust library with Python bindings.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from mlbook.common import validate

EOS = "<|endoftext|>"
BYTE_ALPHABET = 256  # a byte-level BPE starts from one token per byte
SKIP_DIRS = ("site-packages", "dist-packages", "__pycache__")


@dataclass(frozen=True)
class Corpus:
    """Documents (one per source file) and where they came from."""

    root: str
    paths: tuple  # relative to root, in the order taken
    texts: tuple  # the files' text (UTF-8, undecodable bytes replaced)
    n_bytes: int  # UTF-8 bytes of all texts
    files_seen: int  # .py files under root (the subset is taken from these)
    python: str  # the interpreter whose library this is

    @property
    def n_docs(self) -> int:
        return len(self.texts)


def python_sources(max_bytes: int, root=None) -> Corpus:
    """A deterministic subset of the ``.py`` files under ``root`` (default:
    this interpreter's standard library), at most ``max_bytes`` of text.

    Files are sorted by path; every k-th one is taken (k = total bytes //
    max_bytes, at least 1) so that the subset samples the whole library, and
    a file that would overflow the cap is skipped. Installed packages
    (site-packages) are left out: they differ from machine to machine.
    """
    validate.positive_int("max_bytes", max_bytes)
    base = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    if not base.is_dir():
        raise ValueError(f"root must be a directory, got {str(base)!r}")
    files = sorted(
        (
            p
            for p in base.rglob("*.py")
            if p.is_file()
            and not any(part in SKIP_DIRS for part in p.relative_to(base).parts)
        ),
        key=lambda p: p.relative_to(base).as_posix(),
    )
    if not files:
        raise ValueError(f"no .py files under {str(base)!r}")
    sizes = [p.stat().st_size for p in files]
    stride = max(1, sum(sizes) // max_bytes)
    paths, texts, total = [], [], 0
    for p, size in zip(files[::stride], sizes[::stride], strict=True):
        if size == 0 or total + size > max_bytes:
            continue
        text = p.read_bytes().decode("utf-8", errors="replace")
        n = len(text.encode("utf-8"))
        if total + n > max_bytes:
            continue
        paths.append(p.relative_to(base).as_posix())
        texts.append(text)
        total += n
    if not texts:
        raise ValueError(
            f"max_bytes={max_bytes} is smaller than every file taken from {str(base)!r}"
        )
    return Corpus(
        str(base),
        tuple(paths),
        tuple(texts),
        total,
        len(files),
        f"{sys.implementation.name} {sys.version.split()[0]}",
    )


def _texts(texts) -> list:
    if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
        raise ValueError(
            f"texts must be a sequence of strings, got {type(texts).__name__}"
        )
    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one string, got an empty sequence")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a string, got {type(t).__name__}")
    return texts


def train_bpe(texts, vocab_size: int, min_frequency: int = 2):
    """Train a byte-level BPE with ``vocab_size`` tokens (at most: a small
    corpus may run out of pairs that occur ``min_frequency`` times first).

    The 256 byte tokens and ``EOS`` are always in the vocabulary, so any text
    encodes and decodes losslessly. Training is deterministic for the same
    texts in the same order.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = _texts(texts)
    validate.positive_int("vocab_size", vocab_size)
    if vocab_size < BYTE_ALPHABET + 1:
        raise ValueError(
            f"vocab_size must be at least {BYTE_ALPHABET + 1} (256 bytes and {EOS}), "
            f"got {vocab_size!r}"
        )
    validate.positive_int("min_frequency", min_frequency)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def tokenizer_sha256(tok) -> str:
    """SHA-256 of the tokenizer's JSON: two tokenizers with the same hash map
    every text to the same ids. Shards record it so that data tokenised with
    one tokenizer is never read with another."""
    if not hasattr(tok, "to_str"):
        raise ValueError(
            f"tok must be a tokenizers.Tokenizer, got {type(tok).__name__}"
        )
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()


def encode_documents(tok, texts, batched: bool = True) -> list:
    """Token ids of each text (no end token: packing adds it). ``batched``
    uses ``encode_batch``, which spreads the texts over the library's threads."""
    texts = _texts(texts)
    validate.boolean("batched", batched)
    if batched:
        return [e.ids for e in tok.encode_batch(texts)]
    return [tok.encode(t).ids for t in texts]


@dataclass(frozen=True)
class Throughput:
    """One tokenisation pass: how much went in and out, and how long it took."""

    batched: bool
    tokens: int
    n_bytes: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.n_bytes / self.seconds


def measure_throughput(tok, texts, batched: bool, repeats: int = 3) -> Throughput:
    """The fastest of ``repeats`` passes of ``encode_documents`` over ``texts``.

    ``batched=False`` is one ``encode`` call per document, one thread (what a
    training loop that tokenises as it goes does); ``batched=True`` is one
    ``encode_batch`` over all of them, on every thread the library starts
    (one per core). Best of several, because on a shared machine the slow
    passes measure the neighbours.
    """
    texts = _texts(texts)
    validate.boolean("batched", batched)
    validate.positive_int("repeats", repeats)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        ids = encode_documents(tok, texts, batched)
        best = min(best, time.perf_counter() - start)
        tokens = sum(len(d) for d in ids)
    return Throughput(batched, tokens, n_bytes, max(best, 1e-9))
