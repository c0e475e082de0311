"""A calibrator is one module plus one registration (depl.laws.register_calibrator), like a law."""

from __future__ import annotations

import pytest

from depl.laws import calibrator_names, register_calibrator, unregister_calibrator
from depl.loss import loss_model_for
from depl.planners import make_plan
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict

from .toy_calibrator import WorstScore


@pytest.fixture
def worst_score():
    register_calibrator("worst-score", WorstScore)
    yield
    unregister_calibrator("worst-score")


def _with_method(method: str):
    data = scenario_dict(load_scenario("mnist1d-small"))
    data["calibration"]["method"] = method
    return parse_scenario(data, f"mnist1d-small, {method}")


def test_a_toy_calibrator_plans_through_the_public_api(worst_score):
    assert calibrator_names() == ["conformal-pit", "worst-score"]
    s = _with_method("worst-score")
    law = loss_model_for(s)
    assert isinstance(law, WorstScore) and law.top == max(s.calibration.scores)
    plan = make_plan(s)
    schedule = [e.model for e in plan.epochs]
    expect = law.base.distribution(schedule, s.phi(s.samples(plan.datasets))).quantile_bounds(law.top)[1]
    assert plan.loss_quantile == pytest.approx(expect) and plan.loss_quantile <= s.target.loss
    # the highest score's level is never below the conformal rank's: a plan at least as long as the built-in's
    assert len(schedule) >= len(make_plan(load_scenario("mnist1d-small")).epochs)


def test_an_unregistered_calibration_method_is_refused_by_name():
    with pytest.raises(ScenarioError, match="method must be one of conformal-pit, got 'worst-score'"):
        _with_method("worst-score")


TOY_CLI = ("import sys; sys.path.insert(0, {tests!r}); from depl.laws import register_calibrator; "
           "from loss.toy_calibrator import WorstScore; register_calibrator('worst-score', WorstScore); "
           "from depl.cli import main; main()")


def test_the_toy_calibrator_plans_through_depl_plan(tmp_path, depl_cli):
    """docs/extending.md's claim, as a user runs it: a scenario naming the toy calibrator is planned by `depl plan`
    (the command asks every law the calibrator's questions; the toy answers none of them: safe defaults)."""
    import json
    from pathlib import Path

    import tomli_w

    data = scenario_dict(load_scenario("mnist1d-small"))
    data["calibration"]["method"] = "worst-score"
    (tmp_path / "toy.toml").write_text(tomli_w.dumps(data), encoding="utf-8")
    code = TOY_CLI.format(tests=str(Path(__file__).resolve().parents[1]))
    r = depl_cli("plan", "toy.toml", "--json", "--out", "p.json", cwd=tmp_path, code=code)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["feasible"] and "certified_by" not in plan["info"] and "certificate" not in plan["info"]
    r = depl_cli("plan", "toy.toml", cwd=tmp_path, code=code)
    assert r.returncode == 0 and "not certified yet" in r.stdout, r.stdout + r.stderr
