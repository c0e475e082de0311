"""A plan file is a typed document, checked against its own scenario when it is read.

`simulate`, `run` and `validate` act on a plan file that anyone may have
edited: every epoch is checked before any work starts, so a tampered plan is
refused with the file, the field, the value and why — never trained, never
simulated with wrong numbers (a dataset listed three times counted three
times, ``"feasible": "false"`` read as true, an unknown model a KeyError
after training began).

The plan's own figures are recomputed too (`check_figures`): its cost and
time from its epochs and scenario (eqs. (1)–(2), under the scenario's cost
model), and the certified quantile of ℓ(K) from the scenario's loss law for
the plan's schedule.  A file whose figures disagree is refused naming the
field, the value in the file and the recomputed one: `simulate` never
reports a cost, a time or a guarantee that the plan does not have.
"""

from __future__ import annotations

import math
from typing import Any

from .loss import loss_model_for
from .scenario.model import MAX_EPOCHS

REQUIRED = ("method", "scenario", "feasible", "datasets", "epochs", "cost", "time", "loss_quantile",
            "loss_mean", "solve_seconds")
NUMBERS = ("cost", "time", "loss_quantile", "loss_mean", "solve_seconds", "omega", "loss_target", "deadline")
HARD_MAX_EPOCHS = MAX_EPOCHS  # the scenario's own ceiling on max_epochs
# The figures are recomputed in float64 by the very formulas that wrote them, in another order at most: they agree
# to ~1e-15 relative.  1e-9 leaves room for that rounding and for nothing a person would type into the file.
REL_TOL = 1e-9
# The law of ℓ(K) costs about K² to build (depl.predict); a plan longer than this is not re-certified when read
# (its bracket is still checked against its target), so that a tampered K cannot make reading the file take hours.
RECERTIFY_MAX_EPOCHS = 1000


class PlanError(ValueError):
    """A plan file that cannot be used; the message is meant for the user."""


def _error(source: str, field: str, value: Any, why: str):
    try:
        shown = repr(value)
    except ValueError:  # an int beyond Python's 4300 digits has no repr
        shown = "<an integer of more than 4300 digits>"
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return PlanError(f"{source}: {field} = {shown}: {why}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    """A JSON number that is a finite float (an integer of 400 digits is a number, but no float)."""
    try:
        return _is_number(v) and math.isfinite(v)
    except OverflowError:
        return False


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
        if k in d and not _finite(d[k]):
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
        if not _finite(e["compute"]):
            raise _error(source, f"epochs[{i}].compute", e["compute"], "must be a finite number")
    if d.get("lower_bound") is not None and not _finite(d["lower_bound"]):
        raise _error(source, "lower_bound", d["lower_bound"], "must be a finite number or null")
    b = d.get("loss_quantile_bounds")
    if b is not None and not (isinstance(b, list) and len(b) == 2 and all(_finite(x) for x in b)):
        raise _error(source, "loss_quantile_bounds", b, "must be [low, high] (finite numbers) or null")
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
                                    ("omega", plan.omega, s.target.quantile),
                                    ("deadline", plan.deadline, s.target.deadline)):
        if not math.isclose(recorded, actual, rel_tol=1e-9, abs_tol=0.0):
            raise _error(source, field, recorded, f"the plan's scenario says {actual:g}; a plan is judged "
                         "against the target it was made for")
    if not isinstance(plan.feasible, bool):  # built in code rather than read from a file
        raise PlanError(f"{source}: feasible must be a boolean")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


def _slack(*xs: float) -> float:
    """The rounding allowed when comparing quantiles of one law (relative to their size, REL_TOL)."""
    return REL_TOL * max([1.0, *(abs(x) for x in xs if math.isfinite(x))])


def check_figures(plan, s, source: str, cost: float, time: float, loss=None) -> None:
    """The plan's own numbers against its epochs and scenario `s`; raises PlanError naming the field, the value in
    the file and the recomputed one.  `cost`, `time`: eqs. (2) and (1) for the plan's epochs (depl.plan computes
    them: it is the layer above); `loss`: the LossModel the plan was certified with, when not the scenario's own
    (a law given in code).  Floats are compared with a relative tolerance of REL_TOL (1e-9).

    The quantile is re-certified on the law of ℓ(K) (`loss_model_for(s).distribution`, as the planners certify a
    schedule): the plan's bracket [lo, hi] and the law's must overlap — both contain the true ω-quantile, whatever
    lattice each was computed on (the depl planner certifies on a coarser lattice than the default one, so its
    brackets are wider) — and the plan reports hi.  A bracket wider than the law's passes (a looser bound is still a
    bound); one that misses the law's, or a loss_quantile below it (−1), does not.  Whether hi meets the target is
    not judged here: that is the claim `simulate` and `validate` test (exit 4 when refuted).

    Cost: re-certifying a built-in scenario's plan (every method) takes 5–80 ms once scipy is imported, which
    `simulate`, `run` and `validate` import anyway (it is ~0.5 s of a cold start), against seconds for the Monte
    Carlo: it is done in full rather than only checking the bracket; plans longer than RECERTIFY_MAX_EPOCHS are not.
    """
    if plan.scenario != s.name:
        raise _error(source, "scenario", plan.scenario, f"the plan's scenario (scenario_spec) is named {s.name!r}")
    model = s.cost_model or "per-epoch"
    for field, recorded, actual, how in (
            ("cost", plan.cost, cost, f"eq. (2) under cost_model {model!r}"),
            ("time", plan.time, time, "eq. (1)")):
        if not _close(recorded, actual):
            raise _error(source, field, recorded, f"the plan's epochs and scenario give {actual:.10g} ({how}); the "
                         "file was altered or made for other numbers")
    if plan.lower_bound is not None and not plan.lower_bound <= cost * (1 + REL_TOL):
        raise _error(source, "lower_bound", plan.lower_bound, f"above the plan's own cost {cost:.10g}; a lower bound "
                     "on the cost of every plan cannot be")
    q, bounds = plan.loss_quantile, plan.loss_quantile_bounds
    law = None if len(plan.epochs) > RECERTIFY_MAX_EPOCHS or plan.info.get("start_epoch") else \
        _recertified(plan, s, source, loss)  # too long to re-certify when read; or a plan continuing a run
    said = "" if law is None else (f"; the loss law of the plan's scenario puts the {plan.omega:g}-quantile of ℓ(K) "
                                   f"for its epochs in [{law[0]:.10g}, {law[1]:.10g}]")
    if law is None and q == math.inf:  # a +∞ quantile the law agrees with (a plan written by hand): nothing to bracket
        return
    if bounds is not None:
        lo, hi = (float(x) for x in bounds)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi + _slack(lo, hi)):
            raise _error(source, "loss_quantile_bounds", list(bounds), "must be [low, high] with low ≤ high")
        if not _close(q, hi):
            raise _error(source, "loss_quantile", q, f"the plan's bracket loss_quantile_bounds ends at {hi:.10g} "
                         f"(the certified quantile is its upper end){said}")
    else:
        lo = hi = q
    if law is None:
        return
    law_lo, law_hi, law_mean = law
    eps = _slack(lo, hi, law_lo, law_hi)
    if hi < law_lo - eps or (bounds is not None and lo > law_hi + eps):
        shown = f"bracket [{lo:.10g}, {hi:.10g}]" if bounds is not None else "value"
        raise _error(source, "loss_quantile", q, f"{said.removeprefix('; ')}, outside the plan's {shown}")
    width = max(hi - lo, law_hi - law_lo)
    if not abs(plan.loss_mean - law_mean) <= width + _slack(plan.loss_mean, law_mean):
        raise _error(source, "loss_mean", plan.loss_mean, f"the loss law of the plan's scenario gives E[ℓ(K)] = "
                     f"{law_mean:.10g} for its epochs")


def _recertified(plan, s, source: str, loss=None) -> tuple[float, float, float] | None:
    """(lo, hi, mean): the certified bracket of the ω-quantile of ℓ(K) and E[ℓ(K)] for the plan's schedule, on
    `loss` or the scenario's law, as the planners certify a schedule (default lattice: 1% of the sd)."""
    q = plan.loss_quantile
    try:
        law = loss_model_for(s) if loss is None else loss
        d = law.distribution([e.model for e in plan.epochs], s.phi(s.samples(plan.datasets)))
        law_lo, law_hi = d.quantile_bounds(plan.omega)
        law_mean = float(d.mean())
    except (ValueError, ArithmeticError) as e:
        raise _error(source, "loss_quantile", q, f"the loss law of the plan's scenario cannot be evaluated for its "
                     f"epochs ({e})") from None
    if not (math.isfinite(law_lo) and math.isfinite(law_hi) and math.isfinite(law_mean)):
        if math.isinf(law_hi) and q == law_hi:  # a plan that says so (one written by hand): nothing finite to compare
            return None
        raise _error(source, "loss_quantile", q, "the loss law of the plan's scenario certifies no finite quantile "
                     "for its epochs")
    return float(law_lo), float(law_hi), law_mean
