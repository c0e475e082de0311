"""Bounds on the cost of a dataset choice, from eqs. (1)–(2) and the loss law.

Two uses:

* `optimal` prunes with *admissible* lower bounds (never above the cost of
  any plan they cover), so what it cuts cannot hold a cheaper plan;
* depl ranks dataset choices by `proxy_cost`, the cost of the cheapest
  one-version, one-cluster plan under stage 3's allocation — eq. (2) itself,
  where the paper's stage 1 (eq. 7) ranks by learning time K̂·T̂.

The cost lower bound is the Lagrangian dual of stage 3 (depl.planners.
placement) for *any* assignment of epochs to versions and clusters: at a
price λ of time each epoch costs at least min over clusters of
a·x + λ·(c/x + s/b), so for every λ ≥ 0

    cost ≥ Σ_U β + Σ_k min_{n∈U} [a_n·x + λ·(c/x + τ)] − λ·Tmax

with U the clusters the plan uses (β paid once per used cluster); the bound
is the minimum over U of the maximum over a grid of λ (any λ is valid).

The epochs lower bound uses Cantelli's inequality, valid for every law with
a finite variance: P(X ≤ μ − t) ≤ σ²/(σ² + t²), so the ω-quantile is at least
μ − σ·√((1−ω)/ω).  Over all schedules of K epochs μ is at least the sum of the
smallest mean change of each epoch and σ at most the root of the sum of the
largest variances (switches included), which bounds K from below.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..loss import IncrementsModel, LevelModel
from ..loss.level import median_curve
from .common import Context

GRID = 96


def _acyclic(allowed: np.ndarray) -> bool:
    """Whether the switch graph (off-diagonal of `allowed`) has no cycle."""
    adj = allowed & ~np.eye(len(allowed), dtype=bool)
    indeg = adj.sum(axis=0)
    queue, seen = [i for i in range(len(adj)) if indeg[i] == 0], 0
    while queue:
        i = queue.pop()
        seen += 1
        for j in np.flatnonzero(adj[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(int(j))
    return seen == len(adj)


class CostBound:
    """Admissible lower bound of eq. (2) for a vector of epochs per version."""

    def __init__(self, ctx: Context):
        t = ctx.table
        N = len(t.clusters)
        beta = np.array([ctx.scenario.transfer_cost(ctx.datasets, n) for n in t.clusters])
        if not beta.any():
            groups, fixed = [np.arange(N)], [0.0]
        elif N <= 10:
            groups = [np.array(c) for r in range(1, N + 1) for c in itertools.combinations(range(N), r)]
            fixed = [float(beta[g].sum()) for g in groups]
        else:  # some cluster is used: at least the smallest β, on any clusters
            groups, fixed = [np.arange(N)], [float(beta.min())]
        top = t.full_speed_price()  # every epoch at full speed
        self.lam = top * np.logspace(-10, 1, GRID)
        val = np.stack([t.lagrangian(lam, np.arange(N))[0] for lam in self.lam], axis=-1)  # (M, N, G)
        self.W = np.stack([val[:, g, :].min(axis=1) for g in groups])  # (U, M, G)
        self.fixed = np.array(fixed)
        self.T = ctx.deadline

    def __call__(self, counts) -> float:
        """Lower bound of the cost of any plan with `counts[m]` epochs of version m."""
        q = np.asarray(counts, dtype=float)
        dual = np.einsum("umg,m->ug", self.W, q) - self.lam * self.T
        return float(np.min(self.fixed + np.maximum(dual.max(axis=1), 0.0)))

    def for_epochs(self, K: float) -> float:
        """Lower bound of the cost of any plan with at least K epochs (any versions)."""
        if not math.isfinite(K):
            return math.inf
        dual = K * self.W.min(axis=1) - self.lam * self.T  # (U, G)
        return float(np.min(self.fixed + np.maximum(dual.max(axis=1), 0.0)))


def cantelli_factor(omega: float) -> float:
    return math.sqrt((1.0 - omega) / omega)


def epochs_lower_bound(ctx: Context) -> float:
    """The fewest epochs any schedule needs for its ω-quantile to meet ℓmax
    (admissible; 1 where the law gives no handle, inf where no schedule within
    the horizon can)."""
    K = ctx.max_epochs
    loss = ctx.loss
    if isinstance(loss, LevelModel):
        if ctx.start.started:
            return 1.0  # conditioned on a run, the law's median curve no longer bounds it
        # ℓ(K) = μ·exp(σZ) with μ ≥ the version's median curve when no switch
        # lowers it (offset ≥ 0), and for ω ≥ 1/2 the quantile is ≥ the median.
        if ctx.omega < 0.5 or any(sw.offset < 0 for sw in loss._switch.values()):
            return 1.0
        k = np.arange(1, K + 1)
        med = np.min([median_curve(loss._law[m], loss.initial_loss, ctx.phi * k, ctx.phi)
                      for m in loss.model_names], axis=0)
    elif isinstance(loss, IncrementsModel):
        if not ctx.moments_exact:
            return 1.0  # ℓ(start) not observed: its own spread is not in the cumulants
        cum = ctx.epoch_cumulants[:, :K]
        mu = ctx.initial_loss + np.cumsum(cum[:, :, 0].min(axis=0))
        var = np.cumsum(cum[:, :, 1].max(axis=0))
        off = ctx.allowed & ~np.eye(len(ctx.allowed), dtype=bool)
        if off.any():
            # a started run may also switch out of its last version before its first epoch
            k = np.arange(1, K + 1) + (ctx.start.model is not None)
            n_sw = np.minimum(k - 1, len(off) - 1) if _acyclic(ctx.allowed) else k - 1
            sw = ctx.switch_cumulants[off]
            mu = mu + n_sw * min(0.0, float(sw[:, 0].min()))
            var = var + n_sw * float(sw[:, 1].max())
        med = mu - cantelli_factor(ctx.omega) * np.sqrt(var)
    else:
        return 1.0
    ok = np.flatnonzero(np.nan_to_num(med, nan=-np.inf) <= ctx.target)
    return float(ok[0] + 1) if ok.size else math.inf


def subset_lower_bound(ctx: Context) -> float:
    """Admissible lower bound of the cost of every plan on this dataset choice."""
    return CostBound(ctx).for_epochs(epochs_lower_bound(ctx))


def one_version_epochs(ctx: Context) -> np.ndarray:
    """Per version: K̂, the epochs it needs alone by Cornish–Fisher (inf if none)."""
    from .schedule import cornish_fisher

    cum = np.cumsum(ctx.epoch_cumulants, axis=1)
    q, _ = cornish_fisher(ctx.initial_loss, cum + ctx.first_switch[:, None, :], ctx.omega)
    out = np.full(len(ctx.loss.model_names), math.inf)
    for m in range(len(out)):
        ok = np.flatnonzero(q[m] <= ctx.target)
        if ok.size:
            out[m] = ok[0] + 1
    return out


def proxy_cost(ctx: Context) -> float:
    """Eq. (2) for the cheapest one-version plan on one cluster, K̂ by Cornish–Fisher.

    Stage 3 gives K equal epochs of version m on cluster n the compute
    x = K·c/(Tmax − K·τ) (water-filling with no cap binding), so the plan costs
    a·K·x + β = κ·w·S·K²/(Tmax − K·τ) + β: quadratic in K, linear in the
    samples S — the trade-off eq. (7)'s K̂·T̂ leaves out.  Where no single
    cluster fits, the exact placement of the best version is used.
    """
    t, T = ctx.table, ctx.deadline
    K = one_version_epochs(ctx)[:, None]
    beta = np.array([ctx.scenario.transfer_cost(ctx.datasets, n) for n in t.clusters])
    with np.errstate(invalid="ignore", divide="ignore"):
        budget = T - K * t.tau
        x = K * t.c / budget
        cost = t.a * K * x + K * t.f + beta[None, :]
        ok = np.isfinite(K) & (budget > 0) & (x <= t.r[None, :])
    if ok.any():
        return float(cost[ok].min())
    finite = np.flatnonzero(np.isfinite(K[:, 0]))
    best = math.inf
    for m in finite:
        p = ctx.place([ctx.loss.model_names[m]] * int(K[m, 0]))
        if p is not None:
            best = min(best, p.cost)
    return best
