"""Stage 2: the model version of every epoch, on the expanded graph.

Vertices are (m, k, i, j): version m trained at epoch k, elapsed time in bin
i (of Tmax/η) and loss in bin j (of the loss range/η) — the paper's Sec. IV-B.
An edge goes from epoch k to k+1 when the switch is allowed; it adds the
epoch's shortest time (full speed on its best cluster, eq. 1) and the epoch's
change of the loss *in the transformed domain*; its weight is the epoch's
cost.  A virtual sink Ω is reached from every vertex whose time ≤ Tmax and
whose loss bound ≤ the target.

The transformed domain.  The quantile of a sum is not a sum, but cumulants
are: the cumulant generating function (the log of the Laplace/characteristic
transform) of a sum of independent draws is the sum of theirs.  Around a
reference spread σ0 the Cornish–Fisher quantile κ1 + σ·(z + (z²−1)·γ/6) is
bounded above by its tangent in κ2,

    q_ω ≲ κ1 + (z/2σ0)·κ2 + ((z²−1)/6σ0²)·κ3 + z·σ0/2,

which is additive along a path (`Surrogate`).  The caller (depl.py) sets σ0 to
the spread of the current schedule and corrects the remaining bias with the
exact distribution (FFT) of the schedule found, so the graph only has to
*rank* schedules; the plan is certified with the exact law.

Edge weights.  A plan's cost depends on the time each epoch is given; at a
price λ of time the least cost of an epoch, a·x + λ·(c/x + s/b), is additive
(`ClusterTable.epoch_weight`); depl.py sets λ to the marginal cost of time of
the current plan's exact placement.

The search.  Every edge goes from layer k to k+1, so the lowest-cost path is a
recursion over layers: each layer is |M|² shifted element-wise minima of
(η+1)² arrays — O(K·|M|²·η²) in all, against O(V²) = O(|M|²K²η⁴) for
Dijkstra on the same graph.  Each cell also carries the exact time and loss of
its best path (labels), so rounding never makes an infeasible path look
feasible.  `expanded_graph_edges` lists the same graph for networkx
(benchmarks and tests compare the two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ..families import norm_ppf

J0 = 3  # loss bins kept below the target bin, so labels can decide


@dataclass(frozen=True)
class Surrogate:
    """The additive loss bound: u = κ1 + c2·κ2 + c3·κ3 per step, plus `const`."""

    c2: float
    c3: float
    const: float

    @classmethod
    def for_quantile(cls, omega: float, sigma0: float) -> "Surrogate":
        z = float(norm_ppf(omega))
        sigma0 = max(sigma0, 1e-9)
        return cls(z / (2 * sigma0), (z * z - 1) / (6 * sigma0**2), z * sigma0 / 2)

    @classmethod
    def expectation(cls) -> "Surrogate":
        """The expected loss only (best-exp)."""
        return cls(0.0, 0.0, 0.0)

    def __call__(self, cum: np.ndarray) -> np.ndarray:
        return cum[..., 0] + self.c2 * cum[..., 1] + self.c3 * cum[..., 2]


def cornish_fisher(l0: float, cum: np.ndarray, omega: float) -> tuple[np.ndarray, np.ndarray]:
    """(ω-quantile, σ) of ℓ(0) plus a sum with cumulants `cum[..., 0:3]` (Cornish–Fisher)."""
    z = float(norm_ppf(omega))
    sigma = np.sqrt(np.maximum(cum[..., 1], 0.0))
    skew = np.divide(cum[..., 2], sigma**3, out=np.zeros_like(sigma), where=sigma > 0)
    return l0 + cum[..., 0] + sigma * (z + (z * z - 1) * skew / 6), sigma


@dataclass(frozen=True)
class GraphSpec:
    """Everything the search needs, as arrays (M versions, K epochs at most)."""

    models: list[str]
    l0: float
    du_epoch: np.ndarray  # (M, K) surrogate change of epoch k per version
    du_switch: np.ndarray  # (M, M) surrogate change of a switch a→b (0 on the diagonal)
    allowed: np.ndarray  # (M, M) bool, diagonal True
    weight: np.ndarray  # (M,) cost of one epoch
    tmin: np.ndarray  # (M,) shortest time of one epoch
    deadline: float
    target: float  # a path is feasible when l0 + Σ u ≤ target
    eta: int
    allowed_start: np.ndarray | None = None  # (M,) bool
    # (K,) a bound per path length instead (a law calibrated per epoch: depl.planners.common.
    # Context.levels): a path of k epochs is feasible when l0 + Σ u ≤ targets[k-1] (-inf: never)
    targets: np.ndarray | None = None

    @property
    def K(self) -> int:
        return self.du_epoch.shape[1]

    @property
    def floor(self) -> float:
        """The loss the bins are counted from: the target, or the lowest finite per-length target
        (no path that is not yet feasible lies below it)."""
        if self.targets is None:
            return self.target
        finite = self.targets[np.isfinite(self.targets)]
        return float(finite.min()) if finite.size else -math.inf

    def target_at(self, k: int) -> float:
        """The bound a path of k epochs must meet."""
        return self.target if self.targets is None else float(self.targets[k - 1])

    def terminal_bin(self, k: int, bu: float) -> int:
        """The highest loss bin from which a path of k epochs reaches the sink (binned graph)."""
        if self.targets is None:
            return J0
        t = self.target_at(k)
        return J0 + int(math.floor((t - self.floor) / bu + 0.5)) if math.isfinite(t) else -1

    def bins(self) -> tuple[float, float, np.ndarray]:
        bt = self.deadline / self.eta
        top = self.l0 + 2.0 * max(0.0, float(np.max(self.du_switch)))
        bu = max(top - self.floor, 1e-12) / self.eta
        di = np.rint(self.tmin / bt).astype(np.int64)
        return bt, bu, di

    def dj(self, k: int, p: int, m: int, bu: float) -> int:
        """Loss-bin shift of the edge into version m at epoch k (1-based) from version p."""
        du = self.du_epoch[m, k - 1] + (self.du_switch[p, m] if p != m else 0.0)
        return int(np.rint(du / bu))


@dataclass(frozen=True)
class Path:
    schedule: list[str]
    cost: float
    u: float  # exact surrogate bound of the path
    time: float  # exact shortest time of the path


def lowest_cost_path(spec: GraphSpec, *, labels: bool = True) -> Path | None:
    """The cheapest feasible path through the expanded graph, or None.

    With `labels=False` feasibility is judged on the bins alone — the plain
    expanded graph of the paper, which `expanded_graph_edges` also lists.
    """
    M, K, eta = len(spec.models), spec.K, spec.eta
    if not math.isfinite(spec.target) or not math.isfinite(spec.floor):
        return None  # e.g. a bias correction from a schedule the law cannot certify (inf)
    bt, bu, di = spec.bins()
    floor = spec.floor
    n_i, n_j = eta + 1, eta + 1 + J0
    starts = spec.allowed_start if spec.allowed_start is not None else np.ones(M, bool)

    # Each layer's cells live in a small window of the (n_i, n_j) grid (a thin band):
    # arrays cover only that window, whose top-left global bin is (R, C).
    V = np.full((M, n_i, n_j), np.inf)
    T = np.zeros((M, n_i, n_j))
    U = np.zeros((M, n_i, n_j))
    R = C = 0
    back: list[tuple[np.ndarray, int, int]] = []  # per layer: predecessor version (int8) and its window's origin
    best = (math.inf, None)  # (cost, (k, m, i, j, pred))

    def is_terminal(k, t, u, i, j):
        target = spec.target_at(k)
        if labels:
            return (u <= target) & (t <= spec.deadline)
        return (j <= spec.terminal_bin(k, bu)) & (i <= eta)

    # Layer 1: one vertex per starting version.
    for m in np.flatnonzero(starts):
        t, u = float(spec.tmin[m]), spec.l0 + float(spec.du_epoch[m, 0])
        i, j = int(di[m]), int(np.rint((u - floor) / bu)) + J0
        if is_terminal(1, np.float64(t), np.float64(u), i, j):
            if spec.weight[m] < best[0]:
                best = (float(spec.weight[m]), (1, int(m), i, j, -1))
        elif 0 <= i < n_i and 0 <= j < n_j and (t <= spec.deadline or not labels):
            V[m, i, j], T[m, i, j], U[m, i, j] = spec.weight[m], t, u
    back.append((np.full((M, n_i, n_j), -1, dtype=np.int8), 0, 0))
    rows = np.arange(n_i)[:, None]
    cols = np.arange(n_j)[None, :]
    allowed_pairs = [(m, p) for m in range(M) for p in range(M) if spec.allowed[p, m]]
    sources = [np.flatnonzero(spec.allowed[:, m]) for m in range(M)]  # predecessors of each version

    for k in range(2, K + 1):
        finite = np.isfinite(V)
        if not finite.any() or V[finite].min() + spec.weight.min() >= best[0]:
            break  # every extension costs more than the best plan found
        # Only the bounding box of the live cells is worked on (global bins r0:r1, c0:c1).
        live_rows = np.flatnonzero(finite.any(axis=(0, 2)))
        live_cols = np.flatnonzero(finite.any(axis=(0, 1)))
        r0, r1 = R + int(live_rows[0]), R + int(live_rows[-1]) + 1
        c0, c1 = C + int(live_cols[0]), C + int(live_cols[-1]) + 1
        box = (slice(r0 - R, r1 - R), slice(c0 - C, c1 - C))
        shifts = {(m, p): spec.dj(k, p, m, bu) for m, p in allowed_pairs}
        NR0, NR1 = max(0, r0 + int(di.min())), min(n_i, r1 + int(di.max()))
        NC0, NC1 = max(0, c0 + min(shifts.values())), min(n_j, c1 + max(shifts.values()))
        shape = (M, max(NR1 - NR0, 0), max(NC1 - NC0, 0))
        nV = np.full(shape, np.inf)
        nT = np.zeros(shape)
        nU = np.zeros(shape)
        bp = np.full(shape, -1, dtype=np.int8)
        # Per version m, the edges from every allowed predecessor p at once: the row
        # shift is m's, the column shift the (p, m) edge's.
        for m in range(M):
            ps = sources[m]
            if not ps.size:
                continue
            dj = np.array([shifts[m, int(p)] for p in ps])
            cand = V[ps][(slice(None), *box)] + spec.weight[m]
            live = np.isfinite(cand)
            if not live.any():
                continue
            t = T[ps][(slice(None), *box)] + spec.tmin[m]
            du = spec.du_epoch[m, k - 1] + np.where(ps != m, spec.du_switch[ps, m], 0.0)
            u = U[ps][(slice(None), *box)] + du[:, None, None]
            # Terminals may land anywhere (a big drop goes below the grid).
            term = is_terminal(k, t, u, (rows[r0:r1] + di[m])[None], cols[:, c0:c1][None] + dj[:, None, None]) & live
            if term.any():
                c = np.where(term, cand, np.inf)
                flat = int(np.argmin(c))
                if c.flat[flat] < best[0]:
                    q, a, b = np.unravel_index(flat, c.shape)
                    best = (float(c.flat[flat]), (k, m, int(r0 + a + di[m]), int(c0 + b + dj[q]), int(ps[q])))
            dr0, dr1 = max(0, r0 + int(di[m])), min(n_i, r1 + int(di[m]))
            if dr1 <= dr0:
                continue
            keep = ~term & live
            if labels:
                keep &= t <= spec.deadline
            c = np.where(keep, cand, np.inf)
            sV = np.full((ps.size, *shape[1:]), np.inf)
            sT, sU = np.zeros_like(sV), np.zeros_like(sV)
            rs = slice(dr0 - int(di[m]) - r0, dr1 - int(di[m]) - r0)
            rd = slice(dr0 - NR0, dr1 - NR0)
            for q in range(ps.size):
                dc0, dc1 = max(0, c0 + int(dj[q])), min(n_j, c1 + int(dj[q]))
                if dc1 <= dc0:
                    continue
                cs, cd = slice(dc0 - int(dj[q]) - c0, dc1 - int(dj[q]) - c0), slice(dc0 - NC0, dc1 - NC0)
                sV[q, rd, cd], sT[q, rd, cd], sU[q, rd, cd] = c[q, rs, cs], t[q, rs, cs], u[q, rs, cs]
            q = np.argmin(sV, axis=0)[None]  # ties: the first predecessor, as edge by edge with a strict <
            nV[m] = np.take_along_axis(sV, q, 0)[0]
            nT[m] = np.take_along_axis(sT, q, 0)[0]
            nU[m] = np.take_along_axis(sU, q, 0)[0]
            bp[m] = np.where(np.isfinite(nV[m]), ps[q[0]], -1)
        V, T, U, R, C = nV, nT, nU, NR0, NC0
        back.append((bp, NR0, NC0))
        if not V.size:
            break

    if best[1] is None:
        return None
    cost, (k, m, i, j, p) = best
    sched = [m]
    # Walk back: the terminal's predecessor, then the stored back-pointers.
    while k > 1:
        i -= int(di[m])
        j -= spec.dj(k, p, m, bu)
        k -= 1
        m = p
        sched.append(m)
        if k > 1:
            bp, r, c = back[k - 1]
            p = int(bp[m, i - r, j - c])
        else:
            p = -1
    sched.reverse()
    names = [spec.models[x] for x in sched]
    u = spec.l0 + sum(spec.du_epoch[x, e] for e, x in enumerate(sched))
    u += sum(spec.du_switch[a, b] for a, b in zip(sched, sched[1:]) if a != b)
    return Path(names, cost, float(u), float(sum(spec.tmin[x] for x in sched)))


def expanded_graph_edges(spec: GraphSpec, *, full: bool = False):
    """Yield (source, target, weight) of the expanded graph, for networkx.

    Vertices are ("s",), (m, k, i, j) and ("Ω",), binned as in
    `lowest_cost_path(spec, labels=False)`.  By default only the vertices
    reachable from the source are listed; `full=True` lists every vertex of
    the |M|·K·η² grid, as the paper's complexity bound counts them.
    """
    M, K, eta = len(spec.models), spec.K, spec.eta
    _, bu, di = spec.bins()
    n_i, n_j = eta + 1, eta + 1 + J0
    starts = spec.allowed_start if spec.allowed_start is not None else np.ones(M, bool)

    def out_edges(v):
        p, k, i, j = v
        if j <= spec.terminal_bin(k, bu) and i <= eta:
            yield v, ("Ω",), 0.0
            return
        if k == K:
            return
        for m in range(M):
            if spec.allowed[p, m]:
                w = (m, k + 1, i + int(di[m]), j + spec.dj(k + 1, p, m, bu))
                # below the grid only as a terminal (always, with one target; per length, not where
                # that length's target is lower), as the recursion keeps them
                if 0 <= w[2] < n_i and w[3] < n_j and (w[3] >= 0 or w[3] <= spec.terminal_bin(k + 1, bu)):
                    yield v, w, float(spec.weight[m])

    first = []
    for m in np.flatnonzero(starts):
        u = spec.l0 + float(spec.du_epoch[m, 0])
        v = (int(m), 1, int(di[m]), int(np.rint((u - spec.floor) / bu)) + J0)
        yield ("s",), v, float(spec.weight[m])
        first.append(v)
    if full:
        for v in first:
            if not (0 <= v[2] < n_i and 0 <= v[3] < n_j):
                yield from out_edges(v)
        for m in range(M):
            for k in range(1, K + 1):
                for i in range(n_i):
                    for j in range(n_j):
                        yield from out_edges((m, k, i, j))
        return
    frontier = set(first)
    while frontier:
        nxt = set()
        for v in frontier:
            for e in out_edges(v):
                yield e
                if e[1] != ("Ω",):
                    nxt.add(e[1])
        frontier = nxt
