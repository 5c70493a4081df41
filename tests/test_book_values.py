"""A page run in JupyterLab keeps its own glued values (and nothing reads
another page's)."""

import json
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import book_values

PROPERTY_COVERS = {"mlbook.common.book_values.record_lab_values"}


def test_a_page_run_in_jupyterlab_keeps_its_own_values(tmp_path, monkeypatch):
    lab = tmp_path / "lab"
    monkeypatch.setenv(book_values.LAB_VALUES_ENV, str(lab))
    monkeypatch.setattr(book_values, "_recorded", {})
    monkeypatch.delenv(book_values.SESSION_ENV, raising=False)
    assert book_values.record_lab_values({"x": 1}) is None  # not in a Jupyter kernel
    assert not lab.exists()
    monkeypatch.setenv(book_values.SESSION_ENV, "/somewhere/notebooks/capstone.md")
    path = book_values.record_lab_values({"ladder_speedup": 3.5, "device": "CPU"})
    book_values.record_lab_values({"ladder_final_mfu": 0.25})
    assert path == lab / "capstone.json"
    expected = {"ladder_speedup": 3.5, "device": "CPU", "ladder_final_mfu": 0.25}
    assert json.loads(path.read_text()) == expected


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
        mp.setenv(book_values.LAB_VALUES_ENV, tmp)
        mp.setenv(book_values.SESSION_ENV, "/x/notebooks/faults.ipynb")
        mp.setattr(book_values, "_recorded", {})
        merged = {}
        for cell in cells:
            book_values.record_lab_values(cell)
            merged.update(cell)
        if cells:
            path = f"{tmp}/faults.json"
            assert json.loads(open(path).read()) == json.loads(json.dumps(merged))
