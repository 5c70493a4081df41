"""A data-parallel step with its all-reduce overlapped or not
(mlbook.capstone.formulas.exposed_allreduce_s, step_schedule) and the
schematic the page draws from them (figures.overlap_schematic): the closed
form against a bucket-by-bucket schedule, worked examples by hand, and the
figure's bars and brackets against both. Also the published ladder's
speed-ups per change, by hand from Raschka's README."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples
from mlbook.capstone import formulas as cf

PROPERTY_COVERS = {
    "mlbook.capstone.formulas.exposed_allreduce_s",
    "mlbook.capstone.formulas.step_schedule",
    "mlbook.capstone.formulas.published_speedups",
}

FEW = examples(50)
ms = st.floats(0.0, 200.0).map(lambda x: x / 1e3)
positive_ms = st.floats(0.1, 200.0).map(lambda x: x / 1e3)


@st.composite
def phases(draw):
    return cf.StepPhases(
        data_s=draw(ms),
        forward_s=draw(ms),
        backward_s=draw(positive_ms),
        allreduce_s=draw(ms),
        optimizer_s=draw(ms),
        buckets=draw(st.integers(1, 64)),
    )


# The page's schematic: forward 40 ms, backward 80, all-reduce 60, 4 buckets.
PAGE = cf.StepPhases(0.005, 0.040, 0.080, 0.060, 0.010, 4)


def test_the_page_s_schematic_by_hand():
    # not overlapped: all 60 ms exposed; step 5 + 40 + 80 + 60 + 10 = 195 ms.
    # overlapped: buckets of 15 ms, ready at 20, 40, 60, 80 ms into the backward
    # pass; each starts when ready (the one before is done by then), so the last
    # ends 15 ms after the backward pass: max(60/4, 60 - 3/4 * 80) = 15 ms.
    assert cf.exposed_allreduce_s(0.080, 0.060, 4, False) == pytest.approx(0.060)
    assert cf.exposed_allreduce_s(0.080, 0.060, 4, True) == pytest.approx(0.015)
    assert cf.step_schedule(PAGE, False)[-1].end_s == pytest.approx(0.195)
    assert cf.step_schedule(PAGE, True)[-1].end_s == pytest.approx(0.150)
    starts = [s.start_s for s in cf.step_schedule(PAGE, True) if s.lane == "network"]
    assert starts == pytest.approx([0.065, 0.085, 0.105, 0.125])  # 45 ms + 20 k


def test_a_slow_all_reduce_runs_on_past_the_backward_pass():
    # b = 40 ms, c = 100 ms, 4 buckets of 25 ms: the first starts at 10 ms into
    # the backward pass and the queue never empties, so the last ends at
    # 10 + 100 = 110 ms, 70 ms after the backward pass: 100 - 3/4 * 40 = 70.
    assert cf.exposed_allreduce_s(0.040, 0.100, 4, True) == pytest.approx(0.070)
    spans = cf.step_schedule(cf.StepPhases(0, 0, 0.040, 0.100, 0, 4), True)
    assert spans[-1].start_s == pytest.approx(0.110)


@FEW
@given(phases(), st.booleans())
def test_the_closed_form_is_the_schedule_s_exposed_time(p, overlap):
    """The optimizer starts when the backward pass and the all-reduce are
    both done: the step is its compute plus exactly the closed form."""
    spans = cf.step_schedule(p, overlap)
    exposed = cf.exposed_allreduce_s(p.backward_s, p.allreduce_s, p.buckets, overlap)
    compute = p.data_s + p.forward_s + p.backward_s + p.optimizer_s
    assert spans[-1].phase == "optimizer"
    assert spans[-1].end_s == pytest.approx(compute + exposed, rel=1e-9, abs=1e-12)
    assert 0 <= exposed <= p.allreduce_s + 1e-15
    if overlap:
        assert exposed >= p.allreduce_s / p.buckets - 1e-15  # the last bucket
        whole = cf.exposed_allreduce_s(p.backward_s, p.allreduce_s, p.buckets, False)
        assert exposed <= whole


@FEW
@given(phases(), st.booleans())
def test_each_lane_runs_one_thing_at_a_time_and_the_buckets_add_up(p, overlap):
    spans = cf.step_schedule(p, overlap)
    for lane in ("compute", "network"):
        mine = [s for s in spans if s.lane == lane]
        for a, b in zip(mine, mine[1:], strict=False):
            assert a.end_s <= b.start_s + 1e-12
    network = [s for s in spans if s.lane == "network"]
    assert math.isclose(
        sum(s.end_s - s.start_s for s in network), p.allreduce_s, abs_tol=1e-12
    )
    backward = next(s for s in spans if s.phase == "backward")
    if overlap:  # bucket i starts no earlier than its gradients are ready
        for i, s in enumerate(network, start=1):
            ready = backward.start_s + i / p.buckets * backward_s(backward)
            assert s.start_s >= ready - 1e-12
    else:
        assert all(s.start_s >= backward.end_s - 1e-12 for s in network)


def backward_s(span) -> float:
    return span.end_s - span.start_s


@FEW
@given(positive_ms, ms, st.integers(1, 63))
def test_more_buckets_hide_more(b, c, n):
    more = cf.exposed_allreduce_s(b, c, n + 1, True)
    assert more <= cf.exposed_allreduce_s(b, c, n, True) + 1e-15


@pytest.mark.parametrize(
    "args,match",
    [
        ((0, 0.1, 4, True), "backward_s"),
        ((0.1, -1, 4, True), "allreduce_s"),
        ((0.1, 0.1, 0, True), "buckets"),
        ((0.1, 0.1, 2.5, True), "buckets"),
        ((0.1, 0.1, 4, 1), "overlap"),
    ],
)
def test_bad_inputs_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        cf.exposed_allreduce_s(*args)


def test_bad_phases_are_named():
    with pytest.raises(ValueError, match="backward_s"):
        cf.StepPhases(0, 0, 0, 0.1, 0, 4)
    with pytest.raises(ValueError, match="data_s"):
        cf.StepPhases(-1, 0, 0.1, 0.1, 0, 4)
    with pytest.raises(ValueError, match="phases"):
        cf.step_schedule((0, 0, 0.1, 0.1, 0, 4), True)


def test_the_schematic_draws_the_schedule_and_brackets_the_exposed_time():
    import matplotlib

    matplotlib.use("Agg")
    from mlbook.capstone import figures as figs

    fig = figs.overlap_schematic(PAGE)
    top, bottom = fig.axes[:2]
    for ax, overlap in ((top, False), (bottom, True)):
        drawn = sorted(
            (round(x, 9), round(x + w, 9))
            for coll in ax.collections
            for (x, _y), w in ((p.get_xy(), p.get_width()) for p in _rectangles(coll))
        )
        expected = sorted(
            (round(s.start_s * 1e3, 9), round(s.end_s * 1e3, 9))
            for s in cf.step_schedule(PAGE, overlap)
        )
        assert drawn == expected
        texts = [t.get_text() for t in ax.texts]
        exposed = cf.exposed_allreduce_s(0.080, 0.060, 4, overlap) * 1e3
        assert f"exposed {exposed:.0f} ms" in texts  # 60 ms, then 15 ms
    assert top.get_title(loc="left") == "not overlapped"
    assert bottom.get_title(loc="left") == "overlapped, 4 buckets"


def _rectangles(collection):
    """The rectangles of a broken_barh collection, as (x, y) and width."""
    from matplotlib.patches import Rectangle

    out = []
    for path in collection.get_paths():
        v = path.vertices
        x0, x1 = v[:, 0].min(), v[:, 0].max()
        y0, y1 = v[:, 1].min(), v[:, 1].max()
        out.append(Rectangle((x0, y0), x1 - x0, y1 - y0))
    return out


# --- the published ladder, per change ------------------------------------------------


def test_published_speedups_by_hand_from_raschka():
    # rasbt/LLMs-from-scratch, ch05/10_llm-training-speed/README.md, tokens/s
    # before and after each change on one A100
    by_hand = {
        "sdpa": 91_901 / 55_256,  # FlashAttention
        "pad_vocab": 127_345 / 112_046,  # 50,257 -> 50,304
        "fused_adamw": 28_399 / 27_648,
        "bigger_micro_batch": 142_156 / 127_345,  # the bigger batch
        "bf16": 45_486 / 28_402,
        "compile": 112_046 / 91_901,
    }
    assert cf.published_speedups() == pytest.approx(by_hand, rel=1e-12)
    assert set(cf.PUBLISHED_FIX) <= set(cf.FIX_NAMES)


@FEW
@given(st.just(None))
def test_published_speedups_are_faster_for_every_change(_):
    got = cf.published_speedups()
    assert got and all(x > 1 for x in got.values())
