"""optimal: exhaustive search with exact quantiles (the paper's brute force).

Every dataset choice; every schedule in which each version forms one run of
consecutive epochs and consecutive runs are allowed switches (with pruning
switches — a DAG — these are all schedules; with a cyclic switch graph a
version is not revisited); the exact placement of each (depl.planners.
placement); the certified ω-quantile of each by FFT.

It is made affordable, not approximate, by depl.planners.exhaustive (branch
and bound on cost, bisection on the last run, coarse-to-fine lattices).
The search starts from DepL's plan as its first incumbent: a valid plan, so
the optimum found is never worse than it, and branches above its cost are
never opened.  Use it on paper-size instances (a handful of versions, tens of
epochs).
"""

from __future__ import annotations

import time

from ..loss import LossModel
from ..plan import Plan
from ..scenario import Scenario
from .common import Candidate, Context, Options, make_plan
from .datasets import ranked_subsets
from .depl import infeasible, search
from .exhaustive import Exhaustive, simple_paths


def plan_optimal(s: Scenario, options: Options | None = None, loss: LossModel | None = None) -> Plan:
    options = options or Options()
    t0 = time.perf_counter()
    best: tuple[Candidate, Context] | None = None
    evaluated = 0
    for datasets in ranked_subsets(s, loss):
        ctx = Context(s, list(datasets), loss=loss, options=options)
        ex = Exhaustive(ctx, search(ctx))  # DepL's plan: a valid first bound
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
