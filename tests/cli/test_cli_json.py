"""Output a script can read: --json, target overrides, exit 4, whole lines in a pipe; `depl predict`."""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import pytest

from depl.loss import loss_model_for
from depl.predict import ScheduleError, parse_schedule, predict
from depl.scenario import load_scenario
from depl.simulate import quantile_ci, simulate_schedule
from depl.store import EpochRow, Store


@pytest.fixture
def cli(depl_cli):
    """depl with no terminal width set, as in a pipe: what --json prints must not depend on one.  `cli.each`: several
    commands in one start-up (tests/conftest.py, DeplCli.each)."""
    run = partial(depl_cli, env={"COLUMNS": None})
    run.each = partial(depl_cli.each, env={"COLUMNS": None})
    return run


def one_object(stdout: str) -> dict:
    """stdout is exactly one JSON object (json.loads fails on anything around it)."""
    return json.loads(stdout)


def test_plan_json_with_target_overrides(cli, tmp_path):
    out = tmp_path / "p.json"
    r = cli("plan", "paper-alexnet", "--json", "--loss", "10", "--quantile", "0.95", "--deadline", "50000",
            "--out", out)
    assert r.returncode == 0, r.stderr
    p = one_object(r.stdout)
    assert (p["loss_target"], p["omega"], p["deadline"]) == (10.0, 0.95, 50000.0)
    assert p["feasible"] and p["loss_quantile"] <= 10.0 and p["time"] <= 50000.0 * (1 + 1e-9)
    assert p == json.loads(out.read_text())                       # the same plan as the file
    assert p["scenario_spec"]["target"] == {"loss": 10.0, "quantile": 0.95, "deadline": 50000.0, "alpha": 0.05}
    r = cli("plan", "paper-alexnet", "--quantile", "1.5")
    assert r.returncode == 2 and "--quantile 1.5" in r.stderr and "target.quantile" in r.stderr and not r.stdout
    r = cli("plan", "paper-alexnet", "--quantile", "1.5", "--json")
    assert r.returncode == 2 and one_object(r.stdout) == {"error": r.stderr.strip().removeprefix("error: "),
                                                           "exit_code": 2}


def test_plan_json_says_why_infeasible_and_what_is_reachable(cli):
    r = cli("plan", "paper-alexnet", "--loss", "1", "--deadline", "20000", "--eta", "60", "--json")
    assert r.returncode == 3 and "lowest reachable 0.99-quantile" in r.stderr  # the line on stderr as ever
    p = one_object(r.stdout)                                      # and the verdict on stdout: it used to be empty
    assert p["feasible"] is False and p["exit_code"] == 3 and p["reason"] in r.stderr
    assert (p["scenario"], p["method"], p["target"]) == ("paper-alexnet", "depl",
                                                         {"loss": 1.0, "quantile": 0.99, "deadline": 20000.0})
    # what the message says is reachable, as numbers
    assert f"lowest reachable 0.99-quantile is {p['lowest_reachable_quantile']:.4g}" in p["reason"]
    assert p["lowest_reachable_quantile"] > 1.0 and p["earliest_time"] > 20000.0
    assert f"at the earliest after {p['earliest_time']:.6g} time units" in p["reason"]


REFUSED = [["simulate", "missing.json"], ["simulate", "p.json", "--runs", "5"],
           ["predict", "mnist1d-small", "full:2,nope:3"], ["predict", "nope.toml", "full:3"],
           ["runs", "show", "--store", "missing.sqlite"], ["plan", "paper-alexnet", "--eta", "1"],
           ["coverage", "--runs", "1"], ["validate", "mnist1d-small", "missing.json"],
           ["calibrate", "mnist1d-small", "missing.sqlite", "--out", "c.toml"]]


@pytest.fixture(scope="module")
def refused(depl_cli, tmp_path_factory):
    """Each of REFUSED with --json, in an empty folder, one start-up for them all."""
    return depl_cli.each([[*args, "--json"] for args in REFUSED], cwd=tmp_path_factory.mktemp("refused"),
                         env={"COLUMNS": None})


@pytest.mark.parametrize("i", range(len(REFUSED)), ids=[" ".join(a) for a in REFUSED])
def test_every_json_command_refusing_its_input_says_so_in_json(refused, i):
    # exit 2 with --json: the error line on stderr, and one object naming it on stdout for the script reading it
    r = refused[i]
    assert r.returncode == 2, (r.returncode, r.stderr)
    d = one_object(r.stdout)
    assert set(d) == {"error", "exit_code"} and d["exit_code"] == 2 and d["error"] in r.stderr


@pytest.mark.slow
def test_simulate_json_and_exit_4_when_refuted(cli, tmp_path):
    plan = tmp_path / "p.json"
    planned, r = cli.each([["plan", "paper-alexnet", "--out", plan],
                           ["simulate", plan, "--json", "--runs", "1000", "--png", tmp_path / "b.png"]])
    assert planned.returncode == 0, planned.stderr
    assert r.returncode == 0, r.stderr
    s = one_object(r.stdout)
    assert s["not_refuted"] and s["p_meet_ci"][1] >= s["omega"] and len(s["band"]["mean"]) == s["epochs"] + 1
    # the same plan promising a lower loss than its schedule reaches: the Monte Carlo refutes it
    d = json.loads(plan.read_text())
    d["loss_target"] = d["scenario_spec"]["target"]["loss"] = d["loss_mean"]  # plan and its scenario agree
    plan.write_text(json.dumps(d))
    r, text = cli.each([["simulate", plan, "--json", "--runs", "1000", "--png", tmp_path / "b.png"],
                        ["simulate", plan, "--runs", "1000", "--png", tmp_path / "b.png"]])
    assert r.returncode == 4 and one_object(r.stdout)["not_refuted"] is False
    assert text.returncode == 4 and "refuted" in text.stdout


@pytest.mark.parametrize("scenario,schedule", [("paper-alexnet", "fast-unsteady:10,intermediate:6"),
                                               ("mnist1d-small", "full:8,pruned-0.5:6")])
def test_predict_agrees_with_monte_carlo(cli, scenario, schedule, tmp_path):
    s = load_scenario(scenario)
    if s.calibration is not None:  # mnist1d-small ships calibrated: here, its law as fitted (the band is the law's)
        from depl.fit.report import toml_dumps
        from depl.scenario import scenario_dict

        calibrated = cli("predict", scenario, schedule, "--json", "--quantile", "0.9")
        assert calibrated.returncode == 0, calibrated.stderr
        d = loss_model_for(s).distribution([m for m, n in one_object(calibrated.stdout)["schedule"] for _ in range(n)])
        want = float(d.quantile_bounds(0.9)[1])   # +∞ (JSON null) for a schedule no calibration run certifies
        got = one_object(calibrated.stdout)["loss_quantile"]
        assert got is None if math.isinf(want) else got == pytest.approx(want)
        data = scenario_dict(s)
        data.pop("calibration")
        scenario = tmp_path / "as-fitted.toml"
        scenario.write_text(toml_dumps(data))
        s = load_scenario(scenario)
    r = cli("predict", scenario, schedule, "--json", "--quantile", "0.9")
    assert r.returncode == 0, r.stderr
    p = one_object(r.stdout)
    assert p["epochs"] == 16 if s.name == "paper-alexnet" else 14
    sched = [m for m, n in p["schedule"] for _ in range(n)]
    final = simulate_schedule(loss_model_for(s), sched, s.phi(s.samples(p["datasets"])), 40_000, 7)[:, -1]
    lo, hi = quantile_ci(final, 0.9, alpha=0.025)
    # certified: not below the Monte Carlo quantile's interval, and not loose
    assert p["loss_quantile"] >= lo and p["loss_quantile"] == pytest.approx(np.quantile(final, 0.9), rel=0.01)
    assert p["loss_mean"] == pytest.approx(final.mean(), rel=0.01)
    assert p["band"][0] == pytest.approx(np.quantile(final, 0.01), rel=0.02)
    assert p["band"][1] == pytest.approx(np.quantile(final, 0.99), rel=0.02)
    text = cli("predict", scenario, schedule)
    assert text.returncode == 0 and f"{s.target.quantile:g}-quantile of ℓ(K)" in text.stdout  # default q = ω
    # a pipe gets whole lines, not 80 columns of folded text
    head = text.stdout.splitlines()[0]
    assert head.endswith(")") and len(head) > 80


def test_predict_bad_schedule_is_bad_input(cli):
    s = load_scenario("mnist1d-small")
    for sched, why in [("full", "not VERSION:EPOCHS"), ("full:x", "not a whole number"), ("full:0", "at least one"),
                       ("nope:3", "not a model"), ("pruned-0.75:2,full:2", "no law for it")]:
        with pytest.raises(ScheduleError, match=why):
            predict(s, parse_schedule(sched))
    with pytest.raises(ScheduleError, match="dataset 'nope': not a dataset"):
        predict(s, parse_schedule("full:3"), datasets=["nope"])
    # half the data: φ < 1 under the data law, a higher loss than with all of it
    half, full = (predict(s, parse_schedule("full:8"), datasets=d) for d in (["mnist1d-a"], None))
    assert half.phi < 1 == full.phi and half.loss_mean > full.loss_mean and full.datasets == ["mnist1d-a", "mnist1d-b"]
    r = cli("predict", "mnist1d-small", "full:2,nope:3")
    assert r.returncode == 2 and "version 'nope': not a model of 'mnist1d-small'" in r.stderr and not r.stdout


@pytest.mark.slow
def test_predict_says_in_words_where_a_level_lies_outside_the_laws_range_and_flags_a_negative_loss(cli):
    """mnist1d-small (calibrated): at q = 1e-6 the calibration runs scored below every loss the law allows (the
    quantile is −∞: it was printed "≤ -inf (exact bracket [-inf, -inf])"); q = 0.999999999 is beyond what 192
    scores certify (+∞: the bracket "[inf, inf]" was eaten as console markup, printed empty). Both are said in
    words, with no bracket; paper-alexnet's lattice law holds 1 − δ of the mass, and a level above it is said too;
    a schedule run past where its law holds (a negative mean and quantile) is flagged."""
    s = load_scenario("mnist1d-small")
    low, high, mid = (predict(s, parse_schedule("full:3"), q) for q in (1e-6, 0.999999999, 0.5))
    assert low.quantile_range == "below" and low.notes[0].startswith("below the law's lowest representable loss")
    assert high.quantile_range == "above" and "not certified with this law's calibration" in high.notes[0]
    assert "64 calibration runs of this schedule; a certificate at confidence 0.95 takes at least" in high.notes[0]
    assert high.estimate is None   # beyond the law as fitted too: no estimate to give, and none is made up
    lo, hi = mid.loss_quantile_bounds
    assert mid.quantile_range == "within" and mid.notes == () and lo <= mid.loss_quantile == hi < mid.band[1]
    qs = (("1e-6", "1e-06-quantile of ℓ(K)  below the law's lowest representable loss ("),
          ("0.999999999", "0.999999999-quantile of ℓ(K)  not certified with this law's calibration"))
    *said, r, neg = cli.each([["predict", "mnist1d-small", "full:3", "--quantile", q, *json_]
                              for q, _ in qs for json_ in ([], ["--json"])]
                             + [["predict", "paper-alexnet", "intermediate:70"],
                                ["predict", "paper-alexnet", "intermediate:70", "--json"]])
    for (q, words), text, as_json in zip(qs, said[::2], said[1::2]):
        assert text.returncode == 0, text.stderr
        line = next(x for x in text.stdout.splitlines() if "-quantile of ℓ(K)" in x)
        assert words in line and "[" not in line and "inf" not in line, line
        j = one_object(as_json.stdout)
        assert j["loss_quantile"] is None and j["quantile_range"] in ("below", "above") and j["notes"]
    grid = predict(load_scenario("paper-alexnet"), parse_schedule("intermediate:20"), 1 - 1e-10)
    assert grid.quantile_range == "above" and "not certified with this law's grid (it holds 1 − " in grid.notes[0]
    assert r.returncode == 0 and "note: negative mean and 0.99-quantile: a loss is never below 0" in r.stdout
    neg = one_object(neg.stdout)
    assert neg["loss_mean"] < 0 and neg["quantile_range"] == "within" and "negative mean" in neg["notes"][0]
    assert predict(load_scenario("paper-alexnet"), parse_schedule("intermediate:20")).notes == ()


def test_runs_show_json(cli, tmp_path):
    st = Store(tmp_path / "runs.sqlite")
    st.start_run("r1", "plan", {"plan": {"method": "depl", "scenario": "x"}})
    for seed, losses in enumerate([[2.0, 1.5, 1.2], [2.1, 1.4, 1.0]]):
        for k, loss in enumerate(losses, start=1):
            st.record_epoch("r1", seed, EpochRow(k, "full", "edge", loss, 0.5, loss, 0.25), final=k == 3)
    st.close()
    r = cli("runs", "show", "--store", tmp_path / "runs.sqlite", "--json")
    assert r.returncode == 0, r.stderr
    d = one_object(r.stdout)
    (row,) = d["runs"]
    assert row["run"] == "r1" and row["seeds"] == 2 and row["epochs"] == 3
    assert row["final_loss_mean"] == pytest.approx(1.1) and row["seconds_per_epoch"] == pytest.approx(0.25)
    assert row["band"]["mean"] == pytest.approx([2.05, 1.45, 1.1])
