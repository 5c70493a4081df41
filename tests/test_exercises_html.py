"""The exercises in the built book (the test build, `book` fixture):

- statically: every exercise with answers has its answer boxes, one per
  answer, with its unit and the verdict data; each solution shows the key
  the registry computes (the page's arithmetic and check() agree);
- in headless Chromium, opened from file:// with every request outside the
  build blocked: typing the key into a numeric exercise's boxes shows
  "right", a wrong value shows the hint check() gives, and a prediction's
  result stays folded until a prediction is entered or the reader opens it;
  a prediction entered is set beside what the build's run measured, with
  the reason chosen from the run's values, as check() says it; no console
  errors.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from html.parser import HTMLParser

import nbformat
import pytest
from test_book import page_of
from test_page_pattern import shown, visible_text

from conftest import BOOK_DEST, ONLY
from mlbook.exercises import EXERCISES, Choice, check, judge, outcome, spec
from mlbook.judge._core import compare, read_number, reason

pytestmark = pytest.mark.book

BUILT = [r for r in EXERCISES.values() if ONLY is None or r.chapter in ONLY]


class _Blocks(HTMLParser):
    """The answer blocks of a page: id -> {inputs, checkboxes, units, spec}."""

    def __init__(self):
        super().__init__()
        self.blocks, self._current, self._in_spec, self._in_unit = (
            {},
            None,
            False,
            False,
        )
        self._depth = 0  # open <div>s inside the current block: 0 closes it

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "mlbook-answers" in (a.get("class") or "").split():
            self._current = self.blocks.setdefault(
                a["data-exercise"],
                {"inputs": [], "checkboxes": set(), "units": [], "spec": ""},
            )
            self._depth = 1
        elif self._current is not None:
            self._depth += tag == "div"
            if tag == "script" and "mlbook-exercise-spec" in (a.get("class") or ""):
                self._in_spec = True
            elif tag == "input" and a.get("type") == "text":
                self._current["inputs"].append(a["name"])
            elif tag == "input" and a.get("type") == "checkbox":
                self._current["checkboxes"].add(a["name"])
            elif tag == "span" and a.get("class") == "mlbook-unit":
                self._in_unit = True

    def handle_endtag(self, tag):
        if tag == "div" and self._current is not None:
            self._depth -= 1
            if self._depth == 0:  # the block ends: later inputs are not its own
                self._current = None
        if tag == "script":
            self._in_spec = False
        if tag == "span":
            self._in_unit = False

    def handle_data(self, data):
        if self._in_spec:
            self._current["spec"] += data
        elif self._in_unit:
            self._current["units"].append(data)


@cache  # a page's blocks are read by a test per exercise: parsed once
def answer_blocks(chapter: str) -> dict:
    parser = _Blocks()
    parser.feed(page_of(chapter).read_text())
    return parser.blocks


@pytest.mark.parametrize("record", BUILT, ids=lambda r: r.id)
def test_every_exercise_with_answers_has_its_boxes(book, record):
    blocks = answer_blocks(record.chapter)
    if not record.fields and not record.code:
        return
    assert record.id in blocks, f"{record.id}: no answer boxes on {record.chapter}.html"
    block = blocks[record.id]
    boxes = [n for n, f in record.fields.items() if not isinstance(f, Choice)]
    assert block["inputs"] == boxes
    assert block["units"] == [record.answers[n] for n in boxes]
    choices = {n for n, f in record.fields.items() if isinstance(f, Choice)}
    assert block["checkboxes"] == choices
    data = json.loads(block["spec"])
    assert data["id"] == record.id and [a["name"] for a in data["answers"]] == list(
        record.fields
    )
    if record.checked and not record.measured:
        assert data == json.loads(json.dumps(spec(record.id)))


def solution_outputs(record) -> str:
    executed = BOOK_DEST / "src" / "notebooks" / f"{record.chapter}.ipynb"
    if not executed.exists():
        executed = BOOK_DEST / "src" / "book" / f"{record.chapter}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    texts, inside = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if re.search(
                rf"```\{{solution-start\}}\s+{re.escape(record.id)}\b", cell.source
            ):
                inside = True
            elif "{solution-end}" in cell.source:
                inside = False
        elif inside:
            texts.append(visible_text(cell.get("outputs", [])))
    return "\n".join(texts)


@pytest.mark.parametrize(
    "record", [r for r in BUILT if r.checked and not r.measured], ids=lambda r: r.id
)
def test_each_solution_shows_the_registrys_key(book, record):
    text = solution_outputs(record)
    for name, value in record.key_values().items():
        if isinstance(record.fields[name], Choice):
            assert all(v in text for v in value), (record.id, name, value)
        else:
            assert shown(value, text), (
                f"{record.id}: the solution does not show {name} = {value!r}"
            )


NUMERIC = [
    r
    for r in BUILT
    if r.checked
    and not r.measured
    and any(not isinstance(f, Choice) for f in r.fields.values())
]


FIRST_NUMERIC = {}
for _r in NUMERIC:
    FIRST_NUMERIC.setdefault(_r.chapter, _r)


def enter(block, record, answers: dict) -> None:
    """Type each number in its box and tick each choice's options."""
    for name, value in answers.items():
        if isinstance(record.fields[name], Choice):
            for box in block.locator(f'input[name="{name}"]').all():
                box.set_checked(box.get_attribute("value") in value)
        else:
            block.locator(f'input[name="{name}"]').fill(repr(value))


def verdict_of(block, name: str) -> str:
    return block.locator(f'[data-answer="{name}"] .mlbook-verdict').inner_text()


# An exercise's boxes filled and its Check pressed in one call, as the page
# sees a reader's typing (each box's text and an input event, each option
# ticked or not, then the button), and what the block shows after: each
# verdict in order and by answer, and whether it is solved. Playwright's fill
# and click each wait for the page to draw and cost 30-60 ms of CPU here, a
# dozen of them an exercise; each chapter's first numeric exercise is still
# typed and clicked through Playwright (test_the_key_is_right_...).
ANSWER = """(block, {texts, ticks}) => {
  for (const [name, text] of Object.entries(texts)) {
    const box = block.querySelector(`input[name="${name}"]`);
    box.value = text;
    box.dispatchEvent(new Event("input", {bubbles: true}));
    box.dispatchEvent(new Event("change", {bubbles: true}));
  }
  for (const [name, chosen] of Object.entries(ticks)) {
    block.querySelectorAll(`input[name="${name}"]`)
      .forEach(b => { b.checked = chosen.includes(b.value); });
  }
  block.querySelector("button.mlbook-check").click();
  return {
    verdicts: [...block.querySelectorAll(".mlbook-verdict")].map(v => v.innerText),
    of: Object.fromEntries([...block.querySelectorAll("[data-answer]")].map(
      a => [a.dataset.answer, a.querySelector(".mlbook-verdict").innerText])),
    solved: block.classList.contains("mlbook-solved"),
  };
}"""


def answer(block, record, answers: dict) -> dict:
    """``answers`` entered and checked in one call (ANSWER): what the block
    shows after."""
    texts, ticks = {}, {}
    for name, value in answers.items():
        if isinstance(record.fields[name], Choice):
            ticks[name] = value if isinstance(value, str) else list(value)
        else:
            texts[name] = repr(value)
    return block.evaluate(ANSWER, {"texts": texts, "ticks": ticks})


@pytest.mark.parametrize("record", NUMERIC, ids=lambda r: r.id)
def test_the_key_is_right_and_a_wrong_value_gets_its_hint(chapter_pages, record):
    key = record.key_values()
    data = spec(record.id)
    # an exercise's boxes, verdicts and button are its own block's: checking
    # one leaves the rest of the page as it was drawn
    url = page_of(record.chapter).as_uri()
    # every box is filled before a verdict is read: a block an earlier test
    # typed into needs no fresh load
    answers = (f"answers {record.id}",)
    page, w = chapter_pages.get(url, changes=answers, sets=answers)
    block = page.locator(f'.mlbook-answers[data-exercise="{record.id}"]')
    first = next(a for a in data["answers"] if a["type"] != "choice")
    wrong = first["mistakes"][0]["value"] if first["mistakes"] else first["key"] * 3
    expected = judge(first, wrong, data["messages"], data["sizes"])
    assert not expected.correct
    if record is FIRST_NUMERIC[record.chapter]:  # typed and clicked as a reader
        enter(block, record, key)
        block.locator("button.mlbook-check").click()
        verdicts = block.locator(".mlbook-verdict").all_inner_texts()
        assert verdicts == ["✓ Right."] * len(record.fields)
        assert "mlbook-solved" in block.get_attribute("class")
        # a wrong value in the first number's box: the hint check() prints
        enter(block, record, {first["name"]: wrong})
        block.locator("button.mlbook-check").click()
        assert verdict_of(block, first["name"]) == "✗ " + expected.hint
    else:
        shown = answer(block, record, key)
        assert shown["verdicts"] == ["✓ Right."] * len(record.fields)
        assert shown["solved"]
        shown = answer(block, record, {first["name"]: wrong})
        assert shown["of"][first["name"]] == "✗ " + expected.hint
    result = check(record.id, **{**key, first["name"]: wrong})
    assert result[first["name"]].hint == expected.hint
    # not a number: says what to type (the shared script's reading, tried on
    # each chapter's first exercise)
    if record is FIRST_NUMERIC[record.chapter]:
        block.locator(f'input[name="{first["name"]}"]').fill("twelve")
        block.locator("button.mlbook-check").click()
        assert "Enter a number" in verdict_of(block, first["name"])
    w.assert_clean()


DIAGNOSES = [r for r in BUILT if r.kind == "diagnose"]


@pytest.mark.parametrize("record", DIAGNOSES, ids=lambda r: r.id)
def test_a_diagnosis_is_judged_in_the_page_as_check_judges_it(chapter_pages, record):
    """The key as the registry computes it is right in the boxes; each named
    mistake, the cause's and the number's, gets in the box the hint check()
    gives it."""
    from helpers.exercise_keys import measured_for

    if record.measured:  # the boxes check against the build's run: its key
        data = json.loads(answer_blocks(record.chapter)[record.id]["spec"])
    else:
        data = spec(record.id, **measured_for(record.id))
    key = {a["name"]: a["key"] for a in data["answers"]}
    url = page_of(record.chapter).as_uri()
    # every box is filled before each verdict is read (the key test typed
    # into the same block): no fresh load
    answers = (f"answers {record.id}",)
    page, w = chapter_pages.get(url, changes=answers, sets=answers)
    block = page.locator(f'.mlbook-answers[data-exercise="{record.id}"]')
    assert answer(block, record, key)["verdicts"] == ["✓ Right."] * len(key)
    named = {m.name for m in record.mistakes}
    for a in data["answers"]:
        for m in [m for m in a["mistakes"] if m["name"] in named]:
            shown = answer(block, record, {**key, a["name"]: m["value"]})
            hint = judge(a, m["value"], data["messages"], data["sizes"]).hint
            assert shown["of"][a["name"]] == "✗ " + hint
            assert m["hint"] in hint
            named.discard(m["name"])
    assert not named, f"{record.id}: named mistakes never tried: {named}"
    w.assert_clean()


def test_a_choice_is_checked_in_the_page(chapter_pages):
    if ONLY is not None and "capstone" not in ONLY:
        pytest.skip("the capstone page is not in this build")
    url = page_of("capstone").as_uri()
    page, w = chapter_pages.get(url, changes=("answers capstone-1",))
    block = page.locator('.mlbook-answers[data-exercise="capstone-1"]')
    for name in ("fused_adamw", "sdpa"):
        block.locator(f'input[value="{name}"]').check()
    block.locator("button.mlbook-check").click()
    assert "attention bucket" in block.locator(".mlbook-verdict").inner_text()
    block.locator('input[value="sdpa"]').uncheck()
    block.locator('input[value="no_recompute"]').check()
    block.locator("button.mlbook-check").click()
    assert block.locator(".mlbook-verdict").inner_text() == "✓ Right."
    w.assert_clean()


PREDICTIONS = [r for r in BUILT if r.kind == "predict"]
SPLIT_NOTES = """[...document.querySelectorAll('.mlbook-fold-note')]
  .filter(n => n.previousElementSibling &&
               n.previousElementSibling.classList.contains('mlbook-folded'))
  .map(n => n.textContent)"""


# every prediction unfolds its result; the note's own button (the shared
# script's, the same on every page) is pressed on the first page only, as each
# unfolding needs the page loaded afresh
FOLDS = [("predict", r) for r in PREDICTIONS] + [("open", r) for r in PREDICTIONS[:1]]


@pytest.mark.parametrize(
    ("how", "record"), FOLDS, ids=[f"{h}-{r.id}" for h, r in FOLDS]
)
def test_the_result_stays_folded_until_a_prediction(chapter_pages, record, how):
    url = page_of(record.chapter).as_uri()
    page, w = chapter_pages.get(url, changes=("folds", f"answers {record.id}"))
    block = page.locator(f'.mlbook-answers[data-exercise="{record.id}"]')
    folded = page.locator(".tag_after-prediction")
    assert folded.count() >= 1
    assert not folded.first.is_visible()
    note = page.locator(".mlbook-fold-note")
    assert note.count() >= 1 and record.id in note.first.inner_text()
    # folded cells one right after another share one note, one button
    assert page.evaluate(SPLIT_NOTES) == [], "a run of folded cells has 2 notes"
    button = block.locator("button.mlbook-check")
    if how == "predict":
        button.click()  # nothing entered: still folded, and says why
        assert not folded.first.is_visible()
        assert "Enter a number" in block.locator(".mlbook-verdict").first.inner_text()
        for name in record.fields:
            block.locator(f'input[name="{name}"]').fill("0.1")
        button.click()
        assert "You said" in block.locator(".mlbook-verdict").first.inner_text()
    else:
        note.first.locator("button").click()
    assert folded.first.is_visible() and page.locator(".mlbook-fold-note").count() == 0
    w.assert_clean()


# a prediction as a reader types it, and as the verdict shows it
TYPED = {"fraction": ("10%", "10 %"), "%": ("10", "10 %"), "s": ("1", "1 s")}
SAID = re.compile(r"^You said (.+?); this run measured (-?[\d,.]+) (%|s)\. ")


@pytest.mark.parametrize("record", PREDICTIONS, ids=lambda r: r.id)
def test_a_prediction_is_answered_by_the_run(chapter_pages, record, monkeypatch):
    """ "You said 10 %; this run measured 31 %. ... Why: ...": the box sets
    the prediction beside the values the build's run recorded (its measuring
    cell's outcome(...)), and the reason is the one those values choose; the
    same run and prediction in check() give the same words."""
    data = json.loads(answer_blocks(record.chapter)[record.id]["spec"])
    run = data["run"]
    assert run is not None, f"{record.id}: no outcome({record.id!r}, ...) in the run"
    assert sorted(run) == sorted(record.run_names)
    url = page_of(record.chapter).as_uri()
    # every box is filled before the verdict is read; that a prediction
    # unfolds the result is test_the_result_stays_folded_until_a_prediction's
    # to show on a page as drawn: no fresh load here
    changes = ("folds", f"answers {record.id}")
    page, w = chapter_pages.get(url, changes=changes, sets=changes)
    block = page.locator(f'.mlbook-answers[data-exercise="{record.id}"]')
    said = {}
    for a in data["answers"]:
        typed = TYPED[a["unit"]][0]
        block.locator(f'input[name="{a["name"]}"]').fill(typed)
        said[a["name"]] = read_number(typed, a["unit"])
    block.locator("button.mlbook-check").click()
    verdicts = block.locator(".mlbook-verdict").all_inner_texts()
    because = block.locator(".mlbook-because").inner_text()
    for a, verdict in zip(data["answers"], verdicts, strict=True):
        words = SAID.match(verdict)
        assert words and words[1] == TYPED[a["unit"]][1], verdict
        value = run[a["name"]] * (100 if a["unit"] == "fraction" else 1)
        assert float(words[2].replace(",", "")) == pytest.approx(value, rel=5e-3)
        assert verdict == compare(a, said[a["name"]], run).hint
    assert because == f"Why: {reason(data['reasons'], run)}"
    assert because[5:] in {r.sentence for r in record.reasons}
    assert page.locator(".tag_after-prediction").first.is_visible()
    from mlbook.judge import _check

    monkeypatch.setattr(_check, "_RUNS", {})
    outcome(record.id, **run)
    result = check(record.id, **said)
    assert [v.hint for v in result.verdicts] == verdicts and result.why == because
    w.assert_clean()


TITLE = re.compile(
    r'<div class="exercise admonition" id="([^"]+)">\s*'
    r'<p class="admonition-title">([^<]*)</p>'
)


@pytest.mark.parametrize("chapter", sorted({r.chapter for r in BUILT}))
def test_each_exercise_shows_its_id_as_its_number(book, chapter):
    """The title is "Exercise (★ mfu-2)": the id check() takes, and no
    number of the page's own (sphinx-exercise numbered mfu-2 "1.1")."""
    titles = dict(TITLE.findall(page_of(chapter).read_text()))
    records = [r for r in BUILT if r.chapter == chapter]
    assert sorted(titles) == sorted(r.id for r in records)
    for r in records:
        assert titles[r.id] == f"Exercise ({r.stars} {r.id})"


def test_a_reference_to_an_exercise_reads_as_its_id(book):
    if ONLY is not None and "plan" not in ONLY:
        pytest.skip("the plan page is not in this build")
    html = page_of("plan").read_text()
    link = re.search(r'<a class="reference internal" href="#plan-1">(.*?)</a>', html)
    assert link and re.sub(r"<[^>]+>", "", link[1]) == "plan-1"


# where along a title's width a reader clicks
CLICKED_AT = (0.02, 0.3, 0.6, 0.97)


def test_a_click_anywhere_on_a_solution_title_opens_it(chapter_pages):
    """The title's text was mostly a link to its exercise: a click there
    jumped to the exercise (35 of 45 clicks) and left the solution shut.
    Each solution of the page is clicked once, at each of CLICKED_AT in
    turn (one page load, where a load for each place took 2-5 s here)."""
    url = page_of("mfu").as_uri()
    page, w = chapter_pages.get(url, changes=("solutions",))
    solutions = page.locator(".solution.dropdown").all()
    assert len(solutions) >= len(CLICKED_AT), len(solutions)
    for i, solution in enumerate(solutions):
        where = CLICKED_AT[i % len(CLICKED_AT)]
        title = solution.locator(".admonition-title")
        title.scroll_into_view_if_needed()
        box = title.bounding_box()
        assert "toggle-hidden" in solution.get_attribute("class")
        page.mouse.click(box["x"] + where * box["width"], box["y"] + box["height"] / 2)
        page.wait_for_function(
            "(e) => !e.classList.contains('toggle-hidden')",
            arg=solution.element_handle(),
            timeout=5_000,
        )
        assert page.url == url, f"the click went to {page.url}"
        assert title.locator("a").count() == 0
    w.assert_clean()


NO_BOXES = [r for r in BUILT if not r.fields and r.kind in ("measure", "code")]


@pytest.mark.parametrize("record", NO_BOXES, ids=lambda r: r.id)
def test_an_exercise_without_boxes_says_why(book, record):
    """A measurement explained, or a function to write, has no box to type
    into: the page says so where the boxes would be."""
    page = page_of(record.chapter).read_text()
    block = re.search(
        rf'<div class="mlbook-answers" data-exercise="{re.escape(record.id)}".*?</div>',
        page,
        re.S,
    )
    assert block, f"{record.id}: nothing under the exercise"
    tags = re.sub(r"<script.*?</script>|<[^>]+>", "", block[0], flags=re.S)
    text = html.unescape(tags)
    assert text.startswith("No box here: "), text
    if record.kind == "code":
        assert f'check("{record.id}", {record.code.name})' in text
    else:
        assert "your own machine" in text


def test_a_fraction_box_takes_a_percentage_and_names_a_rounding(chapter_pages):
    """mfu-3 asks for a fraction: "33.7%", as a solution prints it, is read
    as the fraction, a count to three figures is right, and the fraction to
    two figures (0.34) is told it is a rounding."""
    if ONLY is not None and "mfu" not in ONLY:
        pytest.skip("the MFU chapter is not in this build")
    key = EXERCISES["mfu-3"].key_values()
    assert f"{key['mfu']:.2g}" == "0.34"  # 0.3369: 0.34 is 0.9 % off, 0.337 right
    url = page_of("mfu").as_uri()
    answers = ("answers mfu-3",)  # both boxes filled before each verdict
    page, w = chapter_pages.get(url, changes=answers, sets=answers)
    block = page.locator('.mlbook-answers[data-exercise="mfu-3"]')
    box = block.locator('input[name="mfu"]')
    assert box.get_attribute("placeholder") == "0.25 or 25%"
    box.fill(f"{key['mfu'] * 100:.1f}%")
    three = f"{round(key['max_tokens_per_s'], -3):,.0f}"  # "297,000"
    block.locator('input[name="max_tokens_per_s"]').fill(three)
    check_button = block.locator("button.mlbook-check")
    check_button.click()
    assert block.locator(".mlbook-verdict").all_inner_texts() == ["✓ Right."] * 2
    box.fill("0.34")
    check_button.click()
    shown = block.locator(".mlbook-verdict").first.inner_text()
    assert shown == "✗ Right to 2 significant figures: give 3."
    box.fill("33.7 s")
    check_button.click()
    shown = block.locator(".mlbook-verdict").first.inner_text()
    assert shown.startswith("Enter a number"), shown
    w.assert_clean()
