"""Fetch the JavaScript the built book serves itself, at install time.

The HTML book must load nothing from the network, so the two scripts that
myst-nb would take from CDNs for widgets (require.js and the Jupyter widget
HTML manager) come from the npm registry through `npm pack`, pinned, and land
in _vendor/vendor/, which the book serves through html_extra_path. The
manager's Font Awesome files (webpack-named, in the package's dist/) go beside
embed-amd.js; book/_extra/vendor/widgets-setup.js points the manager there
(it would otherwise look beside each page, and 404).
"""

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGES = {"requirejs": "2.3.8", "@jupyter-widgets/html-manager": "1.0.15"}
ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "_vendor" / "vendor"
FONT_SUFFIXES = (".woff2", ".woff", ".ttf", ".eot", ".svg")


def complete() -> bool:
    """require.js, embed-amd.js and every font file embed-amd.js names."""
    manager = DEST / "html-manager" / "embed-amd.js"
    if not ((DEST / "require.js").exists() and manager.exists()):
        return False
    fonts = set(
        re.findall(r'\w\.p\+"([0-9a-f]{20}\.\w+)"', manager.read_text(errors="replace"))
    )
    return bool(fonts) and all(
        (DEST / "html-manager" / name).exists() for name in fonts
    )


def main() -> int:
    if complete():
        return 0
    if shutil.which("npm") is None:
        print(
            "vendor_js: npm is needed to fetch the widget scripts "
            "(apt-get install npm)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        subprocess.run(
            ["npm", "pack", "--silent", *specs],
            cwd=tmp,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tarballs = {p.name: p for p in Path(tmp).glob("*.tgz")}
        shutil.rmtree(DEST, ignore_errors=True)
        (DEST / "html-manager").mkdir(parents=True)
        for name, path in tarballs.items():
            with tarfile.open(path) as tar:
                tar.extractall(Path(tmp) / name.removesuffix(".tgz"), filter="data")
        req = (
            Path(tmp) / f"requirejs-{PACKAGES['requirejs']}" / "package" / "require.js"
        )
        shutil.copy(req, DEST / "require.js")
        manager_version = PACKAGES["@jupyter-widgets/html-manager"]
        dist = (
            Path(tmp)
            / f"jupyter-widgets-html-manager-{manager_version}"
            / "package"
            / "dist"
        )
        shutil.copy(dist / "embed-amd.js", DEST / "html-manager" / "embed-amd.js")
        for font in dist.iterdir():
            if font.suffix in FONT_SUFFIXES:
                shutil.copy(font, DEST / "html-manager" / font.name)
    if not complete():
        print(
            "vendor_js: the widget manager names font files its package does not ship",
            file=sys.stderr,
        )
        return 1
    print(f"vendor_js: widget scripts and fonts in {DEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
