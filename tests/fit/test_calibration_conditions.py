"""The calibration certificate counts real runs of the plan's own conditions, from their losses.

Attacks, each as a user would make it:
* runs of another scenario's conditions (mnist1d-noniid: 4 nodes, a Dirichlet partition) given to `depl calibrate
  mnist1d-small`: they were taken without a word (the two have the same data size, so the same φ); now exit 2 naming
  each field, the scenario's value and the runs';
* a law with F(ℓmax) = 0 at a schedule: every run's rounded PIT score 0 counted as a run that met ℓmax (48 of 64
  where none did); now the runs' own losses are counted;
* a calibration run that diverged: dropped, so the certificate counted only the runs that went well; now a miss;
* planning again on the same calibration runs: each certificate spent its α unseen; now the plan's
  info.certificate names the α and the runs, and `depl plan` says the α spent in all.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from depl.certificate import Certificate
from depl.loss import loss_model_for
from depl.scenario import Conditions, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
NONIID_RUNS = ROOT / "docs" / "certificate-store" / "calibration" / "noniid" / "runs.sqlite"


def test_calibrate_refuses_runs_of_other_conditions_naming_each_field(depl_cli, tmp_path):
    r, own = depl_cli.each([["calibrate", "mnist1d-small", NONIID_RUNS, "--out", tmp_path / "c.toml"],
                            ["calibrate", "mnist1d-noniid", NONIID_RUNS, "--out", tmp_path / "n.toml", "--omega", 0.9]])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "nodes per cluster: the scenario has 2, the calibration runs had 4" in r.stderr
    assert "[training] iid: the scenario has true, the calibration runs had false" in r.stderr
    assert "[training] dirichlet_alpha: the scenario has unset, the calibration runs had 0.5" in r.stderr
    assert not (tmp_path / "c.toml").exists()
    # the runs' own scenario takes them
    r = own
    assert r.returncode == 0, r.stderr
    (e, *_) = tomllib.loads((tmp_path / "n.toml").read_text())["calibration"]["experiments"]
    assert e["conditions"]["nodes"] == 4 and e["conditions"]["training"]["iid"] is False
    assert e["conditions"]["training"]["dirichlet_alpha"] == 0.5 and e["conditions"]["source"] == "mnist1d"
    assert len(e["losses"]) == len(e["seeds"]) and all(len(row) == sum(e["epochs"]) for row in e["losses"])


def test_conditions_compare_a_plans_job_field_by_field():
    s = load_scenario("mnist1d-small")
    c = s.calibration.experiments[0].conditions
    assert c is not None and c.mismatch(s) is None
    both = [(d.source, tuple(d.share)) for d in s.datasets]
    assert c.mismatch(s, nodes={2}, data=both) is None
    assert c.mismatch(s, nodes={2, 4}, data=both).words("the plan") == \
        "nodes per cluster: the plan has 4, the calibration runs had 2"
    assert c.mismatch(s, nodes={2}, data=both[:1]).field == "datasets (shares of the source)"
    other = s.model_copy(update={"training": s.training.model_copy(update={"lr": 0.05})})
    assert c.mismatch(other) == ("[training] lr", 0.05, 0.02)
    # a key of a newer run spec that this scenario does not know is a difference too
    newer = Conditions(**{**c.model_dump(), "training": {**c.training, "optimizer": "adam"}})
    assert newer.mismatch(s).field == "[training] optimizer"


def test_a_law_with_no_mass_below_lmax_counts_no_hit():
    """full ×2 of mnist1d-small: the law puts F(ℓmax) = 0, and 48 of the 64 rounded PIT scores are 0 — each counted
    as a run that met ℓmax, where none of the 64 did (their ℓ(2) ≥ 1.7 > ℓmax = 1.5)."""
    s = load_scenario("mnist1d-small")
    law = loss_model_for(s)
    (full,) = [e for e in s.calibration.experiments if e.label == "full"]
    assert float(law.base.distribution(["full"] * 2, 1.0).cdf(s.target.loss)) == 0.0
    assert sum(u == 0.0 for u in full.epoch_scores[1]) == 48                  # what was counted
    ok, runs, met = law.certificate(("full", "full"), 1.0)
    assert (ok, runs, met) == (False, 64, sum(x[1] <= s.target.loss for x in full.losses)) == (False, 64, 0)
    # pruned-0.75 ×12: its runs' own count (seeds 800000..800063: 56 of 64; the calibration of seeds 300000.. counted 63)
    (p75,) = [e for e in s.calibration.experiments if e.label == "pruned-0.75"]
    assert law.certificate(("pruned-0.75",) * 12, 1.0)[1:] == (64, sum(x[11] <= s.target.loss for x in p75.losses))
    assert sum(x[11] <= s.target.loss for x in p75.losses) == 56


def _profile_with_a_diverged_seed(path: Path, seeds: range, diverged: dict[int, int], epochs: int = 3) -> None:
    """A store of `depl profile mnist1d-small --version pruned-0.75` as the trainer writes it (its job, its spec),
    its epochs recorded as they are trained; the seeds of `diverged` turn non-finite at their epoch."""
    from depl.store import EpochRow, Store
    from depl.train.engine import execute
    from depl.train.engine import profile as prof

    s = load_scenario("mnist1d-small")
    exp = prof.Experiment("version", "pruned-0.75")
    job = prof.experiment_job(s, [d.name for d in s.datasets], exp, epochs, nodes=2)   # the scenario's clusters'
    rng = np.random.default_rng(3)
    with Store(path) as st:
        rid = prof.experiment_run_id(s.name, exp, job)
        execute.register(st, rid, "profile", job, {"experiment": exp.to_json(), "scenario": s.name})
        for seed in seeds:
            for k in range(1, epochs + 1):
                loss = 2.3 - 0.25 * k + 0.05 * rng.standard_normal()
                if diverged.get(seed) == k:
                    loss = math.nan
                st.record_epoch(rid, seed, EpochRow(k, "pruned-0.75", "profile", loss, 0.5, 1.0, 0.01))
                if diverged.get(seed) == k:
                    break


def test_a_diverged_calibration_run_counts_as_a_miss(depl_cli, tmp_path):
    store = tmp_path / "runs.sqlite"
    _profile_with_a_diverged_seed(store, range(5000, 5012), {5003: 2, 5007: 1})
    r, said = depl_cli.each([["calibrate", "mnist1d-small", store, "--out", tmp_path / "c.toml", "--omega", 0.8,
                              "--json"],
                             ["calibrate", "mnist1d-small", store, "--out", tmp_path / "d.toml", "--omega", 0.8]])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["runs"] == 12                  # every seed that started; was 10
    assert json.loads(r.stdout)["unfinished"] == 2
    assert said.returncode == 0 and "2 of these runs diverged or stopped" in said.stdout, said.stderr
    s = load_scenario(tmp_path / "c.toml")
    (e,) = s.calibration.experiments
    assert e.seeds == list(range(5000, 5012))
    assert e.losses[3][1:] == [math.inf, math.inf] and math.isfinite(e.losses[3][0])
    assert e.losses[7] == [math.inf] * 3
    assert all(row[-1] == 1.0 for row in e.epoch_scores)       # their scores: beyond every level
    law = loss_model_for(s.model_copy(update={"target": s.target.model_copy(update={"loss": 10.0, "quantile": 0.8})}))
    ok, runs, met = law.certificate(("pruned-0.75",) * 3, s.phi(s.samples([d.name for d in s.datasets])))
    assert (runs, met) == (12, 10)                            # ℓmax = 10: every finished run met it, not those two


def test_a_table_without_its_runs_losses_and_conditions_is_read_but_certifies_nothing_with_a_confidence(depl_cli, tmp_path):
    from depl.fit.report import toml_dumps

    data = tomllib.loads((ROOT / "src" / "depl" / "scenarios" / "mnist1d-small.toml").read_text())
    for e in data["calibration"]["experiments"]:
        del e["losses"], e["conditions"]
    old = tmp_path / "unrecorded.toml"
    old.write_text(toml_dumps(data))
    s = parse_scenario(tomllib.loads(old.read_text()), str(old))
    law = loss_model_for(s.model_copy(update={"target": s.target.model_copy(update={"alpha": None})}))
    assert "conditions were not recorded" in law.certified_by(["pruned-0.75"] * 12, 1.0, 0.9)
    r = depl_cli("plan", old, "--alpha", 0.05)
    assert r.returncode == 3 and "recalibrate with `depl calibrate" in r.stderr, r.stderr


@pytest.mark.slow
def test_the_plans_certificate_names_the_alpha_spent_and_plan_warns_of_the_total(depl_cli, tmp_path):
    env = {"DEPL_ALPHA_LEDGER": str(tmp_path / "ledger")}
    own = tmp_path / "mine.toml"
    own.write_text((ROOT / "src" / "depl" / "scenarios" / "mnist1d-small.toml").read_text())
    r, again, other, mine = depl_cli.each(
        [["plan", "mnist1d-small", "--omega", 0.9, "--alpha", 0.05, "--out", tmp_path / "a.json"],
         ["plan", "mnist1d-small", "--omega", 0.9, "--alpha", 0.05],       # the same certificate
         ["plan", "mnist1d-small", "--omega", 0.8, "--alpha", 0.05], ["plan", own, "--alpha", 0.05]], env=env)
    assert r.returncode == 0 and "α spent" not in r.stderr, r.stderr
    cert = Certificate.of_plan(json.loads((tmp_path / "a.json").read_text())["info"])
    s = load_scenario("mnist1d-small")
    assert cert.certified and cert.alpha_share == 0.05 and cert.seeds == ((800000, 800063),)
    assert cert.calibration["digest"] == s.calibration.digest()
    assert [(x["experiment"], x["seeds"], x["runs"]) for x in cert.calibration["runs"]] == \
        [(e.label, [[800000, 800063]], 64) for e in s.calibration.experiments]
    assert cert.calibration["certified_by"] == ["pruned-0.75"]
    assert again.returncode == 0 and "α spent" not in again.stderr, again.stderr
    assert other.returncode == 0, other.stderr
    assert "certified 1 other plan before" in other.stderr and "some of these 2 certificates is wrong is ≤ 0.1" in \
        " ".join(other.stderr.split())
    ledger = json.loads((tmp_path / "ledger" / "mnist1d-small.alpha.json").read_text())
    assert [(x["omega"], x["alpha"]) for x in ledger["entries"]] == [(0.9, 0.05), (0.8, 0.05)]
    # a scenario file keeps its account beside it
    assert mine.returncode == 0, mine.stderr
    assert (tmp_path / "mine.alpha.json").is_file()


@pytest.mark.parametrize("nodes", [4])
def test_a_plan_on_clusters_of_other_nodes_is_not_certified_by_runs_on_two(nodes):
    """A scenario with a 2-node and a 4-node cluster: the 2-node runs may certify a plan on the 2-node cluster only."""
    s = load_scenario("mnist1d-small")
    law = loss_model_for(s)
    sched, phi = ("pruned-0.75",) * 13, 1.0
    both = [(d.source, tuple(d.share)) for d in s.datasets]
    assert law.certificate(sched, phi)[0] is True
    assert law.job_mismatch(sched, phi, nodes={2}, data=both) is None
    why = law.job_mismatch(sched, phi, nodes={2, nodes}, data=both)
    assert why is not None and f"nodes per cluster: the plan has {nodes}, the calibration runs had 2" in why


def test_fit_sets_a_diverged_seed_apart_with_the_calibration_runs(tmp_path):
    """`depl fit --calibration-seeds`: the seeds set apart for calibration are the last ones; a seed among them that
    diverged is one of its runs (a miss), not dropped; one among the fitted seeds is skipped, as by the fit."""
    from depl.fit.calibrate import calibrate_with_pits
    from depl.fit.runs import load_profile
    from depl.store import Store

    store = tmp_path / "runs.sqlite"
    _profile_with_a_diverged_seed(store, range(100, 112), {101: 2, 110: 2})
    s = load_scenario("mnist1d-small")
    prof = load_profile(Store(store, readonly=True), s)
    fit, apart = prof.set_apart(4)
    (e,) = apart.experiments
    assert list(fit.experiments[0].seeds) == [100, 102, 103, 104, 105, 106]   # 101 diverged: neither fitted nor set apart
    assert list(e.seeds) == [107, 108, 109, 110, 111] and np.isinf(e.losses[3, 1:]).all()
    cal, _ = calibrate_with_pits(s, apart, 0.8)
    (table,) = cal.experiments
    assert table["seeds"] == [107, 108, 109, 110, 111] and table["losses"][3][1:] == [math.inf, math.inf]


def test_a_scenario_edited_after_its_calibration_is_not_certified_by_runs_of_its_old_conditions(depl_cli, tmp_path):
    """mnist1d-small with lr 0.05 in [training]: its calibration runs trained at lr 0.02 — they certify nothing of
    it (the scenario's plans would train otherwise); with α refused naming the field, without α left out and said."""
    text = (ROOT / "src" / "depl" / "scenarios" / "mnist1d-small.toml").read_text()
    assert "\nlr = 0.02\n" in text
    edited = tmp_path / "fast.toml"
    edited.write_text(text.replace("\nlr = 0.02\n", "\nlr = 0.05\n"))
    r = depl_cli("plan", edited, "--alpha", 0.05)
    assert r.returncode == 3, r.stderr
    assert "[training] lr: the scenario has 0.05, the calibration runs had 0.02" in " ".join(r.stderr.split())
    s = load_scenario(edited)
    law = loss_model_for(s.model_copy(update={"target": s.target.model_copy(update={"alpha": None})}))
    assert law.experiments == [] and "not used: pruned-0.75 (its runs differ" in \
        law.certified_by(["pruned-0.75"] * 12, 1.0, 0.9)


def test_a_switch_experiments_shared_prefix_counts_each_run_once_in_the_pooled_calibration(level_scenario):
    """A profile trains `full` and `full→small@2` on the same seeds: their first two epochs are the same runs (the
    same seed, the same schedule so far, the same φ).  The pooled epoch-k scores count each such run once — 6
    runs at epochs 1–2, not 12 — and the runs that differ (epochs 3–4: full ×3 against full ×2, small ×1) each."""
    from depl.fit.calibrate import calibrate_with_pits
    from depl.fit.runs import Profile, ProfiledExperiment

    rng = np.random.default_rng(0)
    seeds = np.arange(500, 506)
    full = np.sort(rng.uniform(0.4, 2.0, (6, 4)), axis=1)[:, ::-1].copy()
    switch = full.copy()
    switch[:, 2:] += 0.05            # after the switch: other losses; before it, the same runs' own
    samples = level_scenario.samples(["a", "b"])
    prof = Profile("level-toy", [ProfiledExperiment("version", "full", 1.0, None, 0, samples, 2, seeds, full),
                                 ProfiledExperiment("switch", "full", 1.0, "small", 2, samples, 2, seeds, switch)])
    cal, _ = calibrate_with_pits(level_scenario, prof, 0.9)
    assert [r.size for r in cal.epochs] == [6, 6, 12, 12]
    assert cal.runs == 12                # the last epochs: two schedules, each run once
    # each experiment keeps its own runs (its own table certifies its own schedule)
    assert [len(t["seeds"]) for t in cal.experiments] == [6, 6]
    # a seed run twice on one schedule (the same experiment profiled again) is one run, too
    again = Profile("level-toy", [prof.experiments[0], prof.experiments[0]])
    cal2, _ = calibrate_with_pits(level_scenario, again, 0.9)
    assert [r.size for r in cal2.epochs] == [6, 6, 6, 6] and cal2.runs == 6


@pytest.mark.parametrize("loss, first", [
    # the law as fitted meets ℓmax 1.5: the calibration binds, and says what to profile
    (None, "No calibration experiment may certify a plan with a confidence"),
    # it does not meet ℓmax 0.5: that binds whatever runs certify, said first, with its lowest reachable quantile
    (0.5, "By the deadline the lowest reachable 0.9-quantile is 1.337"),
])
def test_an_unreachable_target_gives_one_reason_on_stderr_and_in_json_the_binding_one_first(depl_cli, tmp_path,
                                                                                             loss, first):
    text = (ROOT / "src" / "depl" / "scenarios" / "mnist1d-small.toml").read_text()
    edited = tmp_path / "fast.toml"
    edited.write_text(text.replace("\nlr = 0.02\n", "\nlr = 0.05\n"))
    r = depl_cli("plan", edited, "--alpha", 0.05, "--json", *(["--loss", loss] if loss else []))
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    said = json.loads(r.stdout)
    assert said["exit_code"] == 3 and r.stderr.strip() == f"error: {said['reason']}"
    target = f"no plan meets the target: the 0.9-quantile of the final loss ≤ {loss or 1.5:g} by the deadline 120. "
    assert said["reason"].startswith(target + first), said["reason"]
    assert "[training] lr: the scenario has 0.05, the calibration runs had 0.02" in said["reason"]
    if loss:
        assert said["lowest_reachable_quantile"] == pytest.approx(1.3366, abs=1e-4)
        assert "Besides, no calibration experiment may certify" in said["reason"]
        assert "--uncalibrated" not in said["reason"]   # the law as fitted does not meet it either
    else:
        assert "`depl profile SCENARIO --first-seed N`, then `depl calibrate SCENARIO RUNS`" in said["reason"]
