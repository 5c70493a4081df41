"""The package's shape: torch-free modules stay torch-free, nothing imports
in a circle, and a plain (non-editable) install carries every subpackage.

Which modules may import torch or matplotlib is a naming rule, so a new
module is checked without being listed anywhere:

- torch: everything under ``mlbook/common_torch/``, and in a chapter package
  ``experiments*.py`` and ``*_script.py`` (what torchrun starts);
- matplotlib (and ipywidgets): everything under ``mlbook/plotting/``, and
  ``figures.py`` in a chapter package;
- every other module imports neither, so it loads instantly and can run
  inside a slider.

A chapter package's ``__init__`` names the chapter's torch-free calculators
(``from mlbook import cadence``; ``cadence.young_interval(...)``) and loads no
numpy either: the HTML book imports it in the browser. The exercise judge
(``mlbook.judge``) sits below the chapters and imports none; a chapter's
exercises (``mlbook/<chapter>/exercises.py``) import the judge, and only the
catalogue ``mlbook.exercises``, above the chapters, imports them.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mlbook"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# the package's modules and their imports, found once a run: nine tests ask
# for them, and parsing every module took about 0.5 s a test here (the
# modules are not edited while the tests run; callers read, never change,
# what these return)
@functools.cache
def all_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for p in sorted(PKG.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def may_use_torch(name: str) -> bool:
    parts = name.split(".")
    leaf = parts[-1]
    return (
        (len(parts) > 1 and parts[1] in ("common_torch", "plotting"))
        or leaf.startswith("experiments")
        or leaf.endswith("_script")
        or leaf == "figures"
    )


def torch_free_modules() -> list[str]:
    return [n for n in all_modules() if not may_use_torch(n)]


def test_the_rule_leaves_torch_free_modules_to_check():
    free = torch_free_modules()
    assert "mlbook.common.validate" in free and "mlbook.mfu.formulas" in free
    assert not any(n.startswith("mlbook.common_torch") for n in free)


def first_heavy_import(names: list[str], heavy: tuple) -> dict:
    """Import ``names`` one after another in one fresh interpreter: the first
    whose import left any of ``heavy`` in sys.modules, with those it left
    (empty where none did)."""
    code = (
        "import importlib, json, sys\n"
        "bad = {}\n"
        f"for n in {names!r}:\n"
        "    importlib.import_module(n)\n"
        f"    heavy = [m for m in {heavy!r} if m in sys.modules]\n"
        "    if heavy:\n"
        "        bad[n] = heavy\n"
        "        break\n"
        "print(json.dumps(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torch_free_modules_import_neither_torch_nor_matplotlib():
    """Each torch-free module is imported, one after another, in one fresh
    interpreter; after each import, torch and matplotlib must still be absent."""
    bad = first_heavy_import(
        torch_free_modules(), ("torch", "matplotlib", "ipywidgets")
    )
    assert bad == {}, f"a torch-free module pulled in a heavy import: {bad}"


def _resolve(
    importer: str, node: ast.ImportFrom | ast.Import, modules: set[str]
) -> set[str]:
    """The mlbook modules an import statement loads (submodules included)."""
    found = set()
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        if node.level:
            base = importer.split(".")
            pkg = (
                base
                if importer in modules
                and (PKG / "/".join(base[1:]) / "__init__.py").exists()
                else base[:-1]
            )
            pkg = pkg[: len(pkg) - (node.level - 1)]
            root = ".".join(pkg + ([node.module] if node.module else []))
        else:
            root = node.module or ""
        targets = [root] + [f"{root}.{a.name}" for a in node.names]
    for t in targets:
        if t in modules:
            found.add(t)
    return found


@functools.cache
def _import_graph() -> dict[str, frozenset[str]]:
    mods = all_modules()
    names = set(mods)
    graph = {}
    for name, path in mods.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _resolve(name, node, names)
        # a package's own __init__ is loaded on the way to any submodule:
        # not an edge worth a cycle
        graph[name] = frozenset(
            e for e in edges if e != name and not name.startswith(e + ".")
        )
    return graph


def import_graph() -> dict[str, set[str]]:
    """Each module's mlbook imports, lazy ones included (a fresh copy)."""
    return {n: set(edges) for n, edges in _import_graph().items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                cyc = visit(m)
                if cyc:
                    return cyc
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            cyc = visit(n)
            if cyc:
                return cyc
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    """Imports inside functions count too: two modules that import each other
    lazily are still one tangle."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# --- chapter packages and their exercises --------------------------------------------

# not chapters: shared packages, the exercise judge and catalogue, and the
# calibration of the whole machine
SHARED = ("common", "common_torch", "plotting", "judge", "exercises", "calibrate")
HEAVY = ("torch", "numpy", "matplotlib", "ipywidgets", "pandas", "scipy")


def chapter_packages() -> list[str]:
    return [
        n
        for n, p in all_modules().items()
        if p.name == "__init__.py"
        and n.count(".") == 1
        and n.split(".")[1] not in SHARED
    ]


def chapter_exercises() -> list[str]:
    return [
        f"{c}.exercises"
        for c in chapter_packages()
        if f"{c}.exercises" in all_modules()
    ]


def _in(package: str, name: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_every_chapter_has_its_exercises_and_the_catalogue_imports_them():
    chapters, exercises = chapter_packages(), chapter_exercises()
    assert "mlbook.mfu" in chapters and "mlbook.plan" in chapters
    assert [e.rsplit(".", 1)[0] for e in exercises] == chapters, (
        "a chapter without exercises.py"
    )
    missing = set(exercises) - import_graph()["mlbook.exercises"]
    assert not missing, (
        f"mlbook/exercises/__init__.py does not import {sorted(missing)}"
    )


def test_no_chapter_imports_the_catalogue():
    """No arrow runs back up: no module of a chapter (its exercises
    included) imports ``mlbook.exercises``, and a chapter's exercises import
    no other chapter's exercises."""
    graph, exercises = import_graph(), set(chapter_exercises())
    chapter_modules = [n for n in graph if any(_in(c, n) for c in chapter_packages())]
    assert "mlbook.mfu.exercises" in chapter_modules
    bad = {
        n: sorted(
            e
            for e in graph[n]
            if _in("mlbook.exercises", e) or (n in exercises and e in exercises)
        )
        for n in chapter_modules
    }
    assert not {n: e for n, e in bad.items() if e}, bad


def test_chapter_exercises_import_the_judge():
    graph = import_graph()
    for n in chapter_exercises():
        assert any(_in("mlbook.judge", e) for e in graph[n]), n


def test_the_judge_imports_no_chapter_and_not_the_catalogue():
    """``mlbook.judge`` sits below the chapters: it imports nothing from a
    chapter package or from ``mlbook.exercises``, lazily or not."""
    graph = import_graph()
    above = ["mlbook.exercises", *chapter_packages()]
    bad = {
        n: sorted(e for e in edges if any(_in(a, e) for a in above))
        for n, edges in graph.items()
        if _in("mlbook.judge", n)
    }
    assert "mlbook.judge._core" in bad
    assert not {n: e for n, e in bad.items() if e}, bad


def test_shared_packages_import_nothing_above_them():
    """``mlbook.common`` and ``mlbook.common_torch`` sit below every chapter:
    they import no chapter package, nor the judge, the catalogue or
    ``mlbook.calibrate``, lazily or not."""
    graph = import_graph()
    above = [
        p
        for p in all_modules()
        if p.count(".") == 1
        and all_modules()[p].name == "__init__.py"
        and p.split(".")[1] not in ("common", "common_torch", "plotting")
    ]
    assert "mlbook.capstone" in above and "mlbook.calibrate" in above
    shared = [
        n for n in graph if _in("mlbook.common", n) or _in("mlbook.common_torch", n)
    ]
    assert "mlbook.common_torch.reference_loop" in shared
    bad = {
        n: sorted(e for e in graph[n] if any(_in(a, e) for a in above)) for n in shared
    }
    assert not {n: e for n, e in bad.items() if e}, bad


def test_calibrate_imports_nothing_from_the_capstone():
    """``mlbook.calibrate`` times the reference loop from
    ``mlbook.common_torch.reference_loop`` and predicts its step with
    ``mlbook.common.stepmodel``; no module of it imports any module of
    ``mlbook.capstone``, lazily or not."""
    graph = import_graph()
    calibrate = {n: graph[n] for n in graph if _in("mlbook.calibrate", n)}
    assert (
        "mlbook.common_torch.reference_loop"
        in calibrate["mlbook.calibrate.experiments"]
    )
    assert "mlbook.common.stepmodel" in calibrate["mlbook.calibrate.formulas"]
    bad = {
        n: sorted(e for e in edges if _in("mlbook.capstone", e))
        for n, edges in calibrate.items()
    }
    assert not {n: e for n, e in bad.items() if e}, bad


def test_only_the_catalogue_imports_a_chapters_exercises():
    """Nothing in mlbook but ``mlbook.exercises`` imports a chapter's exercises
    module: a chapter's own modules importing it would tie the chapter to the
    registry of every chapter, in a circle."""
    exercises = set(chapter_exercises())
    bad = {
        n: sorted(edges & exercises)
        for n, edges in import_graph().items()
        if n != "mlbook.exercises" and edges & exercises
    }
    assert bad == {}, f"only mlbook.exercises may import a chapter's exercises: {bad}"


# Imports each module named in argv first, in a child forked for it from an
# interpreter that has loaded numpy and no mlbook module: each child starts
# as a fresh interpreter would, as far as mlbook goes, without paying for
# the interpreter's start and numpy's import (ten children took 1.4 s CPU
# here, against 3.1 s for ten interpreters). Prints {module: [catalogue
# loaded, own ids, the judge's ids, every id]} or {module: traceback}.
FIRST_IMPORT = """\
import importlib, json, os, sys, traceback
import numpy  # what the exercises import besides mlbook and the stdlib

assert not any(m == "mlbook" or m.startswith("mlbook.") for m in sys.modules)


def first(name):
    m = importlib.import_module(name)
    from mlbook.judge import EXERCISES as judged

    alone = "mlbook.exercises" in sys.modules
    own = sorted(r.id for r in m.EXERCISES)
    first = sorted(judged)
    from mlbook.exercises import EXERCISES

    return [alone, own, first, sorted(EXERCISES)]


children = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = first(name)
        except BaseException:
            out = traceback.format_exc()
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    children[name] = (pid, os.fdopen(r))
got = {}
for name, (pid, f) in children.items():
    got[name] = json.loads(f.read() or "null")
    f.close()
    os.waitpid(pid, 0)
print(json.dumps(got))
"""


def test_a_chapters_exercises_load_without_the_catalogue():
    """A chapter's exercises module imported first loads the judge and not
    ``mlbook.exercises`` (nothing is half-loaded on the way), registers its own
    records, and the catalogue imported afterwards still sees every record."""
    from mlbook.exercises import EXERCISES

    names = chapter_exercises()
    out = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORT, *names],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(runs) == sorted(names)
    for n, got in runs.items():
        assert isinstance(got, list), f"importing {n} first failed:\n{got}"
        loaded, own, first, every = got
        assert not loaded, f"{n} loaded mlbook.exercises"
        assert own and set(own) <= set(first), n
        assert every == sorted(EXERCISES), n


def test_chapter_packages_load_neither_torch_numpy_nor_matplotlib():
    """``from mlbook import cadence`` runs in the browser's Python (Pyodide,
    standard library only): each chapter's __init__, imported one after
    another in one fresh interpreter, leaves every heavy package unloaded."""
    bad = first_heavy_import(chapter_packages(), HEAVY)
    assert bad == {}, f"a chapter package pulled in a heavy import: {bad}"


def _public_names(path: Path) -> set[str]:
    """Functions, classes and constants a module defines at its top level."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("package", chapter_packages())
def test_a_chapter_package_names_its_calculators(package):
    """The chapter's ``__init__`` imports its ``formulas`` (where it has one)
    and names every public function, class and constant of each module it
    imports from, in ``__all__``; no name hides a submodule."""
    import importlib

    mods = all_modules()
    init = importlib.import_module(package)
    sources = {
        node.module
        for node in ast.parse(mods[package].read_text()).body
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith(package + ".")
    }
    if f"{package}.formulas" in mods:
        assert f"{package}.formulas" in sources, (
            f"{package} does not import its formulas"
        )
    exported = set(getattr(init, "__all__", ()))
    for source in sorted(sources):
        missing = _public_names(mods[source]) - exported
        assert not missing, f"{package}.__all__ lacks {sorted(missing)} of {source}"
        module = importlib.import_module(source)
        assert all(
            getattr(init, n) is getattr(module, n) for n in _public_names(mods[source])
        )
    submodules = {n.rsplit(".", 1)[1] for n in mods if n.startswith(package + ".")}
    assert not exported & submodules, (
        f"{package} names hide submodules: {exported & submodules}"
    )
    assert all(hasattr(init, n) for n in exported)


# The wheel `pip install .` installs, built by the backend pyproject.toml
# names and unpacked as pip unpacks it: pip itself (its start, and
# byte-compiling every module, where the import test below compiles those
# it imports) took 1.3 s CPU of 1.8 here.
BUILD_WHEEL = """\
import importlib, sys, tomllib, zipfile
from pathlib import Path

wheels, target = Path(sys.argv[1]), Path(sys.argv[2])
with open("pyproject.toml", "rb") as f:
    backend = tomllib.load(f)["build-system"]["build-backend"]
name = importlib.import_module(backend).build_wheel(str(wheels))
with zipfile.ZipFile(wheels / name) as wheel:
    wheel.extractall(target)
"""


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory):
    """The package as a plain (non-editable) install lays it out, in a
    folder of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-c",
            BUILD_WHEEL,
            str(tmp_path_factory.mktemp("wheel")),
            str(target),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def test_plain_install_carries_every_module(plain_install):
    shipped = {
        p.relative_to(plain_install).as_posix()
        for p in (plain_install / "mlbook").rglob("*.py")
    }
    source = {
        p.relative_to(ROOT).as_posix()
        for p in PKG.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert source - shipped == set(), (
        f"left out of a plain install: {sorted(source - shipped)}"
    )


def test_every_subpackage_imports_from_a_plain_install(plain_install, tmp_path):
    packages = sorted(n for n, p in all_modules().items() if p.name == "__init__.py")
    code = (
        "import importlib, sys\n"
        f"for n in {packages!r}:\n"
        "    m = importlib.import_module(n)\n"
        f"    assert m.__file__.startswith({str(plain_install)!r}), (n, m.__file__)\n"
        "print(len(sys.modules))\n"
    )
    env = {
        "PYTHONPATH": str(plain_install),
        "PATH": "/usr/bin:/bin",
        "PYTHONNOUSERSITE": "1",
    }
    subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            code.replace(
                "import importlib, sys\n",
                f"import importlib, sys\nsys.path.insert(0, {str(plain_install)!r})\n",
            ),
        ],
        check=True,
        cwd=tmp_path,
        env=env,
    )
