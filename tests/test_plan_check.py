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
    # a missing target is refused, never read as a default (ω 0.99, ℓmax 0 were shown before)
    (lambda d: d.pop("omega"), "the key 'omega' is missing (ω, the quantile the plan promises)"),
    (lambda d: d.pop("loss_target"), "the key 'loss_target' is missing (ℓmax"),
    (lambda d: d.pop("deadline"), "the key 'deadline' is missing (Tmax"),
    (lambda d: d["scenario_spec"]["target"].__setitem__("loss", -1.0), "scenario_spec (the plan's scenario): target.loss = -1.0"),
    (lambda d: d.__setitem__("scenario_spec", [1, 2]), "scenario_spec: not a table"),
    # the plan's own figures, recomputed from its epochs and scenario (eqs. (1)–(2) and the loss law)
    # mnist1d-small's plan: pruned-0.75 ×13, cost 360.94 (its calibration runs' own losses certify it: 63 of 64)
    (lambda d: d.__setitem__("cost", d["cost"] * 0.5), "cost = 180.47"),
    (lambda d: d.__setitem__("time", 100.0), "time = 100.0: the plan's epochs and scenario give 120 (eq. (1))"),
    (lambda d: d.__setitem__("loss_quantile", -1.0), "loss_quantile = -1.0: the plan's bracket"),
    (lambda d: (d.__setitem__("loss_quantile", 1.2), d.__setitem__("loss_quantile_bounds", [1.1, 1.2])),
     "loss_quantile = 1.2: the loss law of the plan's scenario puts the 0.9-quantile of ℓ(K)"),
    (lambda d: d.__setitem__("loss_mean", 1.0), "loss_mean = 1.0: the loss law of the plan's scenario gives E[ℓ(K)]"),
    (lambda d: d.__setitem__("loss_quantile_bounds", [1.5, 1.4]), "must be [low, high] with low ≤ high"),
    (lambda d: _used_cluster(d).__setitem__("nodes", _used_cluster(d)["nodes"] + 1),
     "cost = 360.9439070275772: the plan's epochs and scenario give 541.4158605"),
    (lambda d: _used_cluster(d).__setitem__("unit_cost", 2.0), "cost = 360.9439070275772"),
    (lambda d: d["scenario_spec"].__setitem__("cost_model", "resource-time"), "under cost_model 'resource-time'"),
    (lambda d: d.__setitem__("scenario", "paper-alexnet"), "scenario = 'paper-alexnet': the plan's scenario"),
    (lambda d: d.__setitem__("lower_bound", 1e6), "lower_bound = 1000000.0: above the plan's own cost"),
    (lambda d: d.__setitem__("cost", 10**400), "cost = 1000000000"),
    (lambda d: d.__setitem__("lower_bound", 10**400), "lower_bound = 1000000000"),
    (lambda d: d.__setitem__("loss_quantile_bounds", [1, 10**400]), "must be [low, high] (finite numbers)"),
    (lambda d: d["info"].__setitem__("deep", _nested(200)), "info.deep[0][0]"),
]


def _used_cluster(d: dict) -> dict:
    return next(c for c in d["scenario_spec"]["clusters"] if c["name"] == d["epochs"][0]["cluster"])


def _nested(depth: int) -> list:
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


@pytest.mark.parametrize("mutate,fragment", TAMPER)
def test_a_tampered_plan_is_refused_naming_the_field(tmp_path, plan_doc, mutate, fragment):
    doc = copy.deepcopy(plan_doc)
    mutate(doc)
    with pytest.raises((PlanError, ScenarioError)) as e:
        load(tmp_path, doc)
    assert fragment in str(e.value) and str(tmp_path / "p.json") in str(e.value)
    assert "\n" not in str(e.value)


def test_the_figures_are_compared_with_a_relative_tolerance_of_1e_9(tmp_path, plan_doc):
    # what float rounding leaves (the sums in another order) passes; what a person types does not
    doc = copy.deepcopy(plan_doc)
    doc["cost"] *= 1 + 1e-12
    doc["time"] *= 1 - 1e-12
    load(tmp_path, doc)
    doc["cost"] = plan_doc["cost"] * (1 + 1e-7)
    with pytest.raises(PlanError, match="cost = "):
        load(tmp_path, doc)


def test_a_looser_bracket_still_bounds_the_quantile(tmp_path, plan_doc):
    # the depl planner certifies on a coarse lattice: a wider bracket that holds the law's passes
    doc = copy.deepcopy(plan_doc)
    lo, hi = doc["loss_quantile_bounds"]
    doc["loss_quantile_bounds"], doc["loss_quantile"] = [lo - 0.05, hi + 0.05], hi + 0.05
    load(tmp_path, doc)


def test_a_plan_written_by_hand_gets_its_figures_from_with_figures(tmp_path, plan_doc):
    from depl.plan import Epoch, with_figures, with_scenario
    from depl.scenario import parse_scenario

    s = parse_scenario(plan_doc["scenario_spec"])
    c = s.clusters[0]
    # a schedule its calibration certifies (pruned-0.75 ×13 on all the data): another has no finite quantile
    hand = Plan("hand", s.name, True, ["mnist1d-a", "mnist1d-b"],
                [Epoch(k, "pruned-0.75", c.name, c.capacity / 2) for k in range(1, 14)],
                0.0, 0.0, 0.0, 0.0, 0.0, omega=s.target.quantile, loss_target=s.target.loss, deadline=s.target.deadline)
    with pytest.raises(PlanError, match="cost = 0.0: the plan's epochs and scenario give"):
        load(tmp_path, json.loads(json.dumps(with_scenario(hand, s).to_json())))
    p = load(tmp_path, json.loads(json.dumps(with_figures(hand, s).to_json())))
    assert p.cost > 0 and p.time > 0 and p.loss_quantile_bounds[0] <= p.loss_quantile and p.method == "hand"


@pytest.mark.slow  # every planner on every built-in, and their Monte Carlos
@pytest.mark.parametrize("name", sorted(__import__("depl.scenario", fromlist=["builtin_names"]).builtin_names()))
def test_every_builtin_plan_of_every_method_loads_and_simulates(tmp_path, name):
    """`depl plan NAME --method M --out f.json` (the defaults: η = 200) for every planner: the file is read
    back, its figures recomputed and accepted, and simulated."""
    from depl.planners import Infeasible
    from depl.simulate import simulate_plan

    s = load_scenario(name)
    made = 0
    for method in ("depl", "optimal", "best-exp", "best-exp-loss"):
        try:
            p = make_plan(s, method, Options())
        except Infeasible:  # best-exp(-loss) on mnist1d-noniid: they reason with the mean, and find no schedule its
            continue         # calibration runs certify
        p.save(tmp_path / f"{method}.json")
        again = Plan.load(tmp_path / f"{method}.json")
        again.scenario_object()
        assert simulate_plan(again, runs=200, seed=0).runs == 200
        made += 1
    assert made >= 2


@pytest.mark.parametrize("key", ["quantile", "loss"])
def test_a_scenario_without_its_target_quantile_or_loss_is_refused_by_plan_and_simulate(depl_cli, tmp_path, plan_doc,
                                                                                        key):
    """`depl plan` on a scenario TOML without [target] quantile (or loss), and `depl simulate` on a plan whose
    scenario lacks it or whose own omega (loss_target) is missing: exit 2 naming the file and the field, no
    default shown in its place."""
    import tomllib
    from importlib.resources import files

    import tomli_w

    d = tomllib.loads(files("depl.scenarios").joinpath("mnist1d-small.toml").read_text())
    d["target"].pop(key)
    f = tmp_path / "s.toml"
    f.write_text(tomli_w.dumps(d))
    doc = copy.deepcopy(plan_doc)
    doc["scenario_spec"]["target"].pop(key)
    (tmp_path / "a.json").write_text(json.dumps(doc))
    field = {"quantile": "omega", "loss": "loss_target"}[key]
    doc = copy.deepcopy(plan_doc)
    doc.pop(field)
    (tmp_path / "b.json").write_text(json.dumps(doc))
    r, a, b = depl_cli.each([["plan", f]] + [["simulate", tmp_path / f"{x}.json", "--runs", "100", "--png",
                                              tmp_path / f"{x}.png"] for x in "ab"])
    assert r.returncode == 2 and f"{f}: target.{key}: this field is required" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "0.99" not in r.stdout + r.stderr
    r = a
    assert r.returncode == 2 and f"target.{key}" in r.stderr and "a.json" in r.stderr, r.stderr
    r = b
    assert r.returncode == 2 and f"the key {field!r} is missing" in r.stderr and "b.json" in r.stderr, r.stderr
    assert "0.99" not in r.stdout
