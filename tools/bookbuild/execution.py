"""Executing one page: jupytext to .ipynb, papermill with the page's
parameters, one retry from a fresh kernel when a cell stops answering (the
nbclient lost-wake-up work-around lives here too), and the injected
parameters cell hidden from the built page."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

CELL_TIMEOUT_S = 300


POLL_SLICE_S = 0.5


def _poll_in_short_slices() -> None:
    """Work around a lost wake-up in async ZMQ polling (nbclient issue 312).

    nbclient waits for a cell's reply with one long ``socket.poll``; now and
    then, at cells that display widgets, that poll misses a reply that has
    already arrived and sleeps until its timeout (forever without one), while
    the kernel sits idle. Polling in slices of half a second re-checks the
    socket, so a missed wake-up costs at most that.
    """
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    if getattr(AsyncZMQSocketChannel.get_msg, "_sliced", False):
        return
    original = AsyncZMQSocketChannel.get_msg

    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                POLL_SLICE_S
                if deadline is None
                else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            )
            try:
                return await original(self, timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg._sliced = True
    AsyncZMQSocketChannel.get_msg = get_msg


def execute(
    chapter: Path, out_dir: Path, parameters: dict, env: dict | None = None
) -> tuple:
    """Run one chapter; returns (seconds, error or None, retry or None). The
    executed notebook is written even when a cell fails, so the error can be
    read. ``env`` is added to the kernel's environment.

    A cell that outlives CELL_TIMEOUT_S (a kernel that stopped answering, not
    a slow cell: every chapter's budget is 60 s in all) fails the run, which
    is then tried once more from a fresh kernel, and says so: ``retry`` is
    then {"first_attempt_s": ..., "error": ...}, so that a retried page is
    reported with the time its first attempt took, not only the retry's.
    """
    import jupytext
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    _poll_in_short_slices()
    nb = jupytext.read(chapter)
    out = out_dir / f"{chapter.stem}.ipynb"
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    retry = None
    try:
        for attempt in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / f"{chapter.stem}.ipynb"
                nbformat.write(nb, raw)
                start = time.perf_counter()
                error = None
                try:
                    papermill.execute_notebook(
                        str(raw),
                        str(out),
                        parameters=parameters,
                        kernel_name="python3",
                        cwd=tmp,
                        progress_bar=False,
                        log_output=False,
                        execution_timeout=CELL_TIMEOUT_S,
                    )
                except papermill.PapermillExecutionError as exc:
                    error = f"{exc.ename}: {exc.evalue} (cell {exc.cell_index})"
                except (CellTimeoutError, DeadKernelError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if attempt == 1:
                        print(
                            f"  {chapter.stem}: the kernel stopped answering "
                            f"({error.splitlines()[0]}); running the chapter once more",
                            flush=True,
                        )
                        retry = {
                            "first_attempt_s": round(time.perf_counter() - start, 1),
                            "error": error.splitlines()[0],
                        }
                        continue
                seconds = time.perf_counter() - start
            break
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    hide_injected_parameters(out)
    return seconds, error, retry


def hide_injected_parameters(path: Path) -> None:
    """Papermill's injected cell is bookkeeping, not content: remove it from
    the page."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, path)
