"""tools/build.py --isa-cap: the three variables set for every kernel, a folder
of its own, and the cap in every page's cache key, so a capped build never
reuses an uncapped page (or the other way round)."""

import os
from pathlib import Path

import pytest

from bookbuild import caching, cli, machine, paths, run

VARS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


@pytest.fixture
def seen(monkeypatch):
    for name in VARS + ("PYTHONDONTWRITEBYTECODE",):
        # setenv first, so that what cli.main sets is undone after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    got = {}

    def fake_build(dest, small, only, **kw):
        got["dest"] = Path(dest)
        got["env"] = {name: os.environ.get(name) for name in VARS}
        got["key"] = caching.key_of(caching.machine_inputs())
        return {"chapters": {}, "html": None}

    monkeypatch.setattr(run, "build", fake_build)
    return got


@pytest.mark.parametrize(
    "cap,onednn,aten,mkl",
    [
        ("avx512_bf16", "AVX512_CORE_BF16", "avx512", "AVX512"),
        ("avx2", "AVX2", "avx2", "AVX2"),
    ],
)
def test_a_cap_sets_the_three_variables_and_its_own_folder(
    seen, cap, onednn, aten, mkl
):
    assert cli.main(["--small", "--no-html", "--isa-cap", cap]) == 0
    assert seen["env"] == dict(zip(VARS, (onednn, aten, mkl), strict=True))
    assert seen["dest"] == paths.ROOT / "_build" / f"test-{cap}"


def test_the_cap_is_in_the_cache_key(seen, monkeypatch):
    keys = {}
    for cap in (None, "avx512_bf16", "avx2"):
        for name in VARS:
            monkeypatch.delenv(name, raising=False)
        cli.main(["--no-html"] + (["--isa-cap", cap] if cap else []))
        keys[cap] = seen["key"]
        if cap is None:
            assert seen["dest"] == paths.ROOT / "_build" / "book"
    assert len(set(keys.values())) == 3


def test_an_unknown_cap_is_refused(seen, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--isa-cap", "amx"])
    assert e.value.code == 2
    assert "invalid choice: 'amx'" in capsys.readouterr().err
    assert set(machine.ISA_CAPS) == {"avx512_bf16", "avx2"}
