"""Loss models: how the test loss evolves under a schedule of model versions."""

from .base import LossModel
from .increments import IncrementsModel

__all__ = ["LossModel", "IncrementsModel", "loss_model_for"]


def loss_model_for(scenario) -> LossModel:
    """The loss model a scenario describes (the paper's increments model)."""
    return IncrementsModel(scenario)
