"""depl: dependable distributed training.

Plan the cheapest training whose ω-quantile of the final test loss is at or
below a target by a deadline (the DepL method), run it for real, and check it.
"""

__version__ = "0.1.0"


def load_model(run_folder, seed: int = 0, *, run=None, allow_code=None):
    """Seed `seed`'s final model of a run folder (`depl run --out RUN_FOLDER`), a torch `nn.Module` in eval mode:
    depl.workflows.load_model, whose docstring says more (`run`, `allow_code`, the ModelError it raises).  Imported
    when called, so that `import depl.X` loads neither the workflows layer nor torch."""
    from .workflows import load_model as load   # depl.workflows.models imports torch

    return load(run_folder, seed, run=run, allow_code=allow_code)


def __getattr__(name: str):
    """`depl.ModelError`, what load_model raises for a model that cannot be loaded (a `depl.workflows.BadInput`),
    imported on first use as load_model is."""
    if name == "ModelError":   # no torch needed
        from .workflows.errors import ModelError  # on first use, as load_model above

        return ModelError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ModelError", "__version__", "load_model"]
