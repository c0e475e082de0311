"""The planners by name: one protocol, one table.

A planner is an object with a `name` and
`plan(scenario, options, start=START, loss=None) -> Plan` that raises
`Infeasible` when no plan meets the target.  Adding one is a module that
defines it and one `register` line (below for the built-in ones, which are
imported only when first asked for, so `depl --help` does not load them).

>>> "depl" in planner_names()
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..state import START, RunState

if TYPE_CHECKING:
    from ..loss import LossModel
    from ..plan import Plan
    from ..scenario import Scenario
    from .common import Options


@runtime_checkable
class Planner(Protocol):
    name: str

    def plan(self, scenario: "Scenario", options: "Options", start: RunState = START,
             loss: "LossModel | None" = None) -> "Plan":
        """The cheapest plan it finds for the remaining epochs from `start`; raises Infeasible."""


_PLANNERS: dict[str, "Planner | str"] = {}


def register(name: str, planner: "Planner | str") -> None:
    """Make `planner` (or "module:attribute", imported when first used) the method `name`."""
    if not isinstance(planner, str) and not isinstance(planner, Planner):
        raise TypeError(f"{planner!r} is not a planner (needs .name and .plan)")
    _PLANNERS[name] = planner


def unregister(name: str) -> None:
    _PLANNERS.pop(name, None)


def planner_names() -> tuple[str, ...]:
    return tuple(_PLANNERS)


def get_planner(name: str) -> Planner:
    try:
        planner = _PLANNERS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(_PLANNERS)}") from None
    if isinstance(planner, str):
        module, attr = planner.split(":")
        planner = _PLANNERS[name] = getattr(importlib.import_module(module), attr)
    return planner


register("depl", "depl.planners.depl:DEPL")
register("optimal", "depl.planners.optimal:OPTIMAL")
register("best-exp", "depl.planners.best_exp:BEST_EXP")
register("best-exp-loss", "depl.planners.best_exp_loss:BEST_EXP_LOSS")
