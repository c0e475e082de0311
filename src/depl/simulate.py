"""Monte Carlo of a plan: whole loss trajectories, independent of the FFT.

The planners certify a plan with the numeric distribution of ℓ(K); this
module checks it another way, by drawing every epoch's noise and every
switch's jump (scipy.stats `rvs`) and adding them up along the schedule.

>>> from depl.scenario import load_scenario
>>> from depl.planners import make_plan
>>> plan = make_plan(load_scenario("paper-alexnet"))
>>> sim = simulate_plan(plan, runs=20_000, seed=1)
>>> sim.p_meet_ci[1] >= plan.omega      # the guarantee is not refuted
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .band import Band
from .certificate import one_sided_bounds, quantile_ranks_at
from .loss import LossModel, loss_model_for
from .plan import Plan, plan_cost


@dataclass(frozen=True)
class Simulation:
    runs: int
    seed: int
    omega: float
    target: float
    final: np.ndarray  # ℓ(K) of every run
    band: Band
    p_meet: float  # empirical P(ℓ(K) ≤ ℓmax)
    p_meet_ci: tuple[float, float]  # Clopper–Pearson one-sided (1 − α) lower and upper bounds, α the plan's
    quantile: float  # empirical ω-quantile of ℓ(K)
    quantile_ci: tuple[float, float]  # distribution-free (order statistics) one-sided (1 − α) bounds
    cost: float = float("nan")  # the plan's cost from its epochs under the scenario's cost model (depl.plan.plan_cost)
    cost_model: str = "per-epoch"
    alpha: float = float("nan")  # the plan's α, the confidence of both intervals


def quantile_ci(x: np.ndarray, q: float, alpha: float) -> tuple[float, float]:
    """Distribution-free bounds on the q-quantile from order statistics, each one-sided at confidence 1 − α."""
    xs = np.sort(x)
    lo, hi = quantile_ranks_at(xs.size, q, alpha)
    return float(xs[lo]), float(xs[hi])


def simulate_schedule(loss: LossModel, schedule, phi: float, runs: int, seed: int) -> np.ndarray:
    return loss.simulate(list(schedule), phi, runs, np.random.default_rng(seed))


def simulate_plan(plan: Plan, runs: int = 10_000, seed: int = 0, loss: LossModel | None = None) -> Simulation:
    """Draw `runs` trajectories of the plan's schedule and summarise them."""
    s = plan.scenario_object(loss)
    loss = loss or loss_model_for(s)
    phi = s.phi(s.samples(plan.datasets))
    traj = simulate_schedule(loss, plan.schedule, phi, runs, seed)
    final = traj[:, -1]
    hits = int(np.sum(final <= plan.loss_target))
    return Simulation(
        runs=runs, seed=seed, omega=plan.omega, target=plan.loss_target, final=final, band=Band.of(traj),
        p_meet=hits / runs, p_meet_ci=one_sided_bounds(hits, runs, plan.alpha),
        quantile=float(np.quantile(final, plan.omega)), quantile_ci=quantile_ci(final, plan.omega, plan.alpha),
        cost=plan_cost(s, plan.datasets, plan.epochs), cost_model=s.cost_model or "per-epoch", alpha=plan.alpha,
    )
