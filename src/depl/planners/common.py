"""What the planners share: the context of one dataset choice, certification, the result."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

from ..loss import LossModel, loss_model_for
from ..plan import Plan, with_scenario
from ..scenario import Scenario
from .placement import ClusterTable, Placement, PlacementInfeasible, place
from .schedule import GraphSpec, Surrogate, cornish_fisher

MAX_EPOCHS = 400


@dataclass(frozen=True)
class Options:
    """Options every planner takes (some ignore some)."""

    eta: int = 200
    max_iter: int = 12
    polish: bool = True
    tol: float | None = None  # width of the certified quantile bracket; None = 1% of σ
    dataset_rule: str = "cost"  # "cost": ranked by eq. (2) (depl.planners.bounds); "paper": eq. (7)
    dataset_candidates: int = 6  # feasible dataset choices taken through stages 2–3 (the paper: 1)
    dataset_slack: float = 2.0  # ... among those whose ranking score is within this factor of the best
    time_limit: float | None = None  # optimal: seconds before it returns its incumbent and a lower bound
    progress: Callable[[str], None] | None = field(default=None, compare=False)  # optimal's live status


class Infeasible(Exception):
    """No plan meets the target; says which constraint and what is reachable."""

    def __init__(self, message: str, *, best_quantile: float | None = None, shortest_time: float | None = None):
        super().__init__(message)
        self.best_quantile = best_quantile
        self.shortest_time = shortest_time


@dataclass
class Context:
    """A scenario with its datasets chosen: everything stages 2–3 need."""

    scenario: Scenario
    datasets: list[str]
    loss: LossModel = field(default=None)  # type: ignore[assignment]
    options: Options = field(default_factory=Options)

    def __post_init__(self):
        if self.loss is None:
            self.loss = loss_model_for(self.scenario)

    @cached_property
    def samples(self) -> float:
        return self.scenario.samples(self.datasets)

    @cached_property
    def phi(self) -> float:
        return self.scenario.phi(self.samples)

    @cached_property
    def table(self) -> ClusterTable:
        return ClusterTable.build(self.scenario, self.samples)

    @property
    def omega(self) -> float:
        return self.scenario.target.quantile

    @property
    def target(self) -> float:
        return self.scenario.target.loss

    @property
    def deadline(self) -> float:
        return self.scenario.target.deadline

    @cached_property
    def tmin(self) -> np.ndarray:
        return self.table.min_time()

    @cached_property
    def max_epochs(self) -> int:
        k = int(math.floor(self.deadline / float(self.tmin.min()) + 1e-9))
        if self.scenario.max_epochs is not None:
            k = min(k, self.scenario.max_epochs)
        return max(1, min(k, MAX_EPOCHS))

    @cached_property
    def epoch_cumulants(self) -> np.ndarray:
        return self.loss.epoch_cumulants(self.max_epochs, self.phi)

    @cached_property
    def switch_cumulants(self) -> np.ndarray:
        names = self.loss.model_names
        out = np.zeros((len(names), len(names), 3))
        for a, na in enumerate(names):
            for b, nb in enumerate(names):
                if a != b and self.loss.can_switch(na, nb):
                    out[a, b] = self.loss.switch_cumulants(na, nb, self.phi)
        return out

    @cached_property
    def allowed(self) -> np.ndarray:
        names = self.loss.model_names
        return np.array([[self.loss.can_switch(a, b) for b in names] for a in names])

    def cumulants(self, K: int) -> np.ndarray:
        """Epoch cumulants (|M|, K, 3), also beyond the deadline's horizon."""
        if K <= self.max_epochs:
            return self.epoch_cumulants[:, :K]
        return self.loss.epoch_cumulants(K, self.phi)

    def spec(self, surrogate: Surrogate, weight: np.ndarray, target: float, *,
             deadline: float | None = None, eta: int | None = None, horizon: int | None = None) -> GraphSpec:
        return GraphSpec(
            models=list(self.loss.model_names), l0=self.loss.initial_loss,
            du_epoch=surrogate(self.cumulants(horizon or self.max_epochs)),
            du_switch=surrogate(self.switch_cumulants),
            allowed=self.allowed, weight=np.asarray(weight, float), tmin=self.tmin,
            deadline=self.deadline if deadline is None else deadline,
            target=target, eta=eta or self.options.eta,
        )

    # -- exact answers for one schedule ------------------------------------ #
    def distribution(self, schedule):
        return self.loss.distribution(schedule, self.phi, tol=self.options.tol)

    def certify(self, schedule) -> tuple[float, object]:
        """(certified upper bound of the ω-quantile, the distribution)."""
        d = self.distribution(schedule)
        return d.quantile_bounds(self.omega)[1], d

    def place(self, schedule) -> Placement | None:
        try:
            return place(self.scenario, list(schedule), self.datasets, table=self.table)
        except PlacementInfeasible:
            return None

    def cornish_fisher(self, schedule) -> tuple[float, float]:
        """(Cornish–Fisher ω-quantile, σ) of ℓ(K) from the additive cumulants."""
        idx = {m: i for i, m in enumerate(self.loss.model_names)}
        s = np.array([idx[m] for m in schedule])
        cum = self.cumulants(len(s))[s, np.arange(len(s))].sum(axis=0)
        for a, b in zip(s, s[1:]):
            if a != b:
                cum = cum + self.switch_cumulants[a, b]
        q, sigma = cornish_fisher(self.loss.initial_loss, cum, self.omega)
        return float(q), float(sigma)


@dataclass
class Candidate:
    """A schedule with its exact certification and placement."""

    schedule: list[str]
    quantile: float  # certified upper bound
    placement: Placement
    dist: object

    @property
    def cost(self) -> float:
        return self.placement.cost


def evaluate(ctx: Context, schedule) -> Candidate | None:
    """Certify and place `schedule`; None if it misses the deadline."""
    p = ctx.place(schedule)
    if p is None:
        return None
    q, d = ctx.certify(schedule)
    return Candidate(list(schedule), q, p, d)


def segments(schedule) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for m in schedule:
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1] + 1)
        else:
            out.append((m, 1))
    return out


def make_plan(method: str, scenario: Scenario, ctx: Context, cand: Candidate, t0: float, **info) -> Plan:
    lo, hi = cand.dist.quantile_bounds(ctx.omega)
    plan = Plan(
        method=method, scenario=scenario.name, feasible=True, datasets=list(ctx.datasets),
        epochs=cand.placement.epochs, cost=cand.placement.cost, time=cand.placement.time,
        loss_quantile=float(hi), loss_mean=float(cand.dist.mean()),
        solve_seconds=time.perf_counter() - t0, omega=ctx.omega, loss_target=ctx.target,
        deadline=ctx.deadline, loss_quantile_bounds=(float(lo), float(hi)),
        info={"placement_gap": cand.placement.gap, "loss_std": cand.dist.std(),
              "segments": [[m, n] for m, n in segments(cand.schedule)], **info},
    )
    return with_scenario(plan, scenario)
