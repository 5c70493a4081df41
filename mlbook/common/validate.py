"""Input checks shared by every calculator.

Each check returns the value it accepted, so a caller can write
``seq_len = positive_int("seq_len", seq_len)``, and raises ValueError with a
message that names the argument, the value it got and the rule it broke.
"""

from __future__ import annotations

import math
import re
from numbers import Integral, Real


def is_real(value) -> bool:
    """A real number, not a bool (True == 1, but a flag is not a count;
    numpy's floats and integers are Real, its bool is not). NaN and the
    infinities are real numbers here: a check that wants them finite says
    so."""
    return isinstance(value, Real) and not isinstance(value, bool)


def positive(name: str, value):
    """A finite real number above zero."""
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number above 0, got {value!r}")
    return value


def non_negative(name: str, value):
    """A finite real number at or above zero."""
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number at or above 0, got {value!r}")
    return value


def positive_int(name: str, value) -> int:
    """An integer above zero (bools are rejected)."""
    if not isinstance(value, Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be an integer above 0, got {value!r}")
    return int(value)


def non_negative_int(name: str, value) -> int:
    """An integer at or above zero (bools are rejected)."""
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer at or above 0, got {value!r}")
    return int(value)


def at_least(name: str, value, minimum):
    """A finite real number at or above ``minimum``."""
    if not is_real(value) or not math.isfinite(value) or value < minimum:
        raise ValueError(
            f"{name} must be a finite number at or above {minimum}, got {value!r}"
        )
    return value


def fraction(name: str, value, *, allow_zero: bool = False, allow_one: bool = True):
    """A number in (0, 1], with the ends included or not as asked."""
    if not is_real(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")
    low_ok = value >= 0 if allow_zero else value > 0
    high_ok = value <= 1 if allow_one else value < 1
    if not (low_ok and high_ok):
        lo = "[0" if allow_zero else "(0"
        hi = "1]" if allow_one else "1)"
        raise ValueError(f"{name} must lie in {lo}, {hi}, got {value!r}")
    return value


def one_of(name: str, value, allowed):
    """One of a fixed set of choices. A bool is refused where the choices hold
    none (True == 1, so ``True in (0, 1, 2, 3)`` would otherwise pass)."""
    if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed):
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    if value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def divides(name: str, divisor: int, dividend_name: str, dividend: int) -> int:
    """``divisor`` must divide ``dividend`` exactly (both integers above 0)."""
    positive_int(name, divisor)
    positive_int(dividend_name, dividend)
    if dividend % divisor:
        raise ValueError(
            f"{name}={divisor} must divide {dividend_name}={dividend} exactly "
            f"({dividend} % {divisor} = {dividend % divisor})"
        )
    return divisor


def boolean(name: str, value) -> bool:
    """True or False; 0, 1, None and strings are refused (a flag is not a count)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def instance_of(name: str, value, cls):
    """An instance of ``cls`` (for example a TransformerConfig)."""
    if not isinstance(value, cls):
        raise ValueError(
            f"{name} must be a {cls.__name__}, got {type(value).__name__} {value!r}"
        )
    return value


# A comma in a typed number: only between groups of three digits, as in
# 16,384 or 2,400,000 (the prose prints numbers so). A decimal comma (0,49;
# 2,5) is refused with this message in every place a reader types a number:
# the answer boxes (exercises.js), check(), the live figures' boxes and the
# command line.
COMMA_DECIMAL = (
    "Write decimals with a point: {point}, not {typed} (a comma only groups "
    "thousands, as in 16,384)."
)
_GROUPING = re.compile(r"[\s\u00a0\u202f_]")
_GROUPED = re.compile(
    r"[+-]?[1-9][0-9]{0,2}(?:,[0-9]{3})+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?%?"
)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?%?")


def number_text(text: str) -> str:
    """A typed number's text without its digit grouping: spaces and
    underscores dropped, and commas where they group thousands (16,384;
    2,400,000.5). A comma anywhere else is a decimal comma: ValueError with
    COMMA_DECIMAL's message, the point in its place ("0,49" -> 0.49), when
    that makes a number. What is left is for the caller to read (a number, or
    not: "a,b" comes back as it is)."""
    t = _GROUPING.sub("", str(text))
    if "," not in t or _GROUPED.fullmatch(t):
        return t.replace(",", "")
    head, _, tail = t.rpartition(",")
    point = head.replace(",", "") + "." + tail
    if _DECIMAL.fullmatch(point):
        raise ValueError(COMMA_DECIMAL.format(point=point, typed=str(text).strip()))
    return t


def did_you_mean(word: str, candidates, n: int = 3) -> list[str]:
    """The candidates a mistyped ``word`` most likely meant, best first: the
    one equal to it but for case ("h100" is H100), else up to ``n`` close in
    spelling (difflib's ratio of the lower-cased words, at least 0.6)."""
    import difflib

    text = str(word).strip().lower()
    names = [str(c) for c in candidates]
    same = [c for c in names if c.strip().lower() == text]
    if same:
        return same[:1]
    scored = []
    for i, c in enumerate(names):
        ratio = difflib.SequenceMatcher(None, text, c.lower()).ratio()
        if ratio >= 0.6:
            scored.append((-ratio, i, c))
    return [c for _, _, c in sorted(scored)[:n]]
