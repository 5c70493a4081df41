"""Property tests of mlbook.exercises: the verdict logic against its
definition, check() against the key for any perturbation, and the helpers
the chapter modules use (first_s_above, scale_window)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples
from helpers.exercise_keys import measured_for
from mlbook.exercises import (
    EXERCISES,
    Integer,
    Real,
    UnknownExercise,
    answer_key,
    check,
    exercise,
    get,
    judge,
    outcome,
    register,
    spec,
)
from mlbook.judge._core import (
    MESSAGES,
    OPERATORS,
    UNIT_MISTAKES,
    compare,
    mistake_values,
    reason,
    run_values,
    shown,
)
from mlbook.precision.exercises import scale_window
from mlbook.recompute.exercises import first_s_above

PROPERTY_COVERS = {
    "mlbook.judge._check.check",
    "mlbook.judge._check.outcome",
    "mlbook.judge._core.compare",
    "mlbook.judge._core.reason",
    "mlbook.judge._core.run_values",
    "mlbook.judge._core.shown",
    "mlbook.judge._core.exercise",
    "mlbook.judge._core.get",
    "mlbook.judge._core.judge",
    "mlbook.judge._core.mistake_values",
    "mlbook.judge._core.register",
    "mlbook.judge._core.spec",
    "mlbook.judge._page.answer_key",
    "mlbook.precision.exercises.scale_window",
    "mlbook.recompute.exercises.first_s_above",
}

FAST = examples(60)
IDS = sorted(EXERCISES)
REAL_ANSWERS = [
    (r.id, n)
    for r in EXERCISES.values()
    if r.checked and not r.measured
    for n, f in r.fields.items()
    if isinstance(f, Real)
]
keys = st.floats(1e-6, 1e6) | st.floats(-1e6, -1e-6)
tols = st.floats(1e-4, 0.1)


@FAST
@given(key=keys, tol=tols, factor=st.floats(-3, 3))
def test_a_real_answer_is_right_exactly_within_its_tolerance(key, tol, factor):
    value = key * (1 + factor)
    answer = {"name": "x", "type": "real", "key": key, "rel_tol": tol, "mistakes": []}
    v = judge(answer, value)
    assert v.correct == (abs(value - key) <= tol * abs(key))
    if not v.correct and value * key > 0:
        assert v.hint.startswith("Too high" if value > key else "Too low")
    if not v.correct and value * key <= 0:
        assert v.hint == MESSAGES["sign"]


@FAST
@given(key=keys, tol=tols, wrong=st.floats(1.5, 20), jitter=st.floats(-0.99, 0.99))
def test_a_mistake_is_named_within_its_own_tolerance(key, tol, wrong, jitter):
    m = key * wrong
    answer = {
        "name": "x",
        "type": "real",
        "key": key,
        "rel_tol": tol,
        "mistakes": [{"name": "m", "hint": "h", "value": m}],
    }
    v = judge(answer, m * (1 + jitter * tol))
    assert not v.correct and v.mistake == "m" and v.hint == "Looks like m: h"


@FAST
@given(key=st.integers(-(10**6), 10**6), value=st.integers(-(10**6), 10**6))
def test_an_integer_is_right_only_when_equal(key, value):
    answer = {"name": "n", "type": "integer", "key": key, "mistakes": []}
    v = judge(answer, value)
    assert v.correct == (key == value)
    if value != key and key != 0 and value * key > 0:
        assert v.hint.startswith("Too high" if value > key else "Too low")


@FAST
@given(st.sampled_from(REAL_ANSWERS), st.floats(-0.5, 0.5))
def test_check_agrees_with_the_tolerance_for_any_perturbation(which, f):
    ex_id, name = which
    record = EXERCISES[ex_id]
    key = record.key_values()
    tol = record.tolerances[name]
    assume(abs(abs(f) - tol) > 1e-9)  # not on the edge, where rounding decides
    result = check(ex_id, **{**key, name: key[name] * (1 + f)})
    assert result.correct == (abs(f) < tol)
    assert result[name].correct == (abs(f) < tol)


@FAST
@given(st.text(min_size=1, max_size=12))
def test_get_names_an_unknown_id(text):
    assume(text not in EXERCISES)
    with pytest.raises(UnknownExercise) as err:
        get(text)
    assert repr(text) in str(err.value)


@FAST
@given(st.sampled_from(IDS))
def test_get_and_spec_give_the_record_as_plain_data(ex_id):
    record = get(ex_id)
    assert record.id == ex_id
    data = spec(ex_id, **measured_for(ex_id))
    assert json.loads(json.dumps(data)) == data
    assert [a["name"] for a in data["answers"]] == list(record.fields)
    if record.checked:
        key = record.key_values(**measured_for(ex_id))
        assert answer_key(ex_id, **measured_for(ex_id)).values == key


@FAST
@given(
    chapter=st.sampled_from(["mfu", "input_pipeline", "plan"]),
    n=st.integers(100, 10**6),
    level=st.integers(-2, 5),
    kind=st.sampled_from(["compute", "derive", "measure", "quiz"]),
)
def test_exercise_reads_the_chapter_from_the_id_and_refuses_bad_records(
    chapter, n, level, kind
):
    def make():
        return exercise(f"{chapter}-{n}", level=level, kind=kind)

    if level in (1, 2, 3) and kind in ("measure", "compute", "derive"):
        record = make()
        assert record.chapter == chapter and record.stars == "★" * level
        assert register(record) == (record,) and register(record) == (record,)
        with pytest.raises(ValueError, match="registered twice"):
            register(exercise(f"{chapter}-{n}", level=level, kind=kind))
        from mlbook.judge._core import _REGISTRY

        del _REGISTRY[record.id]  # leave the book's registry as it was
    else:
        with pytest.raises(ValueError):
            make()


@FAST
@given(unit=st.sampled_from(sorted(UNIT_MISTAKES)), key=st.floats(0.01, 1e5))
def test_unit_mistakes_are_the_key_times_their_factor(unit, key):
    record = exercise(
        "plan-9999",
        level=1,
        kind="compute",
        answers={"x": Real(unit, "x", 0.01)},
        key=lambda: {"x": key},
    )
    found = mistake_values(record, {"x": key})["x"]
    assert [m["value"] for m in found] == [key * f for f, _, _ in UNIT_MISTAKES[unit]]
    whole = exercise(
        "plan-9998",
        level=1,
        kind="compute",
        answers={"n": Integer(unit, "n")},
        key=lambda: {"n": 7},
    )
    for m in mistake_values(whole, {"n": 7})["n"]:
        assert isinstance(m["value"], int)


@FAST
@given(slope=st.floats(1e-6, 1e-2), target=st.floats(1e-3, 0.5), hint=st.floats(1, 1e4))
def test_first_s_above_is_the_smallest_whole_s_past_the_target(slope, target, hint):
    def share(s):
        return slope * s

    s = first_s_above(share, target, hint)
    assert share(s) > target and (s == 1 or share(s - 1) <= target)
    assert abs(s - math.floor(target / slope) - 1) <= 1  # the closed form, give or take


magnitudes = st.lists(st.floats(-40, 3), min_size=5, max_size=60).map(
    lambda logs: 2.0 ** np.array(logs)
)


@FAST
@given(logits=magnitudes, others=magnitudes, limit=st.floats(0.001, 0.5))
def test_the_scale_window_is_every_k_that_meets_both_conditions(logits, others, limit):
    grads = np.concatenate([logits, others])
    window = scale_window("fp16", limit, logits, grads)
    assert window == sorted(window)
    if window:
        assert window == list(range(window[0], window[-1] + 1))  # one run of k
    looser = scale_window("fp16", min(1.0, limit * 2), logits, grads)
    assert set(window) <= set(looser)
    assert set(scale_window("fp16", limit, logits, grads, lost="any")) <= set(window)


# --- a prediction beside the run ------------------------------------------------------

PREDICTIONS = [r for r in EXERCISES.values() if r.kind == "predict"]
measures = st.floats(1e-4, 1e6) | st.floats(-1e6, -1e-4)


@FAST
@given(measured=measures, tol=tols, factor=st.floats(-3, 3))
def test_a_prediction_is_close_exactly_within_its_tolerance(measured, tol, factor):
    said = measured * (1 + factor)
    answer = {"name": "x", "unit": "s", "rel_tol": tol}
    v = compare(answer, said, {"x": measured})
    assert v.correct == (abs(said - measured) <= tol * abs(measured))
    assert v.hint.startswith(f"You said {shown(said, 's')}; this run measured ")
    how = v.hint.split(". ", 1)[1]
    if v.correct:
        assert how == MESSAGES["close"]
    elif said * measured > 0:
        assert how.startswith("Too high" if said > measured else "Too low")
        assert "unit" not in how  # a guess far off is not told to check its unit
    else:
        assert how == MESSAGES["sign"]


@FAST
@given(st.floats(-1e7, 1e7, allow_nan=False), st.sampled_from(["fraction", "%", "s"]))
def test_a_number_shown_reads_back_to_three_figures(value, unit):
    text, shown_unit = shown(value, unit).rsplit(" ", 1)
    assert shown_unit == ("%" if unit == "fraction" else unit)
    x = value * 100 if unit == "fraction" else value
    back = float(text.replace(",", ""))
    assert back == pytest.approx(x, rel=5e-3, abs=5e-13 + 5e-3 * abs(x))
    assert text != "-0"


def _holds(run, when) -> bool:
    return all(
        OPERATORS[op](run[a], run[b] if isinstance(b, str) else b) for a, op, b in when
    )


@FAST
@given(st.sampled_from(PREDICTIONS), st.data())
def test_the_reason_said_is_the_first_that_holds(record, data):
    run = {n: data.draw(st.floats(-2, 200), label=n) for n in record.run_names}
    said = reason(spec(record.id, **run)["reasons"], run)
    i = [r.sentence for r in record.reasons].index(said)
    assert _holds(run, record.reasons[i].when)
    assert not any(_holds(run, r.when) for r in record.reasons[:i])


@FAST
@given(st.sampled_from(PREDICTIONS), st.data())
def test_a_run_is_recorded_and_set_beside_a_prediction(record, data):
    from mlbook.judge import _check

    run = {n: data.draw(st.floats(1e-3, 1e3), label=n) for n in record.run_names}
    assert run_values(record, run) == run
    runs, said_before = dict(_check._RUNS), dict(_check._SAID)
    try:
        outcome(record.id, **run)
        result = check(record.id, **{n: run[n] * 2 for n in record.fields})
    finally:
        _check._RUNS.clear(), _check._RUNS.update(runs)
        _check._SAID.clear(), _check._SAID.update(said_before)
    assert result.why[len("Why: ") :] in {r.sentence for r in record.reasons}
    for name, f in record.fields.items():
        assert f"this run measured {shown(run[name], f.unit)}." in result[name].hint
        assert not result[name].correct  # twice the run is a factor of 2 off


def test_a_run_needs_every_value_and_finite_ones():
    record = EXERCISES["mfu-2"]
    with pytest.raises(TypeError, match="the run's values are"):
        run_values(record, {"mfu_nominal": 0.3})
    with pytest.raises(ValueError, match="finite"):
        run_values(record, dict.fromkeys(record.run_names, math.inf))
