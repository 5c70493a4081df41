"""Numbers one page quotes from another.

A page that quotes another page's measured numbers (the introduction's
summary card, the interview answers) lists that page in its front matter::

    mlbook:
      depends_on: [input_pipeline]

and reads them with ``page_values("input_pipeline")``. Under tools/build.py
the values come from $MLBOOK_VALUES_DIR, which holds only the pages listed,
freshly executed in the same build. In JupyterLab they come from whichever
is newer: the page's last run in JupyterLab (``glue_values`` keeps what a
page glues there in _build/lab/values/, see ``record_lab_values``) or the
last `make book` (_build/book/values/). When neither has the page, the error
names the page to run first. Reading is all this does: the page glues.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VALUES_ENV = "MLBOOK_VALUES_DIR"
ROOT = Path(__file__).resolve().parents[2]
BOOK_VALUES = ROOT / "_build" / "book" / "values"
LAB_VALUES_ENV = "MLBOOK_LAB_VALUES_DIR"  # where JupyterLab runs keep their values
LAB_VALUES = ROOT / "_build" / "lab" / "values"
# jupyter_server names a kernel's notebook in its environment
SESSION_ENV = "JPY_SESSION_NAME"
PAGE_DIRS = ("notebooks", "book")

_recorded: dict[str, dict] = {}  # page -> what this kernel glued for it


class MissingPageValues(FileNotFoundError):
    """A page's values are not there yet; the message says which page to run.
    IPython (JupyterLab) shows the message alone, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def _lab_values_dir() -> Path:
    return Path(os.environ.get(LAB_VALUES_ENV, LAB_VALUES))


def _source_of(page: str) -> str:
    """The page's source, relative to the repository ("notebooks/capstone.md")."""
    for folder in PAGE_DIRS:
        if (ROOT / folder / f"{page}.md").exists():
            return f"{folder}/{page}.md"
    return f"{page}.md"


def page_values(page: str) -> dict:
    """The glued values of ``page`` (a file stem such as "input_pipeline"):
    name -> number or label."""
    if not isinstance(page, str) or not page or "/" in page or page.startswith("."):
        raise ValueError(f"page must be a page's file stem such as 'mfu', got {page!r}")
    if VALUES_ENV in os.environ:
        path = Path(os.environ[VALUES_ENV]) / f"{page}.json"
        if not path.exists():
            raise MissingPageValues(
                f"no values for page {page!r} at {path}: this page's front matter "
                "must list it under mlbook: depends_on"
            )
        return json.loads(path.read_text())
    found = [
        p
        for p in (_lab_values_dir() / f"{page}.json", BOOK_VALUES / f"{page}.json")
        if p.exists()
    ]
    if not found:
        raise MissingPageValues(
            f"this cell quotes numbers measured by {_source_of(page)}, which has not "
            f"run yet: open {_source_of(page)} in JupyterLab and run all its cells "
            "(or build the book with `make book`), then run this cell again"
        )
    return json.loads(max(found, key=lambda p: p.stat().st_mtime_ns).read_text())


def record_lab_values(values: dict) -> Path | None:
    """In JupyterLab, add ``values`` (what a cell glued) to the page's values
    file, where ``page_values`` finds them; the page's first glue in a kernel
    starts the file afresh. Does nothing under the book's build (it keeps its
    own values) or outside a Jupyter server's kernel. Returns the file."""
    session = os.environ.get(SESSION_ENV)
    if not session or VALUES_ENV in os.environ:
        return None
    page = Path(session).stem
    _recorded.setdefault(page, {}).update(values)
    path = _lab_values_dir() / f"{page}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_recorded[page], indent=1, sort_keys=True))
    except OSError:  # a read-only checkout: the page still shows its values
        return None
    return path
