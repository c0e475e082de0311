"""depl: dependable distributed training.

Plan the cheapest training whose ω-quantile of the final test loss is at or
below a target by a deadline (the DepL method), run it for real, and check it.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`depl.load_model(RUN_FOLDER, seed=N)`: a run's trained model (depl.workflows.models.load_model), imported
    on first use, so that `import depl.X` does not load the workflows layer and every layer below it; `depl.ModelError`, what it raises for a model that cannot
    be loaded (a `depl.workflows.BadInput`)."""
    if name == "load_model":
        # on first use: at the top, every `import depl.X` would load the workflows layer and every layer below it
        from .workflows.models import load_model

        return load_model
    if name == "ModelError":   # what load_model raises: a kept model that cannot be loaded (no torch needed)
        from .workflows.errors import ModelError  # on first use, as load_model above

        return ModelError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ModelError", "__version__", "load_model"]
