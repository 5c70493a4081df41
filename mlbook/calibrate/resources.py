"""What a calibration takes from the machine: the memory it has free, and
the peak resident memory of this process and of the processes it starts
(loader workers, all-reduce ranks). Torch-free; Linux reads /proc, other
systems fall back to ``resource`` and ``os.sysconf`` where they can."""

from __future__ import annotations

import os
import resource
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def available_bytes(meminfo: str | None = None) -> int | None:
    """The memory the machine has free for a new allocation: MemAvailable
    from ``meminfo`` (the text of /proc/meminfo, read where not given), else
    what ``os.sysconf`` says; None where neither says."""
    if meminfo is None:
        try:
            meminfo = (PROC / "meminfo").read_text()
        except OSError:
            meminfo = ""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                break
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _maxrss_bytes(who: int) -> int:
    """``getrusage``'s peak resident set in bytes (KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(who).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def _status_hwm_bytes(pid: int) -> int | None:
    """A process's peak resident set (VmHWM) in bytes, None once it is gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...), from
    /proc; [] where there is no /proc."""
    parents: dict[int, list[int]] = {}
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass(frozen=True)
class PeakMemory:
    """Peak resident bytes of the main process and of the largest of the
    processes it started (0 where it started none)."""

    main_bytes: int
    children_bytes: int

    def as_dict(self) -> dict:
        return {"main": self.main_bytes, "children": self.children_bytes}


class PeakWatcher:
    """A context manager that keeps the peak resident memory of this process
    and of every process below it while the block runs: ``getrusage`` for
    this process and the children it waited for, and a thread that reads
    each descendant's VmHWM from /proc every ``every_s`` seconds (a rank or
    a loader worker that lives a second is seen). ``peak`` holds the
    result once the block ends."""

    def __init__(self, every_s: float = 0.25):
        if not every_s > 0:
            raise ValueError(f"every_s must be above 0, got {every_s!r}")
        self.every_s, self.peak = every_s, None
        self._children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _poll(self) -> None:
        for pid in _descendants(os.getpid()):
            hwm = _status_hwm_bytes(pid)
            if hwm is not None:
                self._children = max(self._children, hwm)

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self._poll()

    def __enter__(self) -> PeakWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()
        children = max(self._children, _maxrss_bytes(resource.RUSAGE_CHILDREN))
        main = max(
            _maxrss_bytes(resource.RUSAGE_SELF), _status_hwm_bytes(os.getpid()) or 0
        )
        self.peak = PeakMemory(main, children)
