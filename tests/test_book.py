"""The whole book: every chapter executed by papermill at test sizes, the HTML
built with warnings as errors, and the built pages checked, statically and in
a real (headless Chromium) browser with the network cut off."""

import re
import shutil
from pathlib import Path

import pytest

import build  # tools/build.py (tests/conftest.py puts tools/ on the path)

ROOT = Path(__file__).resolve().parent.parent
from conftest import BOOK_DEST as DEST

HTML = DEST / "_build" / "html"
CHAPTERS = [p.stem for p in build.chapters()]
SMALL_BUDGET_S = 60  # the per-chapter budget, held at test sizes too

pytestmark = pytest.mark.book


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_executes(book, name):
    result = book["chapters"][name]
    assert result["error"] is None, f"{name} failed under papermill: {result['error']}"
    assert result["seconds"] < SMALL_BUDGET_S


def test_book_builds_without_warnings(book):
    html = book["html"]
    assert html["returncode"] == 0 and not html["warnings"], "\n".join(html["warnings"])


def pages():
    return sorted(HTML.rglob("*.html"))


EXTERNAL = re.compile(
    r"<(script|link|img|iframe|source|video|audio|embed)\b[^>]*?\b(src|href|data)\s*=\s*[\"']"
    r"((?:https?:)?//[^\"']+)", re.I)


def test_no_external_resources(book):
    offenders = []
    for page in pages():
        for tag, attr, url in EXTERNAL.findall(page.read_text(errors="replace")):
            offenders.append(f"{page.relative_to(HTML)}: <{tag} {attr}={url}>")
    for css in HTML.rglob("*.css"):
        for url in re.findall(r"url\(\s*[\"']?((?:https?:)?//[^)\"']+)", css.read_text(errors="replace")):
            offenders.append(f"{css.relative_to(HTML)}: url({url})")
    assert not offenders, "\n".join(offenders)
    assert len(pages()) > len(CHAPTERS)


def test_injected_parameters_do_not_show(book):
    for name in CHAPTERS:
        page = next(HTML.rglob(f"{name}.html")).read_text()
        assert "injected-parameters" not in page


def test_chapters_downloadable_as_notebooks(book):
    for name in CHAPTERS:
        page = next(HTML.rglob(f"{name}.html")).read_text()
        assert re.search(rf'href="[^"]*_sources/[^"]*{name}\.ipynb"', page), f"{name} has no .ipynb download"


def test_widget_scripts_are_served_locally(book):
    page = (HTML / "notebooks" / "mfu.html").read_text()
    assert "vendor/require.js" in page and "vendor/html-manager/embed-amd.js" in page
    assert (HTML / "vendor" / "require.js").exists()
    assert (HTML / "vendor" / "html-manager" / "embed-amd.js").exists()
    assert "application/vnd.jupyter.widget-state+json" in page


# --- in a real browser -----------------------------------------------------------

def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser(book):
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (make install installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def open_offline(browser, page_path: Path):
    """Load a built page from file:// with every non-file request blocked and recorded."""
    context = browser.new_context()
    page = context.new_page()
    blocked = []

    def route(r):
        if r.request.url.startswith(("file://", "data:", "blob:")):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    return context, page, blocked, errors


@pytest.mark.parametrize("name", ["intro"] + [c for c in CHAPTERS if c != "intro"])
def test_page_in_browser(browser, name):
    path = next(HTML.rglob(f"{name}.html"))
    context, page, blocked, errors = open_offline(browser, path)
    try:
        html = path.read_text()
        if "math notranslate" in html:
            page.wait_for_selector("mjx-container", timeout=15_000)
            assert page.locator("mjx-merror").count() == 0, "MathJax could not typeset some math"
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : -1)")
        assert all(w > 0 for w in widths), f"broken or unloaded images: {widths}"
        if "widget-state+json" in html:
            page.wait_for_selector(".widget-subarea", timeout=15_000)
            assert page.locator(".widget-slider, .widget-dropdown, .widget-text").count() > 0
            # the live widget carries its own figure; the static copy beside it is hidden
            assert page.locator(".widget-subarea img").count() > 0
            duplicates = page.eval_on_selector_all(
                ".cell_output:has(.widget-subarea) > img", "imgs => imgs.filter(i => i.offsetParent !== null).length")
            assert duplicates == 0
        assert not blocked, f"the page tried to reach the network: {blocked}"
    finally:
        context.close()


def test_solutions_hidden_until_opened(browser):
    path = HTML / "notebooks" / "mfu.html"
    context, page, blocked, _ = open_offline(browser, path)
    try:
        solution = page.locator(".solution").first
        body = solution.locator(".cell_output").first
        assert not body.is_visible(), "the solution's output shows before the reader opens it"
        solution.locator(".admonition-title, summary, .toggle-button").first.click()
        body.wait_for(state="visible", timeout=5_000)
        assert "with 12Lhs" in body.inner_text()
    finally:
        context.close()

