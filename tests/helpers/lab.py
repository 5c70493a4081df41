"""A Jupyter server of the test's own, as `make lab` starts one.

`jupyter_server` serves a temporary folder on 127.0.0.1 (a free port, a
token, its config, runtime, settings and data in a temporary folder besides
the venv's, no browser, no news, no update check, no extension-manager
queries, `--allow-root` only when root). `server_config` writes the Jupyter
server config that `make install` writes (tools/lab_settings.py): the book's
contents manager, which saves an unedited page without rewriting it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlbook.common_torch.launch import free_port

SERVER_START_S = 60  # generous: JupyterLab starts in 2-5 s here, longer under load


def lab_command(
    root: Path, port: int, token: str, app: str = "jupyterlab"
) -> list[str]:
    """JupyterLab (or, with app="jupyter_server", the server alone) on
    127.0.0.1:``port`` serving ``root``."""
    cmd = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
    ]
    if app == "jupyterlab":
        cmd += [
            # nothing from the network: no news feed, no update check, no PyPI
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            # window.jupyterapp, so a test can run cells and read the notebook
            "--LabApp.expose_app_in_browser=True",
        ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def lab_env(home: Path, **extra: str) -> dict:
    """The environment of a server whose own folders are under ``home``."""
    return dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_PATH=str(home / "data"),  # before the venv's
        IPYTHONDIR=str(home / "ipython"),
        **extra,
    )


def server_config(home: Path) -> Path:
    """The server config make install writes, in the server's own config
    folder (so the test does not depend on the venv's copy being current)."""
    from lab_settings import save_pages_as_written

    return save_pages_as_written(home / "config")


def user_settings(home: Path, plugin: str, values: dict) -> Path:
    """A JupyterLab user setting, ``plugin`` as "@scope/package:name"."""
    package, name = plugin.split(":")
    path = home / "settings" / package / f"{name}.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    return path


@contextmanager
def jupyter_server(root: Path, home: Path, app: str = "jupyterlab", **env: str):
    """A server serving ``root``; yields (base URL, token)."""
    port, token = free_port(), secrets.token_hex(16)
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            lab_command(root, port, token, app),
            cwd=root,
            env=lab_env(home, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"{app} exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(
                    request(base, token, "GET", "/api/status"), timeout=2
                ):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{app} did not answer within {SERVER_START_S} s:\n"
                        f"{log.read_text()[-3000:]}"
                    )
                time.sleep(0.3)
        yield base, token
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever of its session is left (a kernel), by group id
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def request(base: str, token: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    return urllib.request.Request(
        base + urllib.parse.quote(path, safe="/?=&"),
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )


def api(base: str, token: str, method: str, path: str, body=None) -> dict:
    """One call of the server's REST API, its JSON answer."""
    with urllib.request.urlopen(
        request(base, token, method, path, body), timeout=60
    ) as r:
        return json.loads(r.read() or b"null")
