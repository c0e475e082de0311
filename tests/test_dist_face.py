"""GridDistribution answers like a frozen scipy.stats distribution: cdf, sf, ppf, pdf, logpdf, moments, rvs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from depl.dist import Term, sum_distribution
from depl.loss import loss_model_for
from depl.scenario import load_scenario


@pytest.fixture(scope="module")
def gamma_sum():
    # Σ of 6 Gamma(2)·0.5 = Gamma(12, scale 0.5), shifted by 1
    d = sum_distribution([Term(0.5, stats.gamma(2.0)) for _ in range(6)] + [Term(0.0, None, 1.0)])
    return d, stats.gamma(12.0, loc=1.0, scale=0.5)


def test_face_matches_the_closed_form(gamma_sum):
    d, exact = gamma_sum
    x = exact.ppf([0.01, 0.2, 0.5, 0.8, 0.99])
    assert np.allclose(d.cdf(x), exact.cdf(x), atol=2e-3)
    assert np.allclose(d.sf(x), exact.sf(x), atol=2e-3)
    assert np.allclose(d.ppf([0.1, 0.5, 0.9]), exact.ppf([0.1, 0.5, 0.9]), atol=2 * d.error_bound + 2e-3)
    assert np.allclose(d.pdf(x), exact.pdf(x), rtol=0.03, atol=2e-3)
    assert np.allclose(d.logpdf(x[1:4]), exact.logpdf(x[1:4]), atol=0.03)
    assert (d.mean(), d.var(), d.std()) == pytest.approx((exact.mean(), exact.var(), exact.std()))
    assert d.pdf(exact.ppf(1e-12) - 1.0) == 0.0 and d.logpdf(exact.ppf(1e-12) - 1.0) == -np.inf


def test_density_integrates_to_one(gamma_sum):
    d, exact = gamma_sum
    grid = np.linspace(exact.ppf(1e-9), exact.ppf(1 - 1e-9), 20_001)
    assert np.trapezoid(d.pdf(grid), grid) == pytest.approx(1.0, abs=5e-3)


def test_samples_follow_the_law(gamma_sum):
    d, exact = gamma_sum
    x = d.rvs(size=20_000, random_state=np.random.default_rng(0))
    assert x.shape == (20_000,)
    assert stats.kstest(x, exact.cdf).pvalue > 1e-3
    assert np.array_equal(x, d.rvs(size=20_000, random_state=np.random.default_rng(0)))  # reproducible


def test_the_level_law_has_its_exact_log_normal_density():
    m = loss_model_for(load_scenario("mnist1d-small"), calibrated=False)   # the level law as fitted
    sched = ["full"] * 8
    d = m.distribution(sched)
    mu, sd = m.final(sched)
    exact = stats.lognorm(s=sd, scale=mu)
    x = exact.ppf([0.05, 0.5, 0.95])
    assert np.allclose(d.logpdf(x), exact.logpdf(x))
    assert np.allclose(d.cdf(x), exact.cdf(x), atol=2e-3)   # the lattice's, certified
    assert stats.kstest(d.rvs(5000, 1), exact.cdf).pvalue > 1e-3
