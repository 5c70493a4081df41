"""Where a stuck process is stuck: its Python stacks on request.

The book's build names a folder in MLBOOK_STACKS_DIR for each page it runs.
When a cell runs too long, the build's kernel watchdog
(tools/bookbuild/kernel_watchdog.py) writes the kernel's stacks there, lists
the kernel's descendant processes, and sends SIGUSR1 to each descendant that
left a marker ``sigusr1-<pid>`` in the folder (holding its start time, so a
reused pid is never signalled). ``on_request`` makes the calling process one
of those: a forked rank, the fork server. Outside the build (no
MLBOOK_STACKS_DIR) it only registers the handler, and marks nothing.

Standard library only, so a fork server or a rank can import it first.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path

STACKS_ENV = "MLBOOK_STACKS_DIR"


def folder() -> Path | None:
    """The folder the build named for this page's stacks, or None."""
    value = os.environ.get(STACKS_ENV)
    return Path(value) if value else None


def start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat,
    field 22), which tells a process from a later one with its pid; None if
    it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def on_request(role: str, file=None) -> Path | None:
    """SIGUSR1 writes every thread's Python stack to ``file`` (an open file:
    a rank's log), or else to <folder>/<role>-<pid>.txt. Where the build
    named a folder, this process is marked there for its watchdog; returns
    the marker (None without a folder)."""
    if not role or "/" in role:
        raise ValueError(f"role must be a plain name such as 'rank0', got {role!r}")
    where = folder()
    if file is None:
        if where is None:
            return None
        where.mkdir(parents=True, exist_ok=True)
        # kept open: faulthandler writes to its fd on every signal
        file = open(where / f"{role}-{os.getpid()}.txt", "a")
    faulthandler.register(signal.SIGUSR1, file=file, all_threads=True)
    if where is None:
        return None
    where.mkdir(parents=True, exist_ok=True)
    marker = where / f"sigusr1-{os.getpid()}"
    marker.write_text(f"{start_time(os.getpid())} {role}\n")
    return marker


def marked(pid: int, where: Path) -> bool:
    """True when ``pid`` is the process that left its marker in ``where``
    (not a later process with the same pid)."""
    try:
        started = (where / f"sigusr1-{pid}").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return started == start_time(pid)
