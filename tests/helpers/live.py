"""The book's live figures, found by their declaration: every module named
``live.py`` in a chapter package (mlbook/<chapter>/live.py), and in it every
function that ``@mlbook.common.live.figure`` declared. A new live figure is
checked without being listed anywhere."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTS = {"mlbook.common.live", "mlbook.plotting.live"}  # the machinery, not figures


def live_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "mlbook").glob("*/live.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if name not in HOSTS:
            names.append(name)
    return names


def live_figures() -> dict:
    """'module:function' -> the declared function."""
    found = {}
    for name in live_modules():
        module = importlib.import_module(name)
        for attr in vars(module).values():
            declaration = getattr(attr, "live", None)
            if callable(attr) and declaration is not None and attr.__module__ == name:
                found[declaration.path] = attr
    return found


def close(a, b, rel=1e-9, path="result") -> list[str]:
    """Where two JSON values differ, floats compared to ``rel`` (float
    rounding aside: the browser's libm may differ from CPython's in the last
    place); [] when they agree."""
    if isinstance(a, bool) or isinstance(b, bool):
        return [] if a == b else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        ok = math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in close(a[k], b[k], rel, f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in close(x, y, rel, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def live_payloads(page: str) -> dict:
    """The live figures of a page's executed notebook in the test build (the
    `book` fixture must have run): "module:function" -> the payload its cell
    displayed (application/vnd.mlbook.live+json: fixed data, controls and the
    default spec)."""
    import json

    from conftest import BOOK_DEST

    nb = json.loads((BOOK_DEST / "src" / "notebooks" / f"{page}.ipynb").read_text())
    mime = "application/vnd.mlbook.live+json"
    return {
        out["data"][mime]["function"]: out["data"][mime]
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if mime in out.get("data", {})
    }
