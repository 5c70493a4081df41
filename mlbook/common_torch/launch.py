"""Starting process groups on this host: torchrun, or forked workers with
torchrun's environment, each killed if it outlives its time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlbook.common import validate

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
                proc.wait()
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
    it to a worker that outlived its time, before killing it)."""
    import faulthandler

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    os.environ.update(env)
    code = 0
    try:
        main(argv)
    except BaseException:  # report, then leave without running the parent's atexit
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    os._exit(code)


# Workers are forked from a fork server: a fresh process that has imported
# torch and done nothing else (one Python thread, nothing running). A plain fork
# of the caller copies whatever locks its threads (OpenMP's pool, the
# profiler's, a kernel client's sockets) held at that instant, and a child can
# wait on one forever; a fork of the server cannot. Only the first group pays
# for the imports: torch, torch.distributed, torch._dynamo (which the first
# optimizer constructed in a process imports: 1-3 s per worker on a 2-core
# machine otherwise) and DCP (what the Checkpointer saves with).
FORK_SERVER_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "torch.distributed.checkpoint",
]


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
    ``main`` must be a module-level function and ``argv`` picklable. Children
    still alive after ``timeout_s`` have their Python stacks written to their
    logs (SIGUSR1), then are killed; the error carries the logs.
    """
    validate.positive_int("nproc", nproc)
    validate.positive("timeout_s", timeout_s)
    ctx = _fork_context()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mlbook-fork-") as tmp:
        procs, timed_out = [], False
        start = time.perf_counter()
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
                p.start()
                procs.append(p)
            deadline = time.monotonic() + timeout_s
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        finally:
            late = [p for p in procs if p.is_alive()]  # only our own children, by pid
            for p in late:
                try:
                    os.kill(
                        p.pid, signal.SIGUSR1
                    )  # where each one is stuck, into its log
                except ProcessLookupError:
                    pass
            if late:
                timed_out = True
                time.sleep(1.0)
            for p in late:
                p.kill()
                p.join()
        wall = time.perf_counter() - start
        output = "".join(
            f"--- rank {r} ---\n"
            + Path(tmp, f"rank{r}.log").read_text(errors="replace")
            for r in range(nproc)
            if Path(tmp, f"rank{r}.log").exists()
        )
    if timed_out:
        raise TimeoutError(
            f"forked group ran past timeout_s={timeout_s}; output:\n{output[-3000:]}"
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
