"""What runs in the reader's browser imports the standard library and
mlbook's torch-free modules only: every live-figure module and mlbook.plan,
imported and run in a fresh interpreter where numpy, torch and matplotlib
cannot be imported, give the same answers as here. And the standard-library
paths that replaced numpy (cadence's closed forms, faults' normal CDF table
and straggler integral, precision's fp16/fp32 roundings) give the same
results as the numpy code they stand beside or replaced, which this file
keeps, as it was, to compare with."""

from __future__ import annotations

import json
import math
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.live import close, live_figures, live_modules
from mlbook.cadence import formulas as cadence
from mlbook.faults import formulas as faults
from mlbook.precision import formulas as precision

ROOT = Path(__file__).resolve().parent.parent
BLOCKED = ("numpy", "torch", "matplotlib", "ipywidgets", "pandas", "scipy")
PLAN_ARGS = ["--model", "Llama-3-70B", "--tokens", "15e12", "--gpu", "H100 SXM",
             "--gpus", "4096", "--mfu", "0.4", "--tp", "8", "--json"]  # fmt: skip

# Run in the fresh interpreter: a meta-path finder that refuses the heavy
# packages (as Pyodide, which has none of them, would), then every live
# figure's default draw, the planner's JSON, and the faults and precision
# functions the browser may call, printed as JSON.
CHILD = r"""
import contextlib, importlib, io, json, sys

BLOCKED = {blocked!r}

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{{name}} is blocked (the browser has none)")
        return None

sys.meta_path.insert(0, Refuse())
out = {{"figures": {{}}}}
for name in {modules!r}:
    module = importlib.import_module(name)
    for attr in vars(module).values():
        live = getattr(attr, "live", None)
        if callable(attr) and live is not None and attr.__module__ == name:
            out["figures"][live.path] = live.payload()
from mlbook.plan import cli
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    cli.main({plan_args!r})
out["plan"] = json.loads(buffer.getvalue())
from mlbook.faults import formulas as faults
out["step_time"] = faults.expected_step_time(1024, 0.1, 0.05)
out["step_time_apart"] = faults.expected_step_time(64, 3.0, 0.02)
out["drain"] = faults.drain_threshold(64, 0.05, tol=1e-4)
from mlbook.precision import formulas as precision
trace = precision.simulate_scaler([1.0, float("inf"), 3e4, 1.0], growth_interval=2)
out["scaler"] = [list(trace.scales), list(trace.skipped)]
out["bf16"] = [precision.bf16_absorbs(1.0, 2.0**-k) for k in (6, 7, 8, 9)]
out["heavy"] = sorted(m for m in BLOCKED if m in sys.modules)
print(json.dumps(out))
"""


def test_live_figures_and_the_planner_run_without_numpy_torch_or_matplotlib():
    from mlbook.plan import cli

    modules = ["mlbook.common.live", "mlbook.common.vegalite", *live_modules()]
    code = CHILD.format(blocked=BLOCKED, modules=modules, plan_args=PLAN_ARGS)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 0, f"the blocked-imports run failed:\n{run.stderr[-3000:]}"
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["heavy"] == []
    figures = live_figures()
    assert set(got["figures"]) == set(figures) and len(figures) >= 3
    for path, function in figures.items():
        assert not close(got["figures"][path], function.live.payload(), rel=1e-12), path

    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli.main(PLAN_ARGS)
    assert not close(got["plan"], json.loads(buffer.getvalue()), rel=1e-12)
    # here numpy is installed, so these take the numpy path; there, the stdlib one
    assert got["step_time"] == pytest.approx(
        faults.expected_step_time(1024, 0.1, 0.05), rel=1e-12
    )
    assert got["step_time_apart"] == pytest.approx(
        faults.expected_step_time(64, 3.0, 0.02), rel=1e-12
    )
    assert got["drain"] == pytest.approx(faults.drain_threshold(64, 0.05, tol=1e-4))
    trace = precision.simulate_scaler([1.0, math.inf, 3e4, 1.0], growth_interval=2)
    assert got["scaler"] == [list(trace.scales), list(trace.skipped)]
    # bf16 keeps 7 mantissa bits: 1 + 2^-7 is the next number, 2^-8 a tie to even
    assert got["bf16"] == [True, True, False, False]


def test_the_blocker_blocks():
    """The child's finder really refuses numpy (else the test above proves nothing)."""
    code = CHILD.split("out = ")[0].format(blocked=BLOCKED) + "import numpy\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode != 0 and "numpy is blocked" in run.stderr, run.stderr


# --- cadence: the closed forms, one number at a time, against the array path ---


# The exact waste is 1 - q with 0 < q <= 1, q divided by expm1. numpy's
# expm1 loop for AVX-512 CPUs is its own SIMD code, not the C library's that
# math.expm1 calls, and differs from it by up to 1 ulp (seen here: 1 ulp in
# 20,000 draws); through the division q moves by about as much, and after the
# subtraction that is up to an ulp of 1 or two in the waste, however small the
# waste (here 1.1e-16 on a waste of 0.1). On CPUs where numpy calls the C
# library the two paths agree to the last bit.
EPS = np.finfo(float).eps
EXPM1_ULPS = 2


def test_cadence_scalar_waste_is_the_array_waste():
    rng = random.Random(0)
    for _ in range(300):
        c, t = rng.uniform(1, 600), rng.uniform(600, 1e6)
        r = rng.choice([0.0, rng.uniform(0, 3600)])
        grid = np.geomspace(1.0, 50 * t, 7)
        for exact in (False, True):
            array = cadence.waste_fraction(grid, c, t, r, exact=exact)
            one = [cadence.waste_fraction(float(i), c, t, r, exact=exact) for i in grid]
            assert all(type(v) is float for v in one)
            np.testing.assert_allclose(
                one, array, rtol=1e-15, atol=EXPM1_ULPS * EPS if exact else 0
            )
    # far past the MTBF numpy's expm1 gives inf and the waste is 1; so does the
    # scalar path
    assert cadence.waste_fraction(1e6, 30.0, 10.0, exact=True) == 1.0
    assert cadence.waste_fraction(np.float64(1e6), 30.0, 10.0, exact=True) == 1.0


# --- faults: the normal CDF table and the straggler integral ------------------------

# The module's numpy code before the standard-library path came, kept as it was.
_OLD_Z = np.linspace(-12.0, 12.0, 24001)
_OLD_PHI = 0.5 * (
    1.0 + np.frompyfunc(math.erf, 1, 1)(_OLD_Z / math.sqrt(2)).astype(float)
)


def _old_tail_integral(lo, hi, n_ranks, shift, sigma):
    u = np.linspace(lo, hi, 801)
    cdf = np.interp(u / sigma, _OLD_Z, _OLD_PHI) ** (n_ranks - 1) * np.interp(
        (u - shift) / sigma, _OLD_Z, _OLD_PHI
    )
    tail = (1.0 - cdf) * np.exp(u)
    return float(np.sum((tail[1:] + tail[:-1]) * np.diff(u)) / 2)


def test_faults_cdf_table_is_numpys_bit_for_bit():
    z, phi, _ = faults._cdf_table()
    assert np.array_equal(np.asarray(z), _OLD_Z) and np.array_equal(
        np.asarray(phi), _OLD_PHI
    )
    rng = random.Random(1)
    xs = [rng.uniform(-13, 13) for _ in range(20_000)] + [
        -12.0,
        12.0,
        0.0,
        -11.999,
        5.5,
    ]
    old = np.interp(np.asarray(xs), _OLD_Z, _OLD_PHI)
    assert [faults._norm_cdf_stdlib(x) for x in xs] == list(old)


@pytest.mark.parametrize("seed", range(4))
def test_faults_straggler_integral_stdlib_equals_numpy(seed):
    rng = random.Random(seed)
    for _ in range(25):
        sigma = rng.choice([rng.uniform(1e-6, 0.01), rng.uniform(0.01, 1.0)])
        n = rng.choice([1, 2, rng.randint(3, 100), rng.randint(100, 20_000)])
        shift = math.log1p(
            rng.choice([0.0, rng.uniform(0, 0.2), rng.uniform(0.2, 100)])
        )
        lo, hi = -9 * sigma, shift + 9 * sigma
        want = _old_tail_integral(lo, hi, n, shift, sigma)
        assert (
            faults._tail_integral(lo, hi, n, shift, sigma) == want
        )  # numpy: unchanged
        assert faults._tail_integral_stdlib(lo, hi, n, shift, sigma) == pytest.approx(
            want, rel=1e-12, abs=1e-300
        )


# --- precision: struct's 'f' and 'e' round as numpy's casts do ---------------------


def _samples(rng, n):
    edges = [0.0, -0.0, 65504.0, 65519.99, 65520.0, 65536.0, 6e-8, 2.0**-25, 2.0**-24,
             3.4028234663852886e38, 3.4028235677973366e38, 3.5e38, 1e300, 2.0**-149,
             2.0**-150, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-24]  # fmt: skip
    out = edges + [-e for e in edges]
    for _ in range(n):
        out.append(
            math.ldexp(rng.uniform(0.5, 1), rng.randint(-160, 140))
            * rng.choice([1, -1])
        )
    return out


def test_f32_and_f16_round_as_numpy_casts():
    rng = random.Random(2)
    with np.errstate(over="ignore"):
        for x in _samples(rng, 20_000):
            f32 = float(np.float32(x))
            assert struct.pack(">d", precision._f32(x)) == struct.pack(">d", f32), x
            f16 = float(np.float16(np.float32(x)))
            assert struct.pack(">d", precision._f16(f32)) == struct.pack(">d", f16), x


def _old_fp16_overflows(scale, grad_max):
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.float16(np.float32(scale) * np.float32(grad_max))
    return not bool(np.isfinite(value))


def test_fp16_overflows_and_the_scaler_as_before():
    rng = random.Random(3)
    for _ in range(5000):
        scale = 2.0 ** rng.randint(-20, 40)
        g = math.ldexp(rng.uniform(0.5, 1), rng.randint(-60, 30))
        assert precision.fp16_overflows(scale, g) == _old_fp16_overflows(scale, g)
    for bad in (math.inf, math.nan):
        assert precision.fp16_overflows(1.0, bad) and _old_fp16_overflows(1.0, bad)
    assert (
        precision.DynamicLossScaler().update(np.bool_(False)) is False
    )  # numpy bools pass


@pytest.mark.parametrize("name", precision.FORMATS)
def test_round_to_format_one_number_equals_the_array_path(name):
    rng = random.Random(4)
    xs = [x for x in _samples(rng, 3000) if abs(x) < 1e38]
    array = precision.round_to_format(np.asarray(xs), name)
    one = [precision.round_to_format(x, name) for x in xs]
    assert all(type(v) is float for v in one)
    assert [struct.pack(">d", v) for v in one] == [
        struct.pack(">d", float(v)) for v in array
    ]
    with pytest.raises(ValueError, match="numbers"):
        precision.round_to_format(True, name)
    with pytest.raises(ValueError, match="finite"):
        precision.round_to_format(math.inf, name)
