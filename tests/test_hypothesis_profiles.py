"""The hypothesis profiles of tests/conftest.py apply to every property test:
"ci" (the default) runs the examples each test asks for, `--hypothesis-profile
long` ten times as many, and no test fixes its own count."""

import ast
from pathlib import Path

import pytest
import test_input_pipeline_properties as pipeline_props
import test_mfu_properties as mfu_props
import test_plan
from hypothesis import settings

from conftest import CI_EXAMPLES, examples

TESTS = Path(__file__).resolve().parent


def test_the_profiles():
    ci, long = settings.get_profile("ci"), settings.get_profile("long")
    assert (ci.max_examples, long.max_examples) == (50, 500)
    assert ci.deadline is None and long.deadline is None


def test_examples_scale_with_the_loaded_profile():
    scale = settings.default.max_examples / CI_EXAMPLES
    assert examples(CI_EXAMPLES).max_examples == settings.default.max_examples
    assert examples(10).max_examples == max(1, round(10 * scale))
    with pytest.raises(ValueError, match="positive integer"):
        examples(0)


def _given_settings(fn):
    return fn._hypothesis_internal_use_settings.max_examples


def test_the_loaded_profile_reaches_the_tests():
    scale = settings.default.max_examples / CI_EXAMPLES
    some_mfu = next(
        getattr(mfu_props, n) for n in dir(mfu_props) if n.startswith("test_")
    )
    assert _given_settings(some_mfu) == round(50 * scale)
    assert _given_settings(
        pipeline_props.test_bpe_round_trips_any_text_and_hashes_stably
    ) == round(10 * scale)
    assert _given_settings(test_plan.test_more_tokens_more_days_more_failures) == (
        round(40 * scale)
    )


def test_no_property_test_fixes_its_own_example_count():
    """Each @given test takes its count from examples(n) (or a module-level
    name bound to it), so that the profiles apply to it."""
    offenders = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        from_examples = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "examples"
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "max_examples":
                offenders.append(f"{path.name}:{node.value.lineno} max_examples=")
            if not isinstance(node, ast.FunctionDef):
                continue
            decs = [ast.unparse(d) for d in node.decorator_list]
            if not any(d.startswith("given(") for d in decs):
                continue
            if not any(d.startswith("examples(") or d in from_examples for d in decs):
                offenders.append(f"{path.name}::{node.name}")
    assert not offenders, offenders
