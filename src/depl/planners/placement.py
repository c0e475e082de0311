"""Stage 3: the cluster and the compute of every epoch, for a fixed schedule.

For a fixed assignment of epochs to clusters the problem is convex:

    min Σ_k a_k·x_k   s.t.  Σ_k c_k/x_k ≤ Tmax − Σ_k s_k/b_k,   0 < x_k ≤ r_k

with a = κ·nodes.  Its KKT conditions give x_k = min(r_k, √(μ·c_k/a_k));
`_allocate` finds μ exactly by water-filling (caps only ever get added).

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
    """Per (version, cluster): c, a = κ·nodes, r, τ = s/b — the data of eq. (1)–(2)."""

    models: list[str]
    clusters: list[str]
    c: np.ndarray  # (M, N) compute per node per epoch
    a: np.ndarray  # (N,)
    r: np.ndarray  # (N,)
    tau: np.ndarray  # (M, N)

    @classmethod
    def build(cls, s: Scenario, samples: float) -> "ClusterTable":
        w = np.array([m.work for m in s.models])
        size = np.array([m.size for m in s.models])
        nodes = np.array([n.nodes for n in s.clusters], dtype=float)
        return cls(
            models=[m.name for m in s.models],
            clusters=[n.name for n in s.clusters],
            c=np.outer(w, 1.0 / nodes) * samples,
            a=np.array([n.unit_cost for n in s.clusters]) * nodes,
            r=np.array([n.capacity for n in s.clusters]),
            tau=np.outer(size, 1.0 / np.array([n.bandwidth for n in s.clusters])),
        )

    def min_time(self, cols: np.ndarray | None = None) -> np.ndarray:
        """Per version: the shortest epoch (full speed on the best cluster of `cols`)."""
        t = self.c / self.r + self.tau
        if cols is not None:
            t = t[:, cols]
        return t.min(axis=1)

    def lagrangian(self, lam: float, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per version and cluster of `cols` at time price λ: (value, time, x)."""
        c, tau = self.c[:, cols], self.tau[:, cols]
        a, r = self.a[cols], self.r[cols]
        x = np.minimum(r, np.sqrt(lam * c / a))
        t = c / x + tau
        return a * x + lam * t, t, x

    def epoch_weight(self, lam: float, cols: np.ndarray | None = None) -> np.ndarray:
        """Per version: the least Lagrangian cost a·x + λ·T of one epoch."""
        cols = np.arange(len(self.clusters)) if cols is None else cols
        return self.lagrangian(lam, cols)[0].min(axis=1)


def _allocate(q, c, a, r, budget):
    """Exact solution of min Σ q·a·x s.t. Σ q·c/x ≤ budget, x ≤ r (groups of q epochs).

    Returns (x, μ) or None if even x = r misses the budget.
    """
    if budget <= 0 or float(np.sum(q * c / r)) > budget * (1 + 1e-12):
        return None
    capped = np.zeros(q.size, dtype=bool)
    while True:
        free = ~capped
        rest = budget - float(np.sum(q[capped] * c[capped] / r[capped]))
        root_mu = float(np.sum(q[free] * np.sqrt(c[free] * a[free]))) / rest if rest > 0 else math.inf
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
    c, a, r, tau = table.c[mi, ni], table.a[ni], table.r[ni], table.tau[mi, ni]
    budget = deadline - float(np.sum(q * tau))
    sol = _allocate(q, c, a, r, budget)
    if sol is None:
        return None
    x, mu = sol
    return float(np.sum(q * a * x)), dict(zip(keys, x)), mu, float(np.sum(q * (c / x + tau)))


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
    cost, xs, mu, time = best_sol
    dual = max(choice(lam)[2] for lam in (lo, hi, mu))  # the Lagrangian dual bounds the optimum
    return cost, best_counts, xs, mu, time, dual


def place(s: Scenario, schedule: list[str], datasets: list[str], deadline: float | None = None,
          table: ClusterTable | None = None) -> Placement:
    """Clusters and compute for `schedule`; raises PlacementInfeasible."""
    deadline = s.target.deadline if deadline is None else deadline
    table = table or ClusterTable.build(s, s.samples(datasets))
    idx = {m: i for i, m in enumerate(table.models)}
    model_counts = np.zeros(len(table.models))
    for m in schedule:
        model_counts[idx[m]] += 1
    N = len(table.clusters)
    beta = np.array([s.transfer_cost(datasets, n) for n in table.clusters])
    if not beta.any():
        subsets = [np.arange(N)]
    elif N <= 10:
        subsets = [np.array(c) for r in range(1, N + 1) for c in itertools.combinations(range(N), r)]
    else:  # pragma: no cover - large cluster sets: the cheapest-β half and all
        order = np.argsort(beta)
        subsets = [order[: max(1, N // 2)], np.arange(N)]
    best, min_time = None, math.inf
    for cols in subsets:
        try:
            cost, counts, xs, mu, time, dual = _place_on(table, model_counts, cols, deadline)
        except PlacementInfeasible as e:
            min_time = min(min_time, e.min_time)
            continue
        used_clusters = sorted({n for (_, n), q in counts.items() if q > 0})
        total = cost + float(beta[used_clusters].sum())
        if best is None or total < best[0]:
            best = (total, counts, xs, mu, time, max(0.0, cost / dual - 1.0) if dual > 0 else 0.0)
    if best is None:
        raise PlacementInfeasible(min_time)
    total, counts, xs, mu, time, gap = best
    # Epochs of one version go to its clusters in order (fewest hand-offs).
    queue = {m: [] for m in range(len(table.models))}
    for (m, n), q in sorted(counts.items()):
        if q > 0:
                queue[m].extend([(n, xs[(m, n)])] * q)
    epochs = []
    for k, m in enumerate(schedule, start=1):
        n, x = queue[idx[m]].pop(0)
        epochs.append(Epoch(k, m, table.clusters[n], float(x)))
    return Placement(epochs, total, time, gap, mu)
