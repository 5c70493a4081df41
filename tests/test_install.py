"""tools/install.py: pip's configured sources become uv's options."""

import install

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
