"""The workflows behind the commands: one plain function per `depl` command, typed arguments in, a frozen
result out. The command line (depl.cli) parses options, calls one, and prints its result; a Python caller gets
the very same result (the plan `depl plan --out` writes is the plan `plan(...)` returns, `certified_by`
included).

A workflow prints nothing: what it does as it goes is reported through its `progress` (or `on_status`)
callback, and what it refuses is a `WorkflowError` (errors.py: BadInput, ModelError, Unreachable, Failed) with
one line for the user. The training workflows also come in two steps, `prepare_*` (everything checked, the run
registered) and `train_*`, for a caller that says what is about to happen between them. They need the
`train` extra: their modules import torch (and flwr, scipy.stats) at their top, and this package imports each
module on first use of one of its names, so planning loads none of them; without the extra, that first use is
a BadInput that says so.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from .errors import BadInput

if TYPE_CHECKING:  # what type checkers see; at run time each module is imported on first use (below)
    from .apps import AppRan, AppRun, ExportedApp, Gateway, export_app, prepare_app_run, prepare_gateway, \
        serve_gateway, train_app_run
    from .certify import Certified, certify, prepare_certify, run_certify
    from .common import Training
    from .coverage import CoverageResult, coverage, prepare_coverage, train_coverage
    from .errors import BadInput, ExternalFailure, Failed, ModelError, Unreachable, WorkflowError
    from .fitting import Calibrated, Fitted, calibrate, fit, report_lines
    from .models import Exported, export_model, list_models, load_model
    from .planning import Planned, Predicted, Simulated, certify_price, plan, predict, simulate
    from .reproduce import Reproduced, reproduce
    from .search import USES, SearchResult, candidate_rows, plan_certified, prepare_search, price, run_search
    from .runs import RunShown, RunsShown, show_runs
    from .training import AdaptiveResult, Profiled, RunResult, flower_app_folder, parse_fractions, parse_slow, \
        prepare_profile, prepare_run, profile, run, run_adaptive, train_profile, train_run
    from .validation import AdaptiveValidated, Validated, prepare_validation, train_validation, validate, \
        validate_adaptive

# name -> the module that defines it; each is imported when first asked for, so `depl plan` (which imports
# depl.workflows.planning) pays for no training, fitting or coverage module: the command line asks this package for
# every workflow that trains or fits (`workflows.prepare_run(...)`), and those modules import torch, flwr or scipy.stats
# at their top
_WHERE = {
    "apps": ["AppRan", "AppRun", "ExportedApp", "Gateway", "export_app", "prepare_app_run", "prepare_gateway",
             "serve_gateway", "train_app_run"],
    "certify": ["Certified", "certify", "prepare_certify", "run_certify"],
    "common": ["Training"],
    "coverage": ["CoverageResult", "coverage", "prepare_coverage", "train_coverage"],
    "errors": ["BadInput", "ExternalFailure", "Failed", "ModelError", "Unreachable", "WorkflowError"],
    "fitting": ["Calibrated", "Fitted", "calibrate", "fit", "report_lines"],
    "models": ["Exported", "export_model", "list_models", "load_model"],
    "planning": ["Planned", "Predicted", "Simulated", "certify_price", "plan", "predict", "simulate"],
    "reproduce": ["Reproduced", "reproduce"],
    "search": ["USES", "SearchResult", "candidate_rows", "plan_certified", "prepare_search", "price", "run_search"],
    "runs": ["RunShown", "RunsShown", "show_runs"],
    "training": ["AdaptiveResult", "Profiled", "RunResult", "flower_app_folder", "parse_fractions", "parse_slow",
                 "prepare_profile", "prepare_run", "profile", "run", "run_adaptive", "train_profile", "train_run"],
    "validation": ["AdaptiveValidated", "Validated", "prepare_validation", "train_validation", "validate",
                   "validate_adaptive"],
}
# the distributions of the `train` extra whose absence a training workflow's import meets first
TRAIN_EXTRA = ("torch", "torch_pruning", "flwr", "mnist1d", "sklearn", "ray", "httpx", "starlette", "uvicorn", "h11")
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str):
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(f".{_MODULE[name]}", __name__)
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in TRAIN_EXTRA:
            raise
        raise BadInput(f"real training needs the `train` extra (pip install 'depl[train]'): {e}") from None
    # every name of the module at once: importing depl.workflows.certify set `certify` here to the module
    globals().update({n: getattr(module, n) for n in _WHERE[_MODULE[name]]})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
