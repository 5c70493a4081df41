"""The built book's live figures in a real browser (Debian's Chromium under
Playwright, never `playwright install`):

- served on 127.0.0.1 (tools/serve.py, in a thread): on every page, every
  live figure's controls are set to seeded random valid values, the range
  ends among them, at least three settings a figure; after each draw the
  inputs show ``data-values``, ``data-result`` equals the function run here
  in CPython for those values (float rounding aside), and the ranged
  inputs' min, max and step are the ranges CPython computes. A value out of
  range (typed in each figure's first slider and first number box) is drawn
  at the end (to six significant digits, inside the range), shown so; one
  between two grid points is drawn as typed (a count's rounded, an
  ``on_grid`` control's on its grid). Changes faster than draws (on each
  page's first figure): the last one wins, and no older result is written
  after a newer one.
- a live page given a figure with every kind of control and a function that
  raises (tests/helpers/live_kinds.py, routed into the archive for this test
  only): each kind drives the figure, and an exception shows its message
  while the last good figure stays.
- a form (a payload with "view", the plan page's planner), set the same
  way: a setting its function refuses (a FieldError) shows the function's
  own message next to the control it names, the inputs show the values
  tried (clamped, in ``data-error``), and CPython raises the same message for
  them; a setting it accepts is checked as any figure's (``data-result`` is
  the function's result, not a spec).
- opened from file://: every figure draws its default, its controls are off,
  the hint names `make serve`, and nothing else happens.
- everywhere: no request leaves 127.0.0.1 (or the build's folder), no
  failed request, no console error (test_book's ALLOWED_CONSOLE aside).

Benchmarks, recorded in the test build's timings.json under "live" and
printed by conftest's summary, not asserted: Pyodide's boot and the first
live draw per page, redraw p50/p95 per figure, and page weights.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import random
import statistics
import sys
import zipfile
from pathlib import Path

import pytest
from test_book import ALLOWED_CONSOLE, HTML, LIVE_DRAWN

from conftest import ONLY
from helpers.browser import watch
from helpers.live import close, record_live
from mlbook.common import live

ROOT = Path(__file__).resolve().parent.parent
SEED = 23
RANDOM_SETTINGS = 1  # beyond the two ends: three settings a figure
BOOT_TIMEOUT_MS = 90_000  # Pyodide boots in seconds; a loaded machine takes longer
DRAW_TIMEOUT_MS = 30_000
RESULTS: dict = {"pages": {}, "figures": {}, "redraws": {}}

pytestmark = pytest.mark.book


def live_sources() -> list[str]:
    """The built pages (paths under the HTML folder) whose sources put a live
    figure on the page, known before the book is built: parametrising by the
    built HTML found nothing to test in a fresh clone, where collection comes
    before the build."""
    return sorted(
        f"{p.parent.name}/{p.stem}.html"
        for p in [*ROOT.glob("notebooks/*.md"), *ROOT.glob("book/*.md")]
        if "show_live(" in p.read_text() and (ONLY is None or p.stem in ONLY)
    )


def _has_live(name: str) -> None:
    assert "data-mlbook-live" in (HTML / name).read_text(), (
        f"{name}: its source calls show_live, but the built page has no live figure"
    )


def live_pages() -> list[Path]:
    return sorted(
        p
        for p in HTML.rglob("*.html")
        if p.relative_to(HTML).parts[0] != "_static"
        and "data-mlbook-live" in p.read_text()
    )


@pytest.fixture(scope="module")
def browser(book, chromium_browser):
    return chromium_browser


@pytest.fixture(scope="module", autouse=True)
def record_benchmarks(book):
    """After the module: the benchmarks into the test build's timings.json."""
    yield
    if not RESULTS["pages"]:
        return
    # (set up again when the module's tests come in two runs, one per
    # shared fixture: the draws so far are counted once)
    redraws, RESULTS["redraws"] = RESULTS["redraws"], {}
    for path, draws in redraws.items():
        ms = sorted(d["ms"] for d in draws)
        py = sorted(d["python_ms"] for d in draws)
        RESULTS["figures"][path] = {
            "draws": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(_p95(ms), 1),
            "python_p50_ms": round(statistics.median(py), 1),
        }
    record_live({k: v for k, v in RESULTS.items() if k != "redraws"})


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) > 1 else values[0]


# --- in the page ---------------------------------------------------------------

FIGURES = """() => [...document.querySelectorAll("[data-mlbook-live]")].map(
  e => ({id: e.id, payload: JSON.parse(e.getAttribute("data-mlbook-live"))}))"""

READ = """(id) => JSON.stringify((() => {
  const e = document.getElementById(id);
  const shown = {}, attrs = {}, disabled = {};
  for (const i of e.querySelectorAll("[name]")) {
    shown[i.name] = i.type === "checkbox" ? i.checked : i.value;
    attrs[i.name] = ["min", "max", "step"].map(a => i.getAttribute(a));
    disabled[i.name] = i.disabled;
  }
  const message = e.querySelector(".mlbook-live-message");
  const hint = e.querySelector(".mlbook-live-hint");
  const fieldErrors = {};
  for (const f of e.querySelectorAll(".mlbook-live-field-error")) {
    if (!f.hidden) fieldErrors[f.dataset.for] = f.textContent;
  }
  return {state: e.dataset.state, draws: Number(e.dataset.draws || 0),
          errors: Number(e.dataset.errors || 0),
          error: e.dataset.error ? JSON.parse(e.dataset.error) : null,
          fieldErrors,
          values: e.dataset.values ? JSON.parse(e.dataset.values) : null,
          result: e.dataset.result ? JSON.parse(e.dataset.result) : null,
          shown, attrs, disabled,
          controls: JSON.parse(e.getAttribute("data-mlbook-live")).controls,
          drags: [...e.querySelectorAll(".mlbook-live-drag")].map(d => d.disabled),
          drawn: !!e.querySelector(".mlbook-live-chart canvas, .mlbook-live-chart svg"),
          message: message.hidden ? null : message.textContent,
          hint: hint.hidden ? null : hint.textContent};
})())"""


def read(page, figure_id: str) -> dict:
    """READ for one figure. The page sends it as one JSON string: Playwright
    checks every value of an object it passes over, which for a figure's
    spec took about a fifth of a served page's test here."""
    return json.loads(page.evaluate(READ, figure_id))


SET = """(a) => {
  const e = document.getElementById(a.id);
  for (const [name, value] of a.values) {
    const i = e.querySelector(`[name="${name}"]`);
    if (i.type === "checkbox") i.checked = value; else i.value = value;
    i.dispatchEvent(new Event("change", {bubbles: true}));
  }
}"""

# settled: idle, and as many draws (with a form's refused inputs) as asked
SETTLED = """(a) => {
  const e = document.getElementById(a.id);
  const done = Number(e.dataset.draws || 0) + Number(e.dataset.errors || 0);
  return ["live", "error"].includes(e.dataset.state) && done >= a.draws;
}"""

# every data-values written, in order (MutationObserver on data-draws)
OBSERVE = """(id) => {
  const e = document.getElementById(id);
  window.__written = [];
  new MutationObserver(() => window.__written.push(JSON.parse(e.dataset.values)))
    .observe(e, {attributes: true, attributeFilter: ["data-draws"]});
}"""

BYTES = """() => [performance.getEntriesByType("navigation")[0],
  ...performance.getEntriesByType("resource")]
  .reduce((n, r) => n + (r.encodedBodySize || 0), 0)"""

PYODIDE_FETCHED = """() => performance.getEntriesByType("resource")
  .some(r => r.name.includes("pyodide"))"""

DREW_Q = """(q) => {
  const e = document.querySelector("#mlbook-live-test");
  return !!e.dataset.values && JSON.parse(e.dataset.values).q === q;
}"""

FAILED = """() =>
  document.querySelector("#mlbook-live-test").dataset.state === 'error'"""

DRAG_SELECT_SLIDER = """() => {
  const d = document.querySelector(
    '#mlbook-live-test [data-kind="select-slider"] .mlbook-live-drag');
  d.value = "0";
  d.dispatchEvent(new Event("input", {bubbles: true}));
}"""


def _text(value) -> str | bool:
    """A value as a test types it into an input (the value itself)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _number(text: str) -> float:
    return float(text)


def _target(control: dict, attrs, f: float):
    """The valid value at fraction ``f`` (0 = min, 1 = max) of a control's
    range as its input's attributes give it now."""
    kind = control["kind"]
    if kind == "checkbox":
        return f >= 0.5
    if kind in ("dropdown", "select-slider"):
        options = control["options"]
        return options[round(f * (len(options) - 1))]
    lo, hi, step = (_number(a) for a in attrs)
    if control["scale"] == "log":
        last = round(math.log(hi / lo) / math.log(step))
        k = round(f * last)
        v = hi if k == last else lo * step**k
    else:
        last = math.floor((hi - lo) / step + 1e-6)
        k = round(f * last)
        v = hi if k == last and kind == "slider" else lo + k * step
    if all(float(x).is_integer() for x in (lo, hi, step)) and control["scale"] != "log":
        return int(round(v))
    return v


def _same(control: dict, a, b) -> bool:
    if control["kind"] in ("slider", "number"):
        rel = 1e-5 if control["scale"] == "log" else 1e-9
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)
    if control["kind"] == "checkbox":
        return bool(a) == bool(b)
    return str(a) == (b if isinstance(b, str) else json.dumps(b)) or a == b


def _cpython(payload: dict, values: dict):
    function = live.resolve(payload["function"])
    return json.loads(json.dumps(function(**payload["fixed"], **values)))


def _check_draw(page, fig: dict, want: dict | None = None) -> dict:
    """The element after a draw: live, inputs showing data-values, data-result
    the CPython function's for them, ranged inputs with CPython's ranges."""
    payload = fig["payload"]
    got = read(page, fig["id"])
    assert got["state"] == "live" and got["message"] is None, got
    controls = {c["name"]: c for c in payload["controls"]}
    for name, control in controls.items():
        assert _same(control, got["shown"][name], got["values"][name]), (
            f"{fig['id']}: {name} shows {got['shown'][name]!r} but drew "
            f"{got['values'][name]!r}"
        )
        if want is not None:
            assert _same(control, got["values"][name], want[name]), (
                f"{fig['id']}: {name} drew {got['values'][name]!r}, set {want[name]!r}"
            )
    # the payload's controls say what was drawn, ranges included
    assert {c["name"]: c["value"] for c in got["controls"]} == got["values"]
    diff = close(got["result"], _cpython(payload, got["values"]), rel=1e-9)
    assert not diff, (
        f"{fig['id']}: the browser's spec differs from CPython's: {diff[:5]}"
    )
    settled = live.LiveFigure.from_payload(payload).settle(
        got["values"], payload["fixed"]
    )
    for c in settled.controls:
        if c.kind in ("slider", "number"):
            attrs = [float(a) for a in got["attrs"][c.name]]
            assert not close(attrs, [c.min, c.max, c.step], rel=1e-9), (
                f"{fig['id']}: {c.name}'s min/max/step {attrs} are not the ranges "
                f"{[c.min, c.max, c.step]} for {got['values']}"
            )
    return got


def _set_and_wait(
    page, fig: dict, values: list[tuple[str, object]], timeout=None
) -> dict:
    before = read(page, fig["id"])
    typed = [(name, _text(v)) for name, v in values]
    page.evaluate(SET, {"id": fig["id"], "values": typed})
    page.wait_for_function(
        SETTLED,
        arg={"id": fig["id"], "draws": before["draws"] + before["errors"] + 1},
        timeout=timeout or DRAW_TIMEOUT_MS,
        polling=20,
    )
    return read(page, fig["id"])


def is_form(fig: dict) -> bool:
    return fig["payload"].get("view") is not None


def tried(got: dict) -> dict:
    """The values last drawn, or those a form refused after that."""
    if got["state"] == "error" and got["error"] is not None:
        return got["error"]["values"]
    return got["values"]


def _check_refused(page, fig: dict, want: dict | None = None) -> dict:
    """A form's refused input: the inputs show the values tried, CPython
    raises the same FieldError for them, and its message shows next to the
    field it names (or, naming none, under the fields)."""
    payload = fig["payload"]
    got = read(page, fig["id"])
    error = got["error"]
    assert got["state"] == "error" and error is not None, got
    controls = controls_by(fig)
    for name, control in controls.items():
        assert _same(control, got["shown"][name], error["values"][name]), (
            f"{fig['id']}: {name} shows {got['shown'][name]!r}, tried "
            f"{error['values'][name]!r}"
        )
        if want is not None:
            assert _same(control, error["values"][name], want[name]), (name, want)
    function = live.resolve(payload["function"])
    with pytest.raises(live.FieldError) as raised:
        function(**payload["fixed"], **error["values"])
    assert (error["message"], error["field"]) == (
        raised.value.message,
        raised.value.field,
    )
    assert got["message"] == error["message"]
    if error["field"] is None:
        assert got["fieldErrors"] == {}
    else:
        assert got["fieldErrors"] == {error["field"]: error["message"]}
    return got


def _check_outcome(page, fig: dict, want: dict | None = None) -> dict:
    """_check_draw, or for a form that refused the setting, _check_refused."""
    got = read(page, fig["id"])
    if is_form(fig) and got["state"] == "error":
        return _check_refused(page, fig, want)
    return _check_draw(page, fig, want)


def _apply_setting(page, fig: dict, fractions: dict, first: bool) -> dict:
    """Set every control to its fraction of its range; ranges that moved with
    the others are set again in a second pass (as a reader would)."""
    controls = fig["payload"]["controls"]
    state = read(page, fig["id"])
    want = {
        c["name"]: _target(c, state["attrs"][c["name"]], fractions[c["name"]])
        for c in controls
    }
    timeout = BOOT_TIMEOUT_MS if first else None
    state = _set_and_wait(page, fig, list(want.items()), timeout)
    again = {
        c["name"]: _target(c, state["attrs"][c["name"]], fractions[c["name"]])
        for c in controls
    }
    moved = [
        (n, v)
        for n, v in again.items()
        if not _same(controls_by(fig)[n], tried(state)[n], v)
    ]
    if moved:
        _set_and_wait(page, fig, moved)
    return again


def controls_by(fig: dict) -> dict:
    return {c["name"]: c for c in fig["payload"]["controls"]}


def _out_of_range(control: dict, attrs) -> list[tuple[object, object, float]]:
    """(typed value, the value it must be drawn at, how close) for a slider or
    number: past an end, that end (a whole control's exactly, another's to
    six significant digits, so within 1e-5 of it); a value between two grid
    points, as typed (a whole control's rounded; on its grid only where the
    grid is the control's domain, ``on_grid``)."""
    lo, hi, step = (_number(a) for a in attrs)
    whole = bool(control.get("whole"))

    def typed(v):
        return int(v) if whole and float(v).is_integer() else v

    end = 0.0 if whole else 1e-5
    if control["scale"] == "log":
        between = lo * step**0.3
        cases = [(hi * 10, hi, end), (lo / 10, lo, end)]
    else:
        between = lo + 0.3 * step
        cases = [(hi + 10 * step, hi, end), (lo - 10 * step, lo, end)]
    if control.get("on_grid"):
        cases.append((between, lo, 1e-9))
    else:
        cases.append((between, round(between) if whole else between, 1e-9))
    return [(typed(a), typed(b), rel) for a, b, rel in cases]


@pytest.mark.parametrize("name", live_sources())
def test_live_figures_follow_their_controls(served_tab, served, name):
    _has_live(name)
    new_tab = served_tab.opened == 0
    page, w = served_tab.open(f"{served}/{name}")
    page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
    page_bytes = page.evaluate(BYTES)
    figures = page.evaluate(FIGURES)
    assert figures
    rng = random.Random(f"{SEED}:{name}")
    first = True
    for fig in figures:
        controls = fig["payload"]["controls"]
        static = read(page, fig["id"])
        assert (
            static["state"] == "static" and static["drawn"] and static["hint"] is None
        )
        assert static["result"] == fig["payload"]["spec"]
        settings = [{c["name"]: end for c in controls} for end in (0.0, 1.0)]
        settings += [
            {c["name"]: rng.random() for c in controls} for _ in range(RANDOM_SETTINGS)
        ]
        for fractions in settings:
            want = _apply_setting(page, fig, fractions, first)
            first = False
            _check_outcome(page, fig, want)

        # out of range: clamped, shown clamped, drawn so. The clamp is the
        # shared script's; what is the figure's own is each control's range,
        # which every draw above checks against CPython's: the first control
        # of each ranged kind is typed past its ends
        ranged = {}
        for c in controls:
            if c["kind"] in ("slider", "number"):
                ranged.setdefault(c["kind"], c)
        for control in ranged.values():
            attrs = read(page, fig["id"])["attrs"][control["name"]]
            for typed, clamped, rel in _out_of_range(control, attrs):
                state = _set_and_wait(page, fig, [(control["name"], typed)])
                drew = tried(state)[control["name"]]
                assert math.isclose(float(drew), float(clamped), rel_tol=rel) and (
                    _number(attrs[0]) <= float(drew) <= _number(attrs[1])
                ), (
                    f"{fig['id']}: {control['name']}={typed!r} drew {drew!r}, "
                    f"not {clamped!r}"
                )
                _check_outcome(page, fig)

        if is_form(fig):  # back to its defaults, which it accepts
            defaults = [(c["name"], c["value"]) for c in controls]
            _set_and_wait(page, fig, defaults)
            _check_draw(page, fig)

        # faster than draws: five values at once; the last wins, in order (the
        # shared script's queue: the page's first figure answers for it)
        if fig is not figures[0]:
            continue
        control = next(c for c in controls if c["kind"] in ("slider", "number"))
        attrs = read(page, fig["id"])["attrs"][control["name"]]
        burst = [_target(control, attrs, f) for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
        page.evaluate(OBSERVE, fig["id"])
        final = _set_and_wait(page, fig, [(control["name"], v) for v in burst])
        assert _same(control, final["values"][control["name"]], burst[-1])
        written = page.evaluate("() => window.__written")
        order = [
            next(
                i for i, v in enumerate(burst) if _same(control, w_[control["name"]], v)
            )
            for w_ in written
        ]
        assert order and order == sorted(order) and order[-1] == len(burst) - 1, order
        _check_draw(page, fig)

    stats = page.evaluate("() => window.mlbookLive")
    # the tab's first page refuses the bad copy, starts Python and keeps its
    # own snapshot; the others start from that
    assert stats["python_start"] == ("fresh" if new_tab else "snapshot"), stats
    assert bool(stats["snapshot_refused"]) == new_tab, stats
    ids = {f["id"]: f["payload"]["function"] for f in figures}
    for d in stats["draws"]:
        RESULTS["redraws"].setdefault(ids[d["id"]], []).append(d)
    RESULTS["pages"][name] = {
        "boot_s": round(stats["boot_ms"] / 1e3, 2),
        "tab": "new" if new_tab else "warm",
        "python": stats["python_start"],
        "refused": bool(stats["snapshot_refused"]),
        "first_live_draw_s": round(stats["first_live_ms"] / 1e3, 2),
        "page_bytes": page_bytes,
        "live_bytes": page.evaluate(BYTES) - page_bytes,
        "figures": len(figures),
    }
    w.assert_clean()


@pytest.mark.parametrize("name", live_sources())
def test_opened_from_a_file_every_figure_draws_its_default(chapter_pages, name):
    _has_live(name)
    # it types into every figure below
    page, w = chapter_pages.get((HTML / name).as_uri(), changes=("figures",))
    page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
    for fig in page.evaluate(FIGURES):
        got = read(page, fig["id"])
        payload = fig["payload"]
        assert got["state"] == "static" and got["draws"] == 1 and got["drawn"]
        assert got["values"] == {c["name"]: c["value"] for c in payload["controls"]}
        assert got["result"] == payload["spec"]
        assert all(got["disabled"].values()) and all(got["drags"])
        assert got["hint"] and "make serve" in got["hint"]
        page.evaluate(
            SET,
            {"id": fig["id"], "values": [(payload["controls"][0]["name"], "1")]},
        )
    page.wait_for_timeout(300)
    assert all(read(page, f["id"])["draws"] == 1 for f in page.evaluate(FIGURES))
    assert not page.evaluate(PYODIDE_FETCHED), (
        "opened from a file, the page tried to start Python"
    )
    w.assert_clean()


# --- every kind of control and an exception on the same page ----------------------

KINDS = ROOT / "tests" / "helpers" / "live_kinds.py"
TEST_MODULE = "mlbook._live_test"


@pytest.fixture(scope="module")
def kinds_figure():
    """tests/helpers/live_kinds.py imported as mlbook._live_test (here, so
    CPython can run what the browser runs)."""
    spec = importlib.util.spec_from_file_location(TEST_MODULE, KINDS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[TEST_MODULE] = module
    spec.loader.exec_module(module)
    yield module.kinds
    sys.modules.pop(TEST_MODULE, None)


def _archive_with_test_module() -> bytes:
    original = (HTML / "vendor" / "mlbook-py.zip").read_bytes()
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(original)) as zin,
        zipfile.ZipFile(out, "w") as zout,
    ):
        for item in zin.infolist():
            zout.writestr(item, zin.read(item))
        zout.writestr("mlbook/_live_test.py", KINDS.read_text())
    return out.getvalue()


def _page_with_test_figure(figure_html: str) -> tuple[Path, str]:
    """A built live page with the test figure added: (where it pretends to be,
    its HTML)."""
    source = live_pages()[0]
    html = source.read_text()
    depth = "../" * (len(source.relative_to(HTML).parts) - 1)
    if "vendor/live.js" not in html:
        html = html.replace(
            "</head>", f'<script defer src="{depth}vendor/live.js"></script></head>', 1
        )
    html = html.replace("</main>", figure_html + "</main>", 1)
    assert figure_html in html
    return source.with_name("_live_test.html"), html


def test_every_kind_and_an_exception_on_one_page(served_tab, served, kinds_figure):
    from bookext.live import live_html

    payload = kinds_figure.live.payload({"offset": 1.5})
    where, html = _page_with_test_figure(live_html(payload, "mlbook-live-test"))
    url = f"{served}/{where.relative_to(HTML).as_posix()}"
    archive = _archive_with_test_module()
    # a page beside the served tab's: Python starts from its snapshot, if kept
    page = served_tab.context.new_page()
    w = watch(
        page, lambda u: u.startswith((served + "/", "data:", "blob:")), ALLOWED_CONSOLE
    )
    page.route(url, lambda r: r.fulfill(body=html, content_type="text/html"))
    page.route(
        "**/vendor/mlbook-py.zip",
        lambda r: r.fulfill(body=archive, content_type="application/zip"),
    )
    try:
        page.goto(url)
        page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
        fig = next(f for f in page.evaluate(FIGURES) if f["id"] == "mlbook-live-test")
        assert read(page, fig["id"])["state"] == "static"
        steps = [
            [("c", False)],
            [("q", "c")],
            [("d", "2048")],
            [("n", 64)],
            [("g", 100.0)],
            [("x", 7.5)],
        ]
        for i, step in enumerate(steps):
            _set_and_wait(page, fig, step, BOOT_TIMEOUT_MS if i == 0 else None)
            got = _check_draw(page, fig, None)
            name, value = step[0]
            assert _same(controls_by(fig)[name], got["values"][name], value), (
                name,
                got,
            )
        assert got["values"] == {
            "x": 7.5,
            "g": 100.0,
            "q": "c",
            "d": 2048,
            "c": False,
            "n": 64,
        }
        assert "offset=1.5" in got["result"]["title"]["text"]

        # the select-slider's drag moves it by index; the input keeps the value itself
        page.evaluate(DRAG_SELECT_SLIDER)
        page.wait_for_function(DREW_Q, arg="a", timeout=DRAW_TIMEOUT_MS)
        page.wait_for_function(SETTLED, arg={"id": fig["id"], "draws": 0})
        assert read(page, fig["id"])["shown"]["q"] == "a"

        good = read(page, fig["id"])
        page.evaluate(SET, {"id": fig["id"], "values": [("x", "9")]})
        page.wait_for_function(FAILED, timeout=DRAW_TIMEOUT_MS)
        bad = read(page, fig["id"])
        assert bad["message"] == "ValueError: x = 9 m is past 8 m, on purpose"
        assert (
            bad["result"] == good["result"]
            and bad["values"] == good["values"]
            and bad["drawn"]
        )
        _set_and_wait(page, fig, [("x", 3)])
        back = _check_draw(page, fig, None)
        assert back["values"]["x"] == 3 and back["message"] is None
        problems = w.problems()
        assert not [p for p in problems if "anonymous define" in p.lower()], problems
        w.assert_clean()
    finally:
        page.close()
