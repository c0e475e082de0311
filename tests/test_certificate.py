"""The certificate's statistics (depl.certificate), checked by other code: numerical integration, scipy.stats,
brute force over hit counts, and Monte Carlo of Bernoulli runs fed to the sequential test one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from depl import certificate as c


@pytest.mark.parametrize("prior", list(c.PRIORS))
@pytest.mark.parametrize("s, f, omega", [(0, 0, 0.9), (10, 0, 0.9), (43, 0, 0.9), (50, 3, 0.9), (5, 5, 0.5),
                                         (200, 30, 0.8), (3, 20, 0.95), (400, 1, 0.9)])
def test_the_evidence_is_the_mixture_integral(s, f, omega, prior):
    """M⁺ is ∫ likelihood ratio dπ for the prior as written in PRIORS (the point θ = 1 and θ^(a−1) pieces),
    integrated numerically apart from the closed form."""
    lik = lambda t: (t / omega) ** s * ((1 - t) / (1 - omega)) ** f  # noqa: E731
    pr = c.PRIORS[prior]
    above = pr.spike * (omega ** -s if f == 0 else 0.0)
    for w, a, top in pr.pieces:
        h = omega + top * (1 - omega)
        num = integrate.quad(lambda t: lik(t) * t ** (a - 1), omega, h, epsabs=0, epsrel=1e-10, limit=200)[0]
        above += w * num / integrate.quad(lambda t: t ** (a - 1), omega, h, epsabs=0, epsrel=1e-12)[0]
    below = integrate.quad(lik, 0, omega, epsabs=0, epsrel=1e-10, limit=200)[0] / omega
    assert math.exp(float(c.log_evidence_above(s, f, omega, prior))) == pytest.approx(above, rel=1e-7)
    assert math.exp(float(c.log_evidence_below(s, f, omega))) == pytest.approx(below, rel=1e-7)


def test_the_evidence_stays_finite_far_out():
    """Thousands of hits put the posterior far above a piece's top: its mass is taken from the lower tails."""
    for prior in c.PRIORS:
        e = c.log_evidence_above(np.array([3000, 3000, 20000, 0]), np.array([0, 5, 100, 3000]), 0.9, prior)
        assert np.all(np.isfinite(e[:3])) and e[0] > 300 and e[3] < -100  # (−inf there: 0.1^3001 underflows)


def test_clopper_pearson_is_scipys_exact_binomial_bound():
    for hits, runs in [(0, 10), (5, 10), (10, 10), (173, 200), (29, 29)]:
        lo = stats.binomtest(hits, runs, alternative="greater").proportion_ci(0.95, "exact").low
        hi = stats.binomtest(hits, runs, alternative="less").proportion_ci(0.95, "exact").high
        assert c.clopper_pearson_lower(hits, runs, 0.05) == pytest.approx(lo, abs=1e-12)
        assert c.clopper_pearson_upper(hits, runs, 0.05) == pytest.approx(hi, abs=1e-12)
    assert c.clopper_pearson_lower(29, 29, 0.05) == pytest.approx(0.05 ** (1 / 29))  # all hits: (lower)^n = α


def test_the_two_sided_interval_is_scipys_exact_one():
    for hits, runs in [(0, 10), (5, 10), (10, 10), (173, 200), (170, 200)]:
        for level in (0.9, 0.95, 0.99):
            ci = stats.binomtest(hits, runs).proportion_ci(level, "exact")
            assert c.clopper_pearson_interval(hits, runs, level) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_the_quantile_ranks_bracket_the_quantile_as_often_as_promised():
    rng = np.random.default_rng(3)
    lo, hi = c.quantile_ranks(200, 0.9, 0.95)
    assert 0 <= lo < hi <= 199
    draws = np.sort(rng.standard_normal((4000, 200)), axis=1)
    truth = stats.norm.ppf(0.9)
    inside = np.mean((draws[:, lo] <= truth) & (truth <= draws[:, hi]))
    assert inside >= 0.94  # ≥ 0.95 up to Monte Carlo error (4000 draws: sd 0.0035)


@pytest.mark.parametrize("bad", [0.0, -0.1, 0.51, 1.0, float("nan")])
def test_alpha_has_one_range_and_one_message(bad):
    assert c.alpha_problem(bad, "--alpha").startswith(f"--alpha {bad:g}: must be in (0, 0.5]")
    with pytest.raises(ValueError, match="must be in"):
        c.check_alpha(bad)
    with pytest.raises(ValueError):
        c.Sequential(0.9, bad)


def test_alpha_is_the_same_everywhere():
    from depl.scenario.model import Target
    import pydantic

    assert c.check_alpha(0.5) == 0.5 and Target(loss=1, quantile=0.9, deadline=1).alpha == c.DEFAULT_ALPHA
    with pytest.raises(pydantic.ValidationError):
        Target(loss=1, quantile=0.9, deadline=1, alpha=0.6)


def test_no_binomial_or_beta_bound_is_computed_outside_the_certificate_home():
    """Every binomial or beta bound of the package is computed in depl.certificate (its one home)."""
    import re
    from pathlib import Path

    import depl

    root = Path(depl.__file__).parent
    pattern = re.compile(r"binomtest|stats\.binom|stats\.beta|betaincinv|betainc\(|special\.bdtr")
    outside = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if "certificate" not in p.parts
               for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert outside == []


@pytest.mark.parametrize("prior, fewest", [("uniform", 43), ("spiked", 34)])
def test_the_boundaries_are_the_brute_force_ones(prior, fewest):
    cert, ref = c.boundaries(0.9, 0.05, 300, prior)
    bar = math.log(20)
    for n in range(301):
        s = np.arange(n + 1)
        up = c.log_evidence_above(s, n - s, 0.9, prior) >= bar
        down = c.log_evidence_below(s, n - s, 0.9) >= bar
        assert cert[n] == (s[up].min() if up.any() else n + 1)
        assert ref[n] == (s[down].max() if down.any() else -1)
    # `fewest` hits in a row certify ω 0.9 at α 0.05, one fewer do not
    assert cert[fewest] == fewest and cert[fewest - 1] == fewest and c.fewest_runs(0.9, 0.05, prior) == fewest


@pytest.mark.parametrize("omega", [0.8, 0.9, 0.95])
def test_the_default_certifies_all_hits_within_a_fifth_of_the_fixed_n_floor(omega):
    """When every run meets ℓmax: ≤ 1.2 × log α / log ω runs (the fewest any fixed-n test needs); the uniform
    prior needs about 1.5 ×."""
    floor = math.ceil(math.log(0.05) / math.log(omega))
    assert c.fixed_n_for(1.0, omega, 0.05, 0.99) == floor
    assert c.fewest_runs(omega, 0.05) <= 1.2 * floor < c.fewest_runs(omega, 0.05, "uniform")
    assert c.fewest_runs(0.9, 0.05) == 34 and c.fewest_runs(0.9, 0.05, "uniform") == 43


@pytest.mark.parametrize("p", [0.93, 0.95, 0.97, 0.99])
def test_the_default_costs_at_most_a_tenth_more_runs_near_omega(p):
    """Exact expected runs (the dynamic programme) at ω 0.9: within 10 % of the uniform prior's where p is near ω,
    and about as fast (here faster) far above it."""
    new = c.expected_runs(p, 0.9, 0.05, 3000)
    old = c.expected_runs(p, 0.9, 0.05, 3000, prior="uniform")
    assert new.mean_runs <= 1.10 * old.mean_runs and new.certify >= old.certify - 0.01
    if p == 0.99:
        assert new.mean_runs < old.mean_runs


@pytest.mark.slow  # a Monte Carlo of 3,000 runs per case
@pytest.mark.parametrize("prior", list(c.PRIORS))
@pytest.mark.parametrize("omega", [0.8, 0.9, 0.95])
def test_no_prior_certifies_p_omega_more_than_alpha_over_3000_runs(prior, omega):
    """Validity, exactly: P(the test ever certifies within 3000 runs) at p = ω, the worst p of the null (the
    evidence is a martingale there; below ω it is smaller), ≤ α — by the dynamic programme, no sampling."""
    for alpha in (0.05, 0.01):
        assert c.expected_runs(omega, omega, alpha, 3000, prior=prior).certify <= alpha


def run_tests(p: float, omega: float, alpha: float, max_runs: int, reps: int, seed: int, prior: str = c.DEFAULT_PRIOR,
              by_run: int = 100):
    """Monte Carlo: `reps` sequential tests on Bernoulli(p) runs.  The first `by_run` are fed to `Sequential` run
    by run, and each must stop where its path first crosses the `boundaries` (the rest are read off those
    boundaries, vectorised: the same test, faster)."""
    rng = np.random.default_rng(seed)
    draws = rng.random((reps, max_runs)) < p
    hits = np.cumsum(draws, axis=1)
    cert, ref = c.boundaries(omega, alpha, max_runs, prior)
    up, down = hits >= cert[1:], hits <= ref[1:]
    stop = up | down
    ends = np.where(stop.any(axis=1), np.argmax(stop, axis=1) + 1, max_runs)
    verdicts = np.where(~stop.any(axis=1), "undecided",
                        np.where(up[np.arange(reps), ends - 1], "certified", "refuted"))
    for i in range(min(by_run, reps)):
        t = c.Sequential(omega, alpha, prior)
        for met in draws[i]:
            if t.add(bool(met)).verdict != "undecided":
                break
        assert (t.state.verdict, t.runs) == (verdicts[i], ends[i])
    return verdicts, ends


@pytest.mark.slow  # a Monte Carlo of sequential tests
@pytest.mark.parametrize("p", [0.9, 0.88, 0.85])
def test_a_plan_below_omega_is_certified_with_probability_at_most_alpha(p):
    """The promise: P(certified | p ≤ ω) ≤ α, wherever the test stops; by Monte Carlo (run by run) and exactly."""
    verdicts, _ = run_tests(p, 0.9, 0.05, 600, 20000, seed=int(p * 100))
    rate = float(np.mean(verdicts == "certified"))
    upper = stats.binomtest(int((verdicts == "certified").sum()), len(verdicts)).proportion_ci(0.99).high
    assert upper <= 0.05 + 0.005 and rate <= 0.05, rate
    for prior in c.PRIORS:
        assert c.expected_runs(p, 0.9, 0.05, 2000, prior=prior).certify <= 0.05


def test_the_spike_makes_a_test_that_can_be_wrong_as_often_as_alpha_says():
    """The bound is tight enough to fail: at p = ω the default's P(certify) is a good part of α (mostly from
    runs of all hits early), so a wrongly scaled evidence (× 1.5) would break it."""
    exact = c.expected_runs(0.9, 0.9, 0.05, 3000).certify
    assert 0.02 < exact <= 0.05
    assert c.expected_runs(0.9, 0.9, 0.05 * 1.5, 3000).certify > 0.05  # 1/α scaled by 1.5: invalid at α 0.05


def test_a_plan_at_or_above_omega_is_refuted_with_probability_at_most_alpha():
    for p in (0.9, 0.93):
        assert c.expected_runs(p, 0.9, 0.05, 2000).refute <= 0.05
    verdicts, _ = run_tests(0.9, 0.9, 0.05, 600, 20000, seed=3, by_run=30)
    assert float(np.mean(verdicts == "refuted")) <= 0.05


@pytest.mark.parametrize("prior", ["spiked", "uniform"])
def test_the_exact_stopping_law_agrees_with_monte_carlo(prior):
    verdicts, lengths = run_tests(0.97, 0.9, 0.05, 400, 20000, seed=7, prior=prior)
    exact = c.expected_runs(0.97, 0.9, 0.05, 400, prior=prior)
    assert float(np.mean(lengths)) == pytest.approx(exact.mean_runs, rel=0.05)
    assert float(np.mean(verdicts == "certified")) == pytest.approx(exact.certify, abs=0.01)
    assert float(np.median(lengths)) == pytest.approx(exact.median_runs, abs=6)


def test_the_anytime_bounds_hold_uniformly_over_time():
    """P(some n has lower bound > p) ≤ α: the bound may be read after every run.  The bound exceeds p exactly
    when the test of "p ≤ q" at q = p rejects (monotone in q), so the check is p's own boundary, exactly."""
    rng = np.random.default_rng(11)
    for p in (0.9, 0.97):
        cert, _ = c.boundaries(p, 0.05, 150)
        x = rng.random((3000, 150)) < p
        hits = np.cumsum(x, axis=1)
        crossed = (hits >= cert[1:]).any(axis=1)
        assert crossed.mean() <= 0.05 + 0.012, crossed.mean()  # 3000 draws: sd 0.004
        some = np.flatnonzero(crossed)[:3]  # and there the bound itself reads > p
        for i in some:
            n = int(np.argmax(hits[i] >= cert[1:]))
            assert c.anytime_lower(int(hits[i, n]), n + 1, 0.05) > p


@pytest.mark.parametrize("prior", list(c.PRIORS))
def test_the_anytime_lower_bound_is_monotone_and_below_the_estimate(prior):
    for hits, runs in [(43, 43), (34, 34), (60, 64), (180, 200), (1, 1), (0, 5), (33, 34), (500, 520)]:
        lo = c.anytime_lower(hits, runs, 0.05, prior)
        assert 0.0 <= lo <= hits / runs
        qs = np.linspace(1e-6, 1 - 1e-6, 400)
        rejected = np.array([float(c.log_evidence_above(hits, runs - hits, q, prior)) >= math.log(20) for q in qs])
        # rejected for every q below the bound, for none above it
        assert rejected[qs < lo - 1e-6].all() and not rejected[qs > lo + 1e-6].any()
        assert lo <= c.clopper_pearson_lower(hits, runs, 0.05) + 1e-12  # paying for looking any time
    n = c.fewest_runs(0.9, 0.05, prior)
    assert c.anytime_lower(n, n, 0.05, prior) > 0.9 > c.anytime_lower(n - 1, n - 1, 0.05, prior)


def test_fixed_n_has_the_power_it_says():
    n = c.fixed_n_for(0.97, 0.9, 0.05, 0.8)
    k = next(k for k in range(n + 1) if c.clopper_pearson_lower(k, n, 0.05) >= 0.9)
    assert stats.binom.sf(k - 1, n, 0.97) >= 0.8
    k1 = next(k for k in range(n) if c.clopper_pearson_lower(k, n - 1, 0.05) >= 0.9)
    assert stats.binom.sf(k1 - 1, n - 1, 0.97) < 0.8  # and n − 1 would not
    assert c.fixed_n_for(1.0, 0.9, 0.05, 0.99) == 29


def test_a_decided_test_takes_no_more_runs():
    t = c.Sequential(0.5, 0.05)
    while not t.decided:
        t.add(True)
    assert t.state.verdict == "certified" and t.state.lower > 0.5
    with pytest.raises(RuntimeError):
        t.add(True)
    with pytest.raises(ValueError, match=r"ω = 1.0: must be in \[1e-6, 1 - 1e-6\]"):
        c.Sequential(1.0, 0.05)


def test_the_verdict_names_its_prior_and_the_old_rule_is_kept():
    new, old = c.Sequential(0.9, 0.05), c.Sequential(0.9, 0.05, "uniform")
    for _ in range(34):
        new.add(True)
        old.add(True)
    assert new.state.verdict == "certified" and old.state.verdict == "undecided"
    assert new.state.to_json()["prior"] == "spiked" and old.state.to_json()["prior"] == "uniform"
    assert "'spiked'" in new.rule and "θ = 1" in new.rule and "'uniform'" in old.rule
    assert c.anytime_lower(34, 34, 0.05, "uniform") < 0.9 < new.state.lower
    with pytest.raises(ValueError, match="must be one of spiked, uniform"):
        c.Sequential(0.9, 0.05, "jeffreys")
