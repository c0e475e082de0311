"""The loss-law registry: a new law is one module and one registration line, and plans like the built-ins."""

from __future__ import annotations

import numpy as np
import pytest

from depl.fit.registry import fitters
from depl.laws import get_law, law_names, register_law, unregister_law
from depl.loss import IncrementsModel, LevelModel, loss_model_for
from depl.planners import make_plan
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict, with_target

from .toy_law import SPREAD, ToyModel


@pytest.fixture
def toy():
    register_law("toy", ToyModel)   # the one registration line
    yield
    unregister_law("toy")


def test_builtin_laws_are_registered_with_their_fitting_side():
    assert law_names()[:2] == ["increments", "level"]
    assert get_law(None).model_class is IncrementsModel
    assert get_law("level").model_class is LevelModel
    fitting = fitters()   # the built-in fitting sides register when depl.fit imports them
    assert fitting["level"].name == "level" and fitting["increments"].name == "increments"
    assert get_law("level").fitter is fitting["level"]


def test_a_toy_law_plans_through_the_public_api(toy):
    data = with_target(scenario_dict(load_scenario("paper-mobilenet")), loss=10.0)
    data["loss_model"], data["switches"] = "toy", []
    s = parse_scenario(data, "toy")
    assert isinstance(loss_model_for(s), ToyModel)
    plan = make_plan(s, "depl")
    assert plan.feasible and len(set(plan.schedule)) == 1
    # certified by the toy law: ℓ(K) is normal, ℓ0 − Σg with sd 10% of each g
    g = np.array([s.models[s.model_index[m]].g(k, s.phi(plan_samples(s, plan))) for k, m in enumerate(plan.schedule, 1)])
    q = s.initial_loss - g.sum() + 1.2815515655446004 * SPREAD * np.sqrt(np.sum(g**2))
    assert q <= s.target.loss + 1e-3
    # and the increments law with the same progress would plan otherwise: the law was used
    data["loss_model"] = "increments"
    other = make_plan(parse_scenario(data, "inc"), "depl")
    assert (other.cost, other.schedule) != (plan.cost, plan.schedule)


def plan_samples(s, plan):
    return s.samples(plan.datasets)


def test_unknown_law_is_refused_naming_the_known_ones(toy):
    data = scenario_dict(load_scenario("paper-mobilenet"))
    data["loss_model"] = "cubic"
    with pytest.raises(ScenarioError, match=r"loss_model = 'cubic'.*'increments', 'level', 'level-memory' or 'toy'"):
        parse_scenario(data, "x")


def test_the_toy_law_plans_and_simulates_through_the_command_line(tmp_path, depl_cli):
    """docs/extending.md's claim as a user runs it: `depl plan` and `depl simulate` of a scenario naming the toy law."""
    import json
    from pathlib import Path

    import tomli_w

    data = with_target(scenario_dict(load_scenario("paper-mobilenet")), loss=10.0)
    data["loss_model"], data["switches"] = "toy", []
    (tmp_path / "toy.toml").write_text(tomli_w.dumps(data), encoding="utf-8")
    code = ("import sys; sys.path.insert(0, {!r}); from depl.laws import register_law; from loss.toy_law import "
            "ToyModel; register_law('toy', ToyModel); from depl.cli import main; main()"
            ).format(str(Path(__file__).resolve().parents[1]))
    r = depl_cli("plan", "toy.toml", "--out", "p.json", "--json", cwd=tmp_path, code=code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["feasible"]
    r = depl_cli("simulate", "p.json", "--runs", "2000", "--json", cwd=tmp_path, code=code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] in ("holds", "undecided")   # the law's Monte Carlo: "certified" is for real runs
