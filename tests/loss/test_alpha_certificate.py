"""`[target] alpha` / `depl plan --alpha`: a calibrated law that kept each experiment's runs certifies the plan it
returns with confidence 1 − α, by runs of the plan's own schedule only, each counted once."""

from __future__ import annotations

import json

import numpy as np
import pytest

from depl.certificate import Certificate, Kind
from depl.certificate import conformal
from depl.certificate import clopper_pearson_lower
from depl.loss import loss_model_for
from depl.planners import make_plan
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict, with_target


def _noniid(alpha):
    return parse_scenario(with_target(scenario_dict(load_scenario("mnist1d-noniid")), alpha=alpha), "noniid α")


def test_the_plan_returned_is_one_its_runs_certify():
    s = _noniid(0.05)
    law = loss_model_for(s)
    p = make_plan(s)
    schedule, phi = [e.model for e in p.epochs], s.phi(s.samples(p.datasets))
    ok, runs, met = law.certificate(schedule, phi)
    assert ok and p.loss_quantile <= s.target.loss
    # a φ computed anew from the samples matches the experiment's written one as the law's groups match it
    assert law.certificate(schedule, phi * (1 + 1e-8)) == (ok, runs, met)
    assert law.certificate(schedule, phi * (1 + 1e-4)) is None
    # recomputed by hand from the calibration table: the worst experiment that ran this schedule, its runs that met
    # ℓmax under the law as fitted, and the exact binomial rule at α over the number of experiments
    E = len(s.calibration.experiments)
    F = law.base.distribution(schedule, phi).cdf(s.target.loss)
    rows = [np.asarray(e.epoch_scores[len(schedule) - 1]) for e in s.calibration.experiments
            if e.schedule[:len(schedule)] == tuple(schedule) and abs(e.phi - phi) < 1e-6 * phi]
    assert rows and met == min(int(np.sum(r <= F)) for r in rows) and runs == min(r.size for r in rows)
    assert clopper_pearson_lower(met, runs, 0.05 / E) >= s.target.quantile
    # every schedule the law says it certifies passes the rule on its own runs; nothing unprofiled is certified
    for (sched, _), (good, n, h) in law.certified_schedules.items():
        assert not good or conformal.certifies(h, n, s.target.quantile, 0.05 / E)
    assert law.certificate(["pruned-0.5"] * 3 + ["full"] * 4, 1.0) is None


def test_alpha_is_005_by_default_and_only_python_reads_the_marginal_rank():
    s = load_scenario("mnist1d-noniid")
    assert s.target.alpha == 0.05 and loss_model_for(s).certified_schedules
    marginal = s.model_copy(update={"target": s.target.model_copy(update={"alpha": None})})
    assert loss_model_for(marginal).certified_schedules == {}


def test_the_cli_records_the_certificate_and_says_what_would_certify(depl_cli, tmp_path):
    r, low, high, low_json = depl_cli.each([["plan", "mnist1d-noniid", "--alpha", "0.05", "--json"],
                                            ["--verbose", "plan", "mnist1d-noniid", "--alpha", "0.001"],
                                            ["plan", "mnist1d-noniid", "--alpha", "0.7"],
                                            ["plan", "mnist1d-noniid", "--alpha", "0.001", "--json"]])
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["info"]
    cert = Certificate.of_plan(info)
    assert (cert.kind, cert.alpha, cert.certified, cert.runs, cert.hits, cert.evidence["experiments"]) == \
        (Kind.CALIBRATION, 0.05, True, 64, 63, 3)
    # and what it spent, on which runs (tests/fit/test_calibration_conditions.py checks the account)
    assert cert.alpha_share == 0.05 and len(cert.calibration["runs"]) == 3
    r = low
    assert r.returncode == 3 and "a certificate takes ≥ 76 runs (64 here;" in r.stderr
    # what failed, not only how many runs would do: the nearest chain's first test in the message, with its count;
    # each chain's under --verbose (a line each after the message) and in --json
    message, how, *each = r.stderr.splitlines()
    assert "certify no schedule: the nearest, '" in message and "of 64 met ℓmax, lower bound" in message
    assert "each test: `depl --verbose`" in message and len(message) < 420, message
    assert "a chain stopping at its first failure; every chain failed its first test:" in how
    assert len(each) == 3 and all("the law's likeliest)" in x and "of 64 met ℓmax" in x for x in each)
    said = json.loads(low_json.stdout)
    assert low_json.returncode == 3 and [x.strip() for x in (how, *each)] == said["detail"]
    r = high
    assert r.returncode == 2 and "target.alpha = 0.7" in r.stderr


def test_a_seed_counts_once_in_an_experiment():
    data = scenario_dict(load_scenario("mnist1d-noniid"))
    e = data["calibration"]["experiments"][0]
    e["seeds"] = list(range(16, 80))
    parse_scenario(data, "seeds")
    e["seeds"] = [16] + list(range(16, 79))
    with pytest.raises(ScenarioError, match="a seed is listed twice"):
        parse_scenario(data, "seeds")


def test_a_calibration_that_certifies_nothing_names_each_experiment_by_what_sets_it_apart():
    """mnist1d-noniid at ℓmax = 1: no run meets it.  Its experiments `full` and `full→pruned-0.5@3` share their
    first epoch (full ×1): each is named by its label, versions (switch point), φ, data and nodes — no two alike —,
    and the words say what the list is: every chain's first test, each failed."""
    import re

    d = scenario_dict(load_scenario("mnist1d-noniid"))
    d["target"] = {**d["target"], "loss": 1.0}
    law = loss_model_for(parse_scenario(with_target(d, alpha=0.05), "noniid ℓmax 1"))
    why = law.shortfall()
    assert why is not None and "stopping at the first that fails" not in why
    assert "certify no schedule: the nearest, '" in why and "lower bound 0.000 at α/3;" in why
    how, *listed = law.shortfall_detail()   # each chain's first test (`depl --verbose`, --json's detail)
    assert "every chain failed its first test" in how
    E = len(law.usable)
    assert E == 3 and len(listed) == E and len(set(listed)) == E            # one entry per experiment, none alike
    names = [re.match(r"(?:experiment )?('[^']+' \([^)]*\))", x).group(1) for x in listed]
    assert len(set(names)) == E
    for e in load_scenario("mnist1d-noniid").calibration.experiments:
        assert sum(f"'{e.label}' (" in x for x in listed) == 1
    assert any("full ×3, pruned-0.5 ×11" in x for x in listed)
    assert all("4 nodes" in x and "all of the data" in x for x in listed)
    assert all("its first epoch (" in x and "met ℓmax" in x for x in listed)


def test_every_output_of_a_plan_at_alpha_states_that_alpha(depl_cli, tmp_path):
    """`depl plan --alpha 0.2`: the text says confidence 0.8 everywhere — the calibration's certificate and the
    `depl certify` line, which names --alpha 0.2 —, never the default's 0.95; the JSON and the plan file say α 0.2."""
    scenarios = ("mnist1d-noniid", "digits-small")
    # the four commands in one start-up, each from main() (tests/conftest.py, DeplCli.each)
    *planned, as_json, default = depl_cli.each(
        [["plan", scenario, "--alpha", "0.2", "--out", tmp_path / f"{scenario}.json"] for scenario in scenarios]
        + [["plan", "mnist1d-noniid", "--alpha", "0.2", "--json"], ["plan", "digits-small"]])
    for scenario, r in zip(scenarios, planned):
        out = tmp_path / f"{scenario}.json"
        assert r.returncode == 0, r.stderr
        assert "confidence 0.95" not in r.stdout and "confidence 0.8" in r.stdout, r.stdout
        assert f"`depl certify {out} --alpha 0.2`" in r.stdout.replace("\n", "")
        assert json.loads(out.read_text())["scenario_spec"]["target"]["alpha"] == 0.2
    info = json.loads(as_json.stdout)
    assert info["info"]["certificate"]["alpha"] == 0.2 and info["scenario_spec"]["target"]["alpha"] == 0.2
    # the default α: the certify line as before
    assert "confidence 0.95" in default.stdout and "--alpha" not in default.stdout


def test_a_calibrated_plans_infinite_planned_mean_says_why(depl_cli, tmp_path):
    """mnist1d-noniid's level law is a lattice whose mass stops short of 1 (its truncation): a trajectory moved to a
    calibrated level above that mass is +∞ (the safe side), and the band's mean at epoch 2 is +∞ while the plan's
    expected ℓ(K), the law's mean, takes the law's top there.  `depl simulate` says so, and by how much."""
    s = load_scenario("mnist1d-noniid")
    p = make_plan(s)
    law, phi = loss_model_for(s), s.phi(s.samples(p.datasets))
    beyond = dict(law.beyond_top(p.schedule, phi))
    tr = law.simulate(p.schedule, phi, 4000, np.random.default_rng(0))
    inf = [k for k in range(1, tr.shape[1]) if np.isinf(tr[:, k]).any()]
    assert inf == [2] and np.isinf(tr[:, 2]).mean() == pytest.approx(beyond[2], abs=0.003)
    assert all(np.isfinite(law.distribution(p.schedule[:k], phi).mean()) for k in (1, 2, 3))
    f = tmp_path / "p.json"
    p.save(f)
    r, as_json = depl_cli.each([["simulate", f, "--runs", "4000", "--png", tmp_path / "p.png"],
                                ["simulate", f, "--runs", "4000", "--png", tmp_path / "p.png", "--json"]])
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "mean +∞ at epoch 2" in text and "beyond every loss the law allows" in text
    assert f"epoch 2: {100 * beyond[2]:.2g} % of the calibrated levels" in text and f"({p.loss_mean:.5g})" in text
    assert "epoch 2" in json.loads(as_json.stdout)["infinite_why"]
