"""Executing one page: jupytext to .ipynb, papermill with the page's
parameters, one retry from a fresh kernel when a cell stops answering (the
nbclient lost-wake-up work-around lives here too), the watchdogs that say
where a page that stops answering stopped, the injected parameters cell
hidden from the built page, and the ipywidgets of live figures taken out of
it (the HTML book draws those with its own inputs)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import tempfile
import time
from pathlib import Path

CELL_TIMEOUT_S = 300


# A kernel writes its stacks when a cell has run this long (kernel_watchdog.py),
# the client its own at this share of CELL_TIMEOUT_S, before the cell times out:
# no cell of any page takes a minute on an idle machine, so either means that
# something is stuck.
KERNEL_WATCHDOG_S = 120.0
CLIENT_WATCHDOG_SHARE = 0.9
KERNEL_WATCHDOG_FILE = Path(__file__).with_name("kernel_watchdog.py")
STACKS_ENV = "MLBOOK_STACKS_DIR"


POLL_SLICE_S = 0.5


@contextlib.contextmanager
def _written_at_the_end_only():
    """papermill writes the whole executed notebook at the start and at the
    end of every cell, markdown ones included (its live view of a run): two
    writes a cell, 20-70 ms each for a chapter here, seconds a page in all.
    The build reads the notebook only once the run has ended, so within this
    block the writes before then are skipped. papermill still writes it at
    the end, after a failed cell too (with the error) and after a timeout."""
    from papermill.engines import NotebookExecutionManager

    original = NotebookExecutionManager.save

    def save(self, **kwargs):
        if self.end_time is not None:  # set by notebook_complete, which then saves
            original(self, **kwargs)

    NotebookExecutionManager.save = save
    try:
        yield
    finally:
        NotebookExecutionManager.save = original


def _poll_in_short_slices() -> None:
    """Work around a lost wake-up in async ZMQ polling (nbclient issue 312).

    nbclient waits for a cell's reply with one long ``socket.poll``; now and
    then, at cells that display widgets, that poll misses a reply that has
    already arrived and sleeps until its timeout (forever without one), while
    the kernel sits idle. Polling in slices of half a second re-checks the
    socket, so a missed wake-up costs at most that.

    The cause found so far is a send on the shell socket while the reply is
    in flight: nbclient's stand-in for an Output widget that captured a
    display sends a state update, through jupyter_client's synchronous shadow
    of the asyncio socket, whose libzmq send takes the socket's wake-up.
    The book's widgets no longer capture (``mlbook.plotting.live.set_outputs``),
    so a reader's plain papermill does not meet it; the slices stay as a
    guard for any other send that does the same.
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


def stamp() -> str:
    """The time of day to the millisecond, as both watchdog logs write it
    (so the two can be compared as strings within a day)."""
    now = time.time()
    return (
        time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    )


def _watched(stacks_dir: Path | None) -> tuple[dict, object]:
    """papermill keyword arguments that start the kernel with the watchdog
    (kernel_watchdog.py, writing under ``stacks_dir``) and arm this process's
    own stack dump while it waits on each cell (into <stacks_dir>/client.txt);
    and the open client log, to close after the run."""
    if stacks_dir is None:
        return {}, None
    stacks_dir.mkdir(parents=True, exist_ok=True)
    log = open(stacks_dir / "client.txt", "a", buffering=1)  # closed by execute()

    def sent(cell, cell_index, **_):
        log.write(
            f"{stamp()} notebook cell {cell_index} sent, timeout {CELL_TIMEOUT_S} s\n"
        )
        faulthandler.dump_traceback_later(
            CLIENT_WATCHDOG_SHARE * CELL_TIMEOUT_S, file=log, exit=False
        )

    def replied(cell, cell_index, **_):
        faulthandler.cancel_dump_traceback_later()
        log.write(f"{stamp()} notebook cell {cell_index} replied\n")

    kwargs = {
        "extra_arguments": [
            f"--InteractiveShellApp.exec_files={[str(KERNEL_WATCHDOG_FILE)]!r}"
        ],
        "on_cell_execute": sent,
        "on_cell_executed": replied,
    }
    return kwargs, log


def execute(
    chapter: Path,
    out_dir: Path,
    parameters: dict,
    env: dict | None = None,
    retry: bool = True,
    workaround: bool = True,
    stacks_dir: Path | None = None,
) -> tuple:
    """Run one chapter; returns (seconds, error or None, retry or None). The
    executed notebook is written even when a cell fails, so the error can be
    read. ``env`` is added to the kernel's environment.

    A cell that outlives CELL_TIMEOUT_S (a kernel that stopped answering, not
    a slow cell: every chapter's budget is 60 s in all) fails the run, which
    is then tried once more from a fresh kernel, and says so: ``retry`` is
    then {"first_attempt_s": ..., "error": ...}, so that a retried page is
    reported with the time its first attempt took, not only the retry's.
    ``retry=False`` fails the page instead; ``workaround=False`` leaves
    nbclient's polling and papermill's writes after every cell as they are
    (with both off, this is papermill as a reader would run it). With
    ``stacks_dir``, the kernel and this process write where they are stuck
    there (see _watched and kernel_watchdog.py), and the kernel's
    descendants find the folder in MLBOOK_STACKS_DIR.
    """
    import jupytext
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if workaround:
        _poll_in_short_slices()
    nb = jupytext.read(chapter)
    out = out_dir / f"{chapter.stem}.ipynb"
    env = dict(env or {})
    if stacks_dir is not None:
        env[STACKS_ENV] = str(stacks_dir)
        if "MLBOOK_CELL_WATCHDOG_S" not in os.environ:
            env["MLBOOK_CELL_WATCHDOG_S"] = str(KERNEL_WATCHDOG_S)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    retry_info = None
    watch, client_log = _watched(stacks_dir)
    writes = _written_at_the_end_only if workaround else contextlib.nullcontext
    try:
        for attempt in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / f"{chapter.stem}.ipynb"
                nbformat.write(nb, raw)
                start = time.perf_counter()
                error = None
                try:
                    with writes():
                        papermill.execute_notebook(
                            str(raw),
                            str(out),
                            parameters=parameters,
                            kernel_name="python3",
                            cwd=tmp,
                            progress_bar=False,
                            log_output=False,
                            execution_timeout=CELL_TIMEOUT_S,
                            **watch,
                        )
                except papermill.PapermillExecutionError as exc:
                    error = f"{exc.ename}: {exc.evalue} (cell {exc.cell_index})"
                except (CellTimeoutError, DeadKernelError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if client_log is not None:
                        client_log.write(
                            f"{stamp()} gave up: {error.splitlines()[0][:200]}\n"
                        )
                    if attempt == 1 and retry:
                        print(
                            f"  {chapter.stem}: the kernel stopped answering "
                            f"({error.splitlines()[0]}); running the chapter once more",
                            flush=True,
                        )
                        retry_info = {
                            "first_attempt_s": round(time.perf_counter() - start, 1),
                            "error": error.splitlines()[0],
                        }
                        continue
                finally:
                    if client_log is not None:
                        faulthandler.cancel_dump_traceback_later()
                seconds = time.perf_counter() - start
            break
    finally:
        if client_log is not None:
            client_log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if out.exists():
        hide_injected_parameters(out)
        strip_live_widgets(out)
    return seconds, error, retry_info


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


LIVE_MIME = "application/vnd.mlbook.live+json"  # mlbook.common.live.MIME_TYPE
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _referenced(state: dict, roots: set[str]) -> set[str]:
    """The widget models ``roots`` reach through "IPY_MODEL_<id>" references
    (children, layouts, styles, ...), ``roots`` included."""
    seen, todo = set(), [r for r in roots if r in state]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for ref in _model_refs(state[model].get("state", {})):
            if ref in state and ref not in seen:
                todo.append(ref)
    return seen


def _model_refs(value):
    if isinstance(value, str) and value.startswith("IPY_MODEL_"):
        yield value[len("IPY_MODEL_") :]
    elif isinstance(value, dict):
        for v in value.values():
            yield from _model_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _model_refs(v)


def strip_live_widgets(path: Path) -> None:
    """Take the ipywidgets of live figures out of an executed notebook: the
    widget view from each live output (which keeps its own payload and the
    default spec), and from the notebook's stored widget state every model
    only those views reach. A page left with no widget views keeps no state
    at all, so the HTML book does not load the widget scripts (require.js)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    live_views, other_views = set(), set()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            view = data.get(WIDGET_VIEW)
            if view is None:
                continue
            if LIVE_MIME in data:
                live_views.add(view.get("model_id"))
                del data[WIDGET_VIEW]
            else:
                other_views.add(view.get("model_id"))
    if not live_views:
        return
    widgets = nb.metadata.get("widgets", {})
    state = widgets.get(WIDGET_STATE, {}).get("state", {})
    if not other_views:
        nb.metadata.pop("widgets", None)
    else:
        keep = _referenced(state, other_views)
        for model in _referenced(state, live_views) - keep:
            del state[model]
    nbformat.write(nb, path)
