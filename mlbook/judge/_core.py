"""Exercise records, their answer keys, and the verdict on a reader's answer.

A record (``Exercise``) names each answer's unit and tolerance (``Real``,
``Integer``, ``Choice``), the statement's inputs, a ``key`` computing the
answers from them with the package's calculators, and named ``Mistake``s.
``spec(exercise_id)`` is a record as plain data and ``judge(answer, value)``
the whole verdict logic on that data: book/_extra/vendor/exercises.js runs
the same logic on the same data in the HTML book, so the page and ``check()``
cannot disagree (tests/test_exercises_js.py feeds both the same answers).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from types import MappingProxyType

from mlbook.common.validate import COMMA_DECIMAL, number_text

# diagnose: an artifact (a profile, a log, a curve) from a seeded generator or
# the run, and what is wrong, what to do, what it buys; checked as compute is
KINDS = ("compute", "derive", "code", "measure", "predict", "diagnose")
STARS = {1: "★", 2: "★★", 3: "★★★"}  # minutes, an hour, an afternoon
ID_PATTERN = re.compile(r"^(?P<chapter>[a-z][a-z_]*)-(?P<n>[1-9][0-9]*)$")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")

# The units an answer may have. A unit with entries here also gets the generic
# mistakes of its kind: the key times the factor, with the hint (a percentage
# typed where a fraction is asked, GB for GiB, minutes for seconds...).
UNIT_MISTAKES: dict[str, tuple[tuple[float, str, str], ...]] = {
    "fraction": (
        (
            100.0,
            "a percentage where a fraction is asked",
            "give a fraction (0.25 for 25 %).",
        ),
    ),
    "%": (
        (
            0.01,
            "a fraction where a percentage is asked",
            "give a percentage (25 for 0.25).",
        ),
    ),
    "s": (
        (1 / 60, "minutes instead of seconds", "give it in seconds."),
        (1 / 3600, "hours instead of seconds", "give it in seconds."),
        (1000.0, "milliseconds instead of seconds", "give it in seconds."),
    ),
    "ms": ((1e-3, "seconds instead of milliseconds", "give it in milliseconds."),),
    "min": (
        (60.0, "seconds instead of minutes", "give it in minutes."),
        (1 / 60, "hours instead of minutes", "give it in minutes."),
    ),
    "h": (
        (60.0, "minutes instead of hours", "give it in hours."),
        (3600.0, "seconds instead of hours", "give it in hours."),
    ),
    "days": ((24.0, "hours instead of days", "give it in days."),),
    "GiB": (
        (
            2**30 / 1e9,
            "GB instead of GiB",
            "a GiB is 2^30 bytes, 7 % more than a GB (10^9 bytes).",
        ),
        (1024.0, "MiB instead of GiB", "give it in GiB."),
    ),
    "GB": (
        (
            1e9 / 2**30,
            "GiB instead of GB",
            "a GB is 10^9 bytes, 7 % less than a GiB (2^30 bytes).",
        ),
    ),
}
# the other units (log2: an exponent, the k of a scale 2^k)
UNITS = frozenset(UNIT_MISTAKES) | frozenset(
    "bytes,tokens,tokens/s,FLOPs,FLOP/s,GPUs,ranks,micro-batches,workers,steps,"
    "layers,log2,powers of two,count,choice".split(",")
)

# The sentences a verdict is made of, and the rough size of an error. The JS
# reads them from the page, so both say the same thing.
MESSAGES = {
    "correct": "Right.",
    "mistake": "Looks like {name}: {hint}",
    "high": "Too high{size}.",
    "low": "Too low{size}.",
    "sign": "The sign is wrong (or it is zero).",
    "choice_count": "Pick {n}, not {m}.",
    "choice_wrong": "{label}: not one of them.",
    "choice_missing": "{n} still to find.",
    "rounding": "Right to {n} significant {figures}: give 3.",
    # a typed answer that cannot be read (read_number)
    "empty": "Enter a number in {unit}.",
    "not_a_number": "Enter a number (digits, a point, an optional exponent).",
    "percent_here": "Enter a number in {unit}: a percentage (%) is for a fraction.",
    "whole": "Enter a whole number of {unit}.",
    "comma": COMMA_DECIMAL,  # a decimal comma (0,49), as everywhere a number is typed
    # a prediction next to what the run measured (compare, reason)
    "predicted": "You said {said}; this run measured {measured}. {how}",
    "close": "Close.",
    "because": "Why: {why}",
    "not_run": "{id}: noted. Run the cells below it, then check again.",
}
ROUNDINGS = (1, 2)  # significant figures told apart from a wrong answer
SIZES = (  # (ratio of the larger to the smaller at most, phrase)
    (1.1, " by less than 10 %"),
    (1.5, " by 10 to 50 %"),
    (3.0, " by a factor of 1.5 to 3"),
    (30.0, " by a factor of 3 to 30"),
    (None, " by more than a factor of 30: check the unit and the powers of ten"),
)
# a prediction far off is a guess, not a slip of the unit
PREDICTION_SIZES = (*SIZES[:-1], (None, " by more than a factor of 30"))
MAX_REL_TOL = 0.1  # a looser tolerance would not tell a right answer from a guess


def _check_unit(unit: str, answer: str) -> None:
    """A number's unit (``answer`` names its kind): a known one, not "choice"."""
    if unit not in UNITS:
        raise ValueError(
            f"unit {unit!r} is not one of the known units {sorted(UNITS)}; add it to "
            "mlbook/judge/_core.py UNITS (with its unit mistakes if it has any)"
        )
    if unit == "choice":
        raise ValueError(f"{answer} answer cannot have the unit 'choice'")


@dataclass(frozen=True)
class Real:
    """A real-valued answer, right within a relative tolerance ``rel_tol``."""

    unit: str
    label: str  # what the answer box asks for: "MFU with the attention term"
    rel_tol: float

    def __post_init__(self):
        _check_unit(self.unit, "a Real")
        if not (
            isinstance(self.rel_tol, float | int) and 0 < self.rel_tol <= MAX_REL_TOL
        ):
            raise ValueError(
                f"rel_tol must be a number in (0, {MAX_REL_TOL}], got {self.rel_tol!r}"
            )


@dataclass(frozen=True)
class Integer:
    """A whole-number answer: right only when exact."""

    unit: str
    label: str

    def __post_init__(self):
        _check_unit(self.unit, "an Integer")


@dataclass(frozen=True)
class Choice:
    """Some of a list of options (``options``: name -> label, in the order
    shown). ``hints`` says, for an option picked wrongly, what to look at."""

    label: str
    options: Mapping[str, str]
    hints: Mapping[str, str] = field(default_factory=dict)
    unit: str = "choice"

    def __post_init__(self):
        if self.unit != "choice":
            raise ValueError(f"a Choice's unit is 'choice', got {self.unit!r}")
        if len(self.options) < 2:
            raise ValueError("a Choice needs at least two options")
        for name in self.options:
            _check_name("option", name)
        unknown = set(self.hints) - set(self.options)
        if unknown:
            raise ValueError(f"hints for options that do not exist: {sorted(unknown)}")


Answer = Real | Integer | Choice


@dataclass(frozen=True)
class Mistake:
    """A wrong way to compute ``answer``: ``value(**inputs)`` computes it (with
    the package's functions, the way the mistake would; None where this way
    gives no answer), ``name`` says what it is ("6N instead of 6N + 12Lhs")
    and ``hint`` what to do about it, without giving the answer away."""

    answer: str
    name: str
    hint: str
    value: Callable


@dataclass(frozen=True)
class Code:
    """A change-the-code exercise: the reader writes ``name(*params)``, called
    on every ``cases`` tuple and on ``max_examples`` tuples from
    ``arguments(st)`` (st: hypothesis's strategies) and compared with
    ``reference`` by ``same(expected, got)``; ``mistakes`` are plausible
    wrong functions whose hint is named where the reader's agrees with one."""

    name: str
    params: tuple[str, ...]
    reference: Callable
    cases: tuple[tuple, ...]
    arguments: Callable
    same: Callable = None  # (expected, got) -> bool; None: ==
    mistakes: tuple[WrongFunction, ...] = ()
    max_examples: int = 40

    def __post_init__(self):
        if not self.cases:
            raise ValueError(f"{self.name}: a code exercise needs known cases")
        for case in self.cases:
            if len(case) != len(self.params):
                raise ValueError(
                    f"{self.name}: case {case!r} does not match params {self.params}"
                )


@dataclass(frozen=True)
class WrongFunction:
    """A plausible wrong implementation of a code exercise, and its hint."""

    name: str
    hint: str
    function: Callable


OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@dataclass(frozen=True)
class Reason:
    """Why a run came out as it did, said beside a prediction: ``sentence``
    when every condition of ``when`` holds on the run's values. A condition
    is ``(name, op, other)``: a run value's name, one of < <= > >=, and a
    number or another value's name ("which bucket was largest"). The first
    reason that holds is said, so the last has no condition."""

    sentence: str
    when: tuple[tuple[str, str, float | str], ...] = ()

    def __post_init__(self):
        for c in self.when:
            if len(c) != 3 or c[1] not in OPERATORS or isinstance(c[2], bool):
                raise ValueError(f"a reason's condition is (name, op, other), {c!r}")
        for name in self.names:
            _check_name("run value", name)

    @property
    def names(self) -> tuple[str, ...]:
        """The run values the conditions read."""
        return tuple(n for c in self.when for n in (c[0], c[2]) if isinstance(n, str))


def _check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(
            f"{what} name {name!r} must be a lower-case identifier ([a-z][a-z0-9_]*)"
        )
    return name


@dataclass(frozen=True)
class Exercise:
    """One exercise: what it asks, how its key is computed, what is wrong.

    Build one with ``exercise(...)``. ``answers`` maps each answer's name to
    its unit (``fields`` holds the full ``Real``/``Integer``/``Choice``);
    ``chapter`` is the page's file stem, read from the id."""

    id: str
    level: int
    kind: str
    fields: Mapping[str, Answer]
    key: Callable | None
    inputs: Mapping[str, object]
    measured: tuple[str, ...]
    mistakes: tuple[Mistake, ...]
    code: Code | None
    reasons: tuple[Reason, ...] = ()

    @property
    def chapter(self) -> str:
        return ID_PATTERN.match(self.id)["chapter"]

    @property
    def answers(self) -> Mapping[str, str]:
        return MappingProxyType({n: f.unit for n, f in self.fields.items()})

    @property
    def tolerances(self) -> Mapping[str, float]:
        """Relative tolerance per answer; 0.0 for an exact one."""
        return MappingProxyType(
            {n: float(getattr(f, "rel_tol", 0.0)) for n, f in self.fields.items()}
        )

    @property
    def checked(self) -> bool:
        """Whether ``check`` has a key for the answers."""
        return self.key is not None

    @property
    def stars(self) -> str:
        return STARS[self.level]

    @property
    def run_names(self) -> tuple[str, ...]:
        """What a prediction's run measures: each predicted answer, then the
        other values its reasons read."""
        names = list(self.fields)
        for r in self.reasons:
            names += [n for n in r.names if n not in names]
        return tuple(names)

    def usage(self) -> str:
        """How to call ``check`` for this exercise."""
        if self.code is not None and not self.fields:
            return f'check("{self.id}", {self.code.name})'
        args = [f"{n}=..." for n in (*self.measured, *self.fields)]
        return f'check("{self.id}", {", ".join(args)})'

    def key_values(self, **measured) -> dict:
        """The answers, computed from the statement's inputs (and, for an
        exercise on the reader's own measurement, the measured inputs)."""
        if self.key is None:
            raise ValueError(f"{self.id} is a {self.kind} exercise: it has no key")
        _require_measured(self, measured)
        if not self.measured and self.id in _KEY_CACHE:
            return dict(_KEY_CACHE[self.id])
        values = self.key(**self.inputs, **measured)
        if set(values) != set(self.fields):
            raise ValueError(
                f"{self.id}: the key gives {sorted(values)}, the record asks for "
                f"{sorted(self.fields)}"
            )
        values = {n: _normal(self.fields[n], values[n], self.id) for n in self.fields}
        if not self.measured:
            _KEY_CACHE[self.id] = dict(values)
        return values


_KEY_CACHE: dict[str, dict] = {}


def _normal(f: Answer, value, where: str):
    """A key or mistake value as plain data: float, int, or a sorted list."""
    if isinstance(f, Choice):
        names = [value] if isinstance(value, str) else list(value)
        unknown = set(names) - set(f.options)
        if unknown:
            raise ValueError(f"{where}: {sorted(unknown)} are not options")
        return [o for o in f.options if o in names]
    if isinstance(f, Integer):
        if isinstance(value, bool) or not float(value).is_integer():
            raise ValueError(f"{where}: an Integer answer's key must be whole, {value}")
        return int(value)
    value = float(value)
    if not math.isfinite(value) or value == 0:
        raise ValueError(
            f"{where}: a Real answer's key must be finite and non-zero (a relative "
            f"tolerance around 0 accepts nothing), got {value!r}"
        )
    return value


def _require_measured(ex: Exercise, measured: dict) -> None:
    missing = ", ".join(n for n in ex.measured if n not in measured)
    extra = ", ".join(n for n in measured if n not in ex.measured)
    what = [f"needs your measured {missing}"] * bool(missing)
    what += [f"takes no measured input {extra}"] * bool(extra)
    if what:
        raise CheckTypeError(f"{ex.id} {' and '.join(what)}: {ex.usage()}")


def exercise(
    id: str,
    *,
    level: int,
    kind: str,
    answers: Mapping[str, Answer] | None = None,
    key: Callable | None = None,
    inputs: Mapping[str, object] | None = None,
    measured: tuple[str, ...] = (),
    mistakes: tuple[Mistake, ...] = (),
    code: Code | None = None,
    reasons: tuple[Reason, ...] = (),
) -> Exercise:
    """A checked record. ``id`` is "<page stem>-<n>"; ``key(**inputs,
    **measured)`` returns {answer name: value}; see docs/exercises.md."""
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        raise ValueError(f"exercise id {id!r} must read <page stem>-<n>, e.g. 'mfu-3'")
    if level not in STARS or isinstance(level, bool):
        raise ValueError(f"{id}: level must be 1, 2 or 3, got {level!r}")
    if kind not in KINDS:
        raise ValueError(f"{id}: kind must be one of {KINDS}, got {kind!r}")
    fields = dict(answers or {})
    for name, f in fields.items():
        _check_name("answer", name)
        if not isinstance(f, Real | Integer | Choice):
            raise TypeError(f"{id}: answer {name!r} must be a Real, Integer or Choice")
    measured = tuple(measured)
    for name in measured:
        _check_name("measured input", name)
    clash = set(measured) & set(fields)
    if clash:
        raise ValueError(f"{id}: {sorted(clash)} are both answers and measured inputs")
    if key is not None and not fields:
        raise ValueError(f"{id}: a key needs answers to compute")
    if kind == "predict" and key is not None:
        raise ValueError(f"{id}: a prediction has no key; the measurement answers it")
    if kind not in ("predict", "measure") and fields and key is None:
        raise ValueError(f"{id}: a {kind} exercise with answers needs a key")
    if kind == "code" and code is None:
        raise ValueError(f"{id}: a code exercise needs a Code check")
    if code is not None and kind != "code":
        raise ValueError(f"{id}: only a code exercise has a Code check")
    if measured and key is None:
        raise ValueError(f"{id}: measured inputs feed a key; there is none")
    reasons = tuple(reasons)
    if reasons and kind != "predict":
        raise ValueError(f"{id}: only a prediction has reasons")
    if kind == "predict" and fields:
        if not all(isinstance(f, Real) for f in fields.values()):
            raise ValueError(f"{id}: a prediction's answers are Real numbers")
        if not all(isinstance(r, Reason) for r in reasons) or not reasons:
            raise ValueError(f"{id}: a prediction needs Reasons for what the run shows")
        if reasons[-1].when:
            raise ValueError(f"{id}: the last reason has no condition (the default)")
    for m in mistakes:
        if not isinstance(m, Mistake):
            raise TypeError(f"{id}: mistakes must be Mistake records, got {m!r}")
        if m.answer not in fields:
            raise ValueError(
                f"{id}: mistake {m.name!r} is for unknown answer {m.answer}"
            )
    return Exercise(
        id=id,
        level=level,
        kind=kind,
        fields=MappingProxyType(fields),
        key=key,
        inputs=MappingProxyType(dict(inputs or {})),
        measured=measured,
        mistakes=tuple(mistakes),
        code=code,
        reasons=reasons,
    )


# --- the data a verdict is made from -------------------------------------------------


def mistake_values(ex: Exercise, key: dict, **measured) -> dict[str, list[dict]]:
    """Per answer: each named mistake's value (those equal to the key left
    out: that answer is right), then the unit's generic mistakes."""
    out: dict[str, list[dict]] = {n: [] for n in ex.fields}
    for m in ex.mistakes:
        f = ex.fields[m.answer]
        raw = m.value(**ex.inputs, **measured)
        if raw is None:  # this way of going wrong gives no answer for these inputs
            continue
        value = _normal(f, raw, f"{ex.id} {m.name}")
        if value != key[m.answer]:
            out[m.answer].append({"name": m.name, "hint": m.hint, "value": value})
    for name, f in ex.fields.items():
        for factor, what, hint in UNIT_MISTAKES.get(f.unit, ()):
            value = key[name] * factor
            if isinstance(f, Integer) and not float(value).is_integer():
                continue
            value = int(value) if isinstance(f, Integer) else float(value)
            out[name].append({"name": what, "hint": hint, "value": value})
    return out


def spec(exercise_id: str, **measured) -> dict:
    """Everything a verdict on ``exercise_id`` needs, as plain data (what the
    HTML book writes into the page): per answer its type, unit, label,
    tolerance, key and mistakes, and the sentences of a verdict."""
    ex = get(exercise_id)
    predicts = ex.kind == "predict"
    key = ex.key_values(**measured) if ex.checked else None
    mistakes = mistake_values(ex, key, **measured) if key is not None else {}
    answers = []
    for name, f in ex.fields.items():
        a = {"name": name, "unit": f.unit, "label": f.label}
        if isinstance(f, Real):
            a.update(type="real", rel_tol=float(f.rel_tol))
        elif isinstance(f, Integer):
            a.update(type="integer")
        else:
            a.update(
                type="choice",
                options=[
                    {"name": o, "label": label, "hint": f.hints.get(o, "")}
                    for o, label in f.options.items()
                ],
            )
        if key is not None:
            a.update(key=key[name], mistakes=mistakes[name])
        answers.append(a)
    out = {
        "id": ex.id,
        "kind": ex.kind,
        "level": ex.level,
        "stars": ex.stars,
        "checked": ex.checked,
        "measured": list(ex.measured),
        "answers": answers,
        "code": None if ex.code is None else ex.code.name,
        "usage": ex.usage(),
        "messages": dict(MESSAGES),
        "sizes": [list(s) for s in (PREDICTION_SIZES if predicts else SIZES)],
    }
    if predicts:
        out["reasons"] = [
            {"sentence": r.sentence, "when": [list(c) for c in r.when]}
            for r in ex.reasons
        ]
        out["run"] = run_values(ex, measured) if measured else None
    return out


def run_values(ex: Exercise, values: dict) -> dict[str, float]:
    """What a prediction's run measured: each of ``ex.run_names``, finite."""
    if set(values) != set(ex.run_names):
        raise CheckTypeError(f"{ex.id}: the run's values are {', '.join(ex.run_names)}")
    out = {n: float(values[n]) for n in ex.run_names}  # a NumPy or torch scalar too
    if not all(map(math.isfinite, out.values())):
        raise CheckValueError(f"{ex.id}: the run's values are finite numbers, {out}")
    return out


# --- a typed answer -------------------------------------------------------------------

_NUMBER = re.compile(r"([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?")


def read_number(text: str, unit: str, whole: bool = False) -> float:
    """A typed answer as a number, rule for rule as exercises.js ``readNumber``
    reads it: grouping (16,384) dropped and a decimal comma refused
    (mlbook.common.validate.number_text); a trailing "%" divides by 100 where
    a fraction is asked ("55.9%" is 0.559). Else a ValueError saying what to
    type."""
    t = number_text(text)
    if not t:
        raise ValueError(MESSAGES["empty"].format(unit=unit))
    percent = t.endswith("%")
    if percent:
        if unit not in ("fraction", "%"):
            raise ValueError(MESSAGES["percent_here"].format(unit=unit))
        t = t[:-1]
    m = _NUMBER.fullmatch(t)
    if m and percent and unit == "fraction":  # the point moved two places, exactly
        t = f"{m[1]}{m[2]}e{int(m[3] or 0) - 2}"
    if not m or not math.isfinite(float(t)):
        raise ValueError(MESSAGES["not_a_number"])
    value = float(t)
    if whole and not value.is_integer():
        raise ValueError(MESSAGES["whole"].format(unit=unit))
    return value


# --- the verdict ----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The verdict on one answer (or, for code, one set of tests)."""

    name: str
    value: object
    correct: bool
    hint: str
    mistake: str | None = None


def _size(ratio: float, sizes) -> str:
    for bound, phrase in sizes:
        if bound is None or ratio <= bound:
            return phrase
    return sizes[-1][1]


def judge(answer: dict, value, messages=MESSAGES, sizes=SIZES) -> Verdict:
    """The verdict on ``value`` for one answer of a ``spec``. ``value`` is a
    float or int (already validated), or a list of option names. This is the
    logic exercises.js repeats, step for step."""
    name, key = answer["name"], answer["key"]
    kind = answer["type"]
    if kind == "choice":
        return _judge_choice(answer, list(value), messages)
    if kind == "real":
        tol = answer["rel_tol"]
        right = abs(value - key) <= tol * abs(key)
    else:
        tol = 0.0
        right = value == key
    if right:
        return Verdict(name, value, True, messages["correct"])
    for m in answer["mistakes"]:
        v = m["value"]
        hit = abs(value - v) <= tol * abs(v) if kind == "real" else value == v
        if hit:
            return _looks_like(name, value, m, messages)
    if kind == "real":
        n = rounded_to(value, key)
        if n is not None:
            figures = "figure" if n == 1 else "figures"
            hint = messages["rounding"].format(n=n, figures=figures)
            return Verdict(name, value, False, hint)
    return Verdict(name, value, False, _off(value, key, messages, sizes))


def _looks_like(name: str, value, mistake: dict, messages) -> Verdict:
    hint = messages["mistake"].format(name=mistake["name"], hint=mistake["hint"])
    return Verdict(name, value, False, hint, mistake["name"])


def _off(value: float, key: float, messages, sizes) -> str:
    """Which way and how far ``value`` is off ``key``: the sign, or too
    high or low by a size (none where the key is 0)."""
    if (key > 0 and value <= 0) or (key < 0 and value >= 0):
        return messages["sign"]
    q = value / key if key else 1.0  # positive: the same sign as the key
    size = _size(max(q, 1 / q), sizes) if key else ""
    return messages["high" if value > key else "low"].format(size=size)


def rounded_to(value: float, key: float) -> int | None:
    """The number of significant figures (1 or 2) to which ``value`` is
    ``key`` rounded, or None. ``value`` has that many figures (written with
    them, it reads back the same) and lies within half a unit of its last
    figure of the key; a tie rounded either way counts."""
    for n in ROUNDINGS:
        text = f"{value:.{n - 1}e}"  # exercises.js: value.toExponential(n - 1)
        if float(text) != value or value == 0:
            continue
        unit = 10.0 ** (int(text.partition("e")[2]) - n + 1)
        if abs(value - key) <= 0.5 * unit * (1 + 1e-9):
            return n
    return None


def _judge_choice(answer: dict, picked: list, messages) -> Verdict:
    name = answer["name"]
    order = [o["name"] for o in answer["options"]]
    picked = [o for o in order if o in picked]
    key = answer["key"]
    if picked == key:
        return Verdict(name, picked, True, messages["correct"])
    for m in answer["mistakes"]:
        if picked == m["value"]:
            return _looks_like(name, picked, m, messages)
    parts = []
    if len(picked) != len(key):
        parts.append(messages["choice_count"].format(n=len(key), m=len(picked)))
    wrong = [
        o for o in answer["options"] if o["name"] in picked and o["name"] not in key
    ]
    for o in wrong:
        parts.append(o["hint"] or messages["choice_wrong"].format(label=o["label"]))
    missing = len([k for k in key if k not in picked])
    if not wrong and missing:
        parts.append(messages["choice_missing"].format(n=missing))
    return Verdict(name, picked, False, " ".join(parts))


# --- a prediction next to the run -----------------------------------------------------


def shown(value: float, unit: str) -> str:
    """A number as a prediction's verdict shows it (exercises.js ``shown``):
    three significant figures (ties away from zero), thousands separated, a
    fraction as a percentage."""
    if unit == "fraction":
        value, unit = value * 100, "%"
    value = value or 0.0  # no "-0"
    digits = max(0, 2 - int(f"{value:.2e}".split("e")[1])) if value else 0
    text = f"{Decimal(value).quantize(Decimal(10) ** -digits, ROUND_HALF_UP):,f}"
    return f"{text.rstrip('0').rstrip('.') if '.' in text else text} {unit}".rstrip()


def compare(
    answer: dict, said: float, run: dict, messages=MESSAGES, sizes=PREDICTION_SIZES
):
    """A prediction next to what the run measured, as a Verdict (``correct``:
    within the answer's tolerance): what was said, what was measured, and
    how far off and which way (exercises.js ``compare``)."""
    name, unit, measured = answer["name"], answer["unit"], run[answer["name"]]
    close = abs(said - measured) <= answer["rel_tol"] * abs(measured)
    how = messages["close"] if close else _off(said, measured, messages, sizes)
    text = messages["predicted"].format(
        said=shown(said, unit), measured=shown(measured, unit), how=how
    )
    return Verdict(name, said, close, text)


def reason(reasons: list, run: dict) -> str:
    """The sentence of the first reason whose conditions hold on ``run``
    (a spec's "reasons"; exercises.js ``reason``)."""
    for r in reasons:
        if all(
            OPERATORS[op](run[a], run[b] if isinstance(b, str) else b)
            for a, op, b in r["when"]
        ):
            return r["sentence"]
    raise ValueError("no reason holds: the last one has no condition")


# --- the registry ---------------------------------------------------------------------

_REGISTRY: dict[str, Exercise] = {}
EXERCISES: Mapping[str, Exercise] = MappingProxyType(_REGISTRY)


def register(*records: Exercise) -> tuple[Exercise, ...]:
    """Add chapter records to ``EXERCISES`` (an id may be registered once)."""
    for r in records:
        if not isinstance(r, Exercise):
            raise TypeError(f"register takes Exercise records, got {r!r}")
        if r.id in _REGISTRY and _REGISTRY[r.id] is not r:
            raise ValueError(f"exercise id {r.id!r} is registered twice")
        _REGISTRY[r.id] = r
    return records


class _ShortTraceback:
    """An error in how a reader called ``check``: IPython shows its message
    alone (its ``_render_traceback_`` hook), not a traceback through the
    package."""

    shown_as = "Error"

    def _render_traceback_(self) -> list[str]:
        first, *rest = str(self).split("\n")
        return [f"{self.shown_as}: {first}", *rest]


class CheckTypeError(_ShortTraceback, TypeError):
    """Answers missing, misnamed, or of the wrong type."""

    shown_as = "TypeError"


class CheckValueError(_ShortTraceback, ValueError):
    """An answer that is not a finite number, a whole one, or an option."""

    shown_as = "ValueError"


class UnknownExercise(_ShortTraceback, KeyError, ValueError):
    """No exercise has this id (a KeyError and a ValueError)."""

    shown_as = "UnknownExercise"

    def __str__(self):
        return str(self.args[0])


def close_matches(word, candidates, n: int = 3) -> list[str]:
    """The ``n`` candidates closest to a misspelled ``word`` (difflib's
    ratio, at least 0.6), best first; equally close ones in their order
    ("mfu-l": mfu-1, mfu-2, mfu-3, not mfu-7, mfu-6, mfu-5)."""
    import difflib

    text = str(word).strip().lower()
    scored = []
    for i, c in enumerate(candidates):
        ratio = difflib.SequenceMatcher(None, text, c).ratio()
        if ratio >= 0.6:
            scored.append((-ratio, i, c))
    return [c for _, _, c in sorted(scored)[:n]]


def _id_ranges() -> str:
    """Every registered id, a chapter to an item: "mfu-1 to mfu-7"."""
    numbers: dict[str, list[int]] = {}
    for ex_id in _REGISTRY:
        m = ID_PATTERN.match(ex_id)
        numbers.setdefault(m["chapter"], []).append(int(m["n"]))
    return ", ".join(
        f"{c}-{min(ns)}" if len(ns) == 1 else f"{c}-{min(ns)} to {c}-{max(ns)}"
        for c, ns in sorted(numbers.items())
    )


def get(exercise_id) -> Exercise:
    """The record of ``exercise_id``, or an UnknownExercise that names it and
    the closest ids."""
    if isinstance(exercise_id, str) and exercise_id in _REGISTRY:
        return _REGISTRY[exercise_id]
    close = close_matches(exercise_id, _REGISTRY)
    raise UnknownExercise(
        f"no exercise {exercise_id!r}"
        + (f"; did you mean {', '.join(close)}?" if close else ".")
        + ("" if close else f"\nThe ids: {_id_ranges()}.")
    )
