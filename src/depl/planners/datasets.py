"""Stage 1: which datasets to train on (paper Sec. IV-A, eq. 7).

min over D̂ ⊆ D of K̂(D̂)·T̂(D̂): K̂ the epochs the full model (the version with
the most work per sample) needs to meet the target on the most capable
cluster, T̂ the duration of one such epoch at full speed (eq. 1).  More data
means fewer epochs (φ(S) grows like a logarithm) but longer ones (linear).

Exact by enumeration up to `ENUMERATE_UP_TO` datasets; beyond, the
submodular minimisation of depl.planners.submodular over the same objective.
`ranked_subsets` returns the candidates best first: Fig. 3's backtracking
blacklists the first when stages 2–3 cannot make it feasible and takes the next.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..loss import LossModel, loss_model_for
from ..scenario import Scenario
from .schedule import cornish_fisher

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
    T = full.work * samples / best.nodes / best.capacity + full.size / best.bandwidth
    K = epochs_needed(s, loss, full.name, samples)
    return K * T


def ranked_subsets(s: Scenario, loss: LossModel | None = None) -> list[tuple[str, ...]]:
    """Dataset choices, best (lowest K̂·T̂) first; ties go to fewer samples."""
    loss = loss or loss_model_for(s)
    names = [d.name for d in s.datasets]
    if len(names) <= ENUMERATE_UP_TO:
        subsets = [c for r in range(1, len(names) + 1) for c in itertools.combinations(names, r)]
    else:
        from .submodular import minimize_set_function

        best = minimize_set_function(lambda sub: objective(s, loss, tuple(sub)), names)
        # The minimiser first, then its one-element neighbours as fall-backs.
        subsets = [tuple(best)] + [tuple(sorted(set(best) ^ {n})) for n in names]
        subsets = [x for x in subsets if x]
    scored = []
    for sub in subsets:
        f, n = objective(s, loss, sub), s.samples(sub)
        # Where the full model cannot meet the target at all, more data first.
        scored.append((f, n if math.isfinite(f) else -n, sub))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [sub for _, _, sub in scored]
