"""Every error of ``python -m mlbook plan`` is one line with exit status 2
that names the flag, the value as typed, the flag's unit and the rule, and
the near miss where there is one. Each case is the command run as a reader
runs it (a subprocess), beside a plan that works."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.plan import cli

BASE = ["--model", "Llama-3-70B", "--tokens", "15e12", "--gpu", "H100 SXM"]
BASE += ["--gpus", "1024"]

# (arguments added to BASE, what the line must say, in order)
CASES = [
    # a negative number after a flag is that flag's value, not an option
    (["--tokens", "-15e12"], ["--tokens -15e12:", "tokens", "from 1 to 1e15"]),
    # a finite number whose plan would overflow: the flag's own limit
    (["--tokens", "1e308"], ["--tokens 1e308:", "tokens", "to 1e15"]),
    # minutes, as typed: not restart_s, not -60 seconds
    (["--restart-min", "-1"], ["--restart-min -1:", "from 0 to 1,440 minutes"]),
    (
        ["--interval-min", "0"],
        ["--interval-min 0:", "above 0", "minutes", "Young's optimum"],
    ),
    (["--mfu", "40"], ["--mfu 40:", "fraction of peak", "0.001 to 1", "40 % is 0.4"]),
    (["--gpu", "h100"], ["--gpu h100:", "did you mean H100?"]),
    (["--model", "llama-3-70b"], ["--model llama-3-70b:", "did you mean Llama-3-70B?"]),
    (["--gpus", "0"], ["--gpus 0:", "whole number from 1", "GPUs"]),
    (["--gpus", "2.5"], ["--gpus 2.5:", "not a whole number"]),
    (["--mfu", "0,4"], ["--mfu 0,4:", "Write decimals with a point: 0.4"]),
    (["--tokens", "abc"], ["--tokens abc:", "not a number"]),
    (
        ["--failures-per-gpu-hour", "-1e-5"],
        ["--failures-per-gpu-hour -1e-5:", "failures per GPU-hour"],
    ),
    (["--storage-gb-per-s", "0"], ["--storage-gb-per-s 0:", "GB/s"]),
    (["--zero", "4"], ["--zero 4:", "0, 1, 2 or 3"]),
    (["--recompute", "Full"], ["--recompute Full:", "did you mean full?"]),
    (["--tp", "3"], ["--tp:", "must divide", "heads"]),
]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlbook", "plan", *args], capture_output=True, text=True
    )


def test_the_base_plans():
    out = run(*BASE)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("args, said", CASES, ids=lambda x: " ".join(x)[:30])
def test_an_error_names_the_flag_its_unit_and_the_rule(args, said):
    out = run(*BASE, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith("python -m mlbook plan: error: "), line
    at = 0
    for part in said:
        found = line.find(part, at)
        assert found >= 0, f"{part!r} not in {line!r} (after position {at})"
        at = found + len(part)
    assert (
        "restart_s" not in line and "interval_s" not in line and "useful_s" not in line
    )


def test_grouped_digits_read_as_the_number():
    """15,000,000,000,000 tokens is 15e12, as the answer boxes read it."""
    grouped = run(*BASE[:3], "15,000,000,000,000", *BASE[4:], "--json")
    plain = run(*BASE, "--json")
    assert grouped.returncode == 0 and grouped.stdout == plain.stdout


def test_an_mfu_just_above_1_gets_no_percentage_hint():
    line = run(*BASE, "--mfu", "1.001").stderr
    assert "--mfu 1.001: MFU, a fraction of peak, must be from 0.001 to 1" in line
    assert "%" not in line


PROPERTY_COVERS = {"mlbook.plan.cli.check_args"}


@examples(100)
@given(st.sampled_from(sorted(cli.LIMITS)), st.floats(-1e18, 1e18), st.booleans())
def test_check_args_takes_a_flags_range_and_refuses_beyond_it(dest, x, inside):
    """Any value inside a flag's range passes; outside it, the line names
    the flag and states the range in the flag's unit."""
    limit = cli.LIMITS[dest]
    if inside:  # a value in the range, from x
        x = limit.lo + (abs(x) % 1) * (limit.hi - limit.lo) or limit.hi
    value = round(x) if limit.whole else x
    args = cli.parser().parse_args(BASE)
    setattr(args, dest, value)
    said = cli.check_args(args)
    if limit.holds(value):
        assert said is None
    else:
        flag = "--" + dest.replace("_", "-")
        assert said.startswith(f"{flag} ") and limit.rule() in said, said
