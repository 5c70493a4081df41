"""Execute every chapter with papermill, then build the HTML book from the
executed copies with warnings as errors.

    python tools/build.py                 # reader sizes -> _build/book/_build/html
    python tools/build.py --small         # test sizes   -> _build/test/_build/html
    python tools/build.py --only mfu      # one chapter (the others appear as their title)
    python tools/build.py --no-cache      # execute every page, even unchanged ones
    python tools/build.py --jobs 4        # four chapters at a time, each on its own cores

Pages. Chapters are MyST text notebooks in notebooks/; book/ holds the other
pages, of which those whose front matter names a kernel execute too. Each
executable page is converted to .ipynb (jupytext), executed by papermill with
its `parameters` cell overridden (SMALL=True for --small), and written into a
staging copy of the book (<dest>/src) that holds only the executed .ipynb, so
Sphinx never sees two sources for one page. The book is then built there with
`jupyter-book build --all -W -n --keep-going`.

Glued values. Every executed page's glued values go to
<dest>/values/<page>.json (page = file stem), name -> value: numbers as
numbers, labels as strings (`read_values(dest, page)`). A value whose stored
text is not a plain Python literal number or string (a numpy scalar, a dict,
a figure) fails its page, naming the page and the glue: the book glues plain
numbers and short labels only.

Cache. The command line keeps every successfully executed page under
<dest>/cache/ with the key it was executed under: a hash of everything the
execution depends on, listed by name in <dest>/cache/<page>.json:

  - the page's source (prose included: the executed notebook carries it);
  - the `mlbook` files the page imports, found with `ast` from its code cells
    and followed through the package's own imports (absolute, relative,
    `from mlbook.x import y` with y a submodule, string module names such as
    torchrun's "mlbook.faults.elastic_script", and "name.py" strings); the
    whole package when an import cannot be resolved or is computed at run
    time; the package's non-Python files always;
  - requirements.txt, the Python version and the installed torch build
    (its version from importlib.metadata, "+cpu" or "+cu126");
  - the parameters (SMALL), the visible GPUs and CPU model (DEVICE="auto"
    resolves on them), and the cores and threads each job gets;
  - the keys of the pages it reads values from (below).

A page whose key is unchanged is not executed: its cached notebook goes into
the build. A failed execution is never cached. --no-cache executes every page
(and refreshes the cache with the successes); `build()` called from Python
(the test build, `make test`) does not read the cache unless asked. Deleting
_build/ gives a full build. When every page came from the cache and the
staged sources are byte-identical to those of the last HTML build that had no
warnings, the HTML is not built again; any change rebuilds all of it (a fresh
Sphinx environment, so every page's warnings are seen again).

Reading another page's values. A page that uses another page's glued values
lists it in its front matter:

    mlbook:
      depends_on: [mfu, recompute]

It then executes after them, its key includes theirs (editing mfu re-executes
it), and while it runs the environment variable MLBOOK_VALUES_DIR names a
folder holding exactly those pages' <page>.json files (and no others, so an
undeclared dependency fails instead of going stale). `--only` adds the pages
the chosen ones depend on.

Timings. <dest>/timings.json records, per page: "seconds" (the execution time
of the notebook in this build, measured when it was executed), "cached"
(true: taken from the cache), "this_run_s" (the time this run spent on it),
"error", and "key"; and for the run: the jobs, each job's CPUs and threads.

Jobs. With --jobs N > 1, N pages execute at once, each in its own process
pinned (sched_setaffinity, inherited by its kernel and any workers it starts)
to its own set of whole physical cores, with OMP_NUM_THREADS (and MKL/OpenBLAS)
set to that many threads, and, on a machine with GPUs, its own GPU through
CUDA_VISIBLE_DEVICES. So a chapter's timing cells never share a core (or a
GPU, unless there are more jobs than GPUs: then a warning) with another
chapter. The default is 1 on a machine with 2 or fewer CPUs, else one job per
4 physical cores (so each chapter still measures on at least 4), and no more
jobs than GPUs. With one job, pages execute in this process's kernel
children with the machine as it is (no pinning, no thread settings).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mlbook"
BOOK_FILES = ("_config.yml", "_toc.yml")
BOOK_DIRS = ("book", "mlbook", "_vendor")
CELL_TIMEOUT_S = 300
POLL_SLICE_S = 0.5
CACHE_FORMAT = (
    1  # bump when what an execution produces changes (e.g. how it is post-processed)
)
VALUES_ENV = "MLBOOK_VALUES_DIR"
CORES_PER_JOB = (
    4  # the default --jobs gives each chapter at least this many physical cores
)


# --- pages -----------------------------------------------------------------------


def front_matter(page: Path) -> dict:
    """The YAML front matter of a MyST page ({} when it has none)."""
    text = page.read_text()
    if not text.startswith("---"):
        return {}
    head = text.split("\n---", 1)[0][3:]
    import yaml

    data = yaml.safe_load(head)
    return data if isinstance(data, dict) else {}


def is_notebook(page: Path) -> bool:
    """A MyST page is an executable notebook when its front matter names a kernel."""
    head = page.read_text().split("\n---", 1)[0]
    return page.read_text().startswith("---") and "kernelspec:" in head


def depends_on(page: Path) -> list[str]:
    """The pages (file stems) whose glued values ``page`` reads: its front
    matter's ``mlbook: depends_on: [...]``."""
    options = front_matter(page).get("mlbook") or {}
    deps = options.get("depends_on") or []
    if isinstance(deps, str):
        deps = [deps]
    return [str(d) for d in deps]


def chapters(only: list[str] | None = None) -> list[Path]:
    """Executable pages: the chapters in notebooks/ (those named in ``only``,
    or all) and every executable page of book/ (always: the root is one)."""
    found = sorted((ROOT / "notebooks").glob("*.md"))
    if only:
        names = {p.stem for p in found}
        missing = set(only) - names
        if missing:
            raise SystemExit(
                f"no chapter named {sorted(missing)}; chapters: {sorted(names)}"
            )
        found = [p for p in found if p.stem in only]
    return found + sorted(p for p in (ROOT / "book").glob("*.md") if is_notebook(p))


def execution_order(pages: list[Path]) -> list[Path]:
    """``pages`` plus the pages they depend on, each after its dependencies
    (otherwise in the given order). A cycle or an unknown name is an error."""
    everything = {p.stem: p for p in chapters()}
    everything.update({p.stem: p for p in pages})
    order: list[Path] = []
    state: dict[str, str] = {}

    def visit(page: Path, via: list[str]) -> None:
        if state.get(page.stem) == "done":
            return
        if state.get(page.stem) == "visiting":
            raise SystemExit(
                f"pages depend on each other in a cycle: {' -> '.join(via + [page.stem])}"
            )
        state[page.stem] = "visiting"
        for dep in depends_on(page):
            if dep not in everything:
                raise SystemExit(
                    f"{page.name} depends on {dep!r}, which is not an executable page; "
                    f"pages: {sorted(everything)}"
                )
            visit(everything[dep], via + [page.stem])
        state[page.stem] = "done"
        order.append(page)

    for page in pages:
        visit(page, [])
    return order


def stage(dest: Path) -> Path:
    """A fresh copy of the book's sources under dest/src, notebooks excluded."""
    src = dest / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in BOOK_FILES:
        shutil.copy(ROOT / name, src / name)
    for name in BOOK_DIRS:
        if not (ROOT / name).exists():
            raise SystemExit(
                f"{name}/ is missing; run `make install` (it fetches _vendor/)"
            )
        shutil.copytree(
            ROOT / name,
            src / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    for page in chapters():  # executable pages arrive executed, as .ipynb
        (src / page.relative_to(ROOT)).unlink(missing_ok=True)
    (src / "notebooks").mkdir(exist_ok=True)
    return src


# --- glued values ----------------------------------------------------------------


class GlueError(ValueError):
    """A glued value that is not a plain number or string."""


def glued_values(notebook: Path, page: str | None = None) -> dict:
    """The values an executed notebook glued (myst-nb ``glue``), name ->
    int, float, bool or str, read back from their stored text with
    ``ast.literal_eval``. Anything else raises GlueError naming the page and
    the glue."""
    import nbformat

    page = page or Path(notebook).stem
    nb = nbformat.read(notebook, as_version=4)
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if not scrap:
                continue
            name = scrap.get("name")
            data = output.get("data", {})
            text = next((v for k, v in data.items() if k.endswith("text/plain")), None)
            try:
                value = ast.literal_eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = None
            if isinstance(value, complex) or not isinstance(value, (int, float, str)):
                kinds = sorted(
                    k.replace("application/papermill.record/", "") for k in data
                )
                raise GlueError(
                    f"{page}: glued value {name!r} is {str(text)[:80]!r} ({', '.join(kinds)}), not a plain "
                    "number or string. Glue plain numbers and short labels only: float()/int() a numpy "
                    "scalar, format a table into a string or show it in the cell, display a figure."
                )
            values[name] = value
    return values


def write_values(dest: Path, page: str, values: dict) -> Path:
    path = Path(dest) / "values" / f"{page}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, json.dumps(values, indent=1, sort_keys=True))
    return path


def read_values(dest: Path, page: str) -> dict:
    """The glued values of ``page`` (a file stem such as "mfu") in the build
    at ``dest`` (_build/book or _build/test): name -> number or string."""
    path = Path(dest) / "values" / f"{page}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no glued values for {page!r} at {path}: was it executed in that build?"
        )
    return json.loads(path.read_text())


# --- cache keys ------------------------------------------------------------------


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _package_files() -> list[Path]:
    root = ROOT / PACKAGE
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def _module_file(name: str) -> Path | None:
    """The file (or, for a namespace package, folder) that module ``name`` is
    loaded from, or None."""
    base = ROOT.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.is_dir():
        return base
    return None


class _Unresolved(Exception):
    pass


_MODULE_STRING = re.compile(rf"\b{PACKAGE}(?:\.[A-Za-z_]\w*)+")
_FILE_STRING = re.compile(r"([A-Za-z_]\w*\.py)\b")
_IMPORT_CALLS = {"import_module", "__import__"}


def _references(
    code: str, module: str | None, is_package: bool
) -> tuple[set[str], set[str], set[str]]:
    """What ``code`` (module ``module``, or a page when None) refers to:
    modules it imports (must resolve), names that may be submodules, and
    "x.py" file names in its strings."""
    tree = ast.parse(code)
    must, maybe, files = set(), set(), set()
    inert = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
    }  # docstrings name modules too
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            must.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if module is None:
                    raise _Unresolved("relative import in a page")
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = (
                    parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                )
                if not parts:
                    raise _Unresolved(f"relative import beyond the package in {module}")
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module
            must.add(base)
            maybe.update(
                f"{base}.{alias.name}" for alias in node.names if alias.name != "*"
            )
        elif isinstance(node, ast.Call):
            func = node.func
            fname = (
                func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            )
            if fname in _IMPORT_CALLS:
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise _Unresolved(
                        f"{fname}() of a computed name in {module or 'a page'}"
                    )
                if not arg.value.startswith("."):
                    must.add(arg.value)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in inert
        ):
            maybe.update(_MODULE_STRING.findall(node.value))
            files.update(_FILE_STRING.findall(node.value))
    return must, maybe, files


def _page_code(page: Path) -> str:
    """The code cells of a page, IPython magics and shell lines made `pass`."""
    import jupytext

    nb = jupytext.read(page)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = []
        for line in cell.source.splitlines():
            stripped = line.lstrip()
            if stripped.startswith(("%", "!")):
                line = line[: len(line) - len(stripped)] + "pass"
            lines.append(line)
        cells.append("\n".join(lines))
    return "\n\n".join(cells)


def package_dependencies(page: Path) -> tuple[list[Path], str | None]:
    """The files of the package that executing ``page`` may run, and why the
    whole package was taken instead (None when the imports resolved)."""
    seen: set[str] = set()
    found: set[Path] = set()
    file_names: set[str] = set()

    def wanted(name: str) -> bool:
        return name == PACKAGE or name.startswith(PACKAGE + ".")

    def add_module(name: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            sub = ".".join(parts[:i])
            if sub in seen:
                continue
            path = _module_file(sub)
            if path is None:
                raise _Unresolved(f"no module {sub}")
            seen.add(sub)
            if path.is_file():
                found.add(path)
                scan(path.read_text(), sub, path.name == "__init__.py")

    def scan(code: str, module: str | None, is_package: bool) -> None:
        try:
            must, maybe, files = _references(code, module, is_package)
        except SyntaxError as exc:
            raise _Unresolved(f"cannot parse {module or page.name}: {exc.msg}") from exc
        file_names.update(files)
        for name in sorted(must):
            if wanted(name):
                add_module(name)
        for name in sorted(maybe):
            if wanted(name) and name not in seen and _module_file(name) is not None:
                add_module(name)

    everything = _package_files()
    try:
        scan(_page_code(page), None, False)
        for _ in range(100):  # file names found in strings may import more
            before = len(found)
            for path in everything:
                if (
                    path.suffix == ".py"
                    and path.name in file_names
                    and path not in found
                ):
                    rel = path.relative_to(ROOT).with_suffix("")
                    add_module(
                        ".".join(
                            rel.parts[:-1] if rel.name == "__init__" else rel.parts
                        )
                    )
            if len(found) == before:
                break
    except _Unresolved as exc:
        return everything, str(exc)
    data = [
        p for p in everything if p.suffix != ".py"
    ]  # data files: anyone may read them
    return sorted(found | set(data)), None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def gpu_models() -> list[str]:
    """The NVIDIA GPUs the driver lists, by model, without importing torch."""
    models = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            model = next(
                (
                    l.split(":", 1)[1].strip()
                    for l in info.read_text().splitlines()
                    if l.startswith("Model:")
                ),
                "unknown",
            )
        except OSError:
            model = "unknown"
        models.append(model)
    if (
        not models
    ):  # a container may show the device nodes without the driver's /proc entries
        models = ["nvidia (model unknown)" for dev in Path("/dev").glob("nvidia[0-9]*")]
    return models


def machine_inputs() -> dict:
    """What every page's execution depends on besides its own sources."""
    from importlib import metadata

    try:
        torch_build = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_build = "absent"
    requirements = ROOT / "requirements.txt"
    return {
        "cache format": str(CACHE_FORMAT),
        "requirements.txt": _sha(requirements.read_bytes())
        if requirements.exists()
        else "absent",
        "python": sys.version,
        "torch": torch_build,
        "gpus": json.dumps(
            {
                "models": gpu_models(),
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        ),
        "cpu": _cpu_model(),
    }


def cache_inputs(
    page: Path, parameters: dict, machine: dict, dep_keys: dict, job: dict
) -> dict:
    """Every input of one page's execution, name -> hash or value."""
    files, whole_package = package_dependencies(page)
    inputs = {f"page {page.relative_to(ROOT).as_posix()}": _sha(page.read_bytes())}
    inputs.update({p.relative_to(ROOT).as_posix(): _sha(p.read_bytes()) for p in files})
    if whole_package:
        inputs["whole package, because"] = whole_package
    inputs.update(machine)
    inputs["parameters"] = json.dumps(parameters, sort_keys=True)
    inputs["job"] = json.dumps(
        {
            "cpus": len(job["cpus"]) if job["cpus"] else "all",
            "threads": job["env"].get("OMP_NUM_THREADS", "default"),
        }
    )
    inputs.update({f"values of {name}": key for name, key in sorted(dep_keys.items())})
    return inputs


def key_of(inputs: dict) -> str:
    return _sha(json.dumps(inputs, sort_keys=True))


def _write_atomically(
    path: Path, text: str | None = None, source: Path | None = None
) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if source is not None:
        shutil.copyfile(source, tmp)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)


class Cache:
    """Executed notebooks of the last successful execution of each page,
    with the inputs (and their key) it was executed under."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def entry(self, page: str) -> dict | None:
        path = self.folder / f"{page}.json"
        notebook = self.folder / f"{page}.ipynb"
        if not (path.exists() and notebook.exists()):
            return None
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None

    def lookup(self, page: str, key: str) -> tuple[Path | None, str]:
        """The cached notebook for ``key``, or None and what changed."""
        entry = self.entry(page)
        if entry is None:
            return None, "not in the cache"
        if entry.get("key") == key:
            return self.folder / f"{page}.ipynb", "unchanged"
        return None, "changed"

    def changed(self, page: str, inputs: dict) -> list[str]:
        old = (self.entry(page) or {}).get("inputs", {})
        return sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))

    def store(
        self, page: str, key: str, inputs: dict, notebook: Path, seconds: float
    ) -> None:
        _write_atomically(self.folder / f"{page}.ipynb", source=notebook)
        _write_atomically(
            self.folder / f"{page}.json",
            json.dumps(
                {
                    "key": key,
                    "seconds": round(seconds, 1),
                    "executed": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "inputs": inputs,
                },
                indent=1,
            ),
        )


# --- execution -------------------------------------------------------------------


def _poll_in_short_slices() -> None:
    """Work around a lost wake-up in async ZMQ polling (nbclient issue 312).

    nbclient waits for a cell's reply with one long ``socket.poll``; now and
    then, at cells that display widgets, that poll misses a reply that has
    already arrived and sleeps until its timeout (forever without one), while
    the kernel sits idle. Polling in slices of half a second re-checks the
    socket, so a missed wake-up costs at most that.
    """
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    if getattr(AsyncZMQSocketChannel.get_msg, "_sliced", False):
        return
    original = AsyncZMQSocketChannel.get_msg

    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                POLL_SLICE_S
                if deadline is None
                else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            )
            try:
                return await original(self, timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg._sliced = True
    AsyncZMQSocketChannel.get_msg = get_msg


def execute(
    chapter: Path, out_dir: Path, parameters: dict, env: dict | None = None
) -> tuple:
    """Run one chapter; returns (seconds, error or None, retry or None). The
    executed notebook is written even when a cell fails, so the error can be
    read. ``env`` is added to the kernel's environment.

    A cell that outlives CELL_TIMEOUT_S (a kernel that stopped answering, not
    a slow cell: every chapter's budget is 60 s in all) fails the run, which
    is then tried once more from a fresh kernel, and says so: ``retry`` is
    then {"first_attempt_s": ..., "error": ...}, so that a retried page is
    reported with the time its first attempt took, not only the retry's.
    """
    import jupytext
    import nbformat
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    _poll_in_short_slices()
    nb = jupytext.read(chapter)
    out = out_dir / f"{chapter.stem}.ipynb"
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    retry = None
    try:
        for attempt in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / f"{chapter.stem}.ipynb"
                nbformat.write(nb, raw)
                start = time.perf_counter()
                error = None
                try:
                    papermill.execute_notebook(
                        str(raw),
                        str(out),
                        parameters=parameters,
                        kernel_name="python3",
                        cwd=tmp,
                        progress_bar=False,
                        log_output=False,
                        execution_timeout=CELL_TIMEOUT_S,
                    )
                except papermill.PapermillExecutionError as exc:
                    error = f"{exc.ename}: {exc.evalue} (cell {exc.cell_index})"
                except (CellTimeoutError, DeadKernelError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if attempt == 1:
                        print(
                            f"  {chapter.stem}: the kernel stopped answering ({error.splitlines()[0]}); "
                            "running the chapter once more",
                            flush=True,
                        )
                        retry = {
                            "first_attempt_s": round(time.perf_counter() - start, 1),
                            "error": error.splitlines()[0],
                        }
                        continue
                seconds = time.perf_counter() - start
            break
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    hide_injected_parameters(out)
    return seconds, error, retry


DEFAULT_BUDGET_S = 60.0


def budget_s(page: Path) -> float:
    """A page's execution budget at reader sizes on an idle 2-core machine:
    ``mlbook: budget_s: N`` in its front matter, else DEFAULT_BUDGET_S."""
    meta = front_matter(page).get("mlbook") or {}
    return float(meta.get("budget_s", DEFAULT_BUDGET_S))


def hide_injected_parameters(path: Path) -> None:
    """Papermill's injected cell is bookkeeping, not content: remove it from the page."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, path)


# --- jobs ------------------------------------------------------------------------


def physical_cores() -> list[list[int]]:
    """The CPUs this process may use, grouped by physical core (hyperthreads
    of one core together); each CPU alone when the topology is unknown."""
    groups: dict[tuple, list[int]] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            core = (
                (topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip(),
            )
        except OSError:
            core = ("cpu", str(cpu))
        groups.setdefault(core, []).append(cpu)
    return sorted(groups.values())


def default_jobs() -> int:
    """1 on two CPUs or fewer; else one job per CORES_PER_JOB physical cores,
    and no more jobs than GPUs on a machine that has any."""
    if len(os.sched_getaffinity(0)) <= 2:
        return 1
    jobs = max(1, len(physical_cores()) // CORES_PER_JOB)
    gpus = len(gpu_models())
    return min(jobs, gpus) if gpus else jobs


def plan_jobs(jobs: int) -> list[dict]:
    """Each job's CPUs (None: unpinned) and environment."""
    if jobs <= 1:
        return [{"cpus": None, "env": {}}]
    cores = physical_cores()
    per = len(cores) // jobs
    if per < 1:
        raise SystemExit(
            f"--jobs {jobs}: this machine has {len(cores)} physical cores to give; "
            "each job needs at least one to itself"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = (
        [g for g in visible.split(",") if g.strip()]
        if visible is not None
        else [str(i) for i in range(len(gpu_models()))]
    )
    if gpus and jobs > len(gpus):
        print(
            f"warning: {jobs} jobs share {len(gpus)} GPU(s): GPU timings are not isolated",
            flush=True,
        )
    plan = []
    for i in range(jobs):
        cpus = sorted(c for core in cores[i * per : (i + 1) * per] for c in core)
        threads = str(per)
        env = {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
        plan.append({"cpus": cpus, "env": env})
    return plan


def _pin(cpus: list[int], env: dict) -> None:
    """A job process's initializer: its CPUs and environment, which its
    kernels and their children inherit."""
    os.sched_setaffinity(0, cpus)
    os.environ.update(env)


class _InProcess:
    """The one-job executor: runs each page at once, here."""

    def submit(self, fn, *args):
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 (reported as the page's error)
            if isinstance(exc, KeyboardInterrupt):
                raise
            future.set_exception(exc)
        return future

    def shutdown(self):
        pass


# --- the build -------------------------------------------------------------------


def build(
    dest: Path,
    small: bool,
    only: list[str] | None = None,
    html: bool = True,
    cache: bool = False,
    jobs: int | None = None,
) -> dict:
    """Execute the pages and build the book; returns the report (also in
    <dest>/timings.json). With ``cache``, pages whose key is unchanged are
    taken from <dest>/cache instead of executed, and an unchanged book is not
    rebuilt. Successful executions are stored in the cache either way."""
    dest = Path(dest).resolve()
    src = stage(dest)
    parameters = {"SMALL": True} if small else {}
    jobs = default_jobs() if jobs is None else max(1, jobs)
    plan = plan_jobs(jobs)
    report = {
        "small": small,
        "cache": cache,
        "jobs": jobs,
        "job_resources": [
            {
                "cpus": j["cpus"] or "all",
                "threads": j["env"].get("OMP_NUM_THREADS", "default"),
                "gpu": j["env"].get("CUDA_VISIBLE_DEVICES"),
            }
            for j in plan
        ],
        "chapters": {},
        "html": None,
    }
    store = Cache(dest / "cache")
    values_dir = dest / "values"
    values_dir.mkdir(exist_ok=True)
    for stale in values_dir.glob("*.json"):
        stale.unlink()

    order = execution_order(chapters(only))
    machine = machine_inputs()
    keys, inputs = {}, {}
    for page in order:
        inputs[page.stem] = cache_inputs(
            page, parameters, machine, {d: keys[d] for d in depends_on(page)}, plan[0]
        )
        keys[page.stem] = key_of(inputs[page.stem])

    def finish(
        page: Path,
        seconds: float,
        error: str | None,
        cached: bool,
        spent: float,
        retry: dict | None = None,
    ) -> None:
        out = src / page.parent.relative_to(ROOT) / f"{page.stem}.ipynb"
        if not out.exists():
            stub_page(page, out.parent)
        if error is None:
            try:
                write_values(dest, page.stem, glued_values(out, page.stem))
            except GlueError as exc:
                error = str(exc)
        if error is None and not cached:
            store.store(page.stem, keys[page.stem], inputs[page.stem], out, seconds)
        report["chapters"][page.stem] = {
            "seconds": round(seconds, 1),
            "error": error,
            "cached": cached,
            "this_run_s": round(spent, 1),
            "key": keys[page.stem][:16],
            "budget_s": budget_s(page),
            "retry": retry,
        }
        how = "from the cache" if cached else f"{seconds:.1f} s"
        print(
            f"  {page.stem}: {how}" + (f"  FAILED: {error}" if error else ""),
            flush=True,
        )

    executors = (
        [_InProcess()]
        if jobs == 1
        else [
            ProcessPoolExecutor(
                1,
                mp_context=__import__("multiprocessing").get_context("spawn"),
                initializer=_pin,
                initargs=(j["cpus"], j["env"]),
            )
            for j in plan
        ]
    )
    free = list(range(len(executors)))
    running: dict[Future, tuple[Path, int, float]] = {}
    pending = list(order)
    try:
        while pending or running:
            for page in list(pending):
                deps = depends_on(page)
                if any(d not in report["chapters"] for d in deps):
                    continue  # a dependency has not finished
                failed = [d for d in deps if report["chapters"][d]["error"]]
                if failed:
                    pending.remove(page)
                    finish(
                        page,
                        0.0,
                        f"not executed: it reads the values of {failed}, which failed",
                        False,
                        0.0,
                    )
                    continue
                hit, why = (
                    store.lookup(page.stem, keys[page.stem]) if cache else (None, "")
                )
                out_dir = src / page.parent.relative_to(ROOT)
                if hit is not None:
                    pending.remove(page)
                    shutil.copyfile(hit, out_dir / f"{page.stem}.ipynb")
                    finish(page, store.entry(page.stem)["seconds"], None, True, 0.0)
                    continue
                if not free:
                    continue  # wait for a job to finish
                pending.remove(page)
                slot = free.pop(0)
                reason = ""
                if cache:
                    if why == "changed":
                        why = "changed: " + ", ".join(
                            store.changed(page.stem, inputs[page.stem])
                        )
                    reason = f" [{why[:200]}]"
                where = f" on CPUs {plan[slot]['cpus']}" if plan[slot]["cpus"] else ""
                print(
                    f"executing {page.name} ({'test' if small else 'reader'} sizes){where}{reason} ...",
                    flush=True,
                )
                view = (
                    dest / "inputs" / page.stem
                )  # the values it may read, and only those
                shutil.rmtree(view, ignore_errors=True)
                view.mkdir(parents=True)
                for d in deps:
                    shutil.copyfile(values_dir / f"{d}.json", view / f"{d}.json")
                started = time.perf_counter()
                future = executors[slot].submit(
                    execute, page, out_dir, parameters, {VALUES_ENV: str(view)}
                )
                running[future] = (page, slot, started)
                if jobs == 1:
                    break  # it has run: see what that made ready
            if not running:
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                page, slot, started = running.pop(future)
                free.append(slot)
                retry = None
                try:
                    seconds, error, retry = future.result()
                except Exception as exc:  # noqa: BLE001 (the page fails, the build goes on)
                    seconds, error = (
                        time.perf_counter() - started,
                        f"{type(exc).__name__}: {exc}",
                    )
                finish(
                    page, seconds, error, False, time.perf_counter() - started, retry
                )
    finally:
        for executor in executors:
            executor.shutdown()

    if only:  # a partial build: the other chapters appear as their title alone
        for other in set(chapters()) - set(order):
            stub_page(other, src / other.parent.relative_to(ROOT))
    if html:
        report["html"] = build_book(src, dest, reuse=cache)
    _write_atomically(dest / "timings.json", json.dumps(report, indent=2))
    return report


def html_fingerprint(src: Path) -> str:
    """A hash of every staged file and of how the book is built from them."""
    from importlib import metadata

    digest = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(_sha(path.read_bytes()).encode())
    for package in ("jupyter-book", "sphinx", "myst-nb", "sphinx-book-theme"):
        try:
            digest.update(f"{package}=={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            pass
    digest.update(
        " ".join(_html_command(Path("SRC"), Path("DEST"))[1:]).encode()
    )  # not the venv's path
    return digest.hexdigest()


def _html_command(src: Path, dest: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "jupyter-book"),
        "build",
        str(src),
        "--path-output",
        str(dest),
        "--all",
        "-W",
        "-n",
        "--keep-going",
    ]


def build_html(src: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_html_command(src, dest), capture_output=True, text=True)


def build_book(src: Path, dest: Path, reuse: bool) -> dict:
    """The HTML book from the staged sources; with ``reuse``, skipped when
    they are identical to those of the last build without warnings."""
    stamp = dest / "html.json"
    html_dir = dest / "_build" / "html"
    fingerprint = html_fingerprint(src)
    if reuse and stamp.exists() and (html_dir / "index.html").exists():
        try:
            if json.loads(stamp.read_text()).get("fingerprint") == fingerprint:
                print(
                    "the HTML book is up to date (same sources as its last clean build)",
                    flush=True,
                )
                return {
                    "returncode": 0,
                    "dir": str(html_dir),
                    "warnings": [],
                    "rebuilt": False,
                }
        except ValueError:
            pass
    stamp.unlink(missing_ok=True)
    print("building the HTML book (warnings are errors) ...", flush=True)
    result = build_html(src, dest)
    log = result.stdout + result.stderr
    (dest / "build.log").write_text(log)
    warnings = [l for l in log.splitlines() if "WARNING" in l or "ERROR" in l]
    if result.returncode == 0 and not warnings:
        _write_atomically(stamp, json.dumps({"fingerprint": fingerprint}))
    return {
        "returncode": result.returncode,
        "dir": str(html_dir),
        "warnings": warnings,
        "rebuilt": True,
    }


def stub_page(page: Path, out_dir: Path) -> None:
    """A chapter reduced to its first cell (label and title), unexecuted, so
    that a partial build still resolves every cross-reference to it."""
    import jupytext
    import nbformat

    nb = jupytext.read(page)
    lines = nb.cells[0].source.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    nb.cells = [nbformat.v4.new_markdown_cell("\n".join(lines[: title + 1]))]
    nbformat.write(nb, out_dir / f"{page.stem}.ipynb")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", action="store_true", help="test sizes (SMALL=True)")
    ap.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="output folder (default _build/book or _build/test)",
    )
    ap.add_argument("--only", nargs="*", help="chapter names (file stems) to execute")
    ap.add_argument("--no-html", action="store_true", help="execute only")
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="execute every page, even those unchanged",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"pages executed at once, each on its own cores (default here: {default_jobs()})",
    )
    args = ap.parse_args(argv)
    dest = args.dest or ROOT / "_build" / ("test" if args.small else "book")
    started = time.perf_counter()
    report = build(
        dest,
        args.small,
        args.only,
        html=not args.no_html,
        cache=not args.no_cache,
        jobs=args.jobs,
    )
    failed = [name for name, r in report["chapters"].items() if r["error"]]
    executed = [name for name, r in report["chapters"].items() if not r["cached"]]
    ok = not failed
    if report["html"] is not None:
        for line in report["html"]["warnings"]:
            print(line)
        if report["html"]["returncode"] != 0:
            ok = False
            print(f"the book build failed; see {dest / 'build.log'}")
        else:
            print(f"HTML book: {report['html']['dir']}/index.html")
    print(
        f"done in {time.perf_counter() - started:.0f} s; executed {len(executed)} of {len(report['chapters'])} "
        "pages" + (f"; failed: {failed}" if failed else "")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
