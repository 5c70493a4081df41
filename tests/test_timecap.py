"""The time cap (tests/helpers/timecap.py), run on a small suite of its own:
a slow test and a slow shared fixture fail by name, a session fixture is
reported and not capped, shared fixtures' time is not charged to the tests
that use them, and a session whose times were not recorded fails."""

import json
from pathlib import Path

import pytest

from helpers.timecap import DurationCap, OwnTime

TESTS = Path(__file__).resolve().parent

SUITE = """
import time
import pytest

@pytest.fixture(scope="session")
def book():
    time.sleep(1.6)  # over the cap: a session fixture is exempt

@pytest.fixture(scope="module")
def shared():
    time.sleep(0.7)  # with the test's own 0.5 s, over the cap if charged to it
    yield
    time.sleep(0.7)

@pytest.fixture
def own_slow():
    time.sleep(1.3)  # a function fixture is the test's own time

def test_fast(book):
    time.sleep(0.1)

def test_slow():
    time.sleep(1.3)

def test_with_shared(shared):
    time.sleep(0.5)

def test_with_own_slow_fixture(own_slow):
    pass

def test_fails_and_is_slow():
    time.sleep(1.3)
    assert False, "its own failure"
"""

SLOW_MODULE_FIXTURE = """
import time
import pytest

@pytest.fixture(scope="module")
def heavy():
    time.sleep(1.3)

def test_uses_heavy(heavy):
    pass
"""


@pytest.fixture
def run(pytester, monkeypatch):
    def go(source, *extra):
        pytester.makepyfile(test_suite=source)
        # under xdist (-n) the workers are other processes: pytest runs in a
        # subprocess, with tests/ on the path for helpers.timecap
        monkeypatch.setenv("PYTHONPATH", str(TESTS))
        runpytest = pytester.runpytest_subprocess if extra else pytester.runpytest
        # its own rootdir: an ini file that happens to sit in /tmp (above
        # pytester's folder) would otherwise become the root and lengthen ids
        return runpytest(
            *extra,
            "-p",
            "helpers.timecap",
            "--test-cap-s",
            "1.0",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(pytester.path),
        )

    return go


def test_slow_tests_fail_by_name_and_shared_fixtures_are_timed_apart(run):
    result = run(SUITE)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2 and outcomes.get("failed") == 3, outcomes
    out = result.stdout.str()
    assert (
        "FAILED test_suite.py::test_slow - Failed: test_suite.py::test_slow took 1."
        in out
    )
    assert "over the 1 s cap for one test" in out
    assert "FAILED test_suite.py::test_with_own_slow_fixture" in out
    # a test's own failure is kept, and its time is named beside it
    assert "AssertionError: its own failure" in out
    assert "test_fails_and_is_slow took 1." in out
    # the module fixture's 1.4 s are not the test's; the session fixture is exempt
    assert "test_with_shared" not in out.split("short test summary")[1]
    assert "test_fast" not in out.split("short test summary")[1]
    summary = out.split("ten slowest tests")[1]
    assert "test_suite.py::test_slow" in summary
    assert "set-up   book (session)" in summary
    assert "teardown shared (module)" in summary
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_under_xdist_the_controller_fails_reports_and_writes_every_time(run, pytester):
    """Two xdist workers measure; the controller, which sees only their
    reports, fails the slow tests by name, summarises and writes the times."""
    times = pytester.path / "times.json"
    result = run(SUITE, "-n", "2", "--test-times", str(times))
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2 and outcomes.get("failed") == 3, outcomes
    out = result.stdout.str()
    assert "test_suite.py::test_slow took 1." in out
    summary = out.split("ten slowest tests")[1]
    assert "set-up   book (session)" in summary
    assert "OVER THE TIME CAP: test_suite.py::test_slow took 1." in out
    recorded = json.loads(times.read_text())
    assert sorted(recorded["tests"]) == [
        f"test_suite.py::{name}"
        for name in (
            "test_fails_and_is_slow",
            "test_fast",
            "test_slow",
            "test_with_own_slow_fixture",
            "test_with_shared",
        )
    ]
    assert recorded["tests"]["test_suite.py::test_slow"] >= 1.3
    assert {f[0] for f in recorded["fixtures"]} >= {"book", "shared"}
    # when each ended, and where: after the slow test's own time, in a worker
    ended = recorded["ended"]
    assert set(ended) == set(recorded["tests"])
    assert {w for _, w in ended.values()} <= {"gw0", "gw1"}
    assert ended["test_suite.py::test_slow"][0] >= 1.3
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_slow_shared_fixture_fails_naming_it(run):
    result = run(SLOW_MODULE_FIXTURE)
    assert result.parseoutcomes() == {"errors": 1}  # failed in its set-up
    result.stdout.fnmatch_lines(
        ["*fixture 'heavy' (module scope*) took 1.* s to set up, over the 1 s cap*"]
    )


def test_a_fast_suite_passes(run):
    result = run("def test_quick():\n    pass\n")
    assert result.ret == pytest.ExitCode.OK
    assert "ten slowest tests" in result.stdout.str()


def test_times_that_were_not_recorded_fail_the_session():
    cap = DurationCap(60.0)
    cap.ran = {"t.py::a", "t.py::b"}
    cap.tests = {"t.py::a": OwnTime("t.py::a", {"set-up": 0.0, "call": 0.0})}
    problems = cap.problems(session_s=5.0)
    assert any("1 of 2 tests ran without a recorded time" in p for p in problems)
    assert any("nothing was measured" in p for p in problems)
    cap.tests["t.py::b"] = OwnTime("t.py::b", {"call": 0.2})
    assert cap.problems(session_s=5.0) == []
    with pytest.raises(ValueError, match="test-cap-s"):
        DurationCap(0)
