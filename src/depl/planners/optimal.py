"""optimal: the cheapest plan a scenario allows, proven by branch and bound.

Exhaustive over every dataset choice; every schedule in which each version
forms one run of consecutive epochs and consecutive runs are allowed
switches (with pruning switches — an acyclic switch graph — these are all
schedules); the exact placement of each (cluster of every epoch with its
hand-offs and β, compute: depl.planners.placement); the certified
ω-quantile of each by FFT.

Branch and bound, best first:

* the incumbent is DepL's plan (a valid plan: what optimal returns is never
  worse, and nothing dearer is ever opened);
* dataset choices are visited by increasing admissible lower bound
  (depl.planners.bounds: Cantelli's bound on the epochs any schedule needs,
  the Lagrangian dual of the placement for the cost of that many epochs);
  one whose bound reaches the incumbent holds no cheaper plan and is closed
  unopened;
* within a choice, depl.planners.exhaustive enumerates run lengths with the
  dual bound of every partial plan, Cantelli's bound on the loss and
  bisection on the last run.

A plan is *proven* optimal when every choice is closed.  With
`Options.time_limit` the search stops there and returns the incumbent with
a certified lower bound: the least bound of the choices still open (the
incumbent's cost when none is).  Where the switch graph has a cycle the
search covers schedules that do not revisit a version, so the plan is not
called proven; its lower bound stays valid (the bounds cover every schedule).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from ..loss import LossModel, loss_model_for
from ..plan import Plan
from ..scenario import Scenario
from .bounds import _acyclic, subset_lower_bound
from .common import Candidate, Context, Infeasible, Options, make_plan
from .datasets import ranked_by_cost
from .depl import depl_candidate, infeasible
from .exhaustive import Exhaustive, TimeUp, simple_paths

DEFAULT_TIME_LIMIT = 600.0


def plan_optimal(s: Scenario, options: Options | None = None, loss: LossModel | None = None) -> Plan:
    options = options or Options()
    t0 = time.perf_counter()
    stop_at = None if options.time_limit is None else t0 + options.time_limit
    model = loss or loss_model_for(s)
    say = options.progress or (lambda line: None)
    say("optimal: finding DepL's plan (the first incumbent) …")
    found = depl_candidate(s, replace(options, progress=None), model)
    best: tuple[Candidate, Context] | None = None if found is None else (found[1], found[0])

    ranked = ranked_by_cost(s, model, options)
    if found is not None:  # DepL's context for its own choice: its caches are warm
        ranked = [(p, d, found[0] if tuple(found[0].datasets) == d else c) for p, d, c in ranked]
    open_ = sorted(((subset_lower_bound(ctx), i, ctx) for i, (_, _, ctx) in enumerate(ranked)),
                   key=lambda t: t[:2])
    evaluated, closed, total = 0, 0, len(open_)

    def bound() -> float:
        lb = min((b for b, _, _ in open_), default=math.inf)
        return lb if best is None else min(lb, best[0].cost)

    def status() -> str:
        inc = best[0].cost if best else math.inf
        lb = bound()
        gap = (inc - lb) / inc if math.isfinite(inc) and inc > 0 else math.inf
        return (f"optimal: incumbent {inc:.6g}  bound {lb:.6g}  gap {gap:.2%}  "
                f"dataset choices closed {closed}/{total}  {time.perf_counter() - t0:.0f} s")

    timed_out = False
    while open_:
        lb, _, ctx = open_[0]
        if best is not None and lb >= best[0].cost * (1 - 1e-12):
            closed += len(open_)
            open_.clear()  # every open choice is bounded above the incumbent
            break
        say(status())
        ex = Exhaustive(ctx, None, stop_at=stop_at, tick=lambda _ex: say(status()))
        if best is not None:
            ex.best = best[0]  # any plan bounds every dataset choice
            ex.h = ex._coarse_step(best[0].schedule)
        try:
            ex.run()
        except TimeUp:
            timed_out = True
            break
        finally:
            evaluated += ex.evaluated
            if ex.best is not None and (best is None or ex.best is not best[0]):
                best = (ex.best, ctx)
        open_.pop(0)
        closed += 1
    lower = bound() if best is not None or open_ else None
    proven = not timed_out and _acyclic(Context(s, [s.datasets[0].name], loss=model).allowed)
    say(status() + ("  (time limit reached)" if timed_out else "  done"))
    if best is None:
        if timed_out:
            raise Infeasible(f"optimal found no plan within its time limit of {options.time_limit:g} s "
                             "(and DepL found none): raise --time-limit to search further")
        raise infeasible(s, options, loss)
    cand, ctx = best
    # Re-certify with the default lattice, the same as the other planners.
    q, d = ctx.certify(cand.schedule)
    if q <= cand.quantile:  # both are valid upper bounds: report the tighter
        cand = Candidate(cand.schedule, q, cand.placement, d)
    plan = make_plan("optimal", s, ctx, cand, t0, quantiles_evaluated=evaluated,
                     time_limit=options.time_limit, time_limit_reached=timed_out)
    plan.optimal_proven = proven
    plan.lower_bound = float(min(lower, cand.cost)) if lower is not None and math.isfinite(lower) else None
    return plan


__all__ = ["plan_optimal", "simple_paths", "DEFAULT_TIME_LIMIT"]
