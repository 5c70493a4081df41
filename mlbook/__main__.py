"""``python -m mlbook plan ...`` and ``python -m mlbook calibrate ...``: the
book's commands."""

import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plan"]:
        from mlbook.plan.cli import main as plan_main

        return plan_main(argv[1:])
    if argv[:1] == ["calibrate"]:
        from mlbook.calibrate.cli import main as calibrate_main

        return calibrate_main(argv[1:])
    asked = argv[:1] in (["-h"], ["--help"])
    print(
        "usage: python -m mlbook {plan,calibrate} [--help | options]",
        file=sys.stdout if asked else sys.stderr,
    )
    return 0 if asked else 2


if __name__ == "__main__":
    sys.exit(main())
