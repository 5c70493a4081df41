"""Starting process groups on this host: torchrun, or forked workers with
torchrun's environment, each killed if it outlives its time.

Every wait here is bounded and fails naming what it waited for: the fork
server's answer when a worker starts, the workers' exit, their exit after
SIGKILL, torchrun's exit. Workers write their Python stacks on SIGUSR1
(mlbook.common.stacks), which fork_group sends to a worker that outlived its
time and which the book build's kernel watchdog sends to every process the
page started when a cell runs too long.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mlbook.common import stacks, validate

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children before grandchildren."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


@dataclass
class Launch:
    returncode: int
    wall_s: float
    output: str


def torchrun(
    module: str,
    args: list[str],
    nproc: int = 2,
    max_restarts: int = 0,
    timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> Launch:
    """Run ``python -m torch.distributed.run ... -m module args`` on this host.

    c10d rendezvous on 127.0.0.1 at a free port, gloo over the loopback
    interface, one thread per worker. The whole process group is killed if it
    outlives ``timeout_s``, and any process it left behind is killed on the
    way out of this function.
    """
    validate.positive_int("nproc", nproc)
    validate.non_negative("max_restarts", max_restarts)
    validate.positive("timeout_s", timeout_s)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(max_restarts),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"mlbook-{os.getpid()}-{port}",
        "--monitor-interval",
        "0.1",
        "-m",
        module,
        *args,
    ]
    env = dict(os.environ)
    env.update(
        MASTER_ADDR="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    owned_log = log_path is None
    log_path = Path(tempfile.mkstemp(suffix=".log")[1]) if owned_log else Path(log_path)
    start = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        rc = None
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if (
                rc is None
            ):  # still running (timeout or interrupt): it and all it started must go
                # torchrun puts each worker in a session of its own, so kill the
                # agent's descendants by pid as well as the agent's own group;
                # the agent is frozen first so that it cannot start new ones.
                os.kill(proc.pid, signal.SIGSTOP)
                for pid in _descendants(proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os.killpg(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=KILLED_EXIT_S)
                except subprocess.TimeoutExpired:
                    raise TimeoutError(
                        f"torchrun {module} (pid {proc.pid}) did not exit "
                        f"{KILLED_EXIT_S:.0f} s after SIGKILL"
                    ) from None
    wall = time.perf_counter() - start
    text = log_path.read_text(errors="replace")
    if owned_log:
        log_path.unlink(missing_ok=True)
    if rc is None:
        raise TimeoutError(
            f"torchrun {module} ran past timeout_s={timeout_s}; output:\n{text[-3000:]}"
        )
    return Launch(rc, wall, text)


def _forked_worker(main, argv, env, log_path):
    """Body of a forked worker: own log, own environment, exit code as the result.
    SIGUSR1 writes every thread's Python stack to the log (``fork_group`` sends
    it to a worker that outlived its time, before killing it; so does the book
    build's watchdog when a cell runs too long)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
    os.environ.update(env)
    stacks.on_request(f"rank{env.get('RANK', '')}", file=sys.stderr)
    code = 0
    try:
        main(argv)
    except BaseException:  # report, then leave without running the parent's atexit
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    os._exit(code)


# Workers are forked from a fork server: a fresh single-threaded process that
# has imported torch and done nothing else. A plain fork of the caller copies
# whatever locks its threads (OpenMP's pool, the profiler's, a kernel client's
# sockets) held at that instant, and a child can wait on one forever; a
# fork of the server cannot. Only the first group pays for the imports:
# torch, torch.distributed, torch._dynamo (which the first optimizer
# constructed in a process imports: 1-3 s per worker on a 2-core machine
# otherwise) and DCP (what the Checkpointer saves with). The server also
# answers SIGUSR1 with its stacks (forkserver_stacks).
FORK_SERVER_PRELOAD = [
    "mlbook.common_torch.forkserver_stacks",
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "torch.distributed.checkpoint",
]

# How long a worker killed with SIGKILL may take to be reported gone.
KILLED_EXIT_S = 10.0


@contextlib.contextmanager
def bounded(seconds: float, what: str):
    """Raise TimeoutError("... waited {seconds} s for {what}") if the block
    outlasts ``seconds``: SIGALRM interrupts a wait in a system call (a read
    from a pipe that never gets its bytes). Signals reach the main thread
    only, so in another thread the block runs unbounded (as before)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise TimeoutError(f"waited {seconds:.0f} s for {what}")

    previous = signal.signal(signal.SIGALRM, expired)
    started = time.monotonic()
    earlier, interval = signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if earlier > 0:  # someone else's timer: put it back, less the time spent
            left = max(earlier - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _fork_context():
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORK_SERVER_PRELOAD)
    return ctx


def fork_group(
    main, argv: list[str], nproc: int = 2, timeout_s: float = 60.0
) -> Launch:
    """Run ``main(argv)`` in ``nproc`` forked processes that form a gloo group.

    The same environment torchrun gives its workers (RANK, WORLD_SIZE,
    MASTER_ADDR=127.0.0.1, a free MASTER_PORT, no restarts), without paying
    for a launcher and a fresh ``import torch`` per worker: the children are
    forks of a server that imported torch once (``_fork_context``), so
    ``main`` must be a module-level function and ``argv`` picklable.

    ``timeout_s`` bounds it all, from the first start to the last exit. A
    worker the fork server has not started by then is a TimeoutError naming
    its rank; workers still alive have their Python stacks written to their
    logs (SIGUSR1), then are killed, and the TimeoutError names them and
    carries each one's log. The logs live in the build's stacks folder when
    it names one (mlbook.common.stacks), so a group that is stuck leaves
    them there.
    """
    validate.positive_int("nproc", nproc)
    validate.positive("timeout_s", timeout_s)
    ctx = _fork_context()
    port = free_port()
    parent = stacks.folder()
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlbook-fork-", dir=parent) as tmp:
        procs, late, unkilled = [], [], []
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        try:
            for rank in range(nproc):
                env = {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(nproc),
                    "LOCAL_WORLD_SIZE": str(nproc),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "GLOO_SOCKET_IFNAME": "lo",
                    "TORCHELASTIC_RESTART_COUNT": "0",
                }
                p = ctx.Process(
                    target=_forked_worker,
                    args=(main, argv, env, os.path.join(tmp, f"rank{rank}.log")),
                )
                left = deadline - time.monotonic()
                with bounded(left, f"the fork server to start rank {rank} of {nproc}"):
                    p.start()
                procs.append(p)
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        finally:
            late = [r for r, p in enumerate(procs) if p.is_alive()]  # ours, by pid
            for r in late:
                try:  # where each one is stuck, into its log
                    os.kill(procs[r].pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            if late:
                time.sleep(1.0)
            for r in late:
                procs[r].kill()
                procs[r].join(KILLED_EXIT_S)
            unkilled = [r for r in late if procs[r].is_alive()]
        wall = time.perf_counter() - start
        logs = {
            r: Path(tmp, f"rank{r}.log").read_text(errors="replace")
            for r in range(nproc)
            if Path(tmp, f"rank{r}.log").exists()
        }
    output = "".join(f"--- rank {r} ---\n{text}" for r, text in logs.items())
    if late:
        each = 3000 // len(late)
        raise TimeoutError(
            f"forked group ran past timeout_s={timeout_s}: rank(s) {late} of "
            f"{nproc} still running"
            + (
                f"; rank(s) {unkilled} not reported gone {KILLED_EXIT_S:.0f} s "
                "after SIGKILL"
                if unkilled
                else ""
            )
            + "; the end of each one's log (its stacks last):\n"
            + "".join(f"--- rank {r} ---\n{logs.get(r, '')[-each:]}" for r in late)
        )
    return Launch(max(abs(p.exitcode) for p in procs), wall, output)


# Setting up a gloo group on a loaded host now and then fails before any work
# starts ("connectFullMesh failed ... Connection refused"). That says nothing
# about the work, so such a launch may be run again from scratch.
GLOO_SETUP_ERRORS = ("connectFullMesh failed",)


def group_failed_to_form(launch: Launch) -> bool:
    """True when a launch failed while its gloo group was being set up."""
    return launch.returncode != 0 and any(e in launch.output for e in GLOO_SETUP_ERRORS)


def fork_group_formed(
    main, argv: list[str], nproc: int = 2, timeout_s: float = 60.0, tries: int = 3
) -> tuple[Launch, int]:
    """``fork_group``, launched again (``tries`` times in all) while the gloo
    group fails to form. Returns the last launch and how many were redone."""
    validate.positive_int("tries", tries)
    for redone in range(tries):
        launch = fork_group(main, argv, nproc=nproc, timeout_s=timeout_s)
        if not group_failed_to_form(launch):
            return launch, redone
    return launch, redone
