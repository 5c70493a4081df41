"""The interview page's questions link to the exercises that drill them (issue
24), and every such link lands on an exercise: a record in the registry
whose chapter page carries the exercise under that label. Read from the
sources, so a link added later, or an exercise renamed or removed, is caught
without a build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlbook.exercises import EXERCISES

ROOT = Path(__file__).resolve().parent.parent
INTERVIEW = ROOT / "book" / "interview.md"

# {ref}`label` and {ref}`text <label>`, as MyST writes a cross-reference
REF = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([^`<>]+)>?`")
# an exercise id, as mlbook/judge/_core.py spells one: <page stem>-<n>
EXERCISE_ID = re.compile(r"^[a-z][a-z_]*-[1-9][0-9]*$")
# an exercise directive and its label, as the pages write it (docs/exercises.md)
DIRECTIVE = re.compile(
    r"^(`{3,}|:{3,})\{exercise\}\s*(?P<stars>★+)\s+(?P<title>\S+)\s*\n"
    r"(?::[^\n]*\n)*?:label:\s*(?P<label>\S+)",
    re.M,
)


def sections(text: str) -> dict[str, str]:
    """The interview page's questions: heading -> its text."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.splitlines()[0]: p for p in parts}


def refs(text: str) -> list[str]:
    return [m.strip() for m in REF.findall(text)]


def exercise_links(text: str) -> list[str]:
    """Every link to something that reads as an exercise id."""
    return [r for r in refs(text) if EXERCISE_ID.match(r)]


def pages() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.md")) + sorted(
        (ROOT / "book").glob("*.md")
    )


def directives() -> dict[str, tuple[str, str]]:
    """label -> (the page stem that holds it, its stars), over every page."""
    found = {}
    for page in pages():
        for m in DIRECTIVE.finditer(page.read_text()):
            assert m["label"] not in found, f"{m['label']} is labelled twice"
            found[m["label"]] = (page.stem, m["stars"])
    return found


def test_the_parsers_read_what_the_pages_write():
    # The reference forms MyST accepts, and what must not read as an exercise
    sample = (
        "{ref}`mfu-1`, {ref}`the MFU exercise <mfu-2>`, {numref}`input_pipeline-3`,"
        " {ref}`chapter-mfu`, {ref}`fig-step-pipeline`, {doc}`intro`"
    )
    assert refs(sample) == [
        "mfu-1",
        "mfu-2",
        "input_pipeline-3",
        "chapter-mfu",
        "fig-step-pipeline",
    ]
    assert exercise_links(sample) == ["mfu-1", "mfu-2", "input_pipeline-3"]
    # A directive as docs/exercises.md writes it
    page = "```{exercise} ★★ plan-9\n:label: plan-9\n\nPlan a run.\n```\n"
    (m,) = DIRECTIVE.finditer(page)
    assert (m["stars"], m["title"], m["label"]) == ("★★", "plan-9", "plan-9")


def test_every_exercise_link_resolves_to_a_registered_exercise():
    linked = exercise_links(INTERVIEW.read_text())
    assert linked, "the interview page links no exercise"
    unknown = sorted(set(linked) - set(EXERCISES))
    assert not unknown, (
        f"interview.md links exercises that are not in mlbook.exercises: {unknown}"
    )


def test_every_linked_exercise_is_on_its_chapters_page():
    """The link resolves in the book: the record's chapter page carries the
    exercise directive under that label, with the record's stars."""
    from mlbook.exercises import STARS

    where = directives()
    for ex_id in sorted(set(exercise_links(INTERVIEW.read_text()))):
        record = EXERCISES[ex_id]
        assert ex_id in where, f"{ex_id}: no {{exercise}} directive labels it"
        page, stars = where[ex_id]
        assert page == record.chapter, (
            f"{ex_id}: the directive is on {page}.md, the record says {record.chapter}"
        )
        assert stars == STARS[record.level], (ex_id, stars, record.level)


def test_every_other_reference_on_the_page_is_not_an_exercise():
    """A misspelt exercise link (mfu_1, mfu1) would read as some other label:
    every reference that is not an exercise id names a chapter, a page, a
    figure or an equation."""
    others = [r for r in refs(INTERVIEW.read_text()) if not EXERCISE_ID.match(r)]
    odd = [r for r in others if not re.match(r"^(chapter|page|fig|eq)-[a-z0-9-]+$", r)]
    assert not odd, f"interview.md: references that are neither: {odd}"


@pytest.mark.parametrize(
    "question", [q for q in sections(INTERVIEW.read_text())], ids=lambda q: q[:2]
)
def test_drill_lines_link_exercises_only(question):
    """A question's "Drill it:" line lists exercises and nothing else, each
    once."""
    text = sections(INTERVIEW.read_text())[question]
    for line in re.findall(r"^Drill it:(.*?)(?:\n\n|\Z)", text, re.M | re.S):
        linked = refs(line)
        assert linked and all(EXERCISE_ID.match(r) for r in linked), (question, line)
        assert len(linked) == len(set(linked)), (question, linked)


def test_most_questions_have_exercises_to_drill_them():
    """The questions link to the exercises that drill them; each
    chapter's set grows, so at least five of the six questions do, and more
    than one exercise in all per question on average."""
    drilled = {q: exercise_links(t) for q, t in sections(INTERVIEW.read_text()).items()}
    assert sum(bool(v) for v in drilled.values()) >= 5, drilled
    assert len({x for v in drilled.values() for x in v}) >= len(drilled), drilled
