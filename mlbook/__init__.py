"""mlbook: the tested calculators, experiments and figures behind the book.

The tree reads as the table of contents. One package per chapter::

    mfu/             MFU and the FLOPs of a training step
    accumulation/    gradient accumulation
    precision/       mixed precision
    recompute/       activation recompute
    cadence/         checkpoint cadence and resumable state
    faults/          failures, stragglers, elastic training, corruption, spikes,
                     determinism
    scaling/         communication, sharding (ZeRO/FSDP) and the pipeline bubble
    input_pipeline/  tokenising, packing, sharding and feeding the step
    capstone/        finding lost MFU: one step's timeline accounted for
    plan/            plan a run: every chapter's calculators in one budget
                     (``python -m mlbook plan``)

and what several chapters share, once::

    common/          torch-free: validation, units, TransformerConfig and presets,
                     the accelerator and interconnect tables (and the CPUs this
                     process may use), model-state bytes, the atomic write
                     (files), the tokenizer, the reference loop's sizes and
                     fixes, live figures' declarations and Vega-Lite specs
    common_torch/    torch: the small GPT, toy models, dtypes, timing and device
                     helpers, the matmul ceiling (MAMF), process launch, the
                     checkpointer and sampler, the reference training loop the
                     capstone and the calibration run
    plotting/        matplotlib: figure style; the JupyterLab host of live
                     figures (live.py, ipywidgets)
    judge/           the exercise judge: check() and the registry that every
                     chapter's exercises.py adds its records to (it imports no
                     chapter)
    exercises/       the catalogue readers import: every chapter's exercises
                     (``from mlbook.exercises import check``)

Inside a chapter package, ``formulas.py`` (and any other plain module) holds
pure-number calculators that import neither torch nor matplotlib;
``live.py`` holds the chapter's live figures (standard library only: the HTML
book runs them in the reader's browser); ``experiments*.py`` run torch;
``figures.py`` draw; ``*_script.py`` are what
torchrun starts. tests/test_layering.py enforces that rule. A chapter's
``__init__`` names its torch-free calculators (``from mlbook import cadence``,
then ``cadence.young_interval(...)``), and its ``exercises.py`` holds its
problem set, built with the judge (``mlbook.judge``, which imports no
chapter) and gathered by the catalogue ``mlbook.exercises``.

The package returns numbers and typed results. It does not print, word
sentences or glue values into pages: the pages do that.
"""
