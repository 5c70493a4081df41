import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings

from helpers.shared_build import SharedBuild, exclusive

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


# the summary is this run's where the build's state file was written since
# (by this process, or by a worker of this xdist run)
_SESSION_START = time.time()
# this run's id: xdist gives its workers one; a plain pytest run is its own
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def _test_build(on_pages_done, on_free_cpus) -> dict:
    from bookbuild import machine, run

    jobs = max(1, min(TEST_JOBS_AT_MOST, len(machine.physical_cores())))
    return run.build(
        BOOK_DEST,
        small=True,
        only=ONLY,
        jobs=jobs,
        on_pages_done=on_pages_done,
        on_free_cpus=on_free_cpus,
    )


def _reused() -> dict | None:
    import json

    timings = BOOK_DEST / "timings.json"
    return json.loads(timings.read_text()) if REUSE and timings.is_file() else None


# the test build, once for the run (tests/helpers/shared_build.py)
BUILD = SharedBuild(BOOK_DEST, RUN_ID, _test_build, _reused)


@pytest.fixture(scope="session")
def book():
    """Every chapter executed by papermill at test sizes and the HTML book
    built from them (tools/build.py), once per test run (under xdist, once
    for all workers)."""
    return BUILD.once()


@pytest.fixture(scope="session", autouse=True)
def _pages_before_any_test(request) -> bool:
    """Where any selected test reads the book (then True), the first worker
    to get here builds it (its pages, then the HTML) before its first test.
    The build pins its pages to the cores, and no test may run beside a
    timed page (``_after_or_beside_pages``). A failed build fails only the
    tests that read the book."""
    reads_book = any("book" in item.fixturenames for item in request.session.items)
    if reads_book:
        BUILD.start()
    return reads_book


# Test files that may run on a core the test build's pages leave free (while
# the capstone runs alone, and while the last pages run): pure Python or a few
# small processes, nothing timed but hang guards, on one core (what they
# start, ruff, pip or a fork server, inherits the pinning). In f27 the light
# tests ran out 13 s before the capstone ended; test_install and
# test_bounded_waits (7 s) came in then.
# Three capstone builds at test sizes, each beside the exercise and property
# tests among these on the other core, passed as quiet ones do (largest
# residual 4.1-4.7 %, against 2.9-4.5 % quiet; bar 10 %). They go first, so
# that a worker has them then. None of their tests may read the book: the
# `book` fixture, set up before a test waits here, would hold the worker for
# the whole build (tests/test_shared_build.py checks).
BESIDE_PAGES = (
    "test_exercises.py",
    "test_faults_properties.py",
    "test_capstone_properties.py",
    "test_exercises_properties.py",
    "test_precision_properties.py",
    "test_accumulation_properties.py",
    "test_live_properties.py",
    "test_mfu_properties.py",
    "test_input_pipeline_properties.py",
    "test_common_properties.py",
    "test_cadence_properties.py",
    "test_scaling_properties.py",
    "test_recompute_properties.py",
    "test_plan.py",
    "test_live_units.py",
    "test_property_coverage.py",
    "test_faults.py",
    "test_show.py",
    "test_hardware.py",
    "test_faults_figures.py",
    "test_cadence.py",
    "test_flops.py",
    "test_mfu.py",
    "test_config.py",
    "test_memory.py",
    "test_interview_links.py",
    "test_format.py",
    "test_install.py",
    "test_bounded_waits.py",
    "test_live_stdlib.py",
    "test_layering.py",
    "test_hypothesis_profiles.py",
    *(
        f"test_{c}_live.py"
        for c in (
            "scaling",
            "precision",
            "faults",
            "recompute",
            "capstone",
            "cadence",
            "input_pipeline",
            "accumulation",
        )
    ),
    *(
        f"test_keys_{c}.py"
        for c in (
            "faults",
            "recompute",
            "accumulation",
            "cadence",
            "precision",
            "input_pipeline",
            "scaling",
            "mfu",
            "capstone",
            "plan",
        )
    ),
)


@pytest.fixture(autouse=True)
def _after_or_beside_pages(request, _pages_before_any_test):
    """In a worker that did not build, each test starts once the pages have
    run, or, in BESIDE_PAGES, on a CPU they leave free. The wait is reported
    as the pages' (a shared wait, not the test's own time)."""
    if BUILD.built_here or not _pages_before_any_test:
        yield
        return
    light = (
        request.node.path.name in BESIDE_PAGES
        and "book" not in request.fixturenames  # it would wait for the build
        and request.node.get_closest_marker("alone") is None
    )
    started = time.perf_counter()
    with BUILD.after_or_beside(light):
        cap = request.config.pluginmanager.get_plugin("mlbook-duration-cap")
        waited = time.perf_counter() - started
        if cap is not None and waited > 0.05:
            cap.waited("the test build's pages", waited)
        yield


# The files that mostly wait (timeouts, killed and restarted processes): one
# xdist unit (pytest_xdist_make_scheduler below), so that they run one after
# another in one worker, beside the other worker's busy files, and never two
# at once (in f26, test_repeat and test_timecap overlapped with both cores
# 40-70 % busy for 25 s). Together about 75 s. Seconds in a 2-worker make test
# (f24) and how busy each kept a core run on its own (CPU over wall time):
WAITING = (
    "test_repeat.py",  # 26, 45 %
    "test_timecap.py",  # 16, 29 %
    "test_kill_anywhere.py",  # 20, 45 %
    "test_input_pipeline.py",  # 17, 50 %
)
WAITING_UNIT = "the files that mostly wait (tests/conftest.py: WAITING)"

# make test runs two xdist workers, a test file to a worker (--dist loadfile:
# module fixtures such as an opened page or a server are set up once), handed
# out in collection order (--no-loadscope-reorder), after BESIDE_PAGES. The
# long files go first, so the short ones fill in at the end instead of one
# long file running alone: first the files that do not read the book, which
# start while the test build writes its HTML (the waiting ones first, in one
# worker, beside the HTML build and the busy ones in the other: in f35 they
# ran last, 91 s with both cores 65-90 % busy at times), then the book's
# (browsers, busy on both cores). The SHARED_PAGES tests of test_live,
# test_book and test_exercises_html run in this order too: a page is checked
# as loaded before a prediction test unfolds it. Seconds in a 2-worker make
# test (f24, the SHARED_PAGES tests apart), and for the files that read no
# book, how busy each kept a core:
LONGEST_FIRST = (
    *WAITING,
    "test_faults_demos.py",  # 57, 92 %
    "test_build.py",  # 34, 88 %
    "test_accumulation.py",  # 12, 135 %
    "test_capstone.py",  # 16, 71 %
    # the book's
    "test_live.py",  # 90 (SHARED_PAGES: 39)
    "test_book.py",  # 11 (SHARED_PAGES: 7)
    "test_exercises_html.py",  # 7 (SHARED_PAGES: 55)
    "test_lab.py",  # 25
    "test_plan_form.py",  # 24
    "test_exercises_js.py",  # 12
)


@pytest.fixture(autouse=True)
def _alone_or_beside_others(request):
    """Under xdist, a test marked ``alone`` runs while no test runs in another
    worker (tests/helpers/shared_build.py: exclusive)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    with exclusive(BOOK_DEST.parent, alone):
        yield


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(BESIDE_PAGES + LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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


@pytest.fixture(scope="session")
def chapter_pages(book, chromium_browser):
    """The built pages opened from file:// in the 1300 px window, each kept
    open in a tab of its own (helpers.browser.Pages: each page watched on its
    own, every request outside the build blocked; test_book says what is
    allowed), for the tests in SHARED_PAGES and test_book's other pages."""
    from test_book import ALLOWED_CONSOLE, WINDOW, in_build

    from helpers.browser import Pages

    pages = Pages(chromium_browser, in_build, ALLOWED_CONSOLE, viewport=WINDOW)
    yield pages
    pages.close()


@pytest.fixture(scope="session")
def served(book):
    """The built book served on 127.0.0.1 (tools/serve.py, in a thread): its
    base URL, for the served tests of test_live and test_plan_form."""
    from test_book import HTML

    sys.path.insert(0, str(ROOT / "tools"))
    from serve import serve

    httpd, base = serve(HTML)
    yield base
    httpd.shutdown()
    httpd.server_close()


# A stored Python snapshot that cannot restore, where live.js keeps its own
# (IndexedDB): 4 KiB of sevens, no Pyodide memory.
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
    """One tab for the served pages (helpers.browser.Tab), as a reader moves
    from page to page: Python starts in each page again, the first from
    nothing (about 7.5 s here in a new tab), the others from the snapshot the
    first kept (under 1 s). test_live's benchmarks say which was which.
    Before the first, the tab's storage holds a copy that does not restore,
    which that page must refuse, drop and replace with its own. test_live
    and test_plan_form share it (one xdist unit: SERVED_WITH_LIVE)."""
    from test_book import ALLOWED_CONSOLE

    from helpers.browser import Tab

    tab = Tab(
        chromium_browser,
        lambda u: u.startswith((served + "/", "data:", "blob:")),
        ALLOWED_CONSOLE,
    )
    # on a page without live figures, loaded outside the tab's count of pages
    tab.page.goto(f"{served}/genindex.html")
    tab.page.evaluate(BAD_SNAPSHOT)
    tab.watch.assert_clean()
    yield tab
    tab.close()


# The tests that read the chapters through ``chapter_pages``, in whichever
# file they are: under xdist they are one work unit, so that they run in one
# worker and share its open pages. Each chapter is then loaded twice (a fold
# opened by one prediction test is folded again for the other) instead of
# about five times.
SHARED_PAGES = {
    "tests/test_book.py::test_page_in_browser",
    "tests/test_book.py::test_solutions_hidden_until_opened",
    "tests/test_live.py::test_opened_from_a_file_every_figure_draws_its_default",
    "tests/test_exercises_html.py::test_the_key_is_right_and_a_wrong_value_gets_its_hint",
    "tests/test_exercises_html.py::test_a_choice_is_checked_in_the_page",
    "tests/test_exercises_html.py::test_the_result_stays_folded_until_a_prediction",
}
SHARED_PAGES_UNIT = "the chapters' pages (tests/conftest.py: SHARED_PAGES)"
# Files whose served pages open in test_live's served tab, after test_live's
# (collection order): one xdist unit with test_live.py, so that their Python
# starts from the snapshot its first page kept (under 1 s, against 7 s).
SERVED_WITH_LIVE = ("test_plan_form.py",)


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the tests in SHARED_PAGES as one more unit, the
    files in WAITING as another, and SERVED_WITH_LIVE in test_live.py's."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndSharedPages(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.split("[", 1)[0] in SHARED_PAGES:
                return SHARED_PAGES_UNIT
            file = nodeid.split("::", 1)[0]
            name = file.rsplit("/", 1)[-1]
            if name in WAITING:
                return WAITING_UNIT
            if name in SERVED_WITH_LIVE:
                return file[: -len(name)] + "test_live.py"
            return super()._split_scope(nodeid)

    return FilesAndSharedPages(config, log)


def page_values(page: str) -> dict:
    """The values a page glued into its prose in the test build (the `book`
    fixture must have run): name -> plain value, numbers as numbers and
    labels as strings. Read from _build/test/values/<page>.json, which
    tools/build.py writes."""
    from bookbuild import values

    return values.read_values(BOOK_DEST, page)


def live_payloads(page: str) -> dict:
    """The live figures of a page's executed notebook in the test build (the
    `book` fixture must have run): "module:function" -> the payload its cell
    displayed (application/vnd.mlbook.live+json: fixed data, controls and the
    default spec)."""
    import json

    nb = json.loads((BOOK_DEST / "src" / "notebooks" / f"{page}.ipynb").read_text())
    mime = "application/vnd.mlbook.live+json"
    return {
        out["data"][mime]["function"]: out["data"][mime]
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if mime in out.get("data", {})
    }


def _seconds(x: dict) -> str:
    if x.get("cached"):
        return "cached"
    return f"{x['seconds']:.1f}" if "seconds" in x else "-"


def pytest_terminal_summary(terminalreporter):
    """Print the chapters' execution times (benchmarks, not pass/fail): the
    test build's, and the reader-size build's where `make book` left one."""
    import json

    marker = BUILD.marker
    if not (marker.is_file() and marker.stat().st_mtime >= _SESSION_START):
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
                f"{page:<18} boot {r['boot_s']:.2f} s "
                f"({r.get('tab', 'new')} tab, Python {r.get('python')}"
                + (", a stored copy refused first" if r.get("refused") else "")
                + "), "
                "first live draw "
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
