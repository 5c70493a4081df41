"""A page opened, run and saved in JupyterLab keeps every byte, and an edited
page keeps the build's front matter.

A Jupyter server of the test's own, with the contents manager and jupytext
settings `make install` installs (tools/lab_settings.py,
tools/labext/mlbook_contents.py, jupytext.toml), serves a copy of every page.
Each page is fetched as JupyterLab fetches it (GET /api/contents, as a
notebook) and saved as JupyterLab saves it after a run (PUT of the notebook
JSON with the kernelspec JupyterLab sets from the running kernel, the
kernel's language_info, execution counts and outputs): the file must be
byte-identical and not written at all. A page with one cell edited is saved
with that line changed and nothing else but blank lines, its `mlbook:` keys
and kernelspec as they were, and the build reads the same keys from it.
"""

from __future__ import annotations

import copy
import difflib
import shutil
import sys
from pathlib import Path

import jupytext
import pytest

from helpers.lab import api, jupyter_server, server_config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "labext"))

from mlbook_contents import house_style  # noqa: E402

PAGES = sorted((ROOT / "notebooks").glob("*.md")) + sorted((ROOT / "book").glob("*.md"))
# What JupyterLab 4.6 writes into a notebook's metadata once its kernel runs
# (ipykernel's kernel.json and kernel_info reply)
KERNELSPEC = {
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "name": "python3",
}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": "3.11.2",
}


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server on a copy of the pages and jupytext.toml; yields (base,
    token, root of the copy)."""
    tmp = tmp_path_factory.mktemp("lab-roundtrip")
    root, home = tmp / "root", tmp / "jupyter"
    for page in PAGES:
        (root / rel(page)).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "jupytext.toml", root / "jupytext.toml")
    server_config(home)
    with jupyter_server(root, home, app="jupyter_server") as (base, token):
        yield base, token, root


def fresh(server, page: Path) -> Path:
    """The page copied from the repository into the server's folder."""
    file = server[2] / rel(page)
    shutil.copy2(page, file)
    return file


def opened(server, path: str) -> dict:
    base, token, _ = server
    model = api(base, token, "GET", f"/api/contents/{path}?type=notebook&content=1")
    assert model["type"] == "notebook", f"{path} did not open as a notebook: {model}"
    return model["content"]


_OPENED: dict[str, dict] = {}


def opened_fresh(server, page: Path) -> tuple[str, Path, dict]:
    """The page copied fresh into the server's folder, and its notebook as
    JupyterLab opens it: fetched once a run, as the tests below open the
    same bytes (a copy each time)."""
    path, file = rel(page), fresh(server, page)
    if path not in _OPENED:
        _OPENED[path] = opened(server, path)
    return path, file, copy.deepcopy(_OPENED[path])


def saved(server, path: str, nb: dict) -> dict:
    base, token, _ = server
    body = {"type": "notebook", "format": "json", "content": nb}
    return api(base, token, "PUT", f"/api/contents/{path}", body)


def as_run(nb: dict) -> dict:
    """The notebook as JupyterLab holds it after Run All."""
    nb = copy.deepcopy(nb)
    nb["metadata"]["kernelspec"] = dict(KERNELSPEC)
    nb["metadata"]["language_info"] = dict(LANGUAGE_INFO)
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            count += 1
            cell["execution_count"] = count
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": f"{count}\n"}
            ]
            cell["metadata"]["trusted"] = True
    return nb


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_a_page_saved_unedited_keeps_every_byte(server, page):
    path, file, nb = opened_fresh(server, page)
    before, stat = page.read_bytes(), file.stat()
    # saved after Run All, as autosave does: the notebook as opened with all
    # a run changes on top (kernelspec, language_info, counts, outputs); a
    # save of it as opened, the same rule with fewer changes, took the
    # server 0.2-0.4 s more a chapter here
    saved(server, path, as_run(nb))
    assert file.read_bytes() == before, f"{path} changed on save:\n" + "\n".join(
        difflib.unified_diff(
            before.decode().splitlines(),
            file.read_text().splitlines(),
            lineterm="",
            n=1,
        )
    )
    assert file.stat().st_mtime_ns == stat.st_mtime_ns, f"{path} was rewritten"


def first_code_line(nb: dict) -> tuple[int, str]:
    """The first code cell with a line to edit, and that line."""
    for i, cell in enumerate(nb["cells"]):
        lines = cell["source"].split("\n")
        if cell["cell_type"] == "code" and lines[0].strip():
            return i, lines[0]
    pytest.skip("no code cell")


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if "```{code-cell}" in p.read_text()],
    ids=rel,
)
def test_an_edit_changes_its_line_and_keeps_the_front_matter(server, page):
    from bookbuild.pages import front_matter

    path, file, nb = opened_fresh(server, page)
    before = page.read_text()
    keys = front_matter(file).get("mlbook")
    nb = as_run(nb)
    i, line = first_code_line(nb)
    edited = line + "  # a reader's note"
    nb["cells"][i]["source"] = nb["cells"][i]["source"].replace(line, edited, 1)
    saved(server, path, nb)
    after = file.read_text()
    diff = [
        d
        for d in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0)
        if d[:1] in "+-" and not d.startswith(("+++", "---"))
    ]
    assert f"-{line}" in diff and f"+{edited}" in diff, diff
    others = [d for d in diff if d not in (f"-{line}", f"+{edited}")]
    assert not others, f"{path}: saving one edited line changed others: {others}"
    assert front_matter(file).get("mlbook") == keys, f"{path}: mlbook keys changed"
    assert after.split("\n---\n")[0] == before.split("\n---\n")[0], (
        f"{path}: the front matter changed"
    )


def test_every_mlbook_key_survives_an_edit(server):
    """Whatever keys a page's `mlbook:` holds (the build's budget_s,
    runs_alone, depends_on, or one added later), a save keeps them."""
    _, _, root = server
    page = root / "notebooks" / "keys.md"
    header = (
        "---\njupytext:\n  text_representation:\n    extension: .md\n"
        "    format_name: myst\nkernelspec:\n  display_name: Python 3\n"
        "  language: python\n  name: python3\nmlbook:\n  budget_s: 45\n"
        "  runs_alone: true\n  depends_on: [mfu, cadence]\n  later_key: x\n---\n"
    )
    page.write_text(
        header
        + "\n# Keys\n\n```{code-cell} ipython3\n:tags: [hide-input]\nx = 1\n```\n"
    )
    nb = as_run(opened(server, "notebooks/keys.md"))
    nb["cells"][-1]["source"] = "x = 2"
    saved(server, "notebooks/keys.md", nb)
    text = page.read_text()
    assert text.startswith(header), text[:400]
    assert ":tags: [hide-input]\nx = 2\n```" in text, text


def test_house_style():
    """jupytext's blank line after a code cell's options goes, except where
    the source's first line would read as an option."""
    jt = (
        "```{code-cell} ipython3\n:tags: [hide-input]\n\nx = 1\n```\n\n"
        "```{code-cell} ipython3\n:tags: [x]\n\n:not_an_option: 1\n```\n"
    )
    assert house_style(jt) == (
        "```{code-cell} ipython3\n:tags: [hide-input]\nx = 1\n```\n\n"
        "```{code-cell} ipython3\n:tags: [x]\n\n:not_an_option: 1\n```\n"
    )
    for text in (jt, house_style(jt)):
        nb = jupytext.reads(text, fmt="md:myst")
        assert [c.source for c in nb.cells] == ["x = 1", ":not_an_option: 1"]


def test_a_new_cell_is_added_as_the_pages_write_cells(server):
    """A code cell a reader adds, with a tag, comes out as the pages write
    one (its options, then its source, no blank line between), and nothing
    else in the page changes."""
    page = ROOT / "book" / "plan.md"
    path, file, nb = opened_fresh(server, page)
    nb = as_run(nb)
    i, _ = first_code_line(nb)
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"tags": ["hide-input"]},
        "outputs": [],
        "source": "x = 1",
    }
    nb["cells"].insert(i + 1, cell)
    saved(server, path, nb)
    block = "```{code-cell} ipython3\n:tags: [hide-input]\nx = 1\n```\n\n"
    text = file.read_text()
    assert text.count(block) == 1, text
    assert text.replace(block, "", 1) == page.read_text()
