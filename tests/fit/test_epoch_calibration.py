"""Calibration at the plan's length: a K-epoch plan is certified at the conformal level of the epoch-K scores
(`[calibration] epoch_scores`), not of the profiled last epoch; files with `scores` only keep the last-epoch
behaviour. On the shipped mnist1d-small (its [calibration] from 192 real runs, scripts/calibrate_mnist1d.sh)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from depl.loss import loss_model_for
from depl.loss.calibrated import CalibratedDistribution, CalibratedModel
from depl.planners import make_plan
from depl.predict import predict
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict


def direct_level(scores, omega):
    """u_(j), j = ⌈(n+1)ω⌉ of the sorted scores, 1 (nothing certified) when j > n: split conformal by hand."""
    u = sorted(scores)
    j = math.ceil((len(u) + 1) * omega - 1e-9)
    return 1.0 if j > len(u) else u[j - 1]


def marginal(s):
    """The scenario read by the marginal split-conformal rank (α unset, which only Python can say): the per-epoch
    levels this file is about; with α (the default) a schedule is certified by its own runs alone
    (tests/loss/test_alpha_certificate.py)."""
    return s.model_copy(update={"target": s.target.model_copy(update={"alpha": None})})


@pytest.fixture(scope="module")
def shipped():
    return marginal(load_scenario("mnist1d-small"))


def test_the_shipped_calibration_scores_every_profiled_epoch(shipped):
    c = shipped.calibration
    assert c.use and c.epoch_scores is not None
    assert len(c.epoch_scores) == shipped.max_epochs == 20          # one row per profiled epoch
    assert all(len(row) == len(c.scores) == 192 for row in c.epoch_scores)  # one score per run and epoch
    assert all(row == sorted(row) and 0 <= row[0] and row[-1] <= 1 for row in c.epoch_scores)
    # the last row and the last-epoch scores are the same runs, to 6 decimals
    assert np.allclose(c.epoch_scores[-1], c.scores, atol=1.1e-6)


@pytest.mark.parametrize("K", [8, 10, 11, 12, 20])
@pytest.mark.parametrize("omega", [0.8, 0.9, 0.95])
def test_a_K_epoch_schedule_is_certified_at_the_epoch_K_level(shipped, K, omega):
    law = loss_model_for(shipped)
    base = loss_model_for(shipped, calibrated=False)
    schedule = ["pruned-0.5"] + ["pruned-0.75"] * (K - 1)
    d = law.distribution(schedule)
    u = direct_level(shipped.calibration.epoch_scores[K - 1], omega)
    assert float(d.level(omega)) == u
    # exact: the calibrated ω-quantile is the law's own quantile at that level
    b = base.distribution(schedule)
    assert float(d.quantile(omega)) == pytest.approx(float(b.quantile(u)), rel=1e-12)
    # (a lattice law: its quantile is the certified upper end, so its cdf there is at least the level, by one lattice step at most)
    assert u - 1e-9 <= float(b.cdf(d.quantile(omega))) <= u + 3e-3


def test_past_the_scored_epochs_the_last_scored_epochs_level_is_used_and_said(shipped):
    law = loss_model_for(shipped)
    d = law.distribution(["full"] * 25)
    assert float(d.level(0.9)) == direct_level(shipped.calibration.epoch_scores[-1], 0.9)
    why = shipped.calibration_beyond(25)
    assert why is not None and "scored epochs 1..20 only: K = 25 is calibrated with the epoch-20 scores" in why
    assert shipped.calibration_beyond(12) is None


def test_the_level_moves_with_K_as_measured(shipped):
    """The 0.9-level of the shipped calibration's pooled scores is 0.411 at epoch 20 but far higher at the epochs
    the plans run (10–12): a last-epoch calibration would certify those plans too low."""
    rows = shipped.calibration.epoch_scores
    lv = {k: direct_level(rows[k - 1], 0.9) for k in (10, 11, 12, 20)}
    assert lv[20] == pytest.approx(0.4106, abs=5e-4)
    assert all(lv[k] > lv[20] + 0.02 for k in (10, 11, 12))


@pytest.mark.slow  # a Monte Carlo of calibrations
def test_monte_carlo_a_new_run_at_epoch_K_is_covered_at_omega():
    """A law misspecified differently at each epoch (the truth 2.5× wider at K = 6, 1.2× at K = 12, median 4%
    higher): calibrated by its epoch-K scores, a new K-epoch run falls below the calibrated ω-quantile with
    probability ⌈(n+1)ω⌉/(n+1) ≥ ω at each K; the last-epoch scores alone under-cover K = 6."""
    law = loss_model_for(load_scenario("mnist1d-small"), calibrated=False)
    omega, n, trials = 0.9, 19, 3000
    rng = np.random.default_rng(7)
    widen = {6: 2.5, 12: 1.2}
    expected = math.ceil((n + 1) * omega - 1e-9) / (n + 1)
    se = math.sqrt(expected * (1 - expected) / trials)
    truth, pit = {}, {}
    for K, w in widen.items():
        mu, sd = law.final(["full"] * K)
        truth[K] = mu * 1.04 * np.exp(w * sd * rng.standard_normal((trials, n + 1)))
        pit[K] = np.clip(law.distribution(["full"] * K).cdf(truth[K][:, :n]), 0, 1)
    for K in widen:
        hits_k, hits_last = np.empty(trials), np.empty(trials)
        for t in range(trials):
            rows = [pit[6][t]] * 6 + [pit[12][t]] * 6     # epochs 1..6 and 7..12
            m = CalibratedModel(law, pit[12][t], epoch_scores=rows)
            hits_k[t] = truth[K][t, n] <= m.distribution(["full"] * K).quantile(omega)
            hits_last[t] = truth[K][t, n] <= CalibratedModel(law, pit[12][t]).distribution(["full"] * K).quantile(omega)
        assert hits_k.mean() == pytest.approx(expected, abs=4 * se)
        if K == 6:
            assert hits_last.mean() < omega - 0.1           # the last epoch's scores certify K = 6 too low


def test_an_old_file_with_scores_only_loads_and_plans_as_before(shipped):
    """No breaking change: without epoch_scores every K is calibrated by the last-epoch scores — the ω 0.9 plan
    of the shipped law is then the one the last-epoch calibration made (by the marginal rank)."""
    data = scenario_dict(shipped)
    data["calibration"].pop("epoch_scores")
    data["calibration"].pop("experiments")
    old = marginal(parse_scenario(data, "old"))
    assert old.calibration.epoch_scores is None and old.calibration.scores_at(11) == old.calibration.scores
    law = loss_model_for(old)
    for K in (5, 11, 20):
        assert float(law.distribution(["full"] * K).level(0.9)) == direct_level(old.calibration.scores, 0.9)
    # and it plans identically to a file whose every epoch row is the last-epoch scores
    same = scenario_dict(shipped)
    same["calibration"]["epoch_scores"] = [same["calibration"]["scores"]] * 20
    same["calibration"].pop("experiments")
    p_old, p_same = make_plan(old, "depl"), make_plan(marginal(parse_scenario(same, "same")), "depl")
    assert p_old.schedule == p_same.schedule and p_old.cost == pytest.approx(p_same.cost, rel=1e-12)
    assert p_old.loss_quantile == pytest.approx(p_same.loss_quantile, rel=1e-12)
    p_new = make_plan(shipped, "depl")
    assert p_new.cost == pytest.approx(352.012, abs=1e-3) and len(p_new.schedule) == 12
    assert p_new.loss_quantile == pytest.approx(1.4654, abs=1e-4)


def test_too_few_scores_at_a_scored_epoch_are_refused_with_use_true(shipped):
    data = scenario_dict(shipped)
    rows = data["calibration"]["epoch_scores"]
    rows[14] = rows[14][:8]                             # epoch 15: 8 runs, ω = 0.9 needs 9
    with pytest.raises(ScenarioError, match=r"epoch_scores\[14\].*8 scores \(epoch 15\).*at least 9 .*1 more"):
        parse_scenario(data, "short")
    data["calibration"]["use"] = False
    assert not isinstance(loss_model_for(parse_scenario(data, "short")), CalibratedModel)
    data["calibration"]["use"] = True
    data["calibration"]["epoch_scores"] = [[0.5, 1.5]]
    with pytest.raises(ScenarioError, match=r"epoch_scores row 1 .*\[0, 1\], got 1.5"):
        parse_scenario(data, "bad")


def test_predict_band_is_finite_and_says_whose_lower_end(shipped):
    """3 of the 144 last-epoch scores are 0 (runs below the least loss the law allows): the calibrated law's
    1st percentile would be −∞. The band's lower end is the law's own, labelled; the upper, calibrated."""
    r = predict(shipped, ["full"] * 12)
    base = loss_model_for(shipped, calibrated=False).distribution(["full"] * 12)
    assert math.isfinite(r.band[0]) and r.band_low_law == "as fitted"
    assert r.band[0] == pytest.approx(float(base.quantile(0.01)))
    assert r.band[1] == pytest.approx(float(loss_model_for(shipped).distribution(["full"] * 12).quantile(0.99)))
    assert r.band[0] < r.loss_quantile < r.band[1]
    data = scenario_dict(shipped)
    data.pop("calibration")
    assert predict(parse_scenario(data, "plain"), ["full"] * 12).band_low_law == "law"
    assert isinstance(loss_model_for(shipped).distribution(["full"] * 12), CalibratedDistribution)


def _experiment(versions, epochs, rows, phi=1.0):
    from depl.scenario import CalibrationExperiment
    return CalibrationExperiment(label="-".join(versions), versions=versions, epochs=epochs, phi=phi,
                                 epoch_scores=[sorted(map(float, r)) for r in rows])


@pytest.mark.slow  # a Monte Carlo of calibrations
def test_monte_carlo_a_plan_shaped_like_an_experiment_is_covered_by_that_experiments_runs():
    """The law right for one experiment (full) and 6% (1.5 log-sd) optimistic for another (pruned-0.5): pooled, the scores
    certify a pruned-0.5 plan too low; the pruned-0.5 experiment's own runs — exchangeable with the plan's —
    certify it at ⌈(n+1)ω⌉/(n+1) ≥ ω, whatever the other experiments' runs say."""
    law = loss_model_for(load_scenario("mnist1d-small"), calibrated=False)
    omega, n, trials, K = 0.9, 19, 2000, 10
    rng = np.random.default_rng(11)
    full, pruned = ["full"] * K, ["pruned-0.5"] * K
    draws = {}
    for name, sched, bias in (("full", full, 1.0), ("pruned", pruned, 1.06)):
        mu, sd = law.final(sched)
        draws[name] = mu * bias * np.exp(sd * rng.standard_normal((trials, n + 1)))
    u_full = np.clip(law.distribution(full).cdf(draws["full"][:, :n]), 0, 1)
    u_pruned = np.clip(law.distribution(pruned).cdf(draws["pruned"][:, :n]), 0, 1)
    own_hits, pooled_hits = np.empty(trials), np.empty(trials)
    for t in range(trials):
        pooled = np.concatenate([u_full[t], u_pruned[t]])
        exps = [_experiment(["full"], [K], [u_full[t]] * K), _experiment(["pruned-0.5"], [K], [u_pruned[t]] * K)]
        new = draws["pruned"][t, n]
        own_hits[t] = new <= CalibratedModel(law, pooled, epoch_scores=[pooled] * K,
                                             experiments=exps).distribution(pruned).quantile(omega)
        pooled_hits[t] = new <= CalibratedModel(law, pooled, epoch_scores=[pooled] * K).distribution(pruned).quantile(omega)
    expected = math.ceil((n + 1) * omega - 1e-9) / (n + 1)
    se = math.sqrt(expected * (1 - expected) / trials)
    assert own_hits.mean() == pytest.approx(expected, abs=4 * se)
    assert pooled_hits.mean() < omega - 0.025      # measured: 0.8585


def test_a_schedule_between_profiled_switches_is_held_to_the_worst_of_them():
    """Switch experiments full→pruned-0.5 after 1 and after 6 epochs: a plan switching after 1 (or 6) is
    certified by that experiment's runs; one switching after 3, which no experiment ran, by the higher of the
    two levels; a schedule of other versions (or another φ) by the pooled scores alone. cdf inverts it."""
    law = loss_model_for(load_scenario("mnist1d-small"), calibrated=False)
    K = 8
    lo, hi = np.linspace(0.01, 0.6, 19), np.linspace(0.3, 0.99, 19)    # after 6: law pessimistic; after 1: optimistic
    pooled = np.linspace(0.02, 0.97, 40)
    m = CalibratedModel(law, pooled, epoch_scores=[pooled] * K, experiments=[
        _experiment(["full", "pruned-0.5"], [1, K - 1], [hi] * K), _experiment(["full", "pruned-0.5"], [6, K - 6], [lo] * K)])

    def sched(s):
        return ["full"] * s + ["pruned-0.5"] * (K - s)
    omega = 0.9
    assert float(m.distribution(sched(1)).level(omega)) == direct_level(hi, omega)
    assert float(m.distribution(sched(6)).level(omega)) == direct_level(lo, omega)
    assert float(m.distribution(sched(3)).level(omega)) == direct_level(hi, omega)    # the worse of the two
    assert float(m.distribution(["pruned-0.75"] * K).level(omega)) == direct_level(pooled, omega)
    assert float(m.distribution(sched(3), 0.5).level(omega)) == direct_level(pooled, omega)
    # past the level 19 runs reach (19/20 = 0.95): the pooled scores, never below the own runs' highest
    assert float(m.distribution(sched(1)).level(0.96)) == max(direct_level(pooled, 0.96), hi[-1])
    # the first K epochs of a longer experiment are that experiment too: full ×1 is what both ran first — on
    # the same seeds (a profile runs every experiment on them), so each by its own runs, the worse of the two
    assert float(m.distribution(["full"]).level(0.5)) == max(direct_level(hi, 0.5), direct_level(lo, 0.5))
    d = m.distribution(sched(3))
    for q in (0.5, 0.8, 0.9, 0.95):
        assert float(d.cdf(d.quantile(q))) >= q - 1e-12     # the quantile is where the cdf reaches q


@pytest.mark.parametrize("change, message", [
    (lambda e: e.update(epochs=[e["epochs"][0] - 1]), r"calibration\.experiments\[0\].*one row of epoch_scores per epoch"),
    (lambda e: e["epoch_scores"].__setitem__(1, [0.5, 2.0]), r"calibration\.experiments\[0\].*row 2.*\[0, 1\], got 2\.0"),
    (lambda e: e.update(versions=["huge"]), r"calibration\.experiments\[0\]\.versions.*'huge'.*no model"),
    (lambda e: e.update(epochs=[3, 1]), r"versions and epochs pair up"),
])
def test_a_bad_experiment_table_is_refused_naming_it(shipped, change, message):
    data = scenario_dict(shipped)
    rows = data["calibration"]["epoch_scores"][:3]
    exp = {"label": "full", "versions": ["full"], "epochs": [3], "phi": 1.0, "epoch_scores": [list(r) for r in rows]}
    data["calibration"]["experiments"] = [exp]
    assert parse_scenario(data, "ok").calibration.experiments[0].schedule == ("full",) * 3
    change(exp)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, "bad")


def test_experiments_that_ran_a_schedule_on_the_same_seeds_are_not_more_runs_of_it():
    """mnist1d-noniid's 3 experiments ran seeds 300000..300063 each; full ×1 and full ×3 are the first epochs of 2
    of them (full and the switch after 3): the same 64 seeds, one run each — not 128 runs. Each experiment
    certifies the schedule by its own 64 runs and the worst of them is used (here by the marginal rank): the
    level is no lower than any one experiment's, and ω = 0.99 (99 runs needed) is beyond the own runs (the
    pooled scores decide)."""
    s = marginal(load_scenario("mnist1d-noniid"))
    law = loss_model_for(s)
    for K, matches in ((1, 2), (3, 2)):
        sched = ("full",) * K
        rows = [r[K - 1] for sc, f, r in law.experiments if f == 1.0 and sc[:K] == sched]
        assert len(rows) == matches and all(r.size == 64 for r in rows)
        d = law.distribution(list(sched))
        for omega in (0.8, 0.9, 0.95):
            assert float(d.level(omega)) == max(direct_level(r, omega) for r in rows)
        assert float(d.level(0.99)) == max(direct_level(law.scores_at(K), 0.99), max(r[-1] for r in rows))
        said = law.certified_by(list(sched), 1.0, 0.9)
        assert said.startswith("64 held-out runs of this schedule") and f"{matches} profiled experiments" in said


def test_an_experiments_phi_is_written_to_significant_digits_so_a_small_phi_still_matches():
    """φ was written to 9 decimals: a φ below 5e-4 lost more than the 1e-6 relative tolerance a plan's φ is
    matched at, and its experiment never certified a plan."""
    from types import SimpleNamespace

    from depl.fit.calibrate import _experiment_table

    for phi in (1.23456789e-4, 3.3e-7, 0.987654321987):
        t = _experiment_table(SimpleNamespace(label="x", schedule=["full", "full"], seeds=[7],
                                              losses=np.ones((1, 2)), conditions=None), phi, [np.array([0.5])] * 2)
        assert math.isclose(t["phi"], phi, rel_tol=1e-9), (phi, t["phi"])


def test_a_plan_longer_than_the_scored_epochs_names_the_scores_actually_used(depl_cli, shipped, tmp_path):
    """A calibration of 3-epoch runs (`depl calibrate` on a 3-epoch profile) and a plan of K > 3 epochs: the plan
    is calibrated by the epoch-3 scores (the warning says so), and its certificate names the epoch-3 scores too
    (it said "epoch-K scores", which do not exist)."""

    from depl.fit.report import toml_dumps

    data = scenario_dict(shipped)
    rows = data["calibration"]["epoch_scores"][:3]
    data["calibration"]["epoch_scores"] = rows
    data["calibration"]["experiments"] = [{"label": "full", "versions": ["full"], "epochs": [3], "phi": 1.0,
                                           "epoch_scores": rows}]
    three = marginal(parse_scenario(data, "three"))
    law = loss_model_for(three)
    assert [law.scored_epoch(k) for k in (1, 3, 12)] == [1, 3, 3]
    said = law.certified_by(["pruned-0.75"] * 12, 1.0, 0.9)
    assert "192 pooled calibration runs' epoch-3 scores (they were scored to epoch 3 only; K = 12)" in said
    assert "epoch-12" not in said
    assert "epoch-3 scores" in law.certified_by(["full"] * 3, 1.0, 0.9)          # its own runs, at K = 3
    data["calibration"].pop("epoch_scores")
    data["calibration"].pop("experiments")
    assert "last-epoch scores" in loss_model_for(parse_scenario(data, "last")).certified_by(["full"] * 12, 1.0, 0.9)
    f = tmp_path / "three.toml"   # pooled scores only: nothing certified with α, the plan read at the marginal rank
    pooled = scenario_dict(three)
    pooled["calibration"].pop("experiments")
    f.write_text(toml_dumps(pooled))
    r = depl_cli("plan", f, env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    K = int(r.stdout.split("K = ")[1].split()[0])
    assert K > 3 and f"K = {K} is calibrated with the epoch-3 scores" in r.stderr
    line = next(x for x in r.stdout.splitlines() if "calibrated on" in x)
    assert "epoch-3 scores" in line and f"epoch-{K}" not in line


def test_an_experiment_table_records_each_runs_seed_once():
    """The seeds a calibration experiment's scores came from are written with it, each once (a certificate counts
    distinct runs), and read back."""
    from types import SimpleNamespace

    from depl.fit.calibrate import _experiment_table
    from depl.scenario import CalibrationExperiment

    losses = np.array([[9.0, 9.5], [3.0, 3.5], [5.0, np.inf]])   # each seed's own, the last one stopped
    t = _experiment_table(SimpleNamespace(label="x", schedule=["full", "full"], seeds=[9, 3, 5], losses=losses,
                                          conditions=None), 1.0, [np.array([0.5, 0.1, 0.9])] * 2)
    assert t["seeds"] == [3, 5, 9]
    assert t["losses"] == [[3.0, 3.5], [5.0, math.inf], [9.0, 9.5]]   # aligned with the seeds
    read = CalibrationExperiment(**t)
    assert read.seeds == [3, 5, 9] and read.losses == t["losses"]
