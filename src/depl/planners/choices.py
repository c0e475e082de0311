"""One planning call: its dataset choices computed once, and the one walk over them.

Every planner answers the same question per dataset choice (stage 1 picks
the datasets, stages 2–3 plan on them) and differs only in how it searches a
choice and when it stops.  `Problem` holds what one call shares — the
scenario, options, loss law, the state the plan starts from, and the
dataset choices with their contexts, each ranking computed once and every
context built once (its caches then serve every stage and the infeasibility
message alike).  `walk` is the loop over the choices: blacklist a choice its
search cannot make feasible and take the next (Fig. 3), keep the cheapest
plan, stop after `take` feasible choices or once the ranking score leaves
`slack` of the best, and skip (or, ordered by it, close) a choice whose
admissible lower bound reaches the best plan found.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..loss import LossModel, loss_model_for
from ..plan import Plan
from ..scenario import Scenario
from ..state import START, RunState
from .common import Candidate, Context, Options
from .datasets import ranked_by_cost, scored_subsets


@dataclass(frozen=True)
class Choice:
    """A dataset choice with its ranking score and its context."""

    datasets: tuple[str, ...]
    score: float
    ctx: Context

    @property
    def key(self) -> tuple:
        """What planning sees of the datasets: their samples and transfer cost to every cluster.
        Two choices with the same key have the same plans at the same costs."""
        s = self.ctx.scenario
        return (round(self.ctx.samples, 6), *(round(s.transfer_cost(self.datasets, n.name), 9) for n in s.clusters))


class Problem:
    """What one planning call shares (see the module's docstring)."""

    def __init__(self, scenario: Scenario, options: Options | None = None, loss: LossModel | None = None,
                 start: RunState = START):
        self.scenario = scenario
        self.options = options or Options()
        self.loss = loss or loss_model_for(scenario)
        self.start = start
        self._contexts: dict[tuple[str, ...], Context] = {}
        self._shared: dict = {}  # the contexts' shared answers (Context.shared)

    def context(self, datasets) -> Context:
        key = tuple(datasets)
        if key not in self._contexts:
            self._contexts[key] = Context(self.scenario, list(key), loss=self.loss, options=self.options, shared=self._shared,
                                          start=self.start)
        return self._contexts[key]

    @cached_property
    def by_cost(self) -> list[Choice]:
        """Ranked by eq. (2): the cost of the cheapest one-version, one-cluster plan (bounds.proxy_cost)."""
        return [Choice(sub, score, ctx)
                for score, sub, ctx in ranked_by_cost(self.scenario, self.loss, self.options, self.context)]

    @cached_property
    def by_time(self) -> list[Choice]:
        """Ranked by the paper's eq. (7): the learning time K̂·T̂ of the full model."""
        return [Choice(sub, score, self.context(sub)) for score, sub in scored_subsets(self.scenario, self.loss)]

    def ranked(self, rule: str) -> list[Choice]:
        """The choices ranked by `rule`: "cost" (eq. 2) or "paper" (eq. 7)."""
        if rule == "cost":
            return self.by_cost
        if rule == "paper":
            return self.by_time
        raise ValueError(f"dataset_rule {rule!r}: choose cost or paper")


# search(context, incumbent) -> the cheapest plan it finds on that choice (or the incumbent), or None
Search = Callable[[Context, "Candidate | None"], "Candidate | None"]


@dataclass
class Walk:
    """The walk over dataset choices; after `run` (or an exception out of a search,
    e.g. a time limit) it holds the best plan, the blacklist and what is still open."""

    choices: list[Choice]
    take: int | float = 1  # stop after this many feasible choices
    slack: float = math.inf  # ... or at the first choice scored above slack × the reference
    by_cost: bool = False  # the reference is the best plan's cost (else the first feasible choice's score)
    bound: Callable[[Choice], float] | None = None  # admissible lower bound of a choice's plans
    bound_ordered: bool = False  # choices come by increasing bound: the first above the best closes the rest
    best: tuple[Context, Candidate] | None = None
    tried: list[list[str]] = field(default_factory=list)  # blacklisted: no plan on them (Fig. 3)
    position: int = 0  # choices before this one are closed

    @property
    def open(self) -> list[Choice]:
        return self.choices[self.position:]

    def run(self, search: Search) -> "Walk":
        first, feasible = None, 0
        searched: dict[tuple, bool] = {}  # key → whether it had a plan
        for i, choice in enumerate(self.choices):
            self.position = i
            if choice.key in searched:  # the same samples and β as a choice already searched (e.g. equal sizes)
                if not searched[choice.key]:
                    self.tried.append(list(choice.datasets))
                continue
            if first is not None and not choice.score <= first * self.slack:
                break
            if self.bound is not None and self.best is not None:
                if self.bound_ordered:
                    if self.bound(choice) >= self.best[1].cost * (1 - 1e-12):
                        self.position = len(self.choices)  # every open choice is bounded above the best
                        return self
                elif self.bound(choice) >= self.best[1].cost:
                    continue  # no plan on these datasets can be cheaper
            incumbent = None if self.best is None else self.best[1]
            cand = search(choice.ctx, incumbent)
            searched[choice.key] = cand is not None
            if cand is None:
                self.tried.append(list(choice.datasets))
                continue
            if incumbent is None or (cand is not incumbent and cand.cost < incumbent.cost):
                self.best = (choice.ctx, cand)
            first = self.best[1].cost if self.by_cost else (choice.score if first is None else first)
            feasible += 1
            if feasible >= self.take:
                self.position = i + 1
                return self
        else:
            self.position = len(self.choices)
        return self


class ChoicePlanner:
    """A planner (registry.Planner) written as `solve(problem, t0)` over one `Problem`."""

    name: str

    def plan(self, scenario: Scenario, options: Options | None = None, start: RunState = START,
             loss: LossModel | None = None) -> Plan:
        t0 = time.perf_counter()
        return self.solve(Problem(scenario, options, loss, start), t0)

    def solve(self, problem: Problem, t0: float) -> Plan:
        raise NotImplementedError
