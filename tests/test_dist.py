"""The FFT distribution of a sum: closed forms, its stated error bound, and Monte Carlo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from depl.dist import Term, sum_distribution
from depl.simulate import quantile_ci

QS = [0.01, 0.1, 0.5, 0.9, 0.99, 0.999]


@given(
    params=st.lists(st.tuples(st.floats(-3, 3), st.floats(0.05, 2.0), st.floats(-2, 2).filter(lambda c: abs(c) > 0.05)),
                    min_size=1, max_size=12),
    shift=st.floats(-10, 10),
)
@example(params=[(-2.1037507785311914e-08, 1.0, 1.0)], shift=0.0)  # the median a hair below a lattice point
@settings(max_examples=40, deadline=None)
def test_sum_of_normals_matches_closed_form_within_the_bound(params, shift):
    terms = [Term(c, stats.norm(m, s)) for m, s, c in params] + [Term(0.0, None, shift)]
    d = sum_distribution(terms)
    mu = shift + sum(c * m for m, s, c in params)
    sd = np.sqrt(sum((c * s) ** 2 for m, s, c in params))
    exact = stats.norm(mu, sd)
    assert d.mean() == pytest.approx(mu, abs=1e-9)
    assert d.var() == pytest.approx(sd**2, rel=1e-9)
    for q in QS:
        lo, hi = d.quantile_bounds(q)
        assert lo <= exact.ppf(q) <= hi  # the certified bracket holds
        # the stated bound: N·h/2, plus the δ shift (dropped tail mass can move C⁻¹ up to the (q+δ)-quantile)
        assert exact.ppf(q) - d.error_bound - 1e-9 <= d.quantile(q) <= exact.ppf(q + d.delta) + d.error_bound + 1e-9
        assert hi - lo <= 2 * d.error_bound + 0.01 * sd + 1e-9


@given(shapes=st.lists(st.floats(0.3, 8.0), min_size=1, max_size=15), scale=st.floats(0.05, 3.0))
@settings(max_examples=40, deadline=None)
def test_sum_of_gammas_matches_closed_form(shapes, scale):
    d = sum_distribution([Term(1.0, stats.gamma(a, scale=scale)) for a in shapes])
    exact = stats.gamma(sum(shapes), scale=scale)
    for q in QS:
        lo, hi = d.quantile_bounds(q)
        assert lo <= exact.ppf(q) <= hi
        assert abs(d.quantile(q) - exact.ppf(q)) <= d.error_bound + 1e-9
    for x in exact.ppf([0.05, 0.5, 0.95]):
        clo, chi = d.cdf_bounds(x)
        assert clo <= exact.cdf(x) <= chi


def test_negative_coefficients_mirror_the_distribution():
    g = stats.gamma(3.0, scale=0.5)
    d = sum_distribution([Term(-2.0, g)], h=1e-4)
    # -2X ≤ x  ⇔  X ≥ -x/2
    for q in [0.01, 0.5, 0.99]:
        assert d.quantile(q) == pytest.approx(-2 * g.ppf(1 - q), abs=2e-4)


def test_bracket_shrinks_with_the_lattice_step():
    terms = [Term(1.0, stats.gamma(2.0)) for _ in range(5)]
    widths = []
    for h in [0.1, 0.01, 0.001]:
        lo, hi = sum_distribution(terms, h=h).quantile_bounds(0.99)
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] <= 5 * 0.001 + 1e-6


def test_paper_like_sum_against_monte_carlo():
    """Inverse-Gamma progress and Student-t jumps (heavy tails): FFT vs 400k draws."""
    ig = stats.invgamma(102.0, scale=101.0)
    terms = [Term(0.0, None, 20.0)] + [Term(-1.5 / np.sqrt(k + 1), ig) for k in range(1, 31)]
    terms += [Term(1.0, stats.t(4, loc=0.5, scale=0.1)), Term(1.0, stats.t(4, loc=0.3, scale=0.08))]
    d = sum_distribution(terms)
    rng = np.random.default_rng(7)
    draws = sum(t.rvs(400_000, rng) if t.dist is not None else t.shift for t in terms)
    for q in [0.5, 0.9, 0.99]:
        lo, hi = quantile_ci(draws, q, alpha=0.0005)  # distribution-free bounds from order statistics
        assert lo - d.error_bound <= d.quantile(q) <= hi + d.error_bound, (q, d.quantile(q), lo, hi)
    assert d.mean() == pytest.approx(draws.mean(), abs=0.01)
    assert d.delta < 1e-5


def test_constants_only():
    d = sum_distribution([Term(0.0, None, 3.5)])
    assert d.quantile(0.99) == pytest.approx(3.5) and d.var() == 0.0


def test_band_percentiles_over_infinite_trajectories_are_infinite_not_nan_and_warn_nothing():
    """A calibrated law's Monte Carlo puts some runs at +∞ (beyond every loss the law allows): a percentile whose
    order statistics reach +∞ is +∞ and one at a finite order statistic is that value — numpy's quantile gives
    NaN there, with "invalid value encountered in subtract". Columns of finite values are numpy's, bit for bit."""
    import warnings

    from depl.band import Band, epoch_ranges, quantiles

    rng = np.random.default_rng(4)
    x = rng.normal(size=(500, 6))
    x[:20, 1] = np.inf            # 4% of runs: the 99th percentile is +∞, the 1st finite
    x[:, 2] = np.inf              # every run
    x[:3, 3] = np.inf             # 0.6%: both finite
    x[:, 4] = np.sort(x[:, 4])
    x[-5:, 4] = np.inf            # exactly 1%: the 99th percentile sits between a finite and a +∞ order statistic
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = Band.of(x)
        q = quantiles(x, [0.0, 0.5, 1.0])
    finite = [0, 3, 5]
    with np.errstate(invalid="ignore"):
        ref = np.quantile(x, [0.01, 0.99], axis=0)
    assert np.array_equal(np.c_[b.low, b.high].T[:, [0, 5]], ref[:, [0, 5]])          # numpy's, bit for bit
    assert np.isposinf(b.high[[1, 2, 4]]).all() and np.isfinite(b.low[[0, 1, 3, 4, 5]]).all()
    assert b.low[1] == ref[0, 1] and b.high[3] == ref[1, 3]     # finite order statistics: numpy's lerp
    assert np.isposinf(b.mean[[1, 2, 3, 4]]).all() and np.isfinite(b.mean[finite[::2]]).all()
    assert not np.isnan(np.r_[b.mean, b.low, b.high, q.ravel()]).any()
    assert np.isposinf(q[2, [1, 2, 3, 4]]).all() and q[1, 1] == pytest.approx(np.median(np.sort(x[:, 1])), abs=0.1)
    assert b.infinite() == {"mean": [1, 2, 3, 4], "low": [2], "high": [1, 2, 4]}
    assert b.infinite_note() == ("mean +∞ at epochs 1–4; 1st pct +∞ at epoch 2; 99th pct +∞ at epochs 1–2, 4 "
                                 "(some runs +∞): drawn where finite")
    assert epoch_ranges([1, 2, 3, 5, 7, 8]) == "1–3, 5, 7–8" and Band.of(x[:, [0]]).infinite_note() == ""
    # the ragged band (seeds that stop at different epochs) the same way
    r = Band.of_ragged([[1.0, np.inf], [1.0, 2.0], [1.0, 3.0], [1.0]], lo=0.01, hi=0.99)
    assert r.high.tolist() == [1.0, np.inf] and r.low[1] == pytest.approx(2.02) and r.seeds() == [4, 3]
    # strict JSON: +∞ is null, and `infinite` says which nulls are +∞
    from depl.jsonout import dumps

    j = json.loads(dumps(b.to_json()))
    assert j["high"][1] is None and j["infinite"]["high"] == [1, 2, 4] and j["mean"][0] == pytest.approx(b.mean[0])
