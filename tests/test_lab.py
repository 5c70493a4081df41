"""A page of the book read in JupyterLab, as `make lab` serves it.

The tests share one JupyterLab server of their own (a free port on
127.0.0.1, a token, settings, runtime and config in a temporary folder, no
browser, no news, no update check, no extension-manager queries,
`--allow-root` only when root) and one JupyterLab tab in headless Chromium
with every request off that server blocked: starting JupyterLab in a browser
took 8-30 s here, each time, so it starts once and opens each notebook in
turn, as a reader does. The "Plan a run" page is opened as `make lab` opens
it (book/plan.md itself, through jupytext), run all, and the tests check:

- every code cell ran and none has an error output; widget outputs render;
- every markdown cell is rendered by jupyterlab-myst, with no raw MyST left in
  it: no fence (```{name} or :::{name}) and no directive or role name that the
  chapter's source uses ({exercise}, {solution-start}, {math}, {glue:text}...);
  the exercises render as exercise boxes and the math as typeset math;
- a reader's `check` cell added after the chapter runs and prints its
  verdict (mlbook.exercises);
- nothing failed in the browser: no blocked or failed request, no JavaScript
  console error, no uncaught page error (ALLOWED_CONSOLE would name a
  harmless message; there is none);
- each live figure (mlbook.plotting.live.show_live) shows one Vega-Lite chart,
  drawn by JupyterLab's own renderer, under its controls; moving one control
  (the first live figure's first dropdown) draws a different chart.

The page has what JupyterLab must render (live figures with dropdowns, a
form, exercises, math, MyST directives and roles) and runs in seconds (the
planner has nothing to shrink: its reader sizes are its test sizes), where
the MFU chapter, used before, took 14 s of the same checks; what each
chapter computes is the test build's to check. The same run also answers for
the solutions folded until opened, the glued names before Run All, and an
autosave that leaves the page's bytes as written.

Then a chapter (checkpoint cadence) runs the same way in the same
JupyterLab and its prose is read against the test build's HTML: the book's
JupyterLab extension (tools/labext/prose.js, with mlbook.prose in the
kernel) must show every glued number, citation and
cross-page reference as the HTML shows it, with no glue name, format spec or
citation key left. It is a MyST text notebook converted with jupytext to
.ipynb in the temporary folder (the same cells jupytext gives JupyterLab)
with SMALL = True in its parameters cell, beside links to the repository's
other folders so relative paths resolve as in the repository.
"""

import json
import re
import shutil
import time
from html import unescape
from pathlib import Path

import jupytext
import pytest
from lab_settings import install_extension

from conftest import BOOK_DEST, page_values
from helpers.browser import Allowed, chromium_or_skip, watch
from helpers.lab import SERVER_START_S, jupyter_server, server_config, user_settings

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "book" / "plan.md"  # runs in seconds
RUN_ALL_S = 120  # the page takes about 3 s, the prose chapters 15-40 s here

# Console errors and page errors from JupyterLab that are harmless, each with
# why. None: JupyterLab 4.6 with jupyterlab-myst 2.7, jupytext and the book's
# extension logs no error while opening and running a chapter (a {ref} to
# another page, which jupyterlab-myst cannot resolve, the extension shows as
# that page's title).
ALLOWED_CONSOLE: list[Allowed] = []

pytestmark = pytest.mark.book


def myst_names(source: str) -> tuple[set[str], set[str]]:
    """The directive names (```{name} / :::{name}) and role names ({name}`...`)
    that a MyST source uses."""
    directives = set(re.findall(r"^\s*(?:`{3,}|:{3,})\{([\w:-]+)\}", source, re.M))
    roles = set(re.findall(r"\{([a-z][\w:-]*)\}`", source))
    return directives, roles


def test_myst_names():
    source = (
        "```{exercise}\n:label: x\n```\n:::{note}\n"
        "see {cite}`k` and {glue:text}`v:.1f`\n:::\n"
    )
    assert myst_names(source) == ({"exercise", "note"}, {"cite", "glue:text"})


def notebook_copies(chapters: list[Path], root: Path) -> list[Path]:
    """Each chapter as .ipynb under ``root`` at the same relative path, with
    SMALL = True, the repository's other folders and the chapters' neighbours
    (but not their own sources) linked beside them."""
    stems = {c.stem for c in chapters}
    folders = {c.relative_to(ROOT).parent for c in chapters}
    for folder in folders:
        (root / folder).mkdir(parents=True)
    for top in ("book", "mlbook", "notebooks"):
        if not any(f.parts[0] == top for f in folders):
            (root / top).symlink_to(ROOT / top)
    for folder in folders:
        for entry in (ROOT / folder).iterdir():
            if entry.stem not in stems:
                (root / folder / entry.name).symlink_to(entry)
    out = []
    for chapter in chapters:
        rel = chapter.relative_to(ROOT)
        nb = jupytext.read(chapter)
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1, f"{rel} should have one parameters cell"
        params[0].source, n = re.subn(
            r"^SMALL\s*=.*$", "SMALL = True", params[0].source, flags=re.M
        )
        assert n == 1, f"{rel}'s parameters cell has no `SMALL = ...` line"
        out.append(root / rel.with_suffix(".ipynb"))
        jupytext.write(nb, out[-1])
    return out


def lab_root(root: Path) -> list[str]:
    """The server's folder: book/plan.md copied as written (with
    jupytext.toml, as in the repository), the prose chapters as .ipynb
    copies (notebook_copies), the rest linked; the notebooks' paths under
    ``root``, the page's first."""
    notebooks = notebook_copies(PROSE_CHAPTERS, root)
    rel = PAGE.relative_to(ROOT)
    folder = root / rel.parent
    folder.unlink()  # notebook_copies linked the whole folder
    folder.mkdir()
    copied = {PAGE.name} | {p.name for p in FIRST_PAGES}  # files the lab may save
    for name in copied:
        shutil.copy2(ROOT / rel.parent / name, folder / name)
    # its pictures copied too: the server refuses a file reached through a link
    shutil.copytree(ROOT / rel.parent / "_static", folder / "_static")
    copied.add("_static")
    for entry in (ROOT / rel.parent).iterdir():
        if entry.name not in copied:
            (folder / entry.name).symlink_to(entry)
    shutil.copy2(ROOT / "jupytext.toml", root / "jupytext.toml")
    return [rel.as_posix()] + [nb.relative_to(root).as_posix() for nb in notebooks]


NOTEBOOK_READY = """(path) => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.context || panel.context.path !== path
      || !panel.context.isReady) return false;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!kernel && kernel.status === "idle" && panel.content.widgets.length > 0;
}"""

RUN_ALL = """() => {
  window.__mlbookRun = {done: false};
  window.jupyterapp.commands.execute("notebook:run-all-cells").then(
    ok => { window.__mlbookRun = {done: true, ok: ok}; },
    err => { window.__mlbookRun = {done: true, ok: false, error: String(err)}; });
}"""

# Run-all has returned, the kernel status is idle and no prompt shows [*]
SETTLED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!window.__mlbookRun.done) return false;
  const kernel = panel.sessionContext.session.kernel;
  if (kernel.status !== "idle") return false;
  return panel.content.widgets.every(c => c.model.type !== "code"
    || !c.node.querySelector(".jp-InputPrompt")
    || !c.node.querySelector(".jp-InputPrompt").textContent.includes("*"));
}"""

CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((c, i) => {
    if (c.model.type === "code") {
      const outputs = c.model.outputs.toJSON();
      return {i, type: "code", count: c.model.executionCount,
              errors: outputs.filter(o => o.output_type === "error")
                .map(o => o.ename + ": " + o.evalue),
              widgets: outputs.filter(o => o.data
                && o.data["application/vnd.jupyter.widget-view+json"]).length,
              widgetViews:
                c.node.querySelectorAll(".jp-OutputArea .jupyter-widgets").length,
              text: c.node.querySelector(".jp-Cell-outputWrapper")?.textContent || ""};
    }
    const myst = c.node.querySelector(".myst");
    const shown = myst || c.node.querySelector(".jp-RenderedMarkdown");
    return {i, type: c.model.type, rendered: !!c.rendered, myst: !!myst,
            text: shown ? shown.textContent : "",
            source: c.model.sharedModel.getSource().slice(0, 80),
            exercises: c.node.querySelectorAll(".myst-exercise").length,
            math: c.node.querySelectorAll(".katex, mjx-container, .MathJax").length};
  });
}"""


# A reader's check cell, added below the chapter's last cell after run-all:
# check() runs in the chapter's kernel and prints its verdict in the output.
CHECK_SOURCE = (
    "from mlbook.exercises import check\n"
    'result = check("mfu-1", mfu=0.49, mfu_6n=0.4906)'
)
CHECK_VERDICT = (
    "mfu-1: 1 of 2 right.",
    "Looks like 6N instead of 6N + 12Lhs",
    "✓ mfu_6n",
)

ADD_AND_RUN = """(source) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const n = panel.content.model.sharedModel.cells.length;
  panel.content.model.sharedModel.insertCell(n, {cell_type: "code", source: source});
  panel.content.activeCellIndex = n;
  window.__mlbookRun = {done: false};
  window.jupyterapp.commands.execute("notebook:run-cell").then(
    ok => { window.__mlbookRun = {done: true, ok: ok}; },
    err => { window.__mlbookRun = {done: true, ok: false, error: String(err)}; });
}"""


# The live cells: how many Vega-Lite charts and images each shows, and whether
# its controls come before its chart
LIVE_CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets
    .filter(c => c.model.type === "code"
                 && c.model.sharedModel.getSource().includes("show_live("))
    .map(c => {
      const charts = c.node.querySelectorAll(
        ".jp-OutputArea .jp-RenderedVegaCommon5");
      const control = c.node.querySelector(
        ".jp-OutputArea .widget-dropdown, .jp-OutputArea .widget-slider");
      return {
        charts: charts.length,
        images: c.node.querySelectorAll(".jp-OutputArea img").length,
        below: !!(control && charts.length
                  && (control.compareDocumentPosition(charts[0]) & 4))};
    });
}"""

# The first live cell's chart as pixels ("" until it is drawn)
LIVE_PIXELS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel.content.widgets.find(
    c => c.model.sharedModel.getSource().includes("show_live("));
  const canvas = cell.node.querySelector(".jp-RenderedVegaCommon5 canvas");
  const svg = cell.node.querySelector(".jp-RenderedVegaCommon5 svg");
  return canvas ? canvas.toDataURL() : (svg ? svg.outerHTML : "");
}"""

# Move the first live cell's first dropdown (the model) to another option
MOVE_DROPDOWN = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel.content.widgets.find(
    c => c.model.sharedModel.getSource().includes("show_live("));
  const select = cell.node.querySelector(".jp-OutputArea .widget-dropdown select");
  select.selectedIndex = (select.selectedIndex + 1) % select.options.length;
  select.dispatchEvent(new Event("change", {bubbles: true}));
  return select.value;
}"""


def open_in_lab(browser, base: str, token: str, path: str):
    """A context of its own in the run's one Chromium (conftest), the
    notebook at ``path`` opened in JupyterLab and ready, and the watch on
    its console and requests (nothing may leave the server)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    origin = base.replace("http://", "ws://")
    w = watch(
        page,
        lambda u: u.startswith((base + "/", origin + "/", "data:", "blob:")),
        ALLOWED_CONSOLE,
    )
    try:
        page.goto(f"{base}/lab/tree/{path}?token={token}")
        page.wait_for_function(
            NOTEBOOK_READY, arg=path, timeout=SERVER_START_S * 1000, polling=250
        )
    except BaseException:
        context.close()
        raise
    return context, page, w


# Bring an open notebook to the front (JupyterLab's current widget)
FRONT = """(path) => {
  const app = window.jupyterapp;
  for (const w of app.shell.widgets("main")) {
    if (w.context && w.context.path === path) { app.shell.activateById(w.id); }
  }
}"""


def front(page, path: str) -> None:
    """The notebook at ``path``, open in the session's JupyterLab, in front
    (opened as a reader opens a file, if it is not open yet) and ready."""
    page.evaluate(FRONT, path)
    if not page.evaluate(NOTEBOOK_READY, path):
        page.evaluate(
            "(path) => { window.jupyterapp.commands.execute("
            '"docmanager:open", {path: path}); }',
            path,
        )
    page.wait_for_function(
        NOTEBOOK_READY, arg=path, timeout=SERVER_START_S * 1000, polling=250
    )


@pytest.fixture(scope="module")
def lab_session(tmp_path_factory, chromium_browser):
    """One JupyterLab server serving lab_root's folder, with the book's
    extension installed from tools/labext (as `make install` installs it),
    the server config and settings `make lab` uses (the .md opens as a
    notebook through jupytext), autosaving every AUTOSAVE_S seconds, and the
    values the pages glue kept in the temporary folder; and one tab on it,
    opened at book/plan.md. Every test of this file reads this tab."""
    # no server for nothing: skip (or, under CI, fail) before starting one
    chromium_or_skip()
    tmp = tmp_path_factory.mktemp("lab")
    root, home = tmp / "root", tmp / "jupyter"
    paths = lab_root(root)
    install_extension(home / "data" / "labextensions")
    server_config(home)
    # JupyterLab renders only the cells in view unless told otherwise;
    # the tests read every cell
    user_settings(
        home, "@jupyterlab/notebook-extension:tracker", {"windowingMode": "none"}
    )
    user_settings(
        home,
        "@jupyterlab/docmanager-extension:plugin",
        {
            "defaultViewers": {"markdown": "Jupytext Notebook"},
            "autosave": True,
            "autosaveInterval": AUTOSAVE_S,
        },
    )
    lab_values = tmp / "lab-values"
    with jupyter_server(root, home, MLBOOK_LAB_VALUES_DIR=str(lab_values)) as (
        base,
        token,
    ):
        context, page, w = open_in_lab(chromium_browser, base, token, paths[0])
        try:
            yield {
                "page": page,
                "watch": w,
                "root": root,
                "lab_values": lab_values,
                "paths": dict(
                    zip(
                        [PAGE.stem] + [c.stem for c in PROSE_CHAPTERS],
                        paths,
                        strict=True,
                    )
                ),
            }
        finally:
            context.close()


PAGE = CHAPTER  # solutions with code cells
AUTOSAVE_S = 5  # JupyterLab's autosave interval for the test (120 s by default)
AUTOSAVE_WAIT_S = 60

# Each cell of a solution: its exercise, whether it is the solution's first
# cell (whose dropdown folds its own prose), whether it shows, and its output
SOLUTIONS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((c, i) => ({
    i, type: c.model.type, id: c.node.dataset.mlbookSolution,
    first: c.node.dataset.mlbookSolution !== undefined
      && c.model.sharedModel.getSource().includes("{solution-start}"),
    shown: c.node.getClientRects().length > 0,
    output: c.model.type === "code"
      ? (c.node.querySelector(".jp-OutputArea") || {}).innerText || "" : "",
  })).filter(c => c.id !== undefined);
}"""

# Open or close one exercise's solution as a reader does: its dropdown's title
TOGGLE = """(id) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const first = panel.content.widgets.find(c => c.node.dataset.mlbookSolution === id
    && c.model.sharedModel.getSource().includes("{solution-start}"));
  const all = [...first.node.querySelectorAll(".myst details")];
  all[all.length - 1].querySelector("summary").click();
}"""


def toggle(page, solution_id: str, until: str) -> None:
    """Open or close a solution as a reader does, then wait until ``until``
    (a JavaScript test of one cell of SOLUTIONS) holds for each of its cells."""
    page.evaluate(TOGGLE, solution_id)
    page.wait_for_function(
        f"() => ({SOLUTIONS})().filter(c => c.id === {json.dumps(solution_id)})"
        f".every({until})",
        timeout=10_000,
        polling=100,
    )


NOTE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const note = panel.node.querySelector(".mlbook-prose-note");
  return {unresolved: Number(panel.content.node.dataset.mlbookProseUnresolved || -1),
          state: panel.content.node.dataset.mlbookProse || "",
          note: note && note.getClientRects().length ? note.textContent : ""};
}"""


# Each exercise box's title as JupyterLab shows it, in the notebook in front
EXERCISE_TITLES = """() => [...window.jupyterapp.shell.currentWidget.node
  .querySelectorAll(".jp-Notebook .myst-exercise, .jp-Notebook aside.exercise")]
  .map(e => (e.querySelector(".admonition-title, header, [class*=title]")
             || e).textContent.trim().split("\\n")[0])"""

REFUSAL = 'from mlbook.exercises import check\ncheck("plan-1")'
# the notebook in front has changes its last save does not hold
DIRTY = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"


@pytest.fixture(scope="module")
def page_in_lab(lab_session):
    """book/plan.md opened in JupyterLab as `make lab` opens it (the .md,
    through jupytext, with the contents manager and settings make install
    writes), autosaving every AUTOSAVE_S seconds: what the reader sees
    before and after Run All, the saves JupyterLab made and the page's bytes
    after the first save that followed the run; then, in the run page, the
    first live figure's dropdown moved (its chart redrawn), the exercise
    titles, and two cells a reader adds: a check() with answers and one with
    none."""
    page, w = lab_session["page"], lab_session["watch"]
    rel = lab_session["paths"][PAGE.stem]
    file = lab_session["root"] / rel
    saves = []
    page.on(
        "response",
        lambda r: (
            saves.append((time.monotonic(), r.status))
            if r.request.method == "PUT" and r.url.split("?")[0].endswith(rel)
            else None
        ),
    )
    started = time.monotonic()
    front(page, rel)
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.content.node"
        ".dataset.mlbookProse === 'done'",
        timeout=30_000,
        polling=250,
    )
    before = {
        "opened": page.evaluate(
            "() => { const p = window.jupyterapp.shell.currentWidget;"
            " return [p.context.path, p.content.widgets.length]; }"
        ),
        "note": page.evaluate(NOTE),
        "solutions": page.evaluate(SOLUTIONS),
    }
    run_started = time.monotonic()
    page.evaluate(RUN_ALL)
    page.wait_for_function(SETTLED, timeout=RUN_ALL_S * 1000, polling=250)
    run = page.evaluate("() => window.__mlbookRun")
    page.wait_for_function(
        f"() => ({NOTE})().unresolved === 0", timeout=30_000, polling=250
    )
    after = {"note": page.evaluate(NOTE), "cells": page.evaluate(CELLS)}
    # the save that holds the run, before anything else changes the notebook:
    # a save since the run began, and nothing changed since the last save (an
    # autosave can land in the moment between the run's end and this check,
    # and a notebook with nothing new is not saved again)
    deadline = time.monotonic() + AUTOSAVE_WAIT_S
    while time.monotonic() < deadline and not (
        any(t > run_started for t, _ in saves) and not page.evaluate(DIRTY)
    ):
        page.wait_for_timeout(250)
    saved = file.read_bytes()
    saves_after_run = [s for t, s in saves if t > run_started]

    live_cells = page.evaluate(LIVE_CELLS)
    moved = None
    if live_cells:
        page.wait_for_function(LIVE_PIXELS, timeout=30_000, polling=250)
        drawn = page.evaluate(LIVE_PIXELS)
        moved = page.evaluate(MOVE_DROPDOWN)
        page.wait_for_function(
            "(old) => { const now = ("
            + LIVE_PIXELS
            + ")(); return now && now !== old; }",
            arg=drawn,
            timeout=60_000,
            polling=250,
        )
    titles = page.evaluate(EXERCISE_TITLES)
    page.evaluate(ADD_AND_RUN, CHECK_SOURCE)
    page.wait_for_function(SETTLED, timeout=SERVER_START_S * 1000, polling=250)
    checked = page.evaluate(CELLS)  # the check cell is the last one now
    page.evaluate(ADD_AND_RUN, REFUSAL)
    page.wait_for_function(SETTLED, timeout=SERVER_START_S * 1000, polling=250)
    refused = page.evaluate(CELLS)[-1]["text"]
    yield {
        "page": page,
        "path": rel,
        "saves": saves,
        "saves_after_run": saves_after_run,
        "saved": saved,
        "before": before,
        "after": after,
        "run": run,
        "cells": checked,
        "live_cells": live_cells,
        "moved": moved,
        "titles": titles,
        "refused": refused,
        "problems": w.problems(),
        "seconds": time.monotonic() - started,
    }


# Pages that once read other pages' values: each opens first in a fresh
# JupyterLab, before any other page has run there, and runs alone
FIRST_PAGES = [ROOT / "book" / "interview.md", ROOT / "book" / "intro.md"]


@pytest.mark.parametrize("page_md", FIRST_PAGES, ids=lambda p: p.stem)
def test_a_page_runs_first_in_jupyterlab(lab_session, page_md):
    """The interview and the introduction, opened in JupyterLab before any
    other page has run there (no other page's values exist), run all with no
    error and show their numbers."""
    page, w = lab_session["page"], lab_session["watch"]
    others = {p.stem for p in lab_session["lab_values"].glob("*.json")}
    assert not others - {p.stem for p in FIRST_PAGES}, others
    earlier = set(w.problems())
    rel = page_md.relative_to(ROOT).as_posix()
    front(page, rel)
    page.evaluate(RUN_ALL)
    page.wait_for_function(SETTLED, timeout=RUN_ALL_S * 1000, polling=250)
    assert page.evaluate("() => window.__mlbookRun").get("ok") is True
    code = [c for c in page.evaluate(CELLS) if c["type"] == "code"]
    errors = [f"cell {c['i']}: {e}" for c in code for e in c["errors"]]
    assert code and not errors, f"{rel} raised in JupyterLab:\n" + "\n".join(errors)
    assert all(c["count"] is not None for c in code), f"{rel}: cells never ran"
    assert any(re.search(r"\d", c["text"]) for c in code), f"{rel} showed no number"
    assert not [p for p in w.problems() if p not in earlier]


def test_chapter_runs_in_jupyterlab(page_in_lab):
    source = CHAPTER.read_text()
    directives, roles = myst_names(source)
    run, cells = page_in_lab["run"], page_in_lab["cells"]
    live_cells, moved = page_in_lab["live_cells"], page_in_lab["moved"]
    problems, seconds = page_in_lab["problems"], page_in_lab["seconds"]

    code = [c for c in cells if c["type"] == "code"]
    markdown = [c for c in cells if c["type"] == "markdown"]
    assert code and markdown, f"the notebook did not load its cells: {cells}"
    verdict = code[-1]["text"]
    assert all(part in verdict for part in CHECK_VERDICT), (
        f"the check cell did not show its verdict: {verdict!r}"
    )
    errors = [f"cell {c['i']}: {e}" for c in code for e in c["errors"]]
    assert not errors, "cells raised in JupyterLab:\n" + "\n".join(errors)
    assert run.get("ok") is True, f"run-all did not complete: {run}"
    not_run = [c["i"] for c in code if c["count"] is None]
    assert not not_run, f"cells that never ran: {not_run}"
    for c in code:
        if c["widgets"]:
            assert (
                c["widgetViews"] > 0 and "Error displaying widget" not in c["text"]
            ), f"cell {c['i']}'s widgets did not render in JupyterLab"

    raw = []
    for c in markdown:
        for literal in ["```{", ":::{"] + [
            f"{{{n}}}" for n in sorted(directives | roles)
        ]:
            if literal in c["text"]:
                raw.append(f"{literal!r} in cell {c['i']}: {c['text'][:120]!r}")
    assert not raw, "raw MyST shows in the rendered markdown:\n" + "\n".join(raw)
    not_myst = [c["source"] for c in markdown if not (c["rendered"] and c["myst"])]
    assert not not_myst, f"markdown cells not rendered by jupyterlab-myst: {not_myst}"
    if "exercise" in directives:
        expected = len(re.findall(r"^\s*(?:`{3,}|:{3,})\{exercise\}", source, re.M))
        assert sum(c["exercises"] for c in markdown) >= expected, (
            "exercises did not render as exercise boxes"
        )
    if "$" in source or "math" in directives:
        assert sum(c["math"] for c in markdown) > 0, (
            "no math was typeset in the markdown cells"
        )

    assert "show_live(" not in source or live_cells, "no live cell found in JupyterLab"
    for i, c in enumerate(live_cells):
        assert c["charts"] == 1 and c["images"] == 0, (
            f"live cell {i} shows {c['charts']} Vega-Lite charts and "
            f"{c['images']} images, not one chart"
        )
        assert c["below"], f"live cell {i}'s chart is not under its controls"
    assert not problems, "JupyterLab misbehaved in the browser:\n" + "\n".join(problems)
    if moved:
        print(f"moved a live figure's dropdown to {moved}: the chart redrew")
    print(f"opened, ran and checked {CHAPTER.name} in JupyterLab in {seconds:.1f} s")


# The prose against the HTML book ------------------------------------------


def test_exercises_show_their_ids_and_check_refuses_in_a_few_lines(page_in_lab):
    """The exercise boxes show the id check() takes (not a number of
    jupyterlab-myst's own), and check() with no answers prints what it takes
    in a few lines, not an error or a traceback through the package."""
    ids = re.findall(r"^:label: (plan-\d+)$", CHAPTER.read_text(), re.M)
    titles, shown = page_in_lab["titles"], page_in_lab["refused"]
    from mlbook.exercises import EXERCISES

    # as the HTML book titles them (tests/test_exercises_html.py)
    expected = [f"Exercise ({EXERCISES[i].stars} {i})" for i in ids]
    assert [t for t in titles if t.startswith("Exercise")] == expected, titles
    assert len(expected) >= 4
    assert shown.startswith("plan-1 takes:") and 'check("plan-1", ' in shown, shown
    assert "Error" not in shown and "_check.py" not in shown, shown
    assert "<check" not in shown, f"check()'s result shows as its repr: {shown}"


# What the notebook in front shows
SHOWN_TEXT = "() => window.jupyterapp.shell.currentWidget.node.innerText"


def test_solutions_stay_folded_until_opened(page_in_lab):
    """Each solution (its prose, its code cell and the code's output) is
    hidden in JupyterLab until the reader opens it, as in the HTML book."""
    page = page_in_lab["page"]
    front(page, page_in_lab["path"])
    path, n_cells = page_in_lab["before"]["opened"]
    assert path.endswith(".md") and n_cells > 10, "the .md did not open as a notebook"
    errors = [e for c in page_in_lab["after"]["cells"] for e in c.get("errors", [])]
    assert not errors, f"{PAGE.name} raised in JupyterLab: {errors}"
    ids = re.findall(r"^```\{solution-start\} (\S+)", PAGE.read_text(), re.M)
    assert len(ids) >= 3, ids
    cells = page.evaluate(SOLUTIONS)
    assert {c["id"] for c in cells} == set(ids), cells
    body = page.evaluate(SHOWN_TEXT)
    for sid in ids:
        rest = [c for c in cells if c["id"] == sid and not c["first"]]
        code = [c for c in rest if c["type"] == "code"]
        assert code, f"{sid}: no code cell found in its solution"
        # (a glue cell of the solution's shows nothing; the others print)
        assert any(c["output"].strip() for c in code), f"{sid}: its code never ran"
        shown = [c["i"] for c in rest if c["shown"]]
        assert not shown, (
            f"{sid}: cells {shown} of the solution show while it is closed"
        )
        for c in code:
            if not c["output"].strip():
                continue
            line = c["output"].strip().splitlines()[0]
            assert line not in body, f"{sid}: its output {line!r} shows while closed"

    first = ids[0]
    toggle(page, first, until="c => c.shown")
    body = page.evaluate(SHOWN_TEXT)
    opened = [c for c in page.evaluate(SOLUTIONS) if c["id"] == first]
    for c in opened:
        if c["type"] == "code" and c["output"].strip():
            assert c["output"].strip().splitlines()[0] in body
    others = [
        c["i"]
        for c in page.evaluate(SOLUTIONS)
        if c["id"] != first and not c["first"] and c["shown"]
    ]
    assert not others, f"opening {first} showed other solutions' cells {others}"
    toggle(page, first, until="c => c.first || !c.shown")  # closed: its title shows


def test_glued_names_say_run_the_notebook(page_in_lab):
    """Before Run All the prose shows glued values by name, and a line above
    the notebook says so; once the page has run, the numbers show and the
    line goes."""
    before, after = page_in_lab["before"]["note"], page_in_lab["after"]["note"]
    assert before["unresolved"] > 0, before
    assert "until the notebook runs" in before["note"], before
    assert after["unresolved"] == 0 and after["note"] == "", after


def test_an_opened_run_and_autosaved_page_is_unchanged(page_in_lab):
    """JupyterLab's autosave after Run All leaves the page's every byte."""
    saves, after_run = page_in_lab["saves"], page_in_lab["saves_after_run"]
    assert after_run, f"JupyterLab did not autosave within {AUTOSAVE_WAIT_S} s"
    assert all(s == 200 for s in after_run), saves
    assert page_in_lab["saved"] == PAGE.read_bytes(), (
        f"{PAGE.name} changed when JupyterLab saved it"
    )
    assert not page_in_lab["problems"], page_in_lab["problems"]


# One chapter carries every kind the prose check reads: 93 glued values, 7
# citation keys, references to other pages and numbered equations (the MFU
# chapter, run as well before, took 33 s more of the same checks)
PROSE_CHAPTERS = [ROOT / "notebooks" / "cadence.md"]
PROSE_DONE_S = 60  # the extension's answers are drawn within a second or two here
GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::([^`]*))?`")
# a role's body left as text: a name and a format spec, "mc_waste:.2%"
# (no space after the colon: "Daly: x = C/2T" is prose, and the book's
# specs never take the space sign)
FORMAT_SPEC = re.compile(
    r"[A-Za-z_]\w*:[<>=^+-]?[,_]?\.?\d*[.,]?\d*[%bcdeEfFgGnosxX](?!\w)"
)
# words before a glued number in the source, to find the number in both texts
ANCHOR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z ,-]{14,})$")

# The prose's state, read after run-all: the extension's own marker, its texts
# as the reader sees them, and the inline code left in them
PROSE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === "markdown");
  return {
    state: panel.content.node.dataset.mlbookProse || "",
    texts: panel.content.node.dataset.mlbookProseTexts || "",
    prose: cells.map(c => (c.node.querySelector(".myst") || c.node).textContent),
    code: cells.flatMap(c => [...c.node.querySelectorAll(".myst code")]
      .filter(e => !e.closest("pre")).map(e => e.textContent)),
    equations: cells.flatMap(c => [...c.node.querySelectorAll(
      '.myst a[title="Link to this Equation"]')]
      .map(a => [a.getAttribute("href").replace(/^#/, ""), a.textContent])),
  };
}"""


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def html_text(html: str) -> str:
    """A built page's text as a reader reads it (scripts and styles out)."""
    html = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", html)
    return flat(unescape(re.sub(r"<[^>]+>", "", html)))


def next_token(text: str, anchor: str) -> str | None:
    """The word after ``anchor`` where it occurs once in ``text``."""
    if text.count(anchor) != 1:
        return None
    m = re.match(r"\s*(\S+)", text[text.index(anchor) + len(anchor) :])
    return m.group(1).rstrip(".,;:)") if m else None


@pytest.fixture(scope="module", params=[c.stem for c in PROSE_CHAPTERS])
def prose_run(request, lab_session, book):
    """The chapter opened in the session's JupyterLab and run all (set-up:
    cadence takes about 30 s at test sizes here), with what the prose shows
    once the extension is done, beside the test build's HTML of the same
    chapter."""
    stem = request.param
    html = BOOK_DEST / "_build" / "html" / "notebooks" / f"{stem}.html"
    if not html.exists():
        pytest.skip(f"{stem} is not in the test build ({html})")
    page, w = lab_session["page"], lab_session["watch"]
    path, lab_values = lab_session["paths"][stem], lab_session["lab_values"]
    earlier = set(w.problems())  # what the session's earlier notebooks did
    front(page, path)
    page.evaluate(RUN_ALL)
    page.wait_for_function(SETTLED, timeout=RUN_ALL_S * 1000, polling=250)
    cells = page.evaluate(CELLS)
    # done, and still done a second later: the last answer is drawn (no
    # marker at all: the extension is missing, and the test says what shows)
    deadline = time.monotonic() + PROSE_DONE_S
    shown = page.evaluate(PROSE)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        first, shown = shown, page.evaluate(PROSE)
        if shown["state"] == "done" and shown == first:
            break
    problems = [p for p in w.problems() if p not in earlier]
    values_path = lab_values / f"{stem}.json"
    return {
        "stem": stem,
        "source": (ROOT / "notebooks" / f"{stem}.md").read_text(),
        "cells": cells,
        "shown": shown,
        "prose": flat("\n".join(shown["prose"])),
        "problems": problems,
        "html": html.read_text(),
        "lab_values": (
            json.loads(values_path.read_text()) if values_path.exists() else {}
        ),
        "build_values": page_values(stem),
    }


def test_prose_reads_as_the_html_book(prose_run):
    """After run-all, JupyterLab's prose shows numbers, citations and
    references to other pages, never a glue name, a format spec or a
    citation key, and the numbers read as in the HTML book."""
    run, prose = prose_run, prose_run["prose"]
    stem, source = run["stem"], run["source"]
    code = [c for c in run["cells"] if c["type"] == "code"]
    errors = [f"cell {c['i']}: {e}" for c in code for e in c["errors"]]
    assert not errors, f"{stem} raised in JupyterLab:\n" + "\n".join(errors)

    roles = set(GLUE_ROLE.findall(source))
    assert roles, f"{stem} glues nothing into its prose"
    names = {name for name, _ in roles}
    # a name that is also a word ("mfu") may be prose; one in code type is not
    named = [n for n in names if "_" in n and re.search(rf"\b{re.escape(n)}\b", prose)]
    left = sorted(named) + sorted(names & set(run["shown"]["code"]))
    assert not left, (
        f"{stem}: glue names show in JupyterLab's prose: {left} (the extension's "
        f"state: {run['shown']['state'] or 'not loaded'})"
    )
    specs = FORMAT_SPEC.findall(prose)
    assert not specs, f"{stem}: format specs show in JupyterLab's prose: {specs}"

    keys = {
        k.strip()
        for body in re.findall(r"\{cite\}`([^`]+)`", source)
        for k in body.split(",")
    }
    shown_keys = sorted(k for k in keys if k in prose)
    assert not shown_keys, f"{stem}: citation keys show in the prose: {shown_keys}"
    html_cites = {
        flat(unescape(re.sub(r"<[^>]+>", "", m)))
        for m in re.findall(r'<span id="id\d+">(\[.*?\])</span>', run["html"])
    }
    assert len(html_cites) >= len(keys) // 2, f"{stem}: found no citations in the HTML"
    missing = sorted(c for c in html_cites if c not in prose)
    assert not missing, f"{stem}: the HTML's citations missing in JupyterLab: {missing}"

    own = set(re.findall(r"^\(([^()\s]+)\)=\s*$", source, re.M))
    own |= set(re.findall(r"^:label:\s*(\S+)", source, re.M))
    for label in set(re.findall(r"\{ref\}`([^`<>]+)`", source)) - own:
        title = re.search(
            rf'href="[^"]*#{re.escape(label)}"><span class="std std-ref">(.*?)</span>',
            run["html"],
        )
        assert title, f"{stem}: the HTML has no link to {label}"
        assert unescape(title.group(1)) in prose, (
            f"{stem}: the reference to {label} does not read "
            f"{unescape(title.group(1))!r} in JupyterLab"
        )
        assert label not in prose, f"{stem}: the label {label} shows in the prose"

    # Numbers: each glued value this run computed as the test build did,
    # found after the same words in both texts, must read the same
    html, compared = html_text(run["html"]), []
    lab, built = run["lab_values"], run["build_values"]
    for m in GLUE_ROLE.finditer(source):
        name = m.group(1)
        if name not in lab or lab[name] != built.get(name):
            continue
        anchor = ANCHOR.search(flat(source[max(0, m.start() - 60) : m.start()]))
        if not anchor:
            continue
        words = anchor.group(1).split(" ", 1)[-1].strip()  # no cut-off word
        in_lab, in_html = next_token(prose, words), next_token(html, words)
        if in_lab and in_html:
            compared.append((name, words, in_lab, in_html))
    assert len(compared) >= 3, (
        f"{stem}: too few glued numbers to compare with the HTML: {compared}"
    )
    differ = [c for c in compared if c[2] != c[3]]
    assert not differ, (
        f"{stem}: numbers that read differently in JupyterLab and the HTML "
        "(name, words before it, JupyterLab, HTML):\n" + "\n".join(map(str, differ))
    )
    assert not run["problems"], f"{stem} in JupyterLab:\n" + "\n".join(run["problems"])
    print(
        f"{stem}: {len(roles)} glued values, {len(keys)} citation keys; "
        f"{len(compared)} numbers read as in the HTML, e.g. {compared[:3]}"
    )


# An equation's number in the HTML book, with its label
HTML_EQUATION = re.compile(
    r'<span class="eqno">(\([^)]*\))<a class="headerlink" href="#equation-([^"]+)"'
)


def test_equations_are_numbered_as_in_the_html_book(prose_run):
    """Each labelled equation shows the number the HTML book gives it
    ("(5.1)" in chapter 5), not jupyterlab-myst's own count."""
    run = prose_run
    html = {label: number for number, label in HTML_EQUATION.findall(run["html"])}
    assert html, f"{run['stem']}: no numbered equation in the HTML"
    lab = dict(run["shown"]["equations"])
    assert lab == html, (
        f"{run['stem']}: equation numbers in JupyterLab {lab}, in the HTML {html}"
    )
