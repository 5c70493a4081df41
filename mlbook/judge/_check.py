"""``check``: the reader's answers (or function) against an exercise's key.

``check`` is the one place in the package that prints (a reader in
JupyterLab wants the hint on the screen), and returns a ``Result``. A
prediction is answered by the run: the cell that measures it calls
``outcome(exercise_id, **values)``, and ``check`` sets the prediction beside
those values, with the record's reason for them.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass
from numbers import Integral
from numbers import Real as RealNumber

from mlbook.judge._core import (
    MESSAGES,
    CheckTypeError,
    CheckValueError,
    Choice,
    Exercise,
    Integer,
    Verdict,
    close_matches,
    compare,
    get,
    judge,
    read_number,
    reason,
    shown,
    spec,
)
from mlbook.judge._page import MIME_TYPE

_RUNS: dict[str, dict] = {}  # a prediction's id -> what this kernel's run measured
_SAID: dict[str, dict] = {}  # a prediction's id -> what the reader said


@dataclass(frozen=True)
class Result:
    """What ``check`` found: ``correct`` only when every answer is right;
    ``checked`` False where there is no key to check against (a prediction,
    an exercise on the reader's own machine, a call with no answers). In
    IPython a cell ending in ``check(...)`` shows the report once; the result
    shown in a later cell prints it again."""

    exercise_id: str
    verdicts: tuple[Verdict, ...]
    correct: bool
    checked: bool = True
    why: str = ""  # a prediction's: why the run came out as it did

    def __bool__(self) -> bool:
        return self.correct

    def __getitem__(self, name: str) -> Verdict:
        for v in self.verdicts:
            if v.name == name:
                return v
        raise KeyError(f"{self.exercise_id} has no answer {name!r}")

    def report(self) -> str:
        """The lines ``check`` prints."""
        if not self.checked:
            return self.verdicts[0].hint if self.verdicts else ""
        if self.why:
            lines = [f"{self.exercise_id}: your prediction next to this run."]
            lines += [f"  {v.name}: {v.hint}" for v in self.verdicts]
            return "\n".join([*lines, f"  {self.why}"])
        right = sum(v.correct for v in self.verdicts)
        of = "" if self.correct else f" {right} of {len(self.verdicts)}"
        lines = [f"{self.exercise_id}:{of} right."]
        for v in self.verdicts:
            mark = "✓" if v.correct else "✗"
            value = "" if v.value is None else f" = {_show(v.value)}"
            lines.append(f"  {mark} {v.name}{value}: {v.hint}")
        return "\n".join(lines)

    def _ipython_display_(self) -> None:
        if getattr(self, "_printed_in", None) != _cell():
            print(self.report())

    def __repr__(self) -> str:
        state = "right" if self.correct else "wrong" if self.checked else "not checked"
        return f"<check {self.exercise_id}: {state}>"


def _cell() -> int | None:
    """The IPython cell running now (its execution count), or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.execution_count


def _show(value) -> str:
    if isinstance(value, list):
        return "{" + ", ".join(value) + "}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value) if not isinstance(value, int) else f"{value}"


def check(exercise_id, function=None, /, **answers) -> Result:
    """Check answers to an exercise and print a hint for each wrong one.

    ``check("mfu-1", mfu=0.56, mfu_6n=0.49)`` checks numbers;
    ``check("faults-1", drop_beats_wait)`` checks a function you wrote
    (change-the-code exercises). An exercise on your own measurement takes
    the measured inputs too (its statement names them). ``check("mfu-1")``
    with nothing prints what it expects. Returns a ``Result``; ``.correct``
    is True only when every answer is right.
    """
    ex = get(exercise_id)
    if function is not None:
        result = _check_function(ex, function, answers)
    elif ex.kind == "predict" and ex.fields:
        _SAID[ex.id] = _read_answers(ex, answers)
        result = _next_to_run(ex) if ex.id in _RUNS else _not_run(ex)
    elif not ex.checked:
        result = _not_checked(ex)
    elif not answers:
        result = _what_it_takes(ex)
    else:
        result = _check_answers(ex, answers)
    print(result.report())
    object.__setattr__(result, "_printed_in", _cell())
    return result


def _note(ex: Exercise, text: str) -> Result:
    """A result that checked nothing and says ``text``."""
    return Result(ex.id, (Verdict("", None, False, text),), False, checked=False)


def _what_it_takes(ex: Exercise) -> Result:
    """``check(id)`` with nothing: what the exercise takes, and the call."""
    if ex.code is not None and not ex.fields:
        return _note(ex, f"{ex.id} checks a function: {ex.usage()}")
    return _note(ex, _expected(ex))


def outcome(exercise_id, /, **values) -> None:
    """Record what this run measured for a prediction (the cell that
    measures it calls this), so that ``check`` sets a prediction beside it,
    and display it (beside the prediction once ``check`` has one). The HTML
    book reads the values from this output, of its own mime type, for the
    page's box. A NaN (an unknown peak) leaves nothing to compare with."""
    ex = get(exercise_id)
    if ex.kind != "predict":
        raise CheckTypeError(f"{ex.id} is a {ex.kind} exercise, not a prediction")
    nan = [n for n, v in values.items() if isinstance(v, float) and math.isnan(v)]
    data = spec(ex.id, **({} if nan else values))
    if nan:
        _RUNS.pop(ex.id, None)
        text = f"{ex.id}: this run measured no {', '.join(nan)}."
    elif ex.id in _SAID:
        _RUNS[ex.id] = data["run"]
        text = _next_to_run(ex).report()
    else:
        _RUNS[ex.id] = data["run"]
        units = {a["name"]: a["unit"] for a in data["answers"]}
        run = (f"{n} = {shown(v, units.get(n, ''))}" for n, v in data["run"].items())
        text = f"{ex.id}, this run: {', '.join(run)}"
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        from IPython.display import display

        bundle = {"text/plain": text, MIME_TYPE: {"spec": data, "html": ""}}
        display(bundle, raw=True)


def _next_to_run(ex: Exercise) -> Result:
    data = spec(ex.id, **_RUNS[ex.id])
    run, said = data["run"], _SAID[ex.id]
    verdicts = tuple(
        compare(a, said[a["name"]], run, data["messages"], data["sizes"])
        for a in data["answers"]
    )
    why = MESSAGES["because"].format(why=reason(data["reasons"], run))
    return Result(ex.id, verdicts, all(v.correct for v in verdicts), why=why)


def _not_run(ex: Exercise) -> Result:
    return _note(ex, MESSAGES["not_run"].format(id=ex.id))


def _not_checked(ex: Exercise) -> Result:
    if ex.code is not None:
        return _note(ex, f"{ex.id} checks a function: {ex.usage()}")
    return _note(
        ex,
        f"{ex.id} is a {ex.kind} exercise on your own machine: there is no key "
        "to check. Compare your explanation with the solution.",
    )


def _in_unit(f) -> str:
    """How an answer is written: its unit, with an example where it helps."""
    if isinstance(f, Choice):
        return "option names out of " + ", ".join(repr(o) for o in f.options)
    if f.unit == "fraction":
        return 'a fraction (0.25, or "25%")'
    if f.unit == "%":
        return "a percentage (25 for 25 %)"
    return f"a whole number of {f.unit}" if isinstance(f, Integer) else f"in {f.unit}"


def _expected(ex: Exercise) -> str:
    """What ``ex`` takes, a line per answer, and the call that gives it."""
    lines = [f"{ex.id} takes:"]
    lines += [f"  {n}: {f.label}, {_in_unit(f)}" for n, f in ex.fields.items()]
    lines += [f"  {n}: your measurement" for n in ex.measured]
    return "\n".join([*lines, f"Call {ex.usage()}"])


def _read_answers(ex: Exercise, answers: dict) -> dict:
    """The reader's answers (and measured inputs) by name, each read as
    ``_value`` reads it, or an error that names what is missing or unknown."""
    names = (*ex.measured, *ex.fields)
    unknown = [n for n in answers if n not in names]
    missing = [n for n in names if n not in answers]
    if unknown or missing:
        problem = []
        if missing:
            problem.append(f"missing {', '.join(missing)}")
        for n in unknown:
            close = close_matches(n, [m for m in names if m not in answers] or names)
            problem.append(
                f"no answer called {n}"
                + (f" (did you mean {' or '.join(close)}?)" if close else "")
            )
        raise CheckTypeError(f"{'; '.join(problem)}.\n{_expected(ex)}")
    return {n: _value(ex, n, answers[n]) for n in ex.fields}


def _check_answers(ex: Exercise, answers: dict) -> Result:
    values = _read_answers(ex, answers)
    data = spec(ex.id, **{n: answers[n] for n in ex.measured})
    verdicts = tuple(
        judge(a, values[a["name"]], data["messages"], data["sizes"])
        for a in data["answers"]
    )
    return Result(ex.id, verdicts, all(v.correct for v in verdicts))


def _value(ex: Exercise, name: str, value):
    """The reader's answer as a float, int or list of option names, or a
    clear error that says what was expected. Text is read as the answer box
    reads it ("55.9%" is 0.559 where a fraction is asked)."""
    f = ex.fields[name]
    where = f"{ex.id}: {name} ({f.label})"
    if isinstance(f, Choice):
        options = ", ".join(repr(o) for o in f.options)
        try:
            picked = [value] if isinstance(value, str) else list(value)
        except TypeError:
            raise CheckTypeError(
                f"{where} is a set of option names out of {options}, got {value!r}"
            ) from None
        bad = [p for p in picked if not isinstance(p, str) or p not in f.options]
        if bad:
            raise CheckValueError(
                f"{where}: {bad!r} are not among the options {options}"
            )
        return picked
    if isinstance(value, str):
        try:
            value = read_number(value, f.unit)
        except ValueError as exc:
            raise CheckValueError(f"{where}, got {value!r}: {exc}") from None
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()  # a NumPy or torch scalar
    if isinstance(value, bool) or not isinstance(value, RealNumber):
        raise CheckTypeError(
            f"{where} is a number in {f.unit}, got {type(value).__name__} {value!r}"
        )
    value = int(value) if isinstance(value, Integral) else float(value)
    if not math.isfinite(value):
        raise CheckValueError(
            f"{where} must be a finite number in {f.unit}, got {value!r}"
        )
    if isinstance(f, Integer) and not float(value).is_integer():
        raise CheckValueError(
            f"{where} is a whole number of {f.unit}, got {value!r}: which whole "
            "number does the question ask for?"
        )
    return int(value) if isinstance(f, Integer) else float(value)


# --- change-the-code exercises -------------------------------------------------------


def _call(function, args):
    try:
        return True, function(*args)
    except Exception as exc:  # noqa: BLE001 (the reader's code may raise anything)
        return False, f"{type(exc).__name__}: {exc}"


def _same(code, expected, got) -> bool:
    if code.same is None:
        return expected == got
    try:
        return bool(code.same(expected, got))
    except Exception:  # noqa: BLE001 (a result of the wrong type is a wrong result)
        return False


def _call_text(code, args) -> str:
    inside = ", ".join(f"{p}={a!r}" for p, a in zip(code.params, args, strict=True))
    return f"{code.name}({inside})"


def _failure(code, function, args) -> Verdict | None:
    """None when ``function`` agrees with the reference at ``args``, else the
    verdict, naming a known wrong function that gives the same answer."""
    expected = code.reference(*args)
    ok, got = _call(function, args)
    if ok and _same(code, expected, got):
        return None
    where = _call_text(code, args)
    if not ok:
        return Verdict(code.name, None, False, f"{where} raised {got}")
    wrong = _matching_mistake(code, function, args, got)
    if wrong is not None:
        hint = f"{where} returned {got!r}. Looks like {wrong.name}: {wrong.hint}"
        return Verdict(code.name, None, False, hint, wrong.name)
    hint = f"{where} returned {got!r}; the reference returns {expected!r}."
    return Verdict(code.name, None, False, hint)


def _matching_mistake(code, function, args, got):
    """The known wrong function that gives ``got`` at ``args`` too, preferring
    one that agrees with ``function`` on every known case as well."""
    agree = []
    for w in code.mistakes:
        ok, theirs = _call(w.function, args)
        if ok and _same(code, theirs, got):
            agree.append(w)

    def everywhere(w):
        calls = ((_call(function, c), _call(w.function, c)) for c in code.cases)
        return all(m[0] and t[0] and _same(code, t[1], m[1]) for m, t in calls)

    best = [w for w in agree if everywhere(w)]
    return (best or agree or [None])[0]


def _check_function(ex: Exercise, function, answers: dict) -> Result:
    code = ex.code
    if code is None:
        raise CheckTypeError(f"{ex.id} checks numbers, not a function. {_expected(ex)}")
    if answers:
        raise CheckTypeError(
            f"{ex.id}: pass either your function or your answers, not both: "
            f'check("{ex.id}", {code.name}) or {ex.usage()}'
        )
    if not callable(function):
        raise CheckTypeError(
            f"{ex.id} checks a function {code.name}({', '.join(code.params)}), "
            f"got {type(function).__name__} {function!r}"
        )
    for args in code.cases:
        failed = _failure(code, function, args)
        if failed is not None:
            return Result(ex.id, (failed,), False)
    known = Verdict("cases", None, True, f"the {len(code.cases)} known cases pass.")
    failed = _property_failure(code, function)
    if failed is not None:
        return Result(ex.id, (known, failed), False)
    n = code.max_examples
    props = f"agrees with the reference on {n} generated cases."
    return Result(ex.id, (known, Verdict("properties", None, True, props)), True)


def _property_failure(code, function) -> Verdict | None:
    """The verdict at the smallest failing case hypothesis finds over
    ``code.arguments``: derandomized, no database, no deadline, so the same
    function gets the same verdict every time and no .hypothesis/ appears."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import strategies as st

    failures: list[Verdict] = []

    @settings(
        max_examples=code.max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        print_blob=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
    )
    @given(code.arguments(st))
    def agrees(args):
        failed = _failure(code, function, tuple(args))
        if failed is not None:
            failures.append(failed)
            raise AssertionError(failed.hint)

    with _quiet_hypothesis_home(), contextlib.redirect_stdout(io.StringIO()):
        try:
            agrees()
        except Exception:  # a failure, or hypothesis's Flaky for a random function
            if not failures:
                raise
    return failures[-1] if failures else None


@contextlib.contextmanager
def _quiet_hypothesis_home():
    """Hypothesis caches constants under ./.hypothesis even without a
    database: point it at a temporary folder for the check."""
    import tempfile

    from hypothesis import configuration

    before = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="mlbook-check-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)
