"""One formatter and linter for all Python (ruff, configured in
pyproject.toml): the package, the tools, the tests and every page's code
cells. `make format` fixes what it can; these tests fail on anything left,
naming the file and line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import format_pages

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"
TREES = ["mlbook", "tools", "tests"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RUFF), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_python_is_formatted():
    result = ruff("format", "--check", *TREES)
    assert result.returncode == 0, "run `make format`:\n" + result.stdout


def test_python_passes_the_linter():
    result = ruff("check", "--output-format", "concise", *TREES)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("page", format_pages.pages(), ids=lambda p: p.stem)
def test_page_code_cells_are_formatted_and_pass_the_linter(page):
    problems = format_pages.check(page)
    assert not problems, "run `make format`, then fix the rest:\n" + "\n".join(problems)


def test_an_overlong_line_in_a_page_fails_at_its_own_line(tmp_path):
    page = tmp_path / "mfu.md"
    shutil.copy(ROOT / "notebooks" / "mfu.md", page)
    lines = page.read_text().split("\n")
    fence = next(i for i, ln in enumerate(lines) if ln.startswith("```{code-cell}"))
    while lines[fence + 1].startswith(":"):  # the cell's options
        fence += 1
    long = "x_" + "1" * 100 + " = 1"
    lines.insert(fence + 1, long)
    page.write_text("\n".join(lines))
    problems = format_pages.check(page)
    expected = f"{page}:{fence + 2}:89: E501"
    assert any(p.startswith(expected) for p in problems), problems


def test_fix_formats_a_cell_in_place_and_leaves_the_prose(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "---\nkernelspec:\n  display_name: Python 3\n  language: python\n"
        "  name: python3\n---\n\n# A page\n\nSome prose  with  spaces.\n\n"
        "```{code-cell} ipython3\n:tags: [hide-input]\nx=[1,2 ,3]\nprint(x);\n```\n\n"
        "More prose.\n"
    )
    assert any("not formatted" in p for p in format_pages.check(page))
    assert format_pages.fix(page)
    text = page.read_text()
    assert "x = [1, 2, 3]\nprint(x);\n```" in text  # the trailing ; stays
    assert "Some prose  with  spaces." in text and ":tags: [hide-input]" in text
    assert format_pages.check(page) == []
