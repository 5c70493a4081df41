"""Reading another page's glued values."""

import json
import os
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import book_values

PROPERTY_COVERS = {
    "mlbook.common.book_values.page_values",
    "mlbook.common.book_values.record_lab_values",
}


def test_reads_the_build_folder_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "mfu.json").write_text(json.dumps({"x": 1.5, "label": "H100"}))
    monkeypatch.setenv(book_values.VALUES_ENV, str(tmp_path))
    assert book_values.page_values("mfu") == {"x": 1.5, "label": "H100"}
    with pytest.raises(FileNotFoundError, match="depends_on"):
        book_values.page_values("faults")


def test_falls_back_to_the_last_make_book(tmp_path, monkeypatch):
    monkeypatch.delenv(book_values.VALUES_ENV, raising=False)
    monkeypatch.setenv(book_values.LAB_VALUES_ENV, str(tmp_path / "lab"))
    monkeypatch.setattr(book_values, "BOOK_VALUES", tmp_path)
    with pytest.raises(FileNotFoundError, match="make book"):
        book_values.page_values("mfu")
    (tmp_path / "mfu.json").write_text(json.dumps({"x": 2}))
    assert book_values.page_values("mfu") == {"x": 2}


def test_missing_values_name_the_page_to_run_first(tmp_path, monkeypatch):
    """In JupyterLab the intro and the interview say which page to run, in one
    line: IPython shows what _render_traceback_ returns instead of a traceback."""
    monkeypatch.delenv(book_values.VALUES_ENV, raising=False)
    monkeypatch.setenv(book_values.LAB_VALUES_ENV, str(tmp_path / "lab"))
    monkeypatch.setattr(book_values, "BOOK_VALUES", tmp_path / "book")
    for page, source in [
        ("capstone", "notebooks/capstone.md"),
        ("input_pipeline", "notebooks/input_pipeline.md"),
        ("plan", "book/plan.md"),
    ]:
        with pytest.raises(book_values.MissingPageValues) as caught:
            book_values.page_values(page)
        assert f"open {source} in JupyterLab and run all its cells" in str(caught.value)
        shown = caught.value._render_traceback_()
        assert len(shown) == 1 and source in shown[0]


def test_a_page_run_in_jupyterlab_is_read_by_the_pages_that_quote_it(
    tmp_path, monkeypatch
):
    lab, book = tmp_path / "lab", tmp_path / "book"
    monkeypatch.delenv(book_values.VALUES_ENV, raising=False)
    monkeypatch.setenv(book_values.LAB_VALUES_ENV, str(lab))
    monkeypatch.setattr(book_values, "BOOK_VALUES", book)
    monkeypatch.setattr(book_values, "_recorded", {})
    monkeypatch.delenv(book_values.SESSION_ENV, raising=False)
    assert book_values.record_lab_values({"x": 1}) is None  # not in a Jupyter kernel
    monkeypatch.setenv(book_values.SESSION_ENV, "/somewhere/notebooks/capstone.md")
    path = book_values.record_lab_values({"ladder_speedup": 3.5, "device": "CPU"})
    book_values.record_lab_values({"ladder_final_mfu": 0.25})
    assert path == lab / "capstone.json"
    expected = {"ladder_speedup": 3.5, "device": "CPU", "ladder_final_mfu": 0.25}
    assert book_values.page_values("capstone") == expected
    # an older make book loses to the newer JupyterLab run, a newer one wins
    book.mkdir()
    (book / "capstone.json").write_text(json.dumps({"ladder_speedup": 9.0}))
    os.utime(book / "capstone.json", ns=(1, 1))
    assert book_values.page_values("capstone") == expected
    os.utime(book / "capstone.json")
    os.utime(path, ns=(1, 1))
    assert book_values.page_values("capstone") == {"ladder_speedup": 9.0}
    # under the build, values stay the build's own
    monkeypatch.setenv(book_values.VALUES_ENV, str(tmp_path / "build"))
    assert book_values.record_lab_values({"x": 1}) is None


@examples(30)
@given(
    st.lists(
        st.dictionaries(
            st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
            st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
            max_size=4,
        ),
        max_size=4,
    )
)
def test_recorded_values_are_every_cells_glue_merged(cells):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.delenv(book_values.VALUES_ENV, raising=False)
        mp.setenv(book_values.LAB_VALUES_ENV, tmp)
        mp.setenv(book_values.SESSION_ENV, "/x/notebooks/faults.ipynb")
        mp.setattr(book_values, "_recorded", {})
        merged = {}
        for cell in cells:
            book_values.record_lab_values(cell)
            merged.update(cell)
        if cells:
            assert book_values.page_values("faults") == json.loads(json.dumps(merged))


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
