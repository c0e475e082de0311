"""Both readings of best-exp and both cost models, against brute force on tiny instances,
and every plan's cost recomputed from its epochs by a formula written here, apart from depl's own."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize
from typer.testing import CliRunner

from depl import cli
from depl.loss import loss_model_for
from depl.planners import Infeasible, Options, make_plan
from depl.planners.common import Context
from depl.planners.datasets import ranked_subsets
from depl.planners.placement import PlacementInfeasible, place
from depl.scenario import load_scenario, parse_scenario, scenario_dict
from depl.simulate import simulate_plan

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from random_scenarios import random_instance  # noqa: E402
from test_cheapest import all_schedules, brute_force  # noqa: E402

OPTS = Options(eta=40, time_limit=120)
MODELS = ["per-epoch", "resource-time"]


def under(s, cost_model):
    return parse_scenario({**scenario_dict(s), "cost_model": cost_model}, s.name)


def planned(s, method):
    """The plan of `method`, or None where it finds none."""
    try:
        return make_plan(s, method, OPTS)
    except Infeasible:
        return None


def independent_cost(s, plan) -> float:
    """Eq. (2) (or κ·x·nodes·T(k) per epoch) + β once per (dataset, cluster used), from the scenario's numbers."""
    clusters = {c.name: c for c in s.clusters}
    models = {m.name: m for m in s.models}
    samples = sum(d.samples for d in s.datasets if d.name in plan.datasets)
    total = 0.0
    for e in plan.epochs:
        n, m = clusters[e.cluster], models[e.model]
        per_epoch = n.unit_cost * e.compute * n.nodes
        if s.cost_model == "resource-time":
            per_epoch *= m.work * samples / n.nodes / e.compute + m.size / n.bandwidth  # T(k), eq. (1)
        total += per_epoch
    for d in s.datasets:
        if d.name in plan.datasets:
            total += sum(d.transfer_cost.get(c, 0.0) for c in {e.cluster for e in plan.epochs})
    return total


# Tiny increments-law instances (the paper's reading needs the law's mean to add up), the same every run.
INCREMENTS = [0, 2, 3, 4, 7, 8, 9, 11]
# Seed 1: whether the cheapest plan for a mean target meets ℓmax is not monotone in the target
# (meets at 12.69, misses at 12.6, meets at 12.2); best-exp's bisection found the dearer plan
# (18.21 vs 17.22 per-epoch, 9526 vs 8863 resource-time) until it swept the targets plan by plan.
BEST_EXP_SEEDS = INCREMENTS + [1]


@pytest.mark.parametrize("cost_model", MODELS)
@pytest.mark.parametrize("method", ["depl", "optimal", "best-exp", "best-exp-loss"])
def test_every_planner_costs_its_plan_by_the_scenarios_cost_model(method, cost_model):
    s = under(load_scenario("paper-alexnet"), cost_model)
    plan = make_plan(s, method, OPTS)
    assert plan.cost == pytest.approx(independent_cost(s, plan), rel=1e-9)
    assert simulate_plan(plan, runs=200).cost == pytest.approx(plan.cost, rel=1e-9)
    assert plan.loss_quantile <= s.target.loss and plan.time <= s.target.deadline * (1 + 1e-9)


def test_resource_time_placement_is_the_convex_optimum_found_by_a_generic_solver():
    """Stage 3 under resource-time for every cluster assignment of small schedules,
    against SLSQP on min Σ κ·nodes·x·T(k) s.t. Σ T(k) ≤ Tmax, x ≤ r (β added per cluster)."""
    for seed in INCREMENTS[:3]:
        s = under(random_instance(seed, max_epochs=4), "resource-time")
        datasets = [s.datasets[0].name]
        S = s.samples(datasets)
        sched = [m.name for m in s.models][:2] * 2
        try:
            p = place(s, sched, datasets)
        except PlacementInfeasible:
            continue
        best = math.inf
        cl = s.clusters
        for assign in itertools.product(range(len(cl)), repeat=len(sched)):
            ms = [s.models[s.model_index[m]] for m in sched]
            ns = [cl[j] for j in assign]
            c = np.array([m.work * S / n.nodes for m, n in zip(ms, ns)])
            tau = np.array([m.size / n.bandwidth for m, n in zip(ms, ns)])
            kap = np.array([n.unit_cost * n.nodes for n in ns])
            r = np.array([n.capacity for n in ns])
            if np.sum(c / r + tau) > s.target.deadline:
                continue
            cost = lambda x: float(np.sum(kap * x * (c / x + tau)))  # noqa: E731
            res = minimize(cost, r * 0.999, method="SLSQP", bounds=[(1e-9, rk) for rk in r],
                           constraints=[{"type": "ineq", "fun": lambda x: s.target.deadline - np.sum(c / x + tau)}],
                           options={"ftol": 1e-12, "maxiter": 500})
            if res.success and s.target.deadline - np.sum(c / res.x + tau) >= -1e-6 * s.target.deadline:
                beta = sum(s.transfer_cost(datasets, cl[j].name) for j in set(assign))
                best = min(best, res.fun + beta)
        assert p.cost <= best * (1 + 1e-6)
        assert p.cost >= best * (1 - 1e-4)


@pytest.mark.parametrize("cost_model", MODELS)
@pytest.mark.parametrize("seed", INCREMENTS[:3])
def test_optimal_equals_brute_force_under_both_cost_models(seed, cost_model):
    s = under(random_instance(seed, max_epochs=4), cost_model)
    best, opt = brute_force(s, 4), planned(s, "optimal")
    assert (opt is None) == (best == math.inf)
    assert opt is None or (opt.cost == pytest.approx(best, rel=1e-9) and opt.optimal_proven)


def brute_best_exp_loss(s) -> tuple[float, list[str]] | None:
    """The paper's best-exp by enumeration: on the first dataset choice (eq. 7) where it
    exists, for K = 1.. the schedule with the lowest E[ℓ(K)] (the law's own mean path),
    the first whose exact ω-quantile meets ℓmax and that can be placed."""
    loss = loss_model_for(s)
    for data in ranked_subsets(s):
        ctx = Context(s, list(data), options=OPTS)
        for K in range(1, ctx.max_epochs + 1):
            low = min(all_schedules(ctx, K), key=lambda sc: loss.mean_path(sc, ctx.phi)[-1])
            q = loss.distribution(low, ctx.phi).quantile_bounds(s.target.quantile)[1]
            if q > s.target.loss:
                continue
            p = ctx.place(low)
            if p is not None:
                return p.cost, low
    return None


def brute_best_exp(s) -> float | None:
    """SPEC's best-exp by enumeration, on the first dataset choice (eq. 7) where it exists:
    for a mean target ℓ', the cheapest schedule with E[ℓ(K)] ≤ ℓ'; ℓ' is tightened until
    that schedule's exact ω-quantile meets ℓmax; the cheapest such plan."""
    loss = loss_model_for(s)
    for data in ranked_subsets(s):
        ctx = Context(s, list(data), options=OPTS)
        plans = []  # (mean, cost, meets)
        for K in range(1, ctx.max_epochs + 1):
            for sc in all_schedules(ctx, K):
                p = ctx.place(sc)
                if p is not None:
                    d = loss.distribution(sc, ctx.phi)
                    plans.append((d.mean(), p.cost, d.quantile_bounds(s.target.quantile)[1] <= s.target.loss))
        found = []
        for limit in sorted({m for m, _, _ in plans}, reverse=True):  # every distinct mean target
            cheapest = min((c, meets) for m, c, meets in plans if m <= limit)
            if cheapest[1]:
                found.append(cheapest[0])
        if found:
            return min(found)
    return None


@pytest.mark.parametrize("cost_model", MODELS)
@pytest.mark.parametrize("seed", INCREMENTS)
def test_best_exp_loss_is_the_papers_reading_by_brute_force(seed, cost_model):
    s = under(random_instance(seed, max_epochs=4), cost_model)
    want, plan = brute_best_exp_loss(s), planned(s, "best-exp-loss")
    assert (plan is None) == (want is None)
    if plan is None:
        return
    assert plan.schedule == want[1]
    assert plan.cost == pytest.approx(want[0], rel=1e-9)
    assert plan.cost == pytest.approx(independent_cost(s, plan), rel=1e-9)


@pytest.mark.parametrize("cost_model", MODELS)
@pytest.mark.parametrize("seed", BEST_EXP_SEEDS)
def test_best_exp_is_specs_reading_by_brute_force(seed, cost_model):
    s = under(random_instance(seed, max_epochs=4), cost_model)
    want, plan = brute_best_exp(s), planned(s, "best-exp")
    assert (plan is None) == (want is None)
    assert plan is None or plan.cost == pytest.approx(want, rel=1e-6)


def test_an_unknown_cost_model_exits_2_naming_file_field_and_value(tmp_path):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text('cost_model = "hourly"\n' + src)
    r = CliRunner().invoke(cli.app, ["plan", str(bad)])
    assert r.exit_code == 2
    assert str(bad) in r.output and "cost_model" in r.output and "hourly" in r.output
    good = tmp_path / "rt.toml"
    good.write_text('cost_model = "resource-time"\n' + src)
    ok = CliRunner().invoke(cli.app, ["plan", str(good), "--eta", "40"], env={"COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    assert "resource-time" in ok.output
