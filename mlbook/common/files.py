"""Files written whole or not at all: the one atomic write that the machine
file, the checkpointer's ``latest`` pointer, a shard directory's index and the
book's build all use."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path, data: str | bytes) -> Path:
    """Write ``data`` (text, or bytes as they are) to ``path`` whole or not at
    all: into a new temporary file beside it (``.NAME.RANDOM.tmp``), flushed
    and fsynced, then renamed over ``path`` (a rename within one file system
    is atomic: a reader sees the old file or the new one, never half of
    either), and the folder fsynced so that the rename survives a crash. On
    any failure the temporary file is removed and ``path`` is left as it
    was. Returns ``path`` as a Path."""
    if not isinstance(data, (str, bytes)):
        raise ValueError(
            f"data must be str or bytes, got {type(data).__name__} {data!r:.60}"
        )
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(4)}.tmp")
    try:
        if isinstance(data, bytes):
            f = open(tmp, "xb")
        else:
            f = open(tmp, "x", encoding="utf-8", newline="")
        with f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(p.parent)
    return p


def _fsync_folder(folder) -> None:
    """fsync a folder, so that a rename or a new file in it survives a crash.
    Where the system gives no folder handle, or refuses to sync one (some
    file systems do), nothing more can be done, and nothing is raised."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
