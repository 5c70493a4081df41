import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

# hypothesis profiles. "ci", the default, runs each property test the examples
# its module asks for with `examples(n)` (enough to find the off-by-ones, sign
# slips and unit errors the property tests exist for); `pytest
# --hypothesis-profile long` runs ten times as many. No deadline: a shared
# machine makes per-example times meaningless.
CI_EXAMPLES = 50
for _name, _n in (("ci", CI_EXAMPLES), ("long", 10 * CI_EXAMPLES)):
    settings.register_profile(_name, max_examples=_n, deadline=None, print_blob=True)
settings.load_profile("ci")


def examples(n: int) -> settings:
    """hypothesis settings for a property test that runs ``n`` examples under
    the ci profile, scaled with the loaded profile (ten times ``n`` under
    --hypothesis-profile long)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"examples needs a positive integer, got {n!r}")
    scale = settings.default.max_examples / CI_EXAMPLES
    return settings(max_examples=max(1, round(n * scale)), deadline=None)


# The test build: every page at test sizes and the HTML (tools/build.py
# --small). `make test` builds it first and sets MLBOOK_TEST_REUSE=1, so the
# tests read it; a plain `pytest` run builds it once, in whichever worker asks
# first. MLBOOK_TEST_DEST puts it elsewhere; MLBOOK_TEST_ONLY=mfu,faults builds
# just those chapters (development only).
BOOK_DEST = Path(os.environ.get("MLBOOK_TEST_DEST", ROOT / "_build" / "test"))
ONLY = [n for n in os.environ.get("MLBOOK_TEST_ONLY", "").split(",") if n] or None
REUSE = os.environ.get("MLBOOK_TEST_REUSE") == "1"
TEST_JOBS = 2  # two pages at a time, a core each (tools/bookbuild/machine.py)
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


@pytest.fixture(scope="session")
def book() -> dict:
    """The test build's report (its timings.json), built once per run."""
    from filelock import FileLock

    from bookbuild import run

    timings, marker = BOOK_DEST / "timings.json", BOOK_DEST / "test-run"
    if REUSE and timings.is_file():
        return json.loads(timings.read_text())
    BOOK_DEST.mkdir(parents=True, exist_ok=True)
    with FileLock(BOOK_DEST / "build.lock"):
        if marker.is_file() and marker.read_text() == RUN_ID and timings.is_file():
            return json.loads(timings.read_text())  # another worker built it
        report = run.build(BOOK_DEST, small=True, only=ONLY, jobs=TEST_JOBS)
        marker.write_text(RUN_ID)
        return report


def page_values(page: str) -> dict:
    """The values a page glued into its prose in the test build (the `book`
    fixture must have run): name -> number or label."""
    from bookbuild import values

    return values.read_values(BOOK_DEST, page)


def cores_of_a_page(report: dict) -> int:
    """The CPUs each page of a build ran on: the build's own where it ran one
    page at a time, else its jobs' (every job is given as many)."""
    if report["jobs"] == 1:
        from mlbook.common.accelerators import usable_cores

        return usable_cores()
    counts = {len(j["cpus"]) for j in report["job_resources"]}
    assert len(counts) == 1, f"jobs were given different CPU counts: {counts}"
    return counts.pop()


# Session fixtures whose tests share one xdist worker, in whichever file they
# are: the pages opened once (a page is checked as loaded before a prediction
# test unfolds it), and the served tab (its first page boots Python from
# nothing, the others from the snapshot it kept).
SHARED_FIXTURES = ("chapter_pages", "served_tab")


# The units that take longest, in seconds of one worker (a make test run on
# 2 cores, load about 5): they go to the workers first, the longest first, so
# that no long unit starts while the other worker runs out of work (xdist's
# own order, by number of tests, sent test_lab.py's 10 tests near the end).
# The rest follow in collection order. Make runs pytest with
# --no-loadscope-reorder so xdist keeps this order.
SLOW_UNITS = {
    "served_tab": 140,
    "chapter_pages": 150,
    "test_lab.py": 95,
    "test_calibrate.py": 37,
    "test_capstone.py": 37,
    "test_build.py": 35,
    "test_faults_demos.py": 35,
    "test_memtrace.py": 31,
    "test_input_pipeline.py": 31,
    "test_exercises.py": 30,
    "test_scaling.py": 25,
    "test_kill_anywhere.py": 23,
    "test_repeat.py": 23,
    "test_accumulation.py": 22,
    "test_lab_roundtrip.py": 20,
}


def unit_of(item) -> str:
    """The xdist group an item is sent in."""
    return item.get_closest_marker("xdist_group").args[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under --dist loadgroup a test file is one unit, as with loadfile (its
    module fixtures, an opened page or a server, are set up once), except the
    tests of a shared fixture, which are one unit together. The slowest
    units first (SLOW_UNITS); within a unit the collection's order."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            shared = [f for f in SHARED_FIXTURES if f in item.fixturenames]
            item.add_marker(pytest.mark.xdist_group((shared or [item.path.name])[0]))
    items.sort(key=lambda item: -SLOW_UNITS.get(unit_of(item), 0))


@pytest.fixture(scope="session")
def chromium_browser():
    """One headless Chromium for the whole run; each test opens its own context."""
    from helpers.browser import chromium

    with chromium() as b:
        yield b


@pytest.fixture(scope="session")
def chapter_pages(book, chromium_browser):
    """The built pages opened from file:// in the 1300 px window, each kept
    open in a tab of its own, every request outside the build blocked. The
    tests that use it share the xdist group "chapter_pages"."""
    from test_book import ALLOWED_CONSOLE, CONSOLE_LEVELS, WINDOW, in_build

    from helpers.browser import Pages

    pages = Pages(
        chromium_browser, in_build, ALLOWED_CONSOLE, CONSOLE_LEVELS, viewport=WINDOW
    )
    yield pages
    pages.close()


@pytest.fixture(scope="session")
def served(book):
    """The built book served on 127.0.0.1 (tools/serve.py, in a thread)."""
    from serve import serve
    from test_book import HTML

    httpd, base = serve(HTML)
    yield base
    httpd.shutdown()
    httpd.server_close()


# A Python snapshot that cannot restore (4 KiB of sevens), where live.js keeps its own
BAD_SNAPSHOT = """async () => {
  const here = new URL("vendor/pyodide/", document.baseURI).href;
  const key = "pyodide " + (await import(here + "pyodide.mjs")).version;
  const db = await new Promise((ok, no) => {
    const r = indexedDB.open("mlbook-live", 1);
    r.onupgradeneeded = () => r.result.createObjectStore("pyodide-snapshots");
    r.onsuccess = () => ok(r.result);
    r.onerror = () => no(r.error);
  });
  await new Promise((ok, no) => {
    const r = db.transaction("pyodide-snapshots", "readwrite")
      .objectStore("pyodide-snapshots").put(new Uint8Array(4096).fill(7), key);
    r.onsuccess = ok;
    r.onerror = () => no(r.error);
  });
  db.close();
}"""


@pytest.fixture(scope="session")
def served_tab(chromium_browser, served):
    """One tab for the served pages, as a reader moves from page to page:
    Python starts from nothing on the first, from the snapshot it kept on the
    others. Its storage first holds a copy that does not restore, which that
    page must refuse and replace. Its tests share the xdist group
    "served_tab"."""
    from test_book import ALLOWED_CONSOLE, CONSOLE_LEVELS

    from helpers.browser import Tab

    ok = (served + "/", "data:", "blob:")
    tab = Tab(
        chromium_browser,
        lambda u: u.startswith(ok),
        ALLOWED_CONSOLE,
        levels=CONSOLE_LEVELS,
    )
    tab.page.goto(f"{served}/genindex.html")  # no live figure: not counted
    tab.page.evaluate(BAD_SNAPSHOT)
    tab.watch.assert_clean()
    yield tab
    tab.close()


def pytest_terminal_summary(terminalreporter):
    """The test build's page times and the browser benchmarks, printed."""
    from helpers.live import print_benchmarks

    print_benchmarks(terminalreporter, BOOK_DEST / "timings.json")
