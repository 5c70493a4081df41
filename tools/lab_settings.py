"""Make JupyterLab open the MyST chapters as notebooks on a double click.

Jupytext gives .md notebooks a notebook icon; this settings override (in the
venv's share/jupyter/lab/settings) makes "Jupytext Notebook" their default
viewer.
"""

import json
import sys
from pathlib import Path

override = (
    Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
)
settings = json.loads(override.read_text()) if override.exists() else {}
settings.setdefault("@jupyterlab/docmanager-extension:plugin", {}).setdefault(
    "defaultViewers", {}
).update({"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"})
override.parent.mkdir(parents=True, exist_ok=True)
override.write_text(json.dumps(settings, indent=2))
print(f"lab_settings: .md chapters open as notebooks ({override})")
