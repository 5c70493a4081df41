"""tools/install.py: pip's configured sources become uv's options, and a venv
without pip gets one that installs into it."""

import install
import pytest

LISTING = """\
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
site.index-url='https://example.invalid/simple'
"""


def test_each_source_once_with_uvs_option_and_nothing_else():
    assert install.pip_sources(LISTING) == [
        "--find-links",
        "/opt/wheels",  # set in the environment and a file: passed once
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--index-url",
        "https://example.invalid/simple",
    ]


def test_no_configuration_means_no_options():
    assert install.pip_sources("") == []
    assert install.pip_sources("global.timeout='60'\nnot a setting\n") == []


def test_a_venv_without_pip_is_served_by_the_base_interpreters_pip(
    tmp_path, monkeypatch
):
    import subprocess
    import sys

    # a_pip asks each candidate pip for its version, as this test does first:
    # each answer is kept (a pip run took 0.6 s CPU here)
    answers, works = {}, install._works

    def kept(pip: list[str]) -> bool:
        if tuple(pip) not in answers:
            answers[tuple(pip)] = works(pip)
        return answers[tuple(pip)]

    monkeypatch.setattr(install, "_works", kept)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path)], check=True)
    python = str(tmp_path / "bin" / "python")
    assert not install._works([python, "-m", "pip"])  # the venv has none
    if not install._works([base, "-m", "pip", "--python", python]):
        pytest.skip(f"{base} has no pip that takes --python (pip 22.3 or later)")
    pip = install.a_pip(python)
    assert pip == [base, "-m", "pip", "--python", python]
    # it lists the venv's packages, not the base's: none yet
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True)
    assert listed.returncode == 0 and listed.stdout.strip() == b""
