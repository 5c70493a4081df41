"""Reading another page's glued values."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import book_values

PROPERTY_COVERS = {"mlbook.common.book_values.page_values"}


def test_reads_the_build_folder_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "mfu.json").write_text(json.dumps({"x": 1.5, "label": "H100"}))
    monkeypatch.setenv(book_values.VALUES_ENV, str(tmp_path))
    assert book_values.page_values("mfu") == {"x": 1.5, "label": "H100"}
    with pytest.raises(FileNotFoundError, match="depends_on"):
        book_values.page_values("faults")


def test_falls_back_to_the_last_make_book(tmp_path, monkeypatch):
    monkeypatch.delenv(book_values.VALUES_ENV, raising=False)
    monkeypatch.setattr(book_values, "BOOK_VALUES", tmp_path)
    with pytest.raises(FileNotFoundError, match="make book"):
        book_values.page_values("mfu")


@examples(30)
@given(
    st.one_of(
        st.just(""),
        st.just("../etc"),
        st.just(".hidden"),
        st.integers(),
        st.none(),
        st.booleans(),
    )
)
def test_bad_page_names_are_refused(page):
    with pytest.raises(ValueError, match="page"):
        book_values.page_values(page)
