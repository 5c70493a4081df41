"""An exercise's key as a solution cell shows it.

``answer_key(exercise_id, **measured)`` is a table of the answers (what each
asks, the key, the unit). In JupyterLab it renders as that table. It also
carries the exercise's verdict data under the book's own mime type, so that
for an exercise on this run's measurement the HTML book checks the answer
boxes against the numbers this run measured (tools/bookext/exercises.py
reads it from the executed solution cell).
"""

from __future__ import annotations

from mlbook.judge._core import Choice, Integer, get, spec

MIME_TYPE = "application/vnd.mlbook.exercise-key+json"


def _format(f, value) -> str:
    if isinstance(f, Choice):
        return ", ".join(f.options[o] for o in value)
    if isinstance(f, Integer):
        return f"{value:,}"
    return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.4g}"


class AnswerKey:
    """The key of one exercise, displayed as a table (see ``answer_key``)."""

    def __init__(self, exercise_id: str, **measured):
        self.exercise = ex = get(exercise_id)
        if not ex.checked:
            raise ValueError(f"{exercise_id} is a {ex.kind} exercise: it has no key")
        self.spec = spec(exercise_id, **measured)
        self.values = {a["name"]: a["key"] for a in self.spec["answers"]}
        self.rows = [
            {
                "answer": name,
                "asks for": f.label,
                "key": _format(f, self.values[name]),
                "unit": f.unit,
            }
            for name, f in ex.fields.items()
        ]

    def _repr_mimebundle_(self, include=None, exclude=None):
        from mlbook.show import table

        html = table(self.rows, caption=f"{self.exercise.id}: the key").to_html()
        text = "\n".join(f"{r['answer']} = {r['key']} {r['unit']}" for r in self.rows)
        return {
            "text/plain": f"{self.exercise.id}: the key\n{text}",
            "text/html": html,
            MIME_TYPE: {"spec": self.spec, "html": html},
        }

    def __repr__(self) -> str:
        return f"<answer key of {self.exercise.id}: {self.values}>"


def answer_key(exercise_id: str, **measured) -> AnswerKey:
    """The key of ``exercise_id`` as a table, for the end of its solution
    cell. An exercise on the reader's own measurement takes this run's
    measured inputs (the same names ``check`` takes)."""
    return AnswerKey(exercise_id, **measured)
