"""The JupyterLab host of a live figure (mlbook.common.live).

``show_live(function, fixed=None, **defaults)`` displays ONE output: a mime
bundle that carries

- the widget view (``application/vnd.jupyter.widget-view+json``), which
  JupyterLab shows: the figure's controls as ipywidgets, above an Output
  that holds the figure, redrawn on every change as
  ``application/vnd.vegalite.v5+json`` (JupyterLab's own Vega-Lite
  renderer draws it);
- ``application/vnd.mlbook.live+json``: the declaration, the fixed data and
  the default spec (``LiveFigure.payload``), which the HTML book renders
  (tools/bookext/live.py) as plain HTML inputs and a chart that the browser
  redraws with Pyodide;
- the default spec as ``application/vnd.vegalite.v5+json``, and a line of
  text, for a front end without widgets (the book's build strips the widget
  view and its state from the page, so a downloaded notebook opens on it).

A number (a slider's or a number's) is typed into a text box, read by the
figure's own rules (``Control.read``: "2,5" and "abc" are not numbers); a
slider drags beside its box. Each control has a line under it: the note
naming the rule that moved a value to fit ("at most 1,000,000: 1e9 became
1,000,000"), or why a value was not read, the control keeping its value.

A form (declared with ``view=``) shows its view instead of a bare spec: the
command line and the text in a ``<pre>``, then the view's spec; a bad input
(the function's FieldError) shows its message under the control it names,
and under the form, and the view, which is for other values, gives way to a
line saying so until the fields are fixed.

Every change runs ``LiveFigure.draw``: the values read and fitted, the
ranges applied (the widgets' min, max and step follow), the function called.
An exception shows its message under the figure and the last good figure
stays, as in the HTML book.
"""

from __future__ import annotations

import math
from dataclasses import replace

from mlbook.common import live as live_core


def _log_exponents(control) -> dict:
    return {
        "min": math.log10(control.min),
        "max": math.log10(control.max),
        "step": math.log10(control.step),
    }


def _box_text(value) -> str:
    """A number as its box shows it: 30, not 30.0; 1e-09; 0.4."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _widget(control):
    """The ipywidget a reader sets one control with: a number in a text box
    (read by ``Control.read``, never by the widget), a choice or a checkbox
    as itself."""
    import ipywidgets as W

    common = dict(
        description=control.label,
        style={"description_width": "initial"},
    )
    kind = control.kind
    if kind in ("slider", "number"):
        return W.Text(value=_box_text(control.value), continuous_update=False, **common)
    if kind == "select-slider":
        return W.SelectionSlider(
            options=list(control.options),
            value=control.value,
            continuous_update=False,
            **common,
        )
    if kind == "dropdown":
        return W.Dropdown(options=list(control.options), value=control.value, **common)
    return W.Checkbox(value=control.value, indent=False, **common)


def _drag(control):
    """A slider's handle beside its box (no readout: the box is the value)."""
    import ipywidgets as W

    common = dict(readout=False, continuous_update=False)
    if control.scale == "log":
        return W.FloatLogSlider(
            value=control.value, base=10, **_log_exponents(control), **common
        )
    cls = W.IntSlider if control.integral else W.FloatSlider
    return cls(
        value=control.value,
        min=control.min,
        max=control.max,
        step=control.step,
        **common,
    )


def _set(widget, drag, control) -> None:
    """Give ``widget`` (and a slider's ``drag``) the range and value of
    ``control`` (all at once, so traitlets checks a range that moved wholly
    above or below the old one only at the end)."""
    if control.kind in ("slider", "number"):
        # the reader's text stays as typed ("2,400,000", "15e12") while it is
        # the value drawn; a value that moved, or was refused, shows as drawn
        try:
            same = control.read(widget.value) == control.value
        except live_core.Unreadable:
            same = False
        if not same:
            widget.value = _box_text(control.value)
    else:
        widget.value = control.value
    if drag is None:
        return
    with drag.hold_trait_notifications():
        if control.scale == "log":
            for attr, value in _log_exponents(control).items():
                setattr(drag, attr, value)
        else:
            drag.min, drag.max, drag.step = control.min, control.max, control.step
        drag.value = control.value


def set_outputs(out, *shown: dict | tuple[dict, dict]) -> None:
    """Make ``shown`` the outputs of the Output widget ``out``, replacing
    what it held: each a bundle (mime type -> data, as
    ``display(..., raw=True)`` takes) or a (bundle, metadata) pair.

    The outputs are set as the widget's state, never captured with
    ``with out:``. Under papermill, captured output makes nbclient's stand-in
    for the Output widget send a state update to the kernel on the shell
    socket while the cell runs; jupyter_client sends it through a synchronous
    shadow of the asyncio socket, which can swallow the wake-up of the cell's
    reply, so papermill then waits out its whole cell timeout for a reply it
    already holds. Setting the state sends nothing back."""
    pairs = [item if isinstance(item, tuple) else (item, {}) for item in shown]
    out.outputs = tuple(
        {"output_type": "display_data", "data": dict(data), "metadata": dict(meta)}
        for data, meta in pairs
    )


def _spec_bundle(spec: dict) -> dict:
    title = spec.get("title", {})
    text = title.get("text", "") if isinstance(title, dict) else str(title)
    return {live_core.VEGALITE_MIME_TYPE: spec, "text/plain": f"<live figure: {text}>"}


def _view_text(display: dict) -> str:
    """A form's command line and text, as the book prints them."""
    lines = []
    if display.get("command"):
        lines.append(f"$ {display['command']}")
    if display.get("text"):
        lines.append(display["text"])
    return "\n".join(lines)


def _view_bundle(display: dict) -> dict:
    """A form's view without widgets: its spec, and its text as plain text."""
    out = {"text/plain": _view_text(display)}
    if display.get("spec"):
        out[live_core.VEGALITE_MIME_TYPE] = display["spec"]
    return out


STALE = (
    "No plan for these values: the budget, its command line and its chart "
    "come back once the fields marked above are fixed."
)


class LiveView:
    """The widgets of one live figure and what redraws them. ``draws``
    counts finished draws; ``error`` holds the last exception's message;
    ``lines`` each control's line (its note, or why a value was not read,
    or a form's message for it); ``stale``: a form's view is hidden, its
    values refused."""

    def __init__(self, function, fixed: dict | None = None, **defaults):
        import ipywidgets as W

        declaration = getattr(function, "live", None)
        if not isinstance(declaration, live_core.LiveFigure):
            raise ValueError(
                f"{getattr(function, '__qualname__', function)!r} is not a live figure "
                "(declare it with @mlbook.common.live.figure)"
            )
        self.fixed = dict(fixed or {})
        self.payload = declaration.payload(self.fixed, defaults)
        self.figure = declaration.with_controls(self.payload["controls"])
        self.controls = {c.name: _widget(c) for c in self.figure.controls}
        sliders = [c for c in self.figure.controls if c.kind == "slider"]
        self.drags = {c.name: _drag(c) for c in sliders}
        self.output = W.Output()
        self.message = W.HTML()
        self.draws, self.error, self.spec = 0, None, self.payload["spec"]
        self.display = self.payload.get("display")  # a form's view, else None
        self.stale = False
        self.lines = {name: W.HTML() for name in self.controls}
        self._busy = False
        for widget in self.controls.values():
            widget.observe(self.redraw, names="value")
        for name, drag in self.drags.items():
            drag.observe(lambda change, n=name: self._dragged(n), names="value")
        cells = [
            W.VBox(
                [W.HBox([w, self.drags[n]]) if n in self.drags else w, self.lines[n]]
            )
            for n, w in self.controls.items()
        ]
        self.box = W.VBox(
            [
                W.HBox(cells, layout={"flex_flow": "row wrap"}),
                self.output,
                self.message,
            ]
        )
        self._show(self.spec, self.display)
        self.draws = 1

    def _show(self, spec: dict, display: dict | None = None) -> None:
        """The figure (a form: its text, then its figure, if any) as the
        Output widget's outputs: set as its state, never captured
        (``set_outputs`` says why: captured output can hang papermill)."""
        if display is None:
            set_outputs(self.output, _spec_bundle(spec))
            return
        text = _view_text(display)
        shown = [
            {
                "text/html": f'<pre class="mlbook-live-text">{_escape(text)}</pre>',
                "text/plain": text,
            }
        ]
        if display.get("spec"):
            shown.append(_spec_bundle(display["spec"]))
        set_outputs(self.output, *shown)

    def values(self) -> dict:
        return {name: w.value for name, w in self.controls.items()}

    def _dragged(self, name: str) -> None:
        """A slider dragged: its box takes the value, which draws."""
        if not self._busy:
            self.controls[name].value = _box_text(self.drags[name].value)

    def _say(self, notes: dict, refused: dict, field=None, message=None) -> None:
        for name, line in self.lines.items():
            said = [("error", refused.get(name))]
            said.append(("error", message if name == field else None))
            said.append(("note", notes.get(name)))
            line.value = "<br>".join(
                f'<span class="mlbook-live-{kind}">{_escape(text)}</span>'
                for kind, text in said
                if text
            )

    def _settle_widgets(self, controls) -> None:
        for control in controls:
            _set(self.controls[control.name], self.drags.get(control.name), control)

    def redraw(self, _change=None) -> None:
        """Draw for the widgets' values; moving them to their fitted values
        and ranges does not draw again."""
        if self._busy:
            return
        self._busy = True
        try:
            drawn = self.figure.draw(self.values(), self.fixed)
            self._settle_widgets(drawn.controls)
        except live_core.FieldError as exc:  # a form's refusal: the values tried
            settled, notes, refused = self.figure.fitted(self.values(), self.fixed)
            self._settle_widgets(settled.controls)
            self.figure = settled
            self.error = exc.message
            self.message.value = (
                f'<pre class="mlbook-live-error">{_escape(exc.message)}</pre>'
            )
            self._say(notes, refused, exc.field, exc.message)
            if not self.stale:
                set_outputs(self.output, {"text/plain": STALE})
                self.stale = True
            self.draws += 1
            return
        except Exception as exc:  # noqa: BLE001 (the reader's error, shown under the figure)
            self.error = f"{type(exc).__name__}: {exc}"
            self.message.value = (
                f'<pre class="mlbook-live-error">{_escape(self.error)}</pre>'
            )
            self.draws += 1
            return
        finally:
            self._busy = False
        self.figure = replace(self.figure, controls=drawn.controls)
        self.error, self.spec, self.display = None, drawn.spec, drawn.display
        self.message.value = ""
        self._say(drawn.notes, drawn.refused)
        self.stale = False
        self._show(drawn.spec, drawn.display)
        self.draws += 1

    def bundle(self) -> dict:
        """The one output the cell displays (see the module docstring)."""
        return {
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.box.model_id,
            },
            live_core.MIME_TYPE: self.payload,
            **(
                _view_bundle(self.payload["display"])
                if self.payload.get("display")
                else _spec_bundle(self.payload["spec"])
            ),
        }


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def show_live(function, fixed: dict | None = None, **defaults) -> None:
    """Display the live figure ``function`` (declared with
    ``@mlbook.common.live.figure``) with its controls: in JupyterLab the
    widgets, in the HTML book the book's own inputs. ``defaults`` set a
    control's starting value (clamped to its range); ``fixed`` passes the
    function's build-time keyword arguments."""
    from IPython.display import display

    view = LiveView(function, fixed, **defaults)
    display(view.bundle(), raw=True)
