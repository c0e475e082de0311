"""depl.families answers as scipy.stats does, and `depl plan` runs without importing scipy.stats."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import fft as sfft
from scipy import stats

from depl import families
from depl.dist import draw, next_fast_len
from depl.families import Frozen

CASES = [
    ("norm", {}), ("norm", {"loc": -1.5, "scale": 0.3}),
    ("t", {"df": 4.0, "loc": 0.5, "scale": 0.1}), ("t", {"df": 2.893933715816705, "loc": 0.255, "scale": 0.0527}),
    ("t", {"df": 1.5}), ("t", {"df": 0.8, "scale": 2.0}), ("t", {"df": 250.0}),
    ("gamma", {"a": 2.287036437590969, "scale": 0.45232149850846376}), ("gamma", {"a": 0.4, "loc": 0.2}),
    ("gamma", {"a": 1.0}), ("gamma", {"a": 80.0, "scale": 0.01}),
    ("invgamma", {"a": 35.56, "scale": 35.25}), ("invgamma", {"a": 2.5, "scale": 1.0}),
    ("invgamma", {"a": 0.7, "loc": -0.1, "scale": 3.0}), ("invgamma", {"a": 1.5}),
    ("lognorm", {"s": 1.5091472793066774, "scale": 0.28901410457659055}),
    ("lognorm", {"s": 0.29605796406512597, "loc": -0.06544580305018088, "scale": 0.14780427944549843}),
    ("lognorm", {"s": 1e-6, "scale": 3.0}),
    ("expon", {}), ("expon", {"loc": 1.0, "scale": 2.5}),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]

# probabilities deep in both tails, and the edges
Q = np.concatenate([[0.0, 1e-300, 1e-30, 1e-15, 1e-7, 1e-3], np.linspace(0.01, 0.99, 25),
                    [1 - 1e-3, 1 - 1e-7, 1 - 1e-15, 1.0, -0.1, 1.1, np.nan]])


def points(ref) -> np.ndarray:
    """Where to compare: far tails, the bulk, the support's edges, ±inf and NaN."""
    lo, hi = ref.ppf(1e-12), ref.isf(1e-12)
    inner = np.linspace(ref.ppf(1e-6), ref.isf(1e-6), 101)
    edge = ref.support()[0]
    return np.concatenate([inner, [lo, hi, 2 * hi - lo, lo - (hi - lo), ref.mean() if np.isfinite(ref.mean()) else 0.0,
                                   -np.inf, np.inf, np.nan], [edge, np.nextafter(edge, np.inf)] if np.isfinite(edge)
                           else []])


def same(a, b) -> None:
    """Equal, NaN where scipy is NaN, to rtol 1e-12 (in practice bit for bit)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True)


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_every_function_agrees_with_scipy_stats_to_1e_12_tails_included(name, params):
    ref, got = getattr(stats, name)(**params), families.frozen(name, params)
    assert isinstance(got, Frozen) and got.in_domain()
    x = points(ref)
    with np.errstate(all="ignore"):
        for f in ("cdf", "sf", "pdf", "logpdf"):
            same(getattr(got, f)(x), getattr(ref, f)(x))
            for xi in x[:3]:  # a scalar in, a numpy scalar out, as scipy
                assert np.ndim(getattr(got, f)(xi)) == 0
                same(getattr(got, f)(xi), getattr(ref, f)(xi))
        for f in ("ppf", "isf"):
            same(getattr(got, f)(Q), getattr(ref, f)(Q))
            same(getattr(got, f)(0.3), getattr(ref, f)(0.3))
        same(got.stats(moments="mvs"), ref.stats(moments="mvs"))
        same([got.mean(), got.var(), got.std()], [ref.mean(), ref.var(), ref.std()])
        same(got.support(), ref.support())
    # anything else falls back to scipy.stats
    same(got.interval(0.9), ref.interval(0.9))
    same(got.logcdf(x[:5]), ref.logcdf(x[:5]))


@pytest.mark.parametrize("name,params", CASES, ids=IDS)
def test_the_moments_and_tails_are_scipys_bit_for_bit(name, params):
    """Plans read the moments (depl.dist): they must be scipy's exactly for plans to stay what they were."""
    ref, got = getattr(stats, name)(**params), families.frozen(name, params)
    np.testing.assert_array_equal(np.array(got.stats(moments="mvs")), np.array(ref.stats(moments="mvs")))
    assert float(got.ppf(1e-7)) == float(ref.ppf(1e-7)) and float(got.isf(1e-7)) == float(ref.isf(1e-7))


@pytest.mark.parametrize("name,params", CASES[:1] + CASES[2:3] + CASES[7:8] + CASES[11:12] + CASES[15:16] + CASES[19:20])
def test_samples_come_from_numpy_and_follow_the_law(name, params):
    got, ref = families.frozen(name, params), getattr(stats, name)(**params)
    x = got.rvs(size=20_000, random_state=np.random.default_rng(3))
    assert x.shape == (20_000,)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-4
    # depl.dist.draw takes the same numpy path for a Frozen and for scipy's own frozen object
    np.testing.assert_array_equal(draw(got, 7, np.random.default_rng(5)), draw(ref, 7, np.random.default_rng(5)))


def test_other_families_are_scipy_stats_own():
    assert families.is_family("skewnorm") and not families.is_family("banana") and not families.is_family("binom")
    d = families.frozen("skewnorm", {"a": 1.5, "loc": 0.1, "scale": 0.05})
    assert not isinstance(d, Frozen) and families.standard_form(d) is None and families.in_domain(d)
    assert families.shape_names("skewnorm") == ("a",) and families.shape_names("invgamma") == ("a",)
    assert not families.in_domain(families.frozen("gamma", {"a": -2.0}))
    assert not families.in_domain(families.frozen("norm", {"scale": -1.0}))
    assert families.standard_form(stats.invgamma(3.0, scale=2.0)) == ("invgamma", (3.0,), 0, 2.0)


def test_fft_sizes_are_scipys():
    assert all(next_fast_len(n) == sfft.next_fast_len(n, real=True) for n in range(1, 5000))
    assert all(next_fast_len(n) == sfft.next_fast_len(n, real=True) for n in (10**5 + 1, 999_983, 2**20 + 1, 3**13 + 7))


def test_depl_plan_imports_neither_scipy_stats_nor_scipy_signal_nor_torch_nor_matplotlib(depl_cli):
    src = Path(__file__).resolve().parents[1] / "src"
    code = ("import sys; from depl.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    p = depl_cli("plan", "paper-alexnet", "--json", code=code,
                 env={"PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}, timeout=300)
    assert json.loads(p.stdout)["feasible"] is True
    mods = set(p.stderr.split("MODULES", 1)[1].split())
    for banned in ("scipy.stats", "scipy.signal", "scipy.fft", "scipy.optimize", "torch", "matplotlib"):
        assert banned not in mods, banned


def test_a_frozen_law_pickles_and_keeps_its_identity_semantics():
    """Loss models holding them cross process boundaries (experiments, seeds); caches key them by identity."""
    import copy
    import pickle

    d = families.frozen("invgamma", {"a": 35.56, "scale": 35.25})
    e = pickle.loads(pickle.dumps(d))
    assert isinstance(e, Frozen) and e.kwds == d.kwds and float(e.ppf(0.3)) == float(d.ppf(0.3))
    assert copy.deepcopy(d).kwds == d.kwds
    assert e != d and hash(e) != hash(d) and d == d
