"""Every page shows its work in cells a reader can read (CONTRIBUTING.md, the
page guide), checked on the sources and on the test build:

- at most a third of a page's code cells hide or remove their input;
- one glue call per cell, ``mlbook.show.glue_values``; myst_nb's ``glue`` is
  called in the package only, inside that function, and nowhere else;
- a cell that glues shows what it glues (a table or a printed line), and in
  the executed page every glued value is visible in its cell's output;
- no column alignment typed into f-strings: rows of results are tables;
- cells are short: the median code cell is at most 12 lines and none is over
  30 (parameters, set-up and exercise solutions aside);
- lines that glue or print are at most 15 % of the pages' code lines;
- glued values are numbers or short labels, never sentences;
- the package never prints to a page.
"""

from __future__ import annotations

import ast
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bookbuild import pages
from page_metrics import metrics, sized_cells

ROOT = Path(__file__).resolve().parent.parent
PAGES = pages.chapters()
HIDING = {"hide-input", "remove-input", "remove-cell"}
MEDIAN_CELL_LINES, MAX_CELL_LINES = 12, 30
BOOKKEEPING_SHARE = 0.15
GLUE_HELPER = "glue_values"  # mlbook/show.py: the one function that glues


def code_cells(page: Path):
    import jupytext

    return [c for c in jupytext.read(page).cells if c.cell_type == "code"]


def calls(source: str, name: str) -> list[ast.Call]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an IPython magic: no Python to read
        return []
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", "") == name)
    ]


def shows_something(source: str) -> bool:
    """The cell prints, displays, or ends with an expression (a table)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    last = tree.body[-1] if tree.body else None
    return bool(
        calls(source, "print")
        or calls(source, "display")
        or (isinstance(last, ast.Expr) and not calls(ast.unparse(last), GLUE_HELPER))
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_at_most_a_third_of_code_cells_hide_their_input(page):
    cells = code_cells(page)
    hidden = [c for c in cells if HIDING & set(c.metadata.get("tags", []))]
    assert len(hidden) * 3 <= len(cells), (
        f"{page.name}: {len(hidden)} of {len(cells)} code cells hide their input"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_one_glue_call_per_cell_and_the_cell_shows_it(page):
    text = page.read_text()
    assert "mlbook.page" not in text and "from mlbook import page" not in text
    assert not re.search(r"from myst_nb import|import myst_nb", text), (
        f"{page.name}: glue through mlbook.show.glue_values, not myst_nb directly"
    )
    for i, cell in enumerate(code_cells(page)):
        n = len(calls(cell.source, GLUE_HELPER))
        assert n <= 1, f"{page.name}, code cell {i}: {n} glue calls (one per cell)"
        if n:
            assert shows_something(cell.source), (
                f"{page.name}, code cell {i}: glues values but shows nothing "
                "(a table or a printed line must show what it glues)"
            )


ALIGNED = re.compile(r"\{[^{}]*:[^{}]?[<>^=]\d+[^{}]*\}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_no_columns_aligned_by_hand(page):
    for i, cell in enumerate(code_cells(page)):
        found = ALIGNED.findall(cell.source)
        assert not found, (
            f"{page.name}, code cell {i}: f-string column alignment {found[:3]}; "
            "show rows of results with mlbook.show.table"
        )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_no_cell_is_long(page):
    m = metrics(page)
    assert m.largest_cell <= MAX_CELL_LINES, (
        f"{page.name}: a code cell of {m.largest_cell} lines (at most "
        f"{MAX_CELL_LINES}, parameters, set-up and solutions aside)"
    )


def test_the_median_cell_is_short():
    sizes = sorted(len(c) for p in PAGES for c in sized_cells(p.read_text()))
    median = statistics.median(sizes)
    per_page = {p.stem: metrics(p).median_cell for p in PAGES}
    assert median <= MEDIAN_CELL_LINES, (
        f"the median code cell has {median} lines (goal {MEDIAN_CELL_LINES}); "
        f"per page: {per_page}"
    )


def test_bookkeeping_is_a_small_share_of_the_code():
    rows = [metrics(p) for p in PAGES]
    lines = sum(r.code_lines for r in rows)
    bookkeeping = sum(r.glue_lines + r.print_lines for r in rows)
    assert bookkeeping <= BOOKKEEPING_SHARE * lines, (
        f"glue and print statements fill {bookkeeping} of {lines} code lines "
        f"({bookkeeping / lines:.0%}; at most {BOOKKEEPING_SHARE:.0%}): "
        + ", ".join(f"{r.page} {r.glue_lines + r.print_lines}" for r in rows)
    )


# What may print: the command line (its output is its interface), the
# scripts torchrun starts (their stdout is the launcher's log), and the
# exercises' check(), whose printed hint is what a reader checking an answer
# in JupyterLab reads.
MAY_PRINT = ("plan/cli.py", "calibrate/cli.py", "__main__.py", "exercises/_check.py")


def test_the_package_glues_only_in_the_page_helper_and_never_prints():
    glues, prints = [], []
    for path in (ROOT / "mlbook").rglob("*.py"):
        src, rel = path.read_text(), path.relative_to(ROOT / "mlbook").as_posix()
        tree = ast.parse(src)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                continue
            body_calls = calls(ast.unparse(fn), "glue")
            if body_calls and not (
                rel == "show.py" and getattr(fn, "name", "") == GLUE_HELPER
            ):
                if isinstance(fn, ast.Module):
                    continue  # counted in the function that holds the call
                glues.append(f"{rel}:{fn.name}")
        if re.search(r"^\s*import myst_nb", src, flags=re.M):
            glues.append(rel)
        # print(..., file=sink) writes to a stream the caller owns (the capstone's
        # slow loop logs every step on purpose, into a StringIO): not to the page
        to_page = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and not any(k.arg == "file" for k in node.keywords)
        ]
        if to_page and not (rel in MAY_PRINT or rel.endswith("_script.py")):
            prints.append(rel)
    assert not glues, f"the package glues outside show.{GLUE_HELPER}: {glues}"
    assert not prints, f"the package prints (pass a log callback instead): {prints}"
    assert not (ROOT / "mlbook" / "page.py").exists(), (
        "mlbook/page.py (page text helpers) is gone"
    )


@pytest.mark.book
def test_glued_values_are_numbers_or_short_labels(book):
    from conftest import ONLY, page_values

    for page in PAGES:
        if ONLY and page.stem not in ONLY:
            continue  # a partial build (development only) has no values for it
        for name, value in page_values(page.stem).items():
            assert isinstance(value, (int, float, str)), (page.stem, name, value)
            if isinstance(value, str):
                words = value.split()
                assert len(words) <= 8 and not re.search(r"[.;]\s|[.;]$", value), (
                    f"{page.stem}: glued value {name!r} reads like a sentence: "
                    f"{value!r}"
                )


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("style", "script")

    def handle_endtag(self, tag):
        self._skip -= tag in ("style", "script") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


def visible_text(outputs: list) -> str:
    """What a reader sees of a cell's outputs, glue records left out."""
    parts = []
    for out in outputs:
        if out.get("metadata", {}).get("scrapbook"):
            continue
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
            continue
        data = out.get("data", {})
        if "text/html" in data:
            parser = _Text()
            parser.feed(data["text/html"])
            parts.append(" ".join(parser.parts))
        elif "text/plain" in data:
            parts.append(data["text/plain"])
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def shown(value, text: str) -> bool:
    """``value`` appears in ``text``: a label as itself, a number as any
    displayed number that rounds it (to the digits shown), as is or as a
    percentage of a fraction."""
    if isinstance(value, str):
        return value in text
    for token in NUMBER.findall(text):
        plain = token.replace(",", "")
        try:
            n = float(plain)
        except ValueError:
            continue
        mantissa = plain.lower().split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(plain.lower().split("e")[1]) if "e" in plain.lower() else 0
        if abs(exponent - decimals) > 300:
            continue
        half_step = 0.5 * 10.0 ** (exponent - decimals)
        for scale in (1, 100):
            if abs(n - value * scale) <= half_step * (1 + 1e-9) + 1e-12 * abs(n):
                return True
    return False


@pytest.mark.book
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_glued_value_is_visible_in_its_cell(book, page):
    import nbformat

    from conftest import BOOK_DEST

    executed = BOOK_DEST / "src" / page.parent.relative_to(ROOT) / f"{page.stem}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    from bookbuild import values as glued

    hidden = []
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        records = [
            o for o in cell.get("outputs", []) if o.get("metadata", {}).get("scrapbook")
        ]
        if not records:
            continue
        text = visible_text(cell.outputs)
        for record in records:
            name = record["metadata"]["scrapbook"]["name"]
            value = glued.glued_value_of_output(record, page.stem)
            if not shown(value, text):
                hidden.append(f"code cell {i}: {name} = {value!r}")
    assert not hidden, (
        f"{page.stem}: glued values not shown in their cell's output: {hidden}"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_scratch_files_go_when_the_kernel_does(page):
    """A page's scratch directory is a tempfile.TemporaryDirectory, removed
    when its kernel exits: one from tempfile.mkdtemp outlived every run (the
    cadence and input-pipeline pages had left 71 of about 3 MB in /tmp here)."""
    for i, cell in enumerate(code_cells(page)):
        assert not calls(cell.source, "mkdtemp"), (
            f"{page.name}, code cell {i}: tempfile.mkdtemp leaves its directory "
            "behind; use tempfile.TemporaryDirectory, kept in a variable"
        )
