"""How readable the pages' code is, counted on their sources.

    python tools/page_metrics.py            # one row per page, and the total
    python tools/page_metrics.py --json

Per page: code cells and code lines; lines wider than the line length; the
lines that call ``print``, ``glue`` or ``glue_values`` (as the issue counted
them: a call split over several lines counts once); and the median and
largest code cell. Cell sizes leave out the cells the page guide exempts: the
``parameters`` cell, the set-up cell (the first code cell after it) and
exercise solutions (between ``solution-start`` and ``solution-end``).
tests/test_page_pattern.py holds the pages to the goals with these counts.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from format_pages import code_cells, pages  # noqa: E402 (after the path it is on)

LINE_LENGTH = 88
GLUE_CALLS = {"glue", "glue_values"}
SOLUTION = re.compile(r"```\{solution-start\}.*?```\{solution-end\}", re.S)


@dataclass(frozen=True)
class PageMetrics:
    page: str
    code_cells: int
    code_lines: int
    long_lines: int  # wider than LINE_LENGTH
    glue_lines: int
    print_lines: int
    median_cell: float  # lines, exempt cells left out
    largest_cell: int


def _call_lines(source: str, names: set[str]) -> int:
    """Lines that call one of ``names``."""
    pattern = re.compile(r"\b(?:" + "|".join(sorted(names)) + r")\(")
    return sum(1 for line in source.splitlines() if pattern.search(line))


def sized_cells(text: str) -> list[list[str]]:
    """The code cells held to the size goals (exempt cells left out)."""
    cells = code_cells(text)
    lines = text.split("\n")
    solution_lines = set()
    for m in SOLUTION.finditer(text):
        first = text.count("\n", 0, m.start())
        solution_lines.update(range(first, first + m.group(0).count("\n") + 1))
    sized, after_parameters = [], False
    for cell in cells:
        options = lines[max(0, cell.start - 3) : cell.start]
        if any("parameters" in o for o in options):
            after_parameters = True
            continue
        if after_parameters:  # the set-up cell
            after_parameters = False
            continue
        if cell.start in solution_lines:
            continue
        sized.append(cell.lines)
    return sized


def metrics(page: Path) -> PageMetrics:
    text = page.read_text()
    cells = code_cells(text)
    sources = [c.source for c in cells]
    sizes = [len(c) for c in sized_cells(text)] or [0]
    return PageMetrics(
        page=page.stem,
        code_cells=len(cells),
        code_lines=sum(len(c.lines) for c in cells),
        long_lines=sum(len(ln) > LINE_LENGTH for c in cells for ln in c.lines),
        glue_lines=sum(_call_lines(s, GLUE_CALLS) for s in sources),
        print_lines=sum(_call_lines(s, {"print"}) for s in sources),
        median_cell=statistics.median(sizes),
        largest_cell=max(sizes),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [metrics(p) for p in pages()]
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        return 0
    head = (
        "page",
        "cells",
        "lines",
        f">{LINE_LENGTH}",
        "glue",
        "print",
        "median",
        "max",
    )
    print(" | ".join(head))
    for r in rows:
        print(
            f"{r.page} | {r.code_cells} | {r.code_lines} | {r.long_lines} | "
            f"{r.glue_lines} | {r.print_lines} | {r.median_cell:g} | {r.largest_cell}"
        )
    lines = sum(r.code_lines for r in rows)
    bookkeeping = sum(r.glue_lines + r.print_lines for r in rows)
    print(
        f"all | {sum(r.code_cells for r in rows)} | {lines} | "
        f"{sum(r.long_lines for r in rows)} | glue+print {bookkeeping} "
        f"({bookkeeping / lines:.0%} of code lines)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
