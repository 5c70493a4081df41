"""Where things are: the repository root, the package's name, what the
book is staged from, and an atomic file write that every other module uses.

Every module reads ``paths.ROOT`` at call time, so a test that points the
build at a synthetic project patches it here, once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = "mlbook"


BOOK_FILES = ("_config.yml", "_toc.yml")


BOOK_DIRS = ("book", "mlbook", "_vendor")


def write_atomically(
    path: Path, text: str | None = None, source: Path | None = None
) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if source is not None:
        shutil.copyfile(source, tmp)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)
