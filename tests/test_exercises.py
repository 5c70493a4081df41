"""mlbook.exercises: the registry's contract, check()'s verdicts, hints and
errors, change-the-code checks, and the pages' exercises against the
registry (an exercise without a record, a record without a page, a
prediction without a folded result, all fail here).

Every test walks the registry, so a new exercise is checked without being
listed; its independent key goes in tests/test_keys_<chapter>.py.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

import jupytext
import pytest

from bookbuild import pages
from helpers.exercise_keys import independent_values, measured_for
from mlbook.exercises import (
    EXERCISES,
    KINDS,
    UNITS,
    Choice,
    Integer,
    Mistake,
    Real,
    Reason,
    UnknownExercise,
    check,
    exercise,
    get,
    judge,
    outcome,
    spec,
)

ROOT = Path(__file__).resolve().parent.parent
PAGES = {p.stem: p for p in pages.chapters()}
RECORDS = list(EXERCISES.values())
CHECKED = [r for r in RECORDS if r.checked]
CODE = [r for r in RECORDS if r.code is not None]


def ids(record) -> str:
    return record.id


def key_answers(record) -> dict:
    return {**measured_for(record.id), **record.key_values(**measured_for(record.id))}


@functools.cache
def _spec(ex_id: str) -> dict:
    """spec() with the measured inputs, once a run (collection asks for each
    exercise's twice: for its real answers and its integer ones)."""
    return spec(ex_id, **measured_for(ex_id))


def answer_specs(record, kinds=("real", "integer", "choice")):
    return [a for a in _spec(record.id)["answers"] if a["type"] in kinds]


def numeric_answers(kind):
    return [
        pytest.param(r, a, id=f"{r.id}:{a['name']}")
        for r in CHECKED
        for a in answer_specs(r, (kind,))
    ]


# --- the registry's contract ----------------------------------------------------------


def test_there_are_exercises_on_every_chapter():
    assert {r.chapter for r in RECORDS} >= {
        p.stem for p in (ROOT / "notebooks").glob("*.md")
    }
    assert {"mfu-1", "cadence-1", "recompute-1", "precision-1", "faults-1"} <= set(
        EXERCISES
    )


@pytest.mark.parametrize("record", RECORDS, ids=ids)
def test_record_contract(record):
    assert isinstance(EXERCISES, Mapping)
    assert record.chapter in PAGES, f"{record.id}: no page {record.chapter!r}"
    assert re.fullmatch(rf"{record.chapter}-[1-9][0-9]*", record.id)
    assert record.level in (1, 2, 3) and record.stars == "★" * record.level
    assert record.kind in KINDS
    assert KINDS == ("compute", "derive", "code", "measure", "predict", "diagnose")
    assert isinstance(record.answers, Mapping)
    for name, unit in record.answers.items():
        assert isinstance(name, str) and isinstance(unit, str) and unit in UNITS
        assert unit not in ("percent", "frac", "GB ", "sec"), unit
    if record.kind in ("compute", "derive", "code", "diagnose") and record.fields:
        assert record.checked, f"{record.id}: a {record.kind} exercise has a key"
    if record.kind == "code":
        assert record.code is not None
    if record.kind == "predict":
        assert record.fields and not record.checked
    json.dumps(spec(record.id, **measured_for(record.id)))  # plain data for the page


@pytest.mark.parametrize("record", CHECKED, ids=ids)
def test_the_key_depends_only_on_the_statement_and_the_measurement(record):
    params = inspect.signature(record.key).parameters
    names = {
        n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    assert names == set(record.inputs) | set(record.measured), (
        f"{record.id}: the key reads {sorted(names)}, the statement gives "
        f"{sorted(record.inputs)} and the reader measures {sorted(record.measured)}"
    )


def keys_worked_in_tests() -> set[str]:
    """The ids a tests/test_keys_<chapter>.py test checks with
    ``assert_matches({"<id>": ...})``: a diagnosis's key worked by hand from
    the artifact its generator draws, inside the test that draws it."""
    import ast

    found = set()
    for path in sorted((ROOT / "tests").glob("test_keys_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "assert_matches"
                and node.args
                and isinstance(node.args[0], ast.Dict)
            ):
                found |= {
                    k.value for k in node.args[0].keys if isinstance(k, ast.Constant)
                }
    return found


def test_every_checked_exercise_has_an_independent_key():
    found = set(independent_values()) | keys_worked_in_tests()
    missing = [r.id for r in CHECKED if r.id not in found]
    assert not missing, (
        f"no independent key for {missing}: add it, worked out by hand or from a "
        "cited source, to tests/test_keys_<chapter>.py's INDEPENDENT (or check it "
        'there with assert_matches({"<id>": ...}) where the artifact is drawn)'
    )


# --- check() against the key ----------------------------------------------------------


@pytest.mark.parametrize("record", CHECKED, ids=ids)
def test_the_key_is_right(record, capsys):
    result = check(record.id, **key_answers(record))
    assert result.correct is True and bool(result)
    assert all(v.correct for v in result.verdicts)
    assert f"{record.id}: right." in capsys.readouterr().out


@pytest.mark.parametrize(("record", "answer"), numeric_answers("real"))
def test_five_tolerances_off_is_wrong_and_half_a_tolerance_is_right(record, answer):
    base = key_answers(record)
    name, key, tol = answer["name"], answer["key"], answer["rel_tol"]
    assert tol == record.tolerances[name]
    for factor in (1 + 5 * tol, 1 - 5 * tol):
        result = check(record.id, **{**base, name: key * factor})
        assert not result.correct and not result[name].correct
    for factor in (1 + tol / 2, 1 - tol / 2):
        assert check(record.id, **{**base, name: key * factor}).correct


def _three_figures(x: float) -> float:
    """``x`` rounded to three significant figures, as a reader writes it."""
    return round(x, 2 - math.floor(math.log10(abs(x))))


# Every real-valued key a reader computes from the statement alone: a
# measurement, a function and a prediction have no key of this kind.
STATED = [
    pytest.param(r, a, id=f"{r.id}:{a['name']}")
    for r in CHECKED
    if r.kind not in ("measure", "code", "predict") and not r.measured
    for a in answer_specs(r, ("real",))
]


def test_three_figures_rounds_as_a_reader_does():
    assert _three_figures(1 / 511) == 0.00196 and _three_figures(13.8896) == 13.9
    assert _three_figures(107.51) == 108 and _three_figures(-0.04567) == -0.0457


@pytest.mark.parametrize(("record", "answer"), STATED)
def test_a_right_answer_to_three_significant_figures_is_accepted(record, answer):
    """A reader who computes the key right and writes it to three significant
    figures is told it is right, and every named mistake is refused: a key
    whose mistakes sit closer than that rounding must ask for its answer
    another way (faults-4 asks for 1/delta*, not delta*)."""
    three = _three_figures(answer["key"])
    verdict = judge(answer, three)
    assert verdict.correct, (
        f"{record.id} {answer['name']}: {three} (the key {answer['key']!r} to three "
        f"figures) is refused: {verdict.hint}"
    )
    for m in answer["mistakes"]:
        assert not judge(answer, m["value"]).correct, (record.id, m["name"])


def test_every_stated_real_key_is_checked_at_three_figures():
    assert len(STATED) >= 68  # the count when this test was written


@pytest.mark.parametrize(("record", "answer"), numeric_answers("integer"))
def test_an_integer_is_exact(record, answer):
    base = key_answers(record)
    name, key = answer["name"], answer["key"]
    assert record.tolerances[name] == 0.0
    for wrong in (key - 1, key + 1):
        assert not check(record.id, **{**base, name: wrong}).correct
    assert check(record.id, **{**base, name: float(key)}).correct  # 8.0 is 8


@pytest.mark.parametrize("record", CHECKED, ids=ids)
def test_each_mistake_gets_its_hint(record, capsys):
    base = key_answers(record)
    data = spec(record.id, **measured_for(record.id))
    named = {m.name for m in record.mistakes}
    seen = set()
    for a in data["answers"]:
        for m in a["mistakes"]:
            capsys.readouterr()
            result = check(record.id, **{**base, a["name"]: m["value"]})
            verdict = result[a["name"]]
            assert not result.correct and verdict.mistake == m["name"], (a, m)
            assert m["hint"] in verdict.hint and m["hint"] in capsys.readouterr().out
            seen.add(m["name"])
    assert named <= seen, (
        f"{record.id}: named mistakes that equal the key here: {named - seen}"
    )


@pytest.mark.parametrize("record", CHECKED, ids=ids)
def test_the_tolerance_is_smaller_than_the_distance_to_every_mistake(record):
    """Within an answer, the key's region and every mistake's region (the
    same relative tolerance around it) are disjoint, so no right answer is
    named a mistake and every hint can be reached."""
    for a in answer_specs(record, ("real", "integer")):
        tol = a.get("rel_tol", 0.0)
        values = [a["key"]] + [m["value"] for m in a["mistakes"]]
        for i, x in enumerate(values):
            for y in values[i + 1 :]:
                if a["type"] == "integer":
                    assert x != y, (record.id, a["name"], x)
                else:
                    assert abs(x - y) > tol * (abs(x) + abs(y)), (
                        f"{record.id} {a['name']}: {x} and {y} are within the "
                        f"tolerance {tol}"
                    )


def test_the_hint_gives_the_direction_and_rough_size_not_the_answer(capsys):
    key = EXERCISES["cadence-1"].key_values()
    result = check("cadence-1", **{**key, "young_s": key["young_s"] * 1.2})
    assert result["young_s"].hint == "Too high by 10 to 50 %."
    result = check("cadence-1", **{**key, "young_s": key["young_s"] / 2})
    assert result["young_s"].hint == "Too low by a factor of 1.5 to 3."
    result = check("cadence-1", **{**key, "young_s": -key["young_s"]})
    assert "sign" in result["young_s"].hint
    hints = " ".join(v.hint for v in result.verdicts)
    assert f"{key['young_s']:.0f}" not in hints and f"{key['young_s']:.4g}" not in hints


@pytest.mark.parametrize(
    ("ex_id", "answer", "mistake"),
    [
        ("mfu-1", "mfu", "6N instead of 6N + 12Lhs"),
        ("mfu-1", "mfu", "a percentage where a fraction is asked"),
        ("cadence-1", "young_s", "minutes instead of seconds"),
        ("cadence-1", "daly_s", "Young's interval"),
        ("scaling-1", "n_dp", "gradients (or weights) sharded too"),
        ("recompute-1", "seq_len", "the core's share of the forward, not of the step"),
        ("plan-1", "memory_gib", "34 sbh for a SwiGLU model"),
        ("plan-2", "memory_gib", "34 sbh for a SwiGLU model"),
    ],
)
def test_the_issues_named_mistakes_are_named(ex_id, answer, mistake):
    """The mistakes the issue lists, where these exercises can make them."""
    data = spec(ex_id)
    (a,) = [a for a in data["answers"] if a["name"] == answer]
    assert mistake in {m["name"] for m in a["mistakes"]}


def test_a_gib_answer_names_gb():
    record = exercise(
        "plan-99",
        level=1,
        kind="compute",
        inputs={"n_bytes": 3 * 2**30},
        answers={"memory": Real("GiB", "memory", 0.01)},
        key=lambda n_bytes: {"memory": n_bytes / 2**30},
    )
    data = {"key": 3.0, "rel_tol": 0.01, "name": "memory", "type": "real"}
    from mlbook.judge._core import mistake_values

    data["mistakes"] = mistake_values(record, {"memory": 3.0})["memory"]
    verdict = judge(data, 3 * 2**30 / 1e9)
    assert verdict.mistake == "GB instead of GiB"


def test_a_choice_names_what_is_wrong(capsys):
    result = check("capstone-1", defects=["fused_adamw", "sdpa"])
    assert not result.correct
    assert "attention bucket" in result["defects"].hint
    result = check("capstone-1", defects=["fused_adamw"])
    assert result["defects"].hint.startswith("Pick 2, not 1.")
    assert check("capstone-1", defects={"no_recompute", "fused_adamw"}).correct
    assert check("capstone-1", defects=("no_recompute", "fused_adamw")).correct


def test_an_exercise_without_a_key_says_so(capsys):
    result = check("accumulation-1")
    assert result.correct is False and result.checked is False
    assert "no key" in capsys.readouterr().out


# --- a prediction next to what the run measured ---------------------------------------

PREDICTIONS = [r for r in RECORDS if r.kind == "predict"]
NINE = [p.stem for p in (ROOT / "notebooks").glob("*.md")]  # the chapters

# Made-up runs of each prediction and the reason each must get, chosen by
# hand from the conditions' meaning (not read back from the records): every
# reason of every prediction is reached once.
RUNS = {
    "accumulation-2": [
        ({"step_saved": -1.0, "allreduce_share": 0.05}, 0),  # no saving at all
        ({"step_saved": 3.0, "allreduce_share": 0.04}, 1),  # all-reduce 4 % of a step
        ({"step_saved": 40.0, "allreduce_share": 0.45}, 2),  # 45 %: latency-bound
    ],
    "cadence-2": [
        ({"async_vs_sync": 0.1}, 0),  # the copy is a tenth of the write
        ({"async_vs_sync": 0.9}, 1),  # the copy costs nearly the write
        ({"async_vs_sync": 1.3}, 2),  # async_save stalls longer than a write
    ],
    "capstone-2": [
        ({"mfu_first": 0.002, "mfu_final": 0.05, "final_matmul_share": 0.7}, 0),
        ({"mfu_first": 0.002, "mfu_final": 0.05, "final_matmul_share": 0.3}, 1),
    ],
    "faults-6": [
        ({"downtime_s": 4.0, "restart_s": 3.5, "resume_s": 0.5}, 0),  # starting again
        ({"downtime_s": 4.0, "restart_s": 1.0, "resume_s": 3.0}, 1),  # resuming
    ],
    "input_pipeline-6": [
        ({"wait_ratio": 0.02}, 0),  # formulas.WAIT_VERDICTS: hid most
        ({"wait_ratio": 0.7}, 1),  # hid some
        ({"wait_ratio": 1.1}, 2),  # hid none
    ],
    "mfu-2": [
        # 0.4 x 0.775 = 0.31: the peak's gap to the best matmul is the larger
        ({"mfu_nominal": 0.31, "ceiling_frac": 0.4, "step_vs_ceiling": 0.775}, 0),
        # 0.9 x 0.344 = 0.31: the step's gap to the best matmul is the larger
        ({"mfu_nominal": 0.31, "ceiling_frac": 0.9, "step_vs_ceiling": 0.344}, 1),
    ],
    "precision-2": [
        # fp16's flush threshold is 2^-25 = 2.98e-8 (half its smallest subnormal)
        ({"logits_zero": 0.0, "logits_median": 3e-7, "flush_threshold": 2**-25}, 0),
        ({"logits_zero": 0.6, "logits_median": 2e-8, "flush_threshold": 2**-25}, 1),
        ({"logits_zero": 0.02, "logits_median": 3e-7, "flush_threshold": 2**-25}, 2),
    ],
    "recompute-2": [
        # a third more FLOPs took 60 % more time; then 30 % for the same third
        (
            {
                "full_extra_time": 0.6,
                "selective_extra_time": 0.2,
                "full_extra_flops": 1 / 3,
            },
            0,
        ),
        (
            {
                "full_extra_time": 0.3,
                "selective_extra_time": 0.03,
                "full_extra_flops": 1 / 3,
            },
            1,
        ),
    ],
    "scaling-6": [
        ({"exposed_share": 300.0, "small_share": 40.0}, 0),  # 3 all-reduces' worth
        ({"exposed_share": 95.0, "small_share": 40.0}, 1),  # small buckets hid more
        ({"exposed_share": 95.0, "small_share": 120.0}, 2),  # small buckets did worse
        ({"exposed_share": 50.0, "small_share": 20.0}, 3),  # one bucket, half shown
    ],
}


@pytest.fixture
def new_kernel(monkeypatch):
    """check() and outcome() as in a fresh kernel: no run, no prediction."""
    from mlbook.judge import _check

    monkeypatch.setattr(_check, "_RUNS", {})
    monkeypatch.setattr(_check, "_SAID", {})


def test_every_chapter_asks_for_a_prediction_the_run_answers():
    assert len(PREDICTIONS) >= 9
    assert {r.chapter for r in PREDICTIONS} == set(NINE)
    assert sorted(RUNS) == sorted(r.id for r in PREDICTIONS)


@pytest.mark.parametrize("record", PREDICTIONS, ids=ids)
def test_each_reason_is_said_for_the_run_it_explains(record, new_kernel, capsys):
    reached = set()
    for run, expected in RUNS[record.id]:
        outcome(record.id, **run)
        said = {n: run[n] * 2 or 1.0 for n in record.fields}
        result = check(record.id, **said)
        out = capsys.readouterr().out
        assert result.checked and not result.correct
        assert result.why == f"Why: {record.reasons[expected].sentence}"
        assert result.why in out
        for name in record.fields:
            assert "this run measured" in result[name].hint
        reached.add(expected)
    assert reached == set(range(len(record.reasons))), "a reason no run reaches"


@pytest.mark.parametrize("record", PREDICTIONS, ids=ids)
def test_a_reason_reads_only_what_the_run_records(record):
    assert not record.checked and record.reasons and not record.reasons[-1].when
    names = set(record.run_names)
    assert set(record.fields) <= names
    for r in record.reasons:
        assert set(r.names) <= names and r.sentence.endswith(".")
        assert "{" not in r.sentence and len(r.sentence.split()) >= 8


def test_check_sets_the_prediction_beside_the_run_with_its_reason(new_kernel, capsys):
    """ "You said 10 %, this run measured 31 %, because ...": the words come
    from the run's values (31 % against 10 % is a factor of 3.1, in "3 to
    30"; the best matmul at 40 % of the peak and the step at 77.5 % of it is
    the machine's gap the larger)."""
    first = check("mfu-2", mfu_nominal=0.1)
    assert not first.checked and "noted" in capsys.readouterr().out
    outcome("mfu-2", mfu_nominal=0.31, ceiling_frac=0.4, step_vs_ceiling=0.775)
    result = check("mfu-2", mfu_nominal=0.1)
    out = capsys.readouterr().out
    assert result["mfu_nominal"].hint == (
        "You said 10 %; this run measured 31 %. Too low by a factor of 3 to 30."
    )
    assert out.splitlines()[0] == "mfu-2: your prediction next to this run."
    assert "the machine's, not the model's" in result.why and result.why in out
    assert check("mfu-2", mfu_nominal="30%").correct  # within a tenth of 31 %
    assert "Close." in capsys.readouterr().out
    outcome("mfu-2", mfu_nominal=0.31, ceiling_frac=0.9, step_vs_ceiling=0.344)
    assert "Most of the gap is the model's" in check("mfu-2", mfu_nominal=0.5).why
    far = check("mfu-2", mfu_nominal=50).verdicts[0].hint  # 5000 % against 31 %
    assert far.endswith("Too high by more than a factor of 30.")  # not "the unit"
    outcome("mfu-2", mfu_nominal=math.nan, ceiling_frac=math.nan, step_vs_ceiling=0.3)
    assert not check("mfu-2", mfu_nominal=0.1).checked  # an unknown peak: noted only


def test_the_run_is_recorded_in_the_kernel_and_shown_beside_the_prediction(
    new_kernel, capsys
):
    """In IPython (JupyterLab's kernel), the measuring cell's outcome(...)
    displays the run's values, beside the prediction once check() has one,
    and carries them for the HTML book's box."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from mlbook.exercises import MIME_TYPE

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from mlbook.exercises import check, outcome")
        shell.run_cell('check("cadence-2", async_vs_sync=0.5)')
        with capture_output() as shown:
            shell.run_cell('outcome("cadence-2", async_vs_sync=0.9)')
        (bundle,) = [o.data for o in shown.outputs]
        assert bundle["text/plain"].splitlines()[1] == (
            "  async_vs_sync: You said 50 %; this run measured 90 %. Too low by a "
            "factor of 1.5 to 3."
        )
        assert EXERCISES["cadence-2"].reasons[1].sentence in bundle["text/plain"]
        assert bundle[MIME_TYPE]["spec"]["run"] == {"async_vs_sync": 0.9}
        with capture_output() as again:
            shell.run_cell('check("cadence-2", async_vs_sync=0.85)')
        assert "Close." in again.stdout
    finally:
        InteractiveShell.clear_instance()  # later tests run outside IPython


def test_a_bad_run_is_refused():
    with pytest.raises(TypeError, match=r"the run's values are mfu_nominal"):
        outcome("mfu-2", mfu_nominal=0.3)
    with pytest.raises(TypeError, match=r"not a prediction"):
        outcome("mfu-1", mfu=0.3)
    with pytest.raises(ValueError, match=r"finite number"):
        outcome("cadence-2", async_vs_sync=math.inf)


# --- bad input: clear errors ----------------------------------------------------------


def test_an_unknown_id_is_an_error_that_names_it():
    for bad in ("mfu-99", "MFU-1", "", None, 1):
        with pytest.raises(KeyError) as err:
            check(bad, mfu=0.5)
        assert repr(bad) in str(err.value)
        assert isinstance(err.value, ValueError)
    with pytest.raises(UnknownExercise, match=r"did you mean .*mfu-1"):
        get("mfu-l")


def test_missing_and_unknown_answers_name_what_is_expected():
    with pytest.raises(TypeError, match=r"(?s)missing mfu_6n.*mfu_6n: MFU .*fraction"):
        check("mfu-1", mfu=0.56)
    with pytest.raises(TypeError, match=r"missing mfu_6n"):
        check("mfu-1", mfu=0.56, mfu6n=0.49)
    with pytest.raises(TypeError, match=r"no answer called mfu_6N"):
        check("mfu-1", mfu=0.56, mfu_6n=0.49, mfu_6N=0.49)
    with pytest.raises(TypeError, match=r"missing logit_grads, grads"):
        check("precision-1", lowest_log2=1, highest_log2=2, width=2)


@pytest.mark.parametrize("bad", [True, None, [0.56], {"v": 1}, 0.56j])
def test_a_wrong_type_is_an_error_that_says_what_is_expected(bad):
    with pytest.raises(TypeError, match=r"mfu-1: mfu .* is a number in fraction"):
        check("mfu-1", mfu=bad, mfu_6n=0.49)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_errors(bad):
    with pytest.raises(ValueError, match=r"must be a finite number in fraction"):
        check("mfu-1", mfu=bad, mfu_6n=0.49)


def test_numpy_scalars_are_numbers_and_a_fraction_of_a_token_is_not():
    import numpy as np

    key = EXERCISES["mfu-1"].key_values()
    assert check("mfu-1", mfu=np.float32(key["mfu"]), mfu_6n=np.float64(key["mfu_6n"]))
    with pytest.raises(ValueError, match=r"whole number of tokens"):
        check("recompute-1", seq_len=10532.57)
    with pytest.raises(ValueError, match=r"not among the options"):
        check("capstone-1", defects=["no_recompute", "recompute"])
    with pytest.raises(TypeError, match=r"set of option names"):
        check("capstone-1", defects=3)


def test_a_function_where_numbers_are_asked_and_the_reverse():
    with pytest.raises(TypeError, match=r"mfu-1 checks numbers, not a function"):
        check("mfu-1", lambda: 0.5)
    with pytest.raises(TypeError, match=r"either your function or your answers"):
        check("faults-1", lambda n, d, s: True, delta=0.07)
    with pytest.raises(TypeError, match=r"checks a function drop_beats_wait"):
        check("faults-1", 0.076)


def test_bad_records_are_refused():
    with pytest.raises(ValueError, match=r"<page stem>-<n>"):
        exercise("mfu_1", level=1, kind="compute")
    with pytest.raises(ValueError, match=r"level must be 1, 2 or 3"):
        exercise("mfu-9", level=4, kind="compute")
    with pytest.raises(ValueError, match=r"kind must be one of"):
        exercise("mfu-9", level=1, kind="quiz")
    with pytest.raises(ValueError, match=r"unit 'percent' is not one of"):
        Real("percent", "x", 0.01)
    with pytest.raises(ValueError, match=r"rel_tol must be"):
        Real("fraction", "x", 0.5)
    with pytest.raises(ValueError, match=r"a prediction has no key"):
        exercise(
            "mfu-9",
            level=1,
            kind="predict",
            answers={"x": Real("fraction", "x", 0.1)},
            key=lambda: {"x": 0.5},
        )
    with pytest.raises(ValueError, match=r"needs Reasons"):
        exercise("mfu-9", level=1, kind="predict", answers={"x": Real("s", "x", 0.1)})
    with pytest.raises(ValueError, match=r"the last reason has no condition"):
        exercise(
            "mfu-9",
            level=1,
            kind="predict",
            answers={"x": Real("s", "x", 0.1)},
            reasons=(Reason("A sentence.", when=(("x", ">", 1),)),),
        )
    with pytest.raises(ValueError, match=r"a reason's condition"):
        Reason("A sentence.", when=(("x", "=", 1),))
    with pytest.raises(ValueError, match=r"needs a key"):
        exercise("mfu-9", level=1, kind="compute", answers={"x": Integer("count", "x")})
    with pytest.raises(ValueError, match=r"unknown answer"):
        from mlbook.exercises import Mistake

        exercise(
            "mfu-9",
            level=1,
            kind="compute",
            answers={"x": Integer("count", "x")},
            key=lambda: {"x": 1},
            mistakes=(Mistake("y", "n", "h", lambda: 2),),
        )
    with pytest.raises(ValueError, match=r"registered twice"):
        from mlbook.exercises import register

        register(exercise("mfu-1", level=1, kind="measure"))
    with pytest.raises(ValueError, match=r"at least two options"):
        Choice("x", options={"a": "A"})


# --- change-the-code exercises --------------------------------------------------------


@pytest.mark.parametrize("record", CODE, ids=ids)
def test_the_reference_passes_and_the_known_wrong_functions_fail(record, capsys):
    code = record.code
    assert check(record.id, code.reference).correct
    assert len(code.mistakes) >= 2
    for wrong in code.mistakes:
        result = check(record.id, wrong.function)
        assert not result.correct
        assert result.verdicts[-1].mistake == wrong.name
        assert wrong.hint in capsys.readouterr().out


def test_faults_1_fails_a_function_that_hard_codes_the_printed_numbers():
    key = EXERCISES["faults-1"].key_values()
    hard_coded = [
        lambda n_ranks, delta, sigma: delta > key["delta"],  # the sigma = 5 % answer
        lambda n_ranks, delta, sigma: delta > (key["delta"] if sigma else 1 / 1023),
        lambda n_ranks, delta, sigma: delta > 0.076 if n_ranks == 1024 else delta > 0.1,
    ]
    for f in hard_coded:
        assert not check("faults-1", f).correct


def test_a_code_check_gives_the_same_verdict_every_time_and_leaves_no_folder(
    tmp_path, monkeypatch
):
    from mlbook.faults import formulas

    monkeypatch.chdir(tmp_path)

    def almost(n_ranks, delta, sigma):  # right except at a spread of 2 %
        drop = formulas.drop_beats_wait(n_ranks, delta, sigma)
        return (not drop) if sigma == 0.02 else drop

    first = check("faults-1", almost)
    second = check("faults-1", almost)
    assert not first.correct and first == second
    assert check("faults-1", formulas.drop_beats_wait).correct
    assert not (tmp_path / ".hypothesis").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_function_that_raises_is_named():
    result = check("faults-1", lambda n, d, s: 1 / 0)
    assert not result.correct and "ZeroDivisionError" in result.verdicts[0].hint


# --- the pages' exercises against the registry ----------------------------------------

FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}(?P<arg>.*)$")


def directives(page: Path):
    """(name, argument, options, body, line) of each directive in a MyST page."""
    lines = page.read_text().splitlines()
    i, out = 0, []
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence = i, m["fence"]
        i += 1
        options = {}
        while (
            i < len(lines)
            and lines[i].startswith(":")
            and not lines[i].startswith(fence)
        ):
            key, _, value = lines[i][1:].partition(":")
            options[key.strip()] = value.strip()
            i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        out.append((m["name"], m["arg"].strip(), options, "\n".join(body), start + 1))
        i += 1
    return out


def page_exercises() -> dict:
    """label -> (page stem, title, statement, line) of every {exercise}."""
    found = {}
    for stem, page in PAGES.items():
        for name, arg, options, body, line in directives(page):
            if name == "exercise":
                label = options.get("label", f"<no label, line {line}>")
                assert label not in found, f"{label} is on two pages"
                found[label] = (stem, arg, body, line)
    return found


EXERCISES_ON_PAGES = page_exercises()


def test_every_exercise_on_a_page_has_a_record_and_every_record_a_page():
    no_record = sorted(set(EXERCISES_ON_PAGES) - set(EXERCISES))
    no_page = sorted(set(EXERCISES) - set(EXERCISES_ON_PAGES))
    assert not no_record, (
        f"exercises without a record in mlbook.exercises: {no_record} (label an "
        "exercise with its id and add its record, docs/exercises.md)"
    )
    assert not no_page, f"records without an {{exercise}} on their page: {no_page}"
    for label, (stem, *_rest) in EXERCISES_ON_PAGES.items():
        assert EXERCISES[label].chapter == stem, f"{label} is on {stem}.md"


@pytest.mark.parametrize("record", RECORDS, ids=ids)
def test_the_title_shows_the_level_and_the_id(record):
    _, title, _, _ = EXERCISES_ON_PAGES[record.id]
    assert title == f"{record.stars} {record.id}", (
        f"{record.id}: write ```{{exercise}} {record.stars} {record.id}"
    )


def test_no_exercise_is_numbered():
    """The id in the title is the exercise's number. sphinx-exercise numbers
    exercises in page order and jupyterlab-myst a third way, so "Exercise
    1.1" was mfu-2 while check() takes the id: every exercise is
    ``:nonumber:``, in the book and in JupyterLab alike."""
    numbered = [
        f"{stem}.md:{line}"
        for stem, page in PAGES.items()
        for name, _arg, options, _body, line in directives(page)
        if name == "exercise" and "nonumber" not in options
    ]
    assert not numbered, f"exercises without :nonumber: {numbered}"


WORDS = {0.25: "quarter", 0.5: "half", 2: "two", 3: "three", 4: "four"}
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@pytest.mark.parametrize("record", RECORDS, ids=ids)
def test_the_statement_gives_every_input_the_key_reads(record):
    _, _, body, _ = EXERCISES_ON_PAGES[record.id]
    text = body.replace("\\", "")
    numbers = {float(n.replace(",", "")) for n in NUMBER.findall(text)}
    for name, value in record.inputs.items():
        if isinstance(value, str):
            assert value.lower() in text.lower(), (record.id, name, value)
            continue
        found = (
            any(math.isclose(value, n) or math.isclose(value * 100, n) for n in numbers)
            or WORDS.get(value, "\0") in text
        )
        assert found, f"{record.id}: the statement does not give {name} = {value!r}"


@functools.cache  # read by a test per exercise (80): each page parsed once
def page_cells(page: Path) -> list:
    """A page's cells as jupytext reads them (not to be changed)."""
    return jupytext.read(page).cells


@functools.cache
def solutions(page: Path) -> dict:
    """label -> the code cells between its solution-start and solution-end."""
    cells = page_cells(page)
    out, current = {}, None
    for cell in cells:
        if cell.cell_type == "markdown":
            m = re.search(r"```\{solution-start\}\s+(\S+)", cell.source)
            if m:
                current = m[1]
                out.setdefault(current, [])
            if "{solution-end}" in cell.source:
                current = None
        elif current is not None:
            out[current].append(cell)
    return out


@pytest.mark.parametrize("record", RECORDS, ids=ids)
def test_a_checked_exercise_has_an_executed_solution(record):
    sols = solutions(PAGES[record.chapter])
    if record.kind == "predict":
        return
    assert record.id in sols and sols[record.id], (
        f"{record.id}: no solution cell between ```{{solution-start}} {record.id} "
        "and ```{solution-end}"
    )
    if record.measured:
        assert any(f'answer_key("{record.id}"' in c.source for c in sols[record.id]), (
            f"{record.id} is checked against this run's measurement: its solution "
            f'cell must show answer_key("{record.id}", ...) for the page\'s boxes'
        )


@pytest.mark.parametrize("record", [r for r in RECORDS if r.kind == "predict"], ids=ids)
def test_a_prediction_sits_just_before_the_result_it_predicts(record):
    cells = page_cells(PAGES[record.chapter])
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown"
        and re.search(rf":label:\s*{re.escape(record.id)}\s*$", c.source, re.M)
    )
    following = next(c for c in cells[at + 1 :] if c.cell_type == "code")
    assert "after-prediction" in following.metadata.get("tags", []), (
        f"{record.id}: tag the measurement's cell after the prediction "
        "`:tags: [after-prediction]` (the HTML folds it until the reader predicts)"
    )
    folded = []
    for c in cells[at + 1 :]:
        if c.cell_type == "markdown" and "{exercise}" in c.source:
            break
        if "after-prediction" in c.metadata.get("tags", []):
            folded.append(c)
    recorded = [c for c in folded if f'outcome(\n    "{record.id}"' in c.source]
    recorded += [c for c in folded if f'outcome("{record.id}"' in c.source]
    assert len(recorded) == 1 and not HIDING & set(recorded[0].metadata["tags"]), (
        f"{record.id}: the measuring cell records the run for the prediction, "
        f'outcome("{record.id}", ...), in one after-prediction cell the HTML keeps'
    )


# --- diagnosis exercises --------------------------------------------------------------

DIAGNOSES = [r for r in RECORDS if r.kind == "diagnose"]
HIDING = {"hide-input", "remove-input", "remove-cell"}


def diagnosis_problems(record) -> list[str]:
    """What a diagnosis record lacks: a key, a named Mistake (a choice's
    per-option hints alone are not one), a Choice among named causes and a
    number (what to do, what it buys)."""
    problems = []
    if not record.checked:
        problems.append("no key")
    if not record.mistakes:
        problems.append("no named Mistake (a choice's option hints are not one)")
    kinds = [type(f) for f in record.fields.values()]
    if Choice not in kinds:
        problems.append("no Choice among named causes")
    if Real not in kinds and Integer not in kinds:
        problems.append("no number (what to do, what it buys)")
    return problems


def test_a_diagnosis_record_is_told_apart_from_a_drill():
    cause = Choice("the cause", {"slow_rank": "a slow rank", "network": "the network"})
    good = exercise(
        "faults-99",
        level=2,
        kind="diagnose",
        inputs={"step_s": 1.2},
        answers={"cause": cause, "saved_s": Real("s", "the time saved", 0.02)},
        key=lambda step_s: {"cause": "slow_rank", "saved_s": step_s - 1.0},
        mistakes=(
            Mistake("saved_s", "the step itself", "subtract.", lambda step_s: step_s),
        ),
    )
    assert diagnosis_problems(good) == []
    only_hints = exercise(
        "faults-98",
        level=2,
        kind="diagnose",
        inputs={},
        answers={"cause": Choice("the cause", cause.options, {"network": "no."})},
        key=lambda: {"cause": "slow_rank"},
    )
    assert diagnosis_problems(only_hints) == [
        "no named Mistake (a choice's option hints are not one)",
        "no number (what to do, what it buys)",
    ]


@pytest.mark.parametrize("record", DIAGNOSES, ids=ids)
def test_a_diagnosis_asks_for_the_cause_and_a_number_with_a_named_mistake(record):
    assert diagnosis_problems(record) == [], record.id


@pytest.mark.parametrize("record", DIAGNOSES, ids=ids)
def test_a_diagnosis_shows_its_artifact_just_before_the_exercise(record):
    """The cell right before the {exercise} draws or tables the artifact,
    visibly, with no glue or formats in it, and no heading between."""
    cells = page_cells(PAGES[record.chapter])
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown"
        and re.search(rf":label:\s*{re.escape(record.id)}\s*$", c.source, re.M)
    )
    before = cells[at].source.split("```{exercise}")[0]
    i = at - 1
    while i >= 0 and cells[i].cell_type != "code":
        before = cells[i].source + before
        i -= 1
    assert i >= 0, f"{record.id}: no cell before it"
    cell = cells[i]
    assert not HIDING & set(cell.metadata.get("tags", [])), (
        f"{record.id}: the artifact's cell shows its code (no hide-input)"
    )
    assert "glue" not in cell.source and "formats=" not in cell.source, (
        f"{record.id}: no glue or formats in the artifact's cell"
    )
    assert not re.search(r"^#", before, re.M), f"{record.id}: a heading between"
    assert "{exercise}" not in before and "{solution" not in before


def test_every_chapter_has_two_diagnoses_and_the_book_eighteen():
    """Issue 48: two or more on each of the nine chapter pages, 18 or more in
    all (those on the plan page count extra)."""
    per_chapter = {c: sum(r.chapter == c for r in DIAGNOSES) for c in NINE}
    short = {c: n for c, n in per_chapter.items() if n < 2}
    assert not short, f"chapters with fewer than two diagnosis exercises: {short}"
    assert len(DIAGNOSES) >= 18


def test_input_pipeline_5_statement_and_solution_take_the_same_sleeps():
    """The statement says how many sleeps experiments.sleep_s averages; the
    solution must average that many (it once passed repeats=20 against the
    statement's 50)."""
    from mlbook.input_pipeline import experiments

    default = inspect.signature(experiments.sleep_s).parameters["repeats"].default
    _, _, body, _ = EXERCISES_ON_PAGES["input_pipeline-5"]
    (stated,) = re.findall(r"takes the mean of (\d+) sleeps", " ".join(body.split()))
    calls = [
        call
        for cell in solutions(PAGES["input_pipeline"])["input_pipeline-5"]
        for call in re.findall(r"sleep_s\(([^()]*(?:\([^()]*\)[^()]*)*)\)", cell.source)
    ]
    assert calls, "the solution calls experiments.sleep_s"
    for call in calls:
        given = re.search(r"repeats=(\d+)", call)
        assert int(given[1] if given else default) == int(stated), call


def test_the_interview_questions_link_to_the_exercises_that_drill_them():
    text = (ROOT / "book" / "interview.md").read_text()
    linked = re.findall(r"\{ref\}`([a-z_]+-\d+)`", text)
    assert len(set(linked)) >= 5
    assert set(linked) <= set(EXERCISES), set(linked) - set(EXERCISES)
