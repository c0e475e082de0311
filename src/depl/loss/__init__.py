"""Loss models: how the test loss evolves under a schedule of model versions.

A scenario names its law (`loss_model`); depl.laws maps the name to the class, registered here at import."""

from ..laws import get_calibrator, get_law, provide
from .base import LossModel
from .calibrated import CalibratedModel
from .increments import IncrementsModel
from .level import LevelMemoryModel, LevelModel

provide("increments", model=IncrementsModel)
provide("level", model=LevelModel)
provide("level-memory", model=LevelMemoryModel)
provide("conformal-pit", calibrator=CalibratedModel)

__all__ = ["LossModel", "IncrementsModel", "LevelModel", "LevelMemoryModel", "loss_model_for"]


def loss_model_for(scenario, *, calibrated: bool = True) -> LossModel:
    """The loss model a scenario describes: the registered law named by `loss_model` (default: the paper's
    increments), recalibrated by the scenario's [calibration] (its registered calibrator, depl.laws) when it has one in use (unless `calibrated=False`)."""
    law = get_law(getattr(scenario, "loss_model", None)).model_class(scenario)
    c = getattr(scenario, "calibration", None)
    if calibrated and c is not None and c.use:
        wrap = get_calibrator(c.method).model_class
        t = scenario.target
        # runs of another kind of data draw than this scenario's certify no schedule of it: no experiments then
        mismatch = getattr(scenario, "calibration_mismatch", lambda: None)()
        own = None if mismatch else getattr(c, "experiments", None)
        return wrap(law, c.scores, c.method, getattr(c, "epoch_scores", None), own,
                    alpha=t.alpha, target=(t.loss, t.quantile), scenario=scenario)
    return law
