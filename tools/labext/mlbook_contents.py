"""JupyterLab's contents manager for the book: a page opened, run and saved
unedited keeps every byte; an edited page is written as the book writes it.

JupyterLab saves a notebook as JSON (its autosave every two minutes, once the
kernel's start has marked the notebook changed), and jupytext writes that back
as MyST text. Its writer differs from the pages in ways that say nothing: it
adds a blank line after a code cell's ``:tags:`` options, collapses a doubled
blank line in the prose, and gets the kernelspec JupyterLab sets from the
running kernel ("Python 3 (ipykernel)" for the pages' "Python 3"). So:

- a notebook whose text, written out, equals the page's own text written out
  the same way is not written at all (the reader changed nothing the text
  format holds: outputs, execution counts and metadata it does not keep
  don't count);
- the kernelspec on disk is kept while the kernel's name is the same;
- an edited page keeps the page's own text wherever the notebook did not
  change (a cell's options as the page writes them, a doubled blank line),
  and is written as jupytext writes it only where it did, without the blank
  line after a code cell's options, as the pages write them
  (tools/format_pages.py reads them so); a page with no front matter
  (book/notation.md) gets none.

The notebook metadata the text keeps (the build's ``mlbook:`` keys, no
jupytext version) is jupytext's own configuration, ``jupytext.toml`` at the
repository's root. tools/lab_settings.py (make install) makes this class
JupyterLab's contents manager in the venv's Jupyter config.
"""

from __future__ import annotations

import copy
import difflib
import re

import nbformat
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext import reads, writes
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class
from jupytext.config import notebook_formats

_Jupytext = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)

_FENCE = re.compile(r"^(`{3,})\{code-cell\}")
_OPTION = re.compile(r"^:[A-Za-z][\w-]*:")


def _cells(nb) -> list:
    """What the text format holds of each cell."""
    return [
        (c.cell_type, c.source, {k: v for k, v in c.metadata.items()}) for c in nb.cells
    ]


def house_style(text: str, fmt: dict | None = None) -> str:
    """``text`` (jupytext's MyST) without the blank line jupytext writes
    between a code cell's ``:key: value`` options and its source, where the
    source's first line cannot be read as an option. Returned unchanged if
    the result would read as a different notebook."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        fence = _FENCE.match(lines[i])
        i += 1
        if not fence:
            continue
        had_options = False
        while i < len(lines) and _OPTION.match(lines[i]):
            out.append(lines[i])
            had_options = True
            i += 1
        if (
            had_options
            and i + 1 < len(lines)
            and lines[i] == ""
            and lines[i + 1] not in ("", fence.group(1), "---")
            and not lines[i + 1].startswith(":")
        ):
            i += 1  # the blank line
    styled = "\n".join(out)
    fmt = fmt or "md:myst"
    if _cells(reads(styled, fmt=fmt)) != _cells(reads(text, fmt=fmt)):
        return text
    return styled


def _without_header(text: str) -> str:
    """``text`` without its YAML front matter and the blank line after it."""
    if not text.startswith("---\n"):
        return text
    end = text.find("\n---\n", 3)
    return text if end < 0 else text[end + 5 :].lstrip("\n")


def page_text(nb, fmt, config, header: bool = True) -> str:
    """The notebook as a page of the book: jupytext's text in the house style,
    with or without front matter."""
    text = house_style(writes(nb, fmt=fmt, config=config), fmt)
    return text if header else _without_header(text)


def _boundary(opcodes, i: int) -> int | None:
    """Where the boundary before line ``i`` of the first text falls in the
    second, by ``opcodes`` between them (None inside a changed block)."""
    for tag, a1, a2, b1, b2 in opcodes:
        if tag == "equal" and a1 <= i <= a2:
            return b1 + (i - a1)
        if i == a1:
            return b1
        if i == a2:
            return b2
    return None


def kept_text(page: str, old: str, new: str) -> str | None:
    """``new`` (the edited notebook written out) with the page's own lines
    wherever the notebook did not change: ``old`` is the page's notebook
    written out the same way, ``page`` the page as it is. None when a change
    touches lines the page writes its own way (the caller writes ``new``)."""
    a, o, b = old.split("\n"), page.split("\n"), new.split("\n")
    to_page = difflib.SequenceMatcher(None, a, o, autojunk=False).get_opcodes()
    out = []
    for tag, a1, a2, b1, b2 in difflib.SequenceMatcher(
        None, a, b, autojunk=False
    ).get_opcodes():
        if tag != "equal":
            out += b[b1:b2]
            continue
        start, end = _boundary(to_page, a1), _boundary(to_page, a2)
        if start is None or end is None:
            return None
        out += o[start:end]
    return "\n".join(out)


def _same_notebook(text: str, other: str, fmt) -> bool:
    x, y = reads(text, fmt=fmt), reads(other, fmt=fmt)
    return _cells(x) == _cells(y) and x.metadata == y.metadata


class PageContentsManager(_Jupytext):
    """jupytext's contents manager that does not rewrite an unedited page."""

    async def save(self, model, path=""):
        path = path.strip("/")
        if (
            model.get("type") != "notebook"
            or model.get("content") is None
            or path.endswith(".ipynb")
            or not await self.file_exists(path)
        ):
            return await super().save(model, path)
        config = await self.get_config(path)
        nb = nbformat.from_dict(copy.deepcopy(model["content"]))
        formats = notebook_formats(nb, config, path)
        if len(formats) != 1 or formats[0].get("extension") == ".ipynb":
            return await super().save(model, path)  # paired: jupytext's way
        fmt = formats[0]
        on_disk = (
            await AsyncLargeFileManager.get(self, path, type="file", format="text")
        )["content"]
        try:
            old = reads(on_disk, fmt=fmt, config=config)
        except Exception:  # not readable as this format: jupytext's way
            return await super().save(model, path)
        kernel, kept = nb.metadata.get("kernelspec"), old.metadata.get("kernelspec")
        if kernel and kept and kernel.get("name") == kept.get("name"):
            nb.metadata["kernelspec"] = kept
        header = on_disk.startswith("---\n")
        text = page_text(nb, fmt, config, header)
        if text == page_text(old, fmt, config, header):
            self.log.info("Unchanged, not written: %s", path)
            return await self.get(path, content=False)
        kept = kept_text(on_disk, page_text(old, fmt, config, header), text)
        if kept is not None and _same_notebook(kept, text, fmt):
            text = kept
        self.log.info("Saving %s", path)
        return await AsyncLargeFileManager.save(
            self, {"type": "file", "format": "text", "content": text}, path
        )
