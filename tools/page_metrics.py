"""How readable the pages' code and prose are, counted on their sources.

    python tools/page_metrics.py            # one row per page, and the total
    python tools/page_metrics.py --json
    python tools/page_metrics.py --narration notebooks/mfu.md   # the sentences

Per page: code cells and code lines; lines wider than the line length; the
lines that call ``print``, ``glue`` or ``glue_values`` (as the issue counted
them: a call split over several lines counts once); and the median and
largest code cell. Cell sizes leave out the cells the page guide exempts: the
``parameters`` cell, the set-up cell (the first code cell after it) and
exercise solutions (between ``solution-start`` and ``solution-end``).

What a reader sees, counted as the HTML shows a page with its solutions
folded: the *visible* code lines are those of code cells that neither hide
nor remove their input and sit outside solutions; of them, the *plumbing*
lines are every line of a ``glue``/``glue_values`` call, of a ``formats=``
argument, of a dictionary of format strings and of an ``assert`` (a check
belongs in a hidden cell, and in the checks box in words). The *prose* is the page's
markdown outside code cells, headings, exercises, solutions and every other
fenced directive (captions, dropdowns, margin notes, the "How this page checks
itself" box); a *narrating* sentence is one of it that matches ``NARRATION``,
the list of words that talk about the page's own checks, timing method,
budgets, payloads or build rather than the subject.
tests/test_page_pattern.py holds the pages to the goals with these counts.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from format_pages import code_cells, pages  # noqa: E402 (after the path it is on)

LINE_LENGTH = 88
GLUE_CALLS = {"glue", "glue_values"}
SOLUTION = re.compile(r"```\{solution-start\}.*?```\{solution-end\}", re.S)
HIDDEN_TAGS = {"hide-input", "remove-input", "remove-cell"}

# Words that make a sentence of the prose about the page rather than the
# subject: its checks (asserts, tolerances, bars), how it times and repeats
# a measurement, its budgets and payloads, its cells, glue and tests, and the
# build. A sentence on the subject may use "cell", "budget" or "test" in
# another sense rarely enough that the list keeps them narrow.
NARRATION = tuple(
    re.compile(p, re.I)
    for p in (
        r"\bassert",
        r"\b(?:code |the |this |a |each |every |next |its )cells?\b",
        r"\bglue",
        r"\btolerances?\b",
        r"\bre-?measur|\bmeasured again\b|\bmeasures? again\b",
        r"\b(?:time|seconds?|page'?s?|its) budgets?\b|\bbudget_s\b",
        r"\bpayloads?\b",
        r"\b(?:this|the book's|the) build\b",
        r"\bstated,? not\b|\bnot (?:asserted|held to)\b",
        r"\bpytest\b|\b(?:the|its|our|this page's) tests?\b(?! (?:set|loss|split))",
        r"\bthread[- ]clock|\bperf_counter\b|\bprocess_time\b|\bother processes\b",
        r"\banother process\b|\bothers share\b|\bprocesses share\b",
        r"\b(?:its|their|own|the step's|that thread's) CPU time\b|\bthread'?s own\b",
        r"\bshared machine\b",
        r"\bretr(?:y|ies|ied)\b|\brepeated blocks?\b",
        r"\b(?:this|the|no|each|every|a) page(?:'s)?\b(?! (?:cache|table|size|fault))",
        r"\bthe prose\b|\bthe figure is `|\bwithin the run's noise\b",
        r"\b(?:alternating|interleaved|timed) rounds\b|\bbest of \S+ (?:runs|rounds)\b",
        r"\bkinds? of (?:the )?peak\b|\bof the kind\b",
        r"\b(?:the|this) run's (?:own )?spread\b|\bits own (?:timings|steps)' spread\b",
    )
)
ROLE = re.compile(r"\{[a-z:-]+\}`[^`]*`")
INLINE_CODE = re.compile(r"``?[^`]+``?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$({\[])")


@dataclass(frozen=True)
class PageMetrics:
    page: str
    code_cells: int
    code_lines: int
    long_lines: int  # wider than LINE_LENGTH
    glue_lines: int
    print_lines: int
    median_cell: float  # lines, exempt cells left out
    largest_cell: int
    visible_lines: int  # code lines a reader sees with solutions folded
    plumbing_lines: int  # of them, glue calls and format dictionaries
    sentences: int  # of the prose body (see the module's docstring)
    narrating: int  # of them, about the page rather than the subject


def _call_lines(source: str, names: set[str]) -> int:
    """Lines that call one of ``names``."""
    pattern = re.compile(r"\b(?:" + "|".join(sorted(names)) + r")\(")
    return sum(1 for line in source.splitlines() if pattern.search(line))


def sized_cells(text: str) -> list[list[str]]:
    """The code cells held to the size goals (exempt cells left out)."""
    cells = code_cells(text)
    lines = text.split("\n")
    solution_lines = set()
    for m in SOLUTION.finditer(text):
        first = text.count("\n", 0, m.start())
        solution_lines.update(range(first, first + m.group(0).count("\n") + 1))
    sized, after_parameters = [], False
    for cell in cells:
        options = lines[max(0, cell.start - 3) : cell.start]
        if any("parameters" in o for o in options):
            after_parameters = True
            continue
        if after_parameters:  # the set-up cell
            after_parameters = False
            continue
        if cell.start in solution_lines:
            continue
        sized.append(cell.lines)
    return sized


def _tagged_cells(page: Path) -> list[tuple[str, set[str], bool]]:
    """Each code cell's source, its tags, and whether it sits in a solution."""
    import jupytext

    out, in_solution = [], False
    for cell in jupytext.read(page).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("```{solution-start}"):
                    in_solution = True
                elif line.startswith("```{solution-end}"):
                    in_solution = False
            continue
        if cell.cell_type == "code":
            tags = set(cell.metadata.get("tags", []))
            out.append((cell.source, tags, in_solution))
    return out


def plumbing_lines(source: str) -> int:
    """Lines of ``source`` that glue, format or check: every line of a glue
    call, of a ``formats=`` argument, of a dictionary whose values are all
    format strings ("{:.1%}") or format functions, and of an ``assert``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an IPython magic
        return 0
    lines: set[int] = set()

    def span(node):
        lines.update(range(node.lineno, node.end_lineno + 1))

    def is_format(value):
        return isinstance(value, ast.Lambda) or (
            isinstance(value, ast.Constant)
            and isinstance(value.value, str)
            and re.search(r"\{[^{}]*:[^{}]*\}", value.value)
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):  # a check, told in the checks box
            span(node)
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if name in GLUE_CALLS:
                span(node)
            for kw in node.keywords:
                if kw.arg == "formats":
                    span(kw.value)
                    lines.add(kw.value.lineno)
        elif isinstance(node, ast.Dict) and node.values:
            if all(is_format(v) for v in node.values):
                span(node)
    return len(lines)


def visible_code(page: Path) -> list[str]:
    """The sources of the code cells a reader sees in the HTML, solutions
    folded: no hide/remove tag, not inside a solution."""
    return [
        s for s, tags, sol in _tagged_cells(page) if not tags & HIDDEN_TAGS and not sol
    ]


def prose_sentences(text: str) -> list[str]:
    """The sentences of a page's prose body: markdown outside the front
    matter, code cells, headings, exercises, solutions and every fenced
    directive (``` or :::, with their captions and dropdowns)."""
    lines = text.split("\n")
    if lines and lines[0] == "---":
        lines = lines[lines.index("---", 1) + 1 :]
    kept, fence, in_solution = [], None, False
    for line in lines:
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```{solution-start}"):
                in_solution = True
            if stripped.startswith("```{solution-end}"):
                in_solution = False
            m = re.match(r"^(`{3,}|:{3,})", stripped)
            if m:
                fence = m.group(1)
                if (
                    stripped != fence
                    and re.fullmatch(r"(`{3,}|:{3,})\{[^}]*\}.*", stripped) is None
                ):
                    pass
                continue
            if (
                in_solution
                or stripped.startswith(("#", "+++", "("))
                and stripped.endswith(")=")
            ):
                kept.append("")
                continue
            if stripped.startswith("#") or stripped == "+++":
                kept.append("")
                continue
            kept.append(line)
        elif stripped == fence or (
            stripped.startswith(fence[0])
            and set(stripped) == {fence[0]}
            and len(stripped) >= len(fence)
        ):
            fence = None
    sentences = []
    for para in "\n".join(kept).split("\n\n"):
        para = " ".join(para.split())
        if not para:
            continue
        para = INLINE_CODE.sub("CODE", ROLE.sub("X", para))
        sentences += [s for s in SENTENCE_END.split(para) if re.search(r"[A-Za-z]", s)]
    return sentences


def narrating(sentence: str) -> bool:
    return any(p.search(sentence) for p in NARRATION)


def metrics(page: Path) -> PageMetrics:
    text = page.read_text()
    cells = code_cells(text)
    sources = [c.source for c in cells]
    sizes = [len(c) for c in sized_cells(text)] or [0]
    return PageMetrics(
        page=page.stem,
        code_cells=len(cells),
        code_lines=sum(len(c.lines) for c in cells),
        long_lines=sum(len(ln) > LINE_LENGTH for c in cells for ln in c.lines),
        glue_lines=sum(_call_lines(s, GLUE_CALLS) for s in sources),
        print_lines=sum(_call_lines(s, {"print"}) for s in sources),
        median_cell=statistics.median(sizes),
        largest_cell=max(sizes),
        visible_lines=sum(len(s.splitlines()) for s in visible_code(page)),
        plumbing_lines=sum(plumbing_lines(s) for s in visible_code(page)),
        sentences=len(sentences := prose_sentences(text)),
        narrating=sum(narrating(s) for s in sentences),
    )


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--narration", type=Path, help="print a page's narrating sentences")
    args = ap.parse_args(argv)
    if args.narration:
        for s in prose_sentences(args.narration.read_text()):
            if narrating(s):
                print("-", s)
        return 0
    rows = [metrics(p) for p in pages()]
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        return 0
    head = (
        "page",
        "cells",
        "lines",
        f">{LINE_LENGTH}",
        "glue",
        "print",
        "median",
        "max",
        "visible",
        "plumbing",
        "sentences",
        "narrating",
    )
    print(" | ".join(head))
    for r in rows:
        print(
            f"{r.page} | {r.code_cells} | {r.code_lines} | {r.long_lines} | "
            f"{r.glue_lines} | {r.print_lines} | {r.median_cell:g} | {r.largest_cell}"
            f" | {r.visible_lines} | {r.plumbing_lines}"
            f" ({_share(r.plumbing_lines, r.visible_lines)})"
            f" | {r.sentences} | {r.narrating} ({_share(r.narrating, r.sentences)})"
        )
    lines = sum(r.code_lines for r in rows)
    bookkeeping = sum(r.glue_lines + r.print_lines for r in rows)
    print(
        f"all | {sum(r.code_cells for r in rows)} | {lines} | "
        f"{sum(r.long_lines for r in rows)} | glue+print {bookkeeping} "
        f"({bookkeeping / lines:.0%} of code lines)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
