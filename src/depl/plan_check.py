"""A plan file is a typed document, checked against its own scenario when it is read.

`simulate`, `run` and `validate` act on a plan file that anyone may have
edited: every epoch is checked before any work starts, so a tampered plan is
refused with the file, the field, the value and why — never trained, never
simulated with wrong numbers (a dataset listed three times counted three
times, ``"feasible": "false"`` read as true, an unknown model a KeyError
after training began).
"""

from __future__ import annotations

import math
from typing import Any

REQUIRED = ("method", "scenario", "feasible", "datasets", "epochs", "cost", "time", "loss_quantile",
            "loss_mean", "solve_seconds")
NUMBERS = ("cost", "time", "loss_quantile", "loss_mean", "solve_seconds", "omega", "loss_target", "deadline")
HARD_MAX_EPOCHS = 10_000  # the scenario's own ceiling on max_epochs


class PlanError(ValueError):
    """A plan file that cannot be used; the message is meant for the user."""


def _error(source: str, field: str, value: Any, why: str):
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return PlanError(f"{source}: {field} = {shown}: {why}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_types(d: dict[str, Any], source: str) -> None:
    """Field types of a `depl.plan/1` document; raises PlanError."""
    for k in REQUIRED:
        if k not in d:
            raise PlanError(f"{source}: the key {k!r} is missing")
    for k in ("method", "scenario"):
        if not isinstance(d[k], str):
            raise _error(source, k, d[k], "must be a string")
    if not isinstance(d["feasible"], bool):
        raise _error(source, "feasible", d["feasible"], "must be true or false (a JSON boolean)")
    for k in NUMBERS:
        # the plan's figures are informative, but a string or NaN there means the file was not written by depl
        if k in d and not (_is_number(d[k]) and math.isfinite(d[k])):
            raise _error(source, k, d[k], "must be a finite number")
    ds = d["datasets"]
    if not isinstance(ds, list) or not all(isinstance(x, str) for x in ds):
        raise _error(source, "datasets", ds, "must be a list of dataset names")
    eps = d["epochs"]
    if not isinstance(eps, list):
        raise _error(source, "epochs", eps, "must be a list of epochs")
    for i, e in enumerate(eps):
        if not isinstance(e, dict):
            raise _error(source, f"epochs[{i}]", e, "must be an object with epoch, model, cluster, compute")
        for k in ("epoch", "model", "cluster", "compute"):
            if k not in e:
                raise PlanError(f"{source}: epochs[{i}].{k} is missing")
        if not isinstance(e["epoch"], int) or isinstance(e["epoch"], bool):
            raise _error(source, f"epochs[{i}].epoch", e["epoch"], "must be an integer")
        for k in ("model", "cluster"):
            if not isinstance(e[k], str):
                raise _error(source, f"epochs[{i}].{k}", e[k], "must be a name (a string)")
        if not (_is_number(e["compute"]) and math.isfinite(e["compute"])):
            raise _error(source, f"epochs[{i}].compute", e["compute"], "must be a finite number")
    b = d.get("loss_quantile_bounds")
    if b is not None and not (isinstance(b, list) and len(b) == 2 and all(_is_number(x) for x in b)):
        raise _error(source, "loss_quantile_bounds", b, "must be [low, high] or null")
    if d.get("info") is not None and not isinstance(d["info"], dict):
        raise _error(source, "info", d["info"], "must be an object")


def check_plan(plan, s, source: str) -> None:
    """`plan` against its scenario `s`: references, order, switches, compute, target, K; raises PlanError."""
    if not plan.datasets:
        raise _error(source, "datasets", plan.datasets, "a plan trains on at least one dataset")
    known = {d.name for d in s.datasets}
    seen: set[str] = set()
    for i, name in enumerate(plan.datasets):
        if name not in known:
            raise _error(source, f"datasets[{i}]", name, f"no dataset of scenario {s.name!r} has this name "
                         f"(datasets: {sorted(known)})")
        if name in seen:
            raise _error(source, f"datasets[{i}]", name, "listed twice; a dataset is used once (its samples "
                         "would be counted twice)")
        seen.add(name)
    if not plan.epochs:
        raise _error(source, "epochs", [], "a plan has at least one epoch")
    limit = min(s.max_epochs or HARD_MAX_EPOCHS, HARD_MAX_EPOCHS)
    if len(plan.epochs) > limit:
        why = (f"max_epochs = {s.max_epochs} of scenario {s.name!r}: its loss law is not known beyond"
               if s.max_epochs else f"more than {HARD_MAX_EPOCHS} epochs")
        raise _error(source, "epochs", f"{len(plan.epochs)} epochs", f"K exceeds {why}")
    clusters = {c.name: c for c in s.clusters}
    models = set(s.model_index)
    prev = None
    for i, e in enumerate(plan.epochs):
        where = f"epochs[{i}]"
        if e.epoch != i + 1:
            raise _error(source, f"{where}.epoch", e.epoch, f"epochs are numbered 1..K in order; expected {i + 1}")
        if e.model not in models:
            raise _error(source, f"{where}.model", e.model, f"no model of scenario {s.name!r} has this name "
                         f"(models: {sorted(models)})")
        if e.cluster not in clusters:
            raise _error(source, f"{where}.cluster", e.cluster, f"no cluster of scenario {s.name!r} has this name "
                         f"(clusters: {sorted(clusters)})")
        r = clusters[e.cluster].capacity
        if not (0.0 < e.compute <= r * (1 + 1e-9)):
            raise _error(source, f"{where}.compute", e.compute, f"must be in (0, {r:g}], the capacity of "
                         f"cluster {e.cluster!r}")
        if prev is not None and prev != e.model and (prev, e.model) not in s.switch_map:
            raise _error(source, f"{where}.model", e.model, f"the scenario allows no switch {prev} -> {e.model}")
        prev = e.model
    for field, recorded, actual in (("loss_target", plan.loss_target, s.target.loss),
                                    ("omega", plan.omega, s.target.quantile)):
        if not math.isclose(recorded, actual, rel_tol=1e-9, abs_tol=0.0):
            raise _error(source, field, recorded, f"the plan's scenario says {actual:g}; a plan is judged "
                         "against the target it was made for")
    if not isinstance(plan.feasible, bool):  # built in code rather than read from a file
        raise PlanError(f"{source}: feasible must be a boolean")
