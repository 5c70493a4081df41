"""tests/helpers/shared_build.py, with two "workers" (threads, each with its
own SharedBuild, as each xdist worker has; flock locks an open file, so two
threads' opens exclude each other as two processes' do) and a fake build
whose pages and HTML each take a known time."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from helpers import shared_build
from helpers.shared_build import SharedBuild, exclusive

PAGES_S, HTML_S = 0.6, 0.6


@pytest.fixture(autouse=True)
def _fast_poll(monkeypatch):
    monkeypatch.setattr(shared_build, "POLL_S", 0.02)


def fake_build(dest, log, fail=False, free=None):
    """``free``: (seconds into the pages, CPUs) the build says are free then,
    in order."""

    def build(on_pages_done, on_free_cpus):
        log.append(("pages", time.monotonic()))
        slept = 0.0
        for at, cpus in free or []:
            time.sleep(at - slept)
            slept = at
            on_free_cpus(cpus)
            log.append((f"free {cpus}", time.monotonic()))
        time.sleep(PAGES_S - slept)
        if fail:
            raise ValueError("a page failed")
        log.append(("html", time.monotonic()))
        on_pages_done()
        time.sleep(HTML_S)
        report = {"chapters": {"mfu": {"seconds": 1.0}}}
        (dest / "timings.json").write_text(json.dumps(report))
        log.append(("done", time.monotonic()))
        return report

    return build


def workers(tmp_path, fail=False, n=2):
    dest, log = tmp_path / "test", []
    made = [SharedBuild(dest, "run-1", fake_build(dest, log, fail)) for _ in range(n)]
    return made, log


def run_all(made, steps):
    """Each worker's steps in a thread of its own: {worker: [(step, time,
    result or exception)]}."""
    seen = {i: [] for i in range(len(made))}

    def go(i):
        for step in steps:
            try:
                result = getattr(made[i], step)()
            except Exception as exc:  # noqa: BLE001 (recorded for the test)
                result = exc
            seen[i].append((step, time.monotonic(), result))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(made))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return seen


def test_one_worker_builds_and_the_other_starts_once_the_pages_have_run(tmp_path):
    made, log = workers(tmp_path)
    seen = run_all(made, ["pages_done", "once"])
    assert [name for name, _ in log] == ["pages", "html", "done"]  # one build
    (builder,) = [i for i, b in enumerate(made) if b.built_here]
    other = 1 - builder
    at = dict(log)
    (_, pages_returned, _), (_, once_returned, report) = seen[other]
    # the other worker waits out the pages, not the HTML ...
    assert at["html"] <= pages_returned < at["done"]
    # ... and a test that reads the book waits for all of it
    assert once_returned >= at["done"]
    assert report == seen[builder][1][2] == {"chapters": {"mfu": {"seconds": 1.0}}}
    assert made[other].state() == "done"


def test_a_failed_build_fails_only_the_book_and_names_where(tmp_path):
    made, log = workers(tmp_path, fail=True)
    seen = run_all(made, ["pages_done", "once"])
    assert [name for name, _ in log] == ["pages"]
    (builder,) = [i for i, b in enumerate(made) if b.built_here]
    assert seen[builder][0][2] is None and seen[1 - builder][0][2] is None
    assert isinstance(seen[builder][1][2], ValueError)
    other = seen[1 - builder][1][2]
    assert isinstance(other, RuntimeError) and "another worker" in str(other)


def test_a_later_run_builds_again(tmp_path):
    made, log = workers(tmp_path, n=1)
    made[0].once()
    again = SharedBuild(made[0].dest, "run-2", fake_build(made[0].dest, log))
    assert again.state() is None
    again.pages_done()
    assert again.built_here and [name for name, _ in log].count("pages") == 2


def test_an_alone_test_overlaps_no_other(tmp_path):
    spans: dict[str, list[tuple[float, float]]] = {"alone": [], "shared": []}

    def hold(kind, seconds, delay):
        time.sleep(delay)
        with exclusive(tmp_path, kind == "alone"):
            start = time.monotonic()
            time.sleep(seconds)
            spans[kind].append((start, time.monotonic()))

    threads = [
        threading.Thread(target=hold, args=("shared", 0.4, 0.0)),
        threading.Thread(target=hold, args=("shared", 0.4, 0.05)),  # shares
        threading.Thread(target=hold, args=("alone", 0.3, 0.1)),
        threading.Thread(target=hold, args=("shared", 0.2, 0.2)),  # waits
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    (a0, a1), shared = spans["alone"][0], spans["shared"]
    assert len(shared) == 3
    assert all(s1 <= a0 or s0 >= a1 for s0, s1 in shared), (spans, "overlap")
    # the two that came first ran side by side; the last came after the alone one
    first, second = sorted(shared)[:2]
    assert second[0] < first[1]
    assert sorted(shared)[2][0] >= a1


def test_a_light_test_runs_on_a_free_cpu_and_is_waited_for(tmp_path):
    """The build frees a CPU 0.1 s into its pages and takes it back at 0.4 s:
    a light test in the other worker starts between, pinned to it, and the
    build waits for it to end; a test that is not light waits for the pages."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    dest, log = tmp_path / "test", []
    build = fake_build(dest, log, free=[(0.1, [cpu]), (0.4, [])])
    builder, other = (SharedBuild(dest, "run-1", build) for _ in range(2))
    spans = {}

    def light():
        with other.after_or_beside(light=True) as cpus:
            start = time.monotonic()
            spans["pinned"] = (cpus, sorted(os.sched_getaffinity(0)))
            time.sleep(0.5)  # past the build's 0.4 s: it must wait
            spans["light"] = (start, time.monotonic())
        spans["after"] = sorted(os.sched_getaffinity(0))

    def heavy():
        with other.after_or_beside(light=False) as cpus:
            spans["heavy"] = (cpus, time.monotonic())

    building = threading.Thread(target=builder.start)
    building.start()
    time.sleep(0.05)
    threads = [threading.Thread(target=f) for f in (light, heavy)]
    for t in threads:
        t.start()
    for t in (building, *threads):
        t.join(timeout=30)
    at = dict(log)
    start, end = spans["light"]
    assert at[f"free {[cpu]}"] <= start < at["free []"]
    assert at["free []"] >= end  # taking the CPU back waited for the test
    assert spans["pinned"] == ([cpu], [cpu])
    assert spans["after"] == sorted(os.sched_getaffinity(0))  # unpinned after
    heavy_cpus, heavy_start = spans["heavy"]
    assert heavy_cpus is None and heavy_start >= at["html"]


def test_with_no_cpu_free_a_light_test_waits_for_the_pages(tmp_path):
    dest, log = tmp_path / "test", []
    builder, other = (
        SharedBuild(dest, "run-1", fake_build(dest, log)) for _ in range(2)
    )
    building = threading.Thread(target=builder.start)
    building.start()
    time.sleep(0.05)
    with other.after_or_beside(light=True) as cpus:
        started = time.monotonic()
    building.join(timeout=30)
    assert cpus is None and started >= dict(log)["html"]


def test_the_files_that_may_run_beside_the_pages_exist_and_read_no_book(request):
    """A test that reads the book waits for all of it in its session fixture,
    before it can wait beside the pages: in a BESIDE_PAGES file it would hold
    its worker, and the light tests after it, for the whole build."""
    from conftest import BESIDE_PAGES, ROOT

    assert len(set(BESIDE_PAGES)) == len(BESIDE_PAGES)
    missing = [f for f in BESIDE_PAGES if not (ROOT / "tests" / f).is_file()]
    assert not missing, f"BESIDE_PAGES names files that are not there: {missing}"
    collected = {item.path.name for item in request.session.items}
    unseen = set(BESIDE_PAGES) - collected
    if unseen:  # run on its own: collect them
        pytest.skip(f"not collected in this run: {sorted(unseen)[:3]}...")
    readers = sorted(
        item.nodeid
        for item in request.session.items
        if item.path.name in BESIDE_PAGES and "book" in item.fixturenames
    )
    assert not readers, f"tests in BESIDE_PAGES files that read the book: {readers}"
