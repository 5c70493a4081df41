"""Property tests of how a typed answer is read and met: the number a box
reads (as exercises.js reads it), a rounding named by its figures, and the
closest names for a misspelling."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.judge._core import close_matches, read_number, rounded_to

PROPERTY_COVERS = {
    "mlbook.judge._core.read_number",
    "mlbook.judge._core.rounded_to",
    "mlbook.judge._core.close_matches",
}
FEW = examples(50)
finite = st.floats(-1e12, 1e12, allow_nan=False).filter(lambda x: abs(x) > 1e-9)


@FEW
@given(finite)
def test_a_number_written_plainly_reads_back_as_itself(x):
    assert read_number(repr(x), "GiB") == x
    assert read_number(f"{x:,}", "GiB") == pytest.approx(x, rel=1e-12)


@FEW
@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_a_percentage_is_a_hundredth_where_a_fraction_is_asked(x):
    text = f"{x:.4f}%"
    as_fraction = read_number(text, "fraction")
    assert as_fraction == pytest.approx(float(f"{x:.4f}") / 100, rel=1e-12, abs=1e-15)
    assert read_number(text, "%") == float(f"{x:.4f}")
    with pytest.raises(ValueError):
        read_number(text, "GiB")  # "%" means nothing in GiB


@FEW
@given(st.text(alphabet="abcxyz,;:", min_size=1, max_size=6))
def test_what_is_not_a_number_is_refused(text):
    with pytest.raises(ValueError):
        read_number(text, "fraction")


@FEW
@given(st.floats(1e-6, 1e9, allow_nan=False), st.sampled_from([1, 2]))
@example(2.5, 1)  # a tie: 2 and 3 are both 2.5 to one figure
@example(145.0, 1)  # 100 to one figure, 150 (a tie) to two
def test_a_key_rounded_to_n_figures_is_named_as_such(key, n):
    value = float(f"{key:.{n - 1}e}")
    got = rounded_to(value, key)
    # a value that is also the key's rounding to fewer figures is named by those
    assert got is not None and got <= n
    # three times the key is no rounding of it (half a unit of a figure is at
    # most half the value); 1.5 times a rounding can be one: 145 is 100 to one
    # figure and 150 to two, and a tie (2.5) is 2 and 3
    assert rounded_to(3 * key, key) is None


@FEW
@given(
    st.lists(
        st.from_regex(r"[a-z]{3,8}-[1-9]", fullmatch=True),
        min_size=1,
        max_size=12,
        unique=True,
    )
)
def test_the_closest_names_are_candidates_and_the_word_itself_comes_first(names):
    word = names[len(names) // 2]
    found = close_matches(word, names)
    assert found[0] == word and set(found) <= set(names) and len(found) <= 3
    assert close_matches("#" * 20, names) == []
