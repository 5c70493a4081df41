"""The page's answer check (book/_extra/vendor/exercises.js) and check()
give the same verdict on the same answer: for every exercise with a key,
many answers (the key, just inside and just outside the tolerance, five
tolerances off, every mistake and its edges, a percentage, the wrong sign,
zero, far off, the key and every mistake rounded to one and two significant
figures, every subset of a choice) go through both judges, on the same data
spec() writes into the page; and typed texts go through both readers
(read_number and the page's readNumber). Runs in headless Chromium (no book
build needed)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from test_exercises import RUNS

from helpers.exercise_keys import measured_for
from mlbook.exercises import EXERCISES, judge, spec
from mlbook.judge._core import MESSAGES, compare, read_number, reason, shown

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "book" / "_extra" / "vendor" / "exercises.js"


def trial_values(answer: dict) -> list:
    """Answers worth judging: at, inside, on and beyond every edge."""
    if answer["type"] == "choice":
        names = [o["name"] for o in answer["options"]]
        return [list(c) for r in range(0, 4) for c in itertools.combinations(names, r)]
    key = answer["key"]
    marks = [key] + [m["value"] for m in answer["mistakes"]]
    if answer["type"] == "integer":
        out = {0, -key, 2 * key, 10 * key}
        for v in marks:
            out |= {v - 1, v, v + 1}
        return sorted(out)
    tol = answer["rel_tol"]
    out = [0.0, -key, key * 100, key / 100, key * 1e6, key * 1.05, key * 0.7]
    for v in marks:
        for f in (0, 0.5, 0.999, 1.001, 2, 5, -0.5, -0.999, -1.001, -2, -5):
            out.append(v * (1 + f * tol))
        if v:  # a reader's coarser roundings, and one off in the last figure
            for n in (1, 2):
                digits = n - 1 - math.floor(math.log10(abs(v)))
                r = round(v, digits)
                out += [r, r + 10.0**-digits, r - 10.0**-digits]
    return out


# Keys no exercise has yet, so the edge cases are compared too: a negative key,
# a zero integer key, a mistake beside a negative key.
SYNTHETIC = [
    {
        "name": "r",
        "type": "real",
        "key": -3.5,
        "rel_tol": 0.02,
        "unit": "s",
        "mistakes": [{"name": "m", "hint": "h", "value": -7.0}],
    },
    {
        "name": "z",
        "type": "integer",
        "key": 0,
        "unit": "count",
        "mistakes": [{"name": "m", "hint": "h", "value": 2}],
    },
    {"name": "n", "type": "integer", "key": -4, "unit": "count", "mistakes": []},
]


def cases():
    data = spec("mfu-1")
    for answer in SYNTHETIC:
        for value in trial_values(answer):
            yield data, answer, value
    for ex_id, record in EXERCISES.items():
        if not record.checked:
            continue
        data = spec(ex_id, **measured_for(ex_id))
        for answer in data["answers"]:
            for value in trial_values(answer):
                yield data, answer, value


def test_js_and_python_give_the_same_verdicts(js_page):
    batch = list(cases())
    assert len(batch) > 500
    expected = []
    for data, answer, value in batch:
        v = judge(answer, value, data["messages"], data["sizes"])
        expected.append({"correct": v.correct, "hint": v.hint, "mistake": v.mistake})
    # each exercise's data (its messages and sizes) and each answer go over
    # once, the cases naming them by place: sent with every case, they made
    # 16 MB, which took 3 s CPU here to pass through Playwright's driver
    data, answers = {}, {}
    sent = [
        [
            data.setdefault(id(d), (len(data), d))[0],
            answers.setdefault(id(a), (len(answers), a))[0],
            v,
        ]
        for d, a, v in batch
    ]
    payload = {
        "data": [
            {"messages": d["messages"], "sizes": d["sizes"]} for _, d in data.values()
        ],
        "answers": [a for _, a in answers.values()],
        "cases": sent,
    }
    # the cases go over as one JSON string (as the page reads spec() from a
    # script element), and the verdicts come back as one: Playwright checks
    # every value of an object it passes (9 s for 5 MB, against 0.7 s)
    got = json.loads(
        js_page.evaluate(
            """(text) => {
                 const p = JSON.parse(text);
                 return JSON.stringify(p.cases.map(([d, a, value]) => {
                   const v = window.mlbookExercises.judge(
                     p.answers[a], value, p.data[d].messages, p.data[d].sizes);
                   return {correct: v.correct, hint: v.hint, mistake: v.mistake};
                 }));
               }""",
            json.dumps(payload, allow_nan=False),
        )
    )
    assert not js_page.errors, js_page.errors
    differ = [
        (b[1]["name"], b[2], e, g)
        for b, e, g in zip(batch, expected, got, strict=True)
        if e != g
    ]
    assert not differ, f"{len(differ)} verdicts differ, e.g. {differ[:3]}"
    # the trials reach every kind of verdict
    hints = {e["hint"].split(" ")[0] for e in expected}
    assert {"Right.", "Right", "Looks", "Too", "The", "Pick"} <= hints


TEXTS = [
    "0.559",
    "  12,000 ",
    "1e-3",
    "-4.5E2",
    ".5",
    "10 533",
    "1_000",
    "55.9%",
    "55.9 %",
    "5.6%",
    "-1.5e1%",
    ".5%",
    "%",
    "8.0",
    "8.5",
    "0.5.1",
    "12k",
    "",
    "   ",
    "nan",
    "Infinity",
    "1e400",
    "0x10",
    "٣",  # an Arabic-Indic digit: Python's \\d would take it, the box does not
    # commas: between groups of three they group thousands; else a decimal
    # comma, refused with the same message everywhere a number is typed
    "0,49",
    "2,5",
    "55,9%",
    "16,384",
    "2,400,000",
    "1,234.5",
    "0,490",
    "1,234,5",
    "a,b",
]
UNITS_TRIED = [("fraction", False), ("%", False), ("s", False), ("tokens", True)]


def test_the_page_reads_a_typed_answer_as_check_does(js_page):
    """Every text in every kind of box: the same number, or the same message."""
    cases = [(text, unit, whole) for text in TEXTS for unit, whole in UNITS_TRIED]
    expected = []
    for text, unit, whole in cases:
        try:
            expected.append({"value": read_number(text, unit, whole)})
        except ValueError as exc:
            expected.append({"error": str(exc)})
    got = js_page.evaluate(
        """([cases, messages]) => cases.map(([text, unit, whole]) =>
             window.mlbookExercises.readNumber(text, unit, whole, messages))""",
        [cases, MESSAGES],
    )
    differ = [(c, e, g) for c, e, g in zip(cases, expected, got, strict=True) if e != g]
    assert not differ, f"{len(differ)} readings differ, e.g. {differ[:3]}"
    # hand values: what a reader means by each
    read = dict(zip(cases, expected, strict=True))
    assert read[("55.9%", "fraction", False)] == {"value": 0.559}
    assert read[("55.9%", "%", False)] == {"value": 55.9}
    assert read[("  12,000 ", "tokens", True)] == {"value": 12000.0}
    assert "error" in read[("55.9%", "s", False)]
    assert "error" in read[("8.5", "tokens", True)]
    assert read[("2,400,000", "tokens", True)] == {"value": 2_400_000.0}
    assert read[("1,234.5", "s", False)] == {"value": 1234.5}
    assert read[("0,49", "fraction", False)]["error"].startswith(
        "Write decimals with a point: 0.49, not 0,49"
    )
    assert "0.490" in read[("0,490", "s", False)]["error"]


SHOWN = [1234.5, 999.5, 999.7, 0.125, 0.3125, -1234.56, 1e-9, 86_400.4, 3.1e7, 0.0]


def test_a_prediction_is_set_beside_the_run_as_check_does(js_page):
    """Every prediction's made-up runs (tests/test_exercises.py's RUNS), many
    predictions each: the same words beside the run, the same reason, and
    numbers shown alike (ties in the last figure included)."""
    cases = []
    for ex_id, runs in RUNS.items():
        for run, _ in runs:
            data = spec(ex_id, **run)
            for answer in data["answers"]:
                x = run[answer["name"]]
                for said in (0.0, -x, x, x * 1.05, x * 0.5, x * 3, x * 100, 1e-3, 7.0):
                    cases.append((data, answer, said))
    expected = [
        {
            "hint": compare(a, said, d["run"], d["messages"], d["sizes"]).hint,
            "correct": compare(a, said, d["run"]).correct,
            "why": reason(d["reasons"], d["run"]),
        }
        for d, a, said in cases
    ]
    got = js_page.evaluate(
        """(cases) => cases.map(([d, a, said]) => {
             const judge = window.mlbookExercises;
             const v = judge.compare(a, said, d.run, d.messages, d.sizes);
             return {hint: v.hint, correct: v.correct,
                     why: judge.reason(d.reasons, d.run)};
           })""",
        [[d, a, said] for d, a, said in cases],
    )
    differ = [
        (c[2], e, g) for c, e, g in zip(cases, expected, got, strict=True) if e != g
    ]
    assert not differ, f"{len(differ)} differ, e.g. {differ[:3]}"
    assert len(cases) > 150 and {e["why"] for e in expected} == {
        r.sentence for ex_id in RUNS for r in EXERCISES[ex_id].reasons
    }
    units = ("fraction", "%", "s", "")
    numbers = [(v, u) for v in SHOWN + [-v for v in SHOWN] for u in units]
    got = js_page.evaluate(
        "(cases) => cases.map(([v, u]) => window.mlbookExercises.shown(v, u))", numbers
    )
    assert got == [shown(v, u) for v, u in numbers]
    # by hand: three figures, ties away from zero, a fraction as a percentage
    assert shown(1234.5, "s") == "1,235 s" and shown(0.3125, "fraction") == "31.3 %"
    assert shown(999.7, "s") == "1,000 s" and shown(1e-9, "s") == "0.000000001 s"


@pytest.fixture(scope="module")
def js_page(chromium_browser):
    """A blank page with exercises.js loaded, in the run's one Chromium;
    ``.errors`` collects page errors."""
    context = chromium_browser.new_context()
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.set_content("<!doctype html><title>judge</title>")
    page.add_script_tag(path=str(SCRIPT))
    yield page
    context.close()
