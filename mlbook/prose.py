"""The book's prose roles as the text the HTML book shows, for JupyterLab.

The HTML build resolves a page's MyST roles: myst-nb pastes each
``{glue:text}`name:spec``` from the values the page glued, sphinxcontrib-bibtex
writes each ``{cite}`` in its author-year style ("[Young, 1974]"), and Sphinx
writes a ``{ref}`` or ``{doc}`` to another page as the target's title.
JupyterLab renders one notebook at a time with jupyterlab-myst, which knows
none of them and shows names, keys and labels instead. The book's JupyterLab
extension (tools/labext/) sends the roles of the markdown it renders to the
kernel as a user expression, ``texts(request)``, and shows what comes back:

- a glued value, once the cell that glues it has run in this kernel
  (``mlbook.show.glue_values`` keeps it in ``GLUED``), formatted by myst-nb's
  own ``format_plain_text`` from the value's ``text/plain``, as the HTML is;
- a citation from book/references.bib, as the HTML book's style writes it;
- a reference to a label on another page (a chapter, a section, an
  exercise) as that target's title, read from the pages under notebooks/
  and book/; a label on the page itself is left to jupyterlab-myst;
- a page's chapter number, as the HTML book numbers its chapters (_toc.yml's
  numbered part) and so its equations ("(5.1)"); "" for a page outside it.

Nothing here writes to the page; a role it cannot resolve is left out of the
answer, and the extension keeps showing the role's name.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository, where book/ lives
BIB = ROOT / "book" / "references.bib"
TOC = ROOT / "_toc.yml"
PAGE_DIRS = (ROOT / "notebooks", ROOT / "book")

# sphinxcontrib-bibtex's author_year style, as _config.yml sets it: a
# parenthetical citation in brackets, "author, year", keys of one role
# separated by ", ", three or more authors as "First et al.", two as "A and B"
BRACKETS = ("[", "]")
KEY_SEP = ", "
AUTHOR_YEAR_SEP = ", "


def glue_text(body: str, glued: dict) -> str | None:
    """``{glue:text}`body``` ("name" or "name:spec") as myst-nb pastes it:
    the value's text/plain through myst-nb's ``format_plain_text``. None when
    ``name`` has not been glued or the spec does not apply to the value."""
    from IPython.core.formatters import format_display_data
    from myst_nb.core.variables import format_plain_text

    key, spec = body.rsplit(":", 1) if ":" in body else (body, "s")
    if key not in glued:
        return None
    mimebundle, _ = format_display_data(glued[key])  # as myst_nb.glue records it
    try:
        return format_plain_text(mimebundle["text/plain"], spec)
    except (ValueError, TypeError):
        return None


@lru_cache(maxsize=4)
def _bibliography(path: str, mtime_ns: int) -> dict[str, str]:
    """The entries of a .bib file in the HTML book's bibliography order
    (pybtex's author_year_title sorting): key -> "Author, year"."""
    from pybtex.database import parse_file
    from pybtex.plugin import find_plugin

    entries = parse_file(path).entries
    sorting = find_plugin("pybtex.style.sorting", "author_year_title")()
    # one text backend for every name: render_as("text") looks the plugin up
    # in every installed package's entry points each time, 70 ms a name here
    text = find_plugin("pybtex.backends", "text")()
    return {e.key: _author_year(e, text) for e in sorting.sort(list(entries.values()))}


def _last_names(entry, first: int, text) -> tuple[list[str], int]:
    """The last names of the entry's first ``first`` authors (or editors),
    rendered by the pybtex backend ``text``, and how many there are."""
    from pybtex.richtext import Text

    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [
        Text.from_latex(" ".join(p.prelast_names + p.last_names)).render(text)
        for p in persons[:first]
    ]
    return names, len(persons)


def _author_year(entry, text) -> str:
    """ "Young, 1974", "Kaplan et al., 2020" or "A and B, 2021": the label
    the HTML book's author-year style gives one entry."""
    names, count = _last_names(entry, 2, text)
    if not names:
        from pybtex.richtext import Text

        who = Text.from_latex(entry.fields.get("title", entry.key)).render(text)
    elif count == 1:
        who = names[0]
    elif count == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}{AUTHOR_YEAR_SEP}{entry.fields.get('year', '')}"


def citation(keys: str, bib: Path = BIB) -> str | None:
    """``{cite}`keys``` (comma-separated) as the HTML book writes it: the
    entries in bibliography order, "[Hoffmann et al., 2022, Kaplan et al.,
    2020]". None when a key is not in ``bib``."""
    if not bib.exists():
        return None
    entries = _bibliography(str(bib), bib.stat().st_mtime_ns)
    wanted = {k.strip() for k in keys.split(",") if k.strip()}
    if not wanted or not wanted <= set(entries):
        return None
    cited = [label for key, label in entries.items() if key in wanted]
    return BRACKETS[0] + KEY_SEP.join(cited) + BRACKETS[1]


_TARGET = re.compile(r"^\(([^()\s]+)\)=[ \t]*\n+(#+)[ \t]+(.+)$", re.M)
_TITLE = re.compile(r"^#[ \t]+(.+)$", re.M)
_LABEL = re.compile(r"^:label:[ \t]*(\S+)[ \t]*$", re.M)


def _plain(heading: str) -> str:
    """A heading's text without its inline markup (code, math, emphasis)."""
    return re.sub(r"[`*$]", "", heading).strip()


@lru_cache(maxsize=64)
def _page_targets(path: str, mtime_ns: int) -> tuple[str | None, dict[str, str]]:
    """A page's title and its labels: label -> the text a reference shows
    (a section's heading; "Exercise <label>" for an exercise's label)."""
    source = Path(path).read_text()
    title = _TITLE.search(source)
    found = {m.group(1): _plain(m.group(3)) for m in _TARGET.finditer(source)}
    for m in _LABEL.finditer(source):
        found.setdefault(m.group(1), f"Exercise {m.group(1)}")
    return (_plain(title.group(1)) if title else None), found


def _pages() -> dict[str, tuple[str | None, dict[str, str]]]:
    """stem -> (title, labels) for every page of the book."""
    pages = {}
    for folder in PAGE_DIRS:
        for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
            pages[path.stem] = _page_targets(str(path), path.stat().st_mtime_ns)
    return pages


def reference(label: str, page: str) -> str | None:
    """``{ref}`label``` (or ``{ref}`text <label>```) read on ``page``: the
    title of the label's target when it is on another page, else None (the
    page's own targets are jupyterlab-myst's to resolve)."""
    explicit = re.fullmatch(r"(.+?)\s*<([^<>]+)>", label.strip())
    if explicit:
        return explicit.group(1)
    for stem, (_, labels) in _pages().items():
        if stem != page and label in labels:
            return labels[label]
    return None


def document(target: str) -> str | None:
    """``{doc}`target``` (a page's stem or relative path): that page's title."""
    explicit = re.fullmatch(r"(.+?)\s*<([^<>]+)>", target.strip())
    if explicit:
        return explicit.group(1)
    entry = _pages().get(Path(target).stem)
    return entry[0] if entry else None


@lru_cache(maxsize=4)
def _numbered(path: str, mtime_ns: int) -> dict[str, str]:
    """stem -> chapter number for the pages of _toc.yml's numbered parts.
    Each part is a toctree of its own, and Sphinx numbers every numbered
    toctree from 1."""
    import yaml

    toc = yaml.safe_load(Path(path).read_text()) or {}
    numbers = {}
    for part in toc.get("parts", []):
        if part.get("numbered"):
            for n, chapter in enumerate(part.get("chapters", []), start=1):
                numbers[Path(chapter["file"]).stem] = str(n)
    return numbers


def _chapter(page: str, toc: Path = TOC) -> str:
    """The page's chapter number ("5"), or "" for a page not numbered."""
    if not toc.exists():
        return ""
    return _numbered(str(toc), toc.stat().st_mtime_ns).get(Path(page).stem, "")


class Texts(dict):
    """The answer to a request: "role`body" -> text. JupyterLab receives it as
    JSON (application/json) through IPython's display formatter."""

    def _repr_json_(self):
        return dict(self)


def texts(request: str) -> Texts:
    """The texts for a JSON request ``{"page": stem, "roles": [[role, body],
    ...]}`` (role: "glue:text", "cite", "ref" or "doc"), each under
    "role`body"; roles that cannot be resolved are left out."""
    from mlbook.show import GLUED

    asked = json.loads(request)
    page = str(asked.get("page", ""))
    resolvers = {
        "glue:text": lambda body: glue_text(body, GLUED),
        "cite": citation,
        "ref": lambda body: reference(body, page),
        "doc": document,
        "chapter": _chapter,
    }
    answer = Texts()
    for role, body in asked.get("roles", []):
        if role in resolvers and f"{role}`{body}" not in answer:
            text = resolvers[role](body)
            if text is not None:
                answer[f"{role}`{body}"] = text
    return answer
