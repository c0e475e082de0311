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

from ..plan import Plan
from .bounds import _acyclic, subset_lower_bound
from .choices import Choice, ChoicePlanner, Problem, Walk
from .common import Candidate, Context, Infeasible, to_plan
from .depl import depl_walk, infeasible
from .exhaustive import Exhaustive, TimeUp, simple_paths

DEFAULT_TIME_LIMIT = 600.0


class OptimalPlanner(ChoicePlanner):
    name = "optimal"

    def solve(self, problem: Problem, t0: float) -> Plan:
        options, scenario = problem.options, problem.scenario
        stop_at = None if options.time_limit is None else t0 + options.time_limit
        say = options.on_status or (lambda line: None)
        say("optimal: finding DepL's plan (the first incumbent) …")
        incumbent = depl_walk(problem).best
        # Every choice, by increasing admissible lower bound (its score here).
        bounded = sorted(((subset_lower_bound(c.ctx), i, c) for i, c in enumerate(problem.by_cost)), key=lambda t: t[:2])
        walk = Walk([Choice(c.datasets, lb, c.ctx) for lb, _, c in bounded], take=math.inf,
                    bound=lambda choice: choice.score, bound_ordered=True, best=incumbent)
        evaluated = 0

        def bound() -> float:
            lb = min((c.score for c in walk.open), default=math.inf)
            return lb if walk.best is None else min(lb, walk.best[1].cost)

        def status() -> str:
            inc = walk.best[1].cost if walk.best else math.inf
            lb = bound()
            gap = (inc - lb) / inc if math.isfinite(inc) and inc > 0 else math.inf
            return (f"optimal: incumbent {inc:.6g}  bound {lb:.6g}  gap {gap:.2%}  "
                    f"dataset choices closed {walk.position}/{len(walk.choices)}  {time.perf_counter() - t0:.0f} s")

        def exhaust(ctx: Context, best: Candidate | None) -> Candidate | None:
            nonlocal evaluated
            say(status())
            ex = Exhaustive(ctx, None, stop_at=stop_at, tick=lambda _ex: say(status()))
            if best is not None:
                ex.best = best  # any plan bounds every dataset choice
                ex.h = ex._coarse_step(best.schedule)
            try:
                return ex.run()
            except TimeUp:
                if ex.best is not None and ex.best is not best:  # what it found before the time was up stands
                    walk.best = (ctx, ex.best)
                raise
            finally:
                evaluated += ex.evaluated

        timed_out = False
        try:
            walk.run(exhaust)
        except TimeUp:
            timed_out = True
        lower = bound() if walk.best is not None or walk.open else None
        proven = not timed_out and _acyclic(Context(scenario, [scenario.datasets[0].name], loss=problem.loss).allowed)
        say(status() + ("  (time limit reached)" if timed_out else "  done"))
        if walk.best is None:
            if timed_out:
                raise Infeasible(f"optimal found no plan within its time limit of {options.time_limit:g} s "
                                 "(and DepL found none): raise --time-limit to search further")
            raise infeasible(problem)
        ctx, cand = walk.best  # certified once more by to_plan, as every planner's plan (final_certification)
        plan = to_plan(self.name, ctx, cand, t0, quantiles_evaluated=evaluated,
                       time_limit=options.time_limit, time_limit_reached=timed_out)
        plan.optimal_proven = proven
        plan.lower_bound = float(min(lower, cand.cost)) if lower is not None and math.isfinite(lower) else None
        return plan


OPTIMAL = OptimalPlanner()

__all__ = ["OPTIMAL", "OptimalPlanner", "simple_paths", "DEFAULT_TIME_LIMIT"]
