"""The planners keep their promises on scenarios that are not in the repo."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depl.loss import IncrementsModel
from depl.plan import plan_cost, plan_time
from depl.planners import Infeasible, Options, make_plan
from depl.planners.common import Context
from depl.scenario import load_scenario, parse_scenario, scenario_dict
from depl.simulate import simulate_plan

sys.path.insert(0, str(Path(__file__).parents[1]))
from random_scenarios import random_scenario  # noqa: E402

METHODS = ["depl", "optimal", "best-exp"]


def with_target(s, loss=None, deadline=None):
    upd = {}
    if loss is not None:
        upd["loss"] = loss
    if deadline is not None:
        upd["deadline"] = deadline
    return s.model_copy(update={"target": s.target.model_copy(update=upd)})


@pytest.mark.parametrize("seed", [101, 102, 103])
@pytest.mark.parametrize("method", METHODS)
def test_plan_meets_quantile_deadline_and_cost_equations(seed, method):
    s = random_scenario(seed, n_datasets=2)
    plan = make_plan(s, method)
    assert plan.feasible and plan.loss_quantile <= s.target.loss
    # Monte Carlo, independent of the FFT: the ω-quantile is below ℓmax (within MC error).
    sim = simulate_plan(plan, runs=40_000, seed=seed)
    assert sim.quantile_ci[0] <= s.target.loss
    assert sim.p_meet_ci[1] >= s.target.quantile
    # The certified bound is an upper bound of the simulated quantile (up to MC error).
    assert sim.quantile_ci[0] <= plan.loss_quantile
    assert plan.time == pytest.approx(plan_time(s, plan.datasets, plan.epochs), rel=1e-9)
    assert plan_time(s, plan.datasets, plan.epochs) <= s.target.deadline * (1 + 1e-9)
    assert plan.cost == pytest.approx(plan_cost(s, plan.datasets, plan.epochs), rel=1e-12)
    assert plan.loss_mean == pytest.approx(sim.final.mean(), abs=4 * sim.final.std() / np.sqrt(sim.runs) + 1e-6)


@pytest.mark.parametrize("seed", [0, 1, 6])
def test_a_schedule_reports_the_same_tight_quantile_under_every_method_that_returns_it(seed):
    """Every planner's plan is certified once more, on the planners' own lattice (common.final_certification):
    the reported ω-quantile is the upper end of that bracket, the same for the same schedule whichever method
    returned it (depl reported a coarse search lattice's bound, 0.5–1.2% of the loss range above the Monte
    Carlo quantile on these scenarios, where optimal re-certified), and above the plan's Monte Carlo quantile
    by no more than the bracket's width (up to the Monte Carlo's own 95% interval)."""
    s = random_scenario(seed)
    plans = [make_plan(s, m, Options(time_limit=120)) for m in ("depl", "optimal", "best-exp", "best-exp-loss")]
    same: dict[tuple, list] = {}
    for p in plans:
        same.setdefault((tuple(p.schedule), tuple(p.datasets)), []).append(p)
    assert max(len(ps) for ps in same.values()) >= 3       # depl, optimal and best-exp agree on the schedule
    for (schedule, datasets), ps in same.items():
        assert len({(p.loss_quantile, p.loss_quantile_bounds, p.loss_mean) for p in ps}) == 1, \
            [(p.method, p.loss_quantile) for p in ps]
        p = ps[0]
        lo, hi = p.loss_quantile_bounds
        assert lo <= p.loss_quantile == hi <= s.target.loss
        q, d = Context(s, list(datasets)).certify(list(schedule))
        assert (p.loss_quantile, p.loss_quantile_bounds) == (q, d.quantile_bounds(s.target.quantile))
        assert hi - lo <= 0.011 * p.info["loss_std"] + 1e-12       # the planners' lattice: 1% of the sd wide
        sim = simulate_plan(p, runs=40_000, seed=seed)
        assert p.loss_quantile - sim.quantile_ci[1] <= hi - lo


@pytest.mark.slow  # the optimal planner on six instances
@pytest.mark.parametrize("name", ["paper-alexnet", "paper-mobilenet"])
@pytest.mark.parametrize("target", [12.0, 8.0, 5.0])
def test_depl_within_one_percent_of_optimal_on_paper_instances(name, target):
    s = with_target(load_scenario(name), loss=target)
    depl, opt, best = (make_plan(s, m) for m in METHODS)
    assert depl.cost <= opt.cost * 1.01
    assert best.cost >= opt.cost * (1 - 1e-9)


@given(seed=st.integers(0, 10_000))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_small_instances_rank_as_they_must(seed):
    s = random_scenario(seed)
    try:
        depl, opt, best = (make_plan(s, m) for m in METHODS)
    except Infeasible:
        return
    assert opt.cost <= depl.cost * (1 + 1e-9)
    assert depl.cost <= opt.cost * 1.01
    assert best.cost >= opt.cost * (1 - 1e-9)  # best-exp never beats the optimum


def all_schedules(ctx: Context, K: int):
    names = ctx.loss.model_names
    for n in range(1, K + 1):
        for seq in itertools.product(range(len(names)), repeat=n):
            if all(ctx.allowed[a, b] for a, b in zip(seq, seq[1:])):
                yield [names[i] for i in seq]


@pytest.mark.parametrize("seed", [5, 7, 18])
def test_optimal_equals_brute_force_over_every_schedule(seed):
    d = scenario_dict(random_scenario(seed))
    d["max_epochs"] = 6
    d["target"]["loss"] = d["initial_loss"] * 0.75
    s = parse_scenario(d)
    ctx = Context(s, [x.name for x in s.datasets])
    best = np.inf
    for sched in all_schedules(ctx, 6):
        p = ctx.place(sched)
        if p is not None and ctx.certify(sched)[0] <= s.target.loss:
            best = min(best, p.cost)
    try:
        opt = make_plan(s, "optimal")
    except Infeasible:
        assert best == np.inf
        return
    assert opt.cost == pytest.approx(best, rel=1e-9)


def test_unreachable_loss_target_says_what_is_reachable():
    # (ℓmax 0.5 used to be "reached after 44,018 time units": by a schedule whose mean loss is −0.47)
    s = with_target(load_scenario("paper-alexnet"), loss=3.0, deadline=20_000.0)
    with pytest.raises(Infeasible) as e:
        make_plan(s, "depl", Options(eta=60))
    msg = str(e.value)
    assert "lowest reachable 0.99-quantile is" in msg and "constraint (3)" in msg
    assert e.value.best_quantile is not None and e.value.best_quantile > 3.0
    # and that quantile is indeed reachable: planning for it succeeds
    ok = make_plan(with_target(s, loss=e.value.best_quantile + 0.05), "depl")
    assert ok.loss_quantile <= e.value.best_quantile + 0.05
    assert e.value.shortest_time is not None and e.value.shortest_time > 20_000.0


def test_too_short_deadline_names_the_deadline():
    s = with_target(load_scenario("paper-alexnet"), deadline=100.0)
    with pytest.raises(Infeasible, match="constraint \\(4\\), target.deadline"):
        make_plan(s, "depl")


class Pessimist(IncrementsModel):
    """Another loss model: every epoch makes 20% less progress (same interface)."""

    def terms(self, schedule, phi=1.0):
        return super().terms(schedule, 0.8 * phi)

    def simulate(self, schedule, phi, runs, rng):
        return super().simulate(schedule, 0.8 * phi, runs, rng)

    def epoch_cumulants(self, K, phi=1.0):
        return super().epoch_cumulants(K, 0.8 * phi)


def test_another_loss_model_plugs_into_every_planner():
    s = with_target(load_scenario("paper-mobilenet"), loss=10.0)
    loss = Pessimist(s)
    for m in METHODS:
        own, other = make_plan(s, m), make_plan(s, m, loss=loss)
        assert other.cost > own.cost  # slower progress needs more training
        sim = simulate_plan(other, runs=20_000, loss=loss)
        assert sim.p_meet_ci[1] >= s.target.quantile


def two_datasets(deadline: float):
    d = scenario_dict(load_scenario("paper-mobilenet"))
    d["datasets"] = [{"name": "small", "samples": 5000}, {"name": "large", "samples": 45000}]
    d["data_law"] = {"s0": 20000.0, "reference_samples": 50000.0}
    d["target"]["loss"], d["target"]["deadline"] = 12.0, deadline
    return d


def test_dataset_choice_is_the_cheapest_of_the_close_candidates():
    d = two_datasets(20_000.0)
    plan = make_plan(parse_scenario(d), "depl")
    costs = {}
    for keep in (["large"], ["small", "large"]):
        d2 = {**d, "datasets": [x for x in d["datasets"] if x["name"] in keep]}
        costs[tuple(keep)] = make_plan(parse_scenario(d2), "depl").cost
    assert plan.cost == pytest.approx(min(costs.values()), rel=1e-9)
    assert tuple(plan.datasets) == min(costs, key=costs.get)


def test_ranked_subsets_prefer_the_shortest_full_model_training():
    from depl.planners.datasets import objective, ranked_subsets

    s = parse_scenario(two_datasets(20_000.0))
    ranked = ranked_subsets(s)
    assert set(ranked) == {("small",), ("large",), ("small", "large")}
    loss = IncrementsModel(s)
    values = [objective(s, loss, r) for r in ranked]
    assert values == sorted(values)


def test_switching_plan_on_edge_clusters_with_transfer_costs_matches_optimal():
    """Two versions, a cloud and a 4-node edge cluster, two datasets with β:
    the cheapest plan switches after a few epochs of the full model (a plan
    one boundary-move plus one epoch away from DepL's first answer)."""
    from depl.scenario import load_scenario as load

    s = load(Path(__file__).with_name("edge-demo.toml"))
    depl, opt = make_plan(s, "depl"), make_plan(s, "optimal")
    assert len(opt.info["segments"]) == 2
    assert depl.cost <= opt.cost * 1.01
    assert opt.cost <= depl.cost * (1 + 1e-9)


@pytest.mark.parametrize("target", [9.0, 11.0])
def test_noisy_fast_version_is_avoided_like_the_optimum_does(target):
    """paper-alexnet with fast-unsteady's Var[x] ×10: the optimum trains the
    intermediate version only; a single-start search stuck at fast-unsteady
    (31–47% dearer) before the loop was started from every version's regime."""
    s = load_scenario("paper-alexnet")
    fu = s.models[0]
    s = s.model_copy(update={
        "models": [fu.model_copy(update={"noise": fu.noise.model_copy(update={"var": 0.31})}), *s.models[1:]],
        "target": s.target.model_copy(update={"loss": target})})
    depl, opt, best = (make_plan(s, m) for m in METHODS)
    assert depl.cost <= opt.cost * 1.01
    assert best.cost > depl.cost * 1.2  # here the quantile matters: best-exp pays for the mean


def test_many_datasets_go_through_submodular_minimisation():
    """Beyond 12 datasets stage 1 minimises eq. (7) with the min-norm-point
    algorithm instead of enumerating 2^|D| subsets; the result is compared
    with the best subset found by enumerating the achievable sample totals."""
    from depl.loss import loss_model_for
    from depl.planners.datasets import ENUMERATE_UP_TO, objective, ranked_subsets

    d = scenario_dict(load_scenario("paper-mobilenet"))
    sizes = [1500, 2500, 4000, 3000, 6000, 2000, 5000, 3500, 4500, 1000, 7000, 2500, 3000, 5500]
    d["datasets"] = [{"name": f"src{i}", "samples": float(n)} for i, n in enumerate(sizes)]
    d["data_law"] = {"s0": 15000.0, "reference_samples": 50000.0}
    d["target"]["loss"] = 12.0
    s = parse_scenario(d)
    assert len(s.datasets) > ENUMERATE_UP_TO
    loss = loss_model_for(s)
    ranked = ranked_subsets(s, loss)
    first = ranked[0]
    assert first and set(first) <= {x.name for x in s.datasets}
    # Here eq. (7) depends on the datasets only through their total samples:
    # enumerate every achievable total once (with one subset that reaches it).
    reach: dict[float, tuple[str, ...]] = {}
    for i, n in enumerate(sizes):
        for total, sub in list(reach.items()) + [(0.0, ())]:
            reach.setdefault(total + n, sub + (f"src{i}",))
    best = min(objective(s, loss, sub) for sub in reach.values())
    assert objective(s, loss, first) <= best * 1.05
    paper = make_plan(s, "depl", Options(dataset_rule="paper"))
    assert paper.feasible and set(paper.datasets) in [set(r) for r in ranked]
    # The default ranks by eq. (2) with the same minimiser beyond 12 datasets, and is no dearer.
    from depl.planners.datasets import ranked_by_cost

    plan = make_plan(s, "depl")
    assert set(plan.datasets) in [set(r) for _, r, _ in ranked_by_cost(s, loss, Options())]
    assert plan.cost <= paper.cost * (1 + 1e-9)
