"""The certificate's statistics (depl.certificate), checked by other code: numerical integration, scipy.stats,
brute force over hit counts, and Monte Carlo of Bernoulli runs fed to the sequential test one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from depl import certificate as c


@pytest.mark.parametrize("s, f, omega", [(0, 0, 0.9), (10, 0, 0.9), (43, 0, 0.9), (50, 3, 0.9), (5, 5, 0.5),
                                         (200, 30, 0.8), (3, 20, 0.95)])
def test_the_evidence_is_the_mixture_integral(s, f, omega):
    lik = lambda t: (t / omega) ** s * ((1 - t) / (1 - omega)) ** f  # noqa: E731
    above = integrate.quad(lik, omega, 1, epsabs=0, epsrel=1e-10, limit=200)[0] / (1 - omega)
    below = integrate.quad(lik, 0, omega, epsabs=0, epsrel=1e-10, limit=200)[0] / omega
    assert math.exp(float(c.log_evidence_above(s, f, omega))) == pytest.approx(above, rel=1e-7)
    assert math.exp(float(c.log_evidence_below(s, f, omega))) == pytest.approx(below, rel=1e-7)


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


def test_the_boundaries_are_the_brute_force_ones():
    cert, ref = c.boundaries(0.9, 0.05, 300)
    bar = math.log(20)
    for n in range(301):
        s = np.arange(n + 1)
        up = c.log_evidence_above(s, n - s, 0.9) >= bar
        down = c.log_evidence_below(s, n - s, 0.9) >= bar
        assert cert[n] == (s[up].min() if up.any() else n + 1)
        assert ref[n] == (s[down].max() if down.any() else -1)
    assert cert[43] == 43 and cert[42] == 43  # 43 hits in a row certify ω 0.9 at α 0.05, 42 do not


def run_tests(p: float, omega: float, alpha: float, max_runs: int, reps: int, seed: int):
    """Monte Carlo: `reps` sequential tests on Bernoulli(p) runs, each fed run by run."""
    rng = np.random.default_rng(seed)
    verdicts, lengths = [], []
    for _ in range(reps):
        t = c.Sequential(omega, alpha)
        draws = rng.random(max_runs) < p
        for met in draws:
            if t.add(bool(met)).verdict != "undecided":
                break
        verdicts.append(t.state.verdict)
        lengths.append(t.runs)
    return np.array(verdicts), np.array(lengths)


@pytest.mark.parametrize("p", [0.9, 0.88, 0.85])
def test_a_plan_below_omega_is_certified_with_probability_at_most_alpha(p):
    """The promise: P(certified | p ≤ ω) ≤ α, wherever the test stops; by Monte Carlo (run by run) and exactly."""
    verdicts, _ = run_tests(p, 0.9, 0.05, 600, 1500, seed=int(p * 100))
    rate = float(np.mean(verdicts == "certified"))
    upper = stats.binomtest(int((verdicts == "certified").sum()), len(verdicts)).proportion_ci(0.99).high
    assert upper <= 0.05 + 0.02 and rate <= 0.05, rate
    assert c.expected_runs(p, 0.9, 0.05, 2000).certify <= 0.05


def test_a_plan_at_or_above_omega_is_refuted_with_probability_at_most_alpha():
    for p in (0.9, 0.93):
        assert c.expected_runs(p, 0.9, 0.05, 2000).refute <= 0.05
    verdicts, _ = run_tests(0.9, 0.9, 0.05, 600, 1500, seed=3)
    assert float(np.mean(verdicts == "refuted")) <= 0.05


def test_the_exact_stopping_law_agrees_with_monte_carlo():
    verdicts, lengths = run_tests(0.97, 0.9, 0.05, 400, 2000, seed=7)
    exact = c.expected_runs(0.97, 0.9, 0.05, 400)
    assert float(np.mean(lengths)) == pytest.approx(exact.mean_runs, rel=0.05)
    assert float(np.mean(verdicts == "certified")) == pytest.approx(exact.certify, abs=0.01)
    assert float(np.median(lengths)) == pytest.approx(exact.median_runs, abs=6)


def test_the_anytime_bounds_hold_uniformly_over_time():
    """P(some n has lower bound > p) ≤ α: the bound may be read after every run."""
    rng = np.random.default_rng(11)
    p, misses = 0.9, 0
    for _ in range(300):
        x = rng.random(150) < p
        hits = np.cumsum(x)
        # the bound only grows with a hit; checking after every hit covers every n
        if any(c.anytime_lower(int(hits[n]), n + 1, 0.05) > p for n in range(150) if x[n]):
            misses += 1
    assert misses / 300 <= 0.05 + 0.03


def test_the_anytime_lower_bound_is_monotone_and_below_the_estimate():
    for hits, runs in [(43, 43), (60, 64), (180, 200), (1, 1), (0, 5)]:
        lo = c.anytime_lower(hits, runs, 0.05)
        assert 0.0 <= lo <= hits / runs
        qs = np.linspace(1e-6, 1 - 1e-6, 400)
        rejected = c.log_evidence_above(hits, runs - hits, 0.5) is not None and \
            np.array([float(c.log_evidence_above(hits, runs - hits, q)) >= math.log(20) for q in qs])
        # rejected for every q below the bound, for none above it
        assert rejected[qs < lo - 1e-6].all() and not rejected[qs > lo + 1e-6].any()
        assert lo <= c.clopper_pearson_lower(hits, runs, 0.05) + 1e-12  # paying for looking any time
    assert c.anytime_lower(43, 43, 0.05) > 0.9 > c.anytime_lower(42, 42, 0.05)


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
