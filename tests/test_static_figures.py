"""The book's static figures and result tables on a phone and in the dark
theme (book/_static/mlbook.css), on a chapter with both (the MFU chapter),
opened from file://:

- at 400 px a static figure (a matplotlib PNG, about 711 px wide) shows at
  least three quarters of its size, in a box of its own that scrolls
  sideways; the page itself does not;
- a result table wider than its box scrolls under its caption, which stays
  at the box's left edge, whole;
- in the dark theme a static figure is dark with light ink, not a light card.
"""

from __future__ import annotations

import io

import pytest
from test_book import page_of

pytestmark = pytest.mark.book

PHONE = {"width": 400, "height": 900}
READABLE = 0.75  # of a figure's own width, at least, on a phone

FIGURES = """() => [...document.querySelectorAll(
  "div.cell_output > img, div.cell_output > figure > img")]
  .map(i => { const box = i.parentElement;
    return {natural: i.naturalWidth, shown: i.getBoundingClientRect().width,
            scrolls: getComputedStyle(box).overflowX === "auto"}; })"""

# Each result table that scrolls sideways: where its caption is before and
# after its box is scrolled to the end, against the box
CAPTIONS = """() => [...document.querySelectorAll("div.cell_output table caption")]
  .map(c => { const box = c.closest(".output");
    if (box.scrollWidth <= box.clientWidth + 1) return null;
    const at = () => c.getBoundingClientRect().left - box.getBoundingClientRect().left;
    const before = at();
    box.scrollLeft = box.scrollWidth;
    const after = at(), width = c.getBoundingClientRect().width;
    box.scrollLeft = 0;
    return {before, after, width, box: box.clientWidth, text: c.textContent}; })
  .filter(Boolean)"""


def _open(browser, **options):
    context = browser.new_context(**options)
    page = context.new_page()
    page.goto(page_of("mfu").as_uri())
    page.wait_for_load_state("load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('div.cell_output > img, "
        "div.cell_output > figure > img')]"
        ".every(i => i.complete && i.naturalWidth > 0)",
        timeout=30_000,
    )
    return context, page


def test_static_figures_and_captions_on_a_phone(book, chromium_browser):
    context, page = _open(chromium_browser, viewport=PHONE)
    try:
        figures = page.evaluate(FIGURES)
        captions = page.evaluate(CAPTIONS)
        wide = page.evaluate("() => document.documentElement.scrollWidth")
    finally:
        context.close()
    assert figures, "the MFU chapter has no static figure"
    for f in figures:
        assert f["shown"] >= READABLE * min(f["natural"], 560), f
        assert f["scrolls"] or f["shown"] <= PHONE["width"], f
    assert wide <= PHONE["width"], f"the page scrolls sideways: {wide} px"
    assert captions, "no result table is wider than its box at 400 px"
    for c in captions:
        assert abs(c["after"] - c["before"]) < 1, f"the caption scrolled away: {c}"
        assert c["width"] <= c["box"] + 1, f"the caption is wider than its box: {c}"


def test_static_figures_in_the_dark_theme(book, chromium_browser):
    from PIL import Image

    context, page = _open(
        chromium_browser, viewport={"width": 1300, "height": 900}, color_scheme="dark"
    )
    try:
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        image = page.locator(
            "div.cell_output > img, div.cell_output > figure > img"
        ).first
        image.scroll_into_view_if_needed()
        shot = Image.open(io.BytesIO(image.screenshot())).convert("L")
    finally:
        context.close()
    pixels = list(shot.tobytes())  # one byte a pixel: "L"
    mean = sum(pixels) / len(pixels) / 255
    light = sum(p > 170 for p in pixels) / len(pixels)
    assert mean < 0.35, f"the figure is a light card on a dark page ({mean:.2f})"
    assert light > 0.002, f"the figure has no light ink to read ({light:.4f})"
