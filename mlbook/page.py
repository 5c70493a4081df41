"""Helpers for the pages: put computed values into the prose with myst-nb glue."""

from __future__ import annotations

from dataclasses import dataclass, field


class Text:
    """A string to glue as text.

    myst-nb's {glue:text} role runs ast.literal_eval on the stored text/plain,
    which would turn "1,024" into the tuple (1, 24) and "1.0000" into 1.0; a
    quoted Python literal comes back exactly as written.
    """

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return repr(self.text)


def glue(name: str, value, fmt: str | None = None) -> None:
    """Glue ``value`` under ``name`` without showing it in the cell.

    With ``fmt`` (a format spec such as ".1%" or ",.0f") the formatted text is
    glued and the page writes {glue:text}`name`; a string is glued as it is.
    Without ``fmt`` a number is glued raw and the page may format it in the
    role ({glue:text}`name:.2f`). Returns None, so that a glue call ending a
    cell prints nothing.
    """
    from myst_nb import glue as _glue

    if fmt is not None:
        value = Text(format(value, fmt))
    elif isinstance(value, str):
        value = Text(value)
    _glue(name, value, display=False)


@dataclass
class Report:
    """What one page cell shows: lines to print and values to glue.

    A chapter's report functions build one (``say`` a line, ``put`` a value
    with its format spec) so the cell that calls them stays a line or two:
    ``report.show()`` prints the lines and glues every value.
    """

    lines: list = field(default_factory=list)
    values: dict = field(default_factory=dict)   # name -> (value, format spec or None)

    def say(self, text: str) -> None:
        self.lines.append(text)

    def put(self, name: str, value, fmt: str | None = None) -> None:
        self.values[name] = (value, fmt)

    def print(self) -> None:
        for line in self.lines:
            print(line)

    def show(self) -> None:
        self.print()
        for name, (value, fmt) in self.values.items():
            glue(name, value, fmt)
