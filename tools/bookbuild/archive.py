"""The archive of mlbook's torch-free modules that the HTML book's live
figures import in the reader's browser (book/_extra/vendor/live.js unpacks it
into Pyodide on a page's first interaction).

Which modules are torch-free is the naming rule tests/test_layering.py
enforces: everything but ``mlbook/common_torch/``, ``mlbook/plotting/`` and,
in a chapter package, ``experiments*.py``, ``*_script.py`` and
``figures.py``. The zip is deterministic (sorted names, a fixed date), so an
unchanged package gives an unchanged archive and the HTML build can be
reused."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from . import paths

NAME = "mlbook-py.zip"  # served as <book>/vendor/mlbook-py.zip
WHERE = Path("book") / "_extra" / "vendor"  # in the staged sources
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold


def in_browser(relative: Path) -> bool:
    """Is the package file at ``relative`` (to the repository) torch-free?"""
    parts = relative.with_suffix("").parts
    leaf = parts[-1]
    return not (
        (len(parts) > 2 and parts[1] in ("common_torch", "plotting"))
        or leaf.startswith("experiments")
        or leaf.endswith("_script")
        or leaf == "figures"
    )


def modules(root: Path | None = None) -> list[Path]:
    """The torch-free modules, relative to the repository, sorted."""
    root = root or paths.ROOT
    package = root / paths.PACKAGE
    found = (
        p.relative_to(root)
        for p in package.rglob("*.py")
        if "__pycache__" not in p.parts
    )
    return sorted(p for p in found if in_browser(p))


def archive_bytes(root: Path | None = None) -> bytes:
    root = root or paths.ROOT
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in modules(root):
            info = zipfile.ZipInfo(rel.as_posix(), date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, (root / rel).read_bytes())
    return buffer.getvalue()


def write(src: Path) -> Path:
    """The archive, into the staged sources ``src`` (html_extra_path serves it)."""
    dest = src / WHERE / NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(archive_bytes())
    return dest
