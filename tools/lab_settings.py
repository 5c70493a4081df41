"""JupyterLab as the book needs it: the MyST chapters open as notebooks, and
their prose shows the numbers, citations and references the HTML book shows.

- Jupytext gives .md notebooks a notebook icon; a settings override (in the
  venv's share/jupyter/lab/settings) makes "Jupytext Notebook" their default
  viewer.
- The book's JupyterLab extension, tools/labext/prose.js (plain JavaScript, no
  build step; its header says how it works), is installed as a prebuilt
  extension, "mlbook-prose", in the venv's share/jupyter/labextensions. Its
  file name carries a hash of its content, so a browser never keeps an old one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

EXTENSION = "mlbook-prose"
LABEXT = Path(__file__).resolve().parent / "labext"
SOURCE = LABEXT / "prose.js"
CONTENTS_MANAGER = "mlbook_contents.PageContentsManager"
SERVER_CONFIG = "jupyter_server_config.py"


def install_extension(labextensions: Path) -> Path:
    """Install the extension into ``labextensions`` (a share/jupyter/
    labextensions folder); returns its folder."""
    code = SOURCE.read_bytes()
    entry = f"static/remoteEntry.{hashlib.sha256(code).hexdigest()[:20]}.js"
    folder = labextensions / EXTENSION
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "static").mkdir(parents=True)
    (folder / entry).write_bytes(code)
    package = {
        "name": EXTENSION,
        "version": "1.0.0",
        "description": "The book's glued numbers, citations and references as "
        "text in JupyterLab's rendered markdown",
        "jupyterlab": {
            "extension": True,
            "_build": {"load": entry, "extension": "./extension"},
        },
    }
    (folder / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    return folder


def open_text_notebooks(settings_dir: Path) -> Path:
    """Make "Jupytext Notebook" the default viewer of .md files."""
    override = settings_dir / "overrides.json"
    settings = json.loads(override.read_text()) if override.exists() else {}
    settings.setdefault("@jupyterlab/docmanager-extension:plugin", {}).setdefault(
        "defaultViewers", {}
    ).update({"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"})
    override.parent.mkdir(parents=True, exist_ok=True)
    override.write_text(json.dumps(settings, indent=2))
    return override


def save_pages_as_written(config_dir: Path, labext: Path = LABEXT) -> Path:
    """A Jupyter server config in ``config_dir`` (an etc/jupyter folder) that
    makes tools/labext/mlbook_contents.py's class the contents manager."""
    config = config_dir / SERVER_CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# Written by tools/lab_settings.py (make install): a page opened, run\n"
        "# and saved unedited keeps every byte (tools/labext/mlbook_contents.py).\n"
        "import sys\n\n"
        f"sys.path.insert(0, {str(labext)!r})\n"
        f"c.ServerApp.contents_manager_class = {CONTENTS_MANAGER!r}  # noqa: F821\n"
    )
    tmp = config.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(config)
    return config


if __name__ == "__main__":
    share = Path(sys.prefix) / "share" / "jupyter"
    override = open_text_notebooks(share / "lab" / "settings")
    print(f"lab_settings: .md chapters open as notebooks ({override})")
    folder = install_extension(share / "labextensions")
    print(f"lab_settings: the prose shows glued values ({folder})")
    config = save_pages_as_written(Path(sys.prefix) / "etc" / "jupyter")
    print(f"lab_settings: a page saved unedited keeps every byte ({config})")
