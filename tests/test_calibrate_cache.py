"""A page that reads the kept calibrations under book/measured is executed
again when one of them changes: the files are part of its cache key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookbuild import caching, paths

ROOT = Path(__file__).resolve().parent.parent
JOB = {"cpus": None, "env": {}}


def page_text(code: str) -> str:
    return (
        "---\njupytext:\n  text_representation:\n    extension: .md\n"
        "    format_name: myst\nkernelspec:\n  display_name: Python 3\n"
        "  language: python\n  name: python3\n---\n\n# P\n\n"
        f"```{{code-cell}} ipython3\n{code}\n```\n"
    )


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    files = {
        "mlbook/__init__.py": "",
        "mlbook/reader.py": 'KEPT = "book/measured"\n',
        "mlbook/other.py": "X = 1\n",
        "book/measured/a/machine.json": '{"a": 1}\n',
        "book/measured/b/machine.json": '{"b": 1}\n',
        "notebooks/reads.md": page_text("from mlbook import reader"),
        "notebooks/plain.md": page_text("from mlbook import other"),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def key(root: Path, page: str) -> tuple[str, dict]:
    inputs = caching.cache_inputs(root / "notebooks" / page, {}, {}, JOB)
    return caching.key_of(inputs), inputs


def test_a_page_that_reads_the_kept_files_depends_on_each(tree):
    before, inputs = key(tree, "reads.md")
    assert {"book/measured/a/machine.json", "book/measured/b/machine.json"} <= set(
        inputs
    )
    (tree / "book/measured/b/machine.json").write_text('{"b": 2}\n')
    assert key(tree, "reads.md")[0] != before
    (tree / "book/measured/c").mkdir()
    (tree / "book/measured/c/machine.json").write_text("{}\n")
    assert "book/measured/c/machine.json" in key(tree, "reads.md")[1]


def test_a_page_that_does_not_read_them_does_not(tree):
    before, inputs = key(tree, "plain.md")
    assert not any(k.startswith("book/measured") for k in inputs)
    (tree / "book/measured/a/machine.json").write_text('{"a": 2}\n')
    assert key(tree, "plain.md")[0] == before


def test_the_machine_page_is_keyed_on_the_kept_calibrations():
    files, _ = caching.package_dependencies(ROOT / "book" / "machine.md")
    kept = caching.data_dependencies(ROOT / "book" / "machine.md", files)
    on_disk = sorted((ROOT / "book" / "measured").rglob("*.json"))
    assert on_disk and set(on_disk) <= set(kept)
