"""Headless Chromium for the browser checks, and what a page did wrong.

Debian's chromium (/usr/bin/chromium) driven by pip's playwright; never
`playwright install`. Without Chromium or playwright the checks skip with the
reason, except under CI (CI=true), where they fail: there the browser checks
are part of the suite, not an optional extra.

`Watch` records everything a page does that a reader would not want: a
request that left the allowed origin (blocked and recorded), a request for a
file that failed or answered >= 400, a JavaScript console message of type
"error" (and "warning", for a Watch whose ``levels`` name it: the book's
pages log neither), and an uncaught page error. `Watch.problems()` lists them, less the
console messages the calling test file allowlists, each with its reason.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

CHROMIUM = "/usr/bin/chromium"
# What Debian's chromium needs as root in a container, and no network of its own
# (no component updates, sync, or background requests).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
]


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def chromium_or_skip() -> str:
    """The Chromium executable. Missing Chromium or playwright: a skip with the
    reason, or a failure under CI."""
    missing = []
    path = (
        CHROMIUM
        if os.access(CHROMIUM, os.X_OK)
        else (shutil.which("chromium") or shutil.which("chromium-browser"))
    )
    if path is None:
        missing.append(
            "Debian's chromium is not installed (make install installs it: "
            "apt-get install chromium)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright is not installed (it is in requirements.txt)")
    if missing:
        reason = "; ".join(missing)
        if under_ci():
            pytest.fail(
                f"{reason}. Under CI (CI=true) the browser checks are mandatory.",
                pytrace=False,
            )
        pytest.skip(f"browser checks skipped: {reason} (under CI=true this fails)")
    return path


@contextmanager
def chromium():
    """A headless Chromium (each context gets a fresh profile)."""
    path = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=path, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Allowed:
    """A console message or page error that is harmless, and why."""

    pattern: str  # a regular expression, searched in the message text
    why: str

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


@dataclass
class Watch:
    allowed_console: list[Allowed]
    levels: tuple[str, ...] = ("error",)  # the console message types recorded
    blocked: list[str] = field(
        default_factory=list
    )  # requests stopped: not the allowed origin
    failed: list[str] = field(
        default_factory=list
    )  # requests that failed or answered >= 400
    console_errors: list[tuple[str, str]] = field(
        default_factory=list
    )  # (text, script or resource URL)
    page_errors: list[tuple[str, str]] = field(default_factory=list)  # (message, "")
    seen_allowed: set[str] = field(
        default_factory=set
    )  # patterns of allowlist entries that matched
    in_flight: dict = field(default_factory=dict)  # request -> its URL, until it ends
    last_request_s: float = field(
        default_factory=time.monotonic
    )  # when a request last started or ended (time.monotonic)

    def request_started(self, request) -> None:
        self.in_flight[request] = request.url
        self.last_request_s = time.monotonic()

    def request_ended(self, request) -> None:
        self.in_flight.pop(request, None)
        self.last_request_s = time.monotonic()

    def _unexplained(self, messages: list[tuple[str, str]]) -> list[str]:
        out = []
        for text, where in messages:
            hit = next((a for a in self.allowed_console if a.matches(text)), None)
            if hit is None:
                out.append(text + (f" [{where}]" if where else ""))
            else:
                self.seen_allowed.add(hit.pattern)
        return out

    def problems(self) -> list[str]:
        return (
            [f"blocked request (off the allowed origin): {u}" for u in self.blocked]
            + [f"failed request: {u}" for u in self.failed]
            + [f"console error: {m}" for m in self._unexplained(self.console_errors)]
            + [f"page error: {m}" for m in self._unexplained(self.page_errors)]
        )

    def assert_clean(self) -> None:
        problems = self.problems()
        assert not problems, "the page misbehaved in the browser:\n" + "\n".join(
            problems
        )


def watch(
    page,
    local: Callable[[str], bool],
    allowed_console: list[Allowed],
    levels: tuple[str, ...] = ("error",),
) -> Watch:
    """Route every request of ``page``: those ``local`` accepts go ahead, the
    rest are aborted and recorded. Record failures and errors (console
    messages of the types in ``levels``) as they come."""
    w = Watch(allowed_console, levels)
    _attach(page, local, lambda: w)
    return w


def _attach(page, local: Callable[[str], bool], current: Callable[[], Watch]) -> None:
    """watch()'s listeners, recording into whichever Watch ``current`` gives."""

    def route(r):
        url = r.request.url
        if local(url):
            r.continue_()
        else:
            current().blocked.append(url)
            r.abort()

    def request_failed(req):
        current().request_ended(req)
        if req.url not in current().blocked:
            current().failed.append(f"{req.url} ({req.failure})")

    def response(resp):
        if resp.status >= 400:
            current().failed.append(f"{resp.url} (HTTP {resp.status})")

    def console(msg):
        if msg.type in current().levels:
            where = (msg.location or {}).get("url", "")
            text = msg.text if msg.type == "error" else f"{msg.type}: {msg.text}"
            current().console_errors.append((text, where))

    page.route("**/*", route)
    page.on("request", lambda req: current().request_started(req))
    page.on("requestfinished", lambda req: current().request_ended(req))
    page.on("requestfailed", request_failed)
    page.on("response", response)
    page.on("console", console)
    page.on("pageerror", lambda e: current().page_errors.append((str(e), "")))

    def refuse_websocket(ws):  # only websockets off the allowed origin are routed here
        current().blocked.append(ws.url)
        ws.close()

    page.route_web_socket(lambda url: not local(url), refuse_websocket)


def wait_until_quiet(page, w: Watch, quiet_s=0.5, timeout_s=30.0) -> None:
    """Wait until ``page`` has had no request open for ``quiet_s``, by the
    requests ``w`` saw start and end: Playwright's "networkidle", with a
    failure that names the page and what it still waited for (in CI that wait
    once ran 30 s on a page no test could name)."""
    deadline = time.monotonic() + timeout_s
    while w.in_flight or time.monotonic() - w.last_request_s < quiet_s:
        if time.monotonic() > deadline:
            open_ = sorted(set(w.in_flight.values()))
            raise AssertionError(
                f"{page.url}: the network was not quiet for {quiet_s} s within "
                f"{timeout_s:.0f} s; requests still open: {open_ or 'none'}"
            )
        page.wait_for_timeout(50)


class Tab:
    """One browser context and tab that loads page after page, each watched
    on its own. A tab that has run the book's scripts once loads the next
    page in about half the time a new context takes (1.2 s against 2.3 s a
    page here): the compiled scripts are kept. Between pages the tab goes to
    about:blank, so what the last page still had in flight is recorded
    against it, not the next. The pages share what the book keeps in the
    browser, as a reader's do: the Python snapshot live.js stores in
    IndexedDB (nothing in cookies or web storage)."""

    def __init__(
        self,
        browser,
        local,
        allowed_console,
        context=None,
        levels=("error",),
        **options,
    ):
        """A tab in a new context (``options`` are its options), or in
        ``context``, which then stays the caller's to close; ``levels`` are
        the console message types its Watches record."""
        self._own = context is None
        self.context = browser.new_context(**options) if self._own else context
        self.page = self.context.new_page()
        self._allowed, self._levels = allowed_console, levels
        self._watch = Watch(allowed_console, levels)
        self.opened = 0  # pages opened so far
        _attach(self.page, local, lambda: self._watch)

    @property
    def watch(self) -> Watch:
        """The Watch of the page loaded last."""
        return self._watch

    def open(self, url: str):
        """(page, its Watch) with ``url`` loaded."""
        self.page.goto("about:blank")
        self._watch = Watch(self._allowed, self._levels)
        self.page.goto(url)
        self.page.wait_for_load_state("load")
        self.opened += 1
        return self.page, self._watch

    def close(self) -> None:
        if self._own:
            self.context.close()
        else:
            self.page.close()


class Pages:
    """Built pages kept open, a tab each, for the tests that read a page
    someone else may have opened already: a chapter is loaded once for its
    page check, its answer boxes and its live figures' defaults, not once
    each (a load takes 1-3 s here). A test names what of the page it
    changes, ``get(url, changes=("folds",))``: it gets the page as drawn
    there (loaded again, with a fresh Watch, if an earlier test changed it
    too). Each Watch covers its page from its load to now, so a test also
    answers for what the page did before it."""

    def __init__(
        self, browser, local, allowed_console, levels=("error",), **context_options
    ):
        self.context = browser.new_context(**context_options)
        self._args = (browser, local, allowed_console)
        self._levels = levels
        self._tabs: dict[str, Tab] = {}
        self._changed: dict[str, set[str]] = {}  # url -> changed since its load

    def get(self, url: str, changes: tuple[str, ...] = (), sets: tuple[str, ...] = ()):
        """(page, its Watch) with ``url`` loaded, as it is now if no earlier
        test changed any of ``changes`` since its load, else loaded again.
        ``sets`` are those of ``changes`` the test does not need as drawn
        (it fills every box of an exercise's block before it reads a
        verdict): an earlier change there needs no fresh load."""
        if url not in self._tabs:
            self._tabs[url] = Tab(
                *self._args, context=self.context, levels=self._levels
            )
        tab = self._tabs[url]
        # the tab in front: a tab behind another draws no animation frames,
        # and every Playwright action waits for two (1-6 s a test here)
        tab.page.bring_to_front()
        if tab.opened == 0 or self._changed[url] & (set(changes) - set(sets)):
            tab.open(url)
            self._changed[url] = set()
        self._changed[url].update(changes)
        return tab.page, tab.watch

    def close(self) -> None:
        self.context.close()
