"""Every page teaches in cells a reader can read (CONTRIBUTING.md, the page
guide), checked on the sources and on the test build:

- the parameters and set-up cells fold (``hide-input``); a chapter's first
  idea comes in prose before its first code listing;
- glue is plumbing: one call per cell, ``mlbook.show.glue_values``, in a cell
  the HTML hides (``remove-cell``); myst_nb's ``glue`` is called in the
  package only, inside that function; every glued value is visible in the
  executed page, in its cell's output or in a cell just before it;
- glue calls, format dictionaries and asserts are at most 3 % of the code
  lines a reader sees in the HTML (solutions folded): a column's unit sets
  its format, and a check sits in a hidden cell;
- a cell that draws a static figure has a caption that says what to see;
- at most 2 % of a page's prose sentences talk about the page (its checks,
  cells, budgets, timing method or build: tools/page_metrics.py's NARRATION)
  rather than the subject; a chapter ends with one collapsed "How this page
  checks itself" box, where the checks are told;
- no column alignment typed into f-strings: rows of results are tables;
- cells are short: the median code cell is at most 12 lines and none is over
  30 (parameters, set-up and exercise solutions aside);
- lines that glue or print are at most 15 % of the pages' code lines;
- glued values are numbers or short labels, never sentences;
- the package never prints to a page.
"""

from __future__ import annotations

import ast
import functools
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bookbuild import pages
from page_metrics import metrics as page_metrics
from page_metrics import prose_sentences, sized_cells

ROOT = Path(__file__).resolve().parent.parent
PAGES = pages.chapters()
HIDING = {"hide-input", "remove-input", "remove-cell"}
MEDIAN_CELL_LINES, MAX_CELL_LINES = 12, 30
BOOKKEEPING_SHARE = 0.15
PLUMBING_SHARE = 0.03  # of the code lines a reader sees in the HTML
NARRATING_SHARE = 0.02  # of the prose body's sentences
CHECKS_BOX = "```{dropdown} How this page checks itself"
CHAPTERS = [p for p in PAGES if p.parent.name == "notebooks"]
GLUE_HELPER = "glue_values"  # mlbook/show.py: the one function that glues


# A page's cells and metrics, read once a run: nine tests ask for each page's
# code cells or metrics, and each jupytext read of a page took 0.05-0.2 s
# here (metrics reads the page with jupytext twice). The pages are not
# written while the tests run.
@functools.cache
def code_cells(page: Path):
    import jupytext

    return [c for c in jupytext.read(page).cells if c.cell_type == "code"]


metrics = functools.cache(page_metrics)


def calls_to(node: ast.AST, name: str) -> bool:
    """``node`` is a call of ``name``, plain (``name(...)``) or an attribute
    (``x.name(...)``)."""
    return isinstance(node, ast.Call) and name in (
        getattr(node.func, "id", None),
        getattr(node.func, "attr", None),
    )


def calls(source: str, name: str) -> list[ast.Call]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an IPython magic: no Python to read
        return []
    return [n for n in ast.walk(tree) if calls_to(n, name)]


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
def test_the_parameters_and_set_up_cells_fold(page):
    cells = code_cells(page)
    tags = [set(c.metadata.get("tags", [])) for c in cells]
    if not tags or "parameters" not in tags[0]:
        return  # a page with no knobs has no parameters cell to fold
    assert "hide-input" in tags[0], f"{page.name}: the parameters cell shows its input"
    if len(tags) > 1:
        assert tags[1] & HIDING, f"{page.name}: the set-up cell shows its input"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_glue_is_one_hidden_call_per_cell(page):
    text = page.read_text()
    assert "mlbook.page" not in text and "from mlbook import page" not in text
    assert not re.search(r"from myst_nb import|import myst_nb", text), (
        f"{page.name}: glue through mlbook.show.glue_values, not myst_nb directly"
    )
    for i, cell in enumerate(code_cells(page)):
        n = len(calls(cell.source, GLUE_HELPER))
        assert n <= 1, f"{page.name}, code cell {i}: {n} glue calls (one per cell)"
        if n:
            assert HIDING & set(cell.metadata.get("tags", [])), (
                f"{page.name}, code cell {i}: glues in a cell the HTML shows; "
                "glue in a cell of its own tagged remove-cell, after the cell "
                "that shows the values"
            )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_plumbing_is_a_small_share_of_the_code_a_reader_sees(page):
    m = metrics(page)
    assert m.plumbing_lines <= PLUMBING_SHARE * m.visible_lines, (
        f"{page.name}: {m.plumbing_lines} of the {m.visible_lines} code lines the "
        f"HTML shows glue or format (at most {PLUMBING_SHARE:.0%}); name columns "
        "with their units and glue in a remove-cell cell"
    )


DRAWS = re.compile(r"^fig\w* = |\bfigs?\.\w+\(|\bfigures\.\w+\(", flags=re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_figure_says_what_to_see(page):
    """A cell that draws a static figure carries a caption (mystnb: figure:
    caption:) that says what to look at; live figures say it in the prose."""
    missing = [
        i
        for i, cell in enumerate(code_cells(page))
        if DRAWS.search(cell.source)
        and "show_live" not in cell.source
        and not cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
    ]
    assert not missing, (
        f"{page.name}: code cells {missing} draw a figure with no caption "
        "(mystnb: figure: caption: in the cell's YAML)"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_prose_speaks_of_the_subject(page):
    from page_metrics import narrating

    sentences = prose_sentences(page.read_text())
    about_the_page = [s for s in sentences if narrating(s)]
    assert len(about_the_page) <= NARRATING_SHARE * len(sentences), (
        f"{page.name}: {len(about_the_page)} of {len(sentences)} sentences talk "
        f"about the page, its checks or its build (at most {NARRATING_SHARE:.0%}); "
        "move them to the 'How this page checks itself' box: "
        + " | ".join(s[:90] for s in about_the_page)
    )


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_ends_with_one_box_of_its_checks(page):
    text = page.read_text()
    assert text.count(CHECKS_BOX) == 1, (
        f"{page.name}: one '{CHECKS_BOX}' box, found {text.count(CHECKS_BOX)}"
    )
    after = text[text.index(CHECKS_BOX) :]
    assert not re.search(r"^#|^```\{(?:exercise|code-cell)\}", after, flags=re.M), (
        f"{page.name}: the checks box is the chapter's last section"
    )


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.stem)
def test_the_first_idea_comes_before_the_first_listing(page):
    text = page.read_text()
    listing = re.compile(r"^```\{(?:code-cell|literalinclude)\}", flags=re.M)
    first_visible = len(text)
    for m in listing.finditer(text):
        after = text[m.end() :].split("\n")[1:]
        options = ""
        for line in after:
            if not line.startswith(":"):
                break
            options += line
        if not re.search(r"hide-input|remove-input|remove-cell|parameters", options):
            first_visible = m.start()
            break
    before = text[:first_visible]
    sentences = prose_sentences(before)
    assert len(sentences) >= 4, (
        f"{page.name}: the first code a reader sees comes after only "
        f"{len(sentences)} sentences; give the idea in words first"
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
MAY_PRINT = ("plan/cli.py", "calibrate/cli.py", "__main__.py", "judge/_check.py")


def gluers_and_prints(tree: ast.AST) -> tuple[set[str], bool]:
    """The functions of ``tree`` that call ``glue`` (each one around the call,
    nested or not), and whether it calls ``print`` to the page, in one walk
    (walking each function's tree again took 0.6 of this test's 1.4 s here,
    and unparsing and parsing each function and module 2 s more)."""
    gluers, prints = set(), False
    todo = [(tree, ())]
    while todo:
        node, around = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            around = (*around, node.name)
        elif isinstance(node, ast.Call):
            func = node.func
            if calls_to(node, "glue"):
                gluers.update(around)
            # print(..., file=sink) writes to a stream the caller owns (the
            # capstone's slow loop logs every step on purpose, into a
            # StringIO): not to the page
            prints |= (
                isinstance(func, ast.Name)
                and func.id == "print"
                and not any(k.arg == "file" for k in node.keywords)
            )
        todo.extend((child, around) for child in ast.iter_child_nodes(node))
    return gluers, prints


def test_the_package_glues_only_in_the_page_helper_and_never_prints():
    glues, prints = [], []
    for path in (ROOT / "mlbook").rglob("*.py"):
        src, rel = path.read_text(), path.relative_to(ROOT / "mlbook").as_posix()
        gluers, to_page = gluers_and_prints(ast.parse(src))
        glues += [
            f"{rel}:{name}"
            for name in sorted(gluers)
            if not (rel == "show.py" and name == GLUE_HELPER)
        ]
        if re.search(r"^\s*import myst_nb", src, flags=re.M):
            glues.append(rel)
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
def test_every_glued_value_is_visible_where_it_is_made(book, page):
    """Each glued value shows in the executed page: in the output of the cell
    that glues it or of the cells since the previous glue (the cell that
    computed and showed it), as a number that rounds it or as a label."""
    import nbformat

    from conftest import BOOK_DEST

    executed = BOOK_DEST / "src" / page.parent.relative_to(ROOT) / f"{page.stem}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    from bookbuild import values as glued

    hidden, since_glue = [], []
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        since_glue.append(visible_text(cell.get("outputs", [])))
        records = [
            o for o in cell.get("outputs", []) if o.get("metadata", {}).get("scrapbook")
        ]
        if not records:
            continue
        text = "\n".join(since_glue)
        for record in records:
            name = record["metadata"]["scrapbook"]["name"]
            value = glued.glued_value_of_output(record, page.stem)
            if not shown(value, text):
                hidden.append(f"code cell {i}: {name} = {value!r}")
        since_glue = []
    assert not hidden, (
        f"{page.stem}: glued values not shown by the cells that made them: {hidden}"
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
