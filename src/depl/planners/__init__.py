"""Planners: one signature, one `Plan`.

>>> from depl.scenario import load_scenario
>>> plan = make_plan(load_scenario("paper-alexnet"), "depl")
>>> plan.feasible and plan.loss_quantile <= plan.loss_target
True
"""

from __future__ import annotations

import time

from ..loss import LossModel
from ..plan import Plan
from ..scenario import Scenario
from .common import Infeasible, Options

METHODS = ("depl", "optimal", "best-exp")


def make_plan(scenario: Scenario, method: str = "depl", options: Options | None = None,
              loss: LossModel | None = None) -> Plan:
    """Plan `scenario` with `method`; raises `Infeasible` when no plan meets the target.

    `loss` replaces the scenario's own loss model (any depl.loss.LossModel).
    """
    options = options or Options()
    if method == "depl":
        from .depl import plan_depl as planner
    elif method == "optimal":
        from .optimal import plan_optimal as planner
    elif method == "best-exp":
        from .best_exp import plan_best_exp as planner
    else:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    t0 = time.perf_counter()
    try:
        return planner(scenario, options, loss)
    except Infeasible as e:
        # The reachability search behind the message found a plan that meets the
        # target: answer with it rather than call the target infeasible.
        if e.witness is None:
            raise
        from .common import make_plan as plan_of

        ctx, cand = e.witness
        return plan_of(method, scenario, ctx, cand, t0, eta=options.eta, found_by="reachability search")


__all__ = ["make_plan", "METHODS", "Options", "Infeasible", "Plan"]
