"""A pytest plugin that holds every test to a time cap (60 s at test sizes).

Each test's own time is what its set-up, call and teardown phases took, less
the set-up and teardown of the fixtures it shares with other tests (class,
module, package or session scope), which are timed on their own. A test over
the cap fails, naming itself and its time; a shared fixture over the cap fails
the test whose set-up (or teardown) ran it, naming the fixture. Session
fixtures (the book build, the browser, JupyterLab) are exempt: their times are
reported, not capped.

The terminal summary lists the ten slowest tests and the shared fixtures'
times. The session fails if a test ran whose time was not recorded, or if the
recorded times add up to nothing while the session took seconds: the plugin
cannot pass by measuring nothing.

    pytest --test-cap-s 60      the default (tests/conftest.py loads the plugin)
    pytest --test-times FILE    also write every test's and shared fixture's
                                time to FILE (JSON), for a per-module account,
                                and when each test ended, in which worker
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

CAP_S = 60.0
USER_PROPERTY = "mlbook-own-time"  # a report's timings, as its user property
SHARED_SCOPES = ("class", "module", "package", "session")


@dataclass
class OwnTime:
    """One test's own seconds per phase (shared fixtures' time taken out)."""

    nodeid: str
    phases: dict = field(default_factory=dict)  # phase -> own seconds

    @property
    def seconds(self) -> float:
        return sum(self.phases.values())

    def describe(self) -> str:
        parts = ", ".join(f"{p} {s:.1f}" for p, s in self.phases.items())
        return f"{self.nodeid} took {self.seconds:.1f} s of its own ({parts})"


@dataclass
class FixtureTime:
    argname: str
    scope: str
    baseid: str
    phase: str  # "set-up" or "teardown"
    seconds: float
    during: str  # the test whose phase ran it

    def describe(self) -> str:
        where = f" of {self.baseid}" if self.baseid else ""
        verb = "set up" if self.phase == "set-up" else "tear down"
        return (
            f"fixture {self.argname!r} ({self.scope} scope{where}) took "
            f"{self.seconds:.1f} s to {verb}"
        )


class DurationCap:
    def __init__(self, cap_s: float = CAP_S):
        if not cap_s > 0:
            raise ValueError(f"--test-cap-s must be above 0, got {cap_s!r}")
        self.cap_s = cap_s
        self.tests: dict[str, OwnTime] = {}  # as recorded from the reports
        self._own: dict[str, OwnTime] = {}  # as measured in this process
        self.fixtures: list[FixtureTime] = []
        self.over: list[str] = []  # messages, one per test or fixture over the cap
        self._flagged: set[str] = set()  # tests already failed for their time
        self.ran: set[str] = set()  # tests whose call phase pytest reported
        # when each test's last report came here (s from the session's start),
        # and from which worker: where the run's time went, in order
        self.ended: dict[str, tuple[float, str]] = {}
        self._shared_s = 0.0  # shared fixtures' time in the phase running now
        self._phase_fixtures: list[FixtureTime] = []
        self._current = ""
        self._started = time.perf_counter()

    # -- measuring ----------------------------------------------------------------

    def _record_fixture(self, fixturedef, phase: str, seconds: float) -> None:
        rec = FixtureTime(
            fixturedef.argname,
            fixturedef.scope,
            fixturedef.baseid,
            phase,
            seconds,
            self._current,
        )
        self._shared_s += seconds
        self._phase_fixtures.append(rec)

    def waited(self, what: str, seconds: float) -> None:
        """A wait for something the run shares (the test build's pages) in
        the phase running now: reported as a session fixture's, not the
        test's own time."""
        self._shared_s += seconds
        self._phase_fixtures.append(
            FixtureTime(what, "session", "", "set-up", seconds, self._current)
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope not in SHARED_SCOPES:
            return (yield)
        # Finalizers run last-in first-out: `stop` (added first) runs after the
        # fixture's own teardown, `start` (added after it) runs before.
        clock = {}

        def stop():
            self._record_fixture(
                fixturedef, "teardown", time.perf_counter() - clock["teardown"]
            )

        def start():
            clock["teardown"] = time.perf_counter()

        fixturedef.addfinalizer(stop)
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            self._record_fixture(fixturedef, "set-up", time.perf_counter() - started)
            fixturedef.addfinalizer(start)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid, location):
        self._current = nodeid

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        phase = {"setup": "set-up", "call": "call", "teardown": "teardown"}[report.when]
        own = max(0.0, report.duration - self._shared_s)
        shared, self._shared_s, self._phase_fixtures = self._phase_fixtures, 0.0, []
        t = self._own.setdefault(item.nodeid, OwnTime(item.nodeid))
        t.phases[phase] = own
        messages = [
            f"{f.describe()}, over the {self.cap_s:g} s cap "
            "(only session fixtures are exempt)"
            for f in shared
            if f.scope != "session" and f.seconds > self.cap_s
        ]
        if (
            report.when != "setup"
            and t.seconds > self.cap_s
            and item.nodeid not in self._flagged
        ):
            self._flagged.add(item.nodeid)
            messages.append(
                f"{t.describe()}, over the {self.cap_s:g} s cap for one test at "
                "test sizes (time in shared fixtures is counted on its own)"
            )
        if messages:
            text = "\n".join(messages)
            if report.passed or report.skipped:
                report.outcome = "failed"
                report.longrepr = _failure(item, text)
            else:
                report.sections.append(("time cap", text))
        # what the report carries to whoever records it: this process, or the
        # controller of an xdist run, which sees only the reports
        report.user_properties.append(
            (
                USER_PROPERTY,
                {
                    "phase": phase,
                    "own_s": own,
                    "fixtures": [asdict(f) for f in shared],
                    "over": messages,
                },
            )
        )
        return report

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.ran.add(report.nodeid)
        # under xdist the controller's reports carry their worker ("gw0")
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        worker = getattr(gateway, "id", None) or "-"
        self.ended[report.nodeid] = (
            round(time.perf_counter() - self._started, 2),
            worker,
        )
        for name, value in report.user_properties:
            if name != USER_PROPERTY:
                continue
            t = self.tests.setdefault(report.nodeid, OwnTime(report.nodeid))
            t.phases[value["phase"]] = value["own_s"]
            self.fixtures.extend(FixtureTime(**f) for f in value["fixtures"])
            self.over.extend(value["over"])

    # -- the final check and the report ---------------------------------------------

    def problems(self, session_s: float) -> list[str]:
        """Why the recorded times cannot be trusted, if they cannot."""
        found = []
        missing = sorted(
            n
            for n in self.ran
            if n not in self.tests or "call" not in self.tests[n].phases
        )
        if missing:
            found.append(
                f"{len(missing)} of {len(self.ran)} tests ran without a recorded "
                f"time, e.g. {missing[0]}"
            )
        total = sum(t.seconds for t in self.tests.values()) + sum(
            f.seconds for f in self.fixtures
        )
        if self.ran and session_s > 1.0 and total <= 0.0:
            found.append(
                f"the tests' recorded times add up to {total} s in a session of "
                f"{session_s:.1f} s: nothing was measured"
            )
        return found

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        times_file = session.config.getoption("test_times")
        if hasattr(session.config, "workerinput"):
            times_file = None  # an xdist worker: its controller writes the file
        if times_file:
            Path(times_file).write_text(
                json.dumps(
                    {
                        "tests": {t.nodeid: t.seconds for t in self.tests.values()},
                        "fixtures": [
                            [f.argname, f.scope, f.phase, f.seconds, f.during]
                            for f in self.fixtures
                        ],
                        "ended": self.ended,
                    },
                    indent=1,
                )
            )
        self._problems = self.problems(time.perf_counter() - self._started)
        if self._problems or self.over:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        if not self.tests:
            return
        slowest = sorted(self.tests.values(), key=lambda t: -t.seconds)[:10]
        tr.section(
            f"ten slowest tests (s; shared fixtures excluded; cap {self.cap_s:g} s)"
        )
        for t in slowest:
            tr.write_line(f"{t.seconds:7.1f}  {t.nodeid}")
        shared = sorted(self.fixtures, key=lambda f: -f.seconds)
        shared = [f for f in shared if f.seconds >= 0.5][:10]
        if shared:
            tr.section(
                "shared fixtures (s; session ones not held to the cap; "
                "each counted once, on its own)"
            )
            for f in shared:
                tr.write_line(
                    f"{f.seconds:7.1f}  {f.phase:<8} {f.argname} ({f.scope}) "
                    f"during {f.during}"
                )
        for message in self.over:
            tr.write_line(f"OVER THE TIME CAP: {message}", red=True, bold=True)
        for problem in getattr(self, "_problems", []):
            tr.write_line(f"TIME CAP NOT MEASURED: {problem}", red=True, bold=True)


def _failure(item, text: str):
    """The failure pytest would show for ``pytest.fail(text, pytrace=False)``,
    whose first line the short test summary repeats."""
    try:
        pytest.fail(text, pytrace=False)
    except pytest.fail.Exception:
        return item.repr_failure(pytest.ExceptionInfo.from_current())


def pytest_addoption(parser):
    parser.getgroup("mlbook").addoption(
        "--test-cap-s",
        type=float,
        default=CAP_S,
        help=f"fail any test whose own time exceeds this (default {CAP_S:g} s)",
    )
    parser.getgroup("mlbook").addoption(
        "--test-times",
        default=None,
        metavar="FILE",
        help="write every test's own time and the shared fixtures' times to FILE",
    )


def pytest_configure(config):
    config.pluginmanager.register(
        DurationCap(config.getoption("test_cap_s")), "mlbook-duration-cap"
    )
