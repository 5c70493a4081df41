"""Token shards on disk: packed rows in raw memory-mappable files, and a
small index that says what they hold.

Layout of a shard directory::

    index.json          format, seq_len, dtype, vocab size, end token, the
                        tokenizer's SHA-256, and per shard: file, rows, bytes,
                        SHA-256 of the file
    shard-00000.bin     rows x (seq_len + 1) token ids, little-endian, no header
    shard-00001.bin     ...

Ids are stored as uint16 when the vocabulary has at most 65,536 tokens (half
the bytes of int32, a quarter of int64), else uint32. A reader maps the files
(``np.memmap``): opening costs nothing, and a row is read from disk (or the
page cache) only when it is touched. The index is written last, atomically,
so a directory whose index exists holds complete shards.

Numpy only; the torch Dataset over these files is in ``experiments``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from mlbook.common import validate
from mlbook.common.files import write_atomic

INDEX = "index.json"
FORMAT = "mlbook-packed-rows-1"
UINT16_VOCAB = 2**16


def token_dtype(vocab_size: int) -> str:
    """The narrowest unsigned type that holds every id of the vocabulary:
    'uint16' for up to 65,536 tokens, else 'uint32'."""
    v = validate.positive_int("vocab_size", vocab_size)
    if v > 2**32:
        raise ValueError(
            f"vocab_size must be at most 2**32 to fit uint32 ids, got {vocab_size!r}"
        )
    return "uint16" if v <= UINT16_VOCAB else "uint32"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_shards(
    rows,
    directory,
    rows_per_shard: int,
    vocab_size: int,
    tokenizer_sha256: str,
    eos_id: int,
) -> dict:
    """Write packed ``rows`` (an integer array of shape (n, seq_len + 1)) as
    shards of ``rows_per_shard`` rows into ``directory``; return the index.

    Ids must lie in [0, vocab_size). The last shard may hold fewer rows.
    """
    arr = np.asarray(rows)
    if (
        arr.ndim != 2
        or arr.shape[0] == 0
        or arr.shape[1] < 2
        or arr.dtype.kind not in "iu"
    ):
        raise ValueError(
            f"rows must be a 2-D integer array of at least one row of 2 or more ids, "
            f"got shape {arr.shape} and dtype {arr.dtype}"
        )
    per = validate.positive_int("rows_per_shard", rows_per_shard)
    dtype = token_dtype(vocab_size)
    if arr.min() < 0 or arr.max() >= vocab_size:
        raise ValueError(
            f"rows must hold ids in [0, vocab_size={vocab_size}), "
            f"got ids from {arr.min()} to {arr.max()}"
        )
    if not isinstance(tokenizer_sha256, str) or len(tokenizer_sha256) != 64:
        raise ValueError(
            "tokenizer_sha256 must be a 64-character hex digest, "
            f"got {tokenizer_sha256!r}"
        )
    if (
        isinstance(eos_id, bool)
        or not isinstance(eos_id, (int, np.integer))
        or not 0 <= eos_id < vocab_size
    ):
        raise ValueError(
            f"eos_id must be an integer in [0, vocab_size={vocab_size}), got {eos_id!r}"
        )
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    shards = []
    for k, start in enumerate(range(0, len(arr), per)):
        block = np.ascontiguousarray(
            arr[start : start + per], dtype=np.dtype(dtype).newbyteorder("<")
        )
        path = out / f"shard-{k:05d}.bin"
        block.tofile(path)
        shards.append(
            {
                "file": path.name,
                "rows": int(len(block)),
                "bytes": int(block.nbytes),
                "sha256": _sha256_file(path),
            }
        )
    index = {
        "format": FORMAT,
        "seq_len": int(arr.shape[1] - 1),
        "row_len": int(arr.shape[1]),
        "dtype": dtype,
        "vocab_size": int(vocab_size),
        "eos_id": int(eos_id),
        "tokenizer_sha256": tokenizer_sha256,
        "rows": int(len(arr)),
        "shards": shards,
    }
    write_atomic(out / INDEX, json.dumps(index, indent=1) + "\n")
    return index


def read_index(directory) -> dict:
    """The index of a shard directory; a missing or foreign index is an error."""
    path = Path(directory) / INDEX
    if not path.is_file():
        raise ValueError(
            f"directory {str(directory)!r} has no {INDEX}: not a shard directory "
            "(or its shards were never completed)"
        )
    index = json.loads(path.read_text())
    if index.get("format") != FORMAT:
        raise ValueError(
            f"{path} has format {index.get('format')!r}, expected {FORMAT!r}"
        )
    return index


class PackedShards:
    """The rows of a shard directory as one indexable sequence, without copying.

    ``shards[i]`` is row ``i`` (a read-only-to-disk numpy view of length
    seq_len + 1 into the memory map: nothing is copied until it is used).
    ``tokenizer_sha256``, if given, must match the index: data tokenised with
    another tokenizer is refused. ``verify=True`` also checks each file's
    size and SHA-256 against the index (reads everything once).
    """

    def __init__(
        self, directory, tokenizer_sha256: str | None = None, verify: bool = False
    ):
        self.directory = Path(directory)
        self.index = read_index(directory)
        if (
            tokenizer_sha256 is not None
            and tokenizer_sha256 != self.index["tokenizer_sha256"]
        ):
            raise ValueError(
                f"{self.directory} was tokenised by tokenizer "
                f"{self.index['tokenizer_sha256'][:12]}..., not by the one given "
                f"({str(tokenizer_sha256)[:12]}...): re-tokenise or use that tokenizer"
            )
        self.seq_len = self.index["seq_len"]
        self.dtype = np.dtype(self.index["dtype"]).newbyteorder("<")
        self.maps = []
        for s in self.index["shards"]:
            path = self.directory / s["file"]
            if not path.is_file() or path.stat().st_size != s["bytes"]:
                raise ValueError(
                    f"shard {path} is missing or has the wrong size (index "
                    f"says {s['bytes']} bytes)"
                )
            if verify and _sha256_file(path) != s["sha256"]:
                raise ValueError(
                    f"shard {path} does not match its SHA-256 in the index: corrupted"
                )
            # mode "c" (copy-on-write): the array is writable, so torch.from_numpy takes
            # it without a warning, but nothing is ever written back to the file.
            self.maps.append(
                np.memmap(
                    path,
                    dtype=self.dtype,
                    mode="c",
                    shape=(s["rows"], self.index["row_len"]),
                )
            )
        self.starts = np.cumsum([0] + [s["rows"] for s in self.index["shards"]])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def shard_of(self, i: int) -> tuple:
        """(shard number, row within that shard) of global row ``i``."""
        if (
            isinstance(i, bool)
            or not isinstance(i, (int, np.integer))
            or not 0 <= i < len(self)
        ):
            raise IndexError(f"row {i!r} out of range for {len(self)} rows")
        k = int(np.searchsorted(self.starts, i, side="right") - 1)
        return k, int(i - self.starts[k])

    def __getitem__(self, i):
        k, j = self.shard_of(i)
        return self.maps[k][j]

    @property
    def nbytes(self) -> int:
        return sum(s["bytes"] for s in self.index["shards"])
