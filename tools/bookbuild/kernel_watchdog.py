"""Run inside every kernel the build starts (IPython's ``exec_files``), so
that a page that stops answering says where it stopped.

When the environment names a folder (MLBOOK_STACKS_DIR), the kernel writes
to <folder>/kernel-<pid>.txt:

- one line as each cell starts and one as it finishes ("cell 7 started ...",
  "cell 7 finished ok"): a page that hangs after its kernel wrote "finished"
  for the cell the client waits on was lost by the client, not the kernel;
- when a cell has run longer than MLBOOK_CELL_WATCHDOG_S seconds (default
  120), every thread's Python stack (faulthandler, from its own C thread, so
  it works while the main thread holds the GIL), again after each further
  such interval while the cell runs; and, once, from a Python thread, the
  kernel's descendant processes (pid, state, the kernel function each one sleeps in, its
  command line), after asking each descendant that registered for it
  (<folder>/sigusr1-<pid>, holding its start time: see mlbook.common.stacks)
  for its own stacks with SIGUSR1.

It binds no name in the page's namespace. Without MLBOOK_STACKS_DIR it does
nothing.
"""


def _mlbook_kernel_watchdog():
    import faulthandler
    import os
    import threading
    import time

    folder = os.environ.get("MLBOOK_STACKS_DIR")
    if not folder:
        return
    after_s = float(os.environ.get("MLBOOK_CELL_WATCHDOG_S", "120"))
    os.makedirs(folder, exist_ok=True)
    log = open(  # open for the kernel's life: faulthandler keeps its fd
        os.path.join(folder, f"kernel-{os.getpid()}.txt"), "a", buffering=1
    )
    state = {"n": 0, "deadline": None, "reported": False}
    lock = threading.Lock()

    def say(line):
        now = time.time()
        clock = time.strftime("%H:%M:%S", time.localtime(now))
        log.write(f"{clock}.{int(now % 1 * 1000):03d} {line}\n")
        log.flush()

    def descendants():
        found, todo = [], [os.getpid()]
        while todo:
            parent = todo.pop()
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{parent}/task/{task}/children") as f:
                        kids = [int(k) for k in f.read().split()]
                except OSError:
                    continue
                found.extend(kids)
                todo.extend(kids)
        return found

    def read(path, default="?"):
        try:
            with open(path, "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return default

    def report(cell):
        kids = descendants()
        for pid in kids:  # only those that said they dump on SIGUSR1
            marker = read(os.path.join(folder, f"sigusr1-{pid}"), "").split()
            started = read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()[19:20]
            if marker and marker[:1] == started:  # that process, not a reused pid
                try:
                    os.kill(pid, 10)  # SIGUSR1
                except OSError:
                    pass
        lines = [f"code cell {cell}: still running after {after_s:.0f} s; descendants:"]
        for pid in kids:
            stat = read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
            lines.append(
                f"  pid {pid} ppid {stat[1] if len(stat) > 1 else '?'} "
                f"state {stat[0] if stat else '?'} "
                f"wchan {read(f'/proc/{pid}/wchan')} "
                f"syscall {read(f'/proc/{pid}/syscall').split(' ')[0]}: "
                f"{read(f'/proc/{pid}/cmdline')[:160]}"
            )
        if not kids:
            lines.append("  none")
        say("\n".join(lines))

    def watch():
        while True:
            time.sleep(1.0)
            with lock:
                due = (
                    state["deadline"] is not None
                    and time.monotonic() > state["deadline"]
                )
                if due and not state["reported"]:
                    state["reported"] = True
                    cell = state["n"]
                else:
                    continue
            report(cell)

    def pre_run_cell(info=None):
        with lock:
            state["n"] += 1
            state["deadline"] = time.monotonic() + after_s
            state["reported"] = False
            n = state["n"]
        first = (getattr(info, "raw_cell", "") or "").strip().splitlines()[:1]
        say(f"code cell {n} started: {first[0][:80] if first else ''}")
        faulthandler.dump_traceback_later(after_s, repeat=True, file=log, exit=False)

    def post_run_cell(result=None):
        faulthandler.cancel_dump_traceback_later()
        with lock:
            state["deadline"] = None
            n = state["n"]
        failed = result is not None and not getattr(result, "success", True)
        say(f"code cell {n} finished {'with an error' if failed else 'ok'}")

    ip = get_ipython()  # noqa: F821 (IPython's exec_files defines it)
    ip.events.register("pre_run_cell", pre_run_cell)
    ip.events.register("post_run_cell", post_run_cell)
    threading.Thread(target=watch, name="mlbook-watchdog", daemon=True).start()
    say(f"kernel {os.getpid()} watching cells (stacks after {after_s:.0f} s)")


_mlbook_kernel_watchdog()
del _mlbook_kernel_watchdog
