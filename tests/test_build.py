"""tools/build.py: glued values on disk, the execution cache and parallel jobs.

The builds here run on a tiny synthetic book in a temporary folder (its own
`mlbook` package, three pages of a few lines each), so they test the build
and not the chapters, and take seconds: each execution starts a kernel.
"""

import inspect
import json
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from bookbuild import caching, htmlbook, machine, pages, paths, run, values

HEAD = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
{extra}---

# Page {name}

{prose}

```{{code-cell}} ipython3
:tags: [parameters]
SMALL = False
```

```{{code-cell}} ipython3
{code}
```
"""

# Each page of the module's book glues the wall-clock span of its cell and
# the CPUs it ran on, read inside the kernel (the runs_alone test's evidence).
SPAN = """\
import os
import time
from myst_nb import glue
start = time.time()
{code}
glue("{n}_start", start, display=False)
glue("{n}_end", time.time(), display=False)
glue("{n}_on", ",".join(map(str, sorted(os.sched_getaffinity(0)))), display=False)"""
SPAN_KEYS = ("start", "end", "on")

PAGES = {
    # a reaches mlbook/common/units.py only through a relative import in
    # mlbook/alpha/core.py
    "a": (
        "",
        "Page a's prose.",
        SPAN.format(
            n="a",
            code="""\
from mlbook.alpha import core
glue("a_x", core.f(), display=False)
glue("a_label", "fast", display=False)
glue("a_flag", True, display=False)""",
        ),
    ),
    "b": (
        "",
        "Page b's prose.",
        SPAN.format(
            n="b",
            code="""\
from mlbook.beta.calc import g
glue("b_n", g(), display=False)
glue("b_cpus", len(os.sched_getaffinity(0)), display=False)
glue("b_threads", os.environ.get("OMP_NUM_THREADS", "unset"), display=False)""",
        ),
    ),
    # runs alone, and long enough that a page started beside it would start
    # before it ends; imports nothing of the package, so no package edit
    # below executes it again
    "q": (
        "mlbook:\n  runs_alone: true\n",
        "Page q.",
        SPAN.format(n="q", code="time.sleep(1.5)"),
    ),
}

PACKAGE = {
    "mlbook/__init__.py": '"""A stand-in package."""\n',
    "mlbook/common/__init__.py": "",
    "mlbook/common/units.py": "GIB = 2**30\n",
    "mlbook/alpha/__init__.py": "",
    "mlbook/alpha/core.py": (
        "from ..common.units import GIB\n\n\ndef f():\n    return 0.25 + 0 * GIB\n"
    ),
    "mlbook/beta/__init__.py": "",
    "mlbook/beta/calc.py": "def g():\n    return 7\n",
}


def page_text(name, extra, prose, code):
    return HEAD.format(name=name, extra=extra, prose=prose, code=code)


def write_tree(root: Path, files: dict) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def make_project(root: Path) -> None:
    write_tree(root, PACKAGE)
    write_tree(
        root, {f"notebooks/{n}.md": page_text(n, *spec) for n, spec in PAGES.items()}
    )
    write_tree(
        root,
        {
            "_config.yml": "title: t\n",
            "_toc.yml": "format: jb-book\nroot: notebooks/a\n",
            "requirements.txt": "nothing\n",
            "book/notation.md": "# Notation\n",
        },
    )
    (root / "_vendor").mkdir()


JOBS = (
    2 if len(machine.physical_cores()) >= 2 else 1
)  # the parallel path, where the machine has two cores


class Project:
    def __init__(self, root: Path):
        self.root = root
        self.dest = root / "_build" / "test"

    def build(self, **kw):
        # one job, in this process: the rebuilds check keys and the cache,
        # which the parent decides before any job runs; the parallel path is
        # the first build's (and the runs_alone test's), and its job processes
        # took about 1.5 s of each rebuild to start here
        kw = {"small": True, "html": False, "cache": True, "jobs": 1} | kw
        return run.build(self.dest, **kw)

    def executed(self, report):
        return sorted(n for n, r in report["chapters"].items() if not r["cached"])

    def edit(self, rel, old, new):
        path = self.root / rel
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The synthetic book, built once without the cache (as `make test`
    builds) on JOBS jobs, which fills the cache. Tests that edit it settle it
    first. The one parallel build here: both the runs_alone test and the
    tests of values and jobs read it (a parallel build's job processes and
    kernels took about 4 s CPU here)."""
    root = tmp_path_factory.mktemp("book")
    make_project(root)
    mp = pytest.MonkeyPatch()
    mp.setattr(paths, "ROOT", root)
    mp.setenv("PYTHONPATH", str(root))  # the kernels import the stand-in mlbook
    p = Project(root)
    p.first = run.build(p.dest, small=True, html=False, jobs=JOBS)
    # as the first build wrote them (later builds execute a and b again)
    p.first_values = {n: values.read_values(p.dest, n) for n in PAGES}
    yield p
    mp.undo()


# --- glued values ----------------------------------------------------------------


def test_first_build_executes_everything_and_writes_values(project):
    r = project.first
    assert project.executed(r) == ["a", "b", "q"] and not any(
        c["error"] for c in r["chapters"].values()
    )
    a = dict(project.first_values["a"])
    span = {k: a.pop(f"a_{k}") for k in SPAN_KEYS}
    assert a == {"a_x": 0.25, "a_label": "fast", "a_flag": True}
    assert type(a["a_x"]) is float
    assert type(span["start"]) is float and type(span["on"]) is str
    b = json.loads((project.dest / "values" / "b.json").read_text())
    assert b["b_n"] == 7 and type(b["b_n"]) is int


def test_parallel_jobs_get_their_own_cores(project):
    r = project.first
    assert r["jobs"] == JOBS and len(r["job_resources"]) == JOBS
    if JOBS == 1:
        pytest.skip("one core: no parallel jobs here")
    cpus = [set(j["cpus"]) for j in r["job_resources"]]
    assert not cpus[0] & cpus[1]
    b = project.first_values["b"]
    assert (
        b["b_cpus"] == len(cpus[0])
        and b["b_threads"] == r["job_resources"][0]["threads"]
    )


def _notebook_with_glue(path: Path, text_plain: str, name="x"):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("glue(...)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"application/papermill.record/text/plain": text_plain},
            metadata={
                "scrapbook": {
                    "name": name,
                    "mime_prefix": "application/papermill.record/",
                }
            },
        )
    ]
    nb.cells = [cell]
    nbformat.write(nb, path)


@pytest.mark.parametrize(
    "text, value",
    [
        ("3", 3),
        ("0.125", 0.125),
        ("-1e-05", -1e-05),
        ("'1,024'", "1,024"),
        ("'A100 (bf16)'", "A100 (bf16)"),
        ("False", False),
    ],
)
def test_glued_values_come_back_as_plain_values(tmp_path, text, value):
    _notebook_with_glue(tmp_path / "p.ipynb", text)
    got = values.glued_values(tmp_path / "p.ipynb")["x"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "text",
    [
        "np.float64(0.3)",
        "{'a': 1}",
        "(1, 24)",
        "None",
        "nan",
        "1j",
        "<Figure size 640x480 with 1 Axes>",
    ],
)
def test_glued_values_other_than_numbers_and_strings_are_refused(tmp_path, text):
    _notebook_with_glue(tmp_path / "mfu.ipynb", text, name="peak_mfu")
    with pytest.raises(values.GlueError, match=r"mfu: glued value 'peak_mfu'"):
        values.glued_values(tmp_path / "mfu.ipynb")


def test_a_bad_glued_value_fails_its_page_naming_the_glue(project):
    project.build()
    write_tree(
        project.root,
        {
            "notebooks/d.md": page_text(
                "d",
                "",
                "Bad glue.",
                """\
import numpy as np
from myst_nb import glue
glue("d_ratio", np.float64(0.3), display=False)""",
            )
        },
    )
    try:
        r = project.build(only=["d"])
        error = r["chapters"]["d"]["error"]
        assert (
            error and "d: glued value 'd_ratio'" in error and "np.float64(0.3)" in error
        )
        assert not (project.dest / "values" / "d.json").exists()
        assert (
            caching.Cache(project.dest / "cache").entry("d") is None
        )  # a failure is not cached
        timings = json.loads((project.dest / "timings.json").read_text())
        assert timings["chapters"]["d"]["error"] == error
    finally:
        (project.root / "notebooks" / "d.md").unlink()


# --- the cache -------------------------------------------------------------------


def test_unchanged_build_executes_nothing(project):
    project.build()
    started = time.perf_counter()
    r = project.build()
    assert time.perf_counter() - started < 10  # no kernel started
    assert project.executed(r) == []
    timings = json.loads((project.dest / "timings.json").read_text())
    assert {n: c["cached"] for n, c in timings["chapters"].items()} == {
        "a": True,
        "b": True,
        "q": True,
    }
    assert all(
        c["this_run_s"] == 0 and c["seconds"] > 0 for c in timings["chapters"].values()
    )
    assert values.read_values(project.dest, "a")["a_x"] == 0.25  # from the cache
    assert (project.dest / "src" / "notebooks" / "a.ipynb").exists()


def test_prose_edit_reexecutes_that_page_alone(project):
    # a's prose only: b's, edited next, held the same rule again for one
    # kernel more (it once showed that pages reading a's values ran again;
    # pages read no other page's values now)
    project.build()
    project.edit("notebooks/a.md", "Page a's prose.", "Page a's prose, edited.")
    r = project.build()
    assert project.executed(r) == ["a"]
    assert "edited" in (project.dest / "src" / "notebooks" / "a.ipynb").read_text()


def test_package_edit_reexecutes_the_pages_whose_key_includes_it(project):
    project.build()
    project.edit("mlbook/beta/calc.py", "return 7", "return 8")
    r = project.build()
    assert project.executed(r) == ["b"]
    assert values.read_values(project.dest, "b")["b_n"] == 8
    # reached from a only through mlbook/alpha/core.py's
    # `from ..common.units import GIB`
    project.edit("mlbook/common/units.py", "GIB = 2**30", "GIB = 1 << 30")
    assert project.executed(project.build()) == ["a"]


def test_failed_execution_is_not_cached(project):
    project.build()
    write_tree(
        project.root,
        {"notebooks/c.md": page_text("c", "", "Fails.", 'raise RuntimeError("boom")')},
    )
    try:
        first = project.build(only=["c"])
        assert "RuntimeError: boom" in first["chapters"]["c"]["error"]
        assert caching.Cache(project.dest / "cache").entry("c") is None
        again = project.build(only=["c"])
        assert (
            again["chapters"]["c"]["cached"] is False
            and again["chapters"]["c"]["error"]
        )
    finally:
        (project.root / "notebooks" / "c.md").unlink()


def test_default_build_executes_every_page(project):
    """The test build (`make test` calls build() without cache=) executes
    every page; the command line reads the cache unless --no-cache."""
    assert inspect.signature(run.build).parameters["cache"].default is False
    project.build()
    # one job: whether the cache is read is decided before any job runs
    r = run.build(project.dest, small=True, html=False, jobs=1, only=["b"])
    assert project.executed(r) == ["b"] and r["cache"] is False


# --- keys: which package files a page depends on (no kernels) --------------------


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    write_tree(
        tmp_path,
        PACKAGE
        | {
            "mlbook/gamma/__init__.py": "from .tools import helper\n",
            "mlbook/gamma/tools.py": (
                "from mlbook.beta import calc\n\ndef helper():\n    return calc.g()\n"
            ),
            "mlbook/delta/runner.py": (
                'import subprocess\nMODULE = "mlbook.delta.script"\n'
            ),
            "mlbook/delta/script.py": "from mlbook.alpha.core import f\n",
            "mlbook/delta/launcher.py": 'SCRIPT = "worker.py"\n',
            "mlbook/delta/worker.py": "",
            "mlbook/epsilon.py": (
                "import importlib\nm = importlib.import_module('mlbook.' + 'beta')\n"
            ),
            "mlbook/zeta.py": (
                '"""Documents mlbook.beta.calc and worker.py; imports neither."""\n'
            ),
            "mlbook/table.json": "{}\n",
        },
    )
    return tmp_path


def deps_of(root: Path, code: str):
    page = root / "notebooks" / "p.md"
    write_tree(root, {"notebooks/p.md": page_text("p", "", "prose", code)})
    files, why = caching.package_dependencies(page)
    return sorted(f.relative_to(root).as_posix() for f in files), why


def test_keys_follow_imports_through_the_package(tree):
    files, why = deps_of(tree, "from mlbook.alpha import core")
    assert why is None
    assert files == [
        "mlbook/__init__.py",
        "mlbook/alpha/__init__.py",
        "mlbook/alpha/core.py",
        "mlbook/common/__init__.py",
        "mlbook/common/units.py",
        "mlbook/table.json",
    ]
    files, _ = deps_of(
        tree, "import mlbook.gamma as gm\n%time gm.helper()"
    )  # via the package's __init__
    assert "mlbook/gamma/tools.py" in files and "mlbook/beta/calc.py" in files
    assert "mlbook/alpha/core.py" not in files


def test_keys_follow_module_names_and_file_names_in_strings(tree):
    files, why = deps_of(
        tree, "from mlbook.delta import runner"
    )  # torchrun("mlbook.delta.script")
    assert why is None and {"mlbook/delta/script.py", "mlbook/alpha/core.py"} <= set(
        files
    )
    files, _ = deps_of(
        tree, "from mlbook.delta.launcher import SCRIPT"
    )  # Path(...) / "worker.py"
    assert "mlbook/delta/worker.py" in files
    files, _ = deps_of(
        tree, "from mlbook import zeta"
    )  # a docstring naming modules runs nothing
    assert "mlbook/beta/calc.py" not in files and "mlbook/delta/worker.py" not in files


@pytest.mark.parametrize(
    "code",
    [
        "from mlbook.nowhere import x",
        "from mlbook import epsilon",
        "import mlbook.beta.calc\nx = (  # unparsable",
    ],
)
def test_keys_take_the_whole_package_when_imports_cannot_be_resolved(tree, code):
    files, why = deps_of(tree, code)
    assert why
    assert len(files) == len(caching.package_files())


def test_jobs_get_disjoint_whole_cores(monkeypatch):
    monkeypatch.setattr(
        machine, "physical_cores", lambda: [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12]]
    )
    monkeypatch.setattr(machine, "gpu_models", lambda: [])
    plan = machine.plan_jobs(2)
    assert [j["cpus"] for j in plan] == [[0, 1, 8, 9], [2, 3, 10, 11]]
    assert all(j["env"]["OMP_NUM_THREADS"] == "2" for j in plan)
    assert machine.plan_jobs(1) == [{"cpus": None, "env": {}}]
    with pytest.raises(SystemExit, match="physical cores"):
        machine.plan_jobs(6)


# --- the HTML step (jupyter-book replaced by a stand-in) -------------------------


def test_html_is_rebuilt_unless_the_sources_match_the_last_clean_build(
    tmp_path, monkeypatch
):
    src, dest = tmp_path / "src", tmp_path / "dest"
    write_tree(src, {"intro.md": "# Intro\n"})
    runs, warn = [], []

    def fake_build_html(src_, dest_):
        runs.append(1)
        (dest_ / "_build" / "html").mkdir(parents=True, exist_ok=True)
        (dest_ / "_build" / "html" / "index.html").write_text("<html>")
        return subprocess.CompletedProcess([], 0, "".join(warn), "")

    monkeypatch.setattr(htmlbook, "build_html", fake_build_html)
    dest.mkdir()
    assert htmlbook.build_book(src, dest, reuse=True)["rebuilt"] and len(runs) == 1
    assert not htmlbook.build_book(src, dest, reuse=True)["rebuilt"] and len(runs) == 1
    assert (
        htmlbook.build_book(src, dest, reuse=False)["rebuilt"] and len(runs) == 2
    )  # --no-cache, make test
    (src / "intro.md").write_text("# Intro, edited\n")
    warn.append("intro.md:1: WARNING: something\n")
    assert htmlbook.build_book(src, dest, reuse=True)["warnings"] and len(runs) == 3
    assert (
        htmlbook.build_book(src, dest, reuse=True)["rebuilt"] and len(runs) == 4
    )  # warnings are never reused
    warn.clear()
    htmlbook.build_book(src, dest, reuse=True)
    (dest / "_build" / "html" / "index.html").unlink()
    assert htmlbook.build_book(src, dest, reuse=True)["rebuilt"]  # output gone: rebuilt


def test_pages_start_alone_first_then_longest_first(tmp_path):
    alone = "mlbook:\n  runs_alone: true\n"
    write_tree(
        tmp_path,
        {
            f"notebooks/{n}.md": page_text(n, alone if n == "c" else "", "P.", "1")
            for n in "abcd"
        },
    )
    order = [tmp_path / "notebooks" / f"{n}.md" for n in "abcd"]
    times = {"a": 1.0, "b": 30.0, "c": 5.0, "d": 2.0}
    assert [p.stem for p in pages.start_order(order, times)] == list("cbda")
    # not every page measured here: the book's typical times, which name
    # none of these, so they keep their order after the lone one
    assert [p.stem for p in pages.start_order(order, {"a": 1.0})] == list("cabd")


def test_every_page_has_a_typical_time(monkeypatch):
    # the book's pages (a module fixture here may point ROOT at a made-up one)
    monkeypatch.setattr(paths, "ROOT", Path(__file__).resolve().parent.parent)
    typical = json.loads(pages.TYPICAL_SECONDS.read_text())
    missing = {p.stem for p in pages.chapters()} - set(typical)
    assert not missing, f"page_seconds.json names no time for {sorted(missing)}"


def test_a_page_that_runs_alone_shares_the_machine_with_no_other(project):
    """The first build's three pages on two jobs, q marked runs_alone (and
    last in the book's order): its kernel's time span (the wall clock, read
    inside each page) overlaps no other page's, while the other two may
    overlap each other. It starts first, and each page runs on the CPUs of
    its job."""
    if JOBS == 1:
        pytest.skip("one core: pages run one at a time anyway")
    assert pages.runs_alone(project.root / "notebooks" / "q.md")
    assert not pages.runs_alone(project.root / "notebooks" / "a.md")
    r = project.first
    assert not any(c["error"] for c in r["chapters"].values()), r["chapters"]
    span, cpus = {}, {}
    for n in PAGES:
        v = project.first_values[n]
        span[n] = (v[f"{n}_start"], v[f"{n}_end"])
        cpus[n] = {int(c) for c in v[f"{n}_on"].split(",")}
    q0, q1 = span["q"]
    for n in ("a", "b"):
        a, b = span[n]
        assert b <= q0 or a >= q1, f"{n} ran {a:.2f}-{b:.2f}, q {q0:.2f}-{q1:.2f}"
        assert a >= q1, f"{n} started before the page that runs alone"
    jobs = [set(j["cpus"]) for j in r["job_resources"]]
    assert all(cpus[n] in jobs for n in PAGES), (cpus, jobs)
