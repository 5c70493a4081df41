"""The capstone chapter's exercise key: the two defects the mystery loop has
back in, read from the loop's configuration (independently of the record)."""

from helpers.exercise_keys import assert_matches
from mlbook.capstone import experiments as ex
from mlbook.capstone import formulas as cf

INDEPENDENT = {"capstone-1": {"defects": ["fused_adamw", "no_recompute"]}}


def test_keys_match_the_mystery_loop():
    sizes = cf.LadderSizes(
        n_layers=1,
        d_model=64,
        n_heads=2,
        vocab_size=300,
        seq_len=16,
        batch=2,
        small_micro_batch=1,
        steps=2,
        profiled_steps=2,
        probe_budget_s=0.05,
        tokenizer_vocab=300,
        corpus_bytes=60_000,
        log_every=20,
        cpu_threads=1,
    )
    fixed = ex.slow_loop(sizes)
    for fix in cf.ladder_fixes(False, False):
        fixed = ex.apply_fix(fixed, fix.name, sizes)
    mystery = ex.mystery_config(sizes, "cpu")
    assert not mystery.fused_optimizer and mystery.recompute  # the two defects
    assert fixed.fused_optimizer and not fixed.recompute
    assert_matches(INDEPENDENT)
