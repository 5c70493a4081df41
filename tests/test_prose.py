"""The prose's roles as text for JupyterLab (mlbook.prose): glued values as
the HTML formats them, citations in the HTML's author-year style, references
to other pages as their targets' titles.

The expected texts are written out by hand, from what the test build's HTML
shows ("[Young, 1974]", "[Hoffmann et al., 2022, Kaplan et al., 2020]",
"Plan a run") and from Python's format specification; tests/test_lab.py
compares JupyterLab's rendered prose with the HTML itself.
"""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.formatters import format_display_data

from conftest import examples
from mlbook import prose, show

PROPERTY_COVERS = {
    "mlbook.prose.glue_text",
    "mlbook.prose.citation",
    "mlbook.prose.reference",
    "mlbook.prose.document",
    "mlbook.prose.texts",
}


@pytest.mark.parametrize(
    "body, value, text",
    [
        ("mc_waste:.2%", 0.005234, "0.52%"),
        ("tokens:,.0f", 1234567.8, "1,234,568"),
        ("gpus:,", 16384, "16,384"),
        ("sigma:.1f", 2.25, "2.2"),  # round half to even, as Python formats
        ("ratio", 1.5, "1.5"),
        ("device", "AMD EPYC (2 threads)", "AMD EPYC (2 threads)"),
        ("n:d", 7, "7"),
    ],
)
def test_glue_text_formats_as_the_html_does(body, value, text):
    assert prose.glue_text(body, {body.split(":")[0]: value}) == text


def test_glue_text_of_a_name_not_glued_yet_is_none():
    assert prose.glue_text("mc_waste:.2%", {}) is None
    assert prose.glue_text("device:.2f", {"device": "H100"}) is None  # not a number


@examples(50)
@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
    st.sampled_from([".2%", ".1f", ",.0f", ".3g", ".2e", ",.2f", ".4f"]),
)
def test_glue_text_is_pythons_format_of_the_value(value, spec):
    assert prose.glue_text(f"x:{spec}", {"x": value}) == format(value, spec)


@pytest.mark.parametrize(
    "keys, text",
    [
        ("young1974first", "[Young, 1974]"),
        ("daly2006higher", "[Daly, 2006]"),
        ("kokolis2024revisiting", "[Kokolis et al., 2024]"),
        # the HTML orders a group as its bibliography does, not as written
        (
            "kaplan2020scaling,hoffmann2022chinchilla",
            "[Hoffmann et al., 2022, Kaplan et al., 2020]",
        ),
    ],
)
def test_citations_read_as_the_html_writes_them(keys, text):
    assert prose.citation(keys) == text


def test_two_authors_an_editor_and_latex(tmp_path):
    bib = tmp_path / "refs.bib"
    bib.write_text(
        "@article{a, author={Jane Doe and Ann Roe}, title={T}, year={2001}}\n"
        '@book{b, editor={M{\\"u}ller, Karl}, title={E}, year={1999}}\n'
    )
    assert prose.citation("a", bib) == "[Doe and Roe, 2001]"
    assert prose.citation("b", bib) == "[Müller, 1999]"
    assert prose.citation("a,missing", bib) is None
    assert prose.citation("a", tmp_path / "none.bib") is None


BIB_KEYS = sorted(prose._bibliography(str(prose.BIB), prose.BIB.stat().st_mtime_ns))


@examples(30)
@given(st.lists(st.sampled_from(BIB_KEYS), min_size=1, max_size=4, unique=True))
def test_a_citation_does_not_depend_on_the_order_of_its_keys(keys):
    text = prose.citation(",".join(keys))
    assert text == prose.citation(",".join(reversed(keys)))
    assert text.startswith("[") and text.endswith("]")
    assert not any(key in text for key in keys)  # no key shows, only authors
    for key in keys:
        assert prose.citation(key)[1:-1] in text


def test_references_to_other_pages_read_as_their_titles():
    assert prose.reference("page-plan", "mfu") == "Plan a run"
    assert prose.reference("chapter-cadence", "faults") == (
        "Checkpoint cadence and resumable state"
    )
    assert prose.reference("mfu-2", "interview") == "Exercise mfu-2"
    assert prose.reference("input pipeline chapter <chapter-input-pipeline>", "x") == (
        "input pipeline chapter"
    )
    # the page's own targets and unknown labels are jupyterlab-myst's
    assert prose.reference("chapter-mfu", "mfu") is None
    assert prose.reference("no-such-label", "mfu") is None


@examples(20)
@given(st.sampled_from(sorted(prose._pages())))
def test_every_label_resolves_from_other_pages_only(page):
    _, labels = prose._pages()[page]
    for label, title in labels.items():
        assert prose.reference(label, page) is None
        assert prose.reference(label, "some-other-page") == title
        assert title and "`" not in title and "$" not in title


@examples(20)
@given(st.sampled_from(["notation", "intro", "plan", "mfu", "../book/notation"]))
def test_doc_reads_as_the_page_title(target):
    expected = {
        "notation": "Notation and conventions",
        "intro": "Introduction: one training step as an assembly line",
        "plan": "Plan a run",
        "mfu": "MFU and the FLOPs of a training step",
        "../book/notation": "Notation and conventions",
    }
    assert prose.document(target) == expected[target]
    assert prose.document("nothing-here") is None


ROLE = st.one_of(
    st.tuples(st.just("glue:text"), st.sampled_from(["a:.1f", "b", "missing:.2%"])),
    st.tuples(st.just("cite"), st.sampled_from(BIB_KEYS + ["nokey"])),
    st.tuples(st.just("ref"), st.sampled_from(["page-plan", "chapter-mfu", "x"])),
    st.tuples(st.just("doc"), st.sampled_from(["notation", "nowhere"])),
    st.tuples(st.just("eval"), st.just("1 + 1")),  # not a role it resolves
)


@examples(50)
@given(st.lists(ROLE, max_size=8))
def test_texts_answers_what_it_can_as_json(roles):
    glued = {"a": 2.25, "b": "H100"}
    saved = dict(show.GLUED)
    show.GLUED.clear()
    show.GLUED.update(glued)
    try:
        answer = prose.texts(json.dumps({"page": "mfu", "roles": roles}))
        data, _ = format_display_data(answer)
    finally:
        show.GLUED.clear()
        show.GLUED.update(saved)
    assert data["application/json"] == dict(answer)  # what JupyterLab receives
    expected = {
        ("glue:text", "a:.1f"): "2.2",
        ("glue:text", "b"): "H100",
        ("ref", "page-plan"): "Plan a run",
        ("doc", "notation"): "Notation and conventions",
    }
    for role, body in roles:
        key = f"{role}`{body}"
        if (role, body) in expected:
            assert answer[key] == expected[role, body]
        elif role == "cite" and body != "nokey":
            assert answer[key] == prose.citation(body)
        else:
            assert key not in answer
    assert set(answer) <= {f"{r}`{b}" for r, b in roles}


def test_glue_values_keeps_what_it_glues(monkeypatch):
    import myst_nb

    monkeypatch.setattr(myst_nb, "glue", lambda *a, **k: None)
    monkeypatch.setattr(show, "GLUED", {})
    show.glue_values(x=0.25, n=3)
    assert show.GLUED == {"x": 0.25, "n": 3}
    assert prose.glue_text("x:.0%", show.GLUED) == "25%"
    assert math.isclose(float(prose.glue_text("x", show.GLUED)), 0.25)


def test_chapter_numbers_follow_sphinx_numbered_toctrees(tmp_path):
    """A page's chapter number is its place in its numbered part (each part
    a toctree numbered from 1, as Sphinx numbers them); a page outside the
    numbered parts has none."""
    toc = tmp_path / "_toc.yml"
    toc.write_text(
        "format: jb-book\nroot: book/intro\nparts:\n"
        "  - caption: A\n    chapters:\n      - file: book/notation\n"
        "  - caption: B\n    numbered: true\n    chapters:\n"
        "      - file: notebooks/mfu\n      - file: notebooks/cadence\n"
        "  - caption: C\n    numbered: true\n    chapters:\n"
        "      - file: book/plan\n"
    )
    found = {p: prose._chapter(p, toc) for p in ("mfu", "cadence", "plan", "notation")}
    assert found == {"mfu": "1", "cadence": "2", "plan": "1", "notation": ""}
    assert prose._chapter("mfu", tmp_path / "none.yml") == ""
    answer = prose.texts(json.dumps({"page": "x", "roles": [["chapter", "cadence"]]}))
    assert answer == {"chapter`cadence": prose._chapter("cadence")}
