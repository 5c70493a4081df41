"""The HTML book's live figures: ``application/vnd.mlbook.live+json``.

A live cell (mlbook.plotting.live.show_live) displays a bundle whose
``application/vnd.mlbook.live+json`` entry is the figure's payload
(mlbook.common.live.LiveFigure.payload: ``function``, ``ranges``,
``fixed``, ``controls``, ``spec``). Here it becomes one element

    <div class="mlbook-live" data-mlbook-live="{payload as JSON}">
      controls: one <input> or <select> per control, name = the control's name
      <div class="mlbook-live-chart"></div>   the chart, drawn by vega-embed
      <p class="mlbook-live-message">          an exception's message
      <p class="mlbook-live-hint">             opened from file://: how to go live

and the page gets book/_extra/vendor/live.js (served as <book>/vendor/live.js),
which draws the default spec at once with the vendored vega-lite and, on the
first change of a control, runs the same function in Pyodide (see live.js for
the attributes it keeps: data-values, data-result, data-state, data-draws).

Every control is followed by two lines, hidden until live.js writes them:

      <p class="mlbook-live-note" data-for="{name}" hidden>         the rule
          that moved a value to fit ("at most 1,000,000: 1e9 became 1,000,000")
      <p class="mlbook-live-field-error" data-for="{name}" hidden>  why a
          value was not read ("2,5" is not a number), or a form's refusal

and the input names both in ``aria-describedby``.

A form (a payload with ``view``, such as the plan page's planner) gets
``mlbook-live-form`` on its element and, above the chart, the default view's
command line and text
(``<pre class="mlbook-live-command">``, ``<pre class="mlbook-live-text">``),
written here so that the page shows them without JavaScript too.

Each named input holds the value itself (for a log slider not its logarithm,
for a select-slider not its index), a number in a text box, with min, max
and step as the Contract gives them; sliders get a companion range input
without a name, in steps (k = 0 .., the grid index), for dragging. The
ipywidgets view beside the payload is not rendered here: the book's build
strips it and its stored state (tools/bookbuild/execution.py).
"""

from __future__ import annotations

import html
import json
import math

from docutils import nodes

from bookext.mime import register

MIME_TYPE = "application/vnd.mlbook.live+json"
SCRIPT = "../vendor/live.js"  # relative to _static/, where Sphinx resolves scripts
HINT = (
    "Opened from a file, this figure shows its default setting and its controls "
    "are off. To move them, run <code>make serve</code> in the repository and open "
    "the address it prints."
)


def _attr(value) -> str:
    return html.escape(str(value), quote=True)


def _text(value) -> str:
    """A value as its input shows it: the number itself, in its shortest
    exact form, as live.js writes it once the figure is live (30, not 30.0)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


def _option_key(option) -> str:
    return option if isinstance(option, str) else json.dumps(option)


def _grid_index(control: dict) -> tuple[int, int]:
    """(k of the value, k of max) on a slider's grid."""
    lo, hi, step, value = (
        control["min"],
        control["max"],
        control["step"],
        control["value"],
    )
    if control["scale"] == "log":
        span = math.log(hi / lo) / math.log(step)
        k = round(math.log(value / lo) / math.log(step))
    else:
        span = (hi - lo) / step
        k = round((value - lo) / step)
    last = math.ceil(span - 1e-6)  # max is the last position, on the grid or not
    return min(max(k, 0), last), last


def _lines(name: str, ident: str) -> str:
    """The control's two lines: the note naming the rule that moved its value
    (clamped, snapped), and the message for a value it could not read or a
    form's refusal of it. Hidden until live.js writes them."""
    return (
        f'<p class="mlbook-live-note" id="{_attr(ident)}-note" '
        f'data-for="{_attr(name)}" aria-live="polite" hidden></p>'
        f'<p class="mlbook-live-field-error" id="{_attr(ident)}-error" '
        f'data-for="{_attr(name)}" role="alert" hidden></p>'
    )


def _control_html(control: dict, uid: str) -> str:
    name, label, kind = control["name"], control["label"], control["kind"]
    ident = f"{uid}-{name}"
    lines = _lines(name, ident)
    described = f'aria-describedby="{_attr(ident)}-note {_attr(ident)}-error"'
    head = f'<label for="{_attr(ident)}">{html.escape(label)}</label>'
    if kind == "checkbox":
        checked = " checked" if control["value"] else ""
        return (
            f'<div class="mlbook-live-control" data-kind="checkbox">'
            f'<input type="checkbox" id="{_attr(ident)}" name="{_attr(name)}" '
            f"{described}{checked}>{head}{lines}</div>"
        )
    parts = [head]
    if kind in ("select-slider", "dropdown"):
        options = control["options"]
        if kind == "select-slider":
            k = options.index(control["value"])
            parts.append(
                f'<input type="range" class="mlbook-live-drag" min="0" '
                f'max="{len(options) - 1}" step="1" value="{k}" '
                f'aria-label="{_attr(label)}">'
            )
        chosen = control["value"]
        items = "".join(
            f'<option value="{_attr(_option_key(o))}"{" selected" * (o == chosen)}>'
            f"{html.escape(str(o))}</option>"
            for o in options
        )
        parts.append(
            f'<select id="{_attr(ident)}" name="{_attr(name)}" {described}>'
            f"{items}</select>"
        )
    else:
        if kind == "slider":
            k, last = _grid_index(control)
            parts.append(
                f'<input type="range" class="mlbook-live-drag" min="0" max="{last}" '
                f'step="1" value="{k}" aria-label="{_attr(label)}">'
            )
        # a text box, not type="number": a number box hands the page "" for
        # "abc" and 25 for "2,5", where the reader must be told what was not
        # read; live.js steps it with the arrow keys
        attrs = " ".join(
            f'{key}="{_attr(_text(control[key]))}"'
            for key in ("min", "max", "step", "value")
        )
        parts.append(
            f'<input type="text" inputmode="decimal" autocomplete="off" '
            f'spellcheck="false" id="{_attr(ident)}" name="{_attr(name)}" '
            f"{described} {attrs}>"
        )
    inner = "".join(parts) + lines
    return f'<div class="mlbook-live-control" data-kind="{_attr(kind)}">{inner}</div>'


def _view_html(display: dict) -> str:
    """A form's command line and text, as its default view gives them."""
    command = display.get("command")
    text = display.get("text")
    out = ""
    if command is not None:
        out += f'<pre class="mlbook-live-command">$ {html.escape(command)}</pre>'
    if text is not None:
        out += f'<pre class="mlbook-live-text">{html.escape(text)}</pre>'
    return out


def live_html(payload: dict, uid: str) -> str:
    """The element for one live figure or form (see the module docstring)."""
    form = payload.get("view") is not None
    controls = "".join(_control_html(c, uid) for c in payload["controls"])
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    kind = "mlbook-live mlbook-live-form" if form else "mlbook-live"
    chart = '<div class="mlbook-live-chart"></div>'
    said = (
        '<p class="mlbook-live-status" aria-live="polite"></p>'
        '<p class="mlbook-live-message" role="alert" hidden></p>'
    )
    # a form: its messages under the fields, then what the command prints
    stale = (
        '<p class="mlbook-live-stale" hidden>No plan for these values: the '
        "budget, its command line and its chart come back once the fields "
        "marked above are fixed.</p>"
    )
    body = (
        said + stale + _view_html(payload.get("display") or {}) + chart
        if form
        else chart + said
    )
    return (
        f'<div class="{kind}" id="{_attr(uid)}" data-mlbook-live="{_attr(data)}">'
        f'<div class="mlbook-live-controls">{controls}</div>'
        f"{body}"
        f'<p class="mlbook-live-hint" hidden>{HINT}</p>'
        "</div>"
    )


@register(MIME_TYPE)
def render_live(renderer, data) -> list[nodes.Element]:
    payload = data.content
    if isinstance(payload, (str, bytes)):
        payload = json.loads(payload)
    uid = f"mlbook-live-{data.cell_index}-{data.output_index}"
    renderer.add_js_file("mlbook_live", SCRIPT, {"defer": "defer"})
    return [nodes.raw("", live_html(payload, uid), format="html")]
