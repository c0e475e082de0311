"""The level loss model: exact law vs Monte Carlo, telescoping cumulants, the scenario keys, the planners."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from depl.loss import LevelModel, loss_model_for
from depl.loss.level import lognormal_cumulants
from depl.planners import make_plan
from depl.scenario import ScenarioError, parse_scenario
from depl.simulate import simulate_plan

SCHEDULES = [["full"] * 12, ["small"] * 7, ["full"] * 3 + ["small"] * 9]


def test_loss_model_for_reads_the_key(level_scenario, level_data):
    assert isinstance(loss_model_for(level_scenario), LevelModel)
    level_data["loss_model"] = "increments"
    assert not isinstance(loss_model_for(parse_scenario(level_data)), LevelModel)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("phi", [1.0, 0.6])
def test_distribution_matches_monte_carlo(level_scenario, schedule, phi):
    m = LevelModel(level_scenario)
    d = m.distribution(schedule, phi)
    final = m.simulate(schedule, phi, 200_000, np.random.default_rng(1))[:, -1]
    for q in (0.1, 0.5, 0.9, 0.99):
        lo, hi = d.quantile_bounds(q)
        emp = np.quantile(final, q)
        assert lo - 3e-3 <= emp <= hi + 3e-3
    assert d.mean() == pytest.approx(final.mean(), rel=2e-3)
    assert m.mean_path(schedule, phi)[-1] == pytest.approx(d.mean(), rel=1e-9)


def test_simulated_trajectories_have_the_per_seed_correlation(level_scenario):
    m = LevelModel(level_scenario)
    tr = m.simulate(["small"] * 25, 1.0, 50_000, np.random.default_rng(2))
    mu, sd, shared = m.path(["small"] * 25, 1.0)
    z = (np.log(tr[:, 20]) - np.log(mu[20])) / sd[20], (np.log(tr[:, 24]) - np.log(mu[24])) / sd[24]
    rho = level_scenario.models[1].level.seed_share
    assert np.corrcoef(*z)[0, 1] == pytest.approx(rho, abs=0.02)


@pytest.mark.parametrize("name", ["full", "small"])
def test_epoch_cumulants_telescope_to_the_exact_law(level_scenario, name):
    m = LevelModel(level_scenario)
    i = m.model_names.index(name)
    cum = m.epoch_cumulants(15, 0.8)[i].sum(axis=0)
    mu, sd, _ = m.path([name] * 15, 0.8)
    exact = lognormal_cumulants(mu[-1], sd[-1])
    exact[0] -= m.initial_loss
    np.testing.assert_allclose(cum, exact, rtol=1e-9, atol=1e-12)


def test_switch_jumps_then_recovers(level_scenario):
    m = LevelModel(level_scenario)
    mu_sw, _, _ = m.path(["full"] * 3 + ["small"] * 9)
    mu_b, _, _ = m.path(["small"] * 12)
    ratio = mu_sw[4:] / mu_b[4:]
    np.testing.assert_allclose(ratio, 1 + 0.3 * 0.5 ** np.arange(9), rtol=1e-12)


def test_scenario_errors_name_the_field(level_data):
    del level_data["models"][1]["level"]
    with pytest.raises(ScenarioError, match=r"models\[1\]\.level.*small"):
        parse_scenario(level_data, "x.toml")
    level_data["loss_model"] = "levels"
    with pytest.raises(ScenarioError, match="loss_model"):
        parse_scenario(level_data, "x.toml")


def test_bad_level_values_are_rejected(level_data):
    level_data["models"][0]["level"]["curve"] = "cubic"
    with pytest.raises(ScenarioError, match="curve"):
        parse_scenario(level_data, "x.toml")


@pytest.mark.parametrize("method", ["depl", "optimal", "best-exp"])
def test_planners_certify_with_the_level_law(level_scenario, method):
    plan = make_plan(level_scenario, method)
    assert plan.feasible and plan.loss_quantile <= level_scenario.target.loss
    m = LevelModel(level_scenario)
    phi = level_scenario.phi(level_scenario.samples(plan.datasets))
    lo, hi = m.distribution(plan.schedule, phi).quantile_bounds(level_scenario.target.quantile)
    assert plan.loss_quantile == pytest.approx(hi, rel=1e-9, abs=1e-9) or plan.loss_quantile >= lo
    # Monte Carlo of the level model, independent of the grid law
    sim = simulate_plan(plan, runs=40_000, seed=3)
    assert sim.p_meet_ci[1] >= level_scenario.target.quantile
    assert sim.quantile_ci[0] <= plan.loss_quantile
    exact = stats.lognorm(s=m.path(plan.schedule, phi)[1][-1], scale=m.path(plan.schedule, phi)[0][-1])
    assert exact.ppf(level_scenario.target.quantile) <= plan.loss_quantile + 1e-9
