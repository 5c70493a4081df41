"""mlbook.show: result tables render as HTML tables with the page's formats,
and glue_values glues plain numbers and short labels only."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook import show

PROPERTY_COVERS = {
    "mlbook.show.table",
    "mlbook.show.glue_values",
    "mlbook.show.unit_format",
}


def cells(styler) -> list[str]:
    return re.findall(r"<t[dh][^>]*>([^<]*)</t[dh]>", styler.to_html())


def test_rows_become_an_html_table_with_formats_and_caption():
    rows = [
        {"run": "a", "step (ms)": 1234.5, "MFU": 0.4123, "GPUs": 16384},
        {"run": "b", "step (ms)": 0.01234, "MFU": 0.05, "GPUs": 8},
    ]
    s = show.table(rows, caption="two runs", formats={"MFU": "{:.1%}"})
    html = s.to_html()
    assert "<table" in html and "<caption>two runs</caption>" in html
    # default: thousands separators, four significant digits; the page's format wins
    assert cells(s) == ["run", "step (ms)", "MFU", "GPUs", "a", "1,234", "41.2%",
                        "16,384", "b", "0.01234", "5.0%", "8"]  # fmt: skip


def test_numbers_are_right_aligned_and_text_is_not():
    html = show.table([{"name": "x", "n": 1.5}]).to_html()
    assert re.search(r"th\.col1 \{\s*text-align: right", html)
    assert "th.col0" not in html


def test_objects_need_columns_which_pick_and_name_them():
    @dataclass(frozen=True)
    class Row:
        name: str
        step_s: float

        @property
        def step_ms(self) -> float:
            return self.step_s * 1e3

    rows = [Row("a", 0.5), Row("b", 0.25)]
    with pytest.raises(TypeError, match="columns"):
        show.table(rows)
    s = show.table(rows, {"run": "name", "step (ms)": "step_ms", "x2": lambda r: 2})
    assert cells(s) == ["run", "step (ms)", "x2", "a", "500", "2", "b", "250", "2"]
    assert cells(show.table(rows, ["name"])) == ["name", "a", "b"]


def test_nan_shows_as_a_dash_and_bad_tables_are_refused():
    assert cells(show.table({"x": [1.0, float("nan")]})) == ["x", "1", "-"]
    with pytest.raises(ValueError, match="no rows"):
        show.table([])
    with pytest.raises(ValueError, match=r"\['y'\].*not among"):
        show.table([{"x": 1}], formats={"y": "{:.1f}"})


def test_glue_values_glues_plain_values_without_displaying(monkeypatch):
    import myst_nb

    got = []
    monkeypatch.setattr(
        myst_nb, "glue", lambda name, value, display: got.append((name, value, display))
    )
    show.glue_values(a=np.float64(0.5), b=np.int64(3), c="AMD EPYC (2 threads)", d=7)
    assert got == [
        ("a", 0.5, False),
        ("b", 3, False),
        ("c", "AMD EPYC (2 threads)", False),
        ("d", 7, False),
    ]
    assert type(got[0][1]) is float and type(got[1][1]) is int


@pytest.mark.parametrize(
    "value, error",
    [
        (True, "bool"),
        ([1, 2], "neither a number nor a label"),
        ("The step is slow.", "reads like a sentence"),
        ("one two three four five six seven eight nine", "reads like a sentence"),
    ],
)
def test_glue_values_refuses_what_is_not_a_number_or_a_label(monkeypatch, value, error):
    import myst_nb

    got = []
    monkeypatch.setattr(myst_nb, "glue", lambda *a, **k: got.append(a))
    with pytest.raises((TypeError, ValueError), match=error) as info:
        show.glue_values(fine=1.0, bad=value)
    assert "'bad'" in str(info.value)
    assert got == []  # nothing is glued when one value is refused


# --- properties -------------------------------------------------------------------


@examples(50)
@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)
)
def test_a_number_shows_as_itself_to_four_figures(x):
    (text,) = cells(show.table({"x": [x]}))[1:]
    shown = float(text.replace(",", ""))
    # four significant digits below 1,000; whole numbers (thousands separated) above
    tolerance = 0.5 if abs(x) >= 1000 else 5e-4 * abs(x) + 1e-300
    assert abs(shown - x) <= tolerance * (1 + 1e-9)


@examples(50)
@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.sampled_from(["share (%)", "MFU (%)", "of the step (%) "]),
)
def test_a_percent_column_shows_a_hundred_times_the_fraction(x, header):
    (text,) = cells(show.table({header: [x]}))[1:]
    assert text.endswith("%")
    shown = float(text[:-1].replace(",", ""))
    assert abs(shown - 100 * x) <= 0.05 * (1 + 1e-9) + 1e-9 * abs(100 * x)
    assert show.unit_format(header)(x) == text


@examples(50)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
        st.one_of(
            st.integers(-(10**12), 10**12),
            st.floats(allow_nan=False, allow_infinity=False),
            st.from_regex(r"[A-Za-z0-9 ()%/-]{0,30}", fullmatch=True),
        ),
        max_size=6,
    )
)
def test_glue_values_glues_each_value_once_unchanged(values):
    import myst_nb

    labels_ok = all(
        not isinstance(v, str) or len(v.split()) <= show.MAX_LABEL_WORDS
        for v in values.values()
    )
    got = []
    original = myst_nb.glue
    myst_nb.glue = lambda name, value, display: got.append((name, value, display))
    try:
        if labels_ok:
            show.glue_values(**values)
            assert got == [(k, v, False) for k, v in values.items()]
        else:
            with pytest.raises(ValueError, match="sentence"):
                show.glue_values(**values)
            assert got == []
    finally:
        myst_nb.glue = original


def test_a_percent_column_shows_fractions_as_percentages_without_a_format():
    html = show.table(
        [{"share (%)": 0.12345, "step (ms)": 1234.5, "label": "x"}]
    ).to_html()
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert cells == ["12.3%", "1,234", "x"]  # 0.12345 -> 12.3 %; 4 figures
    assert show.unit_format("share (%) ")(float("nan")) == "-"
    # a format the page gives still wins over the unit's
    html = show.table([{"share (%)": 0.5}], formats={"share (%)": "{:.0%}"}).to_html()
    assert re.findall(r"<td[^>]*>([^<]*)</td>", html) == ["50%"]
