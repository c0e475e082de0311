"""Scenarios derived from the built-in ones: another target, more versions or clusters, variants.

The variants are a sensitivity study, not the paper's scenario: each says in
its description what it changes.
"""

from __future__ import annotations

from typing import Callable

from ..scenario import Cluster, DistSpec, Progress, Scenario, Switch


def with_loss_target(s: Scenario, loss: float) -> Scenario:
    """The scenario with ℓmax = `loss` (a copy: ℓmax enters no cross-table check, so only its sign is checked)."""
    if not float(loss) > 0:
        raise ValueError(f"target loss {loss!r}: must be > 0")
    return s.model_copy(update={"target": s.target.model_copy(update={"loss": float(loss)})})


def with_cost_model(s: Scenario, cost_model: str) -> Scenario:
    """The scenario charged by `cost_model` ("per-epoch": eq. (2) as printed; "resource-time": κ·x·T(k))."""
    if "cost_model" not in type(s).model_fields:
        if cost_model == "per-epoch":
            return s  # the only cost model a scenario without the key knows
        raise ValueError(f"cost model {cost_model!r}: this depl's scenarios have no cost_model key")
    return s.model_copy(update={"cost_model": cost_model})


def with_extra_versions(s: Scenario, total: int) -> Scenario:
    """|M| = `total`: synthetic versions interpolated between the first and last.

    Version i sits at fraction f of the way from the least to the most pruned
    (work, progress A and B, noise mean and variance, size); switches go from
    every version to every more-pruned one, with a jump that grows with the
    pruning step, as in the built-in files.
    """
    base = list(s.models)
    lo, hi = base[0], base[-1]
    extra = total - len(base)
    models = list(base)
    for i in range(extra):
        f = (i + 0.5) / extra

        def mix(a: float, b: float) -> float:
            return (1 - f) * a + f * b

        noise = DistSpec(family="invgamma", mean=mix(lo.noise.frozen.mean(), hi.noise.frozen.mean()),
                         var=mix(lo.noise.frozen.var(), hi.noise.frozen.var()))
        models.append(lo.model_copy(update={
            "name": f"synthetic-{i + 1}", "work": mix(lo.work, hi.work), "size": mix(lo.size, hi.size),
            "progress": Progress(A=mix(lo.progress.A, hi.progress.A), B=mix(lo.progress.B, hi.progress.B)),
            "noise": noise, "train": None}))
    models.sort(key=lambda m: -m.work)  # most work = least pruned first
    existing = {(w.from_, w.to) for w in s.switches}
    switches = list(s.switches)
    for a in range(len(models)):
        for b in range(a + 1, len(models)):
            pair = (models[a].name, models[b].name)
            if pair not in existing:
                step = (models[a].work - models[b].work) / (lo.work - hi.work)
                switches.append(Switch.model_validate({"from": pair[0], "to": pair[1], "jump": {
                    "family": "t", "params": {"df": 4.0, "loc": 0.2 + 0.6 * step, "scale": 0.05 + 0.1 * step}}}))
    return s.model_copy(update={"models": models, "switches": switches})


def with_extra_clusters(s: Scenario, total: int) -> Scenario:
    """|N| = `total`: more A- and B-class clusters, alternately, each a little slower and cheaper.

    The j-th extra cluster of a class has capacity r·(1 − 0.03j) and unit cost
    κ·(1 − 0.02j): no two clusters are interchangeable, so placement really
    has |N| choices per epoch.
    """
    by_class: dict[str, Cluster] = {}
    for c in s.clusters:
        by_class.setdefault(c.name[0], c)
    classes = sorted(by_class)
    clusters = list(s.clusters)
    i = 0
    while len(clusters) < total:
        proto = by_class[classes[i % len(classes)]]
        j = i // len(classes) + 1
        n = sum(c.name[0] == proto.name[0] for c in clusters) + 1
        clusters.append(proto.model_copy(update={
            "name": f"{proto.name[0]}{n}", "capacity": proto.capacity * (1 - 0.03 * j),
            "unit_cost": proto.unit_cost * (1 - 0.02 * j)}))
        i += 1
    return s.model_copy(update={"clusters": clusters})


def variant_noisy_fast(s: Scenario, factor: float = 10.0) -> Scenario:
    """Variant: fast-unsteady keeps the best mean progress per cost, with `factor`× its Var[x]."""
    models = [m.model_copy(update={"noise": DistSpec(family="invgamma", mean=m.noise.frozen.mean(),
                                                         var=m.noise.frozen.var() * factor)})
              if m.name == "fast-unsteady" else m for m in s.models]
    return s.model_copy(update={"models": models, "name": f"{s.name}/variant:noisy-fast"})


def variant_equal_progress(s: Scenario) -> Scenario:
    """Variant: every version learns at the same A_m, B_m (those of "intermediate")."""
    ref = next(m for m in s.models if m.name == "intermediate").progress
    models = [m.model_copy(update={"progress": ref}) for m in s.models]
    return s.model_copy(update={"models": models, "name": f"{s.name}/variant:equal-progress"})


VARIANTS: dict[str, tuple[str, Callable[[Scenario], Scenario]]] = {
    "noisy-fast": ("paper-alexnet with fast-unsteady's Var[x] × 10 (0.031 → 0.31); nothing else changed. A stress "
                   "test, not a realistic network: the Inverse-Gamma's heavy right tail gives fast-unsteady a few huge "
                   "steps, and since the additive loss model has no floor its 1st percentile can fall below zero",
                   variant_noisy_fast),
    "equal-progress": ("paper-alexnet with every version at A = 1.5, B = 1 (intermediate's); nothing else changed",
                       variant_equal_progress),
}


__all__ = ["with_target", "with_cost_model", "with_extra_versions", "with_extra_clusters", "VARIANTS"]
