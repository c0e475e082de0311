"""Coverage of a plan on real runs: the Clopper–Pearson verdict, the report, the band plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from depl.certificate import Certificate, Kind, Outcome
from depl.jsonout import dumps
from depl.planners import make_plan
from depl.scenario import load_scenario
from depl.report.plots import plot_validation
from depl.validate import coverage, validate


def pooled_only(name: str):
    """A built-in with its calibration's pooled scores only (no experiments: nothing certified, the marginal rank)."""
    from depl.scenario import parse_scenario, scenario_dict

    d = scenario_dict(load_scenario(name))
    d["calibration"].pop("experiments")
    assert any(u >= 1.0 for u in d["calibration"]["epoch_scores"][0])   # runs beyond the law at epoch 1
    return parse_scenario(d, f"{name} (pooled calibration)")


def test_coverage_is_clopper_pearson_one_sided_at_alpha():
    final = np.r_[np.zeros(170), np.ones(30)]
    c = coverage(final, target=0.5, omega=0.9, alpha=0.05)
    assert (c.hits, c.runs, c.rate) == (170, 200, 0.85)
    # the two one-sided 95 % bounds (together scipy's two-sided 90 % interval)
    ci = stats.binomtest(170, 200).proportion_ci(0.9, method="exact")
    assert c.ci == pytest.approx((ci.low, ci.high))
    assert c.ci[1] < 0.9 and not c.verdict.not_refuted        # 85% of 200 refutes ω = 0.9
    assert coverage(np.r_[np.zeros(175), np.ones(25)], 0.5, 0.9, 0.05).verdict.not_refuted  # 87.5%: not refuted


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_the_bounds_shown_are_the_ones_the_verdict_tests(alpha):
    """For every count of 200 runs, refuted exactly where the upper bound shown lies below ω, certified exactly
    where the lower bound shown reaches it — no interval that holds ω beside "refuted" (a two-sided 95 % interval
    is wider than the one-sided bounds: 171 of 200 gave [0.798, 0.901] and "refuted" at ω = 0.9)."""
    omega, n = 0.9, 200
    for h in range(n + 1):
        c = coverage(np.r_[np.zeros(h), np.ones(n - h)], 0.5, omega, alpha)
        lower, upper = c.ci
        assert (c.verdict == "refuted") == (upper < omega), h
        assert (c.verdict == "certified") == (lower >= omega), h
        pct = f"{100 * (1 - alpha):g} %"
        shown = {"refuted": f"one-sided {pct} upper bound {upper:.3f} < ω", "certified":
                 f"one-sided {pct} lower bound {lower:.3f} ≥ ω"}.get(c.verdict, f"one-sided {pct} bounds [{lower:.3f}")
        assert c.bound_words.startswith(shown), (h, c.bound_words)


def test_a_plan_is_judged_at_its_own_alpha(tmp_path):
    """validate's verdict is at the α the plan was made with ([target] alpha), not at a fixed 95 %."""
    from depl.loss import loss_model_for
    from depl.scenario import parse_scenario, scenario_dict, with_target

    s = parse_scenario(with_target(scenario_dict(load_scenario("paper-alexnet")), alpha=0.01), "α = 0.01")
    plan = make_plan(s)
    assert plan.alpha == 0.01
    traj = loss_model_for(s).simulate(plan.schedule, s.phi(s.samples(plan.datasets)), 50, np.random.default_rng(5))
    v = validate(plan, s, traj, list(range(50)), mc_runs=200)
    c = v.coverage
    assert c.alpha == 0.01 and v.certificate().alpha == 0.01
    assert c.ci == pytest.approx(stats.binomtest(c.hits, 50).proportion_ci(0.98, method="exact"))
    assert "99 %" in c.bound_words


def test_validate_judges_runs_drawn_from_the_plans_own_law(tmp_path):
    s = load_scenario("paper-alexnet")
    plan = make_plan(s)
    from depl.loss import loss_model_for

    loss = loss_model_for(s)
    traj = loss.simulate(plan.schedule, s.phi(s.samples(plan.datasets)), 400, np.random.default_rng(5))
    v = validate(plan, s, traj, list(range(400)), mc_runs=2000)
    assert v.coverage.verdict.not_refuted and v.coverage.rate >= 0.97
    assert v.measured.mean.shape == v.planned.mean.shape == (len(plan.epochs) + 1,)
    bad = validate(plan, s, traj + 5.0, list(range(400)), mc_runs=2000)   # every run misses ℓmax
    assert bad.certificate().verdict is Outcome.REFUTED and bad.coverage.hits == 0
    plot_validation(v, tmp_path / "band.png")
    assert (tmp_path / "band.png").stat().st_size > 10_000
    cert = v.certificate(run_id="validate-x")
    d = cert.to_json()   # the report: the one certificate (kind validation), read back by the one reader
    assert Certificate.from_json(json.loads(dumps(d))) == cert and cert.kind is Kind.VALIDATION
    assert (cert.runs, cert.seeds, cert.alpha_share, cert.run_id) == (400, ((0, 399),), plan.alpha, "validate-x")
    assert cert.lower_bound == pytest.approx(v.coverage.ci[0]) and d["evidence"]["upper_bound"] == v.coverage.ci[1]
    assert cert.exit_code("promise") == 0 and len(d["evidence"]["measured_band"]["mean"]) == len(plan.epochs) + 1


def test_a_calibrated_plans_planned_band_is_infinite_where_its_law_is_and_nothing_warns(tmp_path):
    """mnist1d-small's pooled calibration scores (without its experiments': the plan is read at the marginal rank)
    lie above every loss the law allows for some runs at epoch 1: there the planned band's mean and 99th percentile
    are +∞ — not NaN with numpy's "invalid value encountered in subtract" —, the plot draws it where finite and
    says so, and the JSON writes +∞ as null with the epochs at which it is +∞."""
    import warnings

    from depl.loss import loss_model_for

    s = pooled_only("mnist1d-small")
    plan = make_plan(s)
    base = loss_model_for(s, calibrated=False)      # measured runs: finite, as trained runs are
    traj = base.simulate(plan.schedule, s.phi(s.samples(plan.datasets)), 60, np.random.default_rng(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = validate(plan, s, traj, list(range(60)), mc_runs=3000)
        plot_validation(v, tmp_path / "band.png")
    inf = v.planned.infinite()
    assert inf["high"] and inf["mean"] and inf["mean"][0] == 1 and not inf["low"]
    assert np.isposinf(v.planned.high[inf["high"]]).all() and not np.isnan(v.planned.high).any()
    assert v.measured.infinite() == {"mean": [], "low": [], "high": []}
    d = json.loads(dumps(v.certificate().to_json()))
    band = d["evidence"]["planned_band"]
    assert [k for k, x in enumerate(band["high"]) if x is None] == band["infinite"]["high"] == inf["high"]
    assert (tmp_path / "band.png").stat().st_size > 10_000


def test_a_plan_made_with_the_law_as_fitted_is_judged_by_it_with_its_calibrated_scenario():
    """`depl plan S --uncalibrated` then `depl validate S PLAN`: the plan records its law as fitted (its
    calibration not used), and S's calibrated law is not held against it; a plan of another law still is."""
    from depl.validate import law_mismatch

    s = load_scenario("mnist1d-small")
    assert s.calibration is not None and s.calibration.use
    fitted = s.uncalibrated()
    assert not fitted.calibration.use and s.calibration.use   # a copy: the scenario itself is unchanged
    p = make_plan(fitted)
    assert law_mismatch(p, p.scenario_object(), s, "mnist1d-small") is None
    other = make_plan(s.model_copy(update={"loss_model": "increments", "calibration": None}))
    assert "validate with the plan's own scenario" in law_mismatch(other, other.scenario_object(), s, "mnist1d-small")
