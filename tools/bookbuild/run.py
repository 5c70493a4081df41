"""The build itself: execute the pages (in order, from the cache where their
key is unchanged, in parallel jobs where asked), collect their values and
timings, then build the HTML. ``build()`` is what `make book`, `make test`
and the command line call."""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

from . import caching, execution, htmlbook, machine, pages, paths, values


class _InProcess:
    """The one-job executor: runs each page at once, here."""

    def submit(self, fn, *args):
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 (reported as the page's error)
            if isinstance(exc, KeyboardInterrupt):
                raise
            future.set_exception(exc)
        return future

    def shutdown(self):
        pass


def build(
    dest: Path,
    small: bool,
    only: list[str] | None = None,
    html: bool = True,
    cache: bool = False,
    jobs: int | None = None,
) -> dict:
    """Execute the pages and build the book; returns the report (also in
    <dest>/timings.json). With ``cache``, pages whose key is unchanged are
    taken from <dest>/cache instead of executed, and an unchanged book is not
    rebuilt. Successful executions are stored in the cache either way.

    A page that runs alone starts first: it waits for no page to finish,
    and the core it leaves idle is free from the start. The others start
    longest first (pages.start_order)."""
    dest = Path(dest).resolve()
    src = pages.stage(dest)
    parameters = {"SMALL": True} if small else {}
    jobs = machine.default_jobs() if jobs is None else max(1, jobs)
    plan = machine.plan_jobs(jobs)
    report = {
        "small": small,
        "cache": cache,
        "jobs": jobs,
        "job_resources": [
            {
                "cpus": j["cpus"] or "all",
                "threads": j["env"].get("OMP_NUM_THREADS", "default"),
                "gpu": j["env"].get("CUDA_VISIBLE_DEVICES"),
            }
            for j in plan
        ],
        "chapters": {},
        "html": None,
    }
    store = caching.Cache(dest / "cache")
    values_dir = dest / "values"
    values_dir.mkdir(exist_ok=True)
    for stale in values_dir.glob("*.json"):
        stale.unlink()

    order = pages.chapters(only)
    machine_info = caching.machine_inputs()
    keys, inputs = {}, {}
    for page in order:
        inputs[page.stem] = caching.cache_inputs(
            page, parameters, machine_info, plan[0]
        )
        keys[page.stem] = caching.key_of(inputs[page.stem])

    def finish(
        page: Path,
        seconds: float,
        error: str | None,
        cached: bool,
        spent: float,
        retry: dict | None = None,
    ) -> None:
        out = src / page.parent.relative_to(paths.ROOT) / f"{page.stem}.ipynb"
        if not out.exists():
            pages.stub_page(page, out.parent)
        if error is None:
            try:
                values.write_values(
                    dest, page.stem, values.glued_values(out, page.stem)
                )
            except values.GlueError as exc:
                error = str(exc)
        if error is None and not cached:
            store.store(page.stem, keys[page.stem], inputs[page.stem], out, seconds)
        stacks = dest / "stacks" / page.stem
        if error is None and retry is None:  # logs are kept only where they tell
            shutil.rmtree(stacks, ignore_errors=True)
        report["chapters"][page.stem] = {
            "seconds": round(seconds, 1),
            "error": error,
            "cached": cached,
            "this_run_s": round(spent, 1),
            "key": keys[page.stem][:16],
            "budget_s": pages.budget_s(page),
            "retry": retry,
            "stacks": str(stacks) if stacks.exists() else None,
        }
        how = "from the cache" if cached else f"{seconds:.1f} s"
        print(
            f"  {page.stem}: {how}" + (f"  FAILED: {error}" if error else ""),
            flush=True,
        )

    executors = (
        [_InProcess()]
        if jobs == 1
        else [
            ProcessPoolExecutor(
                1,
                mp_context=__import__("multiprocessing").get_context("spawn"),
                initializer=machine.pin,
                initargs=(j["cpus"], j["env"]),
            )
            for j in plan
        ]
    )
    free = list(range(len(executors)))
    running: dict[Future, tuple[Path, int, float]] = {}
    # the lone pages first, then the longest first
    measured = {
        p.stem: e["seconds"] for p in order if (e := store.entry(p.stem)) is not None
    }
    pending = pages.start_order(order, measured)
    try:
        while pending or running:
            for page in list(pending):
                hit, why = (
                    store.lookup(page.stem, keys[page.stem]) if cache else (None, "")
                )
                out_dir = src / page.parent.relative_to(paths.ROOT)
                if hit is not None:
                    pending.remove(page)
                    shutil.copyfile(hit, out_dir / f"{page.stem}.ipynb")
                    finish(page, store.entry(page.stem)["seconds"], None, True, 0.0)
                    continue
                if not free:
                    continue  # wait for a job to finish
                alone = [pages.runs_alone(p) for p, _, _ in running.values()]
                if any(alone) or (running and pages.runs_alone(page)):
                    continue  # it runs with no other page beside it
                pending.remove(page)
                slot = free.pop(0)
                reason = ""
                if cache:
                    if why == "changed":
                        why = "changed: " + ", ".join(
                            store.changed(page.stem, inputs[page.stem])
                        )
                    reason = f" [{why[:200]}]"
                where = f" on CPUs {plan[slot]['cpus']}" if plan[slot]["cpus"] else ""
                sizes = "test" if small else "reader"
                print(
                    f"executing {page.name} ({sizes} sizes){where}{reason} ...",
                    flush=True,
                )
                stacks = dest / "stacks" / page.stem  # the watchdogs' logs
                shutil.rmtree(stacks, ignore_errors=True)
                started = time.perf_counter()
                future = executors[slot].submit(
                    execution.execute,
                    page,
                    out_dir,
                    parameters,
                    None,
                    True,
                    True,
                    stacks,
                )
                running[future] = (page, slot, started)
                if jobs == 1:
                    break  # it has run: see what that made ready
            if not running:
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                page, slot, started = running.pop(future)
                free.append(slot)
                retry = None
                try:
                    seconds, error, retry = future.result()
                except Exception as exc:  # noqa: BLE001 (the page fails, the build goes on)
                    seconds, error = (
                        time.perf_counter() - started,
                        f"{type(exc).__name__}: {exc}",
                    )
                finish(
                    page, seconds, error, False, time.perf_counter() - started, retry
                )
    finally:
        for executor in executors:
            executor.shutdown()

    if only:  # a partial build: the other chapters appear as their title alone
        for other in set(pages.chapters()) - set(order):
            pages.stub_page(other, src / other.parent.relative_to(paths.ROOT))
    if html:
        started = time.perf_counter()
        report["html"] = htmlbook.build_book(src, dest, reuse=cache)
        report["html"]["seconds"] = round(time.perf_counter() - started, 1)
    paths.write_atomically(dest / "timings.json", json.dumps(report, indent=2))
    return report
