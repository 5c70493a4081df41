"""Properties of mlbook.common.stacks, the markers by which the build's kernel
watchdog finds the processes it may ask for their stacks. The truth here is
the kernel's own /proc/<pid>/stat, read independently of the module."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import stacks

PROPERTY_COVERS = {
    "mlbook.common.stacks.folder",
    "mlbook.common.stacks.start_time",
    "mlbook.common.stacks.on_request",
    "mlbook.common.stacks.marked",
}

PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())


def _field_22(pid: int) -> str:
    """proc(5): the 22nd field of /proc/<pid>/stat is starttime; the 2nd,
    the command, is in parentheses and may hold spaces."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split(" ")[22 - 3]


@examples(30)
@given(
    st.text(
        st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=40,
    )
)
def test_folder_is_the_named_one_or_none(value):
    old = os.environ.get(stacks.STACKS_ENV)
    try:
        os.environ[stacks.STACKS_ENV] = value
        assert stacks.folder() == Path(value)
        os.environ[stacks.STACKS_ENV] = ""
        assert stacks.folder() is None
    finally:
        if old is None:
            os.environ.pop(stacks.STACKS_ENV, None)
        else:
            os.environ[stacks.STACKS_ENV] = old


@examples(30)
@given(st.integers(min_value=PID_MAX + 1, max_value=10 * PID_MAX))
def test_start_time_is_the_kernels_for_a_live_process_and_none_for_no_process(pid):
    assert stacks.start_time(os.getpid()) == _field_22(os.getpid())
    assert stacks.start_time(os.getppid()) == _field_22(os.getppid())
    assert stacks.start_time(pid) is None  # above pid_max: no such process


@examples(30)
@given(
    st.text(min_size=0, max_size=20).filter(lambda r: not r or "/" in r)
    | st.text(min_size=0, max_size=8).map(lambda r: r + "/x")
)
def test_on_request_refuses_a_role_that_is_not_a_plain_name(role):
    with pytest.raises(ValueError, match="role must be a plain name"):
        stacks.on_request(role)


@examples(30)
@given(st.text("0123456789 abc", max_size=12))
def test_marked_only_with_this_process_start_time(other):
    mine = _field_22(os.getpid())
    with tempfile.TemporaryDirectory() as d:
        where = Path(d)
        assert not stacks.marked(os.getpid(), where)  # no marker at all
        marker = where / f"sigusr1-{os.getpid()}"
        marker.write_text(f"{other} rank0\n")
        assert stacks.marked(os.getpid(), where) == (other.split()[:1] == [mine])
        marker.write_text(f"{mine} rank0\n")
        assert stacks.marked(os.getpid(), where)
        assert not stacks.marked(os.getppid(), where)  # another pid's marker


def test_on_request_marks_a_process_in_the_named_folder():
    """In a fresh interpreter (faulthandler stays registered in it): the
    marker holds the process's start time and role, and marked() says so."""
    with tempfile.TemporaryDirectory() as d:
        code = (
            "import os; from mlbook.common import stacks; "
            "m = stacks.on_request('rank3'); "
            "print(os.getpid(), m.read_text().strip(), "
            "stacks.marked(os.getpid(), m.parent))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, stacks.STACKS_ENV: d},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out[2:] == ["rank3", "True"]
        assert (Path(d) / f"sigusr1-{out[0]}").exists()
