"""Live figures: a trade-off curve that is a pure function of its controls.

A live figure is a function that takes its controls' values (and any
build-time data, ``fixed``, as further keyword arguments) and returns a
Vega-Lite v5 spec: a dict with its data inline (``mlbook.common.vegalite``
builds them). Its controls are declared once, beside it::

    @live.figure(
        live.slider("checkpoint_s", "C, checkpoint write (s)", 30, 3, 3000, 10**0.05,
                    scale="log"),
        live.number("n_nodes", "nodes", 128, 1, 4096),
        ranges=None,   # or a function of the values: {name: {"min", "max", "step"}}
    )
    def waste_explorer(checkpoint_s, n_nodes): ...

``figure`` returns the function unchanged, with its declaration as
``waste_explorer.live`` (a LiveFigure). Two hosts run the same function:
JupyterLab (``mlbook.plotting.live.show_live``: ipywidgets, the spec drawn by
JupyterLab's own Vega-Lite renderer) and the HTML book (tools/bookext/live.py
and book/_extra/vendor/live.js: plain HTML inputs, the function run by
Pyodide in the reader's browser). So this module, ``vegalite`` and every live
figure import only the standard library and mlbook's torch-free modules:
no numpy, torch or matplotlib.

Controls, as the HTML book's ``data-mlbook-live`` JSON carries them (every key
always present, null where it does not apply to the kind):

- ``slider``: a number between ``min`` and ``max``. Dragging moves it on a
  grid, ``scale`` "linear": min + k * step; "log": min * step**k, ``step``
  being a factor above 1; ``max`` is the last drag position, on the grid or
  not. Integer-valued when min, max and step are all ints (linear only).
  ``on_grid``: the grid is the domain, not only the drag's (b a power of
  two): a value goes to the nearest grid point, and ``max`` lies on it.
- ``select-slider``: a slider over ``options`` (the value is an option, not
  its index).
- ``dropdown``: one of ``options``.
- ``checkbox``: True or False.
- ``number``: a typed number in [min, max] (integers when min and step are
  ints, as a GPU count is); the arrow keys step it on the grid
  min + k * step.

What a host sends is read, then fitted, and both say what they did:

- ``Control.read`` reads a host's value as the control's type, strictly. A
  typed number is a decimal ("16384", "2.5", "-5", "1e-9"), its digits
  grouped or not ("16,384", "2 400 000"), as the answer boxes read one
  (mlbook.common.validate.number_text): a decimal comma ("2,5") is refused
  with the message the boxes give, and "abc", an empty box, "inf" and a
  number beyond 2**53 (1e308), where a double no longer holds whole numbers,
  raise ``Unreadable`` with a message naming what was typed. A value that is
  not one of a choice's options, and a checkbox's that is not True or False,
  are unreadable too. Nothing is reinterpreted.
- ``Control.fit`` keeps a readable value inside [min, max] as it was typed
  (a slider's grid is for dragging, not for rounding a reader's number; an
  integer control's value is a whole number), moves one outside to the
  nearest end (written to six significant digits, inside the range: a
  computed end of 376.70097... is 376.7) and returns ``Fitted(value,
  note)``: ``note`` is None when the value stayed, else one line naming the
  rule that moved it ("at most 1,000,000: 1e9 became 1,000,000").
  ``Control.clamp`` is its value.

A control's range is its valid domain: the function accepts every value in
it on its own (an MFU in (0, 1], a count from 1, a rate from above 0), so no
fitted value is refused for a rule of its own; what the function refuses is a
rule over several controls (a form's ``FieldError``). A range may depend on
the other controls:
``ranges(**values)`` (given the fixed arguments too, where it names them)
returns ``{name: {"min": .., "max": .., "step": ..}}`` for the controls it
governs, and ``LiveFigure.settle`` applies it and
fits again until nothing moves (a value outside its new range goes to the
nearest end, and says so).

A draw (``LiveFigure.draw``, and ``draw_json`` for the browser) reads every
value; an unreadable one keeps the control's current value (the last one
drawn) and is reported in ``refused`` ({name: message}); every value that
was moved to fit is reported in ``notes`` ({name: note}). The hosts show the
kept value in the control, the message or the note on the control's own
line, and clear them on the next draw.

A form (the plan page's planner) is a live function whose result is not a
spec but data (the planner's JSON): it is declared with ``view=``, a function
``view(result, values)`` that returns what to show, ``{"spec": a Vega-Lite
spec, "text": preformatted text, "command": a command line}`` (each key
optional). The result is still what ``data-result`` carries; the payload
adds ``view`` (the view function's path) and ``display`` (the default view).
A form's function reports a bad input by raising ``FieldError(field,
message)``: ``draw_json`` then returns the message, the control it belongs
to (or None) and the values it tried, and the hosts show the message next to
that control.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from numbers import Integral
from typing import Any

from mlbook.common.validate import is_real, number_text

KINDS = ("slider", "select-slider", "dropdown", "checkbox", "number")
SCALES = ("linear", "log")
JSON_KEYS = (
    "name",
    "label",
    "kind",
    "min",
    "max",
    "step",
    "scale",
    "options",
    "value",
    "on_grid",
    "whole",
)
MIME_TYPE = "application/vnd.mlbook.live+json"  # the HTML book's output type
VEGALITE_MIME_TYPE = "application/vnd.vegalite.v5+json"  # JupyterLab draws this
_GRID_TOLERANCE = 1e-6  # how far max may sit off its grid, in steps
_SETTLE_ROUNDS = 5  # ranges that have not settled by then are a bug in ranges
MAX_FIXED_BYTES = 200_000  # build-time data is a summary, not raw measurements


class FieldError(ValueError):
    """A bad input of a live function, and the control it belongs to
    (``field``, a control's name, or None when no one control is to blame).
    ``str(error)`` is the message itself, as the function's own check wrote it."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def _decimals(x: float) -> int | None:
    """Decimal places of ``x`` as written (0.05 -> 2, 30 -> 0, 1e-07 -> 7), or
    None when it is no short decimal (a computed step such as top / 1000)."""
    text = repr(float(x))
    if "e" in text:
        mantissa, exponent = text.split("e")
        places = len(mantissa.split(".")[1]) if "." in mantissa else 0
        places -= int(exponent)
    else:
        places = len(text.split(".")[1].rstrip("0"))
    places = max(places, 0)
    return places if places <= 10 else None


def _option_key(option) -> str:
    """How an option travels through an HTML <select>: its text."""
    return option if isinstance(option, str) else json.dumps(option)


# A typed number, as a reader writes one: digits with an optional point and
# exponent, no commas, no underscores, no "inf" or "nan"
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DECIMAL_INT = re.compile(r"[+-]?\d+")
_SWITCH = {"true": True, "on": True, "false": False, "off": False}
MAX_READ = 2**53  # beyond it a double skips whole numbers: not a value to read


def _typed(raw) -> str:
    """What a host sent, as a message quotes it."""
    return json.dumps(raw) if isinstance(raw, str) else repr(raw)


def _show(x) -> str:
    """A number as a note writes it: 1,000,000, 0.001, 1e-09, 2.4e+06."""
    if isinstance(x, Integral):
        return f"{x:,}"
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if 1e-4 <= abs(x) < 1e6:
        return f"{x:,.10g}"
    if 1e6 <= abs(x) < 1e15:
        return f"{x:,.0f}"
    mantissa, exponent = f"{x:.6g}".split("e")  # 1e-09 as a reader writes it: 1e-9
    return f"{mantissa}e{int(exponent)}"


def _same_number(a, b) -> bool:
    if a == b:
        return True
    if not (is_real(a) and is_real(b)):
        return False
    # a host's text of a grid value (JavaScript's 0.1 + 3 x 0.1) is that value
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _shown(control, value) -> str:
    """A control's value as a message names it."""
    if control.kind in ("slider", "number") and is_real(value):
        return _show(value)
    return _option_key(value) if not isinstance(value, bool) else str(value)


class Unreadable(ValueError):
    """A host's value that is not one of the control's (``Control.read``):
    ``field`` the control's name, ``message`` what a host shows."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Fitted:
    """A value fitted to its control, and the note naming the rule that
    moved it (None when it stayed)."""

    value: Any
    note: str | None = None


@dataclass(frozen=True)
class Control:
    """One control of a live figure (see the module docstring for the kinds).
    Build them with ``slider``, ``select_slider``, ``dropdown``, ``checkbox``
    and ``number``; a bad declaration raises ValueError naming the rule."""

    name: str
    label: str  # with the unit: "C, checkpoint write (s)"
    kind: str
    value: Any
    min: float | None = None
    max: float | None = None
    step: float | None = None
    scale: str | None = None
    options: tuple | None = None
    on_grid: bool = False  # the grid is the domain (b a power of two), not a drag's
    # whole-number values (a count): for a slider or a number, from the
    # declaration's types (int min, max and step, linear) when not given, and
    # carried in the JSON, where 1e15 and 1 read back as ints
    whole: bool | None = None

    def __post_init__(self):
        where = f"control {self.name!r}"
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(
                f"a control's name must be an identifier, got {self.name!r}"
            )
        if not (isinstance(self.label, str) and self.label.strip()):
            raise ValueError(f"{where}: label must be a non-empty string")
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        ranged = self.kind in ("slider", "number")
        listed = self.kind in ("select-slider", "dropdown")
        for key in ("min", "max", "step"):
            value = getattr(self, key)
            if ranged and not (is_real(value) and math.isfinite(value)):
                raise ValueError(
                    f"{where}: {key} must be a finite number, got {value!r}"
                )
            if not ranged and value is not None:
                raise ValueError(f"{where}: a {self.kind} has no {key}, got {value!r}")
        if not isinstance(self.on_grid, bool) or (self.on_grid and not ranged):
            raise ValueError(
                f"{where}: on_grid is True or False, and True only for a slider "
                f"or a number, got {self.on_grid!r}"
            )
        if ranged and self.whole is None:
            integers = all(
                isinstance(v, Integral) for v in (self.min, self.max, self.step)
            )
            object.__setattr__(self, "whole", self.scale == "linear" and integers)
        if ranged and not isinstance(self.whole, bool):
            raise ValueError(f"{where}: whole is True or False, got {self.whole!r}")
        if not ranged and self.whole is not None:
            raise ValueError(f"{where}: a {self.kind} has no whole, got {self.whole!r}")
        if self.whole and not all(
            float(v).is_integer() for v in (self.min, self.max, self.step)
        ):
            raise ValueError(
                f"{where}: a whole-number control needs whole min, max and step, "
                f"got {self.min!r}, {self.max!r}, {self.step!r}"
            )
        if ranged:
            self._check_range(where)
        elif self.scale is not None:
            raise ValueError(f"{where}: a {self.kind} has no scale, got {self.scale!r}")
        if listed:
            self._check_options(where)
        elif self.options is not None:
            raise ValueError(f"{where}: a {self.kind} has no options")
        if self.kind == "checkbox" and not isinstance(self.value, bool):
            raise ValueError(
                f"{where}: a checkbox's value is True or False, got {self.value!r}"
            )
        if listed and self.value not in self.options:
            raise ValueError(
                f"{where}: value {self.value!r} is not one of its options "
                f"{self.options}"
            )
        if ranged:
            if not is_real(self.value) or not self.min <= self.value <= self.max:
                raise ValueError(
                    f"{where}: value must be a number in [{self.min:g}, {self.max:g}], "
                    f"got {self.value!r}"
                )
            if self.integral and not float(self.value).is_integer():
                raise ValueError(
                    f"{where}: value must be a whole number, got {self.value!r}"
                )
            snapped = self._snap(self.value) if self.on_grid else self.value
            if not math.isclose(
                snapped, self.value, rel_tol=1e-6, abs_tol=1e-9 * self.step
            ):
                raise ValueError(
                    f"{where}: value {self.value!r} is not on its grid "
                    f"({self._grid_text()}); the nearest is {snapped!r}"
                )

    def _grid_text(self) -> str:
        if self.scale == "log":
            return f"{self.min:g} x {self.step:g}^k"
        return f"{self.min:g} + k x {self.step:g}"

    def _check_range(self, where: str) -> None:
        if self.scale not in SCALES:
            raise ValueError(
                f"{where}: scale must be one of {SCALES}, got {self.scale!r}"
            )
        if self.kind == "number" and self.scale != "linear":
            raise ValueError(f"{where}: a number's scale is linear")
        if not self.min < self.max:
            raise ValueError(
                f"{where}: min must be below max, got {self.min} and {self.max}"
            )
        if self.scale == "log":
            if self.min <= 0 or self.step <= 1:
                raise ValueError(
                    f"{where}: a log slider needs min above 0 and a step (a factor) "
                    f"above 1, got min={self.min} and step={self.step}"
                )
            span = math.log(self.max / self.min) / math.log(self.step)
        else:
            if self.step <= 0:
                raise ValueError(f"{where}: step must be above 0, got {self.step}")
            span = (self.max - self.min) / self.step
        on_grid = self.on_grid and self.kind == "slider"
        if abs(span - round(span)) > _GRID_TOLERANCE and on_grid:
            raise ValueError(
                f"{where}: max={self.max:g} is not on the grid {self._grid_text()} "
                f"({span:.4f} steps from min)"
            )

    def _check_options(self, where: str) -> None:
        if not isinstance(self.options, tuple) or not self.options:
            raise ValueError(f"{where}: options must be a non-empty tuple")
        for option in self.options:
            if isinstance(option, bool) or not isinstance(option, (str, int, float)):
                raise ValueError(
                    f"{where}: options are strings or numbers, got {option!r}"
                )
        keys = [_option_key(o) for o in self.options]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{where}: options must differ, got {self.options}")

    # --- values ---------------------------------------------------------------

    @property
    def integral(self) -> bool:
        """Values are ints (``whole``): by default a linear slider or number
        declared with int min, max and step."""
        return bool(self.whole)

    @property
    def last_step(self) -> int | None:
        """The index k of max on the grid (of the last option), or None."""
        if self.kind in ("select-slider", "dropdown"):
            return len(self.options) - 1
        if self.kind not in ("slider", "number"):
            return None
        if self.scale == "log":
            span = math.log(self.max / self.min) / math.log(self.step)
        else:
            span = (self.max - self.min) / self.step
        # max itself is the last step, on the grid or not
        return math.ceil(span - _GRID_TOLERANCE)

    def read(self, raw):
        """A value from a host (an HTML input's text, a widget's value) as
        this control's type; ``Unreadable`` (with the message a host shows)
        for what is not one, never a guess."""
        if self.kind == "checkbox":
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in _SWITCH:
                return _SWITCH[raw.strip().lower()]
            raise Unreadable(self.name, f"{_typed(raw)} is not on or off")
        if self.kind in ("select-slider", "dropdown"):
            for option in self.options:
                if raw == option and type(raw) is not bool:
                    return option
            try:
                key = raw if isinstance(raw, str) else _option_key(raw)
            except (TypeError, ValueError):  # not a value an input can hold
                key = None
            for option in self.options:
                if _option_key(option) == key:
                    return option
            choices = ", ".join(_option_key(o) for o in self.options)
            raise Unreadable(self.name, f"{_typed(raw)} is not one of {choices}")
        value = raw
        if isinstance(raw, str):
            if not raw.strip():
                raise Unreadable(self.name, "the box is empty: type a number")
            try:  # grouping dropped (16,384); a decimal comma refused, as everywhere
                text = number_text(raw)
            except ValueError as exc:
                raise Unreadable(self.name, str(exc)) from None
            if not _DECIMAL.fullmatch(text):
                raise Unreadable(self.name, f"{_typed(raw)} is not a number")
            # a whole number exactly (2**53 + 1 is not 2**53), else a float
            value = int(text) if _DECIMAL_INT.fullmatch(text) else float(text)
        finite = is_real(value) and (isinstance(raw, str) or math.isfinite(value))
        if not finite:
            raise Unreadable(self.name, f"{_typed(raw)} is not a finite number")
        if not abs(value) <= MAX_READ:  # 1e400 typed is inf: too large too
            raise Unreadable(
                self.name,
                f"{_typed(raw)} is too large a number to read here "
                f"(this control takes {_show(self.min)} to {_show(self.max)})",
            )
        return value

    def fit(self, raw) -> Fitted:
        """``raw`` read, moved into [min, max] and onto the grid (the ends
        exact), with a note naming the rule when that moved it."""
        value = self.read(raw)
        fitted = self._fit(value)
        if self.kind not in ("slider", "number") or _same_number(fitted, value):
            return Fitted(fitted)
        if value < self.min:
            rule = f"at least {_show(self._end(self.min, up=True))}"
        elif value > self.max:
            rule = f"at most {_show(self._end(self.max, up=False))}"
        elif self.on_grid and self.scale == "log":
            rule = f"on its steps ({_show(self.min)} x {self.step:.4g}^k)"
        elif self.on_grid and not (self.integral and self.step == 1):
            rule = f"in steps of {_show(self.step)}"
        else:
            rule = "a whole number"
        shown = raw.strip() if isinstance(raw, str) else _show(value)
        return Fitted(fitted, f"{rule}: {shown} became {_show(fitted)}")

    def clamp(self, value):
        """``fit(value)``'s value: read, in [min, max], on the grid."""
        return self.fit(value).value

    def _fit(self, value):
        """``value`` inside the range as it is (a whole number for an integer
        control), outside it the nearest end."""
        if self.kind not in ("slider", "number"):
            return value
        if self.on_grid:
            return self._snap(value)
        if value < self.min:
            return self._end(self.min, up=True)
        if value > self.max:
            return self._end(self.max, up=False)
        if self.integral:
            return int(min(max(round(value), self.min), self.max))
        return value

    def _snap(self, value):
        """``value`` on the grid, for a control whose grid is its domain (the
        ends exact)."""
        last = self.last_step
        if self.scale == "log":
            if value <= self.min:
                return self._exact(self.min)
            k = round(math.log(value / self.min) / math.log(self.step))
        else:
            k = round((value - self.min) / self.step)
        k = min(max(k, 0), last)
        if k == 0:
            return self._exact(self.min)
        if k == last and self.kind == "slider":
            return self._exact(self.max)
        if self.scale == "log":  # six digits: a step of a log slider moves the third
            return float(f"{self.min * self.step**k:.6g}")
        snapped = self.min + k * self.step
        if self.integral:
            return int(snapped)
        places = _decimals(self.min), _decimals(self.step)
        if None in places:  # a computed step: twelve digits are plenty
            return float(f"{snapped:.12g}")
        return float(round(snapped, max(places)))

    def _exact(self, end):
        return int(end) if self.integral else float(end)

    def _end(self, end, up: bool):
        """An end of the range as a value: exact for an integer control, else
        to six significant digits rounded into the range (a computed end such
        as 100 % MFU's 376.70097... tokens/s is 376.7)."""
        if self.integral:
            return int(end)
        end = float(end)
        near = float(f"{end:.6g}")
        if near == end or (near > end) == up:
            return near
        scale = 10.0 ** (math.floor(math.log10(abs(end))) - 5)
        inside = float(f"{(round(end / scale) + (1 if up else -1)) * scale:.6g}")
        return inside if (inside >= end) == up else end

    def with_value(self, value) -> Control:
        """This control with ``value`` (clamped) as its value."""
        return replace(self, value=self.clamp(value))

    def with_range(self, min=None, max=None, step=None) -> Control:
        """This control with a new range (what ``ranges`` returns), its value
        clamped into it."""
        if self.kind not in ("slider", "number"):
            raise ValueError(
                f"ranges returned a range for {self.name!r}, a {self.kind}, "
                "which has none"
            )
        lo = self.min if min is None else min
        hi = self.max if max is None else max
        step = self.step if step is None else step
        # min is always a valid value, so the new range is checked with it first
        moved = replace(self, min=lo, max=hi, step=step, value=lo)
        return moved.with_value(self.value)

    # --- JSON -------------------------------------------------------------------

    def to_json(self) -> dict:
        """The Contract's control object: every key, null where it does not apply."""
        out = {key: getattr(self, key) for key in JSON_KEYS}
        out["options"] = list(self.options) if self.options is not None else None
        return out

    @classmethod
    def from_json(cls, data: dict) -> Control:
        data = dict(data)
        if data.get("options") is not None:
            data["options"] = tuple(data["options"])
        data["on_grid"] = bool(data.get("on_grid"))
        if data.get("whole") is not None:
            data["whole"] = bool(data["whole"])
        return cls(**{key: data.get(key) for key in JSON_KEYS})


def slider(
    name, label, value, min, max, step, scale="linear", on_grid=False, whole=None
) -> Control:
    """A slider from ``min`` to ``max``: dragged in linear steps of ``step``,
    or with ``scale="log"`` in steps that multiply by ``step``. A typed value
    in the range is kept as typed, unless ``on_grid``: the grid is then the
    domain (b a power of two, m a multiple of p), and a value goes to its
    nearest grid point; ``max`` must then lie on the grid. ``whole``: whole
    numbers only (by default when min, max and step are ints, linear)."""
    return Control(
        name, label, "slider", value, min, max, step, scale, None, on_grid, whole
    )


def select_slider(name, label, options, value) -> Control:
    """A slider over listed values (strings or numbers)."""
    return Control(name, label, "select-slider", value, options=tuple(options))


def dropdown(name, label, options, value) -> Control:
    """A choice from a list (strings or numbers)."""
    return Control(name, label, "dropdown", value, options=tuple(options))


def checkbox(name, label, value) -> Control:
    return Control(name, label, "checkbox", bool(value))


def number(name, label, value, min, max, step=1, on_grid=False, whole=None) -> Control:
    """A typed number in [min, max] (whole numbers when min, max and step are
    ints, or ``whole``), kept as typed; the arrow keys step it by ``step``.
    ``on_grid``: only the grid min + k * step is the domain."""
    return Control(
        name, label, "number", value, min, max, step, "linear", None, on_grid, whole
    )


# --- the figure -------------------------------------------------------------------


def _call(function, kwargs: dict):
    """``function(**kwargs)``, leaving out the keywords it does not take (a
    ranges function need not name the fixed arguments)."""
    params = inspect.signature(function).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return function(**kwargs)


def _path(function) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def resolve(path: str) -> Callable:
    """The function that ``"mlbook.<module>:<name>"`` names."""
    module, sep, name = path.partition(":")
    if not sep or not module.startswith("mlbook.") or not name:
        raise ValueError(
            f"a live function is named 'mlbook.<module>:<name>', got {path!r}"
        )
    target = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


@dataclass(frozen=True)
class Drawn:
    """One draw: the values drawn (clamped), the controls with their ranges
    as drawn, the spec (or, for a form, the result) the function returned,
    and for a form what its view shows (``display``)."""

    values: dict
    controls: tuple[Control, ...]
    spec: dict
    display: dict | None = None
    notes: dict = field(default_factory=dict)  # {name: the rule that moved it}
    refused: dict = field(default_factory=dict)  # {name: why it was not read}

    def to_json(self) -> dict:
        out = {
            "values": self.values,
            "controls": [c.to_json() for c in self.controls],
            "result": self.spec,
            "notes": self.notes,
            "refused": self.refused,
        }
        if self.display is not None:
            out["display"] = self.display
        return out


@dataclass(frozen=True)
class LiveFigure:
    """A live figure's declaration: the function, its controls, and the
    ranges function (or None). ``fixed`` names the function's other keyword
    arguments, which a page supplies at build time. ``view`` (a form's, or
    None) turns a result and the values drawn into what is shown."""

    function: Callable[..., dict]
    controls: tuple[Control, ...]
    ranges: Callable[..., dict] | None = None
    fixed: tuple[str, ...] = field(default=())
    view: Callable[[dict, dict], dict] | None = None

    def __post_init__(self):
        names = [c.name for c in self.controls]
        if len(set(names)) != len(names):
            raise ValueError(f"{_path(self.function)}: control names repeat: {names}")
        try:
            params = inspect.signature(self.function).parameters
        except (TypeError, ValueError):  # a builtin or a C function: nothing to check
            return
        keywords = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        missing = [n for n in names if n not in params]
        if missing and not keywords:
            raise ValueError(
                f"{_path(self.function)} takes no argument named {missing} "
                f"(it takes {list(params)})"
            )
        named = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        others = tuple(
            n for n, p in params.items() if n not in names and p.kind in named
        )
        object.__setattr__(self, "fixed", others)

    @property
    def path(self) -> str:
        """``"mlbook.<module>:<name>"``, the Contract's ``function``."""
        return _path(self.function)

    @property
    def ranges_path(self) -> str | None:
        return _path(self.ranges) if self.ranges is not None else None

    @property
    def view_path(self) -> str | None:
        return _path(self.view) if self.view is not None else None

    def values(self) -> dict:
        return {c.name: c.value for c in self.controls}

    def _check_names(self, values: dict) -> None:
        unknown = set(values) - {c.name for c in self.controls}
        if unknown:
            raise ValueError(
                f"{self.path} has no control named {sorted(unknown)} "
                f"(its controls: {[c.name for c in self.controls]})"
            )

    def with_values(self, **values) -> LiveFigure:
        """The same figure with other defaults (each clamped to its control),
        settled under ``ranges``."""
        self._check_names(values)
        settled, _, refused = self.fitted({**self.values(), **values})
        if refused:
            raise ValueError(f"{self.path}: {refused}")
        return settled

    def with_controls(self, controls: list[dict]) -> LiveFigure:
        """The same figure with the controls (JSON) a draw or payload gives."""
        return replace(self, controls=tuple(Control.from_json(c) for c in controls))

    def _check_fixed(self, fixed: dict) -> dict:
        fixed = dict(fixed or {})
        controls = {c.name for c in self.controls}
        clash = sorted(set(fixed) & controls)
        if clash:
            raise ValueError(f"{self.path}: {clash} are controls, not fixed arguments")
        missing = [n for n in self.fixed if n not in fixed and not self._has_default(n)]
        if missing:
            raise ValueError(f"{self.path} needs the fixed arguments {missing}")
        return fixed

    def _has_default(self, name: str) -> bool:
        param = inspect.signature(self.function).parameters[name]
        return param.default is not inspect.Parameter.empty or param.kind in (
            inspect.Parameter.VAR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )

    def settle(
        self, values: dict | None = None, fixed: dict | None = None
    ) -> LiveFigure:
        """The figure with ``values`` (raw, as a host read them) fitted,
        ``ranges`` applied, and fitted again, until nothing moves; an
        unreadable value keeps the control's current one (``fitted`` says
        which, and what moved)."""
        return self.fitted(values, fixed)[0]

    def fitted(
        self, values: dict | None = None, fixed: dict | None = None
    ) -> tuple[LiveFigure, dict, dict]:
        """``(settled figure, notes, refused)``: ``settle``, with a note
        for each value it moved ({name: "at most 1,000,000: 1e9 became
        1,000,000"}) and a message for each value it could not read, which
        kept the control's current value ({name: message})."""
        fixed = dict(fixed or {})
        raw, read, refused = {}, {}, {}
        for c in self.controls:
            raw[c.name] = (values or {}).get(c.name, c.value)
            try:
                read[c.name] = c.read(raw[c.name])
            except Unreadable as exc:
                kept = f"it keeps {_shown(c, c.value)}"
                refused[c.name] = (
                    f"{exc.message[:-1]}; {kept}."
                    if exc.message.endswith(".")
                    else f"{exc.message}; {kept}"
                )
                raw[c.name] = read[c.name] = c.value
        controls = {c.name: c.with_value(raw[c.name]) for c in self.controls}
        for _ in range(_SETTLE_ROUNDS if self.ranges is not None else 0):
            current = {n: c.value for n, c in controls.items()}
            found = _call(self.ranges, {**fixed, **current})
            stray = sorted(set(found) - set(controls))
            if stray:
                raise ValueError(
                    f"ranges returned {stray[0]!r}, which is not one of the controls "
                    f"({', '.join(controls)})"
                )
            moved = dict(controls)
            for name, attrs in found.items():
                # a governed control takes the host's value, fitted to its new range
                ranged = controls[name].with_range(**attrs)
                moved[name] = ranged.with_value(raw[name])
            if moved == controls:
                break
            controls = moved
        notes = {}
        for name, c in controls.items():
            if name in refused:
                continue
            fit = c.fit(raw[name])
            if fit.note is not None and _same_number(fit.value, c.value):
                notes[name] = fit.note
            elif fit.note is not None or not _same_number(read[name], c.value):
                notes[name] = (
                    f"{_shown(c, read[name])} became {_shown(c, c.value)} "
                    "as the other controls moved its range"
                )
        return replace(self, controls=tuple(controls.values())), notes, refused

    def draw(self, values: dict | None = None, fixed: dict | None = None) -> Drawn:
        """Settle ``values`` and call the function: what both hosts show."""
        fixed = self._check_fixed(fixed)
        settled, notes, refused = self.fitted(values, fixed)
        drawn = settled.values()
        spec = self.function(**fixed, **drawn)
        if not isinstance(spec, dict):
            raise TypeError(
                f"{self.path} must return a Vega-Lite spec (a dict), "
                f"got {type(spec).__name__}"
            )
        try:
            json.dumps(spec, allow_nan=False)
        except ValueError as exc:
            raise ValueError(
                f"{self.path} returned a spec with NaN or inf: {exc}"
            ) from None
        if self.view is None:
            return Drawn(drawn, settled.controls, spec, None, notes, refused)
        display = self.view(spec, dict(drawn))
        if not isinstance(display, dict):
            raise TypeError(
                f"{self.view_path} must return a dict (spec, text, command), "
                f"got {type(display).__name__}"
            )
        json.dumps(display, allow_nan=False)
        return Drawn(drawn, settled.controls, spec, display, notes, refused)

    def payload(self, fixed: dict | None = None, values: dict | None = None) -> dict:
        """The Contract's ``data-mlbook-live`` JSON (``function``, ``fixed``,
        ``controls``), plus ``ranges`` (a function path or null) and ``spec``
        (the default figure): what the HTML book draws at once and hands to the
        browser's Python on the first change. ``values`` set some controls'
        starting values (clamped)."""
        fixed = self._check_fixed(fixed)
        size = len(json.dumps(fixed, allow_nan=False))
        if size > MAX_FIXED_BYTES:
            raise ValueError(
                f"{self.path}: the fixed data is {size:,} bytes of JSON, over "
                f"{MAX_FIXED_BYTES:,}; pass a summary (fractions, a table), not the "
                "raw measurements"
            )
        self._check_names(values or {})
        first = self.draw({**self.values(), **(values or {})}, fixed)
        if first.refused:
            raise ValueError(f"{self.path}: a starting value {first.refused}")
        out = {
            "function": self.path,
            "ranges": self.ranges_path,
            "fixed": fixed,
            "controls": [c.to_json() for c in first.controls],
            "spec": first.spec,
        }
        if self.view is not None:  # a form: "spec" is its result, "display" shown
            out["view"] = self.view_path
            out["display"] = first.display
        return out

    @classmethod
    def from_payload(cls, payload: dict) -> LiveFigure:
        """The declaration a payload carries (its controls as drawn last)."""
        function = resolve(payload["function"])
        ranges = resolve(payload["ranges"]) if payload.get("ranges") else None
        view = resolve(payload["view"]) if payload.get("view") else None
        controls = tuple(Control.from_json(c) for c in payload["controls"])
        return cls(function, controls, ranges, view=view)


def figure(
    *controls: Control,
    ranges: Callable[..., dict] | None = None,
    view: Callable[[dict, dict], dict] | None = None,
):
    """Declare a live figure: ``@figure(control, ..., ranges=None)`` over its
    function; the function is returned as it is, with ``.live`` set. A form
    also names its ``view`` (see the module docstring)."""

    def declare(function):
        function.live = LiveFigure(function, tuple(controls), ranges, view=view)
        return function

    return declare


def draw_json(payload_json: str, values_json: str) -> str:
    """The browser's entry point (book/_extra/vendor/live.js, under Pyodide):
    the payload and the inputs' values as JSON, a Drawn as JSON back, or
    ``{"error": "Type: message"}`` when the function raises. A draw carries
    ``notes`` and ``refused`` (``LiveFigure.fitted``): the values moved to
    fit, and those not read, which kept the control's value. A FieldError
    (a form's bad input) gives its message alone as ``error`` and as
    ``message``, its ``field``, and the values and controls it was raised
    for (fitted), with their notes and refusals, so the host shows the
    values tried and the message next to the field."""
    try:
        payload = json.loads(payload_json)
        figure = LiveFigure.from_payload(payload)
        fixed = payload.get("fixed") or {}
        drawn = figure.draw(json.loads(values_json), fixed)
        return json.dumps(drawn.to_json(), allow_nan=False)
    except FieldError as exc:
        settled, notes, refused = figure.fitted(json.loads(values_json), fixed)
        return json.dumps(
            {
                "error": exc.message,  # the function's own words, no type name
                "message": exc.message,
                "field": exc.field,
                "values": settled.values(),
                "controls": [c.to_json() for c in settled.controls],
                "notes": notes,
                "refused": refused,
            }
        )
    except Exception as exc:  # noqa: BLE001 (shown under the figure, as the reader's error)
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})
