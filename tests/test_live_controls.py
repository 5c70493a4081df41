"""What the live controls do with what a reader types, in a real browser (the
run's one Chromium, the built book served on 127.0.0.1, conftest's served
tab), on the MFU chapter's planner of training days and on the plan page's
form:

- a value outside the control's range ("-5", "1e9", one past an end, "1e-9"
  of a count) is drawn at the nearest end, the box shows it, and the line
  under the box names the rule ("at least 1: -5 became 1");
- a value inside the range is kept as typed, in the box and in the figure
  (the MFU calculator's 2,400,000, 100,000 and 12,000 tokens/s; 2.4e9
  tokens in the plan form, which plans what the command plans for them);
- a value that cannot be read ("2,5", "abc", "1e308") is refused on that
  line, with what was typed, and the box and the figure keep the last value;
- a rate's least value is above 0: 1e-9 failures per GPU-hour plans;
- the form after a refusal: its message in the form's words under the field
  it names (TP, not tp), the budget, command line and chart hidden as stale,
  and all of it gone once the field is fixed;
- the controls from the keyboard: typed, Enter, the arrow keys; every
  control and answer box with an accessible name.

The expected values and rules are written here from the controls'
declarations (mlbook/mfu/live.py, mlbook/plan/live.py), not read from the code
under test.
"""

from __future__ import annotations

import json

import pytest
from test_book import LIVE_DRAWN
from test_plan_form import DONE, SET  # setting controls, waiting for the draw

pytestmark = pytest.mark.book

MFU = "notebooks/mfu.html"
PLAN = "book/plan.html"
PLANNER = "mlbook.mfu.live:training_days_planner"
CALCULATOR = "mlbook.mfu.live:mfu_calculator"
FORM = "mlbook.plan.live:planner_form"
BOOT_TIMEOUT_MS = 90_000
DRAW_TIMEOUT_MS = 30_000

FIND = """(f) => [...document.querySelectorAll("[data-mlbook-live]")]
  .filter(e => JSON.parse(e.getAttribute("data-mlbook-live")).function === f)
  .map(e => e.id)"""

READ = """(id) => JSON.stringify((() => {
  const e = document.getElementById(id);
  const shown = {}, lines = {};
  for (const i of e.querySelectorAll("[name]")) shown[i.name] = i.value;
  for (const p of e.querySelectorAll(".mlbook-live-note, .mlbook-live-field-error"))
    if (!p.hidden) lines[p.dataset.for + (p.classList.contains("mlbook-live-note")
      ? ":note" : ":error")] = p.textContent;
  const visible = (sel) => {
    const x = e.querySelector(sel);
    return !!x && !x.hidden && x.getClientRects().length > 0;
  };
  const message = e.querySelector(".mlbook-live-message");
  const command = e.querySelector(".mlbook-live-command");
  return {state: e.dataset.state, draws: Number(e.dataset.draws || 0),
          errors: Number(e.dataset.errors || 0), stale: e.dataset.stale || null,
          values: JSON.parse(e.dataset.values || "null"),
          result: JSON.parse(e.dataset.result || "null"),
          error: JSON.parse(e.dataset.error || "null"),
          shown, lines, message: message.hidden ? null : message.textContent,
          command: visible(".mlbook-live-command"), text: visible(".mlbook-live-text"),
          chart: visible(".mlbook-live-chart"),
          staleLine: visible(".mlbook-live-stale"),
          commandText: command ? command.textContent : null,
          invalid: [...e.querySelectorAll("[aria-invalid=true]")].map(i => i.name)};
})())"""

# every control's input and every answer box, with the name assistive
# technology gives it: its <label>s' text, else its aria-label
NAMES = """() => [...document.querySelectorAll(
    "[data-mlbook-live] input, [data-mlbook-live] select, .mlbook-answer input")]
  .map(i => ({name: i.name || i.className, type: i.type,
              answer: !!i.closest(".mlbook-answer"),
              label: ([...(i.labels || [])].map(l => l.textContent.trim()).join(" ")
                      || i.getAttribute("aria-label") || "").trim(),
              tabbable: i.tabIndex >= 0 && !i.disabled}))"""


def read(page, uid: str) -> dict:
    return json.loads(page.evaluate(READ, uid))


def type_in(page, uid: str, change: dict, timeout=DRAW_TIMEOUT_MS) -> dict:
    """Set the inputs as typed text and wait for the draw (or refusal)."""
    before = read(page, uid)
    page.evaluate(SET, {"id": uid, "values": list(change.items())})
    page.wait_for_function(
        DONE,
        arg={"id": uid, "done": before["draws"] + before["errors"] + 1},
        timeout=timeout,
        polling=20,
    )
    return read(page, uid)


def _open(served_tab, served, path, function):
    page, w = served_tab.open(f"{served}/{path}")
    page.wait_for_function(LIVE_DRAWN, timeout=DRAW_TIMEOUT_MS, polling=50)
    (uid,) = page.evaluate(FIND, function)
    return page, w, uid


def test_the_mfu_planner_says_what_it_did_with_each_typed_gpu_count(served_tab, served):
    page, w, uid = _open(served_tab, served, MFU, PLANNER)
    # the page's default, then a good value to come back to
    good = type_in(page, uid, {"n_gpus": "2048"}, BOOT_TIMEOUT_MS)
    assert good["values"]["n_gpus"] == 2048 and good["lines"] == {}
    # (typed, the value drawn, the line under the box): GPUs run from 1 to 1,000,000
    cases = [
        ("-5", 1, "at least 1: -5 became 1"),
        ("2048", 2048, None),
        ("1e9", 1_000_000, "at most 1,000,000: 1e9 became 1,000,000"),
        ("1000001", 1_000_000, "at most 1,000,000: 1000001 became 1,000,000"),
        ("0", 1, "at least 1: 0 became 1"),
        ("1e-9", 1, "at least 1: 1e-9 became 1"),
        ("7.6", 8, "a whole number: 7.6 became 8"),
    ]
    for typed, drawn, note in cases:
        got = type_in(page, uid, {"n_gpus": typed})
        assert got["state"] == "live" and got["message"] is None, got
        assert got["values"]["n_gpus"] == drawn and got["shown"]["n_gpus"] == str(drawn)
        assert got["lines"] == ({"n_gpus:note": note} if note else {}), typed

    kept = type_in(page, uid, {"n_gpus": "4096"})
    refused = [
        (
            "2,5",
            "Write decimals with a point: 2.5, not 2,5 (a comma only groups "
            "thousands, as in 16,384); it keeps 4,096.",
        ),
        ("abc", '"abc" is not a number; it keeps 4,096'),
        (
            "1e308",
            '"1e308" is too large a number to read here (this control takes '
            "1 to 1,000,000); it keeps 4,096",
        ),
        ("", "the box is empty: type a number; it keeps 4,096"),
    ]
    for typed, message in refused:
        got = type_in(page, uid, {"n_gpus": typed})
        # refused, not reinterpreted: the box and the figure keep 4,096
        assert got["state"] == "live" and got["message"] is None, got
        assert got["values"] == kept["values"] and got["result"] == kept["result"]
        assert got["shown"]["n_gpus"] == "4096"
        assert got["lines"] == {"n_gpus:error": message}, got["lines"]
        assert got["invalid"] == ["n_gpus"]
    # a good value clears the line
    back = type_in(page, uid, {"n_gpus": "4096"})
    assert back["lines"] == {} and back["invalid"] == []
    # a slider's value past its end: MFU runs from 0.05 to 0.8
    got = type_in(page, uid, {"mfu_value": "0.81"})
    assert got["values"]["mfu_value"] == 0.8
    assert got["lines"] == {"mfu_value:note": "at most 0.8: 0.81 became 0.8"}
    w.assert_clean()


def test_the_plan_form_fits_refuses_and_hides_its_stale_budget(served_tab, served):
    page, w, uid = _open(served_tab, served, PLAN, FORM)
    good = type_in(page, uid, {"gpus": "4096"}, BOOT_TIMEOUT_MS)
    assert good["state"] == "live" and good["command"] and good["chart"]
    assert not good["staleLine"] and good["stale"] is None

    # each field's range is the planner's own rule: just outside it, fitted
    fitted = [
        ("mfu", "1.001", 1, "at most 1: 1.001 became 1"),
        ("mfu", "0", 0.001, "at least 0.001: 0 became 0.001"),
        ("tokens", "0", 1, "at least 1: 0 became 1"),
        ("micro_batch", "-5", 1, "at least 1: -5 became 1"),
        ("storage_gb_per_s", "0", 0.1, "at least 0.1: 0 became 0.1"),
        (
            "failures_per_gpu_hour",
            "1e-10",
            1e-9,
            "at least 1e-9: 1e-10 became 1e-9",
        ),
    ]
    for name, typed, drawn, note in fitted:
        got = type_in(page, uid, {name: typed})
        assert got["state"] == "live", (name, got["message"])
        assert got["values"][name] == drawn and got["lines"] == {f"{name}:note": note}
        type_in(page, uid, {name: str(good["values"][name])})

    # a rate's least value plans: 1e-9 failures per GPU-hour is not 0
    got = type_in(page, uid, {"failures_per_gpu_hour": "1e-9"})
    assert got["state"] == "live" and got["lines"] == {}
    assert got["values"]["failures_per_gpu_hour"] == 1e-9
    # an hour over (1e-9 a GPU-hour x 4,096 GPUs) between failures
    assert got["result"]["job_mtbf_s"] == pytest.approx(3600 / (1e-9 * 4096))
    assert "--failures-per-gpu-hour 1e-9" in got["commandText"]
    back = type_in(page, uid, {"failures_per_gpu_hour": "1.973e-5"})

    # unreadable: refused on the field's line, the field keeps its value
    for name, typed in (("mfu", "2,5"), ("tokens", "abc"), ("gpus", "1e308")):
        got = type_in(page, uid, {name: typed})
        assert got["state"] == "live" and got["values"] == back["values"]
        assert got["shown"][name] == back["shown"][name]
        (line,) = got["lines"].items()
        assert line[0] == f"{name}:error"
        assert line[1].startswith((f'"{typed}" is ', "Write decimals with a point"))

    # -5 GPUs: fitted to 1, which TP 8 does not divide: a joint rule, in the
    # form's words, under the field; the budget, which is for 4,096 GPUs, hidden
    bad = type_in(page, uid, {"gpus": "-5"})
    message = (
        "GPUs = 1 must be a multiple of TP x PP = 8 (the data-parallel size DP = "
        "GPUs / (TP x PP) is a whole number)"
    )
    assert bad["state"] == "error" and bad["stale"] == "true"
    assert bad["shown"]["gpus"] == "1" and bad["message"] == message
    assert bad["lines"] == {
        "gpus:note": "at least 1: -5 became 1",
        "gpus:error": message,
    }
    assert bad["invalid"] == ["gpus"]
    assert not (bad["command"] or bad["text"] or bad["chart"]) and bad["staleLine"]
    assert bad["result"] == back["result"]  # data-result keeps the last good one
    # another refusal: TP 3 does not divide the model's 64 heads
    tp = type_in(page, uid, {"gpus": "4096", "tp": "3"})
    assert tp["lines"] == {
        "tp:error": "TP = 3 must divide the model's 64 heads (tensor parallelism "
        "splits attention by heads)"
    }
    assert "tp=" not in tp["message"] and "n_heads" not in tp["message"]
    assert not tp["command"] and tp["staleLine"]
    # fixed: the message goes, the budget is back, for TP 4
    fixed = type_in(page, uid, {"tp": "4"})
    assert fixed["state"] == "live" and fixed["stale"] is None
    assert fixed["lines"] == {} and fixed["message"] is None and fixed["invalid"] == []
    assert fixed["command"] and fixed["text"] and fixed["chart"]
    assert not fixed["staleLine"] and "--tp 4" in fixed["commandText"]
    # TP one past its end (128): fitted, and then the joint rule
    past = type_in(page, uid, {"tp": "129"})
    assert past["shown"]["tp"] == "128"
    assert past["lines"]["tp:note"] == "at most 128: 129 became 128"
    assert past["lines"]["tp:error"].startswith("TP = 128 must divide")
    type_in(page, uid, {"tp": "8"})
    w.assert_clean()


def test_the_controls_work_from_the_keyboard_and_have_names(served_tab, served):
    page, w, uid = _open(served_tab, served, MFU, PLANNER)
    box = page.locator(f"#{uid} [name=n_gpus]")
    box.fill("2048")
    box.press("Enter")  # Enter commits the box
    page.wait_for_function(
        "(id) => JSON.parse(document.getElementById(id).dataset.values).n_gpus"
        " === 2048",
        arg=uid,
        timeout=BOOT_TIMEOUT_MS,
    )
    before = read(page, uid)
    box.press("ArrowUp")  # one step of its grid: GPUs go by 1
    page.wait_for_function(
        DONE, arg={"id": uid, "done": before["draws"] + 1}, timeout=DRAW_TIMEOUT_MS
    )
    assert read(page, uid)["values"]["n_gpus"] == 2049
    box.fill("2,5")
    box.press("Tab")  # leaving the box commits it too
    page.wait_for_function(
        DONE, arg={"id": uid, "done": before["draws"] + 2}, timeout=DRAW_TIMEOUT_MS
    )
    got = read(page, uid)
    assert got["shown"]["n_gpus"] == "2049" and "n_gpus:error" in got["lines"]
    # the MFU slider's drag, from the keyboard: 0.4 -> 0.41
    drag = page.locator(f"#{uid}").get_by_role("slider", name="MFU (fraction of peak)")
    drag.focus()
    drag.press("ArrowRight")
    page.wait_for_function(
        "(id) => JSON.parse(document.getElementById(id).dataset.values).mfu_value"
        " === 0.41",
        arg=uid,
        timeout=DRAW_TIMEOUT_MS,
    )
    found = page.evaluate(NAMES)
    assert any(f["answer"] for f in found) and any(not f["answer"] for f in found)
    for f in found:
        assert f["label"], f"{f['name']} ({f['type']}) has no accessible name"
        assert f["tabbable"], f
    w.assert_clean()


def test_the_mfu_calculator_keeps_the_chapters_numbers_as_typed(served_tab, served):
    """mfu-3's 2,400,000 tokens/s on 16,384 H100s, mfu-2's 100,000 on 1,024
    A100s (GPT-3, s = 2048), mfu-1's 12,000 on one H100 (Llama-2-7B, s =
    4096): each drawn as typed, the box keeping the reader's text."""
    page, w, uid = _open(served_tab, served, MFU, CALCULATOR)
    got = type_in(page, uid, {"tokens_per_s": "2,400,000"}, BOOT_TIMEOUT_MS)
    assert got["values"]["tokens_per_s"] == 2_400_000 and got["lines"] == {}
    assert got["shown"]["tokens_per_s"] == "2,400,000"
    # an arrow key steps to the next round grid point above it: 5,000 tokens/s
    box = page.locator(f"#{uid} [name=tokens_per_s]")
    box.press("ArrowUp")
    page.wait_for_function(
        DONE, arg={"id": uid, "done": got["draws"] + 1}, timeout=DRAW_TIMEOUT_MS
    )
    assert read(page, uid)["values"]["tokens_per_s"] == 2_405_000
    gpt3 = {"model": "GPT-3 175B", "gpu": "A100 SXM", "n_gpus": "1024"}
    got = type_in(page, uid, {**gpt3, "seq_len": "2048", "tokens_per_s": "100000"})
    assert got["values"]["tokens_per_s"] == 100_000 and got["lines"] == {}
    assert got["shown"]["tokens_per_s"] == "100000"
    one = {"model": "Llama-2-7B", "gpu": "H100 SXM", "n_gpus": "1", "seq_len": "4096"}
    got = type_in(page, uid, {**one, "tokens_per_s": "12,000"})
    assert got["values"]["tokens_per_s"] == 12_000 and got["lines"] == {}
    assert got["shown"]["tokens_per_s"] == "12,000"
    # 12,000 x 46,084,915,200 FLOPs a token / 989e12 FLOP/s = 55.9 % (mfu-1)
    assert "MFU 55.9%" in got["result"]["title"]["text"]
    # past 100 % MFU (Llama-3-405B on one H100: 376.70097 tokens/s): the end,
    # as a reader reads it, in the box and the title, and the line says so
    got = type_in(
        page,
        uid,
        {"model": "Llama-3-405B", "seq_len": "8192", "tokens_per_s": "2,400,000"},
    )
    assert got["values"]["tokens_per_s"] == 376.7
    assert got["shown"]["tokens_per_s"] == "376.7"
    assert got["lines"] == {
        "tokens_per_s:note": "at most 376.7: 2,400,000 became 376.7"
    }
    assert "MFU 100.0%" in got["result"]["title"]["text"]
    w.assert_clean()


def test_the_plan_form_plans_what_is_typed_as_the_command_does(served_tab, served):
    """2.4e9 tokens plans 2.4e9 tokens, the command line shows 2.4e9, and the
    budget is what the command prints for it; a failure rate keeps its digits."""
    import shlex
    import subprocess
    import sys

    page, w, uid = _open(served_tab, served, PLAN, FORM)
    got = type_in(page, uid, {"tokens": "2.4e9"}, BOOT_TIMEOUT_MS)
    assert got["values"]["tokens"] == 2.4e9 and got["lines"] == {}
    assert got["shown"]["tokens"] == "2.4e9" and got["result"]["tokens"] == 2.4e9
    argv = shlex.split(got["commandText"].removeprefix("$ "))
    assert argv[:4] == ["python", "-m", "mlbook", "plan"]
    assert argv[argv.index("--tokens") + 1] == "2.4e9"
    run = subprocess.run(
        [sys.executable, *argv[1:], "--json"], capture_output=True, text=True
    )
    assert run.returncode == 0 and json.loads(run.stdout) == got["result"]
    got = type_in(page, uid, {"failures_per_gpu_hour": "3.1415e-5"})
    assert got["values"]["failures_per_gpu_hour"] == 3.1415e-5 and got["lines"] == {}
    assert "--failures-per-gpu-hour 3.1415e-5" in got["commandText"]
    w.assert_clean()
