"""Stage 1: which datasets to train on (paper Sec. IV-A, eq. 7).

min over D̂ ⊆ D of K̂(D̂)·T̂(D̂): K̂ the epochs the full model (the version with
the most work per sample) needs to meet the target on the most capable
cluster, T̂ the duration of one such epoch at full speed (eq. 1).  More data
means fewer epochs (φ(S) grows like a logarithm) but longer ones (linear).

Exact by enumeration up to `ENUMERATE_UP_TO` datasets; beyond, the
submodular minimisation of depl.planners.submodular over the same objective.
`ranked_subsets` returns the candidates best first: Fig. 3's backtracking
blacklists the first when stages 2–3 cannot make it feasible and takes the next.

That is the paper's stage 1, kept as `Options(dataset_rule="paper")`.  By
default depl ranks the choices by what it minimises, eq. (2):
`ranked_by_cost` orders them by the cost of their cheapest one-version,
one-cluster plan under stage 3's allocation (depl.planners.bounds.proxy_cost),
and depl takes the leading ones through stages 2–3, skipping any whose
admissible lower bound is above the best plan found.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..loss import LossModel, loss_model_for
from ..plan import epoch_time
from ..scenario import Scenario
from .schedule import cornish_fisher
from .bounds import proxy_cost, proxy_costs
from .common import Context
from .submodular import minimize_set_function

ENUMERATE_UP_TO = 12


def epochs_needed(s: Scenario, loss: LossModel, model: str, samples: float, max_epochs: int = 400) -> float:
    """K̂: the fewest epochs of `model` alone whose Cornish–Fisher ω-quantile ≤ ℓmax."""
    i = loss.model_names.index(model)
    cum = np.cumsum(loss.epoch_cumulants(max_epochs, s.phi(samples))[i], axis=0)
    q, _ = cornish_fisher(loss.initial_loss, cum, s.target.quantile)
    ok = np.flatnonzero(q <= s.target.loss)
    return float(ok[0] + 1) if ok.size else math.inf


def objective(s: Scenario, loss: LossModel, names: tuple[str, ...]) -> float:
    """K̂(D̂)·T̂(D̂) of eq. (7); inf where the full model cannot meet the target."""
    if not names:
        return math.inf
    samples = s.samples(names)
    full = max(s.models, key=lambda m: m.work)
    best = max(s.clusters, key=lambda n: (n.capacity, n.bandwidth))
    T = epoch_time(s, full.name, best.name, best.capacity, samples)  # eq. (1) at full speed
    K = epochs_needed(s, loss, full.name, samples)
    return K * T


def scored_subsets(s: Scenario, loss: LossModel | None = None) -> list[tuple[float, tuple[str, ...]]]:
    """(K̂·T̂, datasets) for the dataset choices, best (lowest K̂·T̂) first; ties go to fewer samples."""
    loss = loss or loss_model_for(s)
    memo: dict[tuple[str, ...], float] = {}

    def score(sub):
        if sub not in memo:
            memo[sub] = objective(s, loss, sub)
        return memo[sub]

    scored = []
    for sub in all_subsets(s, loss, score):
        f, n = score(sub), s.samples(sub)
        # Where the full model cannot meet the target at all, more data first.
        scored.append((f, n if math.isfinite(f) else -n, sub))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(f, sub) for f, _, sub in scored]


def ranked_subsets(s: Scenario, loss: LossModel | None = None) -> list[tuple[str, ...]]:
    """Dataset choices, best (lowest K̂·T̂) first; ties go to fewer samples."""
    return [sub for _, sub in scored_subsets(s, loss)]


def all_subsets(s: Scenario, loss: LossModel, score) -> list[tuple[str, ...]]:
    """Every non-empty subset up to `ENUMERATE_UP_TO` datasets; beyond, the
    submodular minimiser of `score` and its one-element neighbours.  A fitted
    scenario keeps only the choices holding an amount of data its profile
    measured (`Scenario.measured_data`)."""
    names = [d.name for d in s.datasets]
    if len(names) <= ENUMERATE_UP_TO:
        return [c for r in range(1, len(names) + 1) for c in itertools.combinations(names, r) if s.measured_data(c)]

    best = minimize_set_function(lambda sub: score(tuple(sub)), names)
    subsets = [tuple(best)] + [tuple(sorted(set(best) ^ {n})) for n in names]
    return [x for x in subsets if x and s.measured_data(x)]


def ranked_by_cost(s: Scenario, loss: LossModel, options, context=None
                   ) -> list[tuple[float, tuple[str, ...], "Context"]]:
    """(proxy cost, datasets, context) for the dataset choices, cheapest proxy first.

    Ties (and choices no single version can make feasible, proxy inf) go to
    more samples first: more data is what can still make them feasible.
    `context(datasets)` makes (or reuses) the context of a choice."""
    if context is None:
        ctxs: dict[tuple[str, ...], Context] = {}

        def context(sub):
            if sub not in ctxs:
                ctxs[sub] = Context(s, list(sub), loss=loss, options=options)
            return ctxs[sub]

    scores: dict[tuple[str, ...], float] = {}

    def score(sub):
        if sub not in scores:
            scores[sub] = proxy_cost(context(sub)) if sub else math.inf
        return scores[sub]

    names = [d.name for d in s.datasets]
    if len(names) <= ENUMERATE_UP_TO:  # every choice: score them all at once
        subsets = [c for r in range(1, len(names) + 1) for c in itertools.combinations(names, r)]
        scores.update(zip(subsets, proxy_costs(s, loss, subsets, context)))
    subsets = all_subsets(s, loss, score)
    ranked = sorted(subsets, key=lambda sub: (score(sub), -s.samples(sub)))
    return [(score(sub), sub, context(sub)) for sub in ranked]
