"""Execute every chapter with papermill, then build the HTML book from the
executed copies with warnings as errors (the package tools/bookbuild/ does the
work; its docstring, printed by --help, says how).

    python tools/build.py               # reader sizes -> _build/book/_build/html
    python tools/build.py --small       # test sizes   -> _build/test/_build/html
    python tools/build.py --only mfu    # one chapter (the others appear as titles)
    python tools/build.py --no-cache    # execute every page, even unchanged ones
    python tools/build.py --jobs 4      # four chapters at a time, on their own cores
    python tools/build.py --repeat 10 --only capstone  # 10 runs: passes, spreads
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bookbuild.cli import main  # noqa: E402 (after the path it is found on)

if __name__ == "__main__":
    sys.exit(main())
