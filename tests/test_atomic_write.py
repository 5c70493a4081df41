"""The one atomic write (mlbook.common.files.write_atomic) that the machine
file, the checkpointer's ``latest`` pointer and the book's build use: the
file is the new one whole or the old one untouched, and no temporary file is
left either way. (tests/test_kill_anywhere.py kills a checkpoint save at every
step of it.)"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common.files import write_atomic

PROPERTY_COVERS = {"mlbook.common.files.write_atomic"}


@examples(20)
@given(
    data=st.one_of(st.text(max_size=200), st.binary(max_size=200)),
    old=st.one_of(st.none(), st.binary(max_size=50)),
    name=st.sampled_from(["m.json", "x y.json", "latest", ".hidden"]),
)
def test_an_atomic_write_leaves_exactly_the_file(data, old, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        if old is not None:
            path.write_bytes(old)
        assert write_atomic(str(path), data) == path
        want = data.encode() if isinstance(data, str) else data
        assert path.read_bytes() == want  # text as it is: no newline translation
        assert [p.name for p in Path(tmp).iterdir()] == [name]


class Boom(Exception):
    pass


def test_a_failed_write_leaves_no_file_and_no_temporary(tmp_path, monkeypatch):
    def broken(fd):
        raise Boom

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(Boom):
        write_atomic(tmp_path / "m.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_replaced_whole_or_left_untouched(tmp_path, monkeypatch):
    path = tmp_path / "m.json"
    path.write_text("old")
    real_replace = os.replace

    def broken(a, b):
        raise Boom

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(Boom):
        write_atomic(path, "new")
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    monkeypatch.setattr(os, "replace", real_replace)
    write_atomic(path, "new\r\n")
    assert path.read_bytes() == b"new\r\n" and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("bad", [None, 3, ["a"], {"a": 1}])
def test_what_is_not_text_or_bytes_is_refused_before_anything_is_written(tmp_path, bad):
    with pytest.raises(ValueError, match="^data must be str or bytes, got"):
        write_atomic(tmp_path / "m.json", bad)
    assert list(tmp_path.iterdir()) == []
