"""The machine file: its schema, the predictions held against
it, each bad input of ``python -m mlbook calibrate``, and ``plan --machine``.

Synthetic files are written out here by hand; one real quick calibration
(about 15 s on a 2-core CPU) is checked against the schema."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbook.calibrate import cli
from mlbook.calibrate import formulas as cal

ROOT = Path(__file__).resolve().parent.parent
NAMES = (
    "mamf_fp32",
    "memory_bandwidth",
    "allreduce_alpha",
    "allreduce_beta",
    "checkpoint_write_bandwidth",
    "fsync",
    "tokenizer_throughput",
    "loader_throughput",
    "reference_step",
)
UNITS = {
    "mamf_fp32": "FLOP/s",
    "mamf_bf16": "FLOP/s",
    "memory_bandwidth": "bytes/s",
    "allreduce_alpha": "s",
    "allreduce_beta": "s/byte",
    "checkpoint_write_bandwidth": "bytes/s",
    "fsync": "s",
    "tokenizer_throughput": "tokens/s",
    "loader_throughput": "tokens/s",
    "reference_step": "s",
}


def m(median, lo=None, hi=None, unit="s", method="by hand"):
    lo = median if lo is None else lo
    hi = median if hi is None else hi
    return {"median": median, "min": lo, "max": hi, "unit": unit, "method": method}


def synthetic(kind="cpu", name="CPU: test", **extra) -> dict:
    """A machine file with round numbers whose predictions are worked by hand."""
    meas = {
        "mamf_fp32": m(100e9, 90e9, 110e9, "FLOP/s"),
        "memory_bandwidth": m(20e9, unit="bytes/s"),
        "allreduce_alpha": m(100e-6),
        "allreduce_beta": m(1e-9, unit="s/byte"),  # 1 GB/s
        "checkpoint_write_bandwidth": m(1e9, unit="bytes/s"),
        "fsync": m(1e-3),
        "tokenizer_throughput": m(1e6, unit="tokens/s"),
        "loader_throughput": m(1e7, unit="tokens/s"),
        "reference_step": m(0.05, 0.04, 0.06),
        "allreduce_heldout": m(2.5e-3),
        "checkpoint_write": m(0.12),
        "activation_bytes": m(1_000_100, unit="bytes"),
        "loader_wait_inline": m(0.03),
        "loader_compute_inline": m(0.04),
        "loader_step_workers": m(0.05),
        "accumulated_step": m(0.07),
    }
    return {
        "schema_version": 1,
        "device": {"kind": kind, "name": name, "peaks": {}},
        "torch": {"version": "2.13.0", "isa_caps": {}},
        "measurements": meas,
        "reference": {
            "flops_per_token": 1e6,
            "tokens_per_step": 2000,  # 2e9 FLOPs a step
            "step_dtype": "fp32",
            "activation_formula_bytes": 1_000_000,
            "activation_extra_bytes": {"norm statistics": 60, "causal mask": 40},
            "checkpoint_bytes": 100e6,
            "allreduce_heldout_bytes": 2e6,
            "allreduce_ranks": 2,
            "loader_tokens_encoded_per_batch": 25_000,
            "loader_workers": 1,
            "accumulation_k": 4,
            "batch": 8,
        },
    }


def gpu_file(mamf_bf16=700e12) -> dict:
    d = synthetic("cuda", "GPU: NVIDIA H100 80GB HBM3")
    d["device"] |= {"model": "NVIDIA H100 80GB HBM3", "accelerator": "H100 SXM"}
    d["measurements"]["mamf_bf16"] = m(mamf_bf16, unit="FLOP/s")
    return d


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# --- the schema -----------------------------------------------------------------------


# A 2-core Xeon VM reports its host's whole L3, 480 MiB: sized by it, the
# triad once took three 1.9 GiB arrays and each all-reduce rank wrote over 960
# MiB before every all-reduce. The command runs as `python -m mlbook calibrate`
# would, with the L3 probe made to report that.
L3_480 = 480 * 2**20
AS_A_480_MIB_L3 = f"""
import runpy, sys
import mlbook.scaling.experiments as scaling
scaling.l3_bytes = lambda: {L3_480}
sys.argv = ["mlbook", *sys.argv[1:]]
runpy.run_module("mlbook", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """One quick calibration of this machine, by the command, on a machine
    whose L3 probe reports 480 MiB."""
    folder = tmp_path_factory.mktemp("calibrated")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            AS_A_480_MIB_L3,
            "calibrate",
            "--quick",
            "--out",
            "m.json",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return folder, out


def test_a_real_calibration_follows_the_schema(real):
    folder, out = real
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["m.json"], "scratch left"
    data = json.loads((folder / "m.json").read_text())
    assert {"schema_version", "device", "torch", "measurements"} <= set(data)
    assert data["schema_version"] == 2  # the step model's inputs kept since 2
    assert {"step_bandwidth", "op_cost"} <= set(data["measurements"])
    assert {"gemm_flops_per_s", "operators"} <= set(data["reference"]["step_model"])
    meas = data["measurements"]
    assert set(NAMES) <= set(meas)
    for name, v in meas.items():
        assert set(v) == {"median", "min", "max", "unit", "method"}, name
        assert v["min"] <= v["median"] <= v["max"], name
        assert v["method"], name
        if name in UNITS:
            assert v["unit"] == UNITS[name], name
    # progress lines: one at least per measurement group, on stderr
    assert out.stdout == "" and out.stderr.count("\n") >= 8
    assert "hostname" not in json.dumps(data)
    assert os.uname().nodename not in json.dumps(data) or len(os.uname().nodename) < 4
    machine = cal.load(folder / "m.json")
    assert (
        "python -m mlbook calibrate --quick --out m.json" in machine.created["command"]
    )


def test_a_calibration_on_a_480_mib_l3_stays_within_a_gib_a_process(real):
    """The triad's arrays and the all-reduce's cache flush are capped by what
    they measure, not grown with the L3 the machine reports; the command says
    its peak resident memory, this process's and its largest child's."""
    folder, out = real
    assert out.returncode == 0, out.stderr
    machine = cal.load(folder / "m.json")
    peak = machine.created["peak_resident_bytes"]
    assert set(peak) == {"main", "children"}
    assert 0 < peak["main"] <= 2**30 and 0 < peak["children"] <= 2**30, peak
    assert "peak resident memory" in out.stderr
    # 4 x 480 MiB asked, 128 MiB each kept; 64 MiB written, whatever the L3
    assert cal.TRIAD_MAX_BYTES == 128 * 2**20 and cal.FLUSH_MAX_BYTES == 64 * 2**20
    triad = machine["memory_bandwidth"].method
    assert "3 fp32 arrays of 128 MiB" in triad and "L3 reported 480 MiB" in triad
    assert "at most 128 MiB" in triad
    flush = machine["allreduce_alpha"].method
    assert "writes over 64 MiB before each all-reduce" in flush
    assert "at most 64 MiB whatever the cache: L3 reported 480 MiB" in flush


def test_no_buffer_grows_with_the_l3_the_machine_reports(monkeypatch):
    """The L3 probe made to report 480 MiB (a 2-core VM's view of its
    host), then 4 and 64 GiB, with a terabyte free so that free memory caps
    nothing: calibrate's triad arrays stay at 128 MiB and its flush at
    64 MiB, and the scaling chapter's flush before each all-reduce at
    4 x its largest message (256 MiB for the default sizes up to 64 MiB).
    With 1 GiB free, a sixteenth of it: 64 MiB."""
    from mlbook.calibrate import experiments as ex
    from mlbook.calibrate import resources
    from mlbook.scaling import experiments as scaling

    mib = 2**20
    monkeypatch.setattr(resources, "available_bytes", lambda: 2**40)
    for l3 in (480 * mib, 4 * 2**30, 64 * 2**30):
        monkeypatch.setattr(scaling, "l3_bytes", lambda l3=l3: l3)
        got = (
            ex.triad_bytes("cpu", 64 * mib),
            ex.flush_bytes(),
            scaling.flush_bytes_for(scaling.DEFAULT_SIZES),
        )
        assert got == (128 * mib, 64 * mib, 256 * mib), (l3 // mib, got)
    assert max(scaling.DEFAULT_SIZES) == 64 * mib
    monkeypatch.setattr(resources, "available_bytes", lambda: 2**30)
    assert ex.triad_bytes("cpu", 64 * mib) == ex.flush_bytes() == 64 * mib


def test_the_held_out_all_reduce_is_not_a_fitted_size():
    from mlbook.calibrate.experiments import Sizes, sizes_for

    for quick in (True, False):
        sz = sizes_for(quick)
        assert sz.allreduce_heldout not in sz.allreduce_sizes
        # between two fitted sizes, so the fit is interpolated, not extrapolated
        assert min(sz.allreduce_sizes) < sz.allreduce_heldout < max(sz.allreduce_sizes)
    # quick: 1, 16, 256 and 4,096 KiB fitted; 64 KiB held out
    assert sizes_for(True).allreduce_heldout == 64 * 1024
    fields = sizes_for(True).__dict__ | {"allreduce_heldout": 16 * 1024}
    with pytest.raises(ValueError, match="allreduce_heldout=16,384 bytes is one of"):
        Sizes(**fields)


def test_the_median_lies_within_min_and_max():
    with pytest.raises(ValueError, match=r"within \[min, max\]"):
        cal.Measurement(2.0, 0.5, 1.5, "s", "x")
    got = cal.Measurement.of([3, 1, 2, 10], "s", "x")
    assert (got.min, got.median, got.max) == (1, 2.5, 10)  # the median of four


def test_a_synthetic_file_round_trips(tmp_path):
    path = write(tmp_path / "m.json", synthetic())
    machine = cal.load(path)
    again = json.loads(cal.dumps(machine))
    assert again["measurements"] == synthetic()["measurements"]
    assert machine["reference_step"].spread == pytest.approx(0.06 / 0.04 - 1)


# --- bad input: exit status 2 and one line naming the file and the rule ---------------


def calibrate(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "mlbook", "calibrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "out,rule",
    [
        ("missing/m.json", "does not exist"),
        (".", "is a directory"),
    ],
)
def test_an_unwritable_output_path(tmp_path, out, rule):
    got = calibrate("--out", out, cwd=tmp_path)
    assert got.returncode == 2
    line = one_line(got.stderr)
    assert out in line and rule in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    got = calibrate("--out", "ro/m.json", cwd=tmp_path)
    assert got.returncode == 2 and "cannot be written" in one_line(got.stderr)


def test_an_interrupted_calibration_leaves_nothing(tmp_path, monkeypatch, capsys):
    from mlbook.calibrate import experiments as ex

    real_storage = ex.storage

    reached = []

    def storage_then_interrupt(folder, sz):
        real_storage(folder, sz)
        reached.append(sorted(p.name for p in folder.parent.iterdir()))
        raise KeyboardInterrupt

    fake = cal.Measurement(1e9, 1e9, 1e9, "FLOP/s", "stub")
    monkeypatch.setattr(ex, "matmul_probe", lambda *a, **k: dict.fromkeys("x", 1.0))
    monkeypatch.setattr(ex, "fast_dtypes", lambda probe, device: ("fp32",))
    monkeypatch.setattr(ex, "mamf_ceiling", lambda *a: (None, fake))
    monkeypatch.setattr(ex, "memory_bandwidth", lambda *a: fake)
    monkeypatch.setattr(
        ex,
        "allreduce",
        lambda sz: ({"allreduce_alpha": fake, "allreduce_beta": fake}, {}),
    )
    monkeypatch.setattr(ex, "storage", storage_then_interrupt)
    out = tmp_path / "m.json"
    assert cli.main(["--quick", "--out", str(out)]) == 2
    line = one_line(capsys.readouterr().err.splitlines()[-1])
    assert str(out) in line and "interrupted" in line and "nothing was written" in line
    # half-way, the scratch folder was there; afterwards nothing is
    assert reached and reached[0][0].startswith(".mlbook-calibrate-")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_measurement_leaves_nothing(tmp_path, monkeypatch, capsys):
    from mlbook.calibrate import experiments as ex

    def broken(*a):
        raise RuntimeError("the all-reduce ranks failed (exit 1):\nmore text")

    fake = cal.Measurement(1e9, 1e9, 1e9, "FLOP/s", "stub")
    monkeypatch.setattr(ex, "matmul_probe", lambda *a, **k: {"fp32": 1.0})
    monkeypatch.setattr(ex, "fast_dtypes", lambda probe, device: ("fp32",))
    monkeypatch.setattr(ex, "mamf_ceiling", lambda *a: (None, fake))
    monkeypatch.setattr(ex, "memory_bandwidth", lambda *a: fake)
    monkeypatch.setattr(ex, "allreduce", broken)
    out = tmp_path / "m.json"
    assert cli.main(["--quick", "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(out) in last and "RuntimeError" in last and "ranks failed" in last
    assert "more text" not in last
    assert list(tmp_path.iterdir()) == []


# --- reading a bad file ---------------------------------------------------------------


BAD_FILES = {
    "missing": (None, "no such file"),
    "malformed": ("{not json", "not valid JSON"),
    "another version": ({**synthetic(), "schema_version": 3}, "schema_version 3"),
    "a key missing": (
        {k: v for k, v in synthetic().items() if k != "torch"},
        "missing top-level key(s) torch",
    ),
    "a measurement missing": (
        {
            **synthetic(),
            "measurements": {
                k: v for k, v in synthetic()["measurements"].items() if k != "fsync"
            },
        },
        "measurements lack fsync",
    ),
    "median outside": (
        {
            **synthetic(),
            "measurements": synthetic()["measurements"]
            | {"fsync": m(5e-3, 1e-3, 2e-3)},
        },
        "within [min, max]",
    ),
    "wrong unit": (
        {
            **synthetic(),
            "measurements": synthetic()["measurements"] | {"fsync": m(1, unit="ms")},
        },
        "'fsync' is in 'ms'",
    ),
}


@pytest.mark.parametrize("case", BAD_FILES, ids=str)
def test_a_bad_machine_file_is_named_with_its_rule(tmp_path, capsys, case):
    data, rule = BAD_FILES[case]
    path = tmp_path / "m.json"
    if data is not None:
        write(path, data)
    with pytest.raises(cal.MachineFileError) as got:
        cal.load(path)
    assert str(path) in str(got.value) and rule in str(got.value)
    plan = plan_in_process(capsys, "--machine", str(path))
    assert plan.returncode == 2
    line = one_line(plan.stderr)
    assert str(path) in line and rule in line


# --- the predictions: worked by hand from the synthetic file --------------------------


def test_predictions_by_hand(tmp_path):
    rows = cal.predictions(cal.from_dict(synthetic()))
    by = {c.chapter: [] for c in rows}
    for c in rows:
        by[c.chapter].append(c)
    assert len(rows) >= 6 and len(by) >= 5
    step = by["mfu"][0]
    assert step.predicted == pytest.approx(2e9 / 110e9)  # FLOPs / the best ceiling
    assert step.measured == 0.05 and step.check == "lower bound"
    memory = by["recompute"][0]
    assert memory.predicted == 1_000_000 and memory.measured == 1_000_100
    assert memory.margin == 100  # the two named extras, 60 + 40 bytes
    assert memory.holds
    ckpt = by["cadence"][0]
    assert ckpt.predicted == pytest.approx(0.1) and ckpt.ratio == pytest.approx(1.2)
    ar = by["scaling"][0]
    # ring: 2 (N - 1) alpha + 2 (N - 1) / N x S / B with N = 2, B = 1 GB/s
    assert ar.predicted == pytest.approx(2 * 100e-6 + 2e6 / 1e9)
    tokenise, fed = by["input_pipeline"]
    assert tokenise.predicted == pytest.approx(25_000 / 1e6)
    assert fed.predicted == pytest.approx(max(0.04, 0.03 / 1))
    acc = by["accumulation"][0]
    assert acc.predicted == pytest.approx(0.05) and acc.ratio == pytest.approx(1.4)
    assert all(c.holds is None for c in (ckpt, ar, tokenise, fed, acc))


def test_a_time_from_a_ceiling_is_a_lower_bound_with_the_runs_spread():
    d = synthetic()
    # the fastest step (0.04 s) against 2e9 / 110e9 = 0.0182 s: holds
    assert cal.predictions(cal.from_dict(d))[0].holds
    # a step faster than the ceiling allows, beyond its own spread (0.019 / 0.018 - 1)
    d["measurements"]["reference_step"] = m(0.0175, 0.0170, 0.0180)
    bound = cal.predictions(cal.from_dict(d))[0]
    assert bound.predicted * (1 - bound.margin) > 0.0170
    assert not bound.holds
    # within its spread, it holds
    d["measurements"]["reference_step"] = m(0.0180, 0.0170, 0.0200)
    assert cal.predictions(cal.from_dict(d))[0].holds


def test_a_memory_prediction_holds_only_within_its_named_bytes():
    d = synthetic()
    d["measurements"]["activation_bytes"] = m(1_000_101, unit="bytes")
    row = next(c for c in cal.predictions(cal.from_dict(d)) if c.chapter == "recompute")
    assert row.margin == 100 and not row.holds  # one byte nobody named
    assert "norm statistics 60 bytes" in row.leaves_out


# --- plan --machine -------------------------------------------------------------------


PLAN = ["plan", "--model", "Llama-3-8B", "--tokens", "15e12", "--gpus", "1024",
        "--gpu", "H100"]  # fmt: skip


def run_plan(*args):
    return subprocess.run(
        [sys.executable, "-m", "mlbook", *PLAN, *args],
        capture_output=True,
        text=True,
    )


def plan_in_process(capsys, *args) -> subprocess.CompletedProcess:
    """``python -m mlbook plan`` as its main() runs it, in this process: each
    command started took 0.16 s CPU here. The bad files all take one path
    through it, and each test below runs the command itself once (a refusal
    among them), its other plans in-process."""
    from mlbook.__main__ import main

    capsys.readouterr()
    try:
        code = main([*PLAN, *args])
    except SystemExit as exc:  # argparse's exit
        code = exc.code
    got = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, got.out, got.err)


def test_plan_refuses_an_mfu_above_the_calibrated_mamf_share(tmp_path):
    path = write(tmp_path / "h100.json", gpu_file(700e12))
    got = run_plan("--mfu", "0.75", "--machine", str(path))
    assert got.returncode == 2
    line = one_line(got.stderr)
    # 700 / 989 = 0.7078: both numbers and the file are named
    assert "0.75" in line and "0.708" in line and str(path) in line
    assert "700" in line and "989" in line


def test_plan_accepts_an_mfu_below_it_and_says_what_it_used(tmp_path, capsys):
    path = write(tmp_path / "h100.json", gpu_file(700e12))
    got = run_plan("--mfu", "0.5", "--machine", str(path))
    assert got.returncode == 0, got.stderr
    assert f"machine file {path}" in got.stdout
    assert "used: bf16 MAMF 700.0 TFLOP/s, 70.8%" in got.stdout
    js = plan_in_process(capsys, "--mfu", "0.5", "--machine", str(path), "--json")
    js = json.loads(js.stdout)
    assert js["machine"]["applies"] and js["machine"]["mamf_share"] == pytest.approx(
        700 / 989
    )
    # the plan itself is the plan without the file: nothing mixed in silently
    plain = json.loads(plan_in_process(capsys, "--mfu", "0.5", "--json").stdout)
    assert {k: v for k, v in js.items() if k != "machine"} == plain


def test_plan_with_a_file_of_another_device_uses_nothing(tmp_path, capsys):
    cpu = write(tmp_path / "cpu.json", synthetic())
    got = run_plan("--mfu", "0.9", "--machine", str(cpu))
    assert got.returncode == 0, got.stderr
    assert "used nothing" in got.stdout and "not the planned H100 SXM" in got.stdout
    a100 = gpu_file(200e12)
    a100["device"] |= {"model": "NVIDIA A100-SXM4-80GB", "accelerator": "A100 SXM"}
    path = write(tmp_path / "a100.json", a100)
    got = plan_in_process(capsys, "--mfu", "0.9", "--machine", str(path))
    assert got.returncode == 0 and "used nothing" in got.stdout
    plain = plan_in_process(capsys, "--mfu", "0.9")
    assert got.stdout.startswith(plain.stdout.rstrip("\n"))


def test_a_gpu_row_found_by_its_cuda_name():
    d = gpu_file(700e12)
    d["device"]["accelerator"] = None  # an older file: matched by the name
    inputs = cal.plan_inputs(cal.from_dict(d), "H100 SXM")
    assert inputs.applies and math.isclose(inputs.mamf_share, 700 / 989)
    pcie = copy.deepcopy(d)
    pcie["device"]["model"] = "NVIDIA H100 PCIe"
    assert not cal.plan_inputs(cal.from_dict(pcie), "H100 SXM").applies


def test_the_peak_of_a_child_is_seen():
    """A child that holds 200 MiB for a second: its peak is the largest child's
    (read from /proc while it runs, or from getrusage once it is waited for)."""
    from mlbook.calibrate import resources

    hold = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    with resources.PeakWatcher(every_s=0.05) as watcher:
        subprocess.run(
            [sys.executable, "-c", hold + "import time; time.sleep(1)"], check=True
        )
    assert watcher.peak.children_bytes >= 200 * 2**20
    assert watcher.peak.main_bytes > 0
    with pytest.raises(ValueError, match="every_s"):
        resources.PeakWatcher(every_s=0)


def test_the_predicted_against_measured_figure_plots_each_ratio_against_one():
    """One dot per row at measured / predicted (a time 3 s against 2 s
    predicted is 1.5; bytes 100 against 100 are 1.0; 1 s against 4 s is 0.25),
    a line at 1, and a legend in a reader's words, not the checks' kinds."""
    import matplotlib.pyplot as plt

    from mlbook.calibrate import figures as figs

    rows = [
        cal.Comparison("step", "a step", "mfu", 2.0, 3.0, "s", "", "lower bound"),
        cal.Comparison(
            "bytes", "bytes kept", "recompute", 100, 100, "bytes", "", "exact"
        ),
        cal.Comparison("write", "a write", "cadence", 4.0, 1.0, "s", "", "stated"),
    ]
    fig = figs.predicted_vs_measured(rows, "CPU: test")
    ax = fig.axes[0]
    dots = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert dots == [(1.5, 0), (1.0, 1), (0.25, 2)]
    assert any(list(line.get_xdata()) == [1, 1] for line in ax.get_lines())
    words = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "measured = predicted" in words and len(words) == 4
    assert not set(words) & {"stated", "lower bound", "exact"}
    assert not any("stated" in w or "lower bound" in w for w in words)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "step (mfu)",
        "bytes (recompute)",
        "write (cadence)",
    ]
    plt.close(fig)
