"""Planners come from one registry, share one walk over dataset choices, and start from a run's state."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depl import cli
from depl.plan import plan_cost, plan_time
from depl.planners import Options, make_plan, planner_names, register
from depl.planners.registry import unregister
from depl.scenario import load_scenario
from depl.state import RunState

sys.path.insert(0, str(Path(__file__).parent))
import toy_planner  # noqa: E402

OPTS = Options(eta=60)


@pytest.fixture
def one_version():
    register("one-version", toy_planner.ONE_VERSION)
    yield
    unregister("one-version")


def test_a_planner_registered_from_outside_plans_through_make_plan_and_the_cli(one_version, tmp_path):
    s = load_scenario("paper-alexnet")
    plan = make_plan(s, "one-version", OPTS)
    assert plan.method == "one-version" and len({e.model for e in plan.epochs}) == 1
    assert plan.loss_quantile <= s.target.loss
    assert plan.cost == pytest.approx(plan_cost(s, plan.datasets, plan.epochs), rel=1e-12)
    # one version only is a restriction of what optimal searches: never cheaper
    assert plan.cost >= make_plan(s, "optimal", OPTS).cost * (1 - 1e-9)

    out = tmp_path / "p.json"
    r = CliRunner().invoke(cli.app, ["plan", "paper-alexnet", "--method", "one-version", "--eta", "60",
                                     "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["method"] == "one-version"
    bad = CliRunner().invoke(cli.app, ["plan", "paper-alexnet", "--method", "magic"])
    assert bad.exit_code == 2 and "one-version" in bad.output  # the choice list names it


def test_unregistered_names_are_refused_with_the_choices():
    assert {"depl", "optimal", "best-exp"} <= set(planner_names())
    with pytest.raises(ValueError, match="depl, optimal, best-exp"):
        make_plan(load_scenario("paper-alexnet"), "magic")


@pytest.mark.parametrize("method", ["depl", "optimal", "best-exp"])
def test_a_plan_from_a_run_state_covers_the_rest_within_the_time_left(method):
    """Half-way through a run (epoch 6 of fast-unsteady, loss observed, a third of the
    deadline used) every planner plans epochs 7.., within the time left, and its
    certified quantile is the law of the final loss *given* the observed loss:
    Monte Carlo from that loss agrees."""
    s = load_scenario("paper-alexnet")
    first = make_plan(s, "depl", OPTS)
    k0 = 6
    start = RunState(k0, first.epochs[k0 - 1].model, tuple([15.0] * (k0 - 1) + [12.0]),
                     time_spent=s.target.deadline / 3, cost_spent=123.0)
    plan = make_plan(s, method, OPTS, start=start)
    assert [e.epoch for e in plan.epochs] == list(range(k0 + 1, k0 + 1 + len(plan.epochs)))
    assert plan.loss_quantile <= s.target.loss
    assert plan_time(s, plan.datasets, plan.epochs) <= (s.target.deadline - start.time_spent) * (1 + 1e-9)
    assert plan.info["start_epoch"] == k0 and plan.info["cost_spent"] == 123.0
    # Independent check: the increments law simulated from ℓ(6) = 12 along the planned epochs.
    import numpy as np

    from depl.loss import IncrementsModel

    law = IncrementsModel(s)
    phi = s.phi(s.samples(plan.datasets))
    sched = [start.model] * k0 + [e.model for e in plan.epochs]
    paths = law.simulate(sched, phi, 40_000, np.random.default_rng(0))
    final = 12.0 + paths[:, -1] - paths[:, k0]  # the increments after epoch 6, from the observed loss
    assert np.quantile(final, s.target.quantile) <= plan.loss_quantile + 0.05
    assert final.mean() == pytest.approx(plan.loss_mean, abs=0.05)
    # From a better observed loss, less remains to do.
    lucky = make_plan(s, method, OPTS, start=RunState(k0, start.model, start.losses[:-1] + (10.0,),
                                                       start.time_spent))
    assert len(lucky.epochs) <= len(plan.epochs) and lucky.cost <= plan.cost * (1 + 1e-9)


def test_a_level_law_run_is_replanned_through_the_laws_own_conditioning():
    """mnist1d-small (level law): after 3 epochs whose losses ran below the law's median,
    the rest is planned from there; Monte Carlo of the law given the same state agrees."""
    import numpy as np

    from depl.loss import loss_model_for

    s = load_scenario("mnist1d-small")
    first = make_plan(s, "depl", OPTS)
    k0, law = 3, loss_model_for(s)
    past = tuple(e.model for e in first.epochs[:k0])
    phi = s.phi(s.samples(first.datasets))
    seen = tuple(0.95 * x for x in law.mean_path(list(past), phi)[1:])  # a lucky seed
    start = RunState(k0, past[-1], seen, time_spent=plan_time(s, first.datasets, first.epochs[:k0]), schedule=past)
    plan = make_plan(s, "depl", OPTS, start=start)
    assert [e.epoch for e in plan.epochs] == list(range(k0 + 1, k0 + 1 + len(plan.epochs)))
    assert plan.loss_quantile <= s.target.loss
    assert plan.time <= s.target.deadline - start.time_spent + 1e-9
    final = law.simulate(plan.schedule, s.phi(s.samples(plan.datasets)), 40_000, np.random.default_rng(0),
                         start=start)[:, -1]
    assert np.quantile(final, s.target.quantile) <= plan.loss_quantile + 0.01
    assert len(plan.epochs) <= len(first.epochs) - k0 + 1
