"""Loss models: how the test loss evolves under a schedule of model versions."""

from .base import LossModel
from .increments import IncrementsModel
from .level import LevelModel

__all__ = ["LossModel", "IncrementsModel", "LevelModel", "loss_model_for"]


def loss_model_for(scenario) -> LossModel:
    """The loss model a scenario describes: `loss_model = "level"` or the paper's increments model."""
    if getattr(scenario, "loss_model", None) == "level":
        return LevelModel(scenario)
    return IncrementsModel(scenario)
