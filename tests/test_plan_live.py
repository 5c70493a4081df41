"""The plan page's live figure and planner form without a browser: the
budget figure against the plan's own numbers, the form against the command
(its JSON, its errors, its flags), the first-order account the planner adds
up, and what the shared live machinery does for a form (the payload's view,
draw_json's field errors, the book's HTML, the JupyterLab host). The browser
runs are tests/test_plan_form.py and tests/test_live.py."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import examples
from mlbook.common import live
from mlbook.common.units import GIB
from mlbook.plan import cli
from mlbook.plan import live as plan_live
from mlbook.plan.planner import (
    RunSpec,
    as_dict,
    plan,
    restart_for_goodput,
    wall_clock_s,
)

PROPERTY_COVERS = {
    "mlbook.plan.live.budget_chart",
    "mlbook.plan.live.budget_explorer",
    "mlbook.plan.live.plan_argv",
    "mlbook.plan.live.budget_view",
    "mlbook.plan.live.planner_form",
    "mlbook.plan.live.in_the_forms_words",
    "mlbook.plan.cli.flag_for",
    "mlbook.plan.planner.wall_clock_s",
    "mlbook.plan.planner.restart_for_goodput",
}

ROOT = Path(__file__).resolve().parent.parent
FORM = plan_live.planner_form.live
EXPLORER = plan_live.budget_explorer.live
USABLE_H100_GIB = 81_559 / 1024  # nvidia-smi's total for an H100 80GB


def cli_json(argv: list[str]) -> tuple[int, dict | None, str]:
    """``python -m mlbook plan ARGV --json`` in this process: (status, JSON, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([*argv, "--json"])
    return status, json.loads(out.getvalue()) if status == 0 else None, err.getvalue()


def _bars(spec: dict) -> dict:
    """{bar title: [(part, value, start, end)]} of a budget chart."""
    out = {}
    for view in spec["vconcat"]:
        rows = view["layer"][0]["data"]["values"]
        field = view["layer"][0]["encoding"]["tooltip"][1]["field"]
        out[view["title"]["text"]] = [
            (r["part"], r[field], r["start"], r["end"]) for r in rows
        ]
    return out


# --- the budget figure -------------------------------------------------------------


def test_the_budget_figure_stacks_the_plans_days_and_memory():
    spec = plan_live.budget_explorer(
        "Llama-3-70B", 15, "H100 SXM", 4096, 8, 1, 0.4, 1, "selective", 10
    )
    p = plan(
        RunSpec(model="Llama-3-70B", tokens=15e12, gpu="H100 SXM", n_gpus=4096, tp=8)
    )
    days, memory = _bars(spec).values()
    # the parts lie end to end and add up to the plan's totals
    assert [v for _, v, _, _ in days] == pytest.approx(
        [p.ideal_days, p.checkpoint_days, p.rework_days, p.restart_days], rel=1e-12
    )
    assert days[-1][3] == pytest.approx(p.expected_days, rel=1e-12)
    assert all(a[3] == pytest.approx(b[2]) for a, b in pairwise(days))
    # 70.55 B parameters: bf16 weights over tp 8 = 2 x 70,553,706,496 / 8 bytes
    assert memory[0][1] == pytest.approx(2 * 70_553_706_496 / 8 / GIB, rel=1e-12)
    assert memory[-1][3] == pytest.approx(p.memory.total_bytes / GIB, rel=1e-12)
    rule = spec["vconcat"][1]["layer"][1]["data"]["values"][0]
    assert rule == {"memory": USABLE_H100_GIB, "card": 80}
    title = spec["title"]["text"]
    assert "4,096 x H100 SXM (tp 8, pp 1) at 40% MFU" in title
    assert f"{p.expected_days:,.1f} days expected" in _titles(spec)[0]
    assert "fits" in _titles(spec)[1]
    assert json.loads(json.dumps(spec, allow_nan=False)) == spec


def _titles(spec):
    return [v["title"]["text"] for v in spec["vconcat"]]


def test_a_setting_that_does_not_fit_says_by_how_much():
    spec = plan_live.budget_explorer(
        "Llama-3-405B", 15.6, "H100 SXM", 16384, 8, 16, 0.41, 1, "selective", 10
    )
    short = plan(
        RunSpec(
            model="Llama-3-405B",
            tokens=15.6e12,
            gpu="H100 SXM",
            n_gpus=16384,
            mfu=0.41,
            tp=8,
            pp=16,
        )
    ).memory.short_bytes
    assert short > 0 and f"short by {short / GIB:,.1f} GiB" in _titles(spec)[1]


def test_the_explorer_offers_only_plannable_gpus():
    gpus = dict((c.name, c) for c in EXPLORER.controls)["gpu"].options
    assert "V100 SXM2" not in gpus and "H100 SXM" in gpus  # no bf16 on a V100
    assert "V100 SXM2" not in plan_live.GPUS


@examples(50)
@given(st.data())
def test_every_setting_of_the_explorer_is_a_plan(data):
    values = {
        c.name: data.draw(
            st.sampled_from(c.options)
            if c.options
            else st.integers(0, c.last_step).map(
                lambda k, c=c: c.clamp(c.min + k * c.step)
            )
        )
        for c in EXPLORER.controls
    }
    spec = plan_live.budget_explorer(**values)
    days, memory = _bars(spec).values()
    assert all(v >= 0 for _, v, _, _ in days + memory)
    assert days[-1][3] > days[0][1] > 0  # the expected days exceed the ideal
    d = as_dict(
        plan(
            RunSpec(
                model=values["model"],
                tokens=values["tokens_trillions"] * 1e12,
                gpu=values["gpu"],
                n_gpus=values["n_gpus"],
                tp=values["tp"],
                pp=values["pp"],
                mfu=values["mfu"],
                zero_stage=values["zero_stage"],
                recompute=values["recompute"],
                restart_s=values["restart_min"] * 60,
            )
        )
    )
    assert spec == plan_live.budget_chart(d, spec["title"]["text"])


# --- the form against the command -------------------------------------------------


def test_the_forms_fields_are_the_commands_flags_in_their_units():
    dests = {a.dest: a for a in cli.parser()._actions}
    for control in FORM.controls:
        assert control.name in dests, control.name
        flag = "--" + control.name.replace("_", "-")
        assert flag in dests[control.name].option_strings
        assert f"({flag})" in control.label  # the label names the flag
    # the defaults are the command's (the failure rate to four digits)
    defaults = FORM.values()
    assert defaults["storage_gb_per_s"] == 200 and defaults["restart_min"] == 10
    assert defaults["mfu"] == 0.4 and defaults["seq_len"] == 8192
    rate = cli.parser().get_default("failures_per_gpu_hour")
    assert defaults["failures_per_gpu_hour"] == pytest.approx(rate, rel=1e-3)


def test_the_default_form_is_the_commands_json_run_as_a_process():
    payload = FORM.payload()
    values = {c["name"]: c["value"] for c in payload["controls"]}
    argv = plan_live.plan_argv(**values)
    run = subprocess.run(
        [sys.executable, "-m", "mlbook", "plan", *argv, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert payload["spec"] == json.loads(run.stdout)
    display = payload["display"]
    assert display["command"] == "python -m mlbook plan " + shlex.join(argv)
    assert display["text"] == "\n".join(cli.budget_lines(payload["spec"]))
    assert "expected days" in display["text"] and "goodput" in display["text"]


@pytest.mark.parametrize(
    "change, field, starts, cli_starts",
    [
        (
            {"tp": 3},
            "tp",
            "TP = 3 must divide the model's 64 heads",
            "tp=3 must divide the model's n_heads=64",
        ),
        (
            {"pp": 100},
            "pp",
            "PP = 100 must not exceed the model's 80 layers",
            "pp=100 must not exceed the model's n_layers=80",
        ),
        (
            {"gpus": 1000, "pp": 16},
            "gpus",
            "GPUs = 1,000 must be a multiple of TP x PP = 128 (the data-parallel "
            "size DP = GPUs / (TP x PP) is a whole number)",
            "n_gpus=1000 must be a multiple of tp x pp = 128",
        ),
        (
            {"failures_per_gpu_hour": 1e-3, "gpus": 16384},
            None,
            "the run cannot make progress",
            "the run cannot make progress",
        ),
    ],
)
def test_a_joint_rule_is_the_planners_message_in_the_forms_words(
    change, field, starts, cli_starts
):
    values = {**FORM.values(), **change}
    with pytest.raises(live.FieldError) as raised:
        plan_live.planner_form(**values)
    error = raised.value
    assert error.field == field and error.message.startswith(starts), error.message
    assert str(error) == error.message
    # no planner parameter name in what the form says
    assert not re.search(r"\b(n_gpus|tp|pp|n_heads|n_layers|dp)\b", error.message)
    status, _, stderr = cli_json(plan_live.plan_argv(**values))
    flag = "--" + field.replace("_", "-") if field else "arguments"
    assert status == 2  # the command keeps its flags and the planner's words
    head = f"python -m mlbook plan: error: {flag}: "
    assert stderr.startswith(head + cli_starts)
    assert plan_live.in_the_forms_words(stderr[len(head) : -1]) == error.message


def test_the_advice_names_a_field_the_form_has():
    values = {**FORM.values(), "failures_per_gpu_hour": 1e-3, "gpus": 16384}
    with pytest.raises(live.FieldError) as raised:
        plan_live.planner_form(**values)
    assert "shorten the checkpoint interval" in raised.value.message
    labels = {c.name: c.label for c in FORM.controls}
    assert labels["interval_min"].startswith("checkpoint interval")
    assert labels["restart_min"].startswith("restart time")
    # and the interval it names plans: a shorter one than Young's optimum
    young = plan_live.planner_form(**FORM.values())["checkpoint_interval_s"] / 60
    shorter = plan_live.planner_form(**{**FORM.values(), "interval_min": 2})
    assert 2 < young and shorter["checkpoint_interval_s"] == 120


# (a field, an end, a value beyond it, what the command says): the form's
# range for a field is the command's range for its flag (cli.LIMITS)
COMMAND_ENDS = [
    (
        "mfu",
        "max",
        1.001,
        "--mfu 1.001: MFU, a fraction of peak, must be from 0.001 to 1",
    ),
    ("mfu", "min", 0.0, "--mfu 0: MFU, a fraction of peak, must be from 0.001 to 1"),
    ("gpus", "min", 0, "--gpus 0: the GPU count G must be a whole number from 1"),
    ("tp", "min", 0, "--tp 0: the tensor-parallel size must be a whole number from 1"),
    ("pp", "min", 0, "--pp 0: the pipeline-parallel size must be a whole number"),
    ("micro_batch", "min", 0, "--micro-batch 0: the micro-batch must be a whole"),
    (
        "tokens",
        "min",
        0.0,
        "--tokens 0: the training tokens D must be from 1 to 1e15",
    ),
    ("tokens", "max", 2e15, "--tokens 2e15: the training tokens D must be from 1"),
    ("failures_per_gpu_hour", "min", 0.0, "the failure rate must be from 1e-9 to"),
    ("storage_gb_per_s", "min", 0.0, "the checkpoint write bandwidth must be from 0.1"),
    ("restart_min", "min", -0.1, "--restart-min -0.1: the restart time must be from 0"),
]


@pytest.mark.parametrize("name, end, beyond, rule", COMMAND_ENDS)
def test_each_fields_range_is_the_commands_rule_for_its_flag(name, end, beyond, rule):
    control = {c.name: c for c in FORM.controls}[name]
    edge = getattr(control, end)
    base = {**FORM.values(), "gpus": 4096, "tp": 1}  # any GPU count plans at TP 1
    # the end itself plans (a rate's least value is above 0)
    assert plan_live.planner_form(**{**base, name: edge})["model"] == "Llama-3-70B"
    assert (edge > 0) if name != "restart_min" else edge == 0
    # beyond it the command refuses it by the flag's own rule...
    status, _, stderr = cli_json(plan_live.plan_argv(**{**base, name: beyond}))
    assert status == 2 and rule in stderr, stderr
    # ...and the form never passes it on: the value goes to the end, said so
    drawn = FORM.draw({**base, name: str(beyond)})
    assert drawn.values[name] == edge
    side = "at most" if end == "max" else "at least"
    assert drawn.notes == {
        name: f"{side} {live._show(edge)}: {beyond} became {live._show(edge)}"
    }


def test_typed_values_plan_as_typed_and_as_the_command_does():
    """2.4e9 tokens plans 2.4e9 tokens (the arrow keys' steps of 1e12 round
    nothing), as the command does for --tokens 2.4e9; a failure rate keeps
    every digit typed."""
    base = FORM.values()
    for typed in ({"tokens": "2.4e9"}, {"failures_per_gpu_hour": "3.1415e-5"}):
        drawn = FORM.draw({**base, **typed})
        ((name, text),) = typed.items()
        assert drawn.values[name] == float(text) and drawn.notes == {}
        argv = plan_live.plan_argv(**drawn.values)
        assert argv[argv.index("--" + name.replace("_", "-")) + 1] == text
        status, expected, _ = cli_json(argv)
        assert status == 0 and drawn.spec == expected
    assert FORM.draw({**base, "tokens": "2.4e9"}).spec["tokens"] == 2.4e9
    # 2.4e9 tokens: the ideal days are 2.4e9 / 15e12 of the default's
    small = FORM.draw({**base, "tokens": "2.4e9"}).spec
    assert small["ideal_days"] == pytest.approx(
        plan_live.planner_form(**base)["ideal_days"] * 2.4e9 / 15e12, rel=1e-12
    )


def _form_values():
    """Values the form's controls can hold (on their grids)."""

    def one(c):
        if c.options:
            return st.sampled_from(c.options)
        return st.integers(0, c.last_step).map(lambda k: c.clamp(c.min + k * c.step))

    return st.fixed_dictionaries({c.name: one(c) for c in FORM.controls})


@examples(50)
@given(_form_values())
def test_the_form_is_the_command_for_any_values(values):
    """Whatever the fields hold: the command's JSON, or its error line."""
    status, expected, stderr = cli_json(plan_live.plan_argv(**values))
    try:
        got = plan_live.planner_form(**values)
    except live.FieldError as exc:
        flag = "--" + exc.field.replace("_", "-") if exc.field else "arguments"
        head = f"python -m mlbook plan: error: {flag}: "
        assert status == 2 and stderr.startswith(head)
        assert plan_live.in_the_forms_words(stderr[len(head) : -1]) == exc.message
        return
    assert status == 0 and got == expected
    view = plan_live.budget_view(got, values)
    assert shlex.split(view["command"])[4:] == plan_live.plan_argv(**values)
    assert view["text"] == "\n".join(cli.budget_lines(got))
    assert _bars(view["spec"])  # two bars, JSON
    json.dumps(view, allow_nan=False)


# The rules over several fields the planner keeps (each a FieldError at the
# field it names, None for the run's progress), in the form's words
JOINT_RULES = {
    "tp": "must divide the model's",
    "pp": "must not exceed the model's",
    "gpus": "must be a multiple of TP x PP",
    None: "the run cannot make progress",
}


def _anywhere_in_range():
    """Any value a field's declared range holds, on its grid or not: ints for
    counts, any float from min to max (the ends included) for the rest."""

    def one(c):
        if c.options:
            return st.sampled_from(c.options)
        if c.integral:
            return st.integers(c.min, c.max)
        return st.floats(c.min, c.max)

    return st.fixed_dictionaries({c.name: one(c) for c in FORM.controls})


# an interval of the smallest float: the run would only write checkpoints
TINY_INTERVAL = {
    **{c.name: c.value for c in FORM.controls},
    "restart_min": 0.0,
    "interval_min": 5e-324,
}


@examples(100)
@given(_anywhere_in_range())
@example(TINY_INTERVAL)
def test_every_setting_in_the_declared_ranges_plans_or_names_a_joint_rule(values):
    """The form's ranges are the planner's domain: whatever they hold is a plan,
    or a FieldError for a rule over several fields, at that field, never a
    field's own rule (an MFU above 1, zero GPUs) and never another exception."""
    try:
        drawn = FORM.draw({n: str(v) for n, v in values.items()})
    except live.FieldError as exc:
        assert exc.field in JOINT_RULES and JOINT_RULES[exc.field] in exc.message, (
            exc.field,
            exc.message,
        )
        return
    assert drawn.refused == {}
    for name, note in drawn.notes.items():  # in range: at most moved onto the grid
        assert note.startswith("in steps of"), (name, note)
    assert drawn.spec == plan_live.planner_form(**drawn.values)


@examples(50)
@given(_form_values())
def test_plan_argv_reads_back_as_the_values(values):
    args = cli.parser().parse_args(plan_live.plan_argv(**values))
    for name, value in values.items():
        if name == "interval_min" and value == plan_live.YOUNG:  # no flag: Young's
            assert getattr(args, name) is None
            continue
        assert getattr(args, name) == value, (name, value)


PLANNER_NAMES = ("n_gpus", "tp", "pp", "mfu", "micro_batch", "storage_bytes_per_s")
FORM_WORDS = ("GPUs", "TP", "PP", "MFU", "micro-batch", "checkpoint write bandwidth")


@examples(50)
@given(
    st.sampled_from(range(len(PLANNER_NAMES))),
    st.integers(0, 10**7),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz ,.()", max_size=30),
)
def test_the_forms_words_name_the_fields_as_the_form_labels_them(i, n, rest):
    said = plan_live.in_the_forms_words(f"{PLANNER_NAMES[i]}={n} must {rest}")
    assert said.startswith(f"{FORM_WORDS[i]} = {n:,} must ")
    if not re.search(r"\b(n_gpus|tp|pp|dp|mfu|tokens)\b", rest):
        # words that are no planner name pass as they are
        assert said.endswith(rest)
        assert plan_live.in_the_forms_words(f"must {rest}") == f"must {rest}"


@examples(50)
@given(st.text(max_size=40))
def test_flag_for_names_a_flag_of_the_command_or_none(message):
    flags = {o for a in cli.parser()._actions for o in a.option_strings}
    flag = cli.flag_for(message)
    assert flag is None or flag in flags
    for field in ("tp", "n_gpus", "gpu", "restart_s"):
        assert cli.flag_for(f"{field}={message}") == cli.FLAG[field]


# --- the first-order account ---------------------------------------------------------


def test_wall_clock_by_hand():
    # T = 3 h, C = 30 s, I = 10 min, R = 10 min: each failure costs 600 + 315 s;
    # wall = W (1 + 30/600) / (1 - 915/10,800) = 1.147136 W
    assert wall_clock_s(1.0, 600, 30, 600, 10_800) == pytest.approx(
        1.05 / (1 - 915 / 10_800), rel=1e-12
    )
    # and the restart for 90 %: 10,800 (1 - 0.9 x 1.05) - 315 = 279 s
    assert restart_for_goodput(0.9, 600, 30, 10_800) == pytest.approx(279)
    with pytest.raises(ValueError, match="cannot make progress"):
        wall_clock_s(1.0, 600, 30, 10_800, 10_800)
    # a checkpoint every 3e-322 s (5e-324 min, the smallest float the form
    # takes): 1e322 writes of 30 s overflow a float, so no wall clock exists
    with pytest.raises(ValueError, match="cannot make progress.*overflows"):
        wall_clock_s(1.0, 5e-324 * 60, 30, 0, 10_800)
    with pytest.raises(ValueError, match="out of reach"):
        restart_for_goodput(0.99, 600, 30, 10_800)
    with pytest.raises(ValueError, match="goodput must lie in"):
        restart_for_goodput(1.0, 600, 30, 10_800)


def test_plan_adds_up_the_same_account():
    p = plan(
        RunSpec(model="Llama-3-70B", tokens=15e12, gpu="H100 SXM", n_gpus=4096, tp=8)
    )
    useful = p.ideal_days * 86_400
    wall = wall_clock_s(
        useful, p.interval_s, p.checkpoint_write_s, p.spec.restart_s, p.job_mtbf_s
    )
    assert wall / 86_400 == pytest.approx(p.expected_days, rel=1e-12)


@examples(50)
@given(
    st.floats(60, 7200),
    st.floats(1, 300),
    st.floats(3600, 1e6),
    st.floats(0.5, 0.99),
)
def test_restart_for_goodput_inverts_the_account(interval, write, mtbf, goodput):
    try:
        r = restart_for_goodput(goodput, interval, write, mtbf)
    except ValueError as exc:
        assert "out of reach" in str(exc)
        if (interval + write) / 2 < mtbf:
            best = 1 / wall_clock_s(1.0, interval, write, 0.0, mtbf)
            assert best <= goodput * (1 + 1e-9)
        return
    assert r >= 0
    assert 1 / wall_clock_s(1.0, interval, write, r, mtbf) == pytest.approx(
        goodput, rel=1e-9
    )
    # a slower restart, a lower goodput (or no progress at all)
    try:
        assert 1 / wall_clock_s(1.0, interval, write, r + 1, mtbf) < goodput
    except ValueError as exc:
        assert "cannot make progress" in str(exc)


# --- the shared machinery for a form -------------------------------------------------


def test_the_payload_carries_the_view_and_draw_json_the_field_error():
    payload = FORM.payload()
    assert payload["view"] == "mlbook.plan.live:budget_view"
    assert payload["function"] == "mlbook.plan.live:planner_form"
    assert set(payload["display"]) == {"command", "text", "spec"}
    out = json.loads(live.draw_json(json.dumps(payload), json.dumps({"tp": "3.2"})))
    assert out["field"] == "tp" and out["values"]["tp"] == 3  # fitted, then refused
    assert out["notes"] == {"tp": "a whole number: 3.2 became 3"}
    assert out["error"] == out["message"]
    assert out["message"].startswith("TP = 3 must divide")
    assert [c["value"] for c in out["controls"] if c["name"] == "tp"] == [3]
    good = json.loads(live.draw_json(json.dumps(payload), json.dumps({"gpus": 2048})))
    assert good["result"] == plan_live.planner_form(**good["values"])
    assert good["display"] == plan_live.budget_view(good["result"], good["values"])
    assert "error" not in good


class _Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_the_book_writes_a_form_with_an_error_line_per_field():
    sys.path.insert(0, str(ROOT / "tools"))
    from bookext.live import live_html

    payload = FORM.payload()
    parser = _Elements()
    parser.feed(live_html(payload, "form-1"))
    (root,) = [a for t, a in parser.found if "data-mlbook-live" in a]
    assert "mlbook-live-form" in root["class"].split()
    assert json.loads(root["data-mlbook-live"]) == payload
    lines = [a["data-for"] for t, a in parser.found if "data-for" in a]
    assert lines == [c["name"] for c in payload["controls"] for _ in "ne"]
    named = [a["name"] for t, a in parser.found if "name" in a]
    assert named == lines[::2]
    (stale,) = [a for t, a in parser.found if a.get("class") == "mlbook-live-stale"]
    assert "hidden" in stale
    text = "".join(parser.text)
    assert payload["display"]["text"] in text and payload["display"]["command"] in text
    # a figure without a view: its lines, but no command, text or stale line
    figure = _Elements()
    figure.feed(live_html(EXPLORER.payload(), "fig-1"))
    assert len([a for t, a in figure.found if "data-for" in a]) == 2 * len(
        EXPLORER.controls
    )
    assert not [a for t, a in figure.found if "stale" in a.get("class", "")]


def test_the_lab_host_puts_the_message_under_its_field(monkeypatch):
    from mlbook.plotting import live as host

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **k: shown.append(obj))
    view = host.LiveView(plan_live.planner_form)
    assert view.display["text"] in host._view_text(view.display)
    view.controls["tp"].value = "3"
    assert view.error.startswith("TP = 3 must divide")
    assert view.spec == FORM.payload()["spec"]  # kept, but not shown: not for TP 3
    assert view.stale and view.output.outputs[0]["data"] == {"text/plain": host.STALE}
    assert "TP = 3 must divide" in view.lines["tp"].value
    assert all(v.value == "" for n, v in view.lines.items() if n != "tp")
    view.controls["mfu"].value = "1.5"  # fitted, with its rule; TP still refused
    assert view.controls["mfu"].value == "1"
    assert "at most 1: 1.5 became 1" in view.lines["mfu"].value and view.stale
    view.controls["tp"].value = "4"
    assert view.error is None and view.spec["tp"] == 4 and not view.stale
    assert all(v.value == "" for v in view.lines.values())
    assert view.output.outputs[0]["data"]["text/plain"].startswith("$ python -m")
    bundle = view.bundle()
    assert bundle[live.VEGALITE_MIME_TYPE] == view.payload["display"]["spec"]
    assert "expected days" in bundle["text/plain"]


def test_a_run_that_would_only_write_checkpoints_is_refused():
    """An interval of 2.2e-311 minutes (a subnormal, inside the form's range)
    leaves no time to train: the wall clock overflows, and the form refuses
    the run as the command does, rather than drawing infinite days (or NaN,
    infinity times 0-minute restarts)."""
    values = FORM.values() | {
        "interval_min": 2.2e-311,
        "restart_min": 0,
        "failures_per_gpu_hour": 1e-9,
        "storage_gb_per_s": 0.1,
        "tokens": 1,
        "gpus": 8,
    }
    with pytest.raises(live.FieldError, match="cannot make progress") as refused:
        FORM.draw({n: str(v) for n, v in values.items()})
    assert refused.value.field is None
