"""A fork_group body that never returns, in a module that imports nothing
heavy: a forked rank reaches it within milliseconds (unpickling a function
from a test module would import that module, and torch with it, first), so
tests/test_faults_demos.py's 5 s timeout finds every rank inside it."""

import os
import time
from pathlib import Path


def stuck_forever(argv):
    """Write (pid, parent pid) to argv[0]/rank<r>, then sleep in a loop."""
    Path(argv[0], f"rank{os.environ['RANK']}").write_text(
        f"{os.getpid()} {os.getppid()}"
    )
    while True:
        time.sleep(0.05)


def returns(argv):
    """Return at once: a group of it starts the fork server (imports torch,
    seconds on a loaded machine) before a group whose timeout is timed."""
