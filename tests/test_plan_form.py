"""The plan page's planner form in a real browser (the run's one Chromium),
the built book served on 127.0.0.1 (conftest's served tab, which test_live's
served pages use before it): the form's fields set to several valid
settings and to bad values, each compared with ``python -m mlbook plan`` run
as a process for the same flags:

- a valid setting: ``data-result`` is what ``--json`` prints, the budget
  shown is what the command prints without it, the command line shown is
  the one run, and the chart is drawn;
- a bad value: the field the planner names shows the planner's message, the
  one the command prints after its flag in the form's words (or, naming no
  flag of the form's, the message under the fields), the last good result
  stays in data-result, and a good value clears it;
- opened from file://: the default budget shows without Python and is the
  command's.

Nothing leaves 127.0.0.1 and the console stays clean (test_book's
ALLOWED_CONSOLE aside).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_book import HTML, LIVE_DRAWN, open_offline

from helpers.live import close
from mlbook.plan import cli
from mlbook.plan import live as plan_live

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
PAGE = "book/plan.html"
FORM = "mlbook.plan.live:planner_form"
BOOT_TIMEOUT_MS = 90_000
DRAW_TIMEOUT_MS = 30_000

# valid settings, each a change from the form's defaults (Llama-3-70B on 4,096
# H100s): other models, GPUs, parallelism, failure rates, storage, restarts
VALID = [
    {},
    {"model": "Llama-3-8B", "gpu": "A100 SXM", "gpus": 1024, "tp": 4, "mfu": 0.45},
    {
        "model": "Llama-3-405B",
        "tokens": 15.6e12,
        "gpus": 16384,
        "tp": 8,
        "pp": 16,
        "mfu": 0.41,
        "zero": 2,
    },
    {
        "gpus": 2048,
        "failures_per_gpu_hour": 5e-5,
        "storage_gb_per_s": 100,
        "restart_min": 2.5,
        "recompute": "full",
        "seq_len": 4096,
        "micro_batch": 2,
    },
]
# settings the planner refuses by a rule over several fields (a field's own
# rules are its range: tests/test_live_controls.py): (change, the field the
# planner's message names, or None)
BAD = [
    ({"tp": 3}, "tp"),
    ({"gpus": 1000, "pp": 16}, "gpus"),
    ({"pp": 100}, "pp"),
    ({"failures_per_gpu_hour": 1e-3, "gpus": 16384}, None),
]

READ = """(id) => {
  const e = document.getElementById(id);
  const fields = {};
  for (const f of e.querySelectorAll(".mlbook-live-field-error"))
    if (!f.hidden) fields[f.dataset.for] = f.textContent;
  const shown = {};
  for (const i of e.querySelectorAll("[name]")) shown[i.name] = i.value;
  const message = e.querySelector(".mlbook-live-message");
  return {state: e.dataset.state, draws: Number(e.dataset.draws || 0),
          errors: Number(e.dataset.errors || 0),
          values: JSON.parse(e.dataset.values || "null"),
          result: JSON.parse(e.dataset.result || "null"),
          error: JSON.parse(e.dataset.error || "null"),
          fields, shown,
          message: message.hidden ? null : message.textContent,
          text: e.querySelector(".mlbook-live-text").textContent,
          command: e.querySelector(".mlbook-live-command").textContent,
          drawn: !!e.querySelector(".mlbook-live-chart canvas, .mlbook-live-chart svg"),
          disabled: [...e.querySelectorAll("[name]")].every(i => i.disabled)};
}"""

SET = """(a) => {
  const e = document.getElementById(a.id);
  for (const [name, value] of a.values) {
    const i = e.querySelector(`[name="${name}"]`);
    i.value = value;
    i.dispatchEvent(new Event("change", {bubbles: true}));
  }
}"""

DONE = """(a) => {
  const e = document.getElementById(a.id);
  const done = Number(e.dataset.draws || 0) + Number(e.dataset.errors || 0);
  return ["live", "error"].includes(e.dataset.state) && done >= a.done;
}"""

FIND = """(f) => [...document.querySelectorAll("[data-mlbook-live]")]
  .filter(e => JSON.parse(e.getAttribute("data-mlbook-live")).function === f)
  .map(e => e.id)"""


def command(values: dict, *extra: str) -> subprocess.CompletedProcess:
    """``python -m mlbook plan`` for the form's values, as a process."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mlbook",
            "plan",
            *plan_live.plan_argv(**values),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def _typed(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _set(page, uid, change: dict, timeout=DRAW_TIMEOUT_MS) -> dict:
    before = page.evaluate(READ, uid)
    typed = [(k, _typed(v)) for k, v in change.items()]
    page.evaluate(SET, {"id": uid, "values": typed})
    page.wait_for_function(
        DONE,
        arg={"id": uid, "done": before["draws"] + before["errors"] + 1},
        timeout=timeout,
        polling=20,
    )
    return page.evaluate(READ, uid)


def _same_as_the_command(got: dict) -> None:
    assert got["state"] == "live" and got["message"] is None and got["fields"] == {}
    values = got["values"]
    for name, value in values.items():  # the inputs show what was drawn
        shown = got["shown"][name]
        same = shown == value if isinstance(value, str) else float(shown) == value
        assert same, (name, shown, value)
    js = command(values, "--json")
    assert js.returncode == 0, js.stderr
    diff = close(got["result"], json.loads(js.stdout), rel=1e-9)
    assert not diff, f"the form's data-result differs from --json: {diff[:5]}"
    text = command(values)
    assert got["text"] == text.stdout.rstrip("\n")
    # the command shown, read as the command reads it, is the values drawn
    # (1.56e13 and 15600000000000 are the same --tokens)
    shown = vars(cli.parser().parse_args(shlex.split(got["command"][2:])[4:]))
    assert shown == vars(cli.parser().parse_args(plan_live.plan_argv(**values)))
    assert got["drawn"]


def test_the_form_is_the_command(served_tab, served):
    # the served tab's next page: Python starts from the snapshot test_live's
    # pages kept (the served_tab group, tests/conftest.py), or, run alone, from nothing
    page, w = served_tab.open(f"{served}/{PAGE}")
    page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
    (uid,) = page.evaluate(FIND, FORM)
    static = page.evaluate(READ, uid)
    assert static["state"] == "static" and static["drawn"]
    defaults = dict(static["values"])
    first = True
    for change in VALID:
        got = _set(
            page,
            uid,
            {**defaults, **change},
            BOOT_TIMEOUT_MS if first else DRAW_TIMEOUT_MS,
        )
        first = False
        for name, value in change.items():
            assert got["values"][name] == value, (name, got["values"])
        _same_as_the_command(got)

    good = _set(page, uid, defaults)
    _same_as_the_command(good)
    for change, field in BAD:
        bad = _set(page, uid, {**defaults, **change})
        tried = {**defaults, **change}
        run = command(tried, "--json")
        assert run.returncode == 2 and run.stdout == ""
        flag = "--" + field.replace("_", "-") if field else "arguments"
        head = f"python -m mlbook plan: error: {flag}: "
        assert run.stderr.startswith(head), run.stderr
        message = plan_live.in_the_forms_words(run.stderr[len(head) :].rstrip("\n"))
        assert bad["state"] == "error" and bad["error"]["values"] == tried
        assert bad["error"] == {"values": tried, "field": field, "message": message}
        assert bad["fields"] == ({field: message} if field else {})
        assert bad["message"] == message
        # the last good result and its budget stay
        assert bad["result"] == good["result"] and bad["text"] == good["text"]
        assert bad["values"] == good["values"]
        back = _set(page, uid, defaults)  # a good value clears the message
        assert back["state"] == "live" and back["message"] is None
        assert back["fields"] == {} and back["error"] is None
        assert back["result"] == good["result"] and back["text"] == good["text"]
    w.assert_clean()


def test_opened_from_a_file_the_form_shows_the_commands_default(browser):
    context, page, w = open_offline(browser, HTML / PAGE)
    try:
        page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
        (uid,) = page.evaluate(FIND, FORM)
        got = page.evaluate(READ, uid)
        assert got["state"] == "static" and got["disabled"] and got["drawn"]
        js = command(got["values"], "--json")
        assert not close(got["result"], json.loads(js.stdout), rel=1e-12)
        assert got["text"] == command(got["values"]).stdout.rstrip("\n")
        w.assert_clean()
    finally:
        context.close()


@pytest.fixture(scope="module")
def browser(book, chromium_browser):
    return chromium_browser
