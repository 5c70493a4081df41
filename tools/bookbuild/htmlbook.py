"""The HTML step: jupyter-book over the staged sources with warnings as
errors, skipped when the sources match those of the last build that had no
warnings."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from . import caching, paths


def html_fingerprint(src: Path) -> str:
    """A hash of every staged file and of how the book is built from them."""
    from importlib import metadata

    digest = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(caching.sha(path.read_bytes()).encode())
    for path in sorted((paths.ROOT / "tools" / "bookext").glob("*.py")):
        digest.update(caching.sha(path.read_bytes()).encode())  # the book's renderers
    for path in caching.package_files():
        # the answer boxes' keys and hints: bookext.exercises computes them with
        # mlbook.exercises, which calls every chapter's calculators
        if path.suffix == ".py":
            digest.update(caching.sha(path.read_bytes()).encode())
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
    """jupyter-book, with tools/ importable (the book's mime renderers,
    tools/bookext, are registered under myst-nb's entry point)."""
    env = dict(os.environ)
    path = [str(paths.ROOT / "tools"), str(paths.ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    return subprocess.run(
        _html_command(src, dest), capture_output=True, text=True, env=env
    )


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
                    "the HTML book is up to date "
                    "(same sources as its last clean build)",
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
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln]
    if result.returncode == 0 and not warnings:
        paths.write_atomically(stamp, json.dumps({"fingerprint": fingerprint}))
    return {
        "returncode": result.returncode,
        "dir": str(html_dir),
        "warnings": warnings,
        "rebuilt": True,
    }
