"""How a page shows its results: tables and glued values.

Two helpers, and nothing else in the package touches the page:

- ``table(rows, ...)`` turns rows of results into a pandas Styler, which
  JupyterLab and the HTML book both render as an HTML ``<table>``: units go
  in the column names, and the unit sets the format (a "(%)" column shows
  fractions as percentages; other numbers get thousands separators and four
  significant digits), with an optional caption.
- ``glue_values(**values)`` glues each named value for the prose
  (``{glue:text}`name```) with ``display=False``, one call per cell. It glues
  only what it is handed (numbers and short labels) and computes nothing; the
  cell shows the same numbers in its table or printed line. The values
  also stay in this process (``GLUED``), where JupyterLab's book extension
  reads them to show the prose's numbers (mlbook.prose), and, in JupyterLab,
  in the page's own values file (mlbook.common.book_values), which the
  JupyterLab tests compare with the HTML book's.

Neither chooses words: captions and column names come from the page.
"""

from __future__ import annotations

import numbers
import re

MAX_LABEL_WORDS = (
    8  # a glued string is a label ("AMD EPYC (2 threads)"), not a sentence
)
GLUED: dict[str, int | float | str] = {}  # every value glued in this process


def _plain(name: str, value):
    """``value`` as a plain int, float or str, or a TypeError/ValueError that
    names the glue and the rule."""
    if isinstance(value, bool):
        raise TypeError(
            f"glue {name!r}: {value!r} is a bool; glue a number or a short label"
        )
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        if len(value.split()) > MAX_LABEL_WORDS or re.search(r"[.;]\s|[.;]$", value):
            raise ValueError(
                f"glue {name!r}: {value!r} reads like a sentence; glue numbers and "
                f"short labels (at most {MAX_LABEL_WORDS} words, no full stop) and "
                "write the sentence on the page"
            )
        return value
    raise TypeError(
        f"glue {name!r}: {type(value).__name__} {value!r} is neither a number nor "
        "a label"
    )


def glue_values(**values) -> None:
    """Glue every keyword as ``{glue:text}`name``` for the page's prose,
    without displaying it (the cell's table or printed line shows it).

    numpy scalars become plain ints and floats; a bool, a container or a
    sentence is refused with the name of the glue."""
    from myst_nb import glue

    from mlbook.common.book_values import record_lab_values

    plain = {name: _plain(name, value) for name, value in values.items()}
    for name, value in plain.items():
        glue(name, value, display=False)
    GLUED.update(plain)
    record_lab_values(plain)


def _number(value) -> str:
    """A table cell's default text: integers with thousands separators,
    reals with four significant digits (thousands separated from 1,000 up)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{value:,}"
    if value != value:  # NaN
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _percent(value) -> str:
    """A fraction shown as a percentage, to a tenth of a per cent."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    return "-" if value != value else f"{value:.1%}"


def unit_format(header: str):
    """The format a column's unit implies: a header that ends in "(%)" holds
    fractions shown as percentages ("share (%)": 0.1234 shows as 12.3%);
    every other number gets thousands separators and four significant
    digits. A page names its columns with their units and needs no format
    of its own."""
    return _percent if str(header).rstrip().endswith("(%)") else _number


def _records(rows, columns) -> list[dict]:
    """Rows as dicts. ``rows`` are dicts or objects (dataclasses: properties
    work too); ``columns`` picks and names them: a list of keys or
    attributes, or a dict header -> key, attribute or function of the row."""
    rows = list(rows)
    if columns is None:
        if rows and not isinstance(rows[0], dict):
            raise TypeError("table: rows that are objects need columns=[...]")
        return rows
    spec = columns if isinstance(columns, dict) else {c: c for c in columns}

    def get(row, how):
        if callable(how):
            return how(row)
        return row[how] if isinstance(row, dict) else getattr(row, how)

    return [{header: get(row, how) for header, how in spec.items()} for row in rows]


def table(
    rows,
    columns=None,
    caption: str | None = None,
    formats: dict | None = None,
    index=None,
):
    """Rows of results as a table that renders as HTML.

    ``rows``: a DataFrame, a dict of columns, or a list of rows (dicts whose
    keys are the column names, units in them: "step (ms)"; or objects such as
    dataclasses, with ``columns``). ``columns`` picks and names the columns:
    a list of keys/attributes, or a dict header -> key, attribute or function.
    Each column's format follows its unit (``unit_format``: "share (%)"
    shows fractions as percentages); ``formats``, for the package's own
    tables, maps a column to a format string or callable instead.
    ``index`` names a column to use as the row labels; otherwise the index
    is hidden. Returns a pandas Styler: make it the cell's last
    expression.
    """
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        frame = rows
    elif isinstance(rows, dict):
        frame = pd.DataFrame(rows)
    else:
        frame = pd.DataFrame(_records(rows, columns))
    if frame.empty:
        raise ValueError("table: no rows to show")
    unknown = set(formats or {}) - set(frame.columns)
    if unknown:
        raise ValueError(
            f"table: formats name columns {sorted(unknown)} that are not among "
            f"{list(frame.columns)}"
        )
    if index is not None:
        frame = frame.set_index(index)
    chosen = formats or {}
    styler = frame.style.format(
        {col: chosen.get(col, unit_format(col)) for col in frame.columns}, na_rep="-"
    )
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    styler = styler.set_properties(subset=numeric, **{"text-align": "right"})
    styler = styler.set_table_styles(
        [
            {
                "selector": f"th.col{frame.columns.get_loc(c)}",
                "props": "text-align: right",
            }
            for c in numeric
        ],
        overwrite=False,
    )
    if index is None:
        styler = styler.hide(axis="index")
    if caption:
        styler = styler.set_caption(caption)
    return styler
