"""``python -m mlbook calibrate``: measure this machine into a machine file.

Progress lines go to stderr as each measurement ends; the file is written
whole at the end (a temporary file in the same folder, fsynced and renamed),
so an interrupted or failed calibration leaves nothing behind. Bad input (an
output path that cannot be written) and a calibration that does not finish
exit with status 2 and one line that names the file and the rule.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from mlbook.calibrate import formulas as cal
from mlbook.common.files import write_atomic


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="python -m mlbook calibrate",
        description="Measure this machine (matmul ceilings, memory bandwidth, "
        "all-reduce alpha and beta, storage, tokenizer and loader throughput, a "
        "reference training step) and write the result as JSON.",
    )
    ap.add_argument(
        "--out",
        default="machine.json",
        help="the machine file to write (default machine.json in this folder)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="smaller measurements (the test build's)"
    )
    ap.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="what to calibrate (default: a CUDA GPU if there is one)",
    )
    return ap


def command(argv: list[str]) -> str:
    """The command as typed, with the ISA caps it ran under in front."""
    caps = [f"{k}={os.environ[k]}" for k in cal.ISA_VARIABLES if os.environ.get(k)]
    return " ".join([*caps, "python -m mlbook calibrate", *map(shlex.quote, argv)])


def _error(prog: str, path, rule: str) -> int:
    print(f"{prog}: error: {path}: {rule}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = parser()
    args = ap.parse_args(argv)
    try:
        out = cal.check_writable(args.out)
    except cal.MachineFileError as exc:
        return _error(ap.prog, exc.path, exc.rule)
    from mlbook.calibrate import experiments  # torch: only once the path is good

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - start:5.1f} s] {line}", file=sys.stderr)

    start = time.perf_counter()
    try:
        machine = experiments.calibrate(
            quick=args.quick,
            device=args.device,
            workdir=out.parent,
            log=log,
        )
    except KeyboardInterrupt:
        return _error(ap.prog, out, "calibration interrupted; nothing was written")
    except Exception as exc:  # one measurement failed: say which, write nothing
        first = (str(exc).splitlines() or [""])[0]
        return _error(
            ap.prog,
            out,
            f"calibration failed ({type(exc).__name__}: {first}); nothing was written",
        )
    created = dict(machine.created, command=command(argv))
    machine = cal.Machine(
        machine.device,
        machine.torch,
        machine.measurements,
        machine.reference,
        created,
    )
    try:
        write_atomic(out, cal.dumps(machine))
    except OSError as exc:
        return _error(ap.prog, out, f"cannot be written ({exc.strerror})")
    log(f"wrote {out} in {time.perf_counter() - start:.1f} s")
    return 0
