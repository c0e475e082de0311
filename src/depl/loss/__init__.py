"""Loss models: how the test loss evolves under a schedule of model versions.

A scenario names its law (`loss_model`); depl.laws maps the name to the class."""

from .base import LossModel
from .increments import IncrementsModel
from .level import LevelModel

__all__ = ["LossModel", "IncrementsModel", "LevelModel", "loss_model_for"]


def loss_model_for(scenario) -> LossModel:
    """The loss model a scenario describes: the registered law named by `loss_model` (default: the paper's increments)."""
    from ..laws import get_law

    return get_law(getattr(scenario, "loss_model", None)).model_class(scenario)
