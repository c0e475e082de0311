"""Planners: one signature, one `Plan`.

>>> from depl.scenario import load_scenario
>>> plan = make_plan(load_scenario("paper-alexnet"), "depl")
>>> plan.feasible and plan.loss_quantile <= plan.loss_target
True
"""

from __future__ import annotations

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
        from .depl import plan_depl
        return plan_depl(scenario, options, loss)
    if method == "optimal":
        from .optimal import plan_optimal
        return plan_optimal(scenario, options, loss)
    if method == "best-exp":
        from .best_exp import plan_best_exp
        return plan_best_exp(scenario, options, loss)
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


__all__ = ["make_plan", "METHODS", "Options", "Infeasible", "Plan"]
