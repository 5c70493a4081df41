"""Your machine, measured: one calibration that every chapter's prediction is
held against (formulas: the file and the predictions, torch-free;
experiments: the measurements; cli: ``python -m mlbook calibrate``)."""
