"""A planner added from outside the package: one module, one `register` line (in the test).

"one-version": the cheapest plan that trains a single version throughout —
the shared walk over dataset choices, with an exact search of one-run
schedules on each.
"""

from __future__ import annotations

import time

from depl.planners.choices import Problem, Walk
from depl.planners.common import Options, to_plan
from depl.planners.exhaustive import Exhaustive
from depl.planners.depl import infeasible
from depl.state import START


class OneVersion:
    name = "one-version"

    def plan(self, scenario, options=None, start=START, loss=None):
        options = options or Options()
        t0 = time.perf_counter()
        problem = Problem(scenario, options, loss, start)
        alone = [[m] for m in range(len(problem.loss.model_names))]
        walk = Walk(problem.by_cost, take=len(problem.by_cost))
        walk.run(lambda ctx, incumbent: Exhaustive(ctx, incumbent, alone).run())
        if walk.best is None:
            raise infeasible(problem, method=self.name)
        return to_plan(self.name, *walk.best, t0)


ONE_VERSION = OneVersion()
