"""Every multi-process wait is bounded and names what it waited for
(mlbook.common_torch.launch), and a process the page started can be asked
for its stacks (mlbook.common.stacks), as the build's kernel watchdog asks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mlbook.common import stacks
from mlbook.common_torch import launch

# These tests arm SIGALRM's timer themselves and check it is left disarmed, so
# pytest-timeout watches them from a thread instead of with that same timer.
pytestmark = pytest.mark.timeout(60, method="thread")

ROOT = Path(__file__).resolve().parent.parent


def test_bounded_interrupts_a_blocked_read_and_names_it():
    r, w = os.pipe()
    previous = signal.getsignal(signal.SIGALRM)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="waited 0 s for the test's empty pipe"):
            with launch.bounded(0.3, "the test's empty pipe"):
                os.read(r, 1)  # nothing is ever written
        assert time.monotonic() - start < 5
    finally:
        os.close(r)
        os.close(w)
    assert signal.getsignal(signal.SIGALRM) is previous  # put back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # and disarmed


def test_bounded_lets_a_quick_block_through():
    with launch.bounded(5, "nothing"):
        x = 1 + 1
    assert x == 2 and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_bounded_puts_back_a_timer_that_was_running():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with launch.bounded(5, "nothing"):
            pass
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < left <= 30 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_bounded_outside_the_main_thread_runs_the_block_as_it_is():
    done = []

    def body():
        with launch.bounded(0.01, "nothing"):
            time.sleep(0.1)  # past the bound: no signal can reach this thread
        done.append(True)

    t = threading.Thread(target=body)
    t.start()
    t.join(5)
    assert done == [True]


class _NeverStarts:
    """A Process whose start() waits on a fork server that never answers."""

    def __init__(self, target=None, args=()):
        self._r, self._w = os.pipe()

    def start(self):
        os.read(self._r, 4)  # the pid that never comes


class _NoAnswer:
    Process = _NeverStarts


def test_a_fork_server_that_never_answers_fails_the_group_naming_the_rank(
    monkeypatch,
):
    monkeypatch.setattr(launch, "_fork_context", lambda: _NoAnswer())
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="the fork server to start rank 0 of 2"):
        launch.fork_group(print, [], nproc=2, timeout_s=1.0)
    assert time.monotonic() - start < 10


class _Undying:
    """A started worker that is never reported gone, even after SIGKILL (as a
    process whose exit the fork server never reports)."""

    helpers: list = []

    def __init__(self, target=None, args=()):
        self.log = args[3]

    def start(self):
        helper = subprocess.Popen(["sleep", "30"])
        _Undying.helpers.append(helper)
        self.pid = helper.pid
        Path(self.log).write_text("a worker's log\n")

    def join(self, timeout=None):
        time.sleep(min(timeout or 0, 0.2))

    def is_alive(self):
        return True

    def kill(self):
        pass


class _Zombies:
    Process = _Undying


def test_a_worker_never_reported_gone_is_named_instead_of_waited_for(monkeypatch):
    monkeypatch.setattr(launch, "_fork_context", lambda: _Zombies())
    monkeypatch.setattr(launch, "KILLED_EXIT_S", 0.2)
    try:
        with pytest.raises(TimeoutError) as err:
            launch.fork_group(print, [], nproc=2, timeout_s=0.5)
    finally:
        for helper in _Undying.helpers:
            helper.kill()
            helper.wait()
    text = str(err.value)
    assert "rank(s) [0, 1] of 2 still running" in text
    assert "not reported gone" in text and "a worker's log" in text


HELPER = """\
import sys, time
from mlbook.common import stacks
stacks.on_request("helper")
print("ready", flush=True)
def waiting_in_the_helper():
    time.sleep(30)
waiting_in_the_helper()
"""


def test_a_process_that_asked_for_it_writes_its_stacks_on_sigusr1(tmp_path):
    env = dict(os.environ, MLBOOK_STACKS_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", HELPER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        assert stacks.marked(child.pid, tmp_path)  # the watchdog may signal it
        assert not stacks.marked(os.getpid(), tmp_path)  # nothing else
        dump = tmp_path / f"helper-{child.pid}.txt"
        deadline = time.monotonic() + 20
        while "waiting_in_the_helper" not in (
            dump.read_text() if dump.exists() else ""
        ):  # asked again until it is in the function (it may not be there yet)
            assert time.monotonic() < deadline, "no stacks written"
            os.kill(child.pid, signal.SIGUSR1)
            time.sleep(0.2)
        assert child.poll() is None  # dumping did not end it
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert not stacks.marked(child.pid, tmp_path)  # gone: its pid is not its own


def test_outside_the_build_nothing_is_marked(tmp_path, monkeypatch):
    monkeypatch.delenv("MLBOOK_STACKS_DIR", raising=False)
    assert stacks.folder() is None
    with open(tmp_path / "log.txt", "w") as log:
        assert stacks.on_request("rank0", file=log) is None
    import faulthandler

    faulthandler.unregister(signal.SIGUSR1)  # this test process's handler


def test_a_role_must_be_a_plain_name():
    with pytest.raises(ValueError, match="role"):
        stacks.on_request("../x")
