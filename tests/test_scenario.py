"""The scenario loader: built-ins load; every error path names file, field, value and why."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources

import pytest

from depl.scenario import ScenarioError, builtin_names, load_scenario, parse_scenario, scenario_dict


def base() -> dict:
    text = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    return tomllib.loads(text)


def test_builtins_load_and_match_the_paper_table():
    assert {"paper-alexnet", "paper-mobilenet"} <= set(builtin_names())
    s = load_scenario("paper-alexnet")
    x = {m.name: m.noise.frozen for m in s.models}
    assert x["fast-unsteady"].mean() == pytest.approx(1.02) and x["fast-unsteady"].var() == pytest.approx(0.031)
    assert x["slow-steady"].mean() == pytest.approx(0.98) and x["slow-steady"].var() == pytest.approx(0.007)
    assert [m.work for m in s.models] == [2.6, 1.4, 1.0]
    mob = load_scenario("paper-mobilenet")
    assert [m.work for m in mob.models] == [1.8, 1.0, 0.6]
    assert mob.models[1].noise.frozen.mean() == pytest.approx(0.95)
    assert {(c.capacity, c.unit_cost) for c in s.clusters} == {(100.0, 1.0), (50.0, 1.2)}
    assert s.target.quantile == 0.99


def test_scenario_round_trips_through_plain_data():
    s = load_scenario("paper-mobilenet")
    assert parse_scenario(scenario_dict(s)) == s


@pytest.mark.parametrize("family,mean,var,params", [
    ("invgamma", 1.0, 0.01, {}), ("gamma", 2.0, 0.5, {}), ("norm", -1.0, 0.3, {}),
    ("lognorm", 0.5, 0.02, {}), ("t", 0.5, 0.04, {"df": 5.0}),
])
def test_mean_var_are_solved_exactly(family, mean, var, params):
    d = base()
    d["models"][0]["noise"] = {"family": family, "mean": mean, "var": var, "params": params}
    frozen = parse_scenario(d).models[0].noise.frozen
    assert frozen.mean() == pytest.approx(mean) and frozen.var() == pytest.approx(var)


def write(tmp_path, text: str):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


def dump(d: dict) -> str:
    import tomli_w

    return tomli_w.dumps(d)


def err(tmp_path, mutate) -> str:
    d = base()
    mutate(d)
    p = write(tmp_path, dump(d))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg  # names the file
    return msg


def test_missing_file_lists_builtins(tmp_path):
    with pytest.raises(ScenarioError, match=r"no such scenario file.*paper-alexnet"):
        load_scenario(tmp_path / "nope.toml")


def test_unknown_builtin_name():
    with pytest.raises(ScenarioError, match=r"'paper-resnet' is neither a file nor a built-in scenario"):
        load_scenario("paper-resnet")


def test_invalid_toml_names_line(tmp_path):
    p = write(tmp_path, 'name = "x"\ninitial_loss = \n')
    with pytest.raises(ScenarioError, match=r"bad.toml: not valid TOML: .*line 2"):
        load_scenario(p)


CASES = [
    # (mutation, expected fragments of the message)
    (lambda d: d.pop("initial_loss"), ["initial_loss", "required"]),
    (lambda d: d["target"].pop("deadline"), ["target.deadline", "required"]),
    (lambda d: d["target"].__setitem__("quantile", 1.5), ["target.quantile = 1.5", "less than or equal to 0.999999"]),
    (lambda d: d["target"].__setitem__("deadline", -3.0), ["target.deadline = -3.0", "greater than 0"]),
    (lambda d: d["target"].__setitem__("loss", 25.0), ["target.loss = 25.0", "below initial_loss"]),
    (lambda d: d.__setitem__("initial_loss", "high"), ["initial_loss = 'high'", "number"]),
    (lambda d: d.__setitem__("colour", "red"), ["colour", "unknown field"]),
    (lambda d: d["clusters"][1].__setitem__("capacity", 0), ["clusters[1].capacity = 0", "greater than 0", 'clusters[1] is "A2"']),
    (lambda d: d["clusters"][0].__setitem__("nodes", 0), ["clusters[0].nodes = 0", "greater than or equal to 1"]),
    (lambda d: d["clusters"][2].__setitem__("name", "A1"), ["clusters[2].name = 'A1'", "unique"]),
    (lambda d: d["clusters"].clear(), ["clusters", "at least 1"]),
    (lambda d: d["datasets"][0].__setitem__("transfer_cost", {"Z9": 1.0}), ["datasets[0].transfer_cost = 'Z9'", "no cluster"]),
    (lambda d: d["datasets"][0].__setitem__("transfer_cost", {"A1": -1.0}), ["datasets[0].transfer_cost", "cannot be negative"]),
    (lambda d: d["datasets"][0].__setitem__("share", [0.5, 0.2]), ["datasets[0].share", "0 <= from < to <= 1"]),
    (lambda d: d["models"][1].pop("work"), ["models[1].work", "required", 'models[1] is "intermediate"']),
    # an entry whose name holds a newline: the hint names it escaped, so the message stays one line
    (lambda d: d["clusters"][1].__setitem__("name", "A\n2"), ["clusters[1].name", 'clusters[1] is "A\\n2"']),
    (lambda d: d["models"][0]["progress"].__setitem__("A", -1.0), ["models[0].progress.A = -1.0", "greater than 0"]),
    (lambda d: d["models"][0]["noise"].__setitem__("family", "banana"), ["models[0].noise.family = 'banana'", "not a continuous distribution"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": 1.0}), ["models[0].noise", "both `mean` and `var`"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": 1.0, "var": 0.0}), ["models[0].noise", "var must be > 0"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": -1.0, "var": 0.1}), ["models[0].noise", "positive mean"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "beta", "mean": 0.5, "var": 0.01}), ["models[0].noise", "give `params`"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "params": {"a": 0.8, "scale": 1.0}}), ["models[0].noise", "no finite mean"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "params": {"scale": 1.0}}), ["models[0].noise", "missing shape parameter", "'a'"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "gamma", "params": {"a": 2.0, "rate": 1.0}}), ["models[0].noise", "unknown parameter", "rate"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "gamma", "params": {"a": -2.0}}), ["models[0].noise", "outside the domain"]),
    (lambda d: d["switches"][0].__setitem__("jump", {"family": "t", "mean": 0.5, "var": 0.01}), ["switches[0].jump", "df > 2"]),
    (lambda d: d["switches"][0].__setitem__("to", "tiny"), ["switches[0].to = 'tiny'", "no model has this name"]),
    (lambda d: d["switches"][0].__setitem__("from", "intermediate"), ["switches[0].to = 'intermediate'", "another model"]),
    (lambda d: d["switches"].append(copy.deepcopy(d["switches"][0])), ["switches[3]", "listed twice"]),
    (lambda d: d["models"][2].__setitem__("name", "intermediate"), ["models[2].name = 'intermediate'", "unique"]),
]


@pytest.mark.parametrize("mutate,fragments", CASES)
def test_every_error_names_field_value_and_why(tmp_path, mutate, fragments):
    msg = err(tmp_path, mutate)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    assert "Traceback" not in msg and "\n" not in msg


MORE_CASES = [
    (lambda d: d["models"][0].__setitem__("noise", {"family": "t", "params": {"df": 1.5}}), ["models[0].noise", "no finite variance"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "gamma", "mean": -1.0, "var": 0.1}), ["models[0].noise", "a Gamma has a positive mean"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "lognorm", "mean": 0.0, "var": 0.1}), ["models[0].noise", "a log-normal has a positive mean"]),
    (lambda d: d.__setitem__("max_epochs", 0), ["max_epochs = 0", "greater than or equal to 1"]),
    (lambda d: d.__setitem__("data_law", {"s0": -1.0, "reference_samples": 10.0}), ["data_law.s0 = -1.0", "greater than 0"]),
    (lambda d: d["models"][0].__setitem__("train", {"net": "cnn1d", "prune_ratio": 1.0}), ["models[0].train.prune_ratio = 1.0", "less than 1"]),
]


@pytest.mark.parametrize("mutate,fragments", MORE_CASES)
def test_more_errors_name_field_value_and_why(tmp_path, mutate, fragments):
    msg = err(tmp_path, mutate)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


def test_unreadable_file_is_reported(tmp_path):
    p = tmp_path / "latin1.toml"
    p.write_bytes("name = \"caf\xe9\"\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match=r"latin1.toml: cannot be read"):
        load_scenario(p)


# Hostile numbers and references: every one is refused at the boundary, naming the field.
HOSTILE_CASES = [
    (lambda d: d.__setitem__("initial_loss", float("nan")), ["initial_loss = nan", "finite"]),
    (lambda d: d["target"].__setitem__("loss", float("inf")), ["target.loss = inf", "finite"]),
    (lambda d: d["target"].__setitem__("deadline", 1e308), ["target.deadline = 1e+308", "beyond"]),
    (lambda d: d["target"].__setitem__("loss", 0.0), ["target.loss = 0.0", "greater than 0"]),
    (lambda d: d["target"].__setitem__("loss", -1.0), ["target.loss = -1.0", "greater than 0"]),
    (lambda d: d["models"][0]["progress"].__setitem__("A", 1e308), ["models[0].progress.A", "beyond"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": 1.0, "var": float("nan")}),
     ["models[0].noise.var = nan", "finite"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": 1e308, "var": 0.1}),
     ["models[0].noise.mean", "beyond"]),
    (lambda d: d["datasets"][0].__setitem__("transfer_cost", {"A1": float("nan")}),
     ["datasets[0].transfer_cost.A1 = nan", "finite"]),
    (lambda d: d["datasets"][0].__setitem__("transfer_cost", {"A1": 1e300}), ["datasets[0].transfer_cost", "A1 = 1e+300", "beyond"]),
    (lambda d: d["models"][0].__setitem__("noise", {"family": "invgamma", "mean": 1.0, "var": 0.01, "params": {"a": 3.0}}),
     ["models[0].noise", "either `params` or `mean` and `var`", "'a'"]),
    (lambda d: d["models"][0].__setitem__("train", {"net": "nosuchnet"}), ["models[0].train.net = 'nosuchnet'", "no such network"]),
    (lambda d: d["datasets"][0].__setitem__("source", "imagenet"), ["datasets[0].source = 'imagenet'", "no such data source"]),
    (lambda d: d["models"][1].__setitem__("train", {"net": "alexnet", "prune_ratio": 0.2}),
     ["fast-unsteady -> intermediate", "cannot grow them back"]),
    (lambda d: d["models"][1].__setitem__("train", {"net": "mobilenet", "prune_ratio": 0.8}),
     ["fast-unsteady -> intermediate", "different networks"]),
    (lambda d: d["switches"].append({"from": "slow-steady", "to": "fast-unsteady", "jump": d["switches"][0]["jump"]}),
     ["switches[3]", "slow-steady -> fast-unsteady", "cannot grow them back"]),
    (lambda d: d.__setitem__("training", {"batch_size": 10**12}), ["training.batch_size", "less than or equal"]),
]


@pytest.mark.parametrize("mutate,fragments", HOSTILE_CASES)
def test_hostile_values_are_refused_naming_the_field(tmp_path, mutate, fragments):
    msg = err(tmp_path, mutate)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    assert "\n" not in msg


def test_a_cycle_of_switches_is_refused_without_train_tables(tmp_path):
    def mutate(d):
        for m in d["models"]:
            m.pop("train", None)
        d["switches"].append({"from": "slow-steady", "to": "fast-unsteady", "jump": d["switches"][0]["jump"]})
    msg = err(tmp_path, mutate)
    assert "switches[3]" in msg and "cycle" in msg and "fast-unsteady -> intermediate -> slow-steady -> fast-unsteady" in msg


def test_a_student_t_may_give_df_with_mean_and_var():
    d = base()
    d["models"][0]["noise"] = {"family": "t", "mean": 1.0, "var": 0.02, "params": {"df": 5.0}}
    assert parse_scenario(d).models[0].noise.frozen.var() == pytest.approx(0.02)


def test_own_networks_and_sources_pass_to_their_loader():
    d = base()
    for m in d["models"]:
        m["train"]["net"] = "mypkg.nets:build"
    d["datasets"][0]["source"] = "mypkg.data:load"
    parse_scenario(d)


def test_the_scenario_knows_the_nets_and_sources_depl_builds():
    pytest.importorskip("torch")
    from depl.scenario import BUILTIN_NETS, BUILTIN_SOURCES
    from depl.train.task.data import SOURCES
    from depl.train.task.nets import NETS

    assert set(BUILTIN_NETS) == set(NETS) and set(BUILTIN_SOURCES) == set(SOURCES)


def _refused_at(where: tuple, value, words: str) -> None:
    """mnist1d-small with `value` at `where`: refused, naming the field and saying `words`."""
    d = scenario_dict(load_scenario("mnist1d-small"))
    at = d
    for k in where[:-1]:
        at = at[k]
    at[where[-1]] = value
    with pytest.raises(ScenarioError, match=words) as e:
        parse_scenario(d)
    assert str(where[-1] if isinstance(where[-1], str) else where[-2]) in str(e.value)


@pytest.mark.parametrize("where", [
    ("clusters", 0, "capacity"),
    ("datasets", 0, "samples"),
    ("models", 0, "noise", "params", "a"),
    ("calibration", "scores", 5),
    ("calibration", "epoch_scores", 2, 0),
    ("target", "deadline"),
])
def test_true_or_false_where_a_number_goes_is_refused_naming_the_field(where):
    """pydantic reads true/false as 1/0 for a float (lax mode, which TOML's integers need): a scenario with
    `capacity = true` planned as if it said 1."""
    _refused_at(where, True, "true/false")


@pytest.mark.parametrize("where, text", [(("target", "deadline"), "60000"), (("target", "quantile"), "0.99"),
                                         (("clusters", 0, "capacity"), "1e3"), (("calibration", "scores", 5), "0.5")])
def test_text_where_a_number_goes_is_refused_naming_the_field(where, text):
    """pydantic reads the text "60000" as 60000 for a float (lax mode): `deadline = "60000"` planned as if it said
    60000, while `deadline = true` was refused."""
    _refused_at(where, text, "text")


def test_booleans_stay_where_they_belong():
    d = scenario_dict(load_scenario("mnist1d-small"))
    d["calibration"]["use"] = False
    d["training"]["iid"] = False
    assert parse_scenario(d).calibration.use is False
