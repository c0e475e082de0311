"""`depl calibrate`: a shipped law recalibrated on new runs (`depl profile --first-seed`), without refitting it —
the same [calibration] as `depl fit --calibration-seeds` computes on the same runs; the law's own fitting seeds
and runs it cannot score refused. Real training throughout (a tiny profile of mnist1d-small)."""

from __future__ import annotations

import json
import tomllib

import pytest

from depl.loss import loss_model_for
from depl.loss.calibrated import CalibratedModel
from depl.scenario import load_scenario

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

pytest.importorskip("torch")

# one version at two data fractions, 3 epochs; one seed at a time so that a seed's run is the same in any store
PROFILE = ["profile", "mnist1d-small", "--epochs", "3", "--version", "pruned-0.75", "--fractions", "1,0.5",
           "--nodes", "2", "--dataset", "mnist1d-a", "--seed-batch", "1", "--workers", "1"]


@pytest.fixture(scope="module")
def runs(depl_cli, tmp_path_factory):
    """Seeds 0..5 profiled and fitted with the last 2 set apart (the law fitted on 0..3, calibrated on 4, 5);
    then seeds 4, 5 profiled again into a store of their own (`--first-seed 4`)."""
    d = tmp_path_factory.mktemp("recal")
    r = depl_cli(*PROFILE, "--seeds", 6, "--out", d / "all")
    assert r.returncode == 0, r.stderr
    r = depl_cli("fit", d / "all" / "runs.sqlite", "--calibration-seeds", 2, "--bootstrap", 0, "--omega", 0.5,
                 "--target-loss", 2.25, "--deadline", 1000, "--name", "tiny", "--out", d / "fitted.toml")
    assert r.returncode == 0, r.stderr
    r = depl_cli(*PROFILE, "--seeds", 2, "--first-seed", 4, "--out", d / "new")
    assert r.returncode == 0, r.stderr
    assert "2 seeds (4..5)" in r.stdout
    return d


def test_profile_first_seed_keeps_its_seeds_and_resumes(depl_cli, runs):
    from depl.store import Store

    st = Store(str(runs / "new" / "runs.sqlite"), readonly=True)
    for run in st.runs("profile"):
        assert sorted(st.losses(run["run_id"])) == [4, 5]
    r = depl_cli(*PROFILE, "--seeds", 2, "--first-seed", 4, "--out", runs / "new")
    assert r.returncode == 0 and "resuming (12 of 12 epochs done)" in r.stdout, r.stdout + r.stderr


def test_fit_records_the_seeds_it_fitted_on(runs):
    s = load_scenario(runs / "fitted.toml")
    assert s.fitted_seeds == [0, 3]      # seeds 4, 5 set apart for calibration
    assert "on seeds 0..3 (fitted_seeds" in (runs / "fitted.toml").read_text()


def test_calibrate_on_new_runs_writes_what_fit_computed_on_the_same_runs(depl_cli, runs):
    out = runs / "calibrated.toml"
    r = depl_cli("calibrate", runs / "fitted.toml", runs / "new" / "runs.sqlite", "--out", out, "--json",
                 "--png", runs / "png")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    fitted, cal = (tomllib.loads(p.read_text()) for p in (runs / "fitted.toml", out))
    # the same runs (seeds 4, 5 of both experiments), the same scores, the same table
    assert rep["runs"] == 4 and rep["seeds"] == [4, 5] and rep["fitted_seeds"] == [0, 3]
    assert cal["calibration"] == fitted["calibration"]
    # the law is untouched: every other key as it was
    assert {k: v for k, v in cal.items() if k != "calibration"} == {k: v for k, v in fitted.items() if k != "calibration"}
    s = load_scenario(out)
    assert isinstance(loss_model_for(s), CalibratedModel)
    # every epoch scored (3 epochs, 4 runs each), read back; a K-epoch schedule at the epoch-K level
    rows = s.calibration.epoch_scores
    assert len(rows) == 3 and all(len(r) == 4 for r in rows) and len(rep["epoch_levels"]) == 3
    exps = {e.label: e for e in s.calibration.experiments}
    assert set(exps) == {"pruned-0.75", "pruned-0.75@0.5"}     # each experiment's own scores, read back
    whole, half = exps["pruned-0.75"], exps["pruned-0.75@0.5"]
    assert whole.versions == ["pruned-0.75"] and whole.epochs == [3] and whole.phi == 1.0 > half.phi
    for K in (1, 2, 3):
        u = sorted(rows[K - 1])[2]                     # split conformal by hand: j = ⌈(4+1)·0.5⌉ = 3
        assert rep["epoch_levels"][K - 1] == u
        assert sorted(whole.epoch_scores[K - 1] + half.epoch_scores[K - 1]) == pytest.approx(rows[K - 1], abs=1e-12)
        # a plan of the experiment's schedule at its φ is certified by that experiment's 2 runs: j = ⌈3·0.5⌉ = 2
        for e in (whole, half):
            own = max(e.epoch_scores[K - 1])
            assert float(loss_model_for(s).distribution(["pruned-0.75"] * K, e.phi).level(0.5)) == own
        # beyond the levels 2 runs reach (q > 2/3), the pooled scores decide, never below the own runs' highest
        assert float(loss_model_for(s).distribution(["pruned-0.75"] * K).level(0.75)) == \
            max(sorted(rows[K - 1])[3], max(whole.epoch_scores[K - 1]))
        # at a φ no experiment ran, the pooled scores alone
        assert float(loss_model_for(s).distribution(["pruned-0.75"] * K, 0.8).level(0.5)) == u
    assert rep["level"] == pytest.approx(sorted(s.calibration.scores)[2])   # the last epoch's (6 decimals)
    assert rows[-1] == pytest.approx(s.calibration.scores, abs=1.1e-6)
    assert len(rep["reliability"]["before"]) == len(rep["reliability"]["levels"]) == len(rep["reliability"]["after"])
    assert (runs / "png" / "calibration.png").stat().st_size > 10_000
    r = depl_cli("plan", out, "--out", runs / "plan.json")
    assert r.returncode in (0, 3), r.stderr          # planned (or honestly infeasible) with the calibrated law
    # calibrating the written file again replaces its table: the same file, no second header
    r = depl_cli("calibrate", out, runs / "new" / "runs.sqlite", "--out", runs / "again.toml")
    assert r.returncode == 0, r.stderr
    assert (runs / "again.toml").read_text() == out.read_text()
    assert out.read_text().count("[calibration]\n") == 1 and out.read_text().count("# [calibration]: calibrated") == 1


def test_the_laws_fitting_seeds_are_refused(depl_cli, runs):
    r = depl_cli("calibrate", runs / "fitted.toml", runs / "all" / "runs.sqlite", "--out", runs / "x.toml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "seeds 0, 1, 2, 3, which the law of scenario 'tiny' was fitted on (fitted_seeds = [0, 3])" in r.stderr
    assert "--first-seed 4" in r.stderr and not (runs / "x.toml").exists()


def test_too_few_runs_say_how_many_more_and_write_use_false(depl_cli, runs):
    out = runs / "few.toml"
    r = depl_cli("calibrate", runs / "fitted.toml", runs / "new" / "runs.sqlite", "--out", out, "--omega", 0.9)
    assert r.returncode == 0, r.stderr
    assert "cannot reach ω = 0.9 with 4 new runs: split conformal needs n ≥ 9 (5 more" in r.stdout
    assert "5 more; profile more seeds past the law's: `depl profile --first-seed 6`" in r.stdout
    s = load_scenario(out)
    assert s.calibration.use is False and s.calibration.omega == 0.9 and len(s.calibration.scores) == 4
    assert not isinstance(loss_model_for(s), CalibratedModel)


def _edited(runs, name, old, new):
    p = runs / name
    text = (runs / "fitted.toml").read_text()
    assert old in text
    p.write_text(text.replace(old, new))
    return p


@pytest.mark.parametrize("case", ["no fitted_seeds", "unknown version", "no data law", "no store", "bad omega",
                                  "not a scenario"])
def test_bad_input_exits_2_with_one_clear_line(depl_cli, runs, case):
    store = runs / "new" / "runs.sqlite"
    fitted = runs / "fitted.toml"
    args, why = {
        "no fitted_seeds": ([_edited(runs, "a.toml", "fitted_seeds = [0, 3]\n", ""), store], "does not say which seeds"),
        "unknown version": ([_edited(runs, "b.toml", '"pruned-0.75"', '"other"'), store],
                            "version 'pruned-0.75' is not a model of scenario 'tiny'"),
        "no data law": ([_no_data_law(runs), store], "data fraction 0.5, but scenario 'tiny' has no [data_law]"),
        "no store": ([fitted, runs / "nope.sqlite"], "no such store"),
        "bad omega": ([fitted, store, "--omega", 1.5], "--omega 1.5: must be in"),
        "not a scenario": ([runs / "missing.toml", store], "no such scenario file"),
    }[case]
    r = depl_cli("calibrate", *args, "--out", runs / f"bad-{case}.toml")
    assert r.returncode == 2, r.stdout + r.stderr
    assert why in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (runs / f"bad-{case}.toml").exists()


def _no_data_law(runs):
    data = tomllib.loads((runs / "fitted.toml").read_text())
    data.pop("data_law")
    from depl.fit.report import toml_dumps

    p = runs / "c.toml"
    p.write_text(toml_dumps(data))
    return p
