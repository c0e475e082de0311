"""The closed loop's rules and slack sources as registered classes (depl.adaptive.rules, depl.adaptive.slack): chosen
by name, each recorded with a run as what it may decide, and a rule of one's own plugs into `Policy` as the built-in
ones do."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from depl.adaptive import (RULES, SOURCES, ConditionalRule, Decision, NaiveRule, Policy, Slack, SlackRule,
                           monte_carlo, rule_named)
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict


@pytest.fixture(scope="module")
def planned():
    d = scenario_dict(load_scenario("mnist1d-small"))
    d.pop("calibration", None)
    d["loss_model"] = "level"
    s = parse_scenario(d)
    return s, make_plan(s, "depl")


def test_the_rules_a_run_names_are_the_registered_classes_and_another_name_is_refused_naming_them():
    assert set(RULES) == {"slack", "conditional"}
    assert isinstance(rule_named("slack"), SlackRule) and rule_named("conditional") == ConditionalRule()
    assert all(rule_named(name).name == name for name in RULES)
    with pytest.raises(ValueError, match="rule 'greedy': expected one of slack, conditional"):
        rule_named("greedy")


def test_each_rule_records_which_decisions_it_may_take():
    assert SlackRule().to_json() == {"conditional": False, "truncate": False, "replan": False, "naive": False}
    assert ConditionalRule(replan=False).to_json() == {"conditional": True, "truncate": True, "replan": False,
                                                      "naive": False}
    assert NaiveRule().to_json()["naive"] is True and NaiveRule().name == "naive"


def test_every_slack_source_describes_its_own_records():
    for name, source in SOURCES.items():
        assert source.name == name
    assert Slack(0.02, "given", omega=0.9).describe().endswith("not certified")
    assert "no certified slack: why not" in Slack(0.0, "none", omega=0.9, why="why not").describe()
    plan = Slack(0.02, "plan", 0.92, 0.05, 64, 64, 0.9)
    assert "ω′ = 0.92" in plan.describe() and "over the calibration runs" in plan.statement()
    assert "no certified slack" in Slack(0.0, "certificate", 0.88, 0.05, 30, 29, 0.9).statement()
    # a run that does not train the plan as certified keeps no guarantee of the plan's (it said it kept it)
    kept = Slack(0.0, "none", omega=0.9, why="the plan was certified at its ω only").statement()
    assert "the run keeps the plan's own guarantee P(ℓ_test ≤ ℓmax) ≥ ω = 0.9" in kept
    for why in ("the plan cannot be run as certified (no re-plan meets the deadline)",
                "the run does not train the plan as certified (another φ: a carved validation split trains on less "
                "data)"):
        off = Slack(0.0, "none", omega=0.9, why=why).statement()
        assert f"and no guarantee: {why}, so the plan's P(ℓ_test ≤ ℓmax) ≥ ω = 0.9 is not this run's" in off
        assert "keeps the plan's own guarantee" not in off


@dataclass(frozen=True)
class StopAtOnce:
    """A rule of one's own: stop after the first decided epoch, whatever the loss (no guarantee: the protocol only)."""

    name = "stop-at-once"

    def decide(self, policy, state, rest, gap_sd):
        return Decision(state.epoch, state.last_loss, math.nan, math.nan, math.nan, "stop", (),
                        policy.rest_cost(rest, state.clusters))

    def to_json(self) -> dict:
        return {"conditional": False, "truncate": False, "replan": False, "naive": False}


def test_a_rule_of_ones_own_decides_for_the_policy(planned):
    s, plan = planned
    mc = monte_carlo(Policy(plan, s, rule=StopAtOnce()), 20, seed=1, every=3)
    assert mc.actions == {"stop": 20}          # every run stopped at its first decision, after epoch 3
    assert mc.cost.max() < plan.cost and Policy(plan, s, rule=StopAtOnce()).rule_record()["decisions"]["naive"] is False
