"""The command line of tools/build.py (its --help prints the package's
docstring)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import bookbuild

from . import machine, paths, repeat, run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=bookbuild.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--small", action="store_true", help="test sizes (SMALL=True)")
    ap.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="output folder (default _build/book or _build/test)",
    )
    ap.add_argument("--only", nargs="*", help="chapter names (file stems) to execute")
    ap.add_argument("--no-html", action="store_true", help="execute only")
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="execute every page, even those unchanged",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="pages executed at once, each on its own cores "
        f"(default here: {machine.default_jobs()})",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        default=None,
        help="execute the chosen pages N times each (no cache, no HTML) and report "
        "the pass counts and the spread of every asserted quantity "
        "(tools/bookbuild/repeat.py says how pages name them)",
    )
    ap.add_argument(
        "--no-retry",
        action="store_true",
        help="with --repeat: a cell that stops answering fails the run, no retry",
    )
    ap.add_argument(
        "--plain",
        action="store_true",
        help="with --repeat: papermill as a reader runs it (no retry, no "
        "work-around for the client's lost wake-ups)",
    )
    ap.add_argument(
        "--isa-cap",
        choices=sorted(machine.ISA_CAPS),
        default=None,
        help="cap the CPU instruction sets torch's kernels use, to build as a CPU "
        "without AMX (avx512_bf16) or with AVX2 only (avx2) would; into its own "
        "folder (default _build/<book|test>-<cap>), the cap in the cache key",
    )
    args = ap.parse_args(argv)
    suffix = ""
    if args.isa_cap:
        os.environ.update(machine.ISA_CAPS[args.isa_cap])  # every kernel inherits it
        suffix = f"-{args.isa_cap}"
    # The kernels, ranks and workers this starts write bytecode as make's do
    # (the Makefile says why): with PYTHONDONTWRITEBYTECODE=1 inherited, each
    # compiled torch again; a reader-size repeat of faults took 61 s, not 28 s.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.repeat is not None:
        dest = args.dest or paths.ROOT / "_build" / (
            ("repeat-small" if args.small else "repeat") + suffix
        )
        report = repeat.repeat(
            dest,
            args.small,
            args.repeat,
            args.only,
            retry=not (args.no_retry or args.plain),
            workaround=not args.plain,
        )
        print(repeat.table(report))
        print(f"report: {Path(dest).resolve() / 'repeat.json'}")
        passed = all(s["passed"] == s["runs"] for s in report["pages"].values())
        return 0 if passed else 1
    if args.no_retry or args.plain:
        ap.error("--no-retry and --plain go with --repeat")
    dest = args.dest or paths.ROOT / "_build" / (
        ("test" if args.small else "book") + suffix
    )
    started = time.perf_counter()
    report = run.build(
        dest,
        args.small,
        args.only,
        html=not args.no_html,
        cache=not args.no_cache,
        jobs=args.jobs,
    )
    failed = [name for name, r in report["chapters"].items() if r["error"]]
    executed = [name for name, r in report["chapters"].items() if not r["cached"]]
    ok = not failed
    if report["html"] is not None:
        for line in report["html"]["warnings"]:
            print(line)
        if report["html"]["returncode"] != 0:
            ok = False
            print(f"the book build failed; see {dest / 'build.log'}")
        else:
            print(f"HTML book: {report['html']['dir']}/index.html")
    took = time.perf_counter() - started
    print(
        f"done in {took:.0f} s; executed {len(executed)} of "
        f"{len(report['chapters'])} pages" + (f"; failed: {failed}" if failed else "")
    )
    return 0 if ok else 1
