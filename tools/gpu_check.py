"""Execute every chapter on a CUDA GPU at reader sizes and record what it measured.

    # this interpreter (make gpu-check uses the venv's)
    python tools/gpu_check.py
    # a machine without papermill & co.: carried wheels
    python3 tools/gpu_check.py --wheels .whl
    python tools/gpu_check.py --python /opt/torch/.venv/bin/python3 --wheels .whl
    # some chapters (and the pages they read values from)
    python tools/gpu_check.py --only capstone mfu
    # the output layout, nothing executed (tests)
    python tools/gpu_check.py --device cpu --dry-run

Each executable page (tools/build.py's list) is executed by papermill with
DEVICE="cuda" (the parameters cell) at reader sizes, one after another, and
the results go to --dest (default _build/gpu/):

    summary.json          torch version and CUDA build, GPU name, Python, when, the
                          command, and per page: seconds, error (or null), its values
    values/<page>.json    each page's glued values (as tools/build.py writes them)
    notebooks/<page>.ipynb  the executed notebooks

Which torch. The check runs in the interpreter given by --python (default:
this one) and needs a CUDA build of torch there that sees a GPU. Where that
interpreter's torch is the CPU wheel (a "+cpu" version), a GPU is present
(/dev/nvidia*) and the PyTorch wheel index answers, it first installs the CUDA
wheel of the version requirements.txt pins:

    <python> -m pip install torch==<pinned> \\
        --index-url https://download.pytorch.org/whl/cu126

(--no-install forbids that). With no usable GPU it refuses: exit status 2 and
one line saying what it found.

Carried wheels. A GPU machine that reaches no registry but has its own CUDA
torch (the device machines: Python 3.12, torch 2.11, no papermill, jupytext,
ipykernel, ipywidgets or myst-nb) runs the check from wheels carried with the
working tree: --wheels DIR installs every wheel in DIR with
`pip install --no-index --no-deps --target <dest>/site DIR/*.whl` and puts that
folder and the repository first on PYTHONPATH, for this process and every
kernel it starts. `--wheel-list` prints the name==version pins to download
(for cp312 manylinux, see the README) from this venv's versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bookbuild import execution, pages  # noqa: E402 (tools/ on the path first)
from bookbuild import values as glued  # noqa: E402

CUDA_INDEX = "https://download.pytorch.org/whl/cu126"
NO_CUDA = 2  # exit status: no usable CUDA GPU
# What papermill needs to execute a page and myst-nb's glue to record values,
# beyond what a machine with torch, numpy, matplotlib and tokenizers already has:
# the distributions whose wheels a registry-less machine must carry (--wheel-list
# prints them pinned to this venv).
CARRIED = (
    "papermill",
    "nbclient",
    "nbformat",
    "jupyter-client",
    "jupyter-core",
    "ipykernel",
    "ipython",
    "ipython-pygments-lexers",
    "comm",
    "debugpy",
    "jedi",
    "parso",
    "pexpect",
    "ptyprocess",
    "prompt-toolkit",
    "wcwidth",
    "stack-data",
    "asttokens",
    "executing",
    "pure-eval",
    "matplotlib-inline",
    "nest-asyncio",
    "pyzmq",
    "tornado",
    "traitlets",
    "platformdirs",
    "fastjsonschema",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "jupytext",
    "mdit-py-plugins",
    "ipywidgets",
    "widgetsnbextension",
    "jupyterlab-widgets",
    "myst-nb",
    "docutils",
    "tenacity",
    "entrypoints",
)


class NoCuda(RuntimeError):
    """No CUDA build of torch that sees a GPU."""


# --- the interpreter and its torch ---------------------------------------------------

PROBE = (
    "import json, sys\n"
    "try:\n"
    "    import torch\n"
    "except ImportError as e:\n"
    "    print(json.dumps({'torch': None, 'error': str(e)})); sys.exit()\n"
    "ok = torch.cuda.is_available()\n"
    "print(json.dumps({'torch': torch.__version__, 'cuda_build': torch.version.cuda, "
    "'cuda': ok,\n"
    "                  'gpu': torch.cuda.get_device_name() if ok else None, "
    "'python': sys.version.split()[0],\n"
    "                  'executable': sys.executable}))\n"
)


def probe(python: str, env: dict | None = None) -> dict:
    """What ``python``'s torch is and whether it sees a GPU."""
    out = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    if out.returncode != 0:
        raise NoCuda(
            f"{python} could not run a probe of torch: {out.stderr.strip()[-500:]}"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def gpu_present() -> bool:
    """A GPU device node (or nvidia-smi) on this machine, whatever torch says."""
    return (
        any(Path("/dev").glob("nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None
    )


def registry_reachable(
    host: str = "download.pytorch.org", timeout_s: float = 3.0
) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def pinned_torch() -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.split("#")[0].strip().startswith("torch=="):
            return line.split("#")[0].strip().split("==")[1]
    raise SystemExit("requirements.txt pins no torch version")


def install_cuda_torch(python: str) -> None:
    cmd = [
        python,
        "-m",
        "pip",
        "install",
        f"torch=={pinned_torch()}",
        "--index-url",
        CUDA_INDEX,
    ]
    print("installing the CUDA wheel of the pinned torch:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def require_cuda(
    python: str, env: dict | None = None, allow_install: bool = True
) -> dict:
    """The probe of a CUDA torch in ``python`` that sees a GPU, installing the
    CUDA wheel first where the CPU wheel sits on a machine with a GPU and a
    reachable index. Raises NoCuda with what was found otherwise."""
    info = probe(python, env)
    if info.get("cuda"):
        return info
    cpu_wheel = (info.get("torch") or "").endswith("+cpu")
    if cpu_wheel and gpu_present() and allow_install and registry_reachable():
        install_cuda_torch(python)
        info = probe(python, env)
        if info.get("cuda"):
            return info
    what = f"torch {info['torch']}" if info.get("torch") else "no torch"
    build_kind = (
        "a CPU build"
        if cpu_wheel or not info.get("cuda_build")
        else f"CUDA {info['cuda_build']}"
    )
    gpu = "a GPU is present" if gpu_present() else "no GPU on this machine"
    raise NoCuda(
        f"gpu_check needs a CUDA GPU: {python} has {what} ({build_kind}), "
        f"which sees no CUDA device; {gpu}. On a CUDA machine install the CUDA wheel: "
        f"{python} -m pip install torch=={pinned_torch()} --index-url {CUDA_INDEX}"
    )


# --- carried wheels -------------------------------------------------------------------


def install_wheels(python: str, wheels: Path, target: Path) -> Path:
    """Every wheel in ``wheels`` installed into ``target`` (no index, no dependency
    resolution: the folder must hold every distribution that is missing)."""
    found = sorted(Path(wheels).glob("*.whl"))
    if not found:
        raise SystemExit(f"--wheels {wheels}: no .whl files there")
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--find-links",
        str(wheels),
        "--target",
        str(target),
        *map(str, found),
    ]
    print(f"installing {len(found)} carried wheels into {target} ...", flush=True)
    subprocess.run(cmd, check=True)
    return target


def with_paths(env: dict, *paths: Path) -> dict:
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(
        [*(str(p) for p in paths), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def wheel_list() -> list[str]:
    """name==version of each carried distribution, as installed in this interpreter."""
    from importlib import metadata

    pins = []
    for name in CARRIED:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return pins


# --- running the pages ----------------------------------------------------------------


def execute_page(page: Path, out_dir: Path, parameters: dict, env: dict) -> tuple:
    """(seconds, error) of one page executed by papermill (tools/build.py's execute)."""
    seconds, error, _retry = execution.execute(page, out_dir, parameters, env)
    return seconds, error


def dry_run_page(page: Path, out_dir: Path, parameters: dict, env: dict) -> tuple:
    """Nothing executed: the page's source as an unexecuted notebook (for
    the layout)."""
    import jupytext
    import nbformat

    nbformat.write(jupytext.read(page), out_dir / f"{page.stem}.ipynb")
    return 0.0, None


def run_check(
    dest: Path,
    only: list[str] | None,
    device: str = "cuda",
    small: bool = False,
    runner=execute_page,
    info: dict | None = None,
    env: dict | None = None,
) -> dict:
    """Execute the pages with DEVICE=``device`` and write summary.json,
    values/<page>.json and notebooks/<page>.ipynb under ``dest``.
    Returns the summary."""
    dest = Path(dest)
    for sub in ("values", "notebooks"):
        shutil.rmtree(dest / sub, ignore_errors=True)
        (dest / sub).mkdir(parents=True)
    parameters = {"DEVICE": device, **({"SMALL": True} if small else {})}
    summary = {
        "device": device,
        "small": small,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv),
        "host": platform.node(),
        **(info or {}),
        "pages": {},
    }
    for page in pages.chapters(only):
        print(
            f"executing {page.name} with DEVICE={device!r} "
            f"({'test' if small else 'reader'} sizes) ...",
            flush=True,
        )
        seconds, error = runner(
            page,
            dest / "notebooks",
            parameters,
            dict(env or {}),
        )
        values = {}
        notebook = dest / "notebooks" / f"{page.stem}.ipynb"
        if notebook.exists():
            try:
                values = glued.glued_values(notebook, page.stem)
            except glued.GlueError as exc:
                error = error or str(exc)
        glued.write_values(dest, page.stem, values)
        summary["pages"][page.stem] = {
            "seconds": round(seconds, 1),
            "error": error,
            "values": values,
        }
        print(
            f"  {page.stem}: {seconds:.1f} s" + (f"  FAILED: {error}" if error else ""),
            flush=True,
        )
    (dest / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--dest",
        type=Path,
        default=ROOT / "_build" / "gpu",
        help="output folder (default _build/gpu)",
    )
    ap.add_argument("--only", nargs="*", help="chapter names (file stems) to execute")
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter whose torch runs the pages",
    )
    ap.add_argument(
        "--wheels",
        type=Path,
        help="a folder of wheels to install (no index) before running",
    )
    ap.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="DEVICE the pages get (default cuda)",
    )
    ap.add_argument(
        "--small",
        action="store_true",
        help="test sizes (SMALL=True) instead of reader sizes",
    )
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="write the layout without executing anything",
    )
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="never install the CUDA wheel of torch",
    )
    ap.add_argument(
        "--wheel-list",
        action="store_true",
        help="print the pins of the wheels to carry, and exit",
    )
    args = ap.parse_args(argv)
    if args.wheel_list:
        print("\n".join(wheel_list()))
        return 0
    dest = args.dest.resolve()
    env = dict(os.environ)
    if args.wheels:
        env = with_paths(
            env, install_wheels(args.python, args.wheels.resolve(), dest / "site"), ROOT
        )
    else:
        env = with_paths(env, ROOT)
    if Path(args.python).resolve() != Path(sys.executable).resolve():
        # Run the rest in that interpreter: papermill's kernel is the
        # interpreter that runs papermill.
        rest = [a for a in (argv if argv is not None else sys.argv[1:])]
        rest = _drop_option(_drop_option(rest, "--python"), "--wheels")
        os.execve(args.python, [args.python, str(Path(__file__).resolve()), *rest], env)
    os.environ.update(env)
    for p in reversed(env["PYTHONPATH"].split(os.pathsep)):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    info = {}
    if args.device == "cuda":
        try:
            info = require_cuda(sys.executable, env, allow_install=not args.no_install)
        except NoCuda as exc:
            print(f"gpu_check: {exc}", file=sys.stderr)
            return NO_CUDA
    else:
        info = probe(sys.executable, env)
    runner = dry_run_page if args.dry_run else execute_page
    started = time.perf_counter()
    summary = run_check(dest, args.only, args.device, args.small, runner, info, env)
    failed = [p for p, r in summary["pages"].items() if r["error"]]
    print(
        f"done in {time.perf_counter() - started:.0f} s on "
        f"{info.get('gpu') or args.device} (torch {info.get('torch')}); "
        f"{dest / 'summary.json'}" + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


def _drop_option(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == name:
            skip = True
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
