"""Numbers one page quotes from another.

A page that quotes another page's measured numbers (the introduction's
summary card, the interview answers) lists that page in its front matter::

    mlbook:
      depends_on: [input_pipeline]

and reads them with ``page_values("input_pipeline")``. Under tools/build.py
the values come from $MLBOOK_VALUES_DIR, which holds only the pages listed,
freshly executed in the same build; in JupyterLab, from the last
`make book` (_build/book/values/). Reading is all this does: the page glues.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VALUES_ENV = "MLBOOK_VALUES_DIR"
BOOK_VALUES = Path(__file__).resolve().parents[2] / "_build" / "book" / "values"


def page_values(page: str) -> dict:
    """The glued values of ``page`` (a file stem such as "input_pipeline"):
    name -> number or label."""
    if not isinstance(page, str) or not page or "/" in page or page.startswith("."):
        raise ValueError(f"page must be a page's file stem such as 'mfu', got {page!r}")
    folder = Path(os.environ[VALUES_ENV]) if VALUES_ENV in os.environ else BOOK_VALUES
    path = folder / f"{page}.json"
    if not path.exists():
        where = (
            "this page's front matter must list it under mlbook: depends_on"
            if VALUES_ENV in os.environ
            else "run `make book` first"
        )
        raise FileNotFoundError(f"no values for page {page!r} at {path}: {where}")
    return json.loads(path.read_text())
