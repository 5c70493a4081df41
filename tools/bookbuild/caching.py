"""The execution cache: what a page's execution depends on (its source, the
package files it imports, followed through the package with ``ast``, the
machine and the parameters, the keys of the pages it reads), the key that
hashes it, and the store of executed notebooks under <dest>/cache."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

from . import machine, paths

CACHE_FORMAT = (
    1  # bump when what an execution produces changes (e.g. how it is post-processed)
)


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def package_files() -> list[Path]:
    root = paths.ROOT / paths.PACKAGE
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def _module_file(name: str) -> Path | None:
    """The file (or, for a namespace package, folder) that module ``name`` is
    loaded from, or None."""
    base = paths.ROOT.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.is_dir():
        return base
    return None


class _Unresolved(Exception):
    pass


_MODULE_STRING = re.compile(rf"\b{paths.PACKAGE}(?:\.[A-Za-z_]\w*)+")


_FILE_STRING = re.compile(r"([A-Za-z_]\w*\.py)\b")


_IMPORT_CALLS = {"import_module", "__import__"}


@functools.cache
def _references(
    code: str, module: str | None, is_package: bool
) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """What ``code`` (module ``module``, or a page when None) refers to:
    modules it imports (must resolve), names that may be submodules, and
    "x.py" file names in its strings. Parsed once a process for the same
    text: the pages share most of the package, and parsing it again for each
    of the 13 took 7.6 s of the build's start here (2.4 s so)."""
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
    return frozenset(must), frozenset(maybe), frozenset(files)


def _page_code(page: Path) -> str:
    """The code cells of a page, IPython magics and shell lines made `pass`."""
    return _code_of(page.read_text(), page.suffix[1:])


@functools.cache
def _code_of(text: str, fmt: str) -> str:
    """_page_code of a page's text (the key and the data files both ask)."""
    import jupytext

    nb = jupytext.reads(text, fmt=fmt)
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
        return name == paths.PACKAGE or name.startswith(paths.PACKAGE + ".")

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

    everything = package_files()
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
                    rel = path.relative_to(paths.ROOT).with_suffix("")
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


# Folders of data outside the package that a page may read (the kept machine
# calibrations). A page depends on every file under one when its code, or a
# package file it runs, names the folder ("book/measured").
DATA_FOLDERS = ("book/measured",)


def data_dependencies(page: Path, files: list[Path]) -> list[Path]:
    """The files under DATA_FOLDERS that executing ``page`` may read: every
    file of a folder that the page's code or one of ``files`` (its package
    files) names."""
    texts = [_page_code(page)] + [
        p.read_text(errors="replace") for p in files if p.suffix == ".py"
    ]
    found = []
    for folder in DATA_FOLDERS:
        if any(folder in text for text in texts):
            root = paths.ROOT / folder
            found += sorted(p for p in root.rglob("*") if p.is_file())
    return found


def machine_inputs() -> dict:
    """What every page's execution depends on besides its own sources."""
    from importlib import metadata

    try:
        torch_build = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_build = "absent"
    requirements = paths.ROOT / "requirements.txt"
    return {
        "cache format": str(CACHE_FORMAT),
        "requirements.txt": sha(requirements.read_bytes())
        if requirements.exists()
        else "absent",
        "python": sys.version,
        "torch": torch_build,
        "gpus": json.dumps(
            {
                "models": machine.gpu_models(),
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        ),
        "cpu": machine.cpu_model(),
        "isa caps": json.dumps(machine.isa_settings(), sort_keys=True),
    }


def cache_inputs(page: Path, parameters: dict, machine: dict, job: dict) -> dict:
    """Every input of one page's execution, name -> hash or value."""
    files, whole_package = package_dependencies(page)
    inputs = {f"page {page.relative_to(paths.ROOT).as_posix()}": sha(page.read_bytes())}
    files = list(files) + data_dependencies(page, files)
    inputs.update(
        {p.relative_to(paths.ROOT).as_posix(): sha(p.read_bytes()) for p in files}
    )
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
    return inputs


def key_of(inputs: dict) -> str:
    return sha(json.dumps(inputs, sort_keys=True))


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
        paths.write_atomically(self.folder / f"{page}.ipynb", source=notebook)
        paths.write_atomically(
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
