"""The checks across a scenario's tables, one function each, run in the order of `CHECKS` once every table is
valid on its own; the first that fails raises a FieldError naming the field, the value and why."""

from __future__ import annotations

import math
from typing import Any, Mapping, Protocol, Sequence

from ..laws import get_law, law_names
from .base import FieldError
from .code import unknown_network


class Scenario(Protocol):
    """What the checks read of a scenario, each table valid on its own (`depl.scenario.model.Scenario` is one, and
    passes itself to every check): the checks know its fields, never its class."""

    initial_loss: float
    loss_model: str | None
    cost_model: str | None
    target: Any
    data_law: Any
    fitted_seeds: list[int] | None
    clusters: Sequence[Any]
    datasets: Sequence[Any]
    models: Sequence[Any]
    switches: Sequence[Any]
    training: Any
    calibration: Any
    code_dir: str | None

    @property
    def model_index(self) -> Mapping[str, int]: ...

# The data factor φ(S) multiplies the laws' progress (and their time axis): within ±6 orders of magnitude of 1 a
# fitted law stays in floating point; φ = 1e300 (reference_samples = 1e-300) turns its sums into NaN.
PHI_MAX = 1e6
COST_MODELS = (None, "per-epoch", "resource-time")


def names_unique(s: Scenario) -> None:
    """No two clusters, datasets or model versions share a name."""
    for what, items in (("clusters", s.clusters), ("datasets", s.datasets), ("models", s.models)):
        seen: set[str] = set()
        for i, it in enumerate(items):
            if it.name in seen:
                raise FieldError(f"{what}[{i}].name", it.name, f"another entry of {what} has this name; names must be unique")
            seen.add(it.name)


def transfer_costs_name_clusters(s: Scenario) -> None:
    clusters = {c.name for c in s.clusters}
    for i, d in enumerate(s.datasets):
        for c in d.transfer_cost:
            if c not in clusters:
                raise FieldError(f"datasets[{i}].transfer_cost", c, f"no cluster has this name (clusters: {sorted(clusters)})")


def switches_name_models(s: Scenario) -> None:
    """Each switch goes from one model version to another, and is listed once."""
    models = {m.name for m in s.models}
    pairs: set[tuple[str, str]] = set()
    for i, sw in enumerate(s.switches):
        for field, v in (("from", sw.from_), ("to", sw.to)):
            if v not in models:
                raise FieldError(f"switches[{i}].{field}", v, f"no model has this name (models: {sorted(models)})")
        if sw.from_ == sw.to:
            raise FieldError(f"switches[{i}].to", sw.to, "a switch must go to another model")
        if (sw.from_, sw.to) in pairs:
            raise FieldError(f"switches[{i}]", f"{sw.from_} -> {sw.to}", "this switch is listed twice")
        pairs.add((sw.from_, sw.to))


def switches_prune(s: Scenario) -> None:
    """A switch prunes the trained model further (paper Sec. III): where both ends are real networks, they are one
    network, pruned no less after the switch than before."""
    by_name = {m.name: m for m in s.models}
    for i, sw in enumerate(s.switches):
        a, b = by_name[sw.from_].train, by_name[sw.to].train
        if a is None or b is None:
            continue
        if (a.net, a.width) != (b.net, b.width):
            for j, m in ((s.model_index[sw.from_], a), (s.model_index[sw.to], b)):
                why = unknown_network(m.net, s.code_dir) if a.net != b.net else None
                if why:  # a misspelt name: say so, rather than that the switch changes networks
                    raise FieldError(f"models[{j}].train.net", m.net, why)
            raise FieldError(f"switches[{i}]", f"{sw.from_} -> {sw.to}",
                             f"the versions are different networks ({a.net} width {a.width}, {b.net} width "
                             f"{b.width}); a switch prunes one network, it cannot change it")
        if b.prune_ratio < a.prune_ratio:
            raise FieldError(f"switches[{i}]", f"{sw.from_} -> {sw.to}",
                             f"goes from prune_ratio {a.prune_ratio} to {b.prune_ratio}; pruning removes "
                             "channels, it cannot grow them back")


def switches_acyclic(s: Scenario) -> None:
    """Switches prune further, so the versions are ordered and the switches form no cycle."""
    nxt: dict[str, list[str]] = {}
    for sw in s.switches:
        nxt.setdefault(sw.from_, []).append(sw.to)
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in nxt.get(m, ()):
            if state.get(t) == 1:
                cyc = path[path.index(t):] + [m, t] if t in path else [m, t]
                i = next(j for j, sw in enumerate(s.switches) if (sw.from_, sw.to) == (m, t))
                raise FieldError(f"switches[{i}]", f"{m} -> {t}",
                                 f"closes the cycle {' -> '.join(cyc)}; switches prune further, so a "
                                 "version cannot be reached again")
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in s.models:
        if m.name not in state:
            visit(m.name, [])


def cost_model_known(s: Scenario) -> None:
    if s.cost_model not in COST_MODELS:
        raise FieldError("cost_model", s.cost_model, "choose 'per-epoch' (eq. 2 as printed: κ·x·nodes per "
                         "epoch, the default) or 'resource-time' (κ·x·nodes·T(k) per epoch)")


def loss_model_known(s: Scenario) -> None:
    if s.loss_model is not None and s.loss_model not in law_names():
        known = law_names()
        raise FieldError("loss_model", s.loss_model, "choose " + ", ".join(f"'{n}'" for n in known[:-1])
                         + f" or '{known[-1]}'" + " ('increments' is the paper's model)")


def law_tables_given(s: Scenario) -> None:
    """Every model version and switch has the tables its loss law reads (depl.laws, `tables`)."""
    law = get_law(s.loss_model)
    for table in law.tables:
        for i, m in enumerate(s.models):
            if getattr(m, table, None) is None:
                raise FieldError(f"models[{i}].{table}", None, f'loss_model = "{law.name}" needs a `{table}` table for every model ("{m.name}" has none)')
        for i, sw in enumerate(s.switches):
            if getattr(sw, table, None) is None:
                raise FieldError(f"switches[{i}].{table}", None, f'loss_model = "{law.name}" needs a `{table}` table for every switch ({sw.from_} -> {sw.to} has none)')


def fitted_seeds_ordered(s: Scenario) -> None:
    if s.fitted_seeds is not None and not 0 <= s.fitted_seeds[0] <= s.fitted_seeds[1]:
        raise FieldError("fitted_seeds", s.fitted_seeds, "expected [first, last] with 0 ≤ first ≤ last")


def calibration_reaches_omega(s: Scenario) -> None:
    """A [calibration] in use has, at every scored epoch, the held-out runs split conformal needs for ω."""
    c = s.calibration
    if c is not None and c.use and c.fewest()[0] < c.needed(s.target.quantile):
        need, (have, k) = c.needed(s.target.quantile), c.fewest()
        where = "calibration.scores" if k is None or len(c.scores) == have else f"calibration.epoch_scores[{k - 1}]"
        raise FieldError(where, f"{have} scores" + (f" (epoch {k})" if k is not None else ""),
                         f"split conformal needs at least {need} held-out runs at every scored epoch to certify "
                         f"ω = {s.target.quantile:g} ({need - have} more); refit with more calibration "
                         "seeds, or set calibration.use = false to plan with the uncalibrated law")


def calibration_experiments_name_models(s: Scenario) -> None:
    c = s.calibration
    names = {m.name for m in s.models}
    for i, e in enumerate(c.experiments or () if c is not None else ()):
        unknown = [v for v in e.versions if v not in names]
        if unknown:
            raise FieldError(f"calibration.experiments[{i}].versions", unknown[0],
                             f"experiment {e.label!r} trained a version the scenario has no model of "
                             f"(models: {', '.join(sorted(names))})")


def dirichlet_split_not_iid(s: Scenario) -> None:
    if s.training.dirichlet_alpha is not None and s.training.iid:
        raise FieldError("training.iid", True, "dirichlet_alpha partitions the data non-IID: set iid = false")


def data_law_usable(s: Scenario) -> None:
    """φ(S) of every choice of datasets within [1/PHI_MAX, PHI_MAX] (φ grows with S: the smallest dataset and
    all of them bound it); a φ of 1e300 (reference_samples = 1e-300) makes the laws' sums NaN."""
    if s.data_law is None:
        return
    sizes = [d.samples for d in s.datasets]
    for what, S in (("its smallest dataset", min(sizes)), ("all its datasets", float(sum(sizes)))):
        try:
            phi = s.data_law.phi(S)
        except (ZeroDivisionError, OverflowError):
            phi = math.nan
        if not 1 / PHI_MAX <= phi <= PHI_MAX:
            raise FieldError("data_law.reference_samples", s.data_law.reference_samples,
                             f"gives φ = {phi:g} for {what} ({S:g} samples, s0 = {s.data_law.s0:g}); the data "
                             f"law scales progress by a factor within [{1 / PHI_MAX:g}, {PHI_MAX:g}] "
                             "(reference_samples: the samples the law was measured with)")


def target_below_initial_loss(s: Scenario) -> None:
    if s.target.loss >= s.initial_loss:
        raise FieldError("target.loss", s.target.loss, f"must be below initial_loss = {s.initial_loss}: the target is met before training")


CHECKS = (names_unique, transfer_costs_name_clusters, switches_name_models, switches_prune, switches_acyclic,
          cost_model_known, loss_model_known, law_tables_given, fitted_seeds_ordered, calibration_reaches_omega,
          calibration_experiments_name_models, dirichlet_split_not_iid, data_law_usable, target_below_initial_loss)
"""In the order a scenario is checked: the first failing check is the one reported."""
