"""The book's live figures, found by their declaration: every module named
``live.py`` in a chapter package (mlbook/<chapter>/live.py), and in it every
function that ``@mlbook.common.live.figure`` declared. A new live figure is
checked without being listed anywhere."""

from __future__ import annotations

import importlib
import json
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


def record_live(results: dict) -> None:
    """Merge browser benchmarks into the test build's timings.json under
    "live", under a lock, so that two workers keep each other's."""
    from filelock import FileLock

    from conftest import BOOK_DEST

    timings = BOOK_DEST / "timings.json"
    with FileLock(BOOK_DEST / "timings.lock"):
        record = json.loads(timings.read_text()) if timings.exists() else {}
        record.setdefault("live", {}).update(results)
        timings.write_text(json.dumps(record, indent=2))


def print_benchmarks(terminalreporter, path: Path) -> None:
    """The test build's page times (``path``: its timings.json) and the
    browser benchmarks recorded there: benchmarks, not pass/fail."""
    if not path.is_file():
        return
    record, tr = json.loads(path.read_text()), terminalreporter
    live = record.get("live") or {}
    if live:
        tr.section("live figures in the browser (benchmarks)")
        for page, r in sorted(live.get("pages", {}).items()):
            tr.write_line(
                f"{page:<18} boot {r['boot_s']:.2f} s ({r.get('tab', 'new')} tab), "
                f"first live draw {r['first_live_draw_s']:.2f} s"
            )
        for name, r in sorted(live.get("figures", {}).items()):
            tr.write_line(
                f"  {name:<42} redraw p50 {r['p50_ms']:6.1f} ms, "
                f"p95 {r['p95_ms']:6.1f} ms ({r['draws']} draws)"
            )
        for page, r in sorted(live.get("first_touch", {}).items()):
            late = "" if r["cold_ms"] <= r["within_s"] * 1e3 else "  OVER 1 s"
            tr.write_line(
                f"{page:<18} first touch after {r['in_view_s']:.0f} s in view: "
                f"{r['cold_ms']:.0f} ms cold (Python ready {r['cold_ready_s']:.1f} s "
                f"after it came into view), {r['snapshot_ms']:.0f} ms from the "
                f"snapshot (ready {r['snapshot_ready_s']:.1f} s){late}"
            )
    tr.section("page execution times at test sizes (s)")
    for page, r in sorted(record.get("chapters", {}).items()):
        took = "cached" if r.get("cached") else f"{r.get('seconds', 0):.1f}"
        failed = "  FAILED" if r.get("error") else ""
        tr.write_line(f"{page:<18} {took:>7} of {r.get('budget_s', '-')}{failed}")
