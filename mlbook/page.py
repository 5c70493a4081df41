"""Helpers for the pages: put computed values into the prose with myst-nb glue."""

from __future__ import annotations


class Text:
    """A string that glues without quotes ({glue:text} shows its repr)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def glue(name: str, value, fmt: str | None = None):
    """Glue ``value`` under ``name`` without showing it in the cell.

    With ``fmt`` (a format spec such as ".1%" or ",.0f") the formatted text is
    glued, so the page writes {glue:text}`name`; without it, the raw number is
    glued and the page may format it in the role ({glue:text}`name:.2f`).
    Returns the value, so a cell can glue and keep computing.
    """
    from myst_nb import glue as _glue

    _glue(name, Text(format(value, fmt)) if fmt else value, display=False)
    return value
