"""What a page glued when it last ran in JupyterLab, kept beside the build.

A page computes every number it quotes; none reads another page's values.
When a reader runs a page in JupyterLab, ``glue_values`` also keeps what it
glued in _build/lab/values/<page>.json (``record_lab_values``), the page's
own values only, so that the JupyterLab tests can hold the numbers the
reader saw against the HTML book's. Under the book's build (papermill, no
Jupyter server) nothing is written: the build keeps its own values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB_VALUES_ENV = "MLBOOK_LAB_VALUES_DIR"  # where JupyterLab runs keep their values
LAB_VALUES = ROOT / "_build" / "lab" / "values"
# jupyter_server names a kernel's notebook in its environment
SESSION_ENV = "JPY_SESSION_NAME"

_recorded: dict[str, dict] = {}  # page -> what this kernel glued for it


def _lab_values_dir() -> Path:
    return Path(os.environ.get(LAB_VALUES_ENV, LAB_VALUES))


def record_lab_values(values: dict) -> Path | None:
    """In JupyterLab, add ``values`` (what a cell glued) to the page's own
    values file; the page's first glue in a kernel starts the file afresh.
    Does nothing outside a Jupyter server's kernel (the book's build keeps
    its own values). Returns the file, or None where nothing was written."""
    session = os.environ.get(SESSION_ENV)
    if not session:
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
