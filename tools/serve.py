"""Serve the built HTML book on 127.0.0.1, so its live figures go live.

    python tools/serve.py                        # _build/book/_build/html, port 8000
    python tools/serve.py --dir _build/test/_build/html --port 0   # any free port

Opened from disk (file://), the book's pages draw every live figure at its
default, but the browser refuses the fetches that start Python in the page
(Pyodide's files), so the controls stay off. Served over http, even from this
machine only, they work. This binds 127.0.0.1 alone (nothing on the network
can reach it), prints the address, and serves until Ctrl-C.
``serve(directory, port)`` is the same server for the tests, in a thread.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "_build" / "book" / "_build" / "html"
HOST = "127.0.0.1"


class _Handler(http.server.SimpleHTTPRequestHandler):
    # Pyodide compiles its .wasm while it streams only when served as
    # application/wasm, and a browser runs an ES module (.mjs) only when served
    # as JavaScript: say so whatever the system's mime table holds.
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".json": "application/json",
        ".zip": "application/zip",
    }

    def log_message(self, format, *args):  # quiet: one line per request is noise
        pass


def server(directory: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server for ``directory`` on 127.0.0.1 (``port`` 0: a free one), not
    yet serving; its address is ``server.server_address``."""
    handler = functools.partial(_Handler, directory=str(directory))
    return http.server.ThreadingHTTPServer((HOST, port), handler)


def serve(directory: Path, port: int = 0):
    """``server(...)`` serving in a daemon thread; returns (server, base URL).
    Stop it with ``server.shutdown()``."""
    httpd = server(directory, port)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    host, port = httpd.server_address[:2]
    return httpd, f"http://{host}:{port}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the built HTML")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    if not (args.dir / "index.html").is_file():
        print(
            f"serve: no built book in {args.dir} (run `make book` first)",
            file=sys.stderr,
        )
        return 2
    try:
        httpd = server(args.dir, args.port)
    except OSError as exc:
        print(f"serve: cannot listen on {HOST}:{args.port}: {exc}", file=sys.stderr)
        return 2
    host, port = httpd.server_address[:2]
    print(f"serving {args.dir} at http://{host}:{port}/index.html (Ctrl-C stops)")
    sys.stdout.flush()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
