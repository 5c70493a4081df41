"""Answer boxes under the book's exercises (a Sphinx extension, listed in
_config.yml's ``sphinx.extra_extensions`` as ``bookext.exercises``).

Keyed on the exercise's label: for every ``{exercise}`` whose label is an id
in ``mlbook.exercises.EXERCISES``, the answer boxes go at the end of the
exercise box, with the exercise's verdict data (key, tolerance, mistakes and
their hints, from ``mlbook.exercises.spec``) written into the page as JSON.
book/_extra/vendor/exercises.js checks the boxes in the reader's browser from
that data alone, so the page works opened from file://, with no server.

- numeric answers: one box per answer, with its unit, and a Check button;
- a choice: one checkbox per option;
- a prediction (kind "predict"): boxes for the prediction; the cells tagged
  ``after-prediction`` that follow stay folded until the reader enters one
  or opens them, and the prediction is shown next to what the run measured,
  with the reason the record gives (the values come from the cell's
  ``outcome(...)`` output, below);
- a change-the-code exercise: how to check the function in JupyterLab;
- a diagnosis (kind "diagnose"): boxes as for a computation, under the
  artifact the statement shows.

How to call ``check()`` in JupyterLab is said once a chapter, in its
exercises' introduction, not under each exercise; only an exercise whose
answer has no box here (a function, a measurement) says where it is checked.

An exercise on this run's own measurement takes its key from the executed
solution cell's ``answer_key(...)`` output, and a prediction the run's values
from its measuring cell's ``outcome(...)`` output (one mime type, rendered
here), since only the run knows what it measured. An exercise label with
no record, or a measured exercise whose solution shows no key, is a build
warning, and the book builds with warnings as errors.
"""

from __future__ import annotations

import html
import json

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

from bookext.mime import register

logger = logging.getLogger(__name__)

KEY_MIME = "application/vnd.mlbook.exercise-key+json"  # mlbook.exercises.MIME_TYPE
KEY_ATTRIBUTE = "mlbook_exercise_key"
FOLD_TAG = "after-prediction"  # a cell tag: folded until the prediction above


@register(KEY_MIME)
def render_key(renderer, data):
    """The key table of a solution cell, carrying its verdict data for the
    answer boxes (read back in ``add_answer_boxes``)."""
    content = (
        data.content if isinstance(data.content, dict) else json.loads(data.content)
    )
    node = nodes.container(classes=["mlbook-answer-key"])
    node[KEY_ATTRIBUTE] = json.dumps(content["spec"])
    if content.get("html"):  # a key's table; a prediction's run shows nothing here
        node += nodes.raw("", content["html"], format="html")
    return [node]


def _is_exercise(node) -> bool:
    from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

    return isinstance(node, exercise_node | exercise_enumerable_node)


def _json_for_script(data: dict) -> str:
    """JSON that cannot end the <script> element it sits in."""
    return json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")


def _box(exercise_id: str, answer: dict) -> str:
    e = html.escape
    box_id = f"{exercise_id}--{answer['name']}"
    if answer["type"] == "choice":
        options = "".join(
            f'<label class="mlbook-option"><input type="checkbox" '
            f'name="{e(answer["name"])}" value="{e(o["name"])}"> {e(o["label"])}'
            f" <code>{e(o['name'])}</code></label>"
            for o in answer["options"]
        )
        return (
            f'<fieldset class="mlbook-answer mlbook-choice" '
            f'data-answer="{e(answer["name"])}"><legend>{e(answer["label"])} '
            f"(<code>{e(answer['name'])}</code>)</legend>{options}"
            f'<output class="mlbook-verdict" aria-live="polite"></output></fieldset>'
        )
    mode = "numeric" if answer["type"] == "integer" else "decimal"
    # what to type, where a unit alone does not say it (read_number's rules)
    example = {"fraction": "0.25 or 25%", "%": "25 (for 25 %)"}.get(answer["unit"])
    placeholder = f' placeholder="{e(example)}"' if example else ""
    return (
        f'<div class="mlbook-answer" data-answer="{e(answer["name"])}">'
        f'<label for="{e(box_id)}">{e(answer["label"])} '
        f"(<code>{e(answer['name'])}</code>)</label> "
        f'<input id="{e(box_id)}" name="{e(answer["name"])}" type="text" '
        f'inputmode="{mode}" autocomplete="off" spellcheck="false"{placeholder}> '
        f'<span class="mlbook-unit">{e(answer["unit"])}</span> '
        f'<output class="mlbook-verdict" for="{e(box_id)}" aria-live="polite">'
        f"</output></div>"
    )


def answer_block(spec: dict, measured_key: bool = False) -> str:
    """The HTML under one exercise: its boxes, its data, and what an answer
    without a box needs."""
    e = html.escape
    ex_id, kind = spec["id"], spec["kind"]
    parts = [
        f'<div class="mlbook-answers" data-exercise="{e(ex_id)}" '
        f'data-kind="{e(kind)}">',
        f'<script type="application/json" class="mlbook-exercise-spec">'
        f"{_json_for_script(spec)}</script>",
    ]
    if spec["answers"]:
        boxes = "".join(_box(ex_id, a) for a in spec["answers"])
        if kind == "predict":
            buttons = (
                '<button type="submit" class="mlbook-check">Record my prediction'
                '</button> <button type="button" class="mlbook-reveal">Show the '
                "result without predicting</button>"
            )
        else:
            buttons = '<button type="submit" class="mlbook-check">Check</button>'
        parts.append(
            f'<form class="mlbook-answer-form" novalidate>{boxes}'
            f'<div class="mlbook-buttons">{buttons}</div></form>'
        )
        if kind == "predict":  # why the run came out as it did, once predicted
            parts.append('<p class="mlbook-because" aria-live="polite"></p>')
    if kind == "predict":
        note = "Write your prediction down before you read on."
    elif spec["code"] and not spec["answers"]:
        call = f'check("{spec["id"]}", {spec["code"]})'
        note = (
            "No box here: a function is checked by running it, on known cases and "
            "on generated ones, which this page does not do. Write it in "
            "JupyterLab, then <code>from mlbook.exercises import check</code> and "
            f"<code>{e(call)}</code>."
        )
    elif spec["code"]:
        call = f'check("{spec["id"]}", {spec["code"]})'
        note = f"The function has no box: in JupyterLab, <code>{e(call)}</code>."
    elif measured_key:
        note = (
            "These boxes check against what this book's own run measured; in "
            f"JupyterLab, against your run's: <code>{e(spec['usage'])}</code>."
        )
    elif kind == "measure":
        note = (
            "No box here: this exercise is a measurement on your own machine, "
            "whose numbers only your run knows. Run it in JupyterLab, explain what "
            "you see, and compare with the solution."
        )
    else:
        note = ""
    if note:
        parts.append(f'<p class="mlbook-lab">{note}</p>')
    parts.append("</div>")
    return "".join(parts)


def add_answer_boxes(app, doctree) -> None:
    """doctree-read: the answer block at the end of every registered exercise."""
    from mlbook.exercises import EXERCISES, spec

    docname = app.env.docname
    page = docname.rsplit("/", 1)[-1]
    keys = {}
    for node in doctree.findall(nodes.container):
        if KEY_ATTRIBUTE in node.attributes:
            data = json.loads(node[KEY_ATTRIBUTE])
            keys[data["id"]] = data
    for node in list(doctree.findall(_is_exercise)):
        label = node.get("label", "")
        record = EXERCISES.get(label)
        if record is None:
            logger.warning(
                f"exercise {label!r} has no record in mlbook.exercises: label it "
                f"with its id ('{page}-<n>') and add the record to "
                f"mlbook/{page}/exercises.py (docs/exercises.md)",
                location=node,
            )
            continue
        if record.chapter != page:
            logger.warning(
                f"exercise {label!r} is on page {page!r}, but its id names the "
                f"page {record.chapter!r}",
                location=node,
            )
            continue
        if not record.fields and record.code is None:  # a measurement, explained
            node += nodes.raw("", answer_block(spec(label)), format="html")
            continue
        if record.measured:
            data = keys.get(label)
            if data is None:
                logger.warning(
                    f"exercise {label!r} is checked against this run's measurement, "
                    f"but no solution cell shows answer_key({label!r}, ...)",
                    location=node,
                )
                continue
        elif record.kind == "predict":  # the run's values, where its cell gave them
            data = keys.get(label) or spec(label)
        else:
            data = spec(label)
        node += nodes.raw("", answer_block(data, bool(record.measured)), format="html")


class SolutionTitles(SphinxPostTransform):
    """A solution's whole title opens it. sphinx-exercise makes most of the
    title ("Solution to Exercise (★ mfu-2)") a link to the exercise, so a
    click on it jumped there instead of opening the dropdown; the title keeps
    its words and loses the link (the exercise sits just above it), and
    book/_static/exercises.css lets a click on any word of it reach the
    title, the only target togglebutton.js opens the solution for.

    A reference to an exercise reads as its id: the exercises are not
    numbered (``:nonumber:``, their id is their number, in the book and in
    JupyterLab alike), and sphinx-exercise would write the bare word
    "Exercise" for {ref}`mfu-2`."""

    default_priority = 25  # after sphinx-exercise's titles (20-22)

    def run(self, **kwargs) -> None:
        from sphinx_exercise.nodes import solution_node

        registry = getattr(self.env, "sphinx_exercise_registry", {})
        for node in self.document.findall(solution_node):
            title = node.children[0] if node.children else None
            if not isinstance(title, nodes.title):
                continue
            # the words themselves, no element around them: togglebutton.js
            # opens the dropdown for a click whose target is the title itself
            for ref in list(title.findall(nodes.reference)):
                ref.replace_self(ref.children)
        for ref in self.document.findall(nodes.reference):
            target = (ref.get("refuri", "") or "#" + ref.get("refid", "")).rpartition(
                "#"
            )[2]
            entry = registry.get(target)
            if entry and entry["type"] == "exercise" and ref.astext() == "Exercise":
                inner = ref.children[0] if ref.children else None
                if isinstance(inner, nodes.inline):
                    inner.children = []
                    inner += nodes.Text(target)
                else:
                    ref.children = [nodes.Text(target)]


def add_script(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: exercises.js on the pages that have answer blocks."""
    if doctree is not None and "mlbook-answers" in context.get("body", ""):
        app.add_js_file("../vendor/exercises.js", defer="defer")


def setup(app):
    app.connect("doctree-read", add_answer_boxes)
    app.add_post_transform(SolutionTitles)
    app.connect("html-page-context", add_script)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
