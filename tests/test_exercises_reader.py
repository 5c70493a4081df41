"""What a reader types into check() (or an answer box) and what comes back:
answers typed as text ("55.9%" where a fraction is asked), answers rounded
coarser than three significant figures, and the short messages IPython (so
JupyterLab) shows for a call check() refuses, in place of a traceback.

The rounding and parsing rules are the page's too: tests/test_exercises_js.py
feeds both judges the same values and texts."""

from __future__ import annotations

import math

import pytest

from mlbook.exercises import EXERCISES, UnknownExercise, check, judge, spec
from mlbook.judge._core import MESSAGES, read_number

# --- answers typed as text ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("55.9%", "fraction", 0.559),  # the percentage a solution prints
        ("55.9 %", "fraction", 0.559),
        ("5.6%", "fraction", 0.056),  # the point moved, not 5.6 / 100 = 0.05599...
        ("-1.5e1%", "fraction", -0.15),
        ("0.559", "fraction", 0.559),
        ("55.9%", "%", 55.9),  # where a percentage is asked, % is its unit
        ("55.9", "%", 55.9),
        ("12,000", "tokens", 12000.0),
        ("1 234.5", "s", 1234.5),
    ],
)
def test_a_typed_answer_reads_as_the_reader_meant(text, unit, value):
    assert read_number(text, unit) == value


@pytest.mark.parametrize(
    ("text", "unit", "message"),
    [
        ("55.9%", "s", "Enter a number in s: a percentage (%) is for a fraction."),
        ("abc", "fraction", "Enter a number (digits, a point, an optional exponent)."),
        ("%", "fraction", "Enter a number (digits, a point, an optional exponent)."),
        ("1e400", "s", "Enter a number (digits, a point, an optional exponent)."),
        ("  ", "GiB", "Enter a number in GiB."),
    ],
)
def test_an_unreadable_answer_says_what_to_type(text, unit, message):
    with pytest.raises(ValueError) as err:
        read_number(text, unit)
    assert str(err.value) == message


# Every fraction a reader computes from the statement, as a percentage to three
# significant figures ("55.9%"), the way 25 solutions print it
FRACTIONS = [
    pytest.param(r.id, a, id=f"{r.id}:{a['name']}")
    for r in EXERCISES.values()
    if r.checked and not r.measured
    for a in spec(r.id)["answers"]
    if a["type"] == "real" and a["unit"] == "fraction"
]


def _figures(x: float, n: int) -> float:
    """``x`` rounded to ``n`` significant figures, as a reader writes it."""
    return round(x, n - 1 - math.floor(math.log10(abs(x))))


def test_the_figures_round_as_a_reader_does():
    assert _figures(0.5594, 3) == 0.559 and _figures(0.5594, 2) == 0.56
    assert _figures(1049.9, 2) == 1000 and _figures(-0.04567, 2) == -0.046


@pytest.mark.parametrize(("ex_id", "answer"), FRACTIONS)
def test_a_fraction_typed_as_a_percentage_is_right(ex_id, answer):
    text = f"{_figures(answer['key'] * 100, 3):g}%"
    value = read_number(text, "fraction")
    assert judge(answer, value).correct, (ex_id, text, value)


def test_there_are_fractions_to_type_as_percentages():
    assert len(FRACTIONS) >= 20  # 25 solutions printed a percentage


def test_check_reads_text_as_the_box_does(capsys):
    key = EXERCISES["mfu-1"].key_values()
    as_percent = {n: f"{_figures(v * 100, 3):g}%" for n, v in key.items()}
    assert check("mfu-1", **as_percent).correct
    with pytest.raises(ValueError, match=r"mfu-1: mfu .*got 'abc': Enter a number"):
        check("mfu-1", mfu="abc", mfu_6n=key["mfu_6n"])


# --- rounding coarser than three figures ----------------------------------------------

# made-up answers: the key 0.5564 (right within 0.2 %), a named mistake at 0.56
KEY = {
    "name": "x",
    "type": "real",
    "unit": "fraction",
    "key": 0.5564,
    "rel_tol": 0.002,
    "mistakes": [],
}
WITH_MISTAKE = KEY | {"mistakes": [{"name": "a slip", "hint": "look.", "value": 0.56}]}


@pytest.mark.parametrize(
    ("answer", "value", "hint"),
    [
        (KEY, 0.556, "Right."),
        (KEY, 0.56, "Right to 2 significant figures: give 3."),
        (KEY, 0.6, "Right to 1 significant figure: give 3."),
        (KEY, 0.55, "Too low by less than 10 %."),  # 0.5564 to 2 figures is 0.56
        (KEY, 0.57, "Too high by less than 10 %."),
        (WITH_MISTAKE, 0.56, "Looks like a slip: look."),  # the named mistake wins
        (KEY | {"key": 1049.9}, 1000.0, "Right to 1 significant figure: give 3."),
        (KEY | {"key": -0.04567}, -0.046, "Right to 2 significant figures: give 3."),
        (KEY | {"key": 0.125}, 0.12, "Right to 2 significant figures: give 3."),
        (KEY | {"key": 0.125}, 0.13, "Right to 2 significant figures: give 3."),
    ],
)
def test_a_coarser_rounding_is_named(answer, value, hint):
    assert judge(answer, value).hint == hint


STATED = [
    pytest.param(r.id, a, id=f"{r.id}:{a['name']}")
    for r in EXERCISES.values()
    if r.checked and not r.measured and r.kind not in ("measure", "code", "predict")
    for a in spec(r.id)["answers"]
    if a["type"] == "real"
]


@pytest.mark.parametrize(("ex_id", "answer"), STATED)
def test_every_key_to_two_figures_is_a_rounding_a_mistake_or_right(ex_id, answer):
    """The key rounded to two significant figures: right if within the
    tolerance; else the named mistake it equals, whose hint wins; else the
    rounding message."""
    two = _figures(answer["key"], 2)
    verdict = judge(answer, two)
    tol = answer["rel_tol"]
    hit = [
        m for m in answer["mistakes"] if abs(two - m["value"]) <= tol * abs(m["value"])
    ]
    if abs(two - answer["key"]) <= tol * abs(answer["key"]):
        assert verdict.correct
    elif hit:
        assert verdict.mistake == hit[0]["name"]
    elif _figures(two, 1) == two:  # 3.0e5 reads as one figure: 300,000
        assert verdict.hint == "Right to 1 significant figure: give 3.", (ex_id, two)
    else:
        assert verdict.hint == "Right to 2 significant figures: give 3.", (ex_id, two)


def test_some_keys_need_a_third_figure():
    """Enough two-figure answers are refused for the message to matter."""
    answers = [p.values[1] for p in STATED]
    refused = [a for a in answers if not judge(a, _figures(a["key"], 2)).correct]
    assert len(refused) >= 20


def test_the_rounding_message_is_the_pages():
    assert spec("mfu-1")["messages"]["rounding"] == MESSAGES["rounding"]


# --- short messages in IPython --------------------------------------------------------


def _shown(call) -> list[str]:
    """What IPython shows for the error ``call`` raises: the lines of its
    _render_traceback_ hook."""
    with pytest.raises(Exception) as err:  # noqa: PT011 (each test says which)
        call()
    return err.value, err.value._render_traceback_()


def test_no_answers_says_what_it_takes(capsys):
    result = check("mfu-1")
    assert not result.correct and not result.checked
    assert capsys.readouterr().out.splitlines() == [
        "mfu-1 takes:",
        "  mfu: MFU with the attention term, 6 N_matmul + 12Lhs, a fraction "
        '(0.25, or "25%")',
        '  mfu_6n: MFU with 6N only, N = all parameters, a fraction (0.25, or "25%")',
        'Call check("mfu-1", mfu=..., mfu_6n=...)',
    ]


def test_a_misspelled_name_gets_the_closest():
    exc, lines = _shown(lambda: check("mfu-1", mfu=0.5, mfu6n=0.49))
    assert isinstance(exc, TypeError)
    assert lines[0] == (
        "TypeError: missing mfu_6n; no answer called mfu6n (did you mean mfu_6n?)."
    )
    assert lines[-1] == 'Call check("mfu-1", mfu=..., mfu_6n=...)'
    assert len(lines) <= 5


def test_a_misspelled_measurement_gets_the_closest():
    exc, lines = _shown(
        lambda: check(
            "precision-1",
            logit_grad=[1.0],
            grads=[1.0],
            lowest_log2=1,
            highest_log2=2,
            width=2,
        )
    )
    assert "no answer called logit_grad (did you mean logit_grads?)" in lines[0]


@pytest.mark.parametrize(
    ("bad", "first"),
    [
        ("mfu-12", "UnknownExercise: no exercise 'mfu-12'; did you mean mfu-1, mfu-2"),
        ("MFU-1", "UnknownExercise: no exercise 'MFU-1'; did you mean mfu-1"),
        ("plan1", "UnknownExercise: no exercise 'plan1'; did you mean plan-1"),
    ],
)
def test_an_unknown_id_gets_the_closest(bad, first):
    exc, lines = _shown(lambda: check(bad, x=1))
    assert isinstance(exc, UnknownExercise) and isinstance(exc, KeyError)
    assert lines[0].startswith(first) and len(lines) == 1


def test_an_id_like_none_lists_the_ids():
    exc, lines = _shown(lambda: check("xyz"))
    assert lines[0] == "UnknownExercise: no exercise 'xyz'."
    assert lines[1].startswith("The ids: accumulation-1 to accumulation-")
    assert "mfu-1 to mfu-10" in lines[1] and len(lines) == 2


def test_a_wrong_type_is_one_line():
    exc, lines = _shown(lambda: check("mfu-1", mfu=[0.5], mfu_6n=0.49))
    assert isinstance(exc, TypeError)
    assert lines == [
        "TypeError: mfu-1: mfu (MFU with the attention term, 6 N_matmul + 12Lhs) is a "
        "number in fraction, got list [0.5]"
    ]


def test_ipython_shows_the_message_alone(capsys):
    """In an IPython shell, a refused check() prints its message, not the
    traceback through mlbook/judge that the hook replaces."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    shell.run_cell('from mlbook.exercises import check\ncheck("mfu-1", mfu=0.5)')
    out = capsys.readouterr()
    shown = out.out + out.err
    assert "TypeError: missing mfu_6n." in shown
    assert 'Call check("mfu-1", mfu=..., mfu_6n=...)' in shown
    assert "Traceback" not in shown and "_check.py" not in shown
