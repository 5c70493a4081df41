import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

# The time cap (every test at most 60 s of its own; session fixtures reported
# apart) and pytester, which tests/test_timecap.py runs it with.
pytest_plugins = ["helpers.timecap", "pytester"]

# hypothesis profiles. "ci", the default, runs each property test the examples
# its module asks for with `examples(n)` (n is what CI runs: enough to find
# the off-by-ones, sign slips and unit errors the property tests exist for);
# `pytest --hypothesis-profile long` runs ten times as many, for a longer run
# before a change to a calculator lands. No deadline: a shared 2-core machine
# makes per-example times meaningless.
CI_EXAMPLES = 50
settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, deadline=None, print_blob=True
)
settings.register_profile(
    "long", max_examples=10 * CI_EXAMPLES, deadline=None, print_blob=True
)
settings.load_profile("ci")


def examples(n: int) -> settings:
    """hypothesis settings for a property test that runs ``n`` examples under
    the ci profile, scaled with the loaded profile (ten times ``n`` under
    --hypothesis-profile long). Test modules are imported after the profile
    given on the command line is loaded, so module-level use sees it."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"examples needs a positive integer, got {n!r}")
    scale = settings.default.max_examples / CI_EXAMPLES
    return settings(max_examples=max(1, round(n * scale)), deadline=None)


BOOK_DEST = Path(os.environ.get("MLBOOK_TEST_DEST", ROOT / "_build" / "test"))
# The test build executes two pages at once where there are two physical cores,
# each page pinned to a core of its own (tools/bookbuild/machine.py: no timed cell
# shares its core with the other page): 209 s for the twelve pages and the HTML
# on this 2-core machine, against 317 s one page at a time. make book keeps one
# page at a time there, so a reader's measurements get both cores.
TEST_JOBS_AT_MOST = 2
# For development only: MLBOOK_TEST_ONLY=mfu,faults builds just those chapters
# (the others become title-only stubs). CI never sets it.
ONLY = [n for n in os.environ.get("MLBOOK_TEST_ONLY", "").split(",") if n] or None
# For development only: MLBOOK_TEST_REUSE=1 takes the build already at
# MLBOOK_TEST_DEST as it is (its timings.json is the report) instead of
# building again, to rerun the checks on built pages. CI never sets it.
REUSE = os.environ.get("MLBOOK_TEST_REUSE") == "1"


# set when this session built the book, so the summary is this run's
_BOOK_BUILT: list = []


@pytest.fixture(scope="session")
def book():
    """Every chapter executed by papermill at test sizes and the HTML book
    built from them (tools/build.py), once per test session."""
    import json

    from bookbuild import machine, run

    _BOOK_BUILT.append(True)
    if REUSE and (BOOK_DEST / "timings.json").is_file():
        return json.loads((BOOK_DEST / "timings.json").read_text())
    shutil.rmtree(BOOK_DEST, ignore_errors=True)
    jobs = max(1, min(TEST_JOBS_AT_MOST, len(machine.physical_cores())))
    return run.build(BOOK_DEST, small=True, only=ONLY, jobs=jobs)


def cores_of_a_page(report: dict) -> int:
    """The CPUs each page of a build ran on: the build's own where it ran one
    page at a time, else its jobs' (every job is given as many)."""
    if report["jobs"] == 1:
        return len(os.sched_getaffinity(0))
    counts = {len(j["cpus"]) for j in report["job_resources"]}
    assert len(counts) == 1, f"jobs were given different CPU counts: {counts}"
    return counts.pop()


@pytest.fixture(scope="session")
def chromium_browser():
    """One headless Chromium for the whole run (test_book, test_live and
    test_lab share it; each test opens its own context, a fresh profile).
    Tests that read the built book request ``book`` first, so the book is
    built before the browser starts."""
    from helpers.browser import chromium

    with chromium() as browser:
        yield browser


def page_values(page: str) -> dict:
    """The values a page glued into its prose in the test build (the `book`
    fixture must have run): name -> plain value, numbers as numbers and
    labels as strings. Read from _build/test/values/<page>.json, which
    tools/build.py writes."""
    from bookbuild import values

    return values.read_values(BOOK_DEST, page)


def _seconds(x: dict) -> str:
    if x.get("cached"):
        return "cached"
    return f"{x['seconds']:.1f}" if "seconds" in x else "-"


def pytest_terminal_summary(terminalreporter):
    """Print the chapters' execution times (benchmarks, not pass/fail): the
    test build's, and the reader-size build's where `make book` left one."""
    import json

    if not _BOOK_BUILT:
        return
    rows = {}
    for label, dest in (("test", BOOK_DEST), ("reader", ROOT / "_build" / "book")):
        path = dest / "timings.json"
        if path.exists():
            for page, r in json.loads(path.read_text()).get("chapters", {}).items():
                rows.setdefault(page, {})[label] = r
    if not rows:
        return
    tr = terminalreporter
    try:  # slider redraws: a benchmark recorded beside the page times, not a pass/fail
        from test_validate_and_widgets import redraw_benchmarks_ms

        redraw = {k: round(v, 1) for k, v in redraw_benchmarks_ms().items()}
        path = BOOK_DEST / "timings.json"
        if path.exists():
            record = json.loads(path.read_text())
            record["redraw_ms"] = redraw
            path.write_text(json.dumps(record, indent=2))
        tr.section(
            "live figure functions in CPython (ms, best of 3: the spec, not drawn)"
        )
        for name, ms in redraw.items():
            tr.write_line(f"{name:<42} {ms:>7.1f}")
    except Exception as exc:  # noqa: BLE001 (a benchmark must not fail the run)
        tr.write_line(f"slider redraw benchmark not recorded: {exc}")
    test_timings = BOOK_DEST / "timings.json"
    live = (
        json.loads(test_timings.read_text()).get("live")
        if test_timings.exists()
        else None
    )
    if live:  # written by tests/test_live.py: benchmarks, not pass/fail
        tr.section(
            "live figures in the browser (goals: boot to first live draw <= 4 s, "
            "redraw p95 <= 150 ms)"
        )
        for page, r in sorted(live.get("pages", {}).items()):
            tr.write_line(
                f"{page:<18} boot {r['boot_s']:.2f} s, first live draw "
                f"{r['first_live_draw_s']:.2f} s; "
                f"page {r['page_bytes'] / 1e6:.2f} MB, "
                f"+{r['live_bytes'] / 1e6:.1f} MB when live"
            )
        for name, r in sorted(live.get("figures", {}).items()):
            tr.write_line(
                f"  {name:<42} redraw p50 {r['p50_ms']:6.1f} ms, "
                f"p95 {r['p95_ms']:6.1f} ms "
                f"({r['draws']} draws; Python {r['python_p50_ms']:.1f} ms)"
            )
    tr.section("page execution times (s)")
    tr.write_line(f"{'page':<18} {'test':>7} {'reader':>7} {'budget':>7}  notes")
    for page, r in sorted(rows.items()):
        t, b = r.get("test", {}), r.get("reader", {})
        notes = []
        for label, x in (("test", t), ("reader", b)):
            if x.get("retry"):
                first = x["retry"]["first_attempt_s"]
                notes.append(
                    f"{label}: retried after a first attempt of {first} s "
                    f"({x['retry']['error']})"
                )
            if x.get("error"):
                notes.append(f"{label}: FAILED")
        budget = t.get("budget_s", b.get("budget_s", "-"))
        tr.write_line(
            f"{page:<18} {_seconds(t):>7} {_seconds(b):>7} {budget:>7}  "
            + "; ".join(notes)
        )
