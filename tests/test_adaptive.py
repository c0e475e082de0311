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

from depl.adaptive import ConditionalRule, NaiveRule, Policy, SlackRule, monte_carlo, simulated_gap
from depl.certificate import Certificate, Kind, Outcome, anytime_lower, clopper_pearson_lower
from depl.loss import loss_model_for
from depl.planners import Options, make_plan
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
    mc = monte_carlo(Policy(plan, s, rule=ConditionalRule(replan=False, truncate=False)), 800, seed=3)
    # the law's own runs: a run stops only with its loss at or below ℓmax, so it succeeds wherever the
    # open loop does (same draws), and the marginal coverage is at least the open loop's
    assert mc.coverage >= mc.open_coverage
    assert mc.interval()[1] >= plan.omega and mc.interval(closed=False)[1] >= plan.omega
    assert mc.actions.get("stop", 0) > 0
    assert mc.cost.mean() < 0.95 * mc.open_cost


def test_conditioned_rule_is_sound_and_the_naive_rule_is_not():
    s = scenario("level")
    plan = make_plan(s, "depl")
    sound = monte_carlo(Policy(plan, s, rule=ConditionalRule(replan=False)), 300, seed=1, every=4)
    naive = monte_carlo(Policy(plan, s, rule=NaiveRule(replan=False)), 300, seed=1, every=4)
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


# the conditional rule's stops, and the slack rule (`--rule slack`): both keep deadline re-plans
@pytest.mark.parametrize("rule", [ConditionalRule(replan=False, truncate=False), SlackRule()])
def test_a_slow_cluster_triggers_a_replan_that_meets_the_deadline(rule):
    s = scenario("level")
    plan = make_plan(s, "depl")
    assert plan.time == pytest.approx(s.target.deadline, rel=1e-6)  # no slack: any slowdown overruns
    slow = plan.epochs[0].cluster
    pol = Policy(plan, s, rule=rule)
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


@pytest.mark.slow  # the planner inside the closed loop, 100 runs
def test_a_calibrated_law_that_cannot_be_conditioned_keeps_the_plan():
    """mnist1d-small ships calibrated at the plan's length: its early epochs' levels sit at 0 or 1, where the
    law cannot be conditioned on a run's state. The policy then keeps the plan (no replacement, only sure stops):
    coverage at least the open loop's on the same draws, no crash. The re-plans search without the planner's polish
    (Options(polish=False)): the rule that accepts a rest is the same, and the polish took 90 % of the time."""
    s = scenario("level", calibrated=True)
    plan = make_plan(s, "depl")
    quick = Options(eta=60, dataset_candidates=1, polish=False)   # Policy's own planner options, but the polish
    # 100 runs: 2 of them miss ℓmax in the open loop, so the coverage compared is not 1 on both sides
    mc = monte_carlo(Policy(plan, s, options=quick), 100, seed=5, every=4)
    assert mc.coverage >= mc.open_coverage
    assert mc.cost.mean() <= mc.open_cost * (1 + 1e-9)


@pytest.mark.slow  # three Monte Carlos of 2,000 runs per law
def test_stops_that_spend_the_plans_slack_keep_omega_and_cost_less(planned):
    """The law-free closed loop (`conditional=False`; `depl run --adaptive`'s default rule, slack): a run stops
    when its model's test loss exceeds ℓmax with probability at most δ, the policy observing each epoch's loss
    through a validation split's noise (gap 0.05). δ = V₀ − ω here, the law's own slack, given by the caller (the law
    is the truth in this Monte Carlo; an uncalibrated law's plan has no certified slack, so the policy finds δ = 0
    itself). On the same draws the stops cost at most δ per stopped run of the open loop's coverage, the marginal
    coverage is not refuted, and the mean cost falls. Claiming more slack than the plan has (δ = 0.3) loses coverage
    below ω: the budget is what keeps the guarantee."""
    s, plan = planned
    n = 2000
    own = Policy(plan, s, rule=SlackRule())
    assert own.slack == 0.0 and own.slack_record.source == "none"      # nothing certifies the law's slack
    v0 = own.initial().p_new
    pol = Policy(plan, s, rule=SlackRule(), slack=v0 - plan.omega)
    assert pol.slack == pytest.approx(v0 - plan.omega) and pol.slack > 0
    assert pol.slack_record.source == "given" and "not certified" in pol.slack_record.describe()
    mc = monte_carlo(pol, n, seed=5, gap=0.05)
    stops = mc.actions.get("stop", 0)
    assert stops > 0.2 * n and mc.cost.mean() < 0.95 * mc.open_cost
    spent = pol.slack * stops / n  # the most the stops may take, in expectation
    assert mc.open_coverage - mc.coverage <= spent + 3 * np.sqrt(spent / n)
    assert mc.interval()[1] >= plan.omega
    stops_only = SlackRule()
    none = monte_carlo(Policy(plan, s, slack=0.0, rule=stops_only), n, seed=5,
                       gap=0.05)
    assert none.coverage == none.open_coverage and none.cost.mean() > mc.cost.mean()  # only sure stops
    greedy = monte_carlo(Policy(plan, s, slack=0.3, rule=stops_only), n, seed=5,
                         gap=0.05)
    assert greedy.interval()[1] < plan.omega  # refuted


def test_a_slack_stop_needs_the_validation_loss_below_lmax_by_the_gaps_quantile():
    s = scenario("level")
    plan = make_plan(s, "depl")
    pol = Policy(plan, s, gap_sd=0.05, rule=SlackRule(), slack=0.03)
    bar = plan.loss_target - stats.norm.ppf(1 - pol.slack) * pol.gap_sd  # the highest loss a stop accepts
    state = START
    for e in plan.epochs[:5]:
        state = state.after(e.model, 2.0, pol.planned_time(e), pol.cost_of(e, state.clusters), e.cluster)
    for loss, action in ((bar - 1e-3, "stop"), (bar + 1e-3, "continue")):
        d = pol.decide(state.after(plan.epochs[5].model, loss, 1.0, 1.0, plan.epochs[5].cluster), plan.epochs[6:])
        assert d.action == action, (loss, bar, d.note)
    assert "slack" in d.note or d.action == "continue"


def test_the_slack_is_the_plans_before_the_first_epoch_whenever_it_is_first_read():
    """δ is fixed before the run: a policy that first reads it after observing slow epochs (a seed resumed, or
    one that left the stack, in a new policy that replays its recorded epochs) gets the δ an uninterrupted run has,
    not that of a plan re-planned at the measured speeds (which no certificate covers: none)."""
    plan = slack_plan(0.02).plan
    fresh = Policy(plan, rule=SlackRule())
    late = Policy(plan, rule=SlackRule())
    for e in plan.epochs[:3]:
        late.observe(e, 2 * late.planned_time(e))   # the cluster ran twice as slow: the plan no longer fits Tmax
    assert not late.fits(plan.epochs, START)
    assert late.slack == fresh.slack == pytest.approx(0.02)
    assert late.factor(plan.epochs[0].cluster) == pytest.approx(2.0)   # what it measured is kept


def test_the_command_line_offers_exactly_the_rules_the_loop_knows():
    """The rules are named once (depl.adaptive.RULES); the CLI's choices, kept import-light, must agree."""
    from depl.adaptive import DEFAULT_RULE, RULES
    from depl.cli.training import Rule as RuleChoice
    from depl.train.backends.executors import names

    assert {r.value for r in RuleChoice} == set(RULES) and DEFAULT_RULE in RULES
    assert {"loop", "stack", "processes", "ray"} <= set(names())


# --------------------------------------------------------------------------- #
# δ from the lower confidence bound, the gap measured (docs/adaptive.md, "Stops that spend the plan's slack")
# --------------------------------------------------------------------------- #

STOPS = SlackRule()  # `--rule slack`


def certified(plan, runs: int, met: int, alpha: float = 0.05, experiments: int = 1):
    """The plan with a certificate of `met` of `runs` calibration runs meeting ℓmax at its ω (as `depl plan --alpha`
    writes it)."""
    from dataclasses import replace

    cert = Certificate(Kind.CALIBRATION, Outcome.CERTIFIED, plan.omega, plan.loss_target, alpha, alpha, runs, met,
                       evidence={"experiments": experiments})
    return replace(plan, info={**plan.info, "certificate": cert.to_json()})


def certificate_file(plan, runs: int, hits: int, alpha: float = 0.05, **changed) -> dict:
    """A `depl certify` certificate of `plan` as its file reads: `hits` of `runs` fresh runs met ℓmax (`changed`:
    its fields, or its evidence's: scenario, method, epochs)."""
    evidence = {"plan_file": "plan.json", "method": plan.method, "scenario": plan.scenario, "epochs": len(plan.epochs)}
    moved = {k: changed.pop(k) for k in list(changed) if k in evidence}
    c = Certificate(Kind.SEQUENTIAL, Outcome.CERTIFIED, plan.omega, plan.loss_target, alpha, alpha, runs, hits,
                    ((1, runs),), None, {**evidence, **moved})
    return {**c.to_json(), **changed}


@pytest.fixture(scope="module")
def slack_plan_02():
    from depl.workflows.planning import plan as plan_workflow

    return plan_workflow(scenario("level", calibrated=True, quantile=0.9), slack=0.02)


def slack_plan(d: float):
    """mnist1d-small's calibrated plan made by `depl plan --slack D` (at ω = 0.9): certified at ω + D."""
    from depl.workflows.planning import plan as plan_workflow

    return plan_workflow(scenario("level", calibrated=True, quantile=0.9), slack=d)


def test_a_bound_read_after_the_planners_choice_yields_no_slack():
    """The attack: a plan certified at ω by the calibration runs' fixed sequence, whose runs would put the
    Clopper–Pearson lower bound of its success probability well above ω (960 of 1,000) — read after the planner
    chose it on those very runs, which the fixed sequence does not protect. It yields δ = 0, said so; so does the
    calibrated law's own count (what `success_bound` read), and an uncalibrated law's P."""
    s = scenario("level", calibrated=True, quantile=0.9)
    plan = make_plan(s, "depl")
    assert clopper_pearson_lower(960, 1000, 0.05) > plan.omega + 0.04
    for p in (plan, certified(plan, 1000, 960)):
        pol = Policy(p, s, rule=STOPS)
        pol.initial()
        r = pol.slack_record
        assert pol.slack == 0.0 and r.source == "none" and "no certified slack" in r.describe()
        assert "no certified slack" in pol.statement() and "--slack" in r.why
    loose = scenario("level")
    pol = Policy(make_plan(loose, "depl"), loose, rule=STOPS)
    assert pol.initial().p_new > pol.omega + 0.02 and pol.slack == 0.0 and pol.slack_record.source == "none"


def test_slack_d_certifies_the_plan_at_omega_plus_d_and_spends_d(slack_plan_02):
    """`depl plan --slack 0.02` at ω = 0.9: the plan is planned and certified at ω′ = 0.92 through the fixed
    sequence (the law at ω′ certifies its schedule, on its own runs at α/E), records ω′ and the promise ω; the
    closed loop's ω is the promise and δ = ω′ − ω = 0.02, with confidence 1 − α over the calibration runs."""
    planned = slack_plan_02
    plan, s = planned.plan, planned.scenario
    c = Certificate.of_plan(plan.info)
    assert plan.omega == pytest.approx(0.92) and s.target.quantile == pytest.approx(0.92)
    assert c.omega == pytest.approx(0.92) and c.promise == pytest.approx(0.9) and c.certified
    ok, runs, met = loss_model_for(s).certificate(plan.schedule, s.phi(s.samples(plan.datasets)))
    assert ok and (runs, met) == (c.runs, c.hits)
    at_omega = make_plan(scenario("level", calibrated=True, quantile=0.9), "depl")
    assert plan.cost >= at_omega.cost      # the stricter level costs at least as much
    pol = Policy(plan, rule=STOPS)
    assert pol.omega == pytest.approx(0.9) and pol.initial().action == "continue"
    r = pol.slack_record
    assert r.source == "plan" and pol.slack == pytest.approx(0.02) and r.lower == pytest.approx(0.92)
    assert r.alpha == pytest.approx(0.05) and (r.runs, r.met, r.omega) == (runs, met, pytest.approx(0.9))
    words = pol.statement()
    assert "with confidence 0.95 over the calibration runs" in words and "P(success) ≥ 0.92" in words
    assert "modelled Gaussian gap" in words and "ω = 0.9" in words


def test_slack_d_is_refused_where_nothing_certifies_it():
    from depl.workflows.errors import BadInput
    from depl.workflows.planning import plan as plan_workflow

    with pytest.raises(BadInput, match="uncalibrated law"):
        plan_workflow(scenario("level"), slack=0.02)
    for bad in (0.0, -0.1, 0.2, float("nan")):
        with pytest.raises(BadInput, match="--slack"):
            plan_workflow(scenario("level", calibrated=True, quantile=0.9), slack=bad)


@pytest.mark.parametrize("runs, hits", [(60, 59), (300, 290), (1000, 960), (30, 29)])
def test_delta_of_a_certificate_file_is_its_anytime_lower_bound_minus_omega(runs, hits):
    """Fresh runs of the plan returned (`depl certify`, after the choice): δ = max(0, L − ω), L the sequential test's
    anytime-valid lower bound at the certificate's α — the bound its Verdict reports —, below the point estimate."""
    from depl.certificate import Verdict

    s = scenario("level")
    plan = make_plan(s, "depl")
    v = Verdict("certified", runs, hits, plan.omega, 0.05, 0.0, 0.0)   # what the certificate file reports
    assert v.to_json()["lower_bound"] <= clopper_pearson_lower(hits, runs, 0.05)   # anytime-valid: more cautious
    pol = Policy(plan, s, rule=STOPS, certificate=certificate_file(plan, runs, hits), certificate_source="c.json")
    pol.initial()
    r = pol.slack_record
    assert r.source == "certificate" and (r.runs, r.met, r.alpha) == (runs, hits, 0.05)
    assert r.lower == pytest.approx(v.lower, rel=1e-12) and r.lower < hits / runs
    assert pol.slack == pytest.approx(max(0.0, v.lower - plan.omega), abs=1e-12)
    assert "c.json" in r.describe() and "fresh runs" in r.describe()
    if pol.slack > 0:
        assert "over the certificate's" in pol.statement()


def test_a_certificate_of_another_plan_is_refused():
    s = scenario("level")
    plan = make_plan(s, "depl")
    for changed, field in (({"epochs": len(plan.epochs) + 1}, "epochs"), ({"omega": 0.95}, "omega"),
                           ({"scenario": "digits-small"}, "scenario"), ({"loss_target": 1.4}, "loss_target"),
                           ({"format": "depl.plan/1"}, "format"), ({"hits": 61}, "hits"), ({"alpha": 0.7}, "alpha")):
        with pytest.raises(ValueError, match=field):
            moved = {k: v for k, v in changed.items() if k in ("epochs", "scenario")}   # its evidence
            cert = {**certificate_file(plan, 60, 59, **moved), **{k: v for k, v in changed.items() if k not in moved}}
            Policy(plan, s, certificate=cert)


def test_no_slack_where_the_lower_bound_is_below_omega_and_then_no_stop_but_a_sure_one():
    s = scenario("level")
    plan = make_plan(s, "depl")
    pol = Policy(plan, s, rule=STOPS, gap_sd=0.05, certificate=certificate_file(plan, 30, 29))
    assert pol.slack == 0.0 and pol.slack_record.lower < plan.omega < 29 / 30
    state = START
    for e in plan.epochs[:5]:
        state = state.after(e.model, 2.0, pol.planned_time(e), pol.cost_of(e, state.clusters), e.cluster)
    # far below ℓmax, yet P(test loss > ℓmax) > 0 = δ under the gap model: the run goes on
    d = pol.decide(state.after(plan.epochs[5].model, plan.loss_target - 0.2, 1.0, 1.0, plan.epochs[5].cluster),
                   plan.epochs[6:])
    assert d.action == "continue"


def test_a_run_that_does_not_train_the_plan_as_certified_has_no_slack(slack_plan_02):
    """Less data than the plan's (a carved validation split): the certificate is of another φ, δ = 0."""
    plan = slack_plan_02.plan
    pol = Policy(plan, rule=STOPS, samples=0.9 * plan.scenario_object().samples(plan.datasets))
    pol.initial()
    assert pol.slack == 0.0 and "as certified" in pol.slack_record.why


def test_monte_carlo_delta_from_fresh_runs_keeps_omega():
    """The law is the truth here: a certificate is counted on 1,000 fresh runs of it, δ read from its anytime lower
    bound, and the closed loop spends it on the law's runs observed through a validation gap (sd 0.05). The coverage
    holds at ω. Over many such certificates (the runs' draw), the bound overstates the plan's true success
    probability in at most ~α of them; the point estimate met/runs in about half."""
    s = scenario("level")
    plan = make_plan(s, "depl")
    law = loss_model_for(s)
    phi = s.phi(s.samples(plan.datasets))
    final = law.simulate(plan.schedule, phi, 1000, np.random.default_rng([11, 7]))[:, -1]
    hits = int(np.sum(final <= plan.loss_target))
    pol = Policy(plan, s, rule=STOPS, certificate=certificate_file(plan, 1000, hits))
    assert pol.slack_record.source == "certificate" and pol.slack > 0
    n = 2000
    mc = monte_carlo(pol, n, seed=5, gap=0.05)
    lost, stops = np.sum((mc.open_final <= mc.target) & (mc.final > mc.target)), mc.actions.get("stop", 0)
    assert stops > 0.2 * n
    assert lost <= pol.slack * n + 3 * np.sqrt(pol.slack * n)   # the stops spend at most δ
    assert mc.coverage >= plan.omega and mc.interval()[1] >= plan.omega
    p = float(np.mean(law.simulate(plan.schedule, phi, 200_000, np.random.default_rng(3))[:, -1] <= plan.loss_target))
    rng = np.random.default_rng(17)
    draws = 400
    over_lower = over_point = 0
    for met in rng.binomial(1000, p, size=draws):
        over_lower += anytime_lower(int(met), 1000, 0.05) > p
        over_point += met / 1000 > p
    assert over_lower / draws <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / draws)
    assert over_point / draws > 0.3


def test_monte_carlo_stops_by_a_measured_gap_spend_at_most_delta():
    """The gap measured on 1,000 other runs of the law (the same observation noise): a stop needs the validation loss
    below ℓmax by the measured maxima's conformal (1 − δ)-quantile; on the same draws the stops lose at most δ of the
    open loop's runs — whatever δ: the bound is the gap's, not the plan's —, and more slack buys cheaper runs.
    (The law's noise is independent from epoch to epoch, so a seed's largest gap is well above one epoch's: these
    stops spend far less than δ; real runs' gaps move little from epoch to epoch, docs/adaptive.md.)"""
    s = scenario("level")
    plan = make_plan(s, "depl")
    gap = simulated_gap(Policy(plan, s), 1000, 0.05, seed=2)
    pol = Policy(plan, s, rule=STOPS, gap=gap, slack=0.02)
    assert "marginally over the" in pol.statement() and "not certified" in pol.statement()
    assert pol.rule_record()["gap"]["model"] == "measured" and pol.rule_record()["gap"]["seeds"] == gap.seeds
    n = 2000
    mc = monte_carlo(pol, n, seed=5, gap=0.05)
    assert mc.actions.get("stop", 0) > 0.2 * n and mc.cost.mean() < mc.open_cost
    assert mc.interval()[1] >= plan.omega
    greedy = monte_carlo(Policy(plan, s, rule=STOPS, gap=gap, slack=0.3), n, seed=5, gap=0.05)
    for run, delta in ((mc, pol.slack), (greedy, 0.3)):
        lost = np.sum((run.open_final <= run.target) & (run.final > run.target))
        assert lost <= delta * n + 3 * np.sqrt(delta * n)
    assert greedy.cost.mean() < mc.cost.mean() and greedy.coverage < mc.coverage


def test_a_measured_gap_stops_a_run_exactly_below_lmax_minus_its_conformal_quantile():
    from depl.certificate import conformal
    from depl.gap import MeasuredGap

    s = scenario("level")
    plan = make_plan(s, "depl")
    maxima = tuple(sorted(np.random.default_rng(4).normal(0.01, 0.005, size=299)))
    gap = MeasuredGap(maxima, plan.loss_target)
    pol = Policy(plan, s, rule=STOPS, gap=gap, slack=0.02)
    t = gap.threshold(0.02)
    assert t == maxima[int(np.ceil(300 * 0.98)) - 1] == conformal.upper(np.array(maxima), 0.98)  # the 294th of 299
    state = START
    for e in plan.epochs[:5]:
        state = state.after(e.model, 2.0, pol.planned_time(e), pol.cost_of(e, state.clusters), e.cluster)
    for loss, action in ((plan.loss_target - t - 1e-9, "stop"), (plan.loss_target - t, "continue")):
        d = pol.decide(state.after(plan.epochs[5].model, loss, 1.0, 1.0, plan.epochs[5].cluster), plan.epochs[6:])
        assert d.action == action, (loss, t, d.note)
    assert gap.exceed(plan.loss_target + 1e-9) == 1.0                  # never a stop above ℓmax
    assert MeasuredGap(maxima[:40], plan.loss_target).threshold(0.02) == np.inf   # 40 seeds cannot certify δ = 0.02
    with pytest.raises(ValueError, match="ℓmax"):
        Policy(plan, s, gap=MeasuredGap(maxima, plan.loss_target + 0.1))


def test_the_gap_measured_on_a_committed_adaptive_store_is_each_seeds_largest_below_lmax():
    """docs/adaptive-store's mnist1d-small runs (ω 0.9, 200 seeds, validation and test loss after every epoch up to
    each seed's stop): depl.gap reads, per seed, the largest test − validation loss over its epochs with validation
    loss ≤ 1.5 — recomputed here from the SQLite file directly. A store of other data is refused."""
    import sqlite3
    from pathlib import Path

    from depl.gap import measure

    store = Path(__file__).resolve().parents[1] / "docs" / "adaptive-store" / "mnist1d-small-w0.9-calibrated"
    db = sqlite3.connect(f"file:{store / 'runs.sqlite'}?mode=ro", uri=True)
    ((spec,),) = db.execute("SELECT spec FROM runs").fetchall()
    import json

    data = json.loads(spec)["job"]["data"]
    rows = db.execute("SELECT e.seed, e.test_loss - d.observed FROM epochs e JOIN decisions d ON e.run_id = d.run_id "
                      "AND e.seed = d.seed AND e.epoch = d.epoch WHERE d.observed <= 1.5").fetchall()
    want: dict[int, float] = {}
    for seed, g in rows:
        want[seed] = max(want.get(seed, -np.inf), g)
    gap = measure([store], 1.5, data)
    assert gap.seeds == len(want) == 189 and np.allclose(gap.maxima, sorted(want.values()), atol=1e-12)
    assert gap.pairs == db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
    # the realised gap is far tighter than the sample-count model's sd (0.023 here): its 0.99-bound about 0.013
    assert 0.0 < gap.threshold(0.0106) < 0.02 < 2.3 * 0.023
    with pytest.raises(ValueError, match="same source"):
        measure([store], 1.5, {**data, "validation": 0.5})


# --------------------------------------------------------------------------- #
# The whole chain after selection (scripts/adaptive_selection.py; its full table in docs/adaptive.md)
# --------------------------------------------------------------------------- #

def test_after_selection_the_closed_loop_keeps_omega_with_confidence_and_uncertified_slack_does_not():
    """Calibration draw → the planner's fixed sequence at ω′ = ω + D → the closed loop spending δ = D, on a landscape
    whose truth is known (1,000 calibration runs: certification is tight, the plan returned sits near ω′). Over the
    calibration draws, P(the closed loop's coverage < ω) ≤ α — with the gap measured on 200 runs (its coverage
    averaged over their draw) and with the modelled one. Spending D on a plan certified at ω only fails the same
    check: the test sees the difference."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "adaptive_selection.py"
    spec = importlib.util.spec_from_file_location("adaptive_selection", path)
    mod = sys.modules["adaptive_selection"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reps = 150
    r = mod.cell(0.9, 1000, 1, 0.02, reps, gap_draws=40, seed=5)
    assert r["certified"]["slack"] > 0.8 * reps
    for rule in ("measured", "modelled"):
        assert clopper_pearson_lower(r["wrong"][rule], reps, 0.001) <= mod.ALPHA, (rule, r["wrong"])
    assert clopper_pearson_lower(r["wrong"]["given"], reps, 0.001) > 2 * mod.ALPHA, r["wrong"]
    # the exact coverage the chain is judged by, against runs simulated one by one
    p, K, t = mod.landscape(0.92)[0], 20, 0.08
    rng = np.random.default_rng(9)
    z = stats.norm.ppf(rng.random(200_000))[:, None]
    test = mod.TARGET + mod.SCALE * (z - stats.norm.ppf(p[:K])[None, :])
    val = test - mod.SIGMA * rng.standard_normal(test.shape)
    stop = val[:, :-1] <= mod.TARGET - t
    first = np.where(stop.any(axis=1), stop.argmax(axis=1), K - 1)
    sim = float(np.mean(test[np.arange(len(first)), first] <= mod.TARGET))
    assert mod.coverage(p, K, t) == pytest.approx(sim, abs=4 * np.sqrt(0.25 / 200_000))
    assert mod.coverage(p, K, t) < p[K - 1] - 0.005            # the stops do spend


def test_depl_plan_slack_on_the_command_line(depl_cli, tmp_path):
    """`depl plan --slack D`: the plan certified at ω + D says so and what a closed loop may spend (exit 0); ω + D
    above what a level may be, exit 2; a level no schedule is certified at, exit 3."""
    import json

    r = depl_cli("plan", "mnist1d-small", "--slack", "0.02", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert "certified at ω′ = 0.92, promises ω = 0.9" in r.stdout and "may spend δ = 0.02" in r.stdout
    c = Certificate.of_plan(json.loads((tmp_path / "p.json").read_text())["info"])
    assert (c.omega, c.promise, c.certified) == (pytest.approx(0.92), 0.9, True)
    r = depl_cli("plan", "mnist1d-small", "--slack", "0.2")
    assert r.returncode == 2 and "ω′ = ω + D" in r.stderr and "Traceback" not in r.stderr
    r = depl_cli("plan", "mnist1d-small", "--slack", "0.06")
    assert r.returncode == 3 and "Traceback" not in r.stderr
