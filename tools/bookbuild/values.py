"""Glued values: read every value a page glued from its executed notebook
(numbers and short labels only; anything else is a GlueError naming the page
and the glue), and write and read them as <dest>/values/<page>.json."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from . import paths


class GlueError(ValueError):
    """A glued value that is not a plain number or string."""


def glued_value_of_output(output: dict, page: str = "?"):
    """The value one glue record (an output with scrapbook metadata) holds:
    an int, float, bool or str read back from its stored text with
    ``ast.literal_eval``. Anything else raises GlueError naming the page and
    the glue."""
    name = output["metadata"]["scrapbook"].get("name")
    data = output.get("data", {})
    text = next((v for k, v in data.items() if k.endswith("text/plain")), None)
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, complex) or not isinstance(value, (int, float, str)):
        kinds = sorted(k.replace("application/papermill.record/", "") for k in data)
        raise GlueError(
            f"{page}: glued value {name!r} is {str(text)[:80]!r} "
            f"({', '.join(kinds)}), not a plain number or string. Glue plain "
            "numbers and short labels only: float()/int() a numpy scalar, "
            "format a table into a string or show it in the cell, display a "
            "figure."
        )
    return value


def glued_values(notebook: Path, page: str | None = None) -> dict:
    """The values an executed notebook glued (myst-nb ``glue``), name ->
    value (see glued_value_of_output)."""
    import nbformat

    page = page or Path(notebook).stem
    nb = nbformat.read(notebook, as_version=4)
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook"):
                name = output["metadata"]["scrapbook"].get("name")
                values[name] = glued_value_of_output(output, page)
    return values


def write_values(dest: Path, page: str, values: dict) -> Path:
    path = Path(dest) / "values" / f"{page}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.write_atomically(path, json.dumps(values, indent=1, sort_keys=True))
    return path


def read_values(dest: Path, page: str) -> dict:
    """The glued values of ``page`` (a file stem such as "mfu") in the build
    at ``dest`` (_build/book or _build/test): name -> number or string."""
    path = Path(dest) / "values" / f"{page}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no glued values for {page!r} at {path}: was it executed in that build?"
        )
    return json.loads(path.read_text())
