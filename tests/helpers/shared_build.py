"""One test build for every worker of a pytest-xdist run, and the `alone`
lock (tests/conftest.py uses both).

The build's state for a run is in ``<dest>/built-by-run``: ``"<run> pages"``
while its pages execute, ``"<run> html"`` while Sphinx writes the HTML,
``"<run>"`` when done and ``"<run> failed"``. The worker that builds holds
``<dest>/../.<name>.lock`` for the whole build.

- ``SharedBuild.pages_done()``, called by every worker before its first test:
  it builds here if no worker is building, else it waits until the builder
  has run the pages (nothing timed runs after that, so other tests may).
- ``SharedBuild.once()``, for the tests that read the book: the report, once
  the HTML is written too; a build that failed raises for each of them.
- ``start()``, the same without the wait: the worker that does not build
  goes on to its tests, and ``after_or_beside(light)`` holds each one until
  the pages have run, except a light one (pure Python, nothing timed), which
  may run as soon as the build says a CPU is free (``free_cpus``, in
  ``.<name>.free-cpus`` beside ``<dest>``), pinned to it. The build, to take
  a CPU back, waits for that test to end (the lock ``.<name>.beside.lock``).
- ``exclusive(path, alone)``: a test marked alone holds a lock that every other
  test shares, so it runs while no test runs in another worker.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PAGES_WAIT_S = 1800  # a worker waits at most this for another's pages to run
POLL_S = 0.5


class SharedBuild:
    def __init__(
        self,
        dest: Path,
        run_id: str,
        build: Callable[[Callable[[], None], Callable[[list[int]], None]], dict],
        reuse: Callable[[], dict | None] = lambda: None,
    ):
        """``build(on_pages_done, on_free_cpus)`` builds into ``dest`` and
        returns its report, calling ``on_pages_done()`` between the pages and
        the HTML and ``on_free_cpus(cpus)`` as tools/bookbuild/run.py does;
        ``reuse()`` gives a report to take as it is instead, or None."""
        self.dest, self.run_id, self._build, self._reuse = dest, run_id, build, reuse
        self.marker = dest / "built-by-run"
        self.lock = dest.parent / f".{dest.name}.lock"
        self.beside_lock = dest.parent / f".{dest.name}.beside.lock"
        self.free_file = dest.parent / f".{dest.name}.free-cpus"
        self.outcome: dict = {}  # "report" or "error", in this process
        self.built_here = False

    def state(self) -> str | None:
        """This run's state ("pages", "html", "done", "failed"), or None."""
        try:
            words = self.marker.read_text().split()
        except OSError:
            return None
        if not words or words[0] != self.run_id:
            return None
        return words[1] if len(words) > 1 else "done"

    def _mark(self, state: str) -> None:
        self.dest.mkdir(parents=True, exist_ok=True)
        text = self.run_id if state == "done" else f"{self.run_id} {state}"
        self.marker.write_text(text)

    def _build_here(self) -> None:
        """Build, holding the lock (the caller took it)."""
        self.built_here = True
        report = self._reuse()
        if report is not None:
            self.outcome["report"] = report
            self._mark("done")
            return
        shutil.rmtree(self.dest, ignore_errors=True)
        self.free_cpus([])
        self._mark("pages")
        try:
            self.outcome["report"] = self._build(
                lambda: self._mark("html"), self.free_cpus
            )
        except BaseException as exc:
            self.outcome["error"] = exc
            self._mark("failed")
            return
        self._mark("done")

    def _read(self) -> None:
        import json

        self.outcome["report"] = json.loads((self.dest / "timings.json").read_text())

    def once(self) -> dict:
        """The report, built here if no worker has built it; waits for a
        build under way to finish. Raises what the build raised."""
        if not self.outcome:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            with open(self.lock, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                state = self.state()
                if state == "done":
                    self._read()
                elif state == "failed":
                    self.outcome["error"] = RuntimeError(
                        "the test build failed in another worker of this run "
                        "(its error is reported there)"
                    )
                else:
                    self._build_here()
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["report"]

    def start(self) -> bool:
        """Build here (and return True once built) unless another worker is
        building (False at once) or has built."""
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # another worker holds it: it is building
            if self.state() not in ("done", "failed") and not self.outcome:
                self._build_here()
            return True

    def pages_done(self) -> None:
        """Return once no page of this run's build can still be executing."""
        if not self.start():
            with self.after_or_beside(light=False):
                pass

    def free_cpus(self, cpus: list[int]) -> None:
        """The build's word: no page runs or is about to run on ``cpus``.
        Returns once no light test runs on a CPU not in ``cpus``."""
        tmp = self.free_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(cpus)))
        tmp.replace(self.free_file)
        with open(self.beside_lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a light test that started before

    def _free(self) -> list[int]:
        try:
            return json.loads(self.free_file.read_text())
        except (OSError, ValueError):
            return []

    @contextmanager
    def after_or_beside(self, light: bool) -> Iterator[list[int] | None]:
        """Held for a test: entered once the pages have run (None), or for a
        light test, once a CPU is free of them, pinned to the free CPUs (the
        list of them) until it ends."""
        deadline = time.monotonic() + PAGES_WAIT_S
        while self.state() in (None, "pages"):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"waited {PAGES_WAIT_S} s for another worker's test build to "
                    f"run its pages ({self.marker} says {self.marker.read_text()!r})"
                )
            if light:
                with open(self.beside_lock, "a") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        pass  # the build is taking a CPU back, or a test runs
                    else:
                        cpus = self._free()
                        if cpus and self.state() == "pages":
                            before = os.sched_getaffinity(0)
                            os.sched_setaffinity(0, cpus)
                            try:
                                yield cpus
                            finally:
                                os.sched_setaffinity(0, before)
                            return
            time.sleep(POLL_S)
        yield None


@contextmanager
def exclusive(folder: Path, alone: bool) -> Iterator[None]:
    """Held for a test: exclusively if ``alone``, else shared with the other
    tests. The turnstile keeps new tests from starting while an alone test
    waits for those already running."""
    folder.mkdir(parents=True, exist_ok=True)
    with (
        open(folder / ".alone.turnstile", "a") as turnstile,
        open(folder / ".alone.lock", "a") as lock,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # both are released when the files close
