import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

BOOK_DEST = ROOT / "_build" / "test"


@pytest.fixture(scope="session")
def book():
    """Every chapter executed by papermill at test sizes and the HTML book
    built from them (tools/build.py), once per test session."""
    import build

    shutil.rmtree(BOOK_DEST, ignore_errors=True)
    return build.build(BOOK_DEST, small=True)


def glued_values(chapter: str) -> dict:
    """The values a chapter glued into its prose, from its executed notebook
    (the `book` fixture must have run), as the text the page shows."""
    import nbformat

    path = next((BOOK_DEST / "src").rglob(f"{chapter}.ipynb"))
    nb = nbformat.read(path, as_version=4)
    return {o["metadata"]["scrapbook"]["name"]: o["data"]["application/papermill.record/text/plain"].strip("'")
            for c in nb.cells for o in c.get("outputs", []) if "scrapbook" in o.get("metadata", {})}
