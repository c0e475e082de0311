"""Stage 3: the cluster and the compute of every epoch, for a fixed schedule.

For a fixed assignment of epochs to clusters the problem is convex:

    min Σ_k (f_k + a_k·x_k)   s.t.  Σ_k c_k/x_k ≤ Tmax − Σ_k τ_k,   0 < x_k ≤ r_k

with τ = s/b.  Under eq. (2) as printed (cost_model "per-epoch") an epoch
costs κ·nodes·x: f = 0, a = κ·nodes.  Under "resource-time" it costs
κ·nodes·x·T(k) = κ·nodes·(c + x·τ): the work part f = κ·nodes·c is paid
whatever x, and only the communication time held at rate x depends on it,
a = κ·nodes·τ.  Either way the KKT conditions give x_k = min(r_k, √(μ·c_k/a_k))
(an epoch with a = 0, no communication under resource-time, costs the same
at any x and runs at full speed); `_allocate` finds μ exactly by
water-filling (caps only ever get added).

The cluster of each epoch is chosen by Lagrangian relaxation of the deadline:
for a price λ of time, each epoch independently takes the cluster with the
least a·x + λ·(c/x + s/b).  The price is found by bisection, epochs of one
version are moved one at a time across the tie where the chosen cluster
changes, and every candidate assignment is solved exactly.  The Lagrangian
dual gives a lower bound on the optimum, so the plan reports its own
optimality gap ε (placement is within (1+ε) of the best placement of this
schedule; the gap is usually 0 to 1e-6).

Epochs of one version are interchangeable for cost and time, so everything
is computed per (version, cluster) group.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..plan import Epoch
from ..scenario import Scenario


class PlacementInfeasible(Exception):
    def __init__(self, min_time: float):
        super().__init__(f"the schedule needs at least {min_time:.6g} time units at full speed")
        self.min_time = min_time


@dataclass(frozen=True)
class Placement:
    epochs: list[Epoch]
    cost: float
    time: float
    gap: float  # certified: compute cost ≤ (1 + gap)·(best allocation on the chosen clusters)
    price: float  # μ, the marginal cost of time at the optimum


@dataclass(frozen=True)
class ClusterTable:
    """Per (version, cluster): c, r, τ = s/b and the cost f + a·x of an epoch — the data of eqs. (1)–(2)."""

    models: list[str]
    clusters: list[str]
    c: np.ndarray  # (M, N) compute per node per epoch
    a: np.ndarray  # (M, N) cost per unit of x of one epoch
    r: np.ndarray  # (N,)
    tau: np.ndarray  # (M, N)
    f: np.ndarray  # (M, N) cost of one epoch whatever x (0 under eq. 2 as printed)
    fixed: bool = False  # f ≠ 0 somewhere (resource-time); the hot paths skip it otherwise
    free: bool = False  # some a = 0: x costs nothing there (resource-time, s = 0)

    @classmethod
    def build(cls, s: Scenario, samples: float) -> "ClusterTable":
        w = np.array([m.work for m in s.models])
        size = np.array([m.size for m in s.models])
        nodes = np.array([n.nodes for n in s.clusters], dtype=float)
        c = np.outer(w, 1.0 / nodes) * samples
        tau = np.outer(size, 1.0 / np.array([n.bandwidth for n in s.clusters]))
        kappa = np.array([n.unit_cost for n in s.clusters]) * nodes
        if s.resource_time:  # κ·nodes·x·(c/x + τ) = κ·nodes·c + κ·nodes·τ·x
            a, f = kappa[None, :] * tau, kappa[None, :] * c
        else:
            a, f = np.ascontiguousarray(np.broadcast_to(kappa, c.shape)), np.zeros_like(c)
        return cls(models=[m.name for m in s.models], clusters=[n.name for n in s.clusters], c=c, a=a,
                   r=np.array([n.capacity for n in s.clusters]), tau=tau, f=f,
                   fixed=bool(f.any()), free=bool((a <= 0).any()))

    def speed(self, lam: float, c: np.ndarray, a: np.ndarray, r: np.ndarray) -> np.ndarray:
        """x minimising a·x + λ·c/x within (0, r]: full speed where x costs nothing (a = 0)."""
        if not self.free:
            return np.minimum(r, np.sqrt(lam * c / a))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(a > 0, np.minimum(r, np.sqrt(lam * c / a)), r)

    def full_speed_price(self) -> float:
        """A time price λ at which every epoch runs at full speed on every cluster."""
        top = float(np.max(self.a * self.r[None, :] ** 2 / self.c))
        return top if top > 0 else 1.0

    def min_time(self, cols: np.ndarray | None = None) -> np.ndarray:
        """Per version: the shortest epoch (full speed on the best cluster of `cols`)."""
        t = self.c / self.r + self.tau
        if cols is not None:
            t = t[:, cols]
        return t.min(axis=1)

    def lagrangian(self, lam: float, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per version and cluster of `cols` at time price λ: (value, time, x)."""
        c, tau = self.c[:, cols], self.tau[:, cols]
        a, r = self.a[:, cols], self.r[cols]
        x = self.speed(lam, c, a, r)
        t = c / x + tau
        value = a * x + lam * t
        return (value + self.f[:, cols] if self.fixed else value), t, x

    def epoch_weight(self, lam: float, cols: np.ndarray | None = None) -> np.ndarray:
        """Per version: the least Lagrangian cost a·x + λ·T of one epoch."""
        cols = np.arange(len(self.clusters)) if cols is None else cols
        return self.lagrangian(lam, cols)[0].min(axis=1)


def _allocate(q, c, a, r, budget):
    """Exact solution of min Σ q·a·x s.t. Σ q·c/x ≤ budget, x ≤ r (groups of q epochs).

    Returns (x, μ) or None if even x = r misses the budget.  Where a = 0 the
    cost does not depend on x: those groups run at full speed.
    """
    if budget <= 0 or float(np.sum(q * c / r)) > budget * (1 + 1e-12):
        return None
    capped = ~(a > 0)
    while True:
        free = ~capped
        rest = budget - float(np.sum(q[capped] * c[capped] / r[capped]))
        root_mu = float(np.sum(q[free] * np.sqrt(c[free] * a[free]))) / rest if rest > 0 else math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(capped, r, root_mu * np.sqrt(c / a))
        over = free & (x > r)
        if not over.any():
            return x, root_mu**2
        capped |= over


def _solve_assignment(table: ClusterTable, counts: dict[tuple[int, int], int], deadline: float):
    """Exact cost for counts per (version, cluster); None if infeasible."""
    keys = [k for k, q in counts.items() if q > 0]
    q = np.array([counts[k] for k in keys], dtype=float)
    mi = np.array([k[0] for k in keys])
    ni = np.array([k[1] for k in keys])
    c, a, r, tau = table.c[mi, ni], table.a[mi, ni], table.r[ni], table.tau[mi, ni]
    budget = deadline - float(np.sum(q * tau))
    sol = _allocate(q, c, a, r, budget)
    if sol is None:
        return None
    x, mu = sol
    cost = float(np.sum(q * a * x))
    if table.fixed:
        cost += float(np.sum(q * table.f[mi, ni]))
    return cost, dict(zip(keys, x)), mu, float(np.sum(q * (c / x + tau)))


def _place_on(table: ClusterTable, model_counts: np.ndarray, cols: np.ndarray, deadline: float):
    """Best assignment using the clusters `cols`; (cost, x per group, μ, time, dual bound)."""
    used = np.flatnonzero(model_counts)

    def choice(lam):
        val, t, _ = table.lagrangian(lam, cols)
        best = val.argmin(axis=1)
        time = float(np.sum(model_counts[used] * t[used, best[used]]))
        dual = float(np.sum(model_counts[used] * val[used, best[used]])) - lam * deadline
        return best, time, dual

    min_time = float(np.sum(model_counts * table.min_time(cols)))
    if min_time > deadline * (1 + 1e-12):
        raise PlacementInfeasible(min_time)
    lo, hi = 1e-12, 1.0
    while choice(hi)[1] > deadline and hi < 1e30:
        hi *= 4.0
    b_lo, b_hi = choice(lo)[0], choice(hi)[0]
    # Bisection on log λ, only as long as a version's best cluster differs
    # between the ends: where it does not, the exact allocation settles it.
    while (b_lo[used] != b_hi[used]).any() and hi / lo > 1 + 1e-10:
        mid = math.sqrt(lo * hi)
        best, t, _ = choice(mid)
        if t > deadline:
            lo, b_lo = mid, best
        else:
            hi, b_hi = mid, best
    base = {(int(m), int(cols[b_hi[m]])): int(model_counts[m]) for m in used}
    candidates = [base]
    # Across the tie: move epochs of a version one at a time to its cheaper cluster.
    for m in used:
        if b_lo[m] != b_hi[m]:
            for j in range(1, int(model_counts[m]) + 1):
                cnt = dict(base)
                cnt[(int(m), int(cols[b_hi[m]]))] -= j
                cnt[(int(m), int(cols[b_lo[m]]))] = cnt.get((int(m), int(cols[b_lo[m]])), 0) + j
                candidates.append(cnt)
    best_sol, best_counts = None, None
    for cnt in candidates:
        sol = _solve_assignment(table, cnt, deadline)
        if sol is not None and (best_sol is None or sol[0] < best_sol[0]):
            best_sol, best_counts = sol, cnt
    if best_sol is None:  # pragma: no cover - min_time ≤ deadline makes base feasible
        raise PlacementInfeasible(min_time)
    if table.fixed:
        best_sol, best_counts = _move_epochs(table, best_sol, best_counts, cols, deadline)
    cost, xs, mu, time = best_sol
    dual = max(choice(lam)[2] for lam in (lo, hi, mu))  # the Lagrangian dual bounds the optimum
    return cost, best_counts, xs, mu, time, dual


def _move_epochs(table: ClusterTable, sol, counts, cols, deadline: float, rounds: int = 50):
    """Local search over the assignment: move one epoch of a version to another cluster
    of `cols`, or exchange two epochs between two clusters, while that lowers the exact
    cost.  Under resource-time an epoch's fixed work cost differs by cluster, so the
    Lagrangian choice at one price can leave the epochs split wrongly (the cheapest
    plan may put one epoch of each of two versions on each of two clusters); per-epoch
    costs (f = 0) never call this."""
    cols = [int(n) for n in cols]

    def moved(cnt, m, a, b):
        cnt[(m, a)] -= 1
        cnt[(m, b)] = cnt.get((m, b), 0) + 1

    for _ in range(rounds):
        groups = [(m, n) for (m, n), q in counts.items() if q > 0]
        trials = []
        for m, n in groups:
            for n2 in cols:
                if n2 != n:
                    cnt = dict(counts)
                    moved(cnt, m, n, n2)
                    trials.append(cnt)
        for (m, n), (m2, n2) in itertools.combinations(groups, 2):
            if n != n2 and m != m2:
                cnt = dict(counts)
                moved(cnt, m, n, n2)
                moved(cnt, m2, n2, n)
                trials.append(cnt)
        improved = False
        for cnt in trials:
            trial = _solve_assignment(table, cnt, deadline)
            if trial is not None and trial[0] < sol[0] * (1 - 1e-12):
                sol, counts, improved = trial, cnt, True
                break
        if not improved:
            break
    return sol, counts


class _Groups:
    """Exact uncapacitated facility location with few customers: clusters are
    facilities (opening cost β), the versions of a schedule the customers.

    An optimal set of clusters serves each version from one cluster, so it has
    at most |M| members and is a partition of the versions into groups, each
    served by the cluster cheapest for it: g(S) = min_n β_n + Σ_{m∈S} v(m, n)
    for every group S (a (2^|M|, N) matrix product), then a DP over partitions
    (3^|M| steps) — whatever the number of clusters."""

    def __init__(self, n_versions: int):
        self.n = n_versions
        masks = np.arange(1, 2**n_versions)
        self.member = ((masks[:, None] >> np.arange(n_versions)) & 1).astype(float)  # (S, M)
        # the submasks of each mask that contain its lowest member (each partition once)
        self.splits = []
        for S in range(2**n_versions):
            low = S & -S
            subs, sub = [], S
            while sub:
                if sub & low:
                    subs.append(sub)
                sub = (sub - 1) & S
            self.splits.append(subs)

    def solve(self, v: np.ndarray, beta: np.ndarray) -> tuple[float, np.ndarray]:
        """(least Σ_m v[m, n_m] + Σ_{n used} β_n, the cluster n_m of every version)."""
        cost = self.member @ v + beta[None, :]  # (S, N)
        arg = cost.argmin(axis=1)
        g = np.concatenate([[0.0], cost[np.arange(arg.size), arg]])
        arg = np.concatenate([[-1], arg])
        full = 2**self.n - 1
        best, take = np.zeros(full + 1), np.zeros(full + 1, dtype=np.int64)
        for S in range(1, full + 1):
            vals = [g[sub] + best[S ^ sub] for sub in self.splits[S]]
            i = int(np.argmin(vals))
            best[S], take[S] = vals[i], self.splits[S][i]
        out, S = np.empty(self.n, dtype=np.int64), full
        while S:
            sub = int(take[S])
            out[(self.member[sub - 1] > 0)] = arg[sub]
            S ^= sub
        return float(best[full]), out


def _cluster_sets(table: ClusterTable, model_counts: np.ndarray, beta: np.ndarray, deadline: float):
    """Candidate sets of clusters when using a cluster costs β, and a lower bound on the
    placement over *every* choice of clusters.

    Lagrangian relaxation of the deadline: at a time price λ the best choice of
    clusters is a facility-location problem solved exactly (`_Groups`), so its
    value minus λ·Tmax bounds the optimum from below; λ is bisected to where the
    chosen plan's time crosses Tmax, and the clusters chosen on both sides of the
    crossing (and their union) are the candidates, placed exactly by `_place_on`.
    """
    used = np.flatnonzero(model_counts)
    q = model_counts[used][:, None]
    groups = _Groups(used.size)
    allc = np.arange(len(table.clusters))
    seen: dict[tuple, None] = {}
    bound = -math.inf

    def choice(lam):
        nonlocal bound
        val, t, _ = table.lagrangian(lam, allc)
        value, pick = groups.solve(q * val[used], beta)
        time = float(np.sum(q[:, 0] * t[used, pick]))
        bound = max(bound, value - lam * deadline)
        seen[tuple(sorted(set(pick.tolist())))] = None
        return tuple(pick.tolist()), time

    lo, hi = 1e-12, 1.0
    while choice(hi)[1] > deadline and hi < 1e30:
        hi *= 4.0
    p_lo, p_hi = choice(lo)[0], choice(hi)[0]
    # to the crossing itself, where the dual bound peaks (not only until the choices agree)
    while hi / lo > 1 + 1e-7:
        mid = math.sqrt(lo * hi)
        pick, t = choice(mid)
        if t > deadline:
            lo, p_lo = mid, pick
        else:
            hi, p_hi = mid, pick
    sets = [np.array(sorted(set(p_hi))), np.array(sorted(set(p_lo) | set(p_hi)))]
    sets += [np.array(u) for u in list(seen)[-8:]]  # the last choices of the bisection
    out, keys = [], set()
    for u in sets:
        if tuple(u) not in keys:
            keys.add(tuple(u))
            out.append(u)
    # Clusters worth trying in a local search if the candidates leave a gap: per
    # version, the few cheapest at the crossing price counting β as if it alone paid it.
    val = table.lagrangian(hi, allc)[0][used] * q + beta[None, :]
    pool = np.unique(np.argsort(val, axis=1)[:, :POOL].ravel())
    return out, bound, pool


POOL = 4  # clusters per version the local search may add or swap in


def place(s: Scenario, schedule: list[str], datasets: list[str], deadline: float | None = None,
          table: ClusterTable | None = None, first_epoch: int = 1) -> Placement:
    """Clusters and compute for `schedule` (its epochs numbered from `first_epoch`); raises PlacementInfeasible."""
    deadline = s.target.deadline if deadline is None else deadline
    table = table or ClusterTable.build(s, s.samples(datasets))
    idx = {m: i for i, m in enumerate(table.models)}
    model_counts = np.zeros(len(table.models))
    for m in schedule:
        model_counts[idx[m]] += 1
    N = len(table.clusters)
    beta = np.array([s.transfer_cost(datasets, n) for n in table.clusters])
    # The same counts per version come back often (the planners' searches and
    # polish): their placement is kept with the table; only the order differs.
    cache = table.__dict__.setdefault("_placed", {})
    key = (tuple(model_counts), float(deadline), tuple(beta))
    if key not in cache:
        if len(cache) > 50_000:
            cache.clear()
        try:
            cache[key] = _best_placement(table, model_counts, beta, deadline)
        except PlacementInfeasible as e:
            cache[key] = e
    best = cache[key]
    if isinstance(best, PlacementInfeasible):
        raise PlacementInfeasible(best.min_time)
    total, counts, xs, mu, time, gap, _ = best
    # Epochs of one version go to its clusters in order (fewest hand-offs).
    queue = {m: [] for m in range(len(table.models))}
    for (m, n), q in sorted(counts.items()):
        if q > 0:
            queue[m].extend([(n, xs[(m, n)])] * q)
    epochs = []
    for k, m in enumerate(schedule, start=first_epoch):
        n, x = queue[idx[m]].pop(0)
        epochs.append(Epoch(k, m, table.clusters[n], float(x)))
    return Placement(epochs, total, time, gap, mu)


def _best_placement(table: ClusterTable, model_counts: np.ndarray, beta: np.ndarray, deadline: float):
    N = len(table.clusters)
    best, min_time = None, math.inf

    def consider(cols, lb):
        nonlocal best, min_time
        try:
            cost, counts, xs, mu, time, dual = _place_on(table, model_counts, cols, deadline)
        except PlacementInfeasible as e:
            min_time = min(min_time, e.min_time)
            return
        used_clusters = sorted({n for (_, n), q in counts.items() if q > 0})
        total = cost + float(beta[used_clusters].sum())
        if best is None or total < best[0]:
            lb = dual if lb is None else lb
            best = (total, counts, xs, mu, time, max(0.0, total / lb - 1.0) if lb > 0 else 0.0, used_clusters)

    if not beta.any():
        consider(np.arange(N), None)
    else:
        subsets, bound, pool = _cluster_sets(table, model_counts, beta, deadline)
        for cols in subsets:
            consider(cols, bound)
        # Where the Lagrangian candidates leave a gap to the bound: local search over
        # sets of clusters (add, drop or swap one), each placed exactly.
        tried = {tuple(c) for c in subsets}
        improved = best is not None
        while improved and best[5] > 1e-6:
            improved, cur, before = False, set(best[6]), best[0]
            moves = [cur | {c} for c in pool if c not in cur] + [cur - {c} for c in cur if len(cur) > 1]
            moves += [(cur - {a}) | {b} for a in cur for b in pool if b not in cur]
            for u in moves:
                key = tuple(sorted(u))
                if key not in tried:
                    tried.add(key)
                    consider(np.array(key), bound)
            improved = best[0] < before * (1 - 1e-12)
    if best is None:
        raise PlacementInfeasible(min_time)
    return best
