"""tools/build.py --repeat: pages executed again and again, the pass counts,
the spread of every asserted quantity, and the watchdogs that say where a run
that stopped answering stopped.

The repeated pages are a tiny synthetic book in a temporary folder (as in
test_build.py), whose one asserted quantity is the run's own number (read
from a counter file), so every spread below is known before the run.
"""

import json
from pathlib import Path

import pytest
from test_build import HEAD, PACKAGE, write_tree

from bookbuild import cli, execution, paths, repeat

COUNTED = """\
import os
from pathlib import Path
from myst_nb import glue
counter = Path(os.environ["REPEAT_TEST_COUNTER"])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
glue("c_run", n, display=False)
glue("c_run_at_most", 1, display=False)
glue("c_spare", 2.5, display=False)
assert n <= 1, f"run {n} is past the bar"
"""

STUCK = """\
import subprocess, time
helper = subprocess.Popen(["sleep", "20"])
def waiting_for_nothing():
    time.sleep(60)
waiting_for_nothing()
"""


def page(name: str, code: str, extra: str = "") -> str:
    return HEAD.format(name=name, extra=extra, prose="Prose.", code=code)


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    write_tree(tmp_path, PACKAGE)
    write_tree(
        tmp_path,
        {
            "notebooks/c.md": page("c", COUNTED),
            "notebooks/h.md": page("h", STUCK),
            "_config.yml": "title: t\n",
            "_toc.yml": "format: jb-book\nroot: notebooks/c\n",
        },
    )
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("REPEAT_TEST_COUNTER", str(tmp_path / "counter"))
    return tmp_path


def quiet(*_):
    pass


# --- naming and summing up (no kernels) --------------------------------------------


def test_asserted_quantities_are_the_glued_pairs():
    glued = {
        "res": 0.03,
        "res_at_most": 0.05,
        "vs_ceiling": 0.7,
        "vs_ceiling_at_least": 0.6,
        "slowdown": 1.4,
        "slowdown_above": 1,
        "gap": 2,
        "gap_below": 3,
        "orphan_at_most": 1.0,  # its quantity was not glued
        "label_at_most": 1.0,
        "label": "fast",  # not a number
        "_at_most": 4,  # no name before the suffix
    }
    assert repeat.asserted(glued) == {
        "res": ("<=", 0.05, 0.03),
        "vs_ceiling": (">=", 0.6, 0.7),
        "slowdown": (">", 1, 1.4),
        "gap": ("<", 3, 2),
    }


@pytest.mark.parametrize(
    "relation, value, bar, expected",
    [
        ("<=", 5, 5, True),
        ("<", 5, 5, False),
        (">=", 5, 5, True),
        (">", 5, 5, False),
        ("<=", 5.1, 5, False),
        (">", 1.01, 1, True),
    ],
)
def test_holds(relation, value, bar, expected):
    assert repeat.holds(relation, value, bar) is expected


def run_record(seconds, error=None, stalls=None, **glued):
    return {
        "seconds": seconds,
        "error": error,
        "retry": None,
        "values": glued,
        "stalls": stalls or [],
    }


def test_summary_counts_passes_spreads_and_misses():
    runs = [
        run_record(10.0, q=0.01, q_at_most=0.05),
        run_record(30.0, q=0.04, q_at_most=0.05),
        run_record(20.0, "AssertionError: q", q=0.07, q_at_most=0.05),
        run_record(12.0, "RuntimeError: before the glue"),
    ]
    s = repeat.summarise(runs, budget_s=25)
    assert (s["runs"], s["passed"], s["over_budget"]) == (4, 2, 1)
    assert s["seconds"] == {"min": 10.0, "median": 16.0, "max": 30.0}
    q = s["quantities"]["q"]
    assert (q["n"], q["relation"], q["bar"], q["missed"]) == (3, "<=", 0.05, 1)
    assert (q["min"], q["median"], q["max"]) == (0.01, 0.04, 0.07)
    assert [f["run"] for f in s["failures"]] == [2, 3]


def test_a_bar_that_differs_between_runs_is_reported_as_its_range():
    runs = [run_record(1.0, q=1, q_at_least=b) for b in (0.5, 0.7)]
    assert repeat.summarise(runs, 5)["quantities"]["q"]["bar"] == [0.5, 0.7]


def write_logs(folder: Path, client: list[str], kernel: list[str]) -> Path:
    folder.mkdir()
    (folder / "client.txt").write_text("\n".join(client) + "\n")
    (folder / "kernel-42.txt").write_text("\n".join(kernel) + "\n")
    return folder


def test_diagnosis_of_a_reply_the_client_lost(tmp_path):
    logs = write_logs(
        tmp_path / "s",
        ["10:00:00.000 notebook cell 3 sent", "10:00:01.000 notebook cell 3 replied"]
        + ["10:00:01.000 notebook cell 5 sent, timeout 300 s"],
        [
            "10:00:01.000 code cell 2 started: x = 1",
            "10:00:02.000 code cell 2 finished ok",
        ],
    )
    said = repeat.diagnose(logs)
    assert "notebook cell 5" in said and "lost the reply" in said


def test_diagnosis_of_a_kernel_still_in_its_cell(tmp_path):
    logs = write_logs(
        tmp_path / "s",
        ["10:00:01.000 notebook cell 5 sent, timeout 300 s", "10:05:02.000 gave up"],
        [
            "10:00:01.000 code cell 2 started: fork_group(...)",
            "Thread 0x00007f (most",
            "10:05:01.500 code cell 2 finished with an error",  # the interrupt
        ],
    )
    said = repeat.diagnose(logs)
    assert "still in it" in said and "fork_group" in said and "stacks" in said


def test_no_diagnosis_when_every_cell_was_answered(tmp_path):
    logs = write_logs(
        tmp_path / "s",
        ["10:00:01.000 notebook cell 5 sent", "10:00:02.000 notebook cell 5 replied"],
        [],
    )
    assert repeat.diagnose(logs) is None


def test_a_reply_seen_long_after_the_kernel_finished_is_a_stall(tmp_path):
    logs = write_logs(
        tmp_path / "s",
        [
            "10:00:00.000 notebook cell 1 sent, timeout 300 s",
            "10:00:00.100 notebook cell 1 replied",
            "10:00:00.200 notebook cell 3 sent, timeout 300 s",
            "10:05:00.200 notebook cell 3 replied",  # the poll timeout found it
        ],
        [
            "10:00:00.010 code cell 1 started: x = 1",
            "10:00:00.050 code cell 1 finished ok",
            "10:00:00.210 code cell 2 started: live_figure(...)",
            "10:00:01.700 code cell 2 finished ok",
        ],
    )
    assert repeat.stalls(logs) == [[2, 298.5]]
    runs = [run_record(300.0, stalls=[[2, 298.5]]), run_record(2.0, stalls=[])]
    s = repeat.summarise(runs, 60)
    assert (s["stalled"], s["longest_stall_s"]) == (1, 298.5)


def test_the_retry_flags_go_with_repeat_only():
    with pytest.raises(SystemExit):
        cli.main(["--plain"])


# --- real runs of the synthetic pages --------------------------------------------


def test_repeat_reports_passes_and_the_spread_of_what_failed(synthetic):
    dest = synthetic / "_build" / "rep"
    report = repeat.repeat(dest, True, 3, ["c"], log=quiet)
    c = report["pages"]["c"]
    assert (c["runs"], c["passed"]) == (3, 2)
    q = c["quantities"]["c_run"]  # the failing run glued its value before failing
    assert (q["n"], q["min"], q["median"], q["max"], q["missed"]) == (3, 0, 1, 2, 1)
    assert (q["relation"], q["bar"]) == ("<=", 1)
    assert "c_spare" not in c["quantities"]  # glued without a bar: not asserted
    assert [f["run"] for f in c["failures"]] == [2]
    assert "run 2 is past the bar" in c["failures"][0]["error"]
    assert c["failures"][0]["diagnosis"] is None  # it failed; it did not hang
    assert json.loads((dest / "repeat.json").read_text())["pages"]["c"]["passed"] == 2
    assert (dest / "runs" / "c" / "2" / "c.ipynb").exists()
    assert (dest / "runs" / "c" / "2" / "stacks" / "client.txt").exists()
    assert not (dest / "runs" / "c" / "0" / "stacks").exists()  # passed: no logs kept
    text = repeat.table(report)
    assert "2/3" in text and "c_run" in text and "run 2 failed" in text


def test_a_stuck_cell_is_reported_with_the_kernels_stacks(synthetic, monkeypatch):
    monkeypatch.setattr(execution, "CELL_TIMEOUT_S", 6)
    monkeypatch.setenv("MLBOOK_CELL_WATCHDOG_S", "2")
    dest = synthetic / "_build" / "rep"
    report = repeat.repeat(dest, True, 1, ["h"], retry=False, log=quiet)
    assert report["mode"] == "build, no retry"
    h = report["pages"]["h"]
    assert h["passed"] == 0 and "CellTimeoutError" in h["failures"][0]["error"]
    assert h["retried"] == 0
    assert "still in it" in h["failures"][0]["diagnosis"]
    (log,) = (dest / "runs" / "h" / "0" / "stacks").glob("kernel-*.txt")
    text = log.read_text()
    assert "waiting_for_nothing" in text  # the kernel's main thread, where it waits
    assert "sleep 20" in text  # its child, listed with its state


def test_the_build_retries_a_stuck_page_once_and_says_so(synthetic, monkeypatch):
    monkeypatch.setattr(execution, "CELL_TIMEOUT_S", 3)
    report = repeat.repeat(synthetic / "_build" / "rep", True, 1, ["h"], log=quiet)
    h = report["pages"]["h"]
    assert h["retried"] == 1 and h["passed"] == 0
    assert report["mode"] == "build (retry, work-around)"


def test_in_the_build_papermill_writes_the_notebook_once_at_the_end(tmp_path):
    import nbformat
    from papermill.engines import NotebookExecutionManager

    def manager(name):
        cell = nbformat.v4.new_code_cell("1 + 1")
        nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("x")])
        nb.metadata.papermill = {}  # as papermill's execute_notebook prepares it
        out = tmp_path / name
        return NotebookExecutionManager(nb, str(out), progress_bar=False), cell, out

    original = NotebookExecutionManager.save
    with execution._written_at_the_end_only():
        man, cell, out = manager("build.ipynb")
        man.notebook_start()
        man.cell_start(cell, 0)
        man.cell_complete(cell, 0)
        assert not out.exists()  # nothing written while it runs
        man.notebook_complete()
        assert nbformat.read(out, as_version=4).metadata.papermill["end_time"]
    assert NotebookExecutionManager.save is original  # plain papermill again
    man, cell, out = manager("plain.ipynb")
    man.notebook_start()
    assert out.exists()  # papermill's own: written as the run starts
