"""Exercises that check the reader: every chapter's problem set, with keys.

``EXERCISES`` maps an id ("mfu-1", "<page stem>-<n>") to its record:
``.chapter`` (the page's file stem), ``.level`` (1 ★ minutes, 2 ★★ an hour,
3 ★★★ an afternoon), ``.kind`` (compute, derive, code, measure, predict,
diagnose), ``.answers`` (answer name -> unit; a fraction's unit is
"fraction", a percentage's "%"), ``.tolerances`` (relative; 0 for an exact
answer).

``check("mfu-1", mfu=0.56, mfu_6n=0.49)`` checks answers against the key the
package computes, prints a hint for each wrong one (the direction and rough
size of the error, or the named mistake it matches) and returns a Result
whose ``.correct`` is True only when every answer is right.
``check("faults-1", drop_beats_wait)`` checks a function (change-the-code
exercises) on known cases and on hypothesis-generated ones against the
reference. ``check("mfu-1")`` says what an exercise expects. A prediction
(``check("mfu-2", mfu_nominal=0.1)``) is set beside what the run measured,
which the measuring cell records with ``outcome("mfu-2", ...)``.

This is the catalogue: it stands above the chapters, as ``mlbook.plan``
does, and imports each chapter's ``exercises.py`` (``mlbook/mfu/exercises.py``,
``mlbook/plan/exercises.py``...), which registers its records with the judge
(``mlbook.judge``, below the chapters) as it loads. It names the judge's
names too. No chapter imports this package (tests/test_layering.py).
docs/exercises.md says how to add an exercise.
"""

from mlbook import judge as _judge
from mlbook.judge import *  # noqa: F403 (the judge's names, __all__ below)

# isort: split
# The chapters' records: each module registers its own when it loads.
from mlbook.accumulation import exercises as _accumulation  # noqa: F401
from mlbook.cadence import exercises as _cadence  # noqa: F401
from mlbook.capstone import exercises as _capstone  # noqa: F401
from mlbook.faults import exercises as _faults  # noqa: F401
from mlbook.input_pipeline import exercises as _input_pipeline  # noqa: F401
from mlbook.mfu import exercises as _mfu  # noqa: F401
from mlbook.plan import exercises as _plan  # noqa: F401
from mlbook.precision import exercises as _precision  # noqa: F401
from mlbook.recompute import exercises as _recompute  # noqa: F401
from mlbook.scaling import exercises as _scaling  # noqa: F401

__all__ = list(_judge.__all__)
