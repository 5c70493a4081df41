"""A page of the book read in JupyterLab, as `make lab` serves it.

The test starts its own JupyterLab server (a free port on 127.0.0.1, a token,
settings, runtime and config in a temporary folder, no browser, no news, no
update check, no extension-manager queries, `--allow-root` only when root),
opens the "Plan a run" page in headless Chromium with every request off that
server blocked, runs all cells and waits for the kernel to go idle, then
checks:

- every code cell ran and none has an error output; widget outputs render;
- every markdown cell is rendered by jupyterlab-myst, with no raw MyST left in
  it: no fence (```{name} or :::{name}) and no directive or role name that the
  chapter's source uses ({exercise}, {solution-start}, {math}, {glue:text}...);
  the exercises render as exercise boxes and the math as typeset math;
- a reader's `check` cell added after the chapter runs and prints its
  verdict (mlbook.exercises);
- nothing failed in the browser: no blocked or failed request, no JavaScript
  console error, no uncaught page error (ALLOWED_CONSOLE names the one harmless
  message);
- each live figure (mlbook.plotting.live.show_live) shows one Vega-Lite chart,
  drawn by JupyterLab's own renderer, under its controls; moving one control
  (the first live figure's first dropdown) draws a different chart.

The page has what JupyterLab must render (live figures with dropdowns, a
form, exercises, math, MyST directives and roles) and runs in 3 s at test
sizes, where the MFU chapter, used before, took 14 s of the same checks;
what each chapter computes is the test build's to check.

The page is the MyST text notebook that JupyterLab opens through jupytext;
the test converts it with jupytext to .ipynb in the temporary folder (the
same cells jupytext gives JupyterLab) with SMALL = True in its parameters cell,
beside links to the repository's other folders so relative paths resolve as
in the repository.
"""

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jupytext
import pytest

from helpers.browser import Allowed, chromium_or_skip, watch
from mlbook.common_torch.launch import free_port

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "book" / "plan.md"  # 3 s at test sizes
SERVER_START_S = 60  # generous: JupyterLab starts in 2-5 s here, longer under load
RUN_ALL_S = 120  # the page takes about 3 s at test sizes

# Console errors and page errors from JupyterLab that are harmless, each with
# why. None: JupyterLab 4.6 with jupyterlab-myst 2.7 and jupytext logs no error
# while opening and running a chapter.
ALLOWED_CONSOLE: list[Allowed] = [
    Allowed(
        r"Cross reference target was not found: (page|chapter)-[a-z_-]+",
        "JupyterLab renders one notebook at a time, so jupyterlab-myst cannot "
        "resolve a {ref} to another page of the book (here the MFU chapter's link "
        "to the planning page); the HTML book resolves it, and its build fails on "
        "any unresolved reference (-W -n).",
    ),
]

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


def notebook_copy(chapter: Path, root: Path) -> Path:
    """The chapter as .ipynb under ``root`` at the same relative path, with
    SMALL = True, and the repository's other folders linked beside it."""
    rel = chapter.relative_to(ROOT)
    (root / rel.parent).mkdir(parents=True)
    for top in ("book", "mlbook", "notebooks"):
        if top != rel.parts[0]:
            (root / top).symlink_to(ROOT / top)
    for (
        entry
    ) in chapter.parent.iterdir():  # the chapter's neighbours, but not its own sources
        if entry.stem != chapter.stem:
            (root / rel.parent / entry.name).symlink_to(entry)
    nb = jupytext.read(chapter)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{rel} should have one parameters cell"
    params[0].source, n = re.subn(
        r"^SMALL\s*=.*$", "SMALL = True", params[0].source, flags=re.M
    )
    assert n == 1, f"{rel}'s parameters cell has no `SMALL = ...` line"
    out = root / rel.with_suffix(".ipynb")
    jupytext.write(nb, out)
    return out


def lab_command(root: Path, port: int, token: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        # nothing from the network: no news feed, no update check, no PyPI queries
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        # window.jupyterapp, so the test can run cells and read the notebook model
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving a temporary folder that holds
    the chapter; yields (base URL, token, notebook path under the root)."""
    # no server for nothing: skip (or, under CI, fail) before starting one
    chromium_or_skip()
    root, home = tmp_path / "root", tmp_path / "jupyter"
    notebook = notebook_copy(CHAPTER, root)
    # JupyterLab renders only the cells in view unless told otherwise;
    # the test reads every cell
    tracker = (
        home
        / "settings"
        / "@jupyterlab"
        / "notebook-extension"
        / "tracker.jupyterlab-settings"
    )
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
    )
    port, token = free_port(), secrets.token_hex(16)
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            lab_command(root, port, token),
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with {proc.returncode}:\n"
                    f"{log.read_text()[-3000:]}"
                )
            try:
                req = urllib.request.Request(
                    f"{base}/api/status", headers={"Authorization": f"token {token}"}
                )
                with urllib.request.urlopen(req, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not answer within {SERVER_START_S} s:\n"
                        f"{log.read_text()[-3000:]}"
                    )
                time.sleep(0.3)
        yield base, token, notebook.relative_to(root).as_posix()
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever of its session is left (a kernel), by group id
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


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


def test_chapter_runs_in_jupyterlab(lab, chromium_browser):
    base, token, path = lab
    source = CHAPTER.read_text()
    directives, roles = myst_names(source)
    started = time.monotonic()
    browser = chromium_browser
    # the run's one Chromium (conftest); a context of its own here
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
        page.evaluate(RUN_ALL)
        page.wait_for_function(SETTLED, timeout=RUN_ALL_S * 1000, polling=250)
        run = page.evaluate("() => window.__mlbookRun")
        cells = page.evaluate(CELLS)
        live_cells = page.evaluate(LIVE_CELLS)
        moved = None
        if live_cells:
            page.wait_for_function(LIVE_PIXELS, timeout=30_000, polling=250)
            before = page.evaluate(LIVE_PIXELS)
            moved = page.evaluate(MOVE_DROPDOWN)
            page.wait_for_function(
                "(old) => { const now = ("
                + LIVE_PIXELS
                + ")(); return now && now !== old; }",
                arg=before,
                timeout=60_000,
                polling=250,
            )
        page.evaluate(ADD_AND_RUN, CHECK_SOURCE)
        page.wait_for_function(SETTLED, timeout=SERVER_START_S * 1000, polling=250)
        cells = page.evaluate(CELLS)  # again: the check cell is the last one now
        problems = w.problems()
    finally:
        context.close()
    seconds = time.monotonic() - started

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


# Each exercise box's title as JupyterLab shows it
EXERCISE_TITLES = """() => [...document.querySelectorAll(
    ".jp-Notebook .myst-exercise, .jp-Notebook aside.exercise")]
  .map(e => (e.querySelector(".admonition-title, header, [class*=title]")
             || e).textContent.trim().split("\\n")[0])"""

REFUSAL = 'from mlbook.exercises import check\ncheck("plan-1")'


def test_exercises_show_their_ids_and_check_refuses_in_a_few_lines(
    lab, chromium_browser
):
    """The exercise boxes show the id check() takes (not a number of
    jupyterlab-myst's own), and check() with no answers prints what it takes
    as a short message, not a traceback through the package."""
    base, token, path = lab
    ids = re.findall(r"^:label: (plan-\d+)$", CHAPTER.read_text(), re.M)
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(f"{base}/lab/tree/{path}?token={token}")
        page.wait_for_function(
            NOTEBOOK_READY, arg=path, timeout=SERVER_START_S * 1000, polling=250
        )
        page.wait_for_function(
            f"() => ({EXERCISE_TITLES})().length >= {2 * len(ids)}",
            timeout=30_000,
            polling=250,
        )
        titles = page.evaluate(EXERCISE_TITLES)
        page.evaluate(ADD_AND_RUN, REFUSAL)
        page.wait_for_function(SETTLED, timeout=SERVER_START_S * 1000, polling=250)
        shown = page.evaluate(CELLS)[-1]["text"]
    finally:
        context.close()
    from mlbook.exercises import EXERCISES

    # as the HTML book titles them (tests/test_exercises_html.py)
    expected = [f"Exercise ({EXERCISES[i].stars} {i})" for i in ids]
    assert [t for t in titles if t.startswith("Exercise")] == expected, titles
    assert len(expected) >= 4
    assert "TypeError: no answers given" in shown and 'check("plan-1", ' in shown
    assert "Traceback" not in shown and "_check.py" not in shown, shown
