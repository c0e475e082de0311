"""The workflows behind the commands: one plain function per `depl` command, typed arguments in, a frozen
result out. The command line (depl.cli) parses options, calls one, and prints its result; a Python caller gets
the very same result (the plan `depl plan --out` writes is the plan `plan(...)` returns, `certified_by`
included).

A workflow prints nothing: what it does as it goes is reported through its `progress` (or `on_status`)
callback, and what it refuses is a `WorkflowError` (errors.py: BadInput, ModelError, Unreachable, Failed) with
one line for the user. The training workflows also come in two steps, `prepare_*` (everything checked, the run
registered) and `train_*`, for a caller that says what is about to happen between them. They need the
`train` extra and import torch only when called.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time each module is imported on first use (below)
    from .apps import AppRan, AppRun, ExportedApp, Gateway, export_app, prepare_app_run, prepare_gateway, \
        serve_gateway, train_app_run
    from .certify import Certified, certify
    from .common import Training
    from .coverage import CoverageResult, coverage
    from .errors import BadInput, ExternalFailure, Failed, ModelError, Unreachable, WorkflowError
    from .fitting import Calibrated, Fitted, calibrate, fit
    from .models import Exported, export_model, list_models, load_model
    from .planning import Planned, Predicted, Simulated, plan, predict, simulate
    from .reproduce import Reproduced, reproduce
    from .search import SearchResult, plan_certified
    from .runs import RunShown, RunsShown, show_runs
    from .training import AdaptiveResult, Profiled, RunResult, profile, run, run_adaptive
    from .validation import AdaptiveValidated, Validated, validate, validate_adaptive

# name -> the module that defines it; each is imported when first asked for, so `depl plan` (which imports
# depl.workflows.planning) pays for no training, fitting or coverage module
_WHERE = {
    "apps": ["AppRan", "AppRun", "ExportedApp", "Gateway", "export_app", "prepare_app_run", "prepare_gateway",
             "serve_gateway", "train_app_run"],
    "certify": ["Certified", "certify"],
    "common": ["Training"],
    "coverage": ["CoverageResult", "coverage"],
    "errors": ["BadInput", "ExternalFailure", "Failed", "ModelError", "Unreachable", "WorkflowError"],
    "fitting": ["Calibrated", "Fitted", "calibrate", "fit"],
    "models": ["Exported", "export_model", "list_models", "load_model"],
    "planning": ["Planned", "Predicted", "Simulated", "plan", "predict", "simulate"],
    "reproduce": ["Reproduced", "reproduce"],
    "search": ["SearchResult", "plan_certified"],
    "runs": ["RunShown", "RunsShown", "show_runs"],
    "training": ["AdaptiveResult", "Profiled", "RunResult", "profile", "run", "run_adaptive"],
    "validation": ["AdaptiveValidated", "Validated", "validate", "validate_adaptive"],
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str):
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
