"""The capstone's step model, which lives below the chapters in
``mlbook.common.stepmodel`` (``mlbook.calibrate`` predicts its reference step
with it too); named here so ``mlbook.capstone.stepmodel`` keeps working."""

from mlbook.common.stepmodel import *  # noqa: F403
