"""benchmarks/bench_routes.py at its CI size (`--small`), with real training on the tutorial's own task: two
certified searches, the calibration route, `--uncalibrated` + `depl certify`, every candidate's true coverage on
fresh seeds — its JSON checked, then a rerun that reads every step back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depl.certificate.bounds import clopper_pearson_interval, clopper_pearson_lower, clopper_pearson_upper
from depl.certificate.conformal import pac_scores_needed

pytestmark = pytest.mark.slow  # its module fixture runs the routes study: searches that train

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_routes.py"


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FLWR_TELEMETRY_ENABLED": "0", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(SCRIPT), "--small", "--out", str(out), *extra], cwd=out.parent,
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("routes") / "study"
    r = _run(out, "--md", str(out / "routes.md"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "routes.md").read_text(encoding="utf-8") == r.stdout
    return out, r, json.loads((out / "routes.json").read_text(encoding="utf-8"))


def test_the_searches_run_on_their_own_seeds_with_the_same_candidates(study):
    out, r, rep = study
    assert rep["format"] == "depl.bench-routes/1" and rep["omega"] == 0.9
    s = rep["searches"]
    assert [x["search"] for x in s] == [0, 1]
    assert [x["seeds"][0] for x in s] == [3_100_000, 3_110_000]          # F + 10000·i
    assert rep["summary"]["same_candidates_in_every_search"] is True
    for x in s:
        assert x["exit_code"] in (0, 3, 4)
        assert (x["returned"] is None) == (x["exit_code"] != 0)
        assert 0 < x["runs_trained"] <= 8 * len(rep["candidates"])     # at most --max-runs 8 per group
        assert x["seed_epochs"] >= x["runs_trained"]
        assert (out / f"search-{x['search']}" / "runs.sqlite").is_file()
        assert (out / f"search-{x['search']}" / "search-candidates.json").is_file()
    assert "the same in every search: yes" in r.stdout


def test_every_candidate_has_a_true_coverage_on_the_fresh_seeds_with_its_clopper_pearson_bounds(study):
    _, _, rep = study
    costs = [c["cost"] for c in rep["candidates"]]
    assert costs == sorted(costs) and len(costs) >= 2
    assert rep["truth_seeds"] == [3_300_000, 3_300_015]
    for c in rep["candidates"]:
        t = c["true_coverage"]
        assert t["runs"] == 16 and 0 <= t["hits"] <= 16 and t["rate"] == t["hits"] / 16
        assert t["cp95"] == list(clopper_pearson_interval(t["hits"], 16, 0.95))
        assert t["lower95"] == clopper_pearson_lower(t["hits"], 16, 0.05)
        assert t["upper95"] == clopper_pearson_upper(t["hits"], 16, 0.05)
        assert t["epochs"] == c["epochs"]
    # candidates that nest are read from one run: fewer groups than candidates here
    assert len({c["true_coverage"]["trained_with"] for c in rep["candidates"]}) < len(rep["candidates"])
    s = rep["summary"]
    good = [c for c in rep["candidates"] if c["true_coverage"]["rate"] >= 0.9]
    assert s["cheapest_covering"] == (None if not good else {"index": good[0]["index"], "cost": good[0]["cost"]})


def test_the_calibration_route_asks_the_runs_its_refusal_names(study):
    out, _, rep = study
    c = rep["calibration_route"]
    assert c["first_refusal"]["exit_code"] == 3
    # 5 experiments at α/5: every run of a schedule meeting ℓmax certifies it from this many runs
    assert c["runs_per_experiment_asked"] >= pac_scores_needed(0.9, 0.05 / 5) == 44
    assert c["experiments"] == ["full", "half", "full@0.5", "half@0.5", "full→half@6"]
    assert sorted(c["rounds"][0]["experiments"]) == sorted(c["experiments"])
    # --small caps it at 2 seeds per experiment: `depl plan` still refuses, and says so
    assert c["seeds_per_experiment"] == 2 and c["calibration_runs"] == 10 and c["seed_epochs"] == 120
    assert c["exit_code"] == 3 and c["cost"] is None and "a certificate takes ≥ 44 runs" in c["rounds"][0]["refusal"]
    assert rep["summary"]["runs_ratio"] == rep["summary"]["mean_runs_trained"] / 10
    assert (out / "calibration" / "calibrated.toml").is_file()


def test_the_uncalibrated_route_certifies_the_fitted_laws_plan_on_its_own_seeds(study):
    _, _, rep = study
    u = rep["uncalibrated_route"]
    assert u["exit_code"] in (0, 3, 4) and u["verdict"] in ("certified", "refuted", "undecided")
    assert u["cost"] == pytest.approx(rep["candidates"][0]["cost"])   # the planner's plan at the target: [0]
    assert 0 < u["runs_counted"] <= 8 and u["runs_trained"] >= u["runs_counted"]
    assert rep["summary"]["uncalibrated_route"]["true_coverage"]["runs"] == 16


def test_a_rerun_reads_every_step_back(study):
    out, _, rep = study
    r = _run(out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("read back") == 4                            # 2 searches and the 2 routes
    assert "(0 seed-epochs trained here" in r.stderr                    # the fresh seeds are in the store
    again = json.loads((out / "routes.json").read_text(encoding="utf-8"))
    assert again["candidates"] == rep["candidates"] and again["summary"] == rep["summary"]


def test_bad_input_is_refused_with_exit_2(tmp_path):
    r = _run(tmp_path / "x", "--scenario", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "--scenario" in r.stderr and "no such file" in r.stderr
