"""A live figure with every kind of control and a fixed argument, which
raises on purpose past x = 8: tests/test_live.py adds it to the book's
archive as ``mlbook._live_test`` (served to the browser through a route, not
shipped) to check in the browser what the book's own figures do not use."""

from __future__ import annotations

from mlbook.common import live
from mlbook.common import vegalite as vl

TOO_LARGE = 8


@live.figure(
    live.slider("x", "x (m)", 2, 0, 10, 0.5),
    live.slider("g", "g (s)", 10, 1, 1000, 10**0.1, "log"),
    live.select_slider("q", "q (letter)", ["a", "b", "c"], "b"),
    live.dropdown("d", "d (tokens)", [2048, 4096], 4096),
    live.checkbox("c", "c (on or off)", True),
    live.number("n", "n (GPUs)", 8, 1, 64),
)
def kinds(x, g, q, d, c, n, offset):
    if x > TOO_LARGE:
        raise ValueError(f"x = {x:g} m is past {TOO_LARGE} m, on purpose")
    rows = [
        {"curve": "y", "x": i, "y": offset + i * g * (2 if c else 1) / n}
        for i in vl.linspace(0.0, x or 0.5, 5)
    ]
    xs = vl.channel("x", vl.title_of("x", "m"))
    ys = vl.channel("y", vl.title_of("y", "s"))
    return vl.chart(
        [vl.lines(rows, xs, ys, styles={"y": {"color": vl.C[0]}}, tooltip=[])],
        title=f"x={x:g} g={g:g} q={q} d={d} c={c} n={n} offset={offset:g}",
    )
