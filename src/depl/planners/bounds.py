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

from ..loss.level import elasticity, log_sd, median_curve
from .common import Context
from ..families import norm_ppf
from .placement import ClusterTable
from .schedule import cornish_fisher

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
    if ctx.start.started or ctx.omega < 0.5:
        # conditioned on a run, a median curve no longer bounds it; below ω = 1/2 a median does not bound a quantile
        med = None
    else:
        # at most K − 1 switches (|M| − 1 without a cycle)
        k = np.arange(1, K + 1)
        n_sw = np.minimum(k - 1, len(loss.model_names) - 1) if _acyclic(ctx.allowed) else k - 1
        med = loss.median_floor(ctx.phi, K, n_sw)
    if med is None and ctx.moments_exact:
        med = _cantelli_floor(ctx, K)
    if med is None:
        return 1.0
    ok = np.flatnonzero(np.nan_to_num(med, nan=-np.inf) <= ctx.target)
    return float(ok[0] + 1) if ok.size else math.inf


def subset_lower_bound(ctx: Context) -> float:
    """Admissible lower bound of the cost of every plan on this dataset choice."""
    return CostBound(ctx).for_epochs(epochs_lower_bound(ctx))


def one_version_epochs(ctx: Context) -> np.ndarray:
    """Per version: K̂, the epochs it needs alone by Cornish–Fisher (inf if none)."""
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
    cost = version_proxy_costs(ctx)
    late = min((c for c, *_ in late_switches(ctx)), default=math.inf)
    if np.isfinite(cost).any():
        return min(float(cost.min()), late)
    if math.isfinite(late):
        return late
    K = one_version_epochs(ctx)
    best = math.inf
    for m in np.flatnonzero(np.isfinite(K)):
        p = ctx.place([ctx.loss.model_names[m]] * int(K[m]))
        if p is not None:
            best = min(best, p.cost)
    return best


def version_proxy_costs(ctx: Context) -> np.ndarray:
    """Per version: eq. (2) for its K̂ equal epochs on its best single cluster (inf if none fits)."""
    t, T = ctx.table, ctx.deadline
    K = one_version_epochs(ctx)[:, None]
    beta = np.array([ctx.scenario.transfer_cost(ctx.datasets, n) for n in t.clusters])
    with np.errstate(invalid="ignore", divide="ignore"):
        budget = T - K * t.tau
        x = K * t.c / budget
        cost = t.a * K * x + K * t.f + beta[None, :]
        ok = np.isfinite(K) & (budget > 0) & (x <= t.r[None, :])
    return np.where(ok, cost, np.inf).min(axis=1)


def _two_version_cost(ctx: Context, qa: np.ndarray, qb: np.ndarray, a: int, b: int) -> np.ndarray:
    """Eq. (2) for qa epochs of version a then qb of b on one cluster (the best per entry),
    under stage 3's allocation with no cap binding: the Lagrangian optimum gives epoch k
    x_k = √(λ·c_k/a_k), so the plan costs (Σ_k √(a_k·c_k))² / (Tmax − Σ_k τ_k) + Σ_k f_k + β
    (one version: κ·w·S·K²/(Tmax − K·τ) + β, as in `proxy_cost`).  inf where it does not fit."""
    t, T = ctx.table, ctx.deadline
    beta = np.array([ctx.scenario.transfer_cost(ctx.datasets, n) for n in t.clusters])
    qa, qb = qa[..., None], qb[..., None]  # (..., N)
    with np.errstate(invalid="ignore", divide="ignore"):
        ga, gb = np.sqrt(t.a[a] * t.c[a]), np.sqrt(t.a[b] * t.c[b])
        budget = T - qa * t.tau[a] - qb * t.tau[b]
        root = (qa * ga + qb * gb) / budget  # √λ
        cost = (qa * ga + qb * gb) * root + qa * t.f[a] + qb * t.f[b] + beta
        fits = ((budget > 0) & (root * np.sqrt(t.c[a] / t.a[a]) <= t.r) & (root * np.sqrt(t.c[b] / t.a[b]) <= t.r))
    return np.where(fits, cost, np.inf).min(axis=-1)


def _cantelli_floor(ctx: Context, K: int) -> np.ndarray:
    """(K,): a lower bound on the ω-quantile of ℓ(k), k = 1..K, of any schedule, from exact cumulants: the
    lowest mean minus Cantelli's factor times the largest sd (a started run may also switch out of its last
    version before its first epoch)."""
    cum = ctx.epoch_cumulants[:, :K]
    mu = ctx.initial_loss + np.cumsum(cum[:, :, 0].min(axis=0))
    var = np.cumsum(cum[:, :, 1].max(axis=0))
    off = ctx.allowed & ~np.eye(len(ctx.allowed), dtype=bool)
    if off.any():
        k = np.arange(1, K + 1) + (ctx.start.model is not None)
        n_sw = np.minimum(k - 1, len(off) - 1) if _acyclic(ctx.allowed) else k - 1
        sw = ctx.switch_cumulants[off]
        mu = mu + n_sw * min(0.0, float(sw[:, 0].min()))
        var = var + n_sw * float(sw[:, 1].max())
    return mu - cantelli_factor(ctx.omega) * np.sqrt(var)


def late_switches(ctx: Context) -> list[tuple[float, int, int, int, int]]:
    """The level law's cheapest late switches: per allowed switch a → b,
    (proxy cost, a, b, epochs of a, epochs of b) of the cheapest schedule
    a…a b…b whose ω-quantile meets ℓmax, cheapest first.

    Under the level law (no memory) ℓ(K) is b's curve at the global epoch K
    times the switch's decaying offset: log-normal with median
    μ_b(φK)·(1 + δ·r^(n−1)) and log-variance σ_b(K)² + (τ·r^(n−1))² after n
    epochs of b — whatever came before.  A cheap version can do the early
    epochs and the better one the last few, for much less than the better
    one alone (random_instance seeds 178, 186355, 410 of tests/planners/
    test_cheapest.py: 13–66% cheaper).  Closed form over every (K, n), so the
    ranking of dataset choices and DepL's search see those plans; the exact
    FFT quantile still certifies whatever is planned.

    A calibrated level law (depl.loss.calibrated) certifies a K-epoch plan at
    its base law's level `Context.levels[K-1]`, so z is taken per K there: the
    same closed form then sees every K, including where a longer plan is
    certified and a shorter one is not (per-epoch scores)."""
    loss = ctx.base_loss
    switches = loss.memoryless_switches()
    if switches is None or ctx.start.started:
        return []

    names, l0, phi = loss.model_names, loss.initial_loss, ctx.phi
    Kmax = ctx.max_epochs
    # per K where calibrated (+inf where the scores cannot reach ω at that K: nothing is certified there)
    z = float(norm_ppf(ctx.omega)) if ctx.level_z is None else ctx.level_z[:Kmax][None, :]
    K = np.arange(1, Kmax + 1)[None, :]
    n = np.arange(1, Kmax + 1)[:, None]
    valid = n < K  # at least one epoch of a before the switch
    out = []
    for (na, nb), (sw, law) in switches.items():
        a, b = names.index(na), names.index(nb)
        base = median_curve(law, l0, phi * K, phi)
        s = log_sd(law, l0, base, elasticity(law, l0, phi * K, phi))
        decay_n = sw.recovery ** (n - 1)
        q = base * (1 + sw.offset * decay_n) * np.exp(z * np.sqrt(s**2 + (sw.sigma * decay_n) ** 2))
        ok = valid & (q <= ctx.target)
        if not ok.any():
            continue
        nn, KK = np.nonzero(ok)
        nb_, K_ = n[nn, 0], K[0, KK]
        cost = _two_version_cost(ctx, (K_ - nb_).astype(float), nb_.astype(float), a, b)
        i = int(np.argmin(cost))
        if math.isfinite(cost[i]):
            out.append((float(cost[i]), a, b, int(K_[i] - nb_[i]), int(nb_[i])))
    return sorted(out)


def proxy_costs(scenario, loss, subsets: list[tuple[str, ...]], context) -> list[float]:
    """`proxy_cost` of every dataset choice in `subsets`, at once where the law allows.

    Under the increments law every epoch's progress is A·φ/√(k+B) times the
    noise, so the cumulants of a one-version run scale as φ, φ², φ³ and its
    Cornish–Fisher quantile is ℓ(0) + φ·Q(K) with Q computed once: K̂ for
    every choice is one search in Q's running minimum, and eq. (2) for every
    (choice, version, cluster) one array expression (4,095 choices of 12
    datasets took ~10 s one context at a time).  Other laws, a started run
    and choices where no single cluster fits go through `proxy_cost`."""
    ctx0 = context(subsets[0])
    if not loss.cumulants_scale_with_phi() or ctx0.start.started or len(subsets) < 8:
        return [proxy_cost(context(sub)) for sub in subsets]
    names = [d.name for d in scenario.datasets]
    member = np.array([[n in sub for n in names] for sub in subsets], dtype=float)  # (P, D)
    S = member @ np.array([d.samples for d in scenario.datasets])
    phi = np.array([scenario.phi(x) for x in S])
    t1 = ClusterTable.build(scenario, 1.0)  # c and f are linear in the samples, a, r, τ do not depend on them
    beta = member @ np.array([[d.transfer_cost.get(n, 0.0) for n in t1.clusters] for d in scenario.datasets])
    T = ctx0.deadline
    tmin = (t1.c[None] * S[:, None, None] / t1.r + t1.tau[None]).min(axis=(1, 2))
    horizon = np.maximum(1, np.floor(np.maximum(T, 0.0) / tmin + 1e-9))
    if scenario.max_epochs is not None:
        horizon = np.maximum(1, np.minimum(horizon, scenario.max_epochs))
    Kmax = int(horizon.max())
    q, _ = cornish_fisher(0.0, np.cumsum(loss.epoch_cumulants(Kmax, 1.0), axis=1), ctx0.omega)  # (M, Kmax): Q(K)
    running = np.minimum.accumulate(q, axis=1)
    with np.errstate(divide="ignore"):
        thr = (ctx0.target - loss.initial_loss) / phi  # (P,)
    K = np.stack([np.searchsorted(-running[m], -thr, side="left") + 1.0 for m in range(len(q))], axis=1)  # (P, M)
    K[K > horizon[:, None]] = np.inf
    K = K[:, :, None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c = t1.c[None] * S[:, None, None]
        budget = T - K * t1.tau[None]
        x = K * c / budget
        cost = t1.a[None] * K * x + K * t1.f[None] * S[:, None, None] + beta[:, None, :]
        ok = np.isfinite(K) & (budget > 0) & (x <= t1.r)
    best = np.where(ok, cost, np.inf).min(axis=(1, 2))
    out = best.tolist()
    for p in np.flatnonzero(~ok.any(axis=(1, 2)) & np.isfinite(K[:, :, 0]).any(axis=1)):
        out[p] = proxy_cost(context(subsets[p]))  # no single cluster fits: the exact placement decides
    return out
