"""Execute every chapter with papermill, then build the HTML book from the
executed copies with warnings as errors.

    python tools/build.py                 # reader sizes -> _build/book/html
    python tools/build.py --small         # test sizes   -> _build/test/html
    python tools/build.py --only mfu      # one chapter (the others are skipped)

Chapters are MyST text notebooks in notebooks/. Each is converted to .ipynb
(jupytext), executed by papermill with its `parameters` cell overridden
(SMALL=True for --small), and written into a staging copy of the book
(<dest>/src) that holds only the executed .ipynb, so Sphinx never sees two
sources for one page. The book is then built there with
`jupyter-book build -W -n --keep-going`. Per-chapter wall times go to
<dest>/timings.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK_FILES = ("_config.yml", "_toc.yml")
BOOK_DIRS = ("book", "mlbook", "_vendor")
CELL_TIMEOUT_S = 300
POLL_SLICE_S = 0.5


def is_notebook(page: Path) -> bool:
    """A MyST page is an executable notebook when its front matter names a kernel."""
    head = page.read_text().split("\n---", 1)[0]
    return page.read_text().startswith("---") and "kernelspec:" in head


def chapters(only: list[str] | None = None) -> list[Path]:
    """Executable pages: the chapters in notebooks/ (those named in ``only``,
    or all) and every executable page of book/ (always: the root is one)."""
    found = sorted((ROOT / "notebooks").glob("*.md"))
    if only:
        names = {p.stem for p in found}
        missing = set(only) - names
        if missing:
            raise SystemExit(f"no chapter named {sorted(missing)}; chapters: {sorted(names)}")
        found = [p for p in found if p.stem in only]
    return found + sorted(p for p in (ROOT / "book").glob("*.md") if is_notebook(p))


def stage(dest: Path) -> Path:
    """A fresh copy of the book's sources under dest/src, notebooks excluded."""
    src = dest / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in BOOK_FILES:
        shutil.copy(ROOT / name, src / name)
    for name in BOOK_DIRS:
        if not (ROOT / name).exists():
            raise SystemExit(f"{name}/ is missing; run `make install` (it fetches _vendor/)")
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for page in chapters():  # executable pages arrive executed, as .ipynb
        (src / page.relative_to(ROOT)).unlink(missing_ok=True)
    (src / "notebooks").mkdir()
    return src


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
            left = POLL_SLICE_S if deadline is None else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            try:
                return await original(self, timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg._sliced = True
    AsyncZMQSocketChannel.get_msg = get_msg


def execute(chapter: Path, out_dir: Path, parameters: dict) -> tuple[float, str | None]:
    """Run one chapter; returns (seconds, error or None). The executed
    notebook is written even when a cell fails, so the error can be read.

    A cell that outlives CELL_TIMEOUT_S (a kernel that stopped answering, not
    a slow cell: every chapter's budget is 60 s in all) fails the run, which
    is then tried once more from a fresh kernel, and says so.
    """
    import jupytext
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    _poll_in_short_slices()
    nb = jupytext.read(chapter)
    out = out_dir / f"{chapter.stem}.ipynb"
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / f"{chapter.stem}.ipynb"
            nbformat.write(nb, raw)
            start = time.perf_counter()
            error = None
            try:
                papermill.execute_notebook(
                    str(raw), str(out), parameters=parameters, kernel_name="python3",
                    cwd=tmp, progress_bar=False, log_output=False,
                    execution_timeout=CELL_TIMEOUT_S,
                )
            except papermill.PapermillExecutionError as exc:
                error = f"{exc.ename}: {exc.evalue} (cell {exc.cell_index})"
            except (CellTimeoutError, DeadKernelError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                if attempt == 1:
                    print(f"  {chapter.stem}: the kernel stopped answering ({error.splitlines()[0]}); "
                          "running the chapter once more", flush=True)
                    continue
            seconds = time.perf_counter() - start
        break
    hide_injected_parameters(out)
    return seconds, error


def hide_injected_parameters(path: Path) -> None:
    """Papermill's injected cell is bookkeeping, not content: remove it from the page."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, path)


def build_html(src: Path, dest: Path) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src),
           "--path-output", str(dest), "-W", "-n", "--keep-going"]
    return subprocess.run(cmd, capture_output=True, text=True)


def build(dest: Path, small: bool, only: list[str] | None = None, html: bool = True) -> dict:
    """Execute the chapters and build the book; returns a report dict."""
    dest = dest.resolve()
    src = stage(dest)
    parameters = {"SMALL": True} if small else {}
    report = {"small": small, "chapters": {}, "html": None}
    for chapter in chapters(only):
        print(f"executing {chapter.name} ({'test' if small else 'reader'} sizes) ...", flush=True)
        out_dir = src / chapter.parent.relative_to(ROOT)
        seconds, error = execute(chapter, out_dir, parameters)
        report["chapters"][chapter.stem] = {"seconds": round(seconds, 1), "error": error}
        print(f"  {chapter.stem}: {seconds:.1f} s" + (f"  FAILED: {error}" if error else ""), flush=True)
    if only:  # a partial build: the other chapters appear as their title alone
        for other in set(chapters()) - set(chapters(only)):
            stub_page(other, src / other.parent.relative_to(ROOT))
    if html:
        print("building the HTML book (warnings are errors) ...", flush=True)
        result = build_html(src, dest)
        log = result.stdout + result.stderr
        (dest / "build.log").write_text(log)
        report["html"] = {"returncode": result.returncode, "dir": str(dest / "_build" / "html"),
                          "warnings": [l for l in log.splitlines() if "WARNING" in l or "ERROR" in l]}
    (dest / "timings.json").write_text(json.dumps(report, indent=2))
    return report


def stub_page(page: Path, out_dir: Path) -> None:
    """A chapter reduced to its first cell (label and title), unexecuted, so
    that a partial build still resolves every cross-reference to it."""
    import jupytext
    import nbformat

    nb = jupytext.read(page)
    lines = nb.cells[0].source.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    nb.cells = [nbformat.v4.new_markdown_cell("\n".join(lines[: title + 1]))]
    nbformat.write(nb, out_dir / f"{page.stem}.ipynb")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="test sizes (SMALL=True)")
    ap.add_argument("--dest", type=Path, default=None, help="output folder (default _build/book or _build/test)")
    ap.add_argument("--only", nargs="*", help="chapter names (file stems) to execute")
    ap.add_argument("--no-html", action="store_true", help="execute only")
    args = ap.parse_args(argv)
    dest = args.dest or ROOT / "_build" / ("test" if args.small else "book")
    started = time.perf_counter()
    report = build(dest, args.small, args.only, html=not args.no_html)
    failed = [name for name, r in report["chapters"].items() if r["error"]]
    ok = not failed
    if report["html"] is not None:
        for line in report["html"]["warnings"]:
            print(line)
        if report["html"]["returncode"] != 0:
            ok = False
            print(f"the book build failed; see {dest / 'build.log'}")
        else:
            print(f"HTML book: {report['html']['dir']}/index.html")
    print(f"done in {time.perf_counter() - started:.0f} s" + (f"; failed chapters: {failed}" if failed else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
