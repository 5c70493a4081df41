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
- ``exclusive(path, alone)``: a test marked alone holds a lock that every other
  test shares, so it runs while no test runs in another worker.
"""

from __future__ import annotations

import fcntl
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
        build: Callable[[Callable[[], None]], dict],
        reuse: Callable[[], dict | None] = lambda: None,
    ):
        """``build(on_pages_done)`` builds into ``dest`` and returns its report,
        calling ``on_pages_done()`` between the pages and the HTML;
        ``reuse()`` gives a report to take as it is instead, or None."""
        self.dest, self.run_id, self._build, self._reuse = dest, run_id, build, reuse
        self.marker = dest / "built-by-run"
        self.lock = dest.parent / f".{dest.name}.lock"
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
        self._mark("pages")
        try:
            self.outcome["report"] = self._build(lambda: self._mark("html"))
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

    def pages_done(self) -> None:
        """Return once no page of this run's build can still be executing."""
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another worker holds it: it is building
            else:
                if self.state() not in ("done", "failed") and not self.outcome:
                    self._build_here()
                return
        deadline = time.monotonic() + PAGES_WAIT_S
        while self.state() in (None, "pages"):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"waited {PAGES_WAIT_S} s for another worker's test build to "
                    f"run its pages ({self.marker} says {self.marker.read_text()!r})"
                )
            time.sleep(POLL_S)


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
