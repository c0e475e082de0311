"""The closed-loop policy checked on the loss law itself (pure computation, no training).

Monte Carlo runs of the law along a plan: the policy decides after epochs,
a run whose rest changes continues by the law conditioned on its state.
The sound rule keeps the marginal coverage and costs less on average; the
naive rule ("any continuation at conditional P ≥ ω") spends the slack of the
lucky runs and loses coverage on the same draws."""

from __future__ import annotations

import numpy as np
from scipy import stats
import pytest

from depl.adaptive import Policy, Rule, monte_carlo
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict
from depl.state import START


def scenario(law: str, calibrated: bool = False, **target):
    """mnist1d-small under `law`, as fitted (its [calibration] dropped) unless `calibrated`."""
    d = scenario_dict(load_scenario("mnist1d-small"))
    if not calibrated:
        d.pop("calibration", None)
    d["loss_model"] = law
    d["target"] = {**d["target"], **target}
    return parse_scenario(d)


@pytest.fixture(scope="module", params=["level", "increments"])
def planned(request):
    s = scenario(request.param)
    return s, make_plan(s, "depl")


def test_stopping_keeps_coverage_and_costs_less(planned):
    s, plan = planned
    mc = monte_carlo(Policy(plan, s, rule=Rule(replan=False, truncate=False)), 800, seed=3)
    # the law's own runs: a run stops only with its loss at or below ℓmax, so it succeeds wherever the
    # open loop does (same draws), and the marginal coverage is at least the open loop's
    assert mc.coverage >= mc.open_coverage
    assert mc.interval()[1] >= plan.omega and mc.interval(closed=False)[1] >= plan.omega
    assert mc.actions.get("stop", 0) > 0
    assert mc.cost.mean() < 0.95 * mc.open_cost


def test_conditioned_rule_is_sound_and_the_naive_rule_is_not():
    s = scenario("level")
    plan = make_plan(s, "depl")
    sound = monte_carlo(Policy(plan, s, rule=Rule(replan=False)), 300, seed=1, every=4)
    naive = monte_carlo(Policy(plan, s, rule=Rule(replan=False, naive=True)), 300, seed=1, every=4)
    assert sound.interval()[1] >= plan.omega and sound.cost.mean() < sound.open_cost
    # same draws up to the first decision: the naive rule cuts more runs short and loses coverage for it
    assert naive.actions.get("replan", 0) > sound.actions.get("replan", 0)
    assert naive.coverage < sound.coverage


def test_a_decision_never_lowers_the_conditional_probability():
    s = scenario("level")
    plan = make_plan(s, "depl")
    pol = Policy(plan, s)
    rng = np.random.default_rng(0)
    path = pol.loss.simulate(plan.schedule, pol.phi, 1, rng)[0]
    state = START
    for e in plan.epochs[:6]:
        state = state.after(e.model, float(path[state.epoch + 1]), pol.planned_time(e), pol.cost_of(e, state.clusters),
                            e.cluster)
    d = pol.decide(state, plan.epochs[6:])
    assert d.p_new >= d.p_plan and d.epoch == 6 and d.observed == path[6]
    if d.action != "continue":
        assert d.saved > 0


@pytest.mark.parametrize("conditional", [True, False])  # the slack rule (`--rule slack`) keeps deadline re-plans
def test_a_slow_cluster_triggers_a_replan_that_meets_the_deadline(conditional):
    s = scenario("level")
    plan = make_plan(s, "depl")
    assert plan.time == pytest.approx(s.target.deadline, rel=1e-6)  # no slack: any slowdown overruns
    slow = plan.epochs[0].cluster
    pol = Policy(plan, s, rule=Rule(replan=False, truncate=False, conditional=conditional))
    e = plan.epochs[0]
    secs = 1.5 * pol.planned_time(e)
    pol.observe(e, secs)
    state = START.after(e.model, 2.25, secs, pol.cost_of(e), e.cluster)
    d = pol.decide(state, plan.epochs[1:])
    assert d.action == "deadline-replan", d.note
    assert state.time_spent + sum(pol.time_of(x) for x in d.rest) <= s.target.deadline * (1 + 1e-9)
    assert any(x.cluster != slow for x in d.rest)  # moved (at least partly) off the slow cluster
    # every cluster 50 times slower: nothing meets the target by the deadline, and the policy says so
    pol = Policy(plan, s, slow={c.name: 50.0 for c in s.clusters})
    d = pol.decide(state, plan.epochs[1:])
    assert d.action == "deadline-miss" and "Tmax" in d.note


def test_a_calibrated_law_that_cannot_be_conditioned_keeps_the_plan():
    """mnist1d-small ships calibrated at the plan's length: its early epochs' levels sit at 0 or 1, where the
    law cannot be conditioned on a run's state. The policy then keeps the plan (no replacement, only sure stops):
    coverage at least the open loop's on the same draws, no crash."""
    s = scenario("level", calibrated=True)
    plan = make_plan(s, "depl")
    mc = monte_carlo(Policy(plan, s), 200, seed=5, every=4)
    assert mc.coverage >= mc.open_coverage
    assert mc.cost.mean() <= mc.open_cost * (1 + 1e-9)


def test_stops_that_spend_the_plans_slack_keep_omega_and_cost_less(planned):
    """The law-free closed loop (`conditional=False`; `depl run --adaptive`'s default rule, slack): a run stops
    when its model's test loss exceeds ℓmax with probability at most δ = V₀ − ω, the policy observing each epoch's loss
    through a validation split's noise (gap 0.05). On the same draws the stops cost at most δ per stopped run
    of the open loop's coverage, the marginal coverage is not refuted, and the mean cost falls. Claiming more
    slack than the plan has (δ = 0.3) loses coverage below ω: the budget is what keeps the guarantee."""
    s, plan = planned
    n = 2000
    pol = Policy(plan, s, rule=Rule(replan=False, truncate=False, conditional=False))
    assert pol.slack == pytest.approx(pol.initial().p_new - plan.omega) and pol.slack > 0
    mc = monte_carlo(pol, n, seed=5, gap=0.05)
    stops = mc.actions.get("stop", 0)
    assert stops > 0.2 * n and mc.cost.mean() < 0.95 * mc.open_cost
    spent = pol.slack * stops / n  # the most the stops may take, in expectation
    assert mc.open_coverage - mc.coverage <= spent + 3 * np.sqrt(spent / n)
    assert mc.interval()[1] >= plan.omega
    stops_only = Rule(replan=False, truncate=False, conditional=False)
    none = monte_carlo(Policy(plan, s, slack=0.0, rule=stops_only), n, seed=5,
                       gap=0.05)
    assert none.coverage == none.open_coverage and none.cost.mean() > mc.cost.mean()  # only sure stops
    greedy = monte_carlo(Policy(plan, s, slack=0.3, rule=stops_only), n, seed=5,
                         gap=0.05)
    assert greedy.interval()[1] < plan.omega  # refuted


def test_a_slack_stop_needs_the_validation_loss_below_lmax_by_the_gaps_quantile():
    s = scenario("level")
    plan = make_plan(s, "depl")
    pol = Policy(plan, s, gap_sd=0.05, rule=Rule(replan=False, truncate=False, conditional=False))
    bar = plan.loss_target - stats.norm.ppf(1 - pol.slack) * pol.gap_sd  # the highest loss a stop accepts
    state = START
    for e in plan.epochs[:5]:
        state = state.after(e.model, 2.0, pol.planned_time(e), pol.cost_of(e, state.clusters), e.cluster)
    for loss, action in ((bar - 1e-3, "stop"), (bar + 1e-3, "continue")):
        d = pol.decide(state.after(plan.epochs[5].model, loss, 1.0, 1.0, plan.epochs[5].cluster), plan.epochs[6:])
        assert d.action == action, (loss, bar, d.note)
    assert "slack" in d.note or d.action == "continue"


def test_the_slack_is_the_plans_before_the_first_epoch_whenever_it_is_first_read():
    """δ = V₀ − ω is fixed before the run: a policy that first reads it after observing slow epochs (a seed resumed, or
    one that left the stack, in a new policy that replays its recorded epochs) gets the δ an uninterrupted run has,
    not that of a plan re-planned at the measured speeds."""
    s = load_scenario("digits-small")
    plan = make_plan(s, "depl")
    fresh = Policy(plan, s, rule=Rule(conditional=False))
    late = Policy(plan, s, rule=Rule(conditional=False))
    for e in plan.epochs[:3]:
        late.observe(e, 2 * late.planned_time(e))   # the cluster ran twice as slow: the plan no longer fits Tmax
    assert not late.fits(plan.epochs, START)
    assert late.slack == fresh.slack > 0
    assert late.factor(plan.epochs[0].cluster) == pytest.approx(2.0)   # what it measured is kept


def test_the_command_line_offers_exactly_the_rules_the_loop_knows():
    """The rules are named once (depl.adaptive.RULES); the CLI's choices, kept import-light, must agree."""
    from depl.adaptive import DEFAULT_RULE, RULES
    from depl.cli.training import Rule
    from depl.train.executors import names

    assert {r.value for r in Rule} == set(RULES) and DEFAULT_RULE in RULES
    assert {"loop", "stack", "processes", "ray"} <= set(names())
