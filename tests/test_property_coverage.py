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
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PROPERTY_COVERS"
                                                    for t in node.targets):
                for name in ast.literal_eval(node.value):
                    covers[name] = path.name
    return covers


def public_functions() -> set[str]:
    mods = all_modules()
    found = set()
    for name in torch_free_modules():
        tree = ast.parse(mods[name].read_text())
        found |= {f"{name}.{n.name}" for n in tree.body
                  if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    return found


def test_every_calculator_has_property_tests():
    missing = sorted(public_functions() - set(declared_covers()))
    assert not missing, "public torch-free functions without property tests:\n  " + "\n  ".join(missing)


def test_covers_name_real_functions():
    stale = sorted(set(declared_covers()) - public_functions())
    assert not stale, f"PROPERTY_COVERS names functions that do not exist: {stale}"
