"""One reading of a typed number everywhere a reader types one: the answer
boxes (exercises.js readNumber), check() (read_number), the live figures'
boxes (Control.read) and the plan command's flags. Digits grouped as the
prose prints them are read (16,384; 2,400,000; 1 000; 1_000); a decimal
comma (0,49; 2,5) is refused with the same message in each, naming the
point it needs. Property tests of the reader and of did_you_mean."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import live
from mlbook.common.validate import COMMA_DECIMAL, did_you_mean, number_text
from mlbook.exercises import check
from mlbook.judge._core import MESSAGES, read_number

PROPERTY_COVERS = {
    "mlbook.common.validate.number_text",
    "mlbook.common.validate.did_you_mean",
}

# typed -> the number every host reads, or the point the message asks for
GROUPED = {"16,384": 16384, "2,400,000": 2_400_000, "1 000": 1000, "12,000.5": 12000.5}
COMMAS = {"0,49": "0.49", "2,5": "2.5", "0,490": "0.490", "1,234,5": "1234.5"}


def refusal(typed: str) -> str:
    return COMMA_DECIMAL.format(point=COMMAS[typed], typed=typed)


@pytest.mark.parametrize("typed", sorted(GROUPED))
def test_grouped_digits_are_the_number_everywhere(typed):
    want = GROUPED[typed]
    assert read_number(typed, "s") == want
    control = live.number("n", "n (s)", 1, 0, 10**7, 1)
    assert control.read(typed) == want
    assert live.slider("x", "x (s)", 1.0, 0.5, 10**7, 0.5).fit(typed).value == want


@pytest.mark.parametrize("typed", sorted(COMMAS))
def test_a_decimal_comma_is_refused_with_one_message_everywhere(typed):
    message = refusal(typed)
    assert message.startswith(f"Write decimals with a point: {COMMAS[typed]}, not")
    with pytest.raises(ValueError) as boxes:
        read_number(typed, "fraction")
    assert str(boxes.value) == message
    with pytest.raises(live.Unreadable) as control:
        live.number("n", "n (s)", 1, 0, 10, 1).read(typed)
    assert control.value.message == message
    with pytest.raises(ValueError) as checked:
        check("mfu-1", mfu=typed, mfu_6n=0.49)
    assert str(checked.value).endswith(message)
    out = subprocess.run(
        [sys.executable, "-m", "mlbook", "plan", "--model", "Llama-3-70B"]
        + ["--tokens", "15e12", "--gpu", "H100 SXM", "--gpus", "1024"]
        + ["--mfu", typed],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stderr.strip().endswith(message), out.stderr


def test_the_answer_boxes_say_the_same(chromium_browser):
    """exercises.js's readNumber, on the same texts, in Chromium."""
    from test_exercises_js import SCRIPT

    context = chromium_browser.new_context()
    try:
        page = context.new_page()
        page.set_content("<!doctype html><title>read</title>")
        page.add_script_tag(path=str(SCRIPT))
        texts = sorted(GROUPED) + sorted(COMMAS)
        got = page.evaluate(
            """([texts, messages]) => texts.map(t =>
                 window.mlbookExercises.readNumber(t, "s", false, messages))""",
            [texts, MESSAGES],
        )
    finally:
        context.close()
    want = [{"value": GROUPED[t]} for t in sorted(GROUPED)]
    want += [{"error": refusal(t)} for t in sorted(COMMAS)]
    assert got == want


digits = st.integers(0, 10**12)


@examples(100)
@given(digits, st.sampled_from([",", " ", "_", "\u202f"]))
def test_grouping_in_threes_is_dropped(n, sep):
    grouped = f"{n:,}".replace(",", sep)
    assert number_text(grouped) == str(n)
    assert number_text(f"-{grouped}.25") == f"-{n}.25"


@examples(100)
@given(st.integers(0, 999), st.integers(1, 99).map(str))
def test_a_comma_before_fewer_or_more_than_three_digits_is_a_decimal_comma(whole, tail):
    if len(tail) == 3 and whole > 0:
        return  # 1,234: a thousands group
    typed = f"{whole},{tail}"
    with pytest.raises(ValueError) as raised:
        number_text(typed)
    point = f"{whole}.{tail}"
    assert str(raised.value) == COMMA_DECIMAL.format(point=point, typed=typed)
    assert float(point) == float(re.search(r"point: (\S+),", str(raised.value))[1])


@examples(100)
@given(st.text(max_size=12))
def test_what_is_not_a_number_comes_back_for_the_caller(text):
    """number_text never guesses: it drops grouping or refuses a decimal
    comma; other text comes back without its spaces, for the caller to
    refuse."""
    try:
        out = number_text(text)
    except ValueError as exc:
        assert "," in text and str(exc).startswith("Write decimals with a point")
        return
    assert not re.search(r"\s", out) and "_" not in out
    if "," in out:  # not a grouping, not a number with a comma: left as it was
        assert not re.fullmatch(r"[+-]?[0-9.,eE%+-]+", out) or out.count(",")


@examples(60)
@given(
    st.lists(
        st.text("abcXYZ019- ", min_size=1, max_size=10).filter(str.strip),
        min_size=1,
        max_size=8,
    ),
    st.data(),
)
def test_did_you_mean_finds_a_name_whatever_its_case(names, data):
    name = data.draw(st.sampled_from(names))
    found = did_you_mean(name.swapcase(), names)
    # a name typed with spaces around it is that name ("0 " is "0")
    assert found and found[0].strip().lower() == name.strip().lower()
    assert len(did_you_mean(name + "x", names)) <= 3
    assert set(did_you_mean(name, names)) <= set(names)
