"""The capstone's step model, which lives below the chapters in
``mlbook.common.stepmodel`` (``mlbook.calibrate`` predicts its reference step
with it too); named here so ``mlbook.capstone.stepmodel`` keeps working."""

from mlbook.common.stepmodel import (  # noqa: F401
    BucketComparison,
    BucketPrediction,
    MachineModel,
    Operator,
    StepPrediction,
    compare,
    largest_excess,
    machine_model_from_json,
    operator_time_s,
    operators_from_json,
    operators_of,
    operators_to_json,
    predict_step,
    step_ratio,
)
