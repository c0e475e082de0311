"""What a workflow refuses, and why: one exception family, each with a message meant for the user.

The command line maps them to its exit codes (depl.cli.console): `BadInput` (and `ModelError`) 2,
`Unreachable` 3, `Failed` (and `ExternalFailure`) 1. A caller from Python catches
`WorkflowError`. A verdict (a guarantee refuted, a certificate undecided) is
no error: it is part of the workflow's result.
"""

from __future__ import annotations

from contextlib import contextmanager
from ..fit.runs import FitError
from ..plan import PlanError
from ..runspec import SpecError
from ..scenario import ScenarioError
from ..store import StoreError
from ..train.task.source import DataError, JobError


class WorkflowError(Exception):
    """A workflow refused or could not finish; the message says why, in one line.

    `result`: what the workflow can still say (e.g. what an infeasible target can reach), as JSON-ready data;
    `detail`: lines that the message only counts (every seed range a refusal met), printed by `depl --verbose`.
    """

    def __init__(self, message: str, result: dict | None = None, detail: tuple[str, ...] = ()):
        super().__init__(message)
        self.result = result
        self.detail = tuple(detail)


class BadInput(WorkflowError):
    """A scenario, plan, store or option that cannot be used."""


class ModelError(BadInput):
    """A kept model that cannot be loaded (`depl.load_model`, `depl export-model`): not there, a file changed or
    not depl's, weights that are not those of the network its run recorded (shapes, dtypes) or not finite, your
    network's code not allowed or changed.  A BadInput: the command line exits 2."""


class Unreachable(WorkflowError):
    """The target cannot be met (no plan is feasible).  Its message is its one reason: a `result` that gives a
    reason (`depl plan --json`) gives this one."""

    def __init__(self, message: str, result: dict | None = None, detail: tuple[str, ...] = ()):
        super().__init__(message, None if result is None else {**result, "reason": message}
                         if "reason" in result else result, detail)


class Failed(WorkflowError):
    """The workflow could not finish (what it was to write does not check out: a bug in depl)."""


class ExternalFailure(Failed):
    """A program the workflow ran (Flower's `flwr run`) failed or left work unfinished."""


def user_errors() -> tuple[type[Exception], ...]:
    """The library's exceptions whose message is meant for the user; none of them needs torch."""
    return (PlanError, ScenarioError, StoreError, SpecError)


def training_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is meant for the user, training's included."""
    return (*user_errors(), DataError, JobError)


def fitting_errors() -> tuple[type[Exception], ...]:
    """The exceptions of fitting whose message is meant for the user."""
    return (*user_errors(), FitError)


@contextmanager
def as_bad_input(*errors: type[Exception], prefix: str = ""):
    """Within: one of `errors` (their messages are the user's) becomes BadInput, its message after `prefix` (and
    its `result` and `detail`, where it has them: depl.ledger.SeedsUsed)."""
    try:
        yield
    except errors as e:
        result = getattr(e, "result", None)
        result = {**result, "error": prefix + str(e)} if isinstance(result, dict) else None
        raise BadInput(prefix + str(e), result, getattr(e, "detail", ())) from None


@contextmanager
def writing(flag: str, path):
    """Within: an OSError writing the output `flag` names (a full disk, a folder we may not write) becomes one line,
    "FLAG PATH: cannot write (why)"."""
    try:
        yield
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot write ({e.strerror or e})") from None
