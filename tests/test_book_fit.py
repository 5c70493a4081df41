"""The built pages fit the reader's window and follow the reader's theme.

- On a phone (a 400 px window) no page scrolls sideways: the document is no
  wider than the window (a code block, a wide table or display math may
  scroll inside its own box), and every live chart is drawn inside its
  column and fills most of it (book/_extra/vendor/live.js fits each spec to
  its column; concatenated panels stack). Each page is checked in its tab of
  `chapter_pages` (opened at 1300 px), narrowed to 400 px once its live
  charts have drawn, then widened back; `test_charts_follow_the_window`
  loads a page at 400 px and widens it.
- At 1300 px no code block (literalinclude blocks and those in solutions
  included) and no live chart is wider than its box: tests/test_book.py
  checks what shows when a page loads, this file what shows with every
  solution and hidden cell opened.
- In the dark theme (sphinx-book-theme sets html[data-theme="dark"]) a live
  chart is drawn dark with light ink, and redrawn light when the reader
  switches the theme; a result table takes the page's colours, not a light
  card.

Pages are opened from file://, where live figures draw their default.
"""

import pytest
from test_book import (
    CHAPTERS,
    HTML,
    LIVE_DRAWN,
    WINDOW,
    page_of,
    pages,
    settle,
)

pytestmark = pytest.mark.book

PHONE = {"width": 400, "height": 900}
DESKTOP = WINDOW  # chapter_pages' window
FILLS = 0.9  # a live chart is at least this share of its column's width

# What sticks out of a page at its window's width: the document's width, and
# each live chart's drawing against its column (the article's content box).
FIT = """() => {
  const article = document.querySelector(".bd-article");
  const box = article && article.getBoundingClientRect();
  const pad = article && getComputedStyle(article);
  const left = box ? box.left + parseFloat(pad.paddingLeft) : 0;
  const right = box ? box.right - parseFloat(pad.paddingRight) : innerWidth;
  const charts = [...document.querySelectorAll(".mlbook-live-chart")].map((c, i) => {
    const drawn = c.querySelector("canvas, svg");
    const r = drawn ? drawn.getBoundingClientRect() : null;
    return {i, left: r && r.left, right: r && r.right, width: r && r.width,
            column: right - left, column_left: left, column_right: right};
  });
  return {doc: document.documentElement.scrollWidth, window: innerWidth, charts};
}"""

# Every solution and hidden cell opened, then each code block and live chart
# whose content is wider than its box; then folded again as they were (the
# page stays as drawn for the tests that read it after)
OPEN_AND_MEASURE = """() => {
  const hidden = [...document.querySelectorAll(".toggle-hidden")];
  const closed = [...document.querySelectorAll("details")].filter(d => !d.open);
  hidden.forEach(e => e.classList.remove("toggle-hidden"));
  closed.forEach(d => { d.open = true; });
  const wide = [...document.querySelectorAll(".bd-article pre, .mlbook-live-chart")]
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.scrollWidth} > ${e.clientWidth} px: `
              + (e.textContent.trim().slice(0, 70) || e.className));
  closed.forEach(d => { d.open = false; });
  hidden.forEach(e => e.classList.add("toggle-hidden"));
  return wide;
}"""

# Each live chart's drawing marked, before the window changes: live.js draws a
# chart again (a new canvas) when its column's width changes
MARK = """() => document.querySelectorAll(".mlbook-live-chart")
  .forEach(box => { const c = box.querySelector("canvas, svg");
    if (c) c.dataset.mlbookBefore = "1"; })"""

# The live charts not yet drawn again since MARK for the new column (a new
# drawing whose box does not scroll: a resize seen mid-way can leave a chart
# drawn for a width in between)
STALE = """() => [...document.querySelectorAll(".mlbook-live-chart")]
  .map((box, i) => { const c = box.querySelector("canvas, svg");
    return !c || c.dataset.mlbookBefore || box.scrollWidth > box.clientWidth + 1
      ? `live chart ${i}: ${c ? c.getBoundingClientRect().width.toFixed(0) : "no"}`
        + ` px drawing in a ${box.clientWidth} px box` : null; })
  .filter(s => s)"""
REDRAWN = f"() => ({STALE})().length === 0"
REDRAW_MS = 15_000


def resize(page, size: dict) -> list[str]:
    """Set the page's window to ``size`` and wait until every live chart is
    drawn again for its new column: the charts that were not within
    REDRAW_MS (none when all were)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate(MARK)
    page.set_viewport_size(size)
    try:
        page.wait_for_function(REDRAWN, timeout=REDRAW_MS, polling=100)
    except PlaywrightTimeout:
        return [
            f"at {size['width']} px, not drawn again within {REDRAW_MS // 1000} s: " + s
            for s in page.evaluate(STALE)
        ]
    return []


def other_pages():
    """The built pages that are not executed (front page, notation, references,
    search, index)."""
    executed = {page_of(n) for n in CHAPTERS}
    return [p for p in pages() if p not in executed]


def misfits(page) -> list[str]:
    m = page.evaluate(FIT)
    out = []
    if m["doc"] > m["window"]:
        out.append(f"the document is {m['doc']} px wide in a {m['window']} px window")
    for c in m["charts"]:
        if c["width"] is None:
            out.append(f"live chart {c['i']} is not drawn")
            continue
        if c["left"] < c["column_left"] - 1 or c["right"] > c["column_right"] + 1:
            out.append(
                f"live chart {c['i']} spans {c['left']:.0f}-{c['right']:.0f} px, "
                f"outside its column {c['column_left']:.0f}-{c['column_right']:.0f}"
            )
        if c["width"] < FILLS * c["column"]:
            out.append(
                f"live chart {c['i']} is {c['width']:.0f} px in a "
                f"{c['column']:.0f} px column"
            )
    return out


def at_phone(chapter_pages, path) -> list[str]:
    """What does not fit ``path`` (a built page) at 400 px, and what its
    page did wrong: its tab of ``chapter_pages`` narrowed to 400 px, checked,
    and set back to 1300 px with its charts drawn for that column (the other
    tests of the group read the page there)."""
    page, w = chapter_pages.get(path.as_uri())
    settle(page, path.read_text(), w)
    try:
        problems = resize(page, PHONE) or misfits(page)
    finally:
        problems_back = resize(page, DESKTOP)
    return problems + problems_back + w.problems()


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_fits_a_phone(chapter_pages, name):
    problems = at_phone(chapter_pages, page_of(name))
    assert not problems, f"{name} at {PHONE['width']} px:\n" + "\n".join(problems)


def test_other_pages_fit_a_phone(chapter_pages):
    problems = []
    for path in other_pages():
        problems += [
            f"{path.relative_to(HTML)}: {p}" for p in at_phone(chapter_pages, path)
        ]
    assert not problems, "\n".join(problems)


def test_open_code_fits_at_1300(chapter_pages):
    """Solutions hold functions included from the package, in a narrower box.
    Each chapter's tab, every fold opened for the measure and closed again."""
    wide = []
    for name in CHAPTERS:
        path = page_of(name)
        page, w = chapter_pages.get(path.as_uri())
        settle(page, path.read_text(), w)
        wide += [f"{name}: {line}" for line in page.evaluate(OPEN_AND_MEASURE)]
        w.assert_clean()
    assert not wide, "code or charts wider than their box at 1300 px:\n" + "\n".join(
        wide
    )


# The first live chart's drawing: its corner (the background), and the share
# of its pixels that are light and that are dark (its ink)
CANVAS = """() => {
  const canvas = document.querySelector(".mlbook-live-chart canvas");
  const ctx = canvas.getContext("2d");
  const {data} = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const lum = i =>
    (0.2126 * data[i] + 0.7152 * data[i + 1] + 0.0722 * data[i + 2]) / 255;
  let light = 0, dark = 0;
  const n = data.length / 4;
  for (let i = 0; i < data.length; i += 4) {
    if (lum(i) > 0.75) light++;
    else if (lum(i) < 0.25) dark++;
  }
  return {theme: document.documentElement.dataset.theme, corner: lum(0),
          light: light / n, dark: dark / n,
          draws: Number(canvas.closest("[data-mlbook-live]").dataset.draws)};
}"""

# A result table's colours: its text, and its box's background (transparent
# or the page's)
TABLE = """() => {
  const table = document.querySelector("div.cell_output table");
  const box = table.closest(".output");
  const rgb = s => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  const bg = rgb(getComputedStyle(box).backgroundColor);
  const page = rgb(getComputedStyle(document.body).backgroundColor);
  return {text: lum(rgb(getComputedStyle(table).color)),
          background: bg.length === 4 && bg[3] === 0 ? lum(page) : lum(bg)};
}"""


def test_dark_theme(book, chromium_browser):
    path = page_of("mfu")  # live charts and result tables
    context = chromium_browser.new_context(viewport=DESKTOP, color_scheme="dark")
    page = context.new_page()
    try:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.wait_for_function(
            "() => document.querySelector('.mlbook-live-chart canvas')", timeout=30_000
        )
        dark = page.evaluate(CANVAS)
        table = page.evaluate(TABLE)
        # the reader switches the theme with the header's button (it cycles
        # through the modes): until the page is light
        for _ in range(3):
            if page.evaluate("() => document.documentElement.dataset.theme") == "light":
                break
            page.locator(".theme-switch-button").first.click()
        page.wait_for_function(
            "() => { const c = document.querySelector('.mlbook-live-chart canvas');"
            " const d = c.getContext('2d').getImageData(0, 0, 1, 1).data;"
            " return d[0] > 200 && d[1] > 200 && d[2] > 200; }",
            timeout=10_000,
        )
        light = page.evaluate(CANVAS)
    finally:
        context.close()
    assert dark["theme"] == "dark", "a reader who prefers dark got a light page"
    assert dark["corner"] < 0.25, f"the chart's background is light: {dark}"
    assert dark["light"] > 0.002, f"the chart has no light ink to read: {dark}"
    assert table["text"] > 0.5 and table["background"] < 0.25, (
        f"a result table is not in the dark theme's colours: {table}"
    )
    assert light["theme"] == "light" and light["corner"] > 0.9, (
        f"switched to light, the chart stayed dark: {light}"
    )
    assert light["dark"] > 0.002, f"the light chart has no dark ink: {light}"
    # drawn again for the theme, not redrawn as a new result
    assert light["draws"] == dark["draws"] == 1


def test_charts_follow_the_window(book, chromium_browser):
    """A page loaded on a phone fits it, and a reader who widens the window
    (or turns a tablet) gets the charts drawn again for the wider column;
    stacked panels go side by side. (Narrowing is checked on every page
    above.)"""
    path = page_of("input_pipeline")  # two panels side by side at 1300 px
    context = chromium_browser.new_context(viewport=PHONE)
    page = context.new_page()
    height = (
        "() => document.querySelector('.mlbook-live-chart canvas')"
        ".getBoundingClientRect().height"
    )
    try:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.wait_for_function(LIVE_DRAWN, timeout=30_000, polling=100)
        at_load = misfits(page)
        narrow = page.evaluate(FIT)["charts"][0]
        tall = page.evaluate(height)
        stale = resize(page, DESKTOP)
        page.wait_for_timeout(300)  # a refit that came late would show here
        widened = misfits(page)
        wide = page.evaluate(FIT)["charts"][0]
        short = page.evaluate(height)
    finally:
        context.close()
    assert not at_load, f"loaded at {PHONE['width']} px:\n" + "\n".join(at_load)
    assert narrow["width"] <= PHONE["width"] and tall > 500, (
        f"the two panels are not stacked at {PHONE['width']} px "
        f"({narrow['width']:.0f} px wide, {tall:.0f} px tall)"
    )
    assert not stale + widened, "after widening the window:\n" + "\n".join(
        stale + widened
    )
    assert wide["width"] > narrow["width"] and wide["width"] > PHONE["width"], (
        f"at 1300 px the chart is narrow: {wide}"
    )
    assert short < 500, (
        f"the two panels are still stacked at 1300 px ({short:.0f} px tall)"
    )
