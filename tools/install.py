"""Install requirements.txt, pip and this package (editable) into the venv
this runs in, with uv where it can.

pip unpacks the stack (torch, JupyterLab, Sphinx, ...) one wheel at a time:
about 85 s on a 2-core machine. uv installs the same pins from the same
sources in seconds. So this installs uv (pinned, from the registry) into the
venv and has it install the requirements, pointed at the sources pip is
configured with (`pip config list`: index-url, extra-index-url, find-links,
constraint, from files or PIP_* variables), choosing across them as pip
does. If uv cannot be installed or fails, pip does the install instead, and
this says why.

The Makefile makes the venv without pip (`venv --without-pip`: 0.2 s, where
seeding pip takes about 6 s here); uv then installs the pinned pip with the
rest, and the package with uv (2 s) rather than pip (about 7 s: pip builds
it in a fresh build environment). Until then, the pip that installs uv is
the base interpreter's, pointed at the venv (`pip --python`); where the
base has none, the venv is given its own first (ensurepip, the slow way).

No bytecode is compiled here: the Makefile lets processes write it as they
import (see its comment on PYTHONDONTWRITEBYTECODE).

    python tools/install.py requirements.txt
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
PIP = "pip==26.2.1"  # the venv's own, for a reader's later installs
ROOT = Path(__file__).resolve().parent.parent
# pip's option -> uv's, for the source options that pip may be configured with
SOURCE_OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_sources(listing: str) -> list[str]:
    """uv's options for the sources in `pip config list`'s output, e.g.
    ``global.find-links='/opt/wheels'`` or ``:env:.extra-index-url='a b'``.
    A value may hold several, separated by white space; an option set both in
    a file and in the environment is passed once per distinct value."""
    seen: list[tuple[str, str]] = []
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        option = SOURCE_OPTIONS.get(key.rsplit(".", 1)[-1])
        if not sep or option is None or not raw.strip():
            continue
        for value in shlex.split(raw)[0].split():
            if (option, value) not in seen:
                seen.append((option, value))
    out = [part for pair in seen for part in pair]
    return out


def _run(cmd: list[str]) -> bool:
    return subprocess.run(cmd).returncode == 0


def _works(pip: list[str]) -> bool:
    return subprocess.run([*pip, "--version"], capture_output=True).returncode == 0


def a_pip(python: str) -> list[str]:
    """A pip command that installs into the venv of ``python``: its own, else
    the base interpreter's pointed at it (pip 22.3 or later), else its own
    once ensurepip has given it one."""
    base = getattr(sys, "_base_executable", python)
    for pip in ([python, "-m", "pip"], [base, "-m", "pip", "--python", python]):
        if _works(pip):
            return pip
    if not _run([python, "-m", "ensurepip", "--default-pip"]):
        sys.exit(f"install: {python} has no pip, and ensurepip could not add one")
    return [python, "-m", "pip"]


def install(requirements: Path) -> None:
    python = sys.executable
    pip = a_pip(python)
    listing = subprocess.run(
        [*pip, "config", "list"], capture_output=True, text=True
    ).stdout
    # -qq: pip warns of each configured index that has no uv (not an error)
    if _run([*pip, "install", "-qq", UV]):
        uv = [
            python,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            # pip takes the best version across every index; uv's default
            # takes the first index that has the package at all
            "--index-strategy",
            "unsafe-best-match",
            *pip_sources(listing),
            "-r",
            str(requirements),
            PIP,
            # the package declares no dependencies: nothing more to resolve
            "--editable",
            str(ROOT),
        ]
        if _run(uv):
            return
        print(f"install: uv failed ({shlex.join(uv)}); installing with pip")
    else:
        print(f"install: {UV} could not be installed; installing with pip")
    ok = _run(
        [*pip, "install", "--quiet", "--no-compile", "-r", str(requirements), PIP]
    )
    if not ok or not _run([*pip, "install", "--quiet", "--no-deps", "-e", str(ROOT)]):
        sys.exit(f"install: pip could not install {requirements} and the package")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/install.py requirements.txt")
    install(Path(sys.argv[1]))
