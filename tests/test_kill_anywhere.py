"""Kill anywhere: SIGKILL a checkpoint save at every file-system step.

A child process saves one checkpoint with mlbook's Checkpointer while every
file-system step of the save is counted (tests/helpers/checkpoint_worker.py):
each file opened for writing under the root, each tensor or byte item DCP
writes, each fsync, mkdir, rename, replace, unlink and rmdir. A first run of
each scenario, left alone, lists those steps; then, for every step k of that
list, a fresh child stalls just before step k and this process SIGKILLs it.
The offsets therefore cover the whole save: DCP's data and metadata writes,
the marker, the rename into place, the window between the rename and the
`latest` update, the pointer's own atomic write, and the pruning after it.

After each kill a new Checkpointer on the same root (what a restarted job
does) must load a checkpoint that is bitwise the state saved for its step,
never a partial one, and exactly the one a reader expects: the previous
latest until the commit point (the `latest` update for a new step; the
rename into place when the same step is published again), the new one after.
The clean-up must leave no temporary, moved-aside or half-pruned directory.

Scenarios: a synchronous save that prunes the oldest checkpoint, the same
through async_save (the write and the publication run in DCP's background
thread), and a synchronous same-step replace (the step saved again with new
contents, as after a rewind).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from mlbook.common_torch import launch
from mlbook.common_torch.checkpoint import Checkpointer
from tests.helpers import checkpoint_worker as worker

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

KEEP_LAST = 2
# (name, step saved, its version, async, previous latest (step, version), commit label)
SCENARIOS = [
    ("sync save + prune", 3, 1, False, (2, 1), "replace .latest.tmp -> latest"),
    ("async save + prune", 3, 1, True, (2, 1), "replace .latest.tmp -> latest"),
    (
        "same-step replace",
        2,
        2,
        False,
        (2, 1),
        "replace .tmp-step-00000002 -> step-00000002",
    ),
]
REPORT: dict = {}


class ForkServer:
    """The test's own fork server (checkpoint_worker.serve), started once."""

    def __init__(self):
        # a fork of the package's fork server (torch, torch._dynamo and DCP
        # imported); serve imports whatever that server's preload lacked
        context = launch._fork_context()
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=worker.serve, args=(child,))
        self.proc.start()
        child.close()
        if not self.conn.poll(120):
            self.close()
            raise AssertionError("the kill-anywhere fork server did not start")
        ready, imported, now = self.conn.recv()
        # safe to fork: one Python thread, and the warm-up started no other
        assert ready == "ready" and now[0] == 1 and now[1] <= imported[1], (
            imported,
            now,
        )

    def run(self, root: Path, step, version, async_, stall_at):
        """Fork a child; return (message, pid) once it stalls or finishes."""
        self.conn.send(("save", str(root), step, version, KEEP_LAST, async_, stall_at))
        pid, message = self.conn.recv()
        if message[0] == "timeout":
            raise AssertionError(
                f"the child neither stalled nor finished (exit code {self.reap()})"
            )
        return message, pid

    def reap(self) -> int | None:
        """The exit code of the last child, once it has ended."""
        self.conn.send(("reap",))
        return self.conn.recv()

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


@pytest.fixture(scope="module")
def server():
    """One fork server that has imported torch, torch._dynamo (which the
    first optimizer constructor imports) and the worker, and done one save:
    each kill then costs a fork, not an interpreter start or DCP's set-up."""
    srv = ForkServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Steps 1 and 2 (version 1) published, as every scenario starts."""
    root = tmp_path_factory.mktemp("base") / "ckpt"
    torch.set_num_threads(1)
    for step in (1, 2):
        worker.save_state(root, step, 1, KEEP_LAST)
    assert Checkpointer(root, keep_last=KEEP_LAST).steps() == [1, 2]
    return root


def _expect_loaded(root: Path, step: int, version: int) -> None:
    """A restarted job's view: the latest checkpoint is (step, version), bitwise."""
    ckpt = Checkpointer(root, keep_last=KEEP_LAST)
    want_model, want_opt = worker.deterministic_state(step, version)
    model, opt = worker.deterministic_state(99, 9)  # different values everywhere
    loaded = ckpt.load(model, opt)
    assert (loaded.step, loaded.extra) == (step, {"step": step, "version": version})
    for name, tensor in want_model.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    got, want = opt.state_dict(), want_opt.state_dict()
    assert got["param_groups"] == want["param_groups"]
    for i, state in want["state"].items():
        for key, tensor in state.items():
            assert torch.equal(got["state"][i][key], tensor), (i, key)
    # Nothing half-done is left: only `latest` and complete, published checkpoints.
    for path in root.iterdir():
        assert path.name == "latest" or (
            path.name.startswith("step-") and ckpt.is_complete(path)
        ), path


@pytest.mark.parametrize("name, step, version, async_, previous, commit", SCENARIOS)
def test_sigkill_at_every_step_of_a_save(
    server, base, tmp_path, name, step, version, async_, previous, commit
):
    dry = tmp_path / "dry"
    shutil.copytree(base, dry)
    (kind, events), _ = server.run(dry, step, version, async_, None)
    assert kind == "done" and server.reap() == 0
    labels = [label for label, _ in events]
    assert commit in labels, labels
    commit_at = labels.index(commit) + 1  # stalling at k stops just before event k
    _expect_loaded(dry, step, version)  # left alone, the save publishes
    if step != previous[0]:  # a new step prunes the oldest
        assert any(label.startswith("unlink step-00000001") for label in labels), labels
    recovered = []
    for k in range(1, len(events) + 1):
        root = tmp_path / f"kill-{k:03d}"
        shutil.copytree(base, root)
        (kind, at, label), pid = server.run(root, step, version, async_, k)
        assert kind == "stall" and at == k and label == labels[k - 1], (kind, at, label)
        os.kill(pid, signal.SIGKILL)
        exitcode = server.reap()
        assert exitcode == -signal.SIGKILL, exitcode
        expected = (step, version) if k > commit_at else previous
        _expect_loaded(root, *expected)
        recovered.append((k, label, round(events[k - 1][1] * 1e3, 2), expected))
        shutil.rmtree(root)
    REPORT[name] = recovered
    # The kills covered the windows the issue names.
    hit = [label for _, label, _, _ in recovered]
    assert any(label.startswith("write item") for label in hit)  # during DCP's write
    assert commit in hit
    if step == previous[0]:
        assert any(
            label.startswith("replace step-00000002 -> .replaced") for label in hit
        )
    else:
        rename = next(
            i
            for i, lab in enumerate(hit)
            if lab.startswith("replace .tmp-step-00000003")
        )
        assert (
            hit.index(commit) > rename + 1
        )  # at least one kill between rename and `latest`
        assert any(
            lab.startswith(("unlink step-00000001", "rmdir"))
            for lab in hit[hit.index(commit) :]
        )


def test_report_kills(capsys):
    """Prints the offsets tried and what each kill recovered (run after the kills)."""
    if not REPORT:
        pytest.skip("run with the kill tests")
    total = sum(len(v) for v in REPORT.values())
    with capsys.disabled():
        print(
            f"\nkill anywhere: {total} SIGKILLs, every one recovered the "
            "expected checkpoint bitwise"
        )
        for name, rows in REPORT.items():
            ms = [r[2] for r in rows]
            kept = {}
            for _, _, _, expected in rows:
                kept[expected] = kept.get(expected, 0) + 1
            print(
                f"  {name}: {len(rows)} offsets, {min(ms):.2f} to {max(ms):.2f} ms "
                f"into the save; recovered (step, version): {kept}"
            )
    assert total >= 30
