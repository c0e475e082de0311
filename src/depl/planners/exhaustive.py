"""Exhaustive search over schedules made of runs of versions, with exact quantiles.

Used by `optimal` over every path of versions, and by DepL's polish over a
window around its own plan.  Exact, not approximate, thanks to three facts:

* cost depends only on how many epochs each version runs, and grows with
  each of them (more work in the same deadline), so a branch is cut as soon
  as an admissible lower bound of its cost (the Lagrangian dual of the
  placement, depl.planners.bounds.CostBound) reaches the best plan found
  (branch and bound); the exact placement is solved only for the plans found;
* under the increments law Cantelli's inequality (depl.planners.bounds)
  rules out last runs too short for the target from the mean and variance
  alone, before any convolution;
* where the noise has positive support, one more epoch at the end lowers the
  loss on every path, so the shortest feasible last run is found by
  bisection — unless the law is calibrated per epoch with levels that rise
  with K somewhere (`Context.quantile_monotone`): a longer run may then be
  certified less well than a shorter one, and every length is tried in turn;
* coarse lattices decide most schedules (their certified bracket already
  lies on one side of ℓmax); the planners' own lattice decides the rest, and
  the lattice masses of every (version, epoch) term are computed once.

`stop_at` (a time.perf_counter() value) makes `run` raise `TimeUp` when
reached; `tick` is called about once a second with the search's state.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from .common import Candidate, Context
from .bounds import CostBound, cantelli_factor


class TimeUp(Exception):
    """The time limit was reached; the incumbent stands."""


def cost_bound(ctx: Context):
    """The context's admissible cost bound, built once."""
    cb = ctx.__dict__.get("_cost_bound")
    if cb is None:
        cb = ctx.__dict__["_cost_bound"] = CostBound(ctx)
    return cb


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
        if ctx.first_allowed is None or ctx.first_allowed[m]:  # a started run goes on from its last version
            grow([m])
    return out


class Exhaustive:
    """Branch and bound over run lengths along `paths` (default: every simple path).

    `windows` optionally bounds the run lengths: {path index: [(lo, hi) per run but the last]}.
    """

    def __init__(self, ctx: Context, incumbent: Candidate | None, paths: list[list[int]] | None = None,
                 windows: dict[int, list[tuple[int, int]]] | None = None, *, stop_at: float | None = None,
                 tick: Callable[["Exhaustive"], None] | None = None):
        self.paths = simple_paths(ctx) if paths is None else paths
        self.windows = windows or {}
        self.ctx = ctx
        self.best = incumbent
        self.names = ctx.loss.model_names
        self.tmin = ctx.tmin
        self.monotone = ctx.quantile_monotone  # (not with per-epoch calibration levels that rise with K)
        self._costs: dict[tuple, float] = {}
        self._pmf_cache: dict = {}
        # A coarse lattice decides most schedules; the planners' own lattice the rest.
        # Its step is 10% of the spread of the incumbent (or of the first schedule seen).
        self.h = None if incumbent is None else self._coarse_step(incumbent.schedule)
        self.evaluated = 0
        self.lower = cost_bound(ctx)
        self.stop_at, self.tick, self._next_tick = stop_at, tick, time.perf_counter() + 1.0
        self.moments = _Moments(ctx) if ctx.moments_exact else None

    def _check(self) -> None:
        now = time.perf_counter()
        if self.stop_at is not None and now >= self.stop_at:
            raise TimeUp
        if self.tick is not None and now >= self._next_tick:
            self._next_tick = now + 1.0
            self.tick(self)

    def _coarse_step(self, schedule: list[str]) -> float:
        sigma = self.ctx.cornish_fisher(schedule)[1]
        return 0.1 * max(sigma, 1e-6) / max(len(schedule), 1)

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
        if self.h is None:
            self.h = self._coarse_step(schedule)
        # A schedule far noisier than the one the step was set by would get a lattice of
        # millions of points: coarsen by powers of 2 (cached term masses stay reusable).
        h = self.h * 2.0 ** max(0, math.floor(math.log2(self._coarse_step(schedule) / self.h)))
        best = None
        for h in (10 * h, h):  # a 10× coarser lattice first: most schedules are far from ℓmax
            d = self.ctx.distribution(schedule, h=h, cache=self._pmf_cache)
            lo, hi = d.quantile_bounds(self.ctx.omega)
            if hi <= self.ctx.target or lo > self.ctx.target:
                return hi, d
            best = (hi, d) if best is None or hi < best[0] else best
        q, fine = self.ctx.certify(schedule)
        return (q, fine) if q <= best[0] else best

    def counts_of(self, path, lengths) -> tuple[int, ...]:
        c = [0] * len(self.names)
        for m, n in zip(path, lengths):
            c[m] += n
        return tuple(c)

    def schedule(self, path, lengths) -> list[str]:
        return [self.names[m] for m, n in zip(path, lengths) for _ in range(n)]

    def feasible_time(self, path, lengths) -> bool:
        return sum(self.tmin[m] * n for m, n in zip(path, lengths)) <= self.ctx.deadline * (1 + 1e-12)

    def run(self) -> Candidate | None:
        for i, path in enumerate(self.paths):
            self._window = self.windows.get(i)
            self._prefix(path, [])
        return self.best

    def _prefix(self, path, lengths) -> None:
        K = sum(lengths)
        if len(lengths) == len(path) - 1:
            self._last(path, lengths)
            return
        n, top = 1, math.inf
        if self._window is not None:
            n, top = self._window[len(lengths)]
            n = max(n, 1)
        while n <= top and K + n + (len(path) - len(lengths) - 1) <= self.ctx.max_epochs:
            self._check()
            trial = lengths + [n] + [1] * (len(path) - len(lengths) - 1)
            if not self.feasible_time(path, trial) or self.lower(self.counts_of(path, trial)) >= self.bound():
                break  # longer runs here only cost more
            self._prefix(path, lengths + [n])
            n += 1

    def _last(self, path, lengths) -> None:
        K0 = sum(lengths)
        self._check()

        def affordable(n: int) -> bool:
            trial = lengths + [n]
            return (K0 + n <= self.ctx.max_epochs and self.feasible_time(path, trial)
                    and self.lower(self.counts_of(path, trial)) < self.bound())

        # The longest last run still cheaper than the incumbent and within the
        # deadline: time and cost grow with the run, so gallop, then bisect.
        if not affordable(1):
            return
        hi, step = 1, 1
        while affordable(hi + step):
            hi, step = hi + step, step * 2
        top = hi + step  # not affordable
        while top - hi > 1:
            mid = (hi + top) // 2
            hi, top = (mid, top) if affordable(mid) else (hi, mid)
        # Last runs Cantelli's bound rules out (too short for the target's mean and spread).
        possible = np.ones(hi, dtype=bool) if self.moments is None else self.moments.possible(path, lengths, hi)
        if not possible.any():
            return
        if self.monotone:
            q, d = self.quantile(self.schedule(path, lengths + [hi]))
            if q > self.ctx.target:
                return  # even the longest affordable last run misses the target
            lo = int(np.argmax(possible))  # lengths in (lo, hi]: hi works, lo does not (0 = no run)
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
            for n in np.flatnonzero(possible) + 1:
                n = int(n)
                q, d = self.quantile(self.schedule(path, lengths + [n]))
                if q <= self.ctx.target:
                    self._accept(path, lengths + [n], q, d)
                    return

    def _accept(self, path, lengths, q, d) -> None:
        if not self.ctx.physical(d, q):  # a law predicting a negative loss certifies nothing (planfast)
            return
        sched = self.schedule(path, lengths)
        p = self.ctx.place(sched)
        if p is not None and (self.best is None or p.cost < self.best.cost):
            self.best = Candidate(sched, q, p, d)




class _Moments:
    """Mean and variance of ℓ(K) along run-structured schedules, from the
    additive cumulants of the increments law, for Cantelli's bound."""

    def __init__(self, ctx: Context):
        cum = ctx.epoch_cumulants
        self.c = np.concatenate([np.zeros((cum.shape[0], 1, 2)), np.cumsum(cum[:, :, :2], axis=1)], axis=1)
        self.sw = ctx.switch_cumulants[:, :, :2]
        self.first = ctx.first_switch[:, :2]  # the switch out of a started run's last version
        self.l0, self.target = ctx.initial_loss, ctx.target
        self.factor = cantelli_factor(ctx.omega)

    def possible(self, path, lengths, top: int) -> np.ndarray:
        """For last runs n = 1..top: False where the ω-quantile surely exceeds ℓmax."""
        k, acc = 0, self.first[path[0]].copy()
        for i, (m, n) in enumerate(zip(path, lengths)):
            acc += self.c[m, k + n] - self.c[m, k]
            if i > 0:
                acc += self.sw[path[i - 1], m]
            k += n
        last = path[-1]
        if len(path) > 1:
            acc += self.sw[path[-2], last]
        ends = np.arange(k + 1, k + top + 1)
        ends = np.minimum(ends, self.c.shape[1] - 1)
        run = self.c[last, ends] - self.c[last, k]
        mean, var = self.l0 + acc[0] + run[:, 0], acc[1] + run[:, 1]
        with np.errstate(invalid="ignore"):
            bound = mean - self.factor * np.sqrt(var)
        return ~(bound > self.target)
