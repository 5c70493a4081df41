"""Finding lost MFU: one training step's timeline accounted for, and a ladder
of fixes that wins the time back one measured rung at a time.

- ``formulas``: torch-free: which bucket an operator's time belongs to, the
  accounting of a step window into buckets and idle gaps, the GEMM shapes a
  model runs, the ladder's sizes and fixes, the rates of a rung, and the
  MFU-loss waterfall.
- ``experiments``: torch: the deliberately slow loop with each defect
  switchable, the profiler accounting, the ladder with the MAMF ceiling
  re-probed between rungs, and the two-process gloo run for exposed
  communication and stragglers.
- ``figures``: matplotlib: the stacked bars, one step's timeline, the
  waterfall slider, the per-rank times.
"""
