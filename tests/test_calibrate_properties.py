"""Properties of the machine file, its predictions and the planner's use of
it, over drawn measurements."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_calibrate import gpu_file, m, synthetic

from conftest import examples
from mlbook.calibrate import cli, resources
from mlbook.calibrate import formulas as cal
from mlbook.plan.cli import machine_inputs, machine_lines

PROPERTY_COVERS = {
    "mlbook.calibrate.formulas.from_dict",
    "mlbook.calibrate.formulas.load",
    "mlbook.calibrate.formulas.check_writable",
    "mlbook.calibrate.formulas.dumps",
    "mlbook.calibrate.formulas.kept",
    "mlbook.calibrate.formulas.label",
    "mlbook.calibrate.formulas.step_lower_bound_s",
    "mlbook.calibrate.formulas.predictions",
    "mlbook.calibrate.formulas.reference_mfu",
    "mlbook.calibrate.formulas.step_of_mamf",
    "mlbook.calibrate.formulas.display",
    "mlbook.calibrate.formulas.plan_inputs",
    "mlbook.calibrate.formulas.check_mfu",
    "mlbook.calibrate.formulas.bounded_bytes",
    "mlbook.calibrate.resources.available_bytes",
    "mlbook.calibrate.cli.parser",
    "mlbook.calibrate.cli.command",
    "mlbook.calibrate.cli.main",
    "mlbook.plan.cli.machine_inputs",
    "mlbook.plan.cli.machine_lines",
}

positive = st.floats(1e-9, 1e12, allow_nan=False)


@st.composite
def spreads(draw, unit="s"):
    lo = draw(positive)
    hi = lo * draw(st.floats(1.0, 3.0))
    mid = draw(st.floats(lo, hi))
    return m(mid, lo, hi, unit)


@examples(40)
@given(st.data())
def test_a_file_round_trips_and_every_median_lies_in_its_range(data):
    d = synthetic()
    for name in list(d["measurements"]):
        d["measurements"][name] = data.draw(
            spreads(d["measurements"][name]["unit"]), label=name
        )
    machine = cal.from_dict(d)
    again = cal.from_dict(json.loads(cal.dumps(machine)))
    assert again.measurements == machine.measurements
    for x in again.measurements.values():
        assert x.min <= x.median <= x.max and x.spread >= 0
    rows = cal.predictions(machine)
    assert len(rows) == 7 and all(r.predicted > 0 and r.ratio > 0 for r in rows)
    mfu = cal.reference_mfu(machine)
    assert mfu is None  # the synthetic CPU file gives no peak


@examples(40)
@given(flops=positive, ceiling=positive, step=positive, spread=st.floats(0, 1))
def test_the_lower_bound_holds_exactly_when_the_step_is_slow_enough(
    flops, ceiling, step, spread
):
    bound = cal.step_lower_bound_s(flops, ceiling)
    assert bound == pytest.approx(flops / ceiling)
    d = synthetic()
    d["reference"] |= {"flops_per_token": flops, "tokens_per_step": 1}
    d["measurements"]["mamf_fp32"] = m(ceiling, unit="FLOP/s")
    slow = step * (1 + spread)
    d["measurements"]["reference_step"] = m(slow, step, slow)
    machine = cal.from_dict(d)
    row = cal.predictions(machine)[0]
    # the step's share of its ceiling is the bound over the median step
    assert cal.step_of_mamf(machine) == pytest.approx(bound / slow)
    margin = (1 + spread) - 1
    assert row.holds == (step >= bound * (1 - margin) * (1 - 1e-12)) or math.isclose(
        step, bound * (1 - margin), rel_tol=1e-9
    )


@examples(40)
@given(mamf=st.floats(1e12, 2e15), mfu=st.floats(0.01, 1.0))
def test_the_planner_refuses_exactly_the_mfus_above_the_share(mamf, mfu):
    machine = cal.from_dict(gpu_file(mamf))
    inputs = cal.plan_inputs(machine, "H100")
    assert inputs.applies and inputs.mamf_share == pytest.approx(mamf / 989e12)
    if mfu > inputs.mamf_share:
        with pytest.raises(ValueError, match="above the calibrated MAMF share"):
            cal.check_mfu(inputs, mfu)
    else:
        cal.check_mfu(inputs, mfu)
    other = cal.plan_inputs(machine, "A100")
    assert not other.applies and other.used == ()
    cal.check_mfu(other, mfu)  # a file of another device bounds nothing
    assert "used nothing" in machine_lines(other)[0]
    assert any(line.startswith("  used:") for line in machine_lines(inputs))


@examples(20)
@given(name=st.sampled_from(["m.json", "x y.json", ".m.json"]))
def test_a_writable_path_is_checked_without_a_trace(name):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        assert cal.check_writable(path) == path
        assert list(Path(tmp).iterdir()) == []
        with pytest.raises(cal.MachineFileError, match="does not exist"):
            cal.check_writable(Path(tmp) / "no" / name)
        path.mkdir()
        with pytest.raises(cal.MachineFileError, match="is a directory"):
            cal.check_writable(path)


@examples(20)
@given(version=st.integers(-3, 10), caps=st.sampled_from([{}, {"X": "AVX2"}]))
def test_a_file_of_another_version_is_refused_and_caps_label_it(version, caps):
    with tempfile.TemporaryDirectory() as tmp:
        d = synthetic()
        d["schema_version"] = version
        d["torch"]["isa_caps"] = {"ONEDNN_MAX_CPU_ISA": caps.get("X")}
        folder = Path(tmp) / "name"
        folder.mkdir()
        (folder / "machine.json").write_text(json.dumps(d))
        if version != cal.SCHEMA_VERSION:
            with pytest.raises(cal.MachineFileError, match="schema_version"):
                cal.load(folder / "machine.json")
            with pytest.raises(ValueError):
                machine_inputs(str(folder / "machine.json"), "H100")
            return
        machine = cal.kept(tmp)["name"]
        label = cal.label("name", machine)
        assert ("capped build" in label) == bool(caps)


@examples(20)
@given(value=positive, unit=st.sampled_from(sorted(cal.UNITS.values())))
def test_display_divides_by_the_units_scale(value, unit):
    shown, name = cal.display(value, unit)
    scale = cal.DISPLAY_UNITS[unit][0]
    assert shown * scale == pytest.approx(value) and name


@examples(10)
@given(quick=st.booleans(), out=st.sampled_from(["nowhere/m.json", "a/b/c.json"]))
def test_the_command_refuses_a_path_before_it_measures(quick, out):
    args = ["--out", out] + (["--quick"] if quick else [])
    assert cli.parser().parse_args(args).quick == quick
    assert cli.command(args).endswith("python -m mlbook calibrate " + " ".join(args))
    with contextlib.redirect_stderr(io.StringIO()) as buffer:
        assert cli.main(args) == 2
    err = buffer.getvalue().strip().splitlines()
    assert len(err) == 1 and out in err[0] and "does not exist" in err[0]


MIB = 2**20


@examples(60)
@given(
    st.floats(0, 2**40),
    st.integers(1, 512),
    st.integers(0, 512),
    st.one_of(st.none(), st.floats(2**20, 2**40)),
)
def test_a_buffer_is_what_it_needs_never_what_the_cache_asks(
    want, floor_mib, more, free
):
    """Between the floor and the cap, whatever the cache asks for, and never
    more than a sixteenth of the free memory; whole MiB, at least one."""
    floor, cap = floor_mib * MIB, (floor_mib + more) * MIB
    n = cal.bounded_bytes(want, floor, cap, free)
    assert n % MIB == 0 and MIB <= n <= cap
    if free is not None:
        assert n <= max(MIB, free / 16)
    if free is None or free / 16 >= cap:
        assert n == max(floor, min(cap, int(want) // MIB * MIB))


@examples(20)
@given(st.integers(0, 2**40), st.sampled_from(["MemTotal: 9 kB\n", ""]))
def test_the_free_memory_is_memavailable(kib, before):
    text = f"{before}MemFree: 1 kB\nMemAvailable: {kib} kB\nCached: 2 kB\n"
    assert resources.available_bytes(text) == kib * 1024
