"""The closed loop checked on the loss law itself: `monte_carlo` runs the policy against the open loop on the same
simulated runs of the law (no torch); `simulated_gap` measures the validation–test gap as depl.gap does on real runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..certificate import DEFAULT_ALPHA
from ..gap import MeasuredGap
from ..state import START
from ..validate import coverage as measured_coverage  # one Clopper–Pearson for the Monte Carlo and for real runs
from .policy import Policy

@dataclass
class MonteCarlo:
    """Closed loop against open loop on the same simulated runs of the law."""

    final: np.ndarray         # ℓ_final per run, closed loop
    cost: np.ndarray          # its cost
    open_final: np.ndarray    # the plan's ℓ(K) on the same runs' draws
    open_cost: float
    actions: dict[str, int] = field(default_factory=dict)
    target: float = 0.0
    omega: float = 0.0
    alpha: float = DEFAULT_ALPHA   # the plan's α: the confidence of `interval`'s bounds

    @property
    def coverage(self) -> float:
        return float(np.mean(self.final <= self.target))

    @property
    def open_coverage(self) -> float:
        return float(np.mean(self.open_final <= self.target))

    def interval(self, closed: bool = True) -> tuple[float, float]:
        """The one-sided (1 − α) Clopper–Pearson bounds of the closed (or open) loop's coverage at the plan's α, as
        `depl validate` computes them."""
        return measured_coverage(self.final if closed else self.open_final, self.target, self.omega, self.alpha).ci


def monte_carlo(policy: Policy, runs: int, seed: int = 0, *, every: int = 1,
                slow: dict[str, float] | None = None, gap: float = 0.0) -> MonteCarlo:
    """Simulate `runs` runs of the law along the plan, the policy deciding after every `every`-th epoch.

    A run follows the plan's simulated trajectory until a decision changes
    its rest; it then continues by the law conditioned on its state
    (`simulate(..., start=state)`, exact for the laws here).  `slow`: the
    clusters that really run slower (the policy learns it from the epoch times).
    `gap`: the policy observes each epoch's loss plus N(0, gap²) noise (a validation split's) and
    knows gap as its `gap_sd`; the run's outcome is the loss itself (its test loss).  (A run whose rest
    changes goes on from its state as observed: with gap > 0, from a noisy loss.)"""
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng([seed, 1])  # the observation noise: its own stream, the paths stay the same
    sim = policy.simulating(gap)
    plan, loss, phi = policy.plan, policy.loss, policy.phi
    paths = loss.simulate(plan.schedule, phi, runs, rng)
    slow = slow or {}
    finals, costs, actions = np.empty(runs), np.empty(runs), {}
    for i in range(runs):
        run = sim.fresh()
        rest, path, at, state, true = list(plan.epochs), paths[i], 0, START, math.nan
        while rest:
            e, rest = rest[0], rest[1:]
            true = float(path[state.epoch + 1 - at])
            seen = true + gap * float(noise.standard_normal()) if gap > 0 else true
            state, d = run.step(state, e, seen, run.rehearsed_seconds(e, slow), rest,
                                decide=bool(rest) and (state.epoch + 1) % every == 0)
            if d is None:
                continue
            actions[d.action] = actions.get(d.action, 0) + 1
            if d.action == "stop":
                break
            if list(d.rest) != list(rest):
                rest, at = list(d.rest), state.epoch
                path = loss.simulate([x.model for x in rest], phi, 1, rng, start=state)[0]
        finals[i], costs[i] = true, state.cost_spent
    return MonteCarlo(finals, costs, paths[:, -1], float(plan.cost), actions, policy.target, policy.omega, plan.alpha)


def simulated_gap(policy: Policy, runs: int, gap: float, seed: int = 0) -> MeasuredGap:
    """The validation–test gap as depl.gap measures it on real runs, measured instead on `runs` runs of the law along
    the plan whose losses are observed through N(0, gap²) noise (as `monte_carlo(gap=)` observes them): per run, its
    largest test − validation loss over the epochs whose validation loss is ≤ ℓmax."""
    rng = np.random.default_rng([seed, 5])
    test = policy.loss.simulate(policy.plan.schedule, policy.phi, runs, rng)[:, 1:]
    val = test + gap * rng.standard_normal(test.shape)
    most = np.where(val <= policy.target, test - val, -np.inf).max(axis=1)
    return MeasuredGap(tuple(sorted(float(x) for x in most[np.isfinite(most)])), policy.target, int(test.size),
                       f"{runs} runs of the law observed with gap sd {gap:g}")
