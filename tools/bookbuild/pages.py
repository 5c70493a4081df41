"""Which pages there are: the executable pages (the chapters in notebooks/
and the book/ pages whose front matter names a kernel), their front matter
(``mlbook: budget_s`` and ``runs_alone``), the order they start in, the
staging copy of the book's sources, and the title-only stub of a page left
out of a partial build. Every page stands alone: none reads another's
values, so any page executes in any order, or by itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from . import archive, paths

DEFAULT_BUDGET_S = 60.0
# What each page took in a fresh clone's `make test` here: the order pages
# start in where this machine has not run them all yet (start_order)
TYPICAL_SECONDS = Path(__file__).with_name("page_seconds.json")


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


def chapters(only: list[str] | None = None) -> list[Path]:
    """Executable pages: the chapters in notebooks/, then the executable pages
    of book/ (the root is one). With ``only``, just the pages named there (a
    partial build stubs the others, the root included)."""
    found = sorted((paths.ROOT / "notebooks").glob("*.md")) + sorted(
        p for p in (paths.ROOT / "book").glob("*.md") if is_notebook(p)
    )
    if only:
        names = {p.stem for p in found}
        missing = set(only) - names
        if missing:
            raise SystemExit(
                f"no executable page named {sorted(missing)}; pages: {sorted(names)}"
            )
        found = [p for p in found if p.stem in only]
    return found


def runs_alone(page: Path) -> bool:
    """``mlbook: runs_alone: true``: with --jobs above 1, the page starts only
    when no other page is running and no page starts while it runs (a page
    whose measurements another page on the next core disturbs: the
    capstone's profiled steps against its unprofiled ones)."""
    meta = front_matter(page).get("mlbook") or {}
    value = meta.get("runs_alone", False)
    if not isinstance(value, bool):
        raise SystemExit(f"{page.name}: mlbook: runs_alone must be true or false")
    return value


def start_order(order: list[Path], measured: dict[str, float]) -> list[Path]:
    """The pages of ``order`` in the order to start them: the pages that run
    alone first, then the longest first, so that no long page starts last
    while the other cores have nothing left to run. How long a page takes is
    what ``measured`` (the cache's record of this machine) says where it
    knows every page, else page_seconds.json; a page neither names goes
    last."""
    names = [p.stem for p in order]
    if all(n in measured for n in names):
        seconds = measured
    else:
        seconds = json.loads(TYPICAL_SECONDS.read_text())
    return sorted(
        order,
        key=lambda p: (not runs_alone(p), -float(seconds.get(p.stem, -1.0))),
    )


def budget_s(page: Path) -> float:
    """A page's execution budget at reader sizes on an idle 2-core machine:
    ``mlbook: budget_s: N`` in its front matter, else DEFAULT_BUDGET_S."""
    meta = front_matter(page).get("mlbook") or {}
    return float(meta.get("budget_s", DEFAULT_BUDGET_S))


def stage(dest: Path) -> Path:
    """A fresh copy of the book's sources under dest/src, notebooks excluded,
    and the archive of mlbook's torch-free modules (bookbuild.archive)."""
    src = dest / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in paths.BOOK_FILES:
        shutil.copy(paths.ROOT / name, src / name)
    for name in paths.BOOK_DIRS:
        if not (paths.ROOT / name).exists():
            raise SystemExit(
                f"{name}/ is missing; run `make install` (it fetches _vendor/)"
            )
        shutil.copytree(
            paths.ROOT / name,
            src / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    for page in chapters():  # executable pages arrive executed, as .ipynb
        (src / page.relative_to(paths.ROOT)).unlink(missing_ok=True)
    (src / "notebooks").mkdir(exist_ok=True)
    archive.write(src)  # what the live figures import in the reader's browser
    return src


EXERCISE_LABEL = re.compile(r"^(?:`{3,}|:{3,})\{exercise\}.*\n:label:\s*(\S+)", re.M)


def stub_page(page: Path, out_dir: Path) -> None:
    """A chapter reduced to its first cell (label and title), unexecuted, so
    that a partial build still resolves every cross-reference to it; its
    exercises' labels stay too, as headings (the interview page links them)."""
    import jupytext
    import nbformat

    nb = jupytext.read(page)
    lines = nb.cells[0].source.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    nb.cells = [nbformat.v4.new_markdown_cell("\n".join(lines[: title + 1]))]
    labels = EXERCISE_LABEL.findall(page.read_text())
    if labels:
        targets = "\n\n".join(f"({x})=\n## Exercise {x}" for x in labels)
        nb.cells.append(nbformat.v4.new_markdown_cell(targets))
    nbformat.write(nb, out_dir / f"{page.stem}.ipynb")
