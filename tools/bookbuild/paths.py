"""Where things are: the repository root, the package's name, what the
book is staged from, and an atomic file write that every other module uses.

Every module reads ``paths.ROOT`` at call time, so a test that points the
build at a synthetic project patches it here, once."""

from __future__ import annotations

from pathlib import Path

from mlbook.common.files import write_atomic

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = "mlbook"


BOOK_FILES = ("_config.yml", "_toc.yml")


BOOK_DIRS = ("book", "mlbook", "_vendor")


def write_atomically(
    path: Path, text: str | None = None, source: Path | None = None
) -> None:
    """``text``, or the bytes of the file ``source``, written to ``path``
    whole or not at all (mlbook.common.files.write_atomic)."""
    write_atomic(path, Path(source).read_bytes() if source is not None else text)
