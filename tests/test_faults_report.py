"""The faults chapter's report functions: short printed lines, and sentences
chosen from what was measured."""

import numpy as np
import pytest

from mlbook.faults import formulas as faults
from mlbook.faults import report as faults_report


def _det(fast_distinct=5, safe_distinct=1, fast_ms=40.0, safe_ms=10.0, step_ratio=1.0):
    op = {"repeats": 12, "max_diff": 1e-3 if fast_distinct > 1 else 0.0}
    return {"same_seed": True, "other_seed": False, "op": "index_put_(accumulate=True)",
            "n": 1_000_000, "buckets": 10, "steps": 100,
            "fast": {**op, "distinct": fast_distinct, "median_s": fast_ms / 1e3},
            "safe": {"repeats": 12, "max_diff": 0.0, "distinct": safe_distinct,
                     "median_s": safe_ms / 1e3},
            "step_s": {False: 1e-3, True: step_ratio * 1e-3},
            "step_device": "CPU: test, 1 thread", "step_ratio": step_ratio}


def _text(rep, key):
    return rep.values[key][0]


def test_determinism_sentences_follow_the_measurement():
    raced = faults_report.determinism_report(_det(), "CPU: test, 2 threads")
    assert "5 different results" in _text(raced, "det_fast_clause")
    quiet = faults_report.determinism_report(_det(fast_distinct=1), "CPU: test, 2 threads")
    assert "same result in all 12" in _text(quiet, "det_fast_clause")
    assert "different results" not in _text(quiet, "det_fast_clause")
    assert "faster" in _text(raced, "det_cost_clause")
    slower = faults_report.determinism_report(_det(safe_ms=80.0), "x")
    assert "faster" not in _text(slower, "det_cost_clause")
    even = faults_report.determinism_report(_det(safe_ms=41.0), "x")
    assert "no measurable difference" in _text(even, "det_cost_clause")


def test_determinism_step_cost_and_takeaway_follow_the_ratio():
    free = faults_report.determinism_report(_det(step_ratio=1.02), "x")
    assert "no measurable cost" in _text(free, "det_step_clause")
    assert "no measurable cost" in _text(free, "det_takeaway")
    costly = faults_report.determinism_report(_det(step_ratio=1.6), "x")
    assert "no measurable cost" not in _text(costly, "det_step_clause")
    assert "CPU too" in _text(costly, "det_takeaway")
    safe_raced = faults_report.determinism_report(_det(safe_distinct=3), "x")
    assert "3 different results" in _text(safe_raced, "det_safe_clause")


def test_report_lines_are_short():
    times = faults.simulate_step_times(64, 0.1, 0.05, steps=50, seed=0, straggler_rank=17)
    for rep in (faults_report.llama3_report(),
                faults_report.straggler_report(times),
                faults_report.determinism_report(_det(), "CPU: Intel(R) Xeon(R) Processor, 2 threads")):
        assert rep.lines and all(len(line) <= faults_report.WIDTH for line in rep.lines), rep.lines


def test_llama3_report_matches_the_log():
    rep = faults_report.llama3_report()
    log = faults.LLAMA3_405B_LOG
    assert rep.values["l3_unexpected"] == (log.unexpected, "d")
    assert rep.values["l3_rowsum"][0] == log.unexpected
    assert rep.values["l3_mtbi_h"][0] == pytest.approx(54 * 24 / 419)


def test_straggler_report_monte_carlo_agrees():
    times = faults.simulate_step_times(64, 0.1, 0.05, steps=2000, seed=0, straggler_rank=17)
    rep = faults_report.straggler_report(times)
    assert rep.values["st_mc_ratio"][0] == pytest.approx(1.0, abs=0.01)
    assert rep.values["st_slow80"][0] == pytest.approx(0.25)
    assert rep.values["st_mc_steps"][0] == 2000
