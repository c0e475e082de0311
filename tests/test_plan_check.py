"""A plan file is checked against its own scenario when read: tampered plans are refused before any work."""

from __future__ import annotations

import copy
import json

import pytest

from depl.plan import Plan, PlanError
from depl.planners import Options, make_plan
from depl.scenario import ScenarioError, load_scenario


@pytest.fixture(scope="module")
def plan_doc() -> dict:
    p = make_plan(load_scenario("mnist1d-small"), "depl", Options(eta=40))
    return json.loads(json.dumps(p.to_json()))


def load(tmp_path, doc) -> Plan:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    p = Plan.load(f)
    p.scenario_object()  # what simulate, run and validate call first
    return p


def test_an_untampered_plan_passes(tmp_path, plan_doc):
    assert load(tmp_path, plan_doc).epochs


TAMPER = [
    (lambda d: d.__setitem__("datasets", ["mnist1d-a", "mnist1d-a", "mnist1d-a"]), "datasets[1] = 'mnist1d-a': listed twice"),
    (lambda d: d.__setitem__("datasets", []), "datasets = []: a plan trains on at least one dataset"),
    (lambda d: d.__setitem__("datasets", ["imagenet"]), "datasets[0] = 'imagenet': no dataset"),
    (lambda d: d.__setitem__("feasible", "false"), "feasible = 'false': must be true or false"),
    (lambda d: d.__setitem__("epochs", d["epochs"] * 100), "K exceeds max_epochs = 20"),
    (lambda d: d["epochs"][0].__setitem__("model", "nosuch"), "epochs[0].model = 'nosuch': no model"),
    (lambda d: d["epochs"][0].__setitem__("cluster", "moon"), "epochs[0].cluster = 'moon': no cluster"),
    (lambda d: d["epochs"][0].__setitem__("epoch", 0), "epochs[0].epoch = 0: epochs are numbered 1..K"),
    (lambda d: d["epochs"].reverse(), "epochs[0].epoch"),
    (lambda d: d["epochs"][0].__setitem__("epoch", 1.5), "epochs[0].epoch = 1.5: must be an integer"),
    (lambda d: d["epochs"][0].__setitem__("compute", 0.0), "epochs[0].compute = 0.0: must be in (0,"),
    (lambda d: d["epochs"][0].__setitem__("compute", 1e9), "epochs[0].compute = 1000000000.0: must be in (0,"),
    (lambda d: d["epochs"][-1].__setitem__("model", "full"), "no switch"),
    (lambda d: d.__setitem__("loss_target", 9.0), "loss_target = 9.0: the plan's scenario says 1.5"),
    (lambda d: d.__setitem__("deadline", 7.0), "deadline = 7.0: the plan's scenario says 120"),
    (lambda d: d.__setitem__("cost", "cheap"), "cost = 'cheap': must be a finite number"),
    (lambda d: d.__setitem__("epochs", {"1": "full"}), "epochs = {'1': 'full'}: must be a list"),
    (lambda d: d["epochs"].__setitem__(0, 7), "epochs[0] = 7: must be an object"),
    (lambda d: d.pop("method"), "the key 'method' is missing"),
    (lambda d: d["scenario_spec"]["target"].__setitem__("loss", -1.0), "scenario_spec (the plan's scenario): target.loss = -1.0"),
    (lambda d: d.__setitem__("scenario_spec", [1, 2]), "scenario_spec: not a table"),
]


@pytest.mark.parametrize("mutate,fragment", TAMPER)
def test_a_tampered_plan_is_refused_naming_the_field(tmp_path, plan_doc, mutate, fragment):
    doc = copy.deepcopy(plan_doc)
    mutate(doc)
    with pytest.raises((PlanError, ScenarioError)) as e:
        load(tmp_path, doc)
    assert fragment in str(e.value) and str(tmp_path / "p.json") in str(e.value)
    assert "\n" not in str(e.value)
