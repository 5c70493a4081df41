import math

import pytest

from mlbook.common import validate
from mlbook.mfu import figures as mfu_figs
from mlbook.plotting.widgets import redraw_budget_s, redraw_seconds


def test_validate_messages_name_value_and_rule():
    with pytest.raises(ValueError, match=r"rate must be a finite number above 0, got -1"):
        validate.positive("rate", -1)
    with pytest.raises(ValueError, match=r"k=3 must divide batch=8"):
        validate.divides("k", 3, "batch", 8)
    with pytest.raises(ValueError, match=r"p must lie in \(0, 1\]"):
        validate.fraction("p", 0)
    for bad in (math.nan, math.inf, "3", None, True):
        with pytest.raises(ValueError):
            validate.positive("x", bad)
    assert validate.positive_int("n", 3) == 3
    assert validate.fraction("p", 0, allow_zero=True) == 0


SLIDERS = [
    (mfu_figs.mfu_calculator, dict(model="Llama-3-405B", tokens_per_s=2.4e6, seq_len=8192, gpu="H100 SXM", n_gpus=16384)),
    (mfu_figs.training_days_planner, dict(model="Llama-3-70B", tokens_trillions=15, gpu="H100 SXM", n_gpus=4096, mfu_value=0.4)),
]


@pytest.mark.parametrize("draw,values", SLIDERS)
def test_slider_redraw_under_100_ms(draw, values):
    assert redraw_seconds(draw, **values) < redraw_budget_s()


def test_calculator_figure_says_when_mfu_is_impossible():
    fig = mfu_figs.mfu_calculator("Llama-2-7B", 1e9, 4096, "H100 SXM", 1)
    assert "above 100 % MFU" in fig.axes[0].get_title()
