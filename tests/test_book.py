"""The whole book: every chapter executed by papermill at test sizes, the HTML
built with warnings as errors, and the built pages checked, statically and in
a real (headless Chromium) browser with the network cut off.

Offline means two things here, each checked on its own:
- statically (test_no_offsite_urls): no built file that can make a browser
  fetch (.html with its inline <script> and <style> blocks and style
  attributes, .css, .js, .svg) names an off-site URL in a place that fetches,
  except the inert strings in INERT_URLS, each with its reason;
- in the browser (test_page_in_browser and the tests after it): every request
  that leaves the build's folder is blocked and fails the test, and so does
  any failed request for a file of the build, any JavaScript console error or
  warning and any uncaught page error, except the messages in ALLOWED_CONSOLE,
  each with its reason (none at present).
"""

import fnmatch
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from bookbuild import pages
from conftest import BOOK_DEST as DEST
from helpers.browser import Allowed, Watch, wait_until_quiet, watch

ROOT = Path(__file__).resolve().parent.parent

HTML = DEST / "_build" / "html"
CHAPTERS = [p.stem for p in pages.chapters()]
DEFAULT_BUDGET_S = (
    60  # tools/build.py's default per-page budget (reader sizes, idle 2-core machine)
)

pytestmark = pytest.mark.book


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_executes(book, name):
    result = book["chapters"][name]
    assert result["error"] is None, f"{name} failed under papermill: {result['error']}"
    # Seconds are reported, not judged, except with a wide margin: the budget is
    # for reader sizes on an idle machine, so a test-size run over twice it means
    # a hang or a regression, not a busy VM. A retry is a failure however fast
    # the second attempt was, reported with the first attempt's time.
    retry = result.get("retry")
    assert retry is None, f"{name} needed a retry; its first attempt took {retry}"
    budget = result.get("budget_s", DEFAULT_BUDGET_S)
    assert result["seconds"] <= 2 * budget, (
        f"{name} took {result['seconds']} s, over twice its {budget} s budget"
    )


def test_book_builds_without_warnings(book):
    html = book["html"]
    assert html["returncode"] == 0 and not html["warnings"], "\n".join(html["warnings"])


def pages():
    """The book's pages (not the theme's Jinja macro files it copies into _static/)."""
    return sorted(
        p for p in HTML.rglob("*.html") if not p.relative_to(HTML).parts[0] == "_static"
    )


def page_of(name: str) -> Path:
    return next(HTML.rglob(f"{name}.html"))


# --- offline, statically ------------------------------------------------------------
#
# Which built files can make a browser fetch: HTML pages (attributes that load
# something, inline <script> and <style> blocks, style attributes), CSS
# (url(), @import), JavaScript (any URL it names could be fetched, so every one
# is an offender unless INERT_URLS explains it) and SVG (read like HTML: it can
# load images, styles and scripts). Not scanned: .map (read only by a
# developer's debugger), .json and .txt (data read by scripts, license texts),
# .ipynb and .md under _sources/ (downloads for the reader), fonts and images.

SCANNED_SUFFIXES = {".html", ".htm", ".xhtml", ".svg", ".css", ".js", ".mjs"}

# XML namespace names: compared as strings (createElementNS, XSLT, SSML), never
# dereferenced. Any file may name them.
NAMESPACES = {
    "http://www.w3.org/2000/svg",
    "http://www.w3.org/1999/xhtml",
    "http://www.w3.org/1999/xlink",
    "http://www.w3.org/1998/Math/MathML",
    "http://www.w3.org/1999/XSL/Transform",
    "http://www.w3.org/2001/10/synthesis",
    "http://www.w3.org/XML/1998/namespace",
    "http://www.w3.org/2000/xmlns/",
    "http://exslt.org/common",
}


@dataclass(frozen=True)
class Inert:
    files: str  # fnmatch pattern on the path relative to the HTML root
    url: str  # a regular expression the whole URL must match
    why: str


COMMENT = (
    "a comment, a license header or a documentation link in a message: "
    "text, never requested"
)
INERT_URLS = [
    Inert(
        "*.html",
        r"https://unpkg\.com/thebe@[\d.]+/lib/index\.js",
        "sphinx-thebe's THEBE_JS_URL in an inline configuration script: "
        "thebe is loaded from it only when a reader presses a live-code launch button, "
        "and the book has none (launch_buttons.thebe: false; test_thebe_is_off checks "
        "that no page loads or offers thebe)",
    ),
    # live figures (tools/vendor_js.py: vega, vega-lite and vega-embed; Pyodide's core)
    Inert(
        "vendor/vega/vega-embed.min.js",
        r"https://vega\.github\.io/editor/",
        "the default address of the 'Open in Vega Editor' action; live.js embeds with "
        "actions: false, so the menu that holds the link is never made",
    ),
    Inert(
        "vendor/vega/vega-embed.min.js",
        r"https?://",
        "prefixes vega-embed compares a string spec with to decide whether to fetch "
        "it; live.js always hands it a spec object (the data inline), so it never "
        "fetches",
    ),
    Inert(
        "vendor/vega/vega-embed.min.js",
        r"https://github\.com/Starcounter-Jack/JSON-Patch",
        COMMENT,
    ),
    Inert(
        "vendor/vega/vega-lite.min.js",
        r"https://vega\.github\.io/schema/vega/v5\.json",
        "the $schema identifier vega-lite writes into the Vega spec it compiles: a "
        "name, never fetched",
    ),
    Inert(
        "vendor/vega/vega-lite.min.js",
        r"https://github\.com/vega/vega-lite/issues/\d+",
        COMMENT,
    ),
    Inert(
        "vendor/pyodide/pyodide.mjs",
        r"https://cdn\.jsdelivr\.net/pyodide/v\$\{U\}/full/",
        "Pyodide's default base URL for packages outside the core; live.js loads none "
        "and passes packageBaseUrl (its own folder in the book), which replaces this "
        "default",
    ),
    Inert(
        "vendor/pyodide/pyodide.asm.mjs",
        r"wss?://|https://\$\{t\}",
        "emscripten's socket emulation (SOCKFS) builds WebSocket URLs from these "
        "prefixes when Python opens a socket; the live figures' code opens none (and "
        "the browser tests block and fail any request off 127.0.0.1)",
    ),
    # Sphinx, its extensions and the theme
    Inert("_static/clipboard.min.js", r"https://clipboardjs\.com/", COMMENT),
    Inert("_static/searchtools.js", r"https://developer\.mozilla\.org/.+", COMMENT),
    Inert(
        "_static/scripts/pydata-sphinx-theme.js",
        r"https://pydata-sphinx-theme\.readthedocs\.io/en/stable/user_guide/version-dropdown\.html",
        "named in the warning the theme logs when a version switcher is "
        "misconfigured; the book has none",
    ),
    # MathJax 3 (sphinx-mathjax-offline copies the whole distribution;
    # pages load tex-chtml.js)
    Inert(
        "_static/mathjax/latest.js",
        r".+",
        "latest.js is MathJax's loader that asks GitHub and CDNs for the newest "
        "MathJax; no page loads it (test_pages_load_local_mathjax checks)",
    ),
    Inert(
        "_static/mathjax/*",
        r"https://cdn\.jsdelivr\.net/npm/(speech-rule-engine|sre-mathmaps-ie)@"
        r"|https://cdn\.jsdelivr\.net/npm/wicked-good-xpath@[\d.]+/dist/wgxpath\.install\.js",
        "the speech-rule-engine's built-in defaults: MathJax points it at its own "
        "copy of the maps (loader path [sre] = [mathjax]/sre/mathmaps, in the build), "
        "and the IE maps and the XPath polyfill load only in a browser without "
        "document.evaluate (Internet Explorer)",
    ),
    Inert(
        "_static/mathjax/*",
        r"https://www\.mathjax\.org|http://www\.apache\.org/licenses/LICENSE-2\.0"
        r"|https://github\.com/mhchem/mhchemParser",
        "the menu's 'About MathJax' link, license headers and a source comment: "
        + COMMENT,
    ),
]

OFFSITE = re.compile(
    r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I
)  # scheme://... or protocol-relative //host
URL_IN_CODE = re.compile(  # in JavaScript: scheme URLs, and quoted //host/
    r"""(?:https?|wss?|ftp)://[^\s"'`<>()\\]*|(?<=["'`(])//[a-z0-9-]+(?:\.[a-z0-9-]+)+/[^\s"'`<>()\\]*""",
    re.I,
)
CSS_URL = re.compile(
    r"""url\(\s*(["']?)(.*?)\1\s*\)|@import\s+(["'])(.*?)\3""", re.I | re.S
)
CSS_COMMENT = re.compile(r"/\*.*?\*/", re.S)
# (tag or "*", attribute) pairs whose value the browser fetches
FETCHING_ATTRS = {
    ("*", "src"),
    ("*", "background"),
    ("video", "poster"),
    ("object", "data"),
    ("link", "href"),
    ("base", "href"),
    ("image", "href"),
    ("image", "xlink:href"),
    ("use", "href"),
    ("use", "xlink:href"),
    ("feimage", "href"),
    ("feimage", "xlink:href"),
    ("script", "href"),
    ("script", "xlink:href"),
}


def css_urls(text: str):
    for m in CSS_URL.finditer(CSS_COMMENT.sub("", text)):
        yield (m.group(2) if m.group(2) is not None else m.group(4)).strip()


class FetchedURLs(HTMLParser):
    """Every URL an HTML (or SVG) document would fetch: attributes that load,
    srcset candidates, CSS in <style> and style="", and every URL named in an
    inline <script> (JSON data blocks included: a script may render what
    they hold)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []  # (where, url)
        self._block, self._text = None, []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if ("*", name) in FETCHING_ATTRS or (tag, name) in FETCHING_ATTRS:
                self.found.append((f"<{tag} {name}>", value.strip()))
            elif name in ("srcset", "imagesrcset"):
                for candidate in filter(None, (c.strip() for c in value.split(","))):
                    self.found.append((f"<{tag} {name}>", candidate.split()[0]))
            elif name == "style":
                self.found += [(f"<{tag} style>", u) for u in css_urls(value)]
        if tag in ("script", "style"):
            self._block, self._text = tag, []

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        if self._block:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == self._block:
            text = "".join(self._text)
            urls = css_urls(text) if tag == "style" else URL_IN_CODE.findall(text)
            self.found += [(f"inline <{tag}>", u) for u in urls]
            self._block = None


def offsite_urls(root: Path):
    """(file, where, url) for every off-site URL a built file could fetch."""
    for path in sorted(
        p for p in root.rglob("*") if p.suffix in SCANNED_SUFFIXES and p.is_file()
    ):
        rel, text = path.relative_to(root).as_posix(), path.read_text(errors="replace")
        if path.suffix in (".js", ".mjs"):
            found = [("script", u) for u in URL_IN_CODE.findall(text)]
        elif path.suffix == ".css":
            found = [("css", u) for u in css_urls(text)]
        else:
            parser = FetchedURLs()
            parser.feed(text)
            parser.close()
            found = parser.found
        for where, url in found:
            if OFFSITE.match(url) or where in ("script", "inline <script>"):
                yield rel, where, url


def test_scanner_finds_what_fetches(tmp_path):
    """The scanner itself, on a page that fetches in every way it knows."""
    (tmp_path / "p.html").write_text(
        '<html><head><link rel="stylesheet" href="https://cdn.example/a.css">'
        '<style>@import "//fonts.example/b.css"; '
        ".x { background: url(https://img.example/c.png) }</style>"
        '<script>fetch("https://api.example/d")</script></head><body>'
        '<img srcset="local.png 1x, https://img.example/e.png 2x">'
        '<video poster="https://img.example/f.png"></video>'
        '<object data="https://obj.example/g.svg"></object>'
        "<div style=\"background:url('//img.example/h.png')\"></div>"
        '<a href="https://example.org/read-me">a link is not a fetch</a>'
        '<img src="local.png"></body></html>'
    )
    (tmp_path / "s.css").write_text(
        '/* url(https://comment.example/x) */ @import url("https://css.example/i.css");'
    )
    (tmp_path / "t.js").write_text(
        'var u = "//js.example/j.js"; var v = "https://js.example/k";'
    )
    hosts = {urlparse(u).hostname for _, _, u in offsite_urls(tmp_path)}
    assert hosts == {
        "cdn.example",
        "fonts.example",
        "img.example",
        "api.example",
        "obj.example",
        "css.example",
        "js.example",
    }


def test_no_offsite_urls(book):
    offenders, used = [], set()
    for rel, where, url in offsite_urls(HTML):
        if url in NAMESPACES:
            continue
        entry = next(
            (
                e
                for e in INERT_URLS
                if fnmatch.fnmatch(rel, e.files) and re.fullmatch(e.url, url)
            ),
            None,
        )
        if entry is None:
            offenders.append(f"{rel}: {where} {url}")
        else:
            used.add(entry)
    assert not offenders, (
        "built files name off-site URLs a browser would fetch:\n" + "\n".join(offenders)
    )
    stale = [f"{e.files}: {e.url}" for e in INERT_URLS if e not in used]
    assert not stale, (
        "allowlist entries that match nothing any more (remove them):\n"
        + "\n".join(stale)
    )
    assert len(pages()) > len(CHAPTERS)


def test_thebe_is_off(book):
    """Why the unpkg URL in every page is inert: nothing loads thebe or offers
    to. Its configuration script is on each page once: the build registers it
    twice, and a second copy threw on re-declaring its `const THEBE_JS_URL`
    in every page's console (bookext.pagehead keeps one of each script)."""
    for page in pages():
        html = page.read_text()
        assert not re.search(r"<script[^>]+src=[\"'][^\"']*thebe@", html), (
            f"{page.name} loads thebe"
        )
        # sphinx-thebe fetches THEBE_JS_URL only in initThebe(), which a
        # launch button's click calls
        assert "initThebe" not in html and "thebe-launch-button" not in html, (
            f"{page.name} offers a live-code launch button"
        )
        configs = re.findall(r"<script>(const THEBE_JS_URL = [^<]*)</script>", html)
        assert len(configs) <= 1, f"{page.name} has {len(configs)} thebe configurations"
        inline = re.findall(r"<script>([^<]+)</script>", html)
        repeated = {s[:60] for s in inline if inline.count(s) > 1}
        assert not repeated, f"{page.name} repeats inline scripts: {repeated}"


def test_every_page_names_the_books_favicon(book):
    """A page without an icon link makes the browser ask the server for
    /favicon.ico, a 404 in the console of every served page."""
    for page in pages():
        html = page.read_text()
        if REFRESH.match(html):  # index.html only redirects
            continue
        icon = re.search(r'<link rel="icon" href="([^"]+)"', html)
        assert icon, f"{page.name} names no favicon"
        assert (page.parent / icon[1].split("?")[0]).resolve().is_file(), icon[1]


def test_pages_load_local_mathjax(book):
    for page in pages():
        html = page.read_text()
        assert "mathjax/latest.js" not in html, (
            f"{page.name} loads MathJax's CDN loader"
        )
        for src in re.findall(r"<script[^>]+src=[\"']([^\"']*mathjax[^\"']*)", html):
            assert (
                not OFFSITE.match(src)
                and (page.parent / src.split("?")[0]).resolve().is_file()
            ), src


def test_no_page_loads_widget_scripts(book):
    """No page keeps ipywidgets state (the build strips the live figures'
    widget views), so none loads require.js or the widget manager: _config.yml
    gives myst-nb no widget scripts, and a page with widget state would show
    its widgets as nothing."""
    for page in pages():
        html = page.read_text()
        assert "application/vnd.jupyter.widget" not in html, (
            f"{page.name} carries ipywidgets state or views"
        )
        assert "require.js" not in html and "embed-amd.js" not in html, page.name


def test_injected_parameters_do_not_show(book):
    for name in CHAPTERS:
        assert "injected-parameters" not in page_of(name).read_text()


def test_chapters_downloadable_as_notebooks(book):
    for name in CHAPTERS:
        page = page_of(name).read_text()
        assert re.search(rf'href="[^"]*_sources/[^"]*{name}\.ipynb"', page), (
            f"{name} has no .ipynb download"
        )


# --- in a real browser -----------------------------------------------------------

# JavaScript console messages (errors and warnings: CONSOLE_LEVELS) and page
# errors that are harmless, each with why. None: every page's console is empty
# of both. Everything else a page logs fails its test.
ALLOWED_CONSOLE: list[Allowed] = []
CONSOLE_LEVELS = ("error", "warning")


def in_build(url: str) -> bool:
    return url.startswith(HTML.as_uri() + "/") or url.startswith(("data:", "blob:"))


# The window the page guide sizes code for: a code cell shows 88 columns there.
WINDOW = {"width": 1300, "height": 900}


def open_offline(browser, page_path: Path, on_page=None):
    """Load a built page from file:// in a 1300 px window. Every request
    outside the build's folder is blocked; all of it is recorded in the
    returned Watch. ``on_page(page)`` runs before the page loads (to add
    listeners)."""
    context = browser.new_context(viewport=WINDOW)
    page = context.new_page()
    w = watch(page, in_build, ALLOWED_CONSOLE, CONSOLE_LEVELS)
    if on_page is not None:
        on_page(page)
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    return context, page, w


REFRESH = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"')


def settle(page, html: str, w: Watch):
    """Wait for what the page draws after load: MathJax and the live
    figures' default drawings, then for its requests to end (``w`` saw
    them start). A page that only redirects (index.html) is followed to the
    page it names, which is then settled in its place (the tab may be there
    already: the redirect runs on its own, and a tab kept open is settled
    again by a later test)."""
    redirect = REFRESH.match(html)
    if redirect is not None:
        page.wait_for_url(
            lambda url: url.endswith("/" + redirect[1]),
            wait_until="load",
            timeout=15_000,
        )
        html = Path(unquote(urlparse(page.url).path)).read_text()
    if "math notranslate" in html:
        page.wait_for_selector("mjx-container", timeout=15_000)
        page.evaluate(
            "() => window.MathJax && MathJax.startup "
            "? MathJax.startup.promise.then(() => true) : true"
        )
    if "data-mlbook-live" in html:
        page.wait_for_function(LIVE_DRAWN, timeout=30_000, polling=100)
    wait_until_quiet(page, w)


# Code cell inputs and outputs, code blocks in the prose (literalinclude
# blocks, commands) and live charts whose content is wider than their box
# (they would scroll sideways): a line longer than the page guide's 88
# columns, an output (a table, a printed line) or a chart too wide for the
# page. tests/test_book_fit.py checks them with every solution open, and at
# 400 px.
OVERFLOWING = """() => [...document.querySelectorAll(
    'div.cell_input pre, div.cell_output pre, div.cell_output > .output, '
    + '.bd-article div[class*="highlight-"] pre, .mlbook-live-chart')]
  .filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.scrollWidth} > ${e.clientWidth} px: ${e.textContent.slice(0, 70)}`)"""


# every live figure has drawn its default (tests/test_live.py checks the rest)
LIVE_DRAWN = """() => [...document.querySelectorAll("[data-mlbook-live]")].every(
  e => e.dataset.state && Number(e.dataset.draws) >= 1
    && e.querySelector(".mlbook-live-chart canvas, .mlbook-live-chart svg"))"""


@pytest.mark.parametrize("name", ["intro"] + [c for c in CHAPTERS if c != "intro"])
def test_page_in_browser(chapter_pages, name):
    path = page_of(name)
    page, w = chapter_pages.get(path.as_uri())
    html = path.read_text()
    settle(page, html, w)
    if "math notranslate" in html:
        assert page.locator("mjx-merror").count() == 0, (
            "MathJax could not typeset some math"
        )
    widths = page.eval_on_selector_all(
        "img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : -1)"
    )
    assert all(w > 0 for w in widths), f"broken or unloaded images: {widths}"
    wide = page.evaluate(OVERFLOWING)
    assert not wide, f"{name}: code or charts wider than the page at 1300 px: {wide}"
    w.assert_clean()


def test_other_pages_in_browser(chapter_pages):
    """The pages that are not executed (front page, notation, references,
    search, index): same rules."""
    executed = {page_of(n) for n in CHAPTERS}
    others = [p for p in pages() if p not in executed]
    assert others
    problems, seen = [], set()
    for path in others:
        page, w = chapter_pages.get(path.as_uri())
        settle(page, path.read_text(), w)
        problems += [f"{path.relative_to(HTML)}: {p}" for p in w.problems()]
        seen |= w.seen_allowed
    assert not problems, "\n".join(problems)
    # every page shows the allowlisted messages; one that no longer appears is stale
    stale = [a.pattern for a in ALLOWED_CONSOLE if a.pattern not in seen]
    assert not stale, (
        f"ALLOWED_CONSOLE entries no page logs any more (remove them): {stale}"
    )


def test_solutions_hidden_until_opened(chapter_pages):
    url = (HTML / "notebooks" / "mfu.html").as_uri()
    page, w = chapter_pages.get(url, changes=("solutions",))
    solution = page.locator(".solution").first
    body = solution.locator(".cell_output").first
    assert not body.is_visible(), (
        "the solution's output shows before the reader opens it"
    )
    solution.locator(".admonition-title, summary, .toggle-button").first.click()
    body.wait_for(state="visible", timeout=5_000)
    assert "6 N_matmul + 12Lhs" in body.inner_text()  # mfu-1's key table
    w.assert_clean()
