"""check() in IPython (and so in JupyterLab's kernel): the report once, no
Out[n] line with the result's repr, and check(id) with no answers saying
what the exercise takes rather than raising."""

from __future__ import annotations

import re

import pytest

IPython = pytest.importorskip("IPython")


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("from mlbook.exercises import check")
    yield shell
    InteractiveShell.clear_instance()


def run(shell, capsys, source: str) -> str:
    """What the cell shows, less the terminal's empty "Out[n]: " prompt
    (ipykernel writes no prompt: it sends an execute_result only when the
    value has something to display, which JupyterLab shows as Out[n])."""
    capsys.readouterr()
    result = shell.run_cell(source, store_history=True)  # as ipykernel runs a cell
    out = capsys.readouterr()
    assert result.error_in_exec is None, out.err
    return re.sub(r"Out\[\d+\]: $", "", out.out + out.err)


def test_a_cell_ending_in_check_shows_the_report_once(shell, capsys):
    shown = run(shell, capsys, 'check("mfu-1", mfu=0.49, mfu_6n=0.4906)')
    assert shown.count("mfu-1: 1 of 2 right.") == 1, shown
    assert "<check" not in shown and "Out[" not in shown, shown
    # what ipykernel sends as the cell's result: nothing
    capsys.readouterr()
    data, _ = shell.display_formatter.format(shell.user_ns["_"])
    assert data == {}


def test_the_result_shown_later_prints_its_report(shell, capsys):
    first = run(shell, capsys, 'r = check("mfu-1", mfu=0.49, mfu_6n=0.4906)')
    assert first.count("mfu-1: 1 of 2 right.") == 1
    again = run(shell, capsys, "r")
    assert again.count("mfu-1: 1 of 2 right.") == 1 and "<check" not in again
    assert run(shell, capsys, "repr(r)").strip() == '"<check mfu-1: wrong>"' or (
        "<check mfu-1: wrong>" in run(shell, capsys, "print(repr(r))")
    )


def test_check_with_no_answers_says_what_it_takes(shell, capsys):
    shown = run(shell, capsys, 'check("mfu-1")')
    lines = shown.strip().splitlines()
    assert lines[0] == "mfu-1 takes:", shown
    assert lines[-1] == 'Call check("mfu-1", mfu=..., mfu_6n=...)'
    assert "Error" not in shown and "Traceback" not in shown and "<check" not in shown
