"""optimal: exhaustive search with exact quantiles (the paper's brute force).

Every dataset choice; every schedule in which each version forms one run of
consecutive epochs and consecutive runs are allowed switches (with pruning
switches — a DAG — these are all schedules; with a cyclic switch graph a
version is not revisited); the exact placement of each (depl.planners.
placement); the certified ω-quantile of each by FFT.

It is made affordable, not approximate, by three exact facts:
* cost depends only on how many epochs each version runs, and grows with
  each of them (more work in the same deadline), so a branch is cut as soon
  as its cost reaches the best plan found (branch and bound);
* where the noise has positive support, one more epoch at the end lowers the
  loss on every path, so the shortest feasible last run is found by
  bisection;
* the lattice masses of every (version, epoch) term are computed once.
The search starts from DepL's plan as its first incumbent: a valid plan, so
the optimum found is never worse than it, and branches above its cost are
never opened.  Use it on paper-size instances (a handful of versions, tens of
epochs).
"""

from __future__ import annotations

import math
import time

from ..dist import sum_distribution
from ..loss import LossModel
from ..plan import Plan
from ..scenario import Scenario
from .common import Candidate, Context, Options, make_plan
from .datasets import ranked_subsets
from .depl import infeasible, search


def simple_paths(ctx: Context) -> list[list[int]]:
    """Sequences of distinct versions in which each step is an allowed switch."""
    M = len(ctx.loss.model_names)
    out: list[list[int]] = []

    def grow(path):
        out.append(list(path))
        for m in range(M):
            if m not in path and ctx.allowed[path[-1], m]:
                grow(path + [m])

    for m in range(M):
        grow([m])
    return out


class _Exhaustive:
    def __init__(self, ctx: Context, incumbent: Candidate | None):
        self.ctx = ctx
        self.best = incumbent
        self.names = ctx.loss.model_names
        self.tmin = ctx.tmin
        self.monotone = ctx.loss.progress_is_monotone()
        self._costs: dict[tuple, float] = {}
        self._pmf_cache: dict = {}
        sigma = incumbent.dist.std() if incumbent is not None else 0.1
        k = len(incumbent.schedule) if incumbent is not None else ctx.max_epochs
        # A coarse lattice decides most schedules; the planners' own lattice the rest.
        self.h = 0.1 * max(sigma, 1e-6) / max(k, 1)
        self.evaluated = 0

    def cost(self, counts: tuple[int, ...]) -> float:
        c = self._costs.get(counts)
        if c is None:
            sched = [self.names[m] for m, n in enumerate(counts) for _ in range(n)]
            p = self.ctx.place(sched)
            c = math.inf if p is None else p.cost
            self._costs[counts] = c
        return c

    def bound(self) -> float:
        return math.inf if self.best is None else self.best.cost * (1 - 1e-12)

    def quantile(self, schedule: list[str]):
        """(certified upper bound of the ω-quantile, distribution), decided exactly:
        a coarse lattice's bracket settles the question unless it straddles ℓmax."""
        self.evaluated += 1
        d = sum_distribution(self.ctx.loss.terms(schedule, self.ctx.phi), h=self.h, cache=self._pmf_cache)
        lo, hi = d.quantile_bounds(self.ctx.omega)
        if hi <= self.ctx.target or lo > self.ctx.target:
            return hi, d
        q, fine = self.ctx.certify(schedule)
        return (q, fine) if q <= hi else (hi, d)

    def counts_of(self, path, lengths) -> tuple[int, ...]:
        c = [0] * len(self.names)
        for m, n in zip(path, lengths):
            c[m] += n
        return tuple(c)

    def schedule(self, path, lengths) -> list[str]:
        return [self.names[m] for m, n in zip(path, lengths) for _ in range(n)]

    def feasible_time(self, path, lengths) -> bool:
        return sum(self.tmin[m] * n for m, n in zip(path, lengths)) <= self.ctx.deadline * (1 + 1e-12)

    def run(self) -> None:
        for path in simple_paths(self.ctx):
            self._prefix(path, [])

    def _prefix(self, path, lengths) -> None:
        K = sum(lengths)
        if len(lengths) == len(path) - 1:
            self._last(path, lengths)
            return
        n = 1
        while K + n + (len(path) - len(lengths) - 1) <= self.ctx.max_epochs:
            trial = lengths + [n] + [1] * (len(path) - len(lengths) - 1)
            if not self.feasible_time(path, trial) or self.cost(self.counts_of(path, trial)) >= self.bound():
                break  # longer runs here only cost more
            self._prefix(path, lengths + [n])
            n += 1

    def _last(self, path, lengths) -> None:
        K0 = sum(lengths)
        # The longest last run still cheaper than the incumbent and within the deadline.
        hi = 0
        while K0 + hi + 1 <= self.ctx.max_epochs:
            trial = lengths + [hi + 1]
            if not self.feasible_time(path, trial) or self.cost(self.counts_of(path, trial)) >= self.bound():
                break
            hi += 1
        if hi == 0:
            return
        if self.monotone:
            q, d = self.quantile(self.schedule(path, lengths + [hi]))
            if q > self.ctx.target:
                return  # even the longest affordable last run misses the target
            lo = 0  # lengths in (lo, hi]: hi works, lo does not (0 = no run)
            best_d = (hi, d, q)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                q, d = self.quantile(self.schedule(path, lengths + [mid]))
                if q <= self.ctx.target:
                    hi, best_d = mid, (mid, d, q)
                else:
                    lo = mid
            self._accept(path, lengths + [best_d[0]], best_d[2], best_d[1])
        else:
            for n in range(1, hi + 1):
                q, d = self.quantile(self.schedule(path, lengths + [n]))
                if q <= self.ctx.target:
                    self._accept(path, lengths + [n], q, d)
                    return

    def _accept(self, path, lengths, q, d) -> None:
        sched = self.schedule(path, lengths)
        p = self.ctx.place(sched)
        if p is not None and (self.best is None or p.cost < self.best.cost):
            self.best = Candidate(sched, q, p, d)


def plan_optimal(s: Scenario, options: Options | None = None, loss: LossModel | None = None) -> Plan:
    options = options or Options()
    t0 = time.perf_counter()
    best: tuple[Candidate, Context] | None = None
    evaluated = 0
    for datasets in ranked_subsets(s, loss):
        ctx = Context(s, list(datasets), loss=loss, options=options)
        ex = _Exhaustive(ctx, search(ctx))  # DepL's plan: a valid first bound
        if best is not None and (ex.best is None or best[0].cost < ex.best.cost):
            ex.best = best[0]  # the best of earlier dataset choices bounds this one too
        ex.run()
        evaluated += ex.evaluated
        if ex.best is not None and (best is None or ex.best.cost < best[0].cost):
            best = (ex.best, ctx)
    if best is None:
        raise infeasible(s, options, loss)
    cand, ctx = best
    # Re-certify with the default lattice, the same as the other planners.
    q, d = ctx.certify(cand.schedule)
    if q <= cand.quantile:  # both are valid upper bounds: report the tighter
        cand = Candidate(cand.schedule, q, cand.placement, d)
    return make_plan("optimal", s, ctx, cand, t0, quantiles_evaluated=evaluated)


__all__ = ["plan_optimal", "simple_paths"]
