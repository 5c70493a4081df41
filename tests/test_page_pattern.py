"""Every page shows its work (the book's page pattern, checked on the sources
and on the test build):

- at most a third of a page's code cells hide or remove their input;
- one way to glue: myst_nb's ``glue(name, value, display=False)`` on the page,
  never inside the package, and no page imports the old mlbook.page helpers;
- a cell that glues also prints, so a JupyterLab reader sees the numbers;
- glued values are numbers or short labels, never sentences.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bookbuild import pages

ROOT = Path(__file__).resolve().parent.parent
PAGES = pages.chapters()
HIDING = {"hide-input", "remove-input", "remove-cell"}


def code_cells(page: Path):
    import jupytext

    return [c for c in jupytext.read(page).cells if c.cell_type == "code"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_at_most_a_third_of_code_cells_hide_their_input(page):
    cells = code_cells(page)
    hidden = [c for c in cells if HIDING & set(c.metadata.get("tags", []))]
    assert len(hidden) * 3 <= len(cells), (
        f"{page.name}: {len(hidden)} of {len(cells)} code cells hide their input"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_pages_glue_one_way_and_print_what_they_glue(page):
    text = page.read_text()
    assert "mlbook.page" not in text and "from mlbook import page" not in text
    for i, cell in enumerate(code_cells(page)):
        src = cell.source
        if re.search(r"\bglue\(", src):
            assert "print(" in src, (
                f"{page.name}, code cell {i}: glues values but prints nothing"
            )
            for line in src.splitlines():
                if re.search(r"\bglue\(", line):
                    assert "display=False" in line, (
                        f"{page.name}, code cell {i}: glue without display=False"
                    )
    assert "from myst_nb import glue" in text or "glue(" not in text


# What may print: the command line (its output is its interface) and the
# scripts torchrun starts (their stdout is the launcher's log).
MAY_PRINT = ("plan/cli.py", "__main__.py")


def test_the_package_never_glues_or_prints_to_pages():
    glues, prints = [], []
    for path in (ROOT / "mlbook").rglob("*.py"):
        src, rel = path.read_text(), path.relative_to(ROOT / "mlbook").as_posix()
        if re.search(
            r"^\s*from myst_nb import|^\s*import myst_nb|\bglue\(", src, flags=re.M
        ):
            glues.append(rel)
        # print(..., file=sink) writes to a stream the caller owns (the capstone's slow
        # loop logs every step on purpose, into a StringIO): not to the page
        to_page = [
            node
            for node in ast.walk(ast.parse(src))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and not any(k.arg == "file" for k in node.keywords)
        ]
        if to_page and not (rel in MAY_PRINT or rel.endswith("_script.py")):
            prints.append(rel)
    assert not glues, f"the package glues: {glues}"
    assert not prints, f"the package prints (pass a log callback instead): {prints}"
    assert not (ROOT / "mlbook" / "page.py").exists(), (
        "mlbook/page.py (page text helpers) is gone"
    )


@pytest.mark.book
def test_glued_values_are_numbers_or_short_labels(book):
    from conftest import page_values

    for page in PAGES:
        for name, value in page_values(page.stem).items():
            assert isinstance(value, (int, float, str)), (page.stem, name, value)
            if isinstance(value, str):
                words = value.split()
                assert len(words) <= 8 and not re.search(r"[.;]\s|[.;]$", value), (
                    f"{page.stem}: glued value {name!r} reads like a sentence: {value!r}"
                )
