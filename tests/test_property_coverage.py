"""Every public function of every torch-free module has property tests.

A test module declares what its hypothesis tests cover with a module-level
set of qualified names::

    PROPERTY_COVERS = {"mlbook.mfu.formulas.mfu", "mlbook.mfu.formulas.hfu"}

This test reads those sets (with ast, importing nothing) and fails on any
public function of a torch-free module that none of them names, so a new
calculator without property tests fails the suite.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_layering import all_modules, torch_free_modules

TESTS = Path(__file__).resolve().parent


def declared_covers() -> dict[str, str]:
    covers = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "PROPERTY_COVERS" for t in node.targets
            ):
                for name in ast.literal_eval(node.value):
                    covers[name] = path.name
    return covers


def public_functions() -> set[str]:
    mods = all_modules()
    found = set()
    for name in torch_free_modules():
        tree = ast.parse(mods[name].read_text())
        found |= {
            f"{name}.{n.name}"
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
        }
    return found


def test_every_calculator_has_property_tests():
    missing = sorted(public_functions() - set(declared_covers()))
    assert not missing, (
        "public torch-free functions without property tests:\n  " + "\n  ".join(missing)
    )


def _given_tests_call(path: Path) -> set[str]:
    """Names called (f(...) or mod.f(...)) inside the module's @given tests."""
    called = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Call)
            and getattr(d.func, "id", getattr(d.func, "attr", "")) == "given"
            for d in node.decorator_list
        ):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    called.add(
                        f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                    )
                elif isinstance(
                    sub, (ast.Name, ast.Attribute)
                ):  # passed as a value (a table of callables)
                    called.add(sub.id if isinstance(sub, ast.Name) else sub.attr)
    return called


def test_covered_functions_are_exercised_by_given_tests():
    """A name in PROPERTY_COVERS must be used inside a @given test of the same
    module, so declaring coverage without a property test fails."""
    by_file: dict[str, set[str]] = {}
    for name, fname in declared_covers().items():
        by_file.setdefault(fname, set()).add(name)
    missing = []
    for fname, names in by_file.items():
        called = _given_tests_call(next(TESTS.rglob(fname)))
        missing += [n for n in names if n.rsplit(".", 1)[1] not in called]
    assert not missing, (
        "declared in PROPERTY_COVERS but used by no @given test:\n  "
        + "\n  ".join(sorted(missing))
    )


def test_covers_name_real_functions():
    stale = sorted(set(declared_covers()) - public_functions())
    assert not stale, f"PROPERTY_COVERS names functions that do not exist: {stale}"
