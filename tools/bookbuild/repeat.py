"""Executing pages again and again, to see what every run does:
`tools/build.py --repeat N [--only PAGE ...] [--small] [--plain | --no-retry]`.

Each chosen page is executed N times, in rounds (every chosen page once, in
execution order, then again), with no cache and no HTML; a page they read
values from that was not chosen is executed once, first. The report says,
per page, how many runs passed, their times against the page's budget, any
retry, and for every asserted run-dependent quantity the bar it is held to
and its min, median and max over the runs, with the number of runs that
missed the bar. It is printed as a table and written to <dest>/repeat.json
(default dest: _build/repeat or _build/repeat-small); every run's executed
notebook, glued values and watchdog logs are kept under
<dest>/runs/<page>/<run>/ (the logs only of a run that failed or dumped
stacks).

Naming the asserted quantities. A page names a run-dependent claim it
asserts by gluing the measured quantity and its bar, both in the cell that
asserts it, under one name and that name with a suffix saying which way the
bar holds:

    glue_values(ladder_max_residual=r, ladder_max_residual_at_most=0.05)
    assert r <= 0.05, ...

    <q>_at_most    q <= bar        <q>_below    q < bar
    <q>_at_least   q >= bar        <q>_above    q > bar

A claim measured until sure within a bounded number of tries glues how many
it took the same way (``comm_tries=2, comm_tries_at_most=3``). A quantity is
reported when the page glued both names in a run. The cell glues before it
asserts, so that a run that fails still records the value it failed on.

Modes. By default each run goes through the build's own execution (one
retry from a fresh kernel when a cell stops answering, the nbclient
polling work-around). ``--no-retry`` fails a page at once instead; ``--plain``
is papermill as a reader would run it: no retry and no work-around. In every
mode the kernel and the client write where they are when a cell runs too
long (execution.py's watchdogs), and a run that timed out is reported with
what those logs say: whether the kernel had finished the cell the client was
waiting on (the client lost its reply), or was still in it (its stacks, and
those of its ranks, say where). A run whose client saw a reply more than
STALL_S after the kernel had finished the cell is reported with those cells
even when it passed (a lost wake-up that the cell timeout ended).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path

from . import execution, pages, paths, values

BARS = {
    "_at_most": "<=",
    "_at_least": ">=",
    "_below": "<",
    "_above": ">",
}


def asserted(glued: dict) -> dict:
    """The asserted quantities among a run's glued values: name ->
    (relation, bar, value), for every ``<q><suffix>`` (BARS) whose ``<q>`` was
    glued too, both numbers."""
    found = {}
    for name, bar in glued.items():
        for suffix, relation in BARS.items():
            if name.endswith(suffix) and len(name) > len(suffix):
                q = name[: -len(suffix)]
                value = glued.get(q)
                if isinstance(value, (int, float)) and isinstance(bar, (int, float)):
                    found[q] = (relation, bar, value)
    return found


def holds(relation: str, value: float, bar: float) -> bool:
    return {
        "<=": value <= bar,
        ">=": value >= bar,
        "<": value < bar,
        ">": value > bar,
    }[relation]


def _seconds_of_day(clock: str) -> float:
    h, m, s = clock.split(":")
    return 3600 * int(h) + 60 * int(m) + float(s)


def diagnose(stacks_dir: Path) -> str | None:
    """What the watchdog logs of a run say about where it stopped: the last
    cell the client sent without a reply, and whether the kernel had finished
    it before the cell's timeout ran out (then the client lost the reply) or
    was still in it; None when every cell the client sent was answered. Both
    logs start each line with the time of day (execution.stamp)."""
    client = stacks_dir / "client.txt"
    if not client.exists():
        return None
    waiting = deadline = None
    for line in client.read_text(errors="replace").splitlines():
        parts = line.replace(",", "").split()
        if len(parts) >= 5 and parts[1:3] == ["notebook", "cell"]:
            waiting = None if parts[4] == "replied" else parts[3]
            if parts[4] == "sent" and len(parts) >= 7 and parts[5] == "timeout":
                deadline = _seconds_of_day(parts[0]) + float(parts[6])
    if waiting is None:
        return None
    kernel_lines = []
    for log in sorted(stacks_dir.glob("kernel-*.txt")):
        kernel_lines += log.read_text(errors="replace").splitlines()
    cells = [
        ln
        for ln in kernel_lines
        if " code cell " in ln
        and (" started:" in ln or " finished " in ln)
        and (deadline is None or _seconds_of_day(ln.split()[0]) <= deadline)
    ]
    last = cells[-1].split(" ", 1)[1] if cells else ""
    dumped = any(ln.startswith("Thread 0x") for ln in kernel_lines)
    when = "" if deadline is None else " when its timeout ran out"
    if " finished" in last:
        return (
            f"the client waited on notebook cell {waiting}; the kernel had finished "
            f"it{when} ({last}): the client lost the reply"
        )
    if " started" in last:
        return (
            f"the client waited on notebook cell {waiting}; the kernel was still in "
            f"it{when} ({last})"
            + ("; its stacks and descendants are in the kernel log" if dumped else "")
        )
    return f"the client waited on notebook cell {waiting}; the kernel logged nothing"


# A reply the client sees this long after the kernel finished the cell was lost
# for a while (with the build's polling work-around it comes within half a second).
STALL_S = 5.0


def stalls(stacks_dir: Path) -> list[list]:
    """The cells whose reply the client saw more than STALL_S after the
    kernel had finished them, as [code cell number, seconds]: the n-th cell
    the client sent is the kernel's n-th code cell."""
    client = stacks_dir / "client.txt"
    if not client.exists():
        return []
    replied: list[float | None] = []
    for line in client.read_text(errors="replace").splitlines():
        parts = line.replace(",", "").split()
        if len(parts) >= 5 and parts[1:3] == ["notebook", "cell"]:
            if parts[4] == "sent":
                replied.append(None)
            elif parts[4] == "replied" and replied:
                replied[-1] = _seconds_of_day(parts[0])
    finished: dict[int, float] = {}
    for log in sorted(stacks_dir.glob("kernel-*.txt")):
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split()
            if (
                len(parts) >= 5
                and parts[1:3] == ["code", "cell"]
                and parts[4] == ("finished")
            ):
                finished[int(parts[3])] = _seconds_of_day(parts[0])
    found = []
    for n, t in enumerate(replied, start=1):
        if t is not None and n in finished and t - finished[n] > STALL_S:
            found.append([n, round(t - finished[n], 1)])
    return found


def summarise(runs: list[dict], budget_s: float) -> dict:
    """One page's runs: counts, times and every asserted quantity's spread."""
    seconds = [r["seconds"] for r in runs]
    quantities: dict[str, dict] = {}
    for i, r in enumerate(runs):
        for q, (relation, bar, value) in asserted(r["values"]).items():
            entry = quantities.setdefault(
                q, {"relation": relation, "bars": [], "values": [], "runs": []}
            )
            entry["bars"].append(bar)
            entry["values"].append(value)
            entry["runs"].append(i)
    for entry in quantities.values():
        v, bars = entry["values"], entry["bars"]
        entry.update(
            n=len(v),
            min=min(v),
            median=statistics.median(v),
            max=max(v),
            bar=bars[0] if len(set(bars)) == 1 else [min(bars), max(bars)],
            missed=sum(
                not holds(entry["relation"], x, b) for x, b in zip(v, bars, strict=True)
            ),
        )
    return {
        "runs": len(runs),
        "passed": sum(r["error"] is None for r in runs),
        "seconds": {
            "min": min(seconds),
            "median": statistics.median(seconds),
            "max": max(seconds),
        },
        "budget_s": budget_s,
        "over_budget": sum(s > budget_s for s in seconds),
        "retried": sum(r["retry"] is not None for r in runs),
        "stalled": sum(bool(r.get("stalls")) for r in runs),
        "longest_stall_s": max(
            (st[1] for r in runs for st in r.get("stalls") or []), default=0.0
        ),
        "failures": [
            {"run": i, "error": r["error"], "diagnosis": r.get("diagnosis")}
            for i, r in enumerate(runs)
            if r["error"] is not None
        ],
        "quantities": dict(sorted(quantities.items())),
        "each_run": runs,
    }


def _number(x) -> str:
    if isinstance(x, list):
        return f"{_number(x[0])}..{_number(x[1])}"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e6):
        return f"{x:g}"
    return f"{x:.4g}"


def table(report: dict) -> str:
    """The report as the printed table: a line per page, then a line per
    asserted quantity."""
    lines = [
        f"{report['repeat']} runs per page, {report['sizes']} sizes, "
        f"mode {report['mode']}; load average {report['load_before'][0]:.2f} "
        f"before, {report['load_after'][0]:.2f} after",
        f"{'page / quantity':<34} {'passed':>7} {'bar':>12} {'min':>9} "
        f"{'median':>9} {'max':>9} {'missed':>6}",
        "(a page's line: runs passed, its budget, its run times, runs over budget;"
        " a quantity's: runs that glued it, its bar, its spread, runs that missed)",
    ]
    for page, s in report["pages"].items():
        t, budget = s["seconds"], "budget " + _number(s["budget_s"])
        lines.append(
            f"{page:<34} {s['passed']:>3}/{s['runs']:<3} {budget:>12} "
            f"{t['min']:>8.1f}s {t['median']:>8.1f}s {t['max']:>8.1f}s "
            f"{s['over_budget']:>6}"
            + (f"  retried {s['retried']}" if s["retried"] else "")
            + (
                f"  replies seen late in {s['stalled']} run(s), up to "
                f"{s['longest_stall_s']:.0f} s"
                if s["stalled"]
                else ""
            )
        )
        for q, e in s["quantities"].items():
            lines.append(
                f"  {q:<32} {e['n']:>7} {e['relation'] + ' ' + _number(e['bar']):>12} "
                f"{_number(e['min']):>9} {_number(e['median']):>9} "
                f"{_number(e['max']):>9} {e['missed']:>6}"
            )
        for f in s["failures"]:
            lines.append(f"  run {f['run']} failed: {f['error'].splitlines()[0][:150]}")
            if f["diagnosis"]:
                lines.append(f"    {f['diagnosis']}")
    return "\n".join(lines)


def repeat(
    dest: Path,
    small: bool,
    n: int,
    only: list[str] | None = None,
    retry: bool = True,
    workaround: bool = True,
    log=print,
) -> dict:
    """Execute the pages ``only`` (all when None) ``n`` times each; returns
    the report (also written to <dest>/repeat.json)."""
    if n < 1:
        raise ValueError(f"--repeat must be at least 1, got {n}")
    dest = Path(dest).resolve()
    everything = {p.stem: p for p in pages.chapters()}
    unknown = sorted(set(only or ()) - set(everything))
    if unknown:
        raise SystemExit(
            f"no executable page named {unknown}; pages: {sorted(everything)}"
        )
    chosen = set(only or everything)
    order = [p for p in everything.values() if p.stem in chosen]
    parameters = {"SMALL": True} if small else {}
    runs_dir, values_dir = dest / "runs", dest / "values"
    shutil.rmtree(runs_dir, ignore_errors=True)
    shutil.rmtree(values_dir, ignore_errors=True)
    values_dir.mkdir(parents=True)
    if retry:
        mode = "build (retry, work-around)"
    else:
        mode = "build, no retry" if workaround else "plain papermill"
    report = {
        "repeat": n,
        "sizes": "test" if small else "reader",
        "mode": mode,
        "load_before": list(os.getloadavg()),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pages": {},
    }
    results: dict[str, list[dict]] = {p.stem: [] for p in order}

    def run_once(page: Path, label: str) -> dict:
        where = runs_dir / page.stem / label
        stacks = where / "stacks"
        where.mkdir(parents=True)
        load = os.getloadavg()[0]
        log(f"{page.stem} run {label} ...")
        started = time.perf_counter()
        try:
            seconds, error, retried = execution.execute(
                page,
                where,
                parameters,
                retry=retry,
                workaround=workaround,
                stacks_dir=stacks,
            )
        except Exception as exc:  # noqa: BLE001 (the run fails, the repeat goes on)
            seconds, error, retried = (
                time.perf_counter() - started,
                f"{type(exc).__name__}: {exc}",
                None,
            )
        out = where / f"{page.stem}.ipynb"
        glued = {}
        if out.exists():
            try:
                glued = values.glued_values(out, page.stem)
            except values.GlueError as exc:
                error = error or str(exc)
        values.write_values(where, page.stem, glued)  # where/values/<page>.json
        if error is None:
            values.write_values(dest, page.stem, glued)
        diagnosis = diagnose(stacks) if error else None
        late = stalls(stacks)
        dumped = any(
            "Thread 0x" in f.read_text(errors="replace") for f in stacks.glob("*.txt")
        )
        if error is None and not dumped and not late:
            shutil.rmtree(stacks, ignore_errors=True)
        log(
            f"  {page.stem} run {label}: {seconds:.1f} s"
            + (f"  FAILED: {error.splitlines()[0][:200]}" if error else "")
            + (f"  ({diagnosis})" if diagnosis else "")
            + (f"  (replies seen late: {late})" if late else "")
        )
        return {
            "seconds": round(seconds, 1),
            "error": error,
            "retry": retried,
            "diagnosis": diagnosis,
            "stalls": late,
            "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "values": glued,
        }

    for i in range(n):
        for page in order:
            results[page.stem].append(run_once(page, str(i)))
    report["load_after"] = list(os.getloadavg())
    for page in order:
        report["pages"][page.stem] = summarise(results[page.stem], pages.budget_s(page))
    paths.write_atomically(dest / "repeat.json", json.dumps(report, indent=1))
    return report
