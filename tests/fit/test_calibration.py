"""Calibration of a fitted law on runs set apart (split conformal on PIT scores): its guarantee under a
misspecified law, `depl fit --calibration-seeds` on real logs, the [calibration] table, and plans with it."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from depl.fit.report import toml_dumps
from depl.loss import loss_model_for
from depl.loss.calibrated import CalibratedDistribution, CalibratedModel
from depl.planners import make_plan
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict

# Real training logs: `depl profile` of docs/tutorial-own-model.md's digits model (scikit-learn digits,
# `--epochs 12 --seeds 20 --fractions 1,0.5 --switch full:half:6`), exported as a CSV, ℓ(0) = 2.3.
DIGITS = Path(__file__).parent / "data" / "digits-profile.csv"


@pytest.mark.parametrize("omega, n", [(0.8, 9), (0.9, 19), (0.9, 40)])
def test_conformal_quantile_covers_omega_under_a_misspecified_law(omega, n):
    """The law (mnist1d-small's level law) is too narrow and too low for the truth (a log-normal 2.5× wider,
    median 4% higher): its own ω-quantile covers far less than ω; recalibrated on n runs of the truth, the
    coverage of a new run is ⌈(n+1)ω⌉/(n+1) ≥ ω, as split conformal promises (Monte Carlo, 6000 trials)."""
    law = loss_model_for(load_scenario("mnist1d-small"), calibrated=False)   # the law as fitted
    base = law.distribution(["full"] * 10)
    mu, sd = law.final(["full"] * 10)
    rng = np.random.default_rng(int(omega * 100) + n)
    trials = 6000
    truth = mu * 1.04 * np.exp(2.5 * sd * rng.standard_normal((trials, n + 1)))
    pit = np.clip(base.cdf(truth[:, :n]), 0, 1)
    hits = np.empty(trials)
    for t in range(trials):
        q = CalibratedDistribution(base, pit[t]).quantile(omega)
        hits[t] = truth[t, n] <= q
    expected = math.ceil((n + 1) * omega - 1e-9) / (n + 1)
    se = math.sqrt(expected * (1 - expected) / trials)
    assert hits.mean() >= omega - 3 * se
    assert hits.mean() == pytest.approx(expected, abs=4 * se)
    assert np.mean(truth[:, n] <= base.quantile(omega)) < omega - 0.1   # the law alone is wrong


def test_too_few_scores_certify_nothing_and_the_scenario_says_how_many_more():
    d = loss_model_for(load_scenario("mnist1d-small"), calibrated=False).distribution(["full"] * 5)
    c = CalibratedDistribution(d, np.linspace(0.05, 0.95, 8))
    assert c.quantile(0.9) == math.inf and c.quantile_bounds(0.9) == (math.inf, math.inf)
    assert c.quantile(0.8) < math.inf and c.cdf(c.quantile(0.8)) >= 0.8 - 1e-9
    data = scenario_dict(load_scenario("mnist1d-small"))
    data["calibration"] = {"scores": [0.5] * 8}
    with pytest.raises(ScenarioError, match=r"calibration\.scores = '8 scores'.* at least 9 .*\(1 more\).*use = false"):
        parse_scenario(data, "few")
    data["calibration"]["use"] = False
    assert not isinstance(loss_model_for(parse_scenario(data, "few")), CalibratedModel)


def test_plans_use_the_calibrated_law():
    """Scores that say the law is optimistic (the real losses sit at its upper levels) make a dearer plan;
    scores that say it is pessimistic, a cheaper one; no scores, the law as fitted."""
    data = scenario_dict(load_scenario("mnist1d-small"))
    data.pop("calibration")                      # the built-in's own (docs/fitting.md): here, the law as fitted
    plain = make_plan(parse_scenario(data, "plain"), "depl")
    cost = {}
    for name, scores in {"optimistic": np.linspace(0.55, 0.999, 30), "pessimistic": np.linspace(0.01, 0.75, 30)}.items():
        data["calibration"] = {"method": "conformal-pit", "scores": [float(u) for u in scores]}
        cs = parse_scenario(data, name)
        p = make_plan(cs, "depl")
        d = loss_model_for(cs).distribution(p.schedule, cs.phi(cs.samples(p.datasets)))
        assert d.quantile_bounds(cs.target.quantile)[1] <= cs.target.loss   # certified by the calibrated law
        cost[name] = p.cost
    assert cost["pessimistic"] < plain.cost < cost["optimistic"]


@pytest.fixture(scope="module")
def fitted(depl_cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "digits.toml"
    r = depl_cli("fit", DIGITS, "--calibration-seeds", 5, "--bootstrap", 0, "--omega", 0.9, "--target-loss", 0.5,
                 "--deadline", 40, "--out", out, "--png", out.parent / "png")
    assert r.returncode == 0, r.stderr
    return out, r.stdout


@pytest.mark.slow
def test_fit_calibrates_real_logs_into_a_readable_table(fitted):
    out, stdout = fitted
    table = tomllib.loads(out.read_text())["calibration"]
    assert table["method"] == "conformal-pit" and table["use"] is True and table["omega"] == 0.9
    u = np.array(table["scores"])
    assert u.size == 25 and np.all(np.diff(u) >= 0) and np.all((u >= 0) & (u <= 1))  # 5 experiments × 5 seeds
    assert "calibrated on 25 held-out runs" in stdout and "[calibration]" in out.read_text()
    assert (out.parent / "png" / "fit-calibration.png").stat().st_size > 10_000
    # the table round-trips: written again, read again, the same law
    s = load_scenario(out)
    again = parse_scenario(tomllib.loads(toml_dumps(scenario_dict(s))), "again")
    assert again.calibration == s.calibration
    law = loss_model_for(s)
    assert isinstance(law, CalibratedModel)
    # with confidence 0.95 (the default α) the 5 runs of full ×6 certify nothing: its level is the top
    assert float(law.distribution(["full"] * 6).level(0.9)) == 1.0
    # the marginal rule (α unset, from Python): a 6-epoch plan is read at the level of the epoch-6 scores (one row
    # per profiled epoch, each run once: a switch experiment's epochs before its switch are its first version's
    # runs, the same seed on the same schedule at the same φ, counted once)
    law = loss_model_for(s.model_copy(update={"target": s.target.model_copy(update={"alpha": None})}))
    rows = table["epoch_scores"]
    runs = [{(seed, tuple(sched[:k]), e["phi"]) for e in table["experiments"]
             for sched in [[v for v, n in zip(e["versions"], e["epochs"]) for _ in range(n)]] if len(sched) >= k
             for seed in e["seeds"]} for k in range(1, 13)]
    assert len(rows) == 12 and all(len(r) == len(n) and r == sorted(r) for r, n in zip(rows, runs))
    assert len(runs[0]) < 25 and len(runs[-1]) == 25   # the shared first epochs once; 25 distinct runs at the end
    d = law.distribution(["full"] * 6)
    pooled = rows[5][math.ceil((len(rows[5]) + 1) * 0.9 - 1e-9) - 1]
    # the experiments that ran full ×6 are groups of their own: 5 runs reach no 0.9 rank, so each holds the level
    # to its highest score at least (`CalibratedDistribution.level`)
    own = [e["epoch_scores"][5][-1] for e in table["experiments"]
           if [v for v, n in zip(e["versions"], e["epochs"]) for _ in range(n)][:6] == ["full"] * 6]
    assert own
    level = max(pooled, *own)
    assert float(d.level(0.9)) == level
    assert d.quantile(0.9) == pytest.approx(float(law.base.distribution(["full"] * 6).quantile(level)))


@pytest.mark.slow
def test_plan_and_its_uncalibrated_twin_from_the_cli(depl_cli, fitted, tmp_path):
    out, _ = fitted
    r, more, twin = depl_cli.each([["plan", out, "--json", "--quantile", 0.95], ["plan", out, "--quantile", 0.97],
                                   ["plan", out, "--quantile", 0.97, "--uncalibrated", "--out", tmp_path / "p.json"]])
    # 25 runs reach 0.95 by the marginal rank (19 needed), but runs read from training logs do not say what they
    # trained under (no run spec): with a confidence (the default α) they certify nothing, and the refusal says so
    assert r.returncode == 3 and "conditions were not recorded (runs read from training logs" in r.stderr, r.stderr
    r = more  # 0.97 needs 33; epoch 1 has 20 distinct runs (the switch
    # experiment's first epochs are its first version's runs, counted once)
    assert r.returncode == 2 and "needs at least 33 held-out runs" in r.stderr and "(13 more)" in r.stderr
    assert "'20 scores (epoch 1)'" in r.stderr
    r = twin
    assert r.returncode in (0, 3), r.stderr     # planned (or honestly infeasible) with the law as fitted


@pytest.mark.slow
def test_too_few_calibration_runs_are_reported_not_certified(depl_cli, tmp_path):
    out = tmp_path / "few.toml"
    r = depl_cli("fit", DIGITS, "--calibration-seeds", 2, "--bootstrap", 0, "--omega", 0.95, "--target-loss", 0.5,
                 "--out", out)
    assert r.returncode == 0, r.stderr
    # 10 runs at the last epoch, 8 distinct ones at epochs 1..6 (a switch experiment's epochs before its switch
    # are its first version's runs): the fewest is said
    assert ("cannot reach ω = 0.95 with 8 held-out runs at epochs 1..6 (split conformal needs enough runs at every "
            "scored epoch): split conformal needs n ≥ 19 (11 more") in r.stdout
    s = load_scenario(out)
    assert s.calibration is not None and s.calibration.use is False and len(s.calibration.scores) == 10
    assert not isinstance(loss_model_for(s), CalibratedModel)


def test_a_new_calibration_table_replaces_the_old_and_leaves_every_other_line():
    """`depl calibrate` writes the scenario's own text with [calibration] replaced: digits-small's table sits
    between [training] and [[clusters]], and its header states the old calibration."""
    from depl.fit.calibrate import with_calibration
    from depl.scenario import scenario_source

    text, _ = scenario_source("digits-small")
    table = toml_dumps({"calibration": {"method": "conformal-pit", "use": True, "omega": 0.9,
                                        "scores": [round(u, 3) for u in np.linspace(0.05, 0.95, 12)]}})
    new = with_calibration(text, table, ["[calibration]: twelve new runs."])
    old, got = tomllib.loads(text), tomllib.loads(new)
    assert got["calibration"]["scores"][0] == 0.05 and len(got["calibration"]["scores"]) == 12
    assert {k: v for k, v in got.items() if k != "calibration"} == {k: v for k, v in old.items() if k != "calibration"}
    assert new.count("[calibration]\n") == 1 and new.count("# [calibration]") == 1
    assert "0.993-quantile" not in new                       # the old header line about it is gone
    about = ("scores", "method", "use =", "omega", "# `depl plan` plans with the calibrated law")
    before = text.split("\n[calibration]\n")[0]   # the table and its experiments are the file's last lines
    kept = [line for line in before.splitlines() if "calibration" not in line and not line.startswith(about)]
    assert all(line in new.splitlines() for line in kept)   # every other line, comments included
    assert with_calibration(new, table, ["[calibration]: twelve new runs."]) == new
    parse_scenario(got, "new")


def test_a_new_calibration_replaces_old_experiment_tables_whose_headers_carry_a_comment():
    """A hand note after a header (`[[calibration.experiments]]  # the switch after 1`, `[calibration] # old`)
    is still that header: the old table and every old experiment go, none is kept beside the new ones (they
    would certify plans by the old runs) and the file stays TOML with one [calibration]."""
    from depl.fit.calibrate import with_calibration
    from depl.scenario import scenario_source

    text, _ = scenario_source("mnist1d-noniid")
    assert text.count("[[calibration.experiments]]\n") == 3
    noted = text.replace("[[calibration.experiments]]\n", "[[calibration.experiments]]  # a note\n") \
        .replace("[calibration]\n", "[calibration] # the old one\n", 1)
    exp = {"label": "full", "versions": ["full"], "epochs": [1], "phi": 1.0, "epoch_scores": [[0.5] * 12]}
    table = toml_dumps({"calibration": {"method": "conformal-pit", "use": True, "omega": 0.9,
                                        "scores": [0.5] * 12, "experiments": [exp]}})
    new = with_calibration(noted, table, ["[calibration]: twelve new runs."])
    got = tomllib.loads(new)
    assert [e["label"] for e in got["calibration"]["experiments"]] == ["full"]
    assert new == with_calibration(text, table, ["[calibration]: twelve new runs."])
