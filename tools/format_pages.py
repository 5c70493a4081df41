"""ruff over the pages' code cells, in ruff's notebook mode, with findings at
the page's own line.

    python tools/format_pages.py --check      # exit 1 and name FILE:LINE on any finding
    python tools/format_pages.py --fix        # ruff check --fix, then ruff format
    python tools/format_pages.py --check notebooks/mfu.md

Each page (a MyST text notebook: the chapters in notebooks/ and the book/
pages with code cells) is converted to .ipynb with jupytext in a temporary
folder and ruff runs on that, so a cell is formatted as a notebook cell: a
trailing ``;`` that keeps a cell's value from displaying stays. With --fix
the formatted cell sources are written back into the .md in place, every
other byte of the page untouched. The configuration is pyproject.toml's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"
FENCE = "```{code-cell}"


@dataclass(frozen=True)
class Cell:
    start: int  # 0-based index of the cell's first source line in the page
    lines: list[str]  # the source lines, without line ends

    @property
    def source(self) -> str:
        return "\n".join(self.lines)


def pages() -> list[Path]:
    """Every page with code cells, chapters first."""
    found = sorted((ROOT / "notebooks").glob("*.md"))
    found += sorted(p for p in (ROOT / "book").glob("*.md") if FENCE in p.read_text())
    return found


def code_cells(text: str) -> list[Cell]:
    """The code cells of a MyST page, each with the line its source starts on.

    A cell opens with a ```` ```{code-cell} ```` fence, may carry options as
    ``:key: value`` lines or a ``---`` YAML block, and ends at the next
    ```` ``` ```` line."""
    lines = text.split("\n")
    cells, i = [], 0
    while i < len(lines):
        if not lines[i].startswith(FENCE):
            i += 1
            continue
        i += 1
        if i < len(lines) and lines[i] == "---":
            i = lines.index("---", i + 1) + 1
        while i < len(lines) and lines[i].startswith(":"):
            i += 1
        start = i
        while lines[i] != "```":
            i += 1
        cells.append(Cell(start, lines[start:i]))
        i += 1
    return cells


def _notebook(page: Path, folder: Path) -> tuple[Path, list[int]]:
    """The page as .ipynb in ``folder`` and, per notebook cell (1-based, as
    ruff counts them), the index of the page's code cell it is (or None)."""
    import jupytext

    nb = jupytext.read(page)
    mine = code_cells(page.read_text())
    theirs = [c for c in nb.cells if c.cell_type == "code"]
    if [c.source for c in mine] != [c.source.rstrip("\n") for c in theirs]:
        raise SystemExit(f"{page}: code cells read differently by jupytext")
    order, k = [], 0
    for cell in nb.cells:
        order.append(k if cell.cell_type == "code" else None)
        k += cell.cell_type == "code"
    out = folder / f"{page.stem}.ipynb"
    jupytext.write(nb, out, fmt="ipynb")
    return out, order


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RUFF), *args, "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
    )


def _cell_sources(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _shown(page: Path) -> Path:
    return page.relative_to(ROOT) if page.is_relative_to(ROOT) else page


def check(page: Path) -> list[str]:
    """FILE:LINE: messages for every lint finding and unformatted cell."""
    rel = _shown(page)
    cells = code_cells(page.read_text())
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        notebook, order = _notebook(page, Path(tmp))
        lint = _ruff("check", "--output-format", "json", "--no-fix", str(notebook))
        for item in json.loads(lint.stdout or "[]"):
            index = order[item["cell"] - 1]
            line = cells[index].start + item["location"]["row"]
            col = item["location"]["column"]
            found.append(f"{rel}:{line}:{col}: {item['code']} {item['message']}")
        before = _cell_sources(notebook)
        _ruff("format", str(notebook))
        after = _cell_sources(notebook)
    for cell, old, new in zip(cells, before, after, strict=True):
        if old.rstrip("\n") != new.rstrip("\n"):
            old_lines, new_lines = old.split("\n"), new.split("\n")
            first = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False))
                    if a != b
                ),
                min(len(old_lines), len(new_lines)),
            )
            found.append(
                f"{rel}:{cell.start + first + 1}: code cell not formatted "
                "(make format fixes it)"
            )
    return sorted(found, key=lambda s: int(s.split(":")[1]))


def fix(page: Path) -> bool:
    """ruff check --fix and ruff format on the page's cells, written back in
    place. True when the page changed."""
    text = page.read_text()
    cells = code_cells(text)
    with tempfile.TemporaryDirectory() as tmp:
        notebook, _ = _notebook(page, Path(tmp))
        _ruff("check", "--fix", "--quiet", str(notebook))
        _ruff("format", "--quiet", str(notebook))
        new_sources = _cell_sources(notebook)
    lines = text.split("\n")
    for cell, source in sorted(
        zip(cells, new_sources, strict=True), key=lambda p: -p[0].start
    ):
        lines[cell.start : cell.start + len(cell.lines)] = source.rstrip("\n").split(
            "\n"
        )
    new = "\n".join(lines)
    if new != text:
        page.write_text(new)
    return new != text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true", help="report, change nothing")
    what.add_argument("--fix", action="store_true", help="fix and format in place")
    ap.add_argument("pages", nargs="*", type=Path, help="default: every page")
    args = ap.parse_args(argv)
    targets = [p.resolve() for p in args.pages] or pages()
    if args.fix:
        changed = [p for p in targets if fix(p)]
        for p in changed:
            print(f"formatted {_shown(p)}")
    problems = [m for p in targets for m in check(p)]
    for message in problems:
        print(message)
    if problems:
        print(f"{len(problems)} finding(s) in the pages' code cells")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
