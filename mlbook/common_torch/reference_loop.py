"""The reference training loop: the book's small GPT with seven defects that
can each be switched off (``LoopConfig``), its text data, and the clock and
nominal peak it is timed and judged by.

The defects: raw text tokenised inside the loop, a ``.item()`` and a print on
every micro-step, written-out attention, a vocabulary that is not a multiple
of 64, a for-loop AdamW, full activation recompute, and a micro-batch of one
sequence. bf16 autocast and torch.compile are two more switches where the
device rewards them. Each step is wrapped in ``record_function`` scopes
(``ladder/step``, ``ladder/data``, ``ladder/forward``, ``ladder/backward``,
``ladder/log``, ``ladder/optimizer``, ``ladder/recompute``).

The capstone's ladder fixes the defects one at a time; ``mlbook.calibrate``
times the loop with every fix but torch.compile as the machine's reference
step. Its sizes and fixes, torch-free, are ``mlbook.common.reference_loop``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace

import torch
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from mlbook.common import validate
from mlbook.common.accelerators import NominalPeak, usable_cores
from mlbook.common.reference_loop import (
    FIX_NAMES,
    SCOPE_PREFIX,
    LadderSizes,
    padded_vocab,
)
from mlbook.common.transformer import TransformerConfig
from mlbook.common_torch.device import nominal_peak_flops_per_s
from mlbook.common_torch.gpt import GPT, tiny_config
from mlbook.common_torch.timing import sync

P = SCOPE_PREFIX


# --- the loop and its defects -----------------------------------------------------


@dataclass(frozen=True)
class LoopConfig:
    """Which defects are on. The defaults are the slow loop: every one."""

    tokenise_in_loop: bool = True  # raw text -> BPE ids inside the step
    sync_every_micro_step: bool = True  # loss.item() and a print on every micro-step
    attn_impl: str = "math"  # written-out attention; "sdpa" is the fused kernel
    pad_vocab: bool = False  # vocabulary padded to a multiple of 64
    fused_optimizer: bool = (
        False  # False: AdamW's for-loop over parameters (foreach=False)
    )
    recompute: bool = True  # full activation recompute of every block
    micro_batch: int = 1  # sequences per micro-batch (the step's batch is fixed)
    bf16: bool = False  # bf16 autocast
    compile: bool = False  # torch.compile

    def __post_init__(self):
        for name in (
            "tokenise_in_loop",
            "sync_every_micro_step",
            "pad_vocab",
            "fused_optimizer",
            "recompute",
            "bf16",
            "compile",
        ):
            validate.boolean(name, getattr(self, name))
        validate.one_of("attn_impl", self.attn_impl, ("math", "sdpa"))
        validate.positive_int("micro_batch", self.micro_batch)

    @property
    def dtype(self) -> str:
        return "bf16" if self.bf16 else "fp32"


def slow_loop(sizes: LadderSizes) -> LoopConfig:
    """Every defect on: the ladder's rung 0."""
    return LoopConfig(micro_batch=sizes.small_micro_batch)


def apply_fix(config: LoopConfig, fix: str, sizes: LadderSizes) -> LoopConfig:
    """``config`` with one defect fixed (``fix`` one of ``FIX_NAMES``)."""
    validate.one_of("fix", fix, FIX_NAMES)
    change = {
        "pretokenise": dict(tokenise_in_loop=False),
        "log_every_n": dict(sync_every_micro_step=False),
        "sdpa": dict(attn_impl="sdpa"),
        "pad_vocab": dict(pad_vocab=True),
        "fused_adamw": dict(fused_optimizer=True),
        "no_recompute": dict(recompute=False),
        "bigger_micro_batch": dict(micro_batch=sizes.batch),
        "bf16": dict(bf16=True),
        "compile": dict(compile=True),
    }[fix]
    return replace(config, **change)


def model_config(sizes: LadderSizes, pad_vocab: bool = False) -> TransformerConfig:
    v = padded_vocab(sizes.vocab_size) if pad_vocab else sizes.vocab_size
    return tiny_config(
        n_layers=sizes.n_layers,
        d_model=sizes.d_model,
        n_heads=sizes.n_heads,
        vocab_size=v,
        name=f"GPT L={sizes.n_layers} h={sizes.d_model}",
    )


# --- text: tokenised once, or inside the loop ---------------------------------------


class TextData:
    """Python sources as training text, with a byte-level BPE trained on them
    at run time (the input-pipeline chapter's tokenizer).

    ``batch(b, in_loop=False)`` cuts b windows of s+1 tokens from the corpus
    tokenised once up front. ``in_loop=True`` is the slow loader: for each
    sequence it reads ``raw_chars`` characters of raw text from a random place
    (about one source file's worth) and tokenises all of them to keep the
    first s+1 tokens, as a loader that tokenises whole documents does. The
    amount read is fixed, so every step pays the same.
    """

    def __init__(self, sizes: LadderSizes, seed: int = 0, raw_chars: int = 16_384):
        from mlbook.common.tokenizer import (
            EOS,
            encode_documents,
            python_sources,
            train_bpe,
        )

        corpus = python_sources(sizes.corpus_bytes)
        self.tok = train_bpe(corpus.texts, sizes.tokenizer_vocab)
        self.eos = self.tok.token_to_id(EOS)
        self.texts = corpus.texts
        self.n_bytes = corpus.n_bytes
        self.raw = EOS.join(corpus.texts)
        self.raw_chars = validate.positive_int("raw_chars", raw_chars)
        ids = []
        for doc in encode_documents(self.tok, corpus.texts):
            ids.extend(doc)
            ids.append(self.eos)
        self.stream = torch.tensor(ids, dtype=torch.long)  # (n_tokens,)
        self.seq_len = sizes.seq_len
        self.gen = torch.Generator().manual_seed(seed)
        if len(self.stream) <= self.seq_len + 1 or len(self.raw) <= raw_chars:
            raise ValueError(
                f"corpus_bytes={sizes.corpus_bytes} gives {len(self.stream)} tokens "
                f"and {len(self.raw)} characters: too few for seq_len={self.seq_len} "
                f"and raw_chars={raw_chars}"
            )

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def batch(self, b: int, in_loop: bool = False):
        s = self.seq_len
        if in_loop:
            rows = []
            for _ in range(b):
                start = int(
                    torch.randint(
                        len(self.raw) - self.raw_chars, (1,), generator=self.gen
                    )
                )
                ids = self.tok.encode(self.raw[start : start + self.raw_chars]).ids
                if len(ids) < s + 1:
                    raise ValueError(
                        f"raw_chars={self.raw_chars} gave {len(ids)} tokens, "
                        f"fewer than s+1 = {s + 1}"
                    )
                rows.append(ids[: s + 1])
            rows = torch.tensor(rows, dtype=torch.long)  # (b, s+1)
        else:
            starts = torch.randint(len(self.stream) - s - 1, (b,), generator=self.gen)
            rows = torch.stack(
                [self.stream[j : j + s + 1] for j in starts.tolist()]
            )  # (b, s+1)
        return rows[:, :-1], rows[:, 1:]


class Loop:
    """One model, optimizer and data source set up as ``config`` says; ``step()``
    runs one optimizer step over ``sizes.batch`` sequences."""

    def __init__(
        self,
        config: LoopConfig,
        sizes: LadderSizes,
        data: TextData,
        device: str = "cpu",
        seed: int = 0,
        lr: float = 3e-4,
    ):
        validate.divides("micro_batch", config.micro_batch, "batch", sizes.batch)
        self.config, self.sizes, self.data, self.device = config, sizes, data, device
        torch.manual_seed(seed)
        self.cfg = model_config(sizes, config.pad_vocab)
        self.model = GPT(
            self.cfg, max_seq_len=sizes.seq_len, attn_impl=config.attn_impl
        ).to(device)
        if config.recompute:
            self.model.block_fn = self._checkpointed
        if config.fused_optimizer:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, fused=True)
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, foreach=False)
        self.forward = torch.compile(self.model) if config.compile else self.model
        self.sink = io.StringIO()  # the log: the point is the sync, not the text
        self.phase = "forward"
        self.steps_done = 0
        self.running_loss = torch.zeros((), device=device)

    def _block(self, block, x):
        if self.phase == "backward":  # the recomputed forward, inside backward
            with record_function(P + "recompute"):
                return block(x)
        return block(x)

    def _checkpointed(self, block, x):
        return checkpoint(self._block, block, x, use_reentrant=False)

    def step(self) -> None:
        c, k = self.config, self.sizes.batch // self.config.micro_batch
        with record_function(P + "step"):
            for _ in range(k):
                with record_function(P + "data"):
                    idx, tgt = self.data.batch(
                        c.micro_batch, in_loop=c.tokenise_in_loop
                    )
                    idx, tgt = idx.to(self.device), tgt.to(self.device)  # (b, s)
                self.phase = "forward"
                with (
                    record_function(P + "forward"),
                    torch.autocast(self.device, torch.bfloat16, enabled=c.bf16),
                ):
                    _, loss = self.forward(idx, tgt)
                self.phase = "backward"
                with record_function(P + "backward"):
                    (loss / k).backward()
                self.phase = "forward"
                with record_function(P + "log"):
                    if c.sync_every_micro_step:
                        print(
                            f"step {self.steps_done} loss {loss.item():.4f}",
                            file=self.sink,
                        )
                    else:
                        self.running_loss += loss.detach()
            with record_function(P + "optimizer"):
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
            self.steps_done += 1
            if (
                not c.sync_every_micro_step
                and self.steps_done % self.sizes.log_every == 0
            ):
                with record_function(P + "log"):
                    mean = self.running_loss.item() / (k * self.sizes.log_every)
                    print(f"step {self.steps_done} loss {mean:.4f}", file=self.sink)
                    self.running_loss.zero_()
            sync(self.device)


# --- its clock and its peak ------------------------------------------------------


def step_clock(device: str, threads: int | None) -> str:
    """ "thread" (CPU time) for a CPU step on one thread, else "wall"."""
    return "thread" if device == "cpu" and threads == 1 else "wall"


def nominal_peak(
    device: str, dtype: str, cpu_threads_used: int | None = None
) -> NominalPeak:
    """The nominal peak of what the ladder runs on, where it came from and its
    basis: a GPU's table row, or on a CPU the cores x clock x vector width of
    mlbook.common.accelerators, scaled to the cores the ladder's threads
    occupy (one thread keeps one core busy, not two). Unknown (None) where
    the device's is."""
    peak = nominal_peak_flops_per_s(device, dtype)
    cores = usable_cores()
    used = cpu_threads_used
    if device == "cpu" and peak.known and used is not None and used < cores:
        return NominalPeak(
            peak.flops_per_s * used / cores,
            f"{peak.how}, x {used}/{cores} cores used",
            peak.basis,
        )
    return peak
