"""Fetch the JavaScript the built book serves itself, at install time.

The HTML book must load nothing from the network, so everything a page runs
comes from the npm registry through `npm pack`, pinned, into _vendor/vendor/,
which the book serves through html_extra_path (as <book>/vendor/), for the
live figures (book/_extra/vendor/live.js): vega, vega-lite and vega-embed,
at the versions JupyterLab 4.6.6 bundles (tests/test_live_units.py reads
them from the venv's JupyterLab), so one spec draws the same in both; and
Pyodide's core (CPython in WebAssembly with its standard library), which a
page loads only when a reader first moves a control.

A stamp file records the versions; a change of PACKAGES vendors again.
"""

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGES = {
    "vega": "5.33.0",
    "vega-lite": "5.6.1",
    "vega-embed": "6.21.3",
    "pyodide": "314.0.7",
}
ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "_vendor" / "vendor"
STAMP = DEST / "versions.json"
# package -> (file in the package, where it goes under DEST)
FILES = {
    "vega": [
        ("build/vega.min.js", "vega/vega.min.js"),
        ("LICENSE", "vega/LICENSE-vega.txt"),
    ],
    "vega-lite": [
        ("build/vega-lite.min.js", "vega/vega-lite.min.js"),
        ("LICENSE", "vega/LICENSE-vega-lite.txt"),
    ],
    "vega-embed": [
        ("build/vega-embed.min.js", "vega/vega-embed.min.js"),
        ("LICENSE", "vega/LICENSE-vega-embed.txt"),
    ],
    # The core only: the loader (an ES module), the interpreter, the standard
    # library and the lock file the loader reads. No console pages, no source maps.
    "pyodide": [
        ("pyodide.mjs", "pyodide/pyodide.mjs"),
        ("pyodide.asm.mjs", "pyodide/pyodide.asm.mjs"),
        ("pyodide.asm.wasm", "pyodide/pyodide.asm.wasm"),
        ("python_stdlib.zip", "pyodide/python_stdlib.zip"),
        ("pyodide-lock.json", "pyodide/pyodide-lock.json"),
    ],
}


def _tarball_dir(name: str, version: str) -> str:
    """The folder `npm pack name@version` names its tarball after."""
    return f"{name.lstrip('@').replace('/', '-')}-{version}"


def complete() -> bool:
    """Every file at the pinned versions."""
    try:
        if json.loads(STAMP.read_text()) != PACKAGES:
            return False
    except (OSError, ValueError):
        return False
    return all((DEST / dest).exists() for files in FILES.values() for _, dest in files)


def main() -> int:
    if complete():
        return 0
    if shutil.which("npm") is None:
        print(
            "vendor_js: npm is needed to fetch the book's scripts "
            "(apt-get install npm)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        subprocess.run(
            ["npm", "pack", "--silent", *specs],
            cwd=tmp,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        shutil.rmtree(DEST, ignore_errors=True)
        DEST.mkdir(parents=True)
        for name, version in PACKAGES.items():
            folder = _tarball_dir(name, version)
            with tarfile.open(Path(tmp) / f"{folder}.tgz") as tar:
                tar.extractall(Path(tmp) / folder, filter="data")
            package = Path(tmp) / folder / "package"
            for source, dest in FILES[name]:
                (DEST / dest).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(package / source, DEST / dest)
        STAMP.write_text(json.dumps(PACKAGES, indent=2))
    print(f"vendor_js: the book's scripts in {DEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
