"""The distribution families of depl's loss laws, without importing scipy.stats.

A scenario's noise and switch jumps are scipy.stats families by name; importing
scipy.stats costs about a second of CPU, more than `depl plan` needs to plan
paper-alexnet.  The families the laws use — norm, t, gamma, invgamma, lognorm,
expon — are one `Family` each, in scipy.stats' shape: its standard form (loc 0,
scale 1) as scipy.stats' `_cdf`, `_sf`, `_ppf`, `_isf`, `_logpdf`, `_pdf` and
`_stats` compute it, with the same scipy.special ufuncs and the same arithmetic,
so the numbers are scipy's to the last bit (tests/test_families.py compares
them); `FAMILIES` holds them by name.  `Frozen` is one of them with its
parameters, answering what depl asks of a frozen scipy.stats distribution
(`cdf`, `sf`, `ppf`, `isf`, `pdf`, `logpdf`, `logcdf`, `mean`, `var`, `std`,
`median`, `stats`, `interval`, `support`, `rvs`).  scipy.special is imported at
the first evaluation that needs it (the moments need only numpy); `logcdf`, the
kurtosis and `as_scipy` import scipy.stats.  Any other family is scipy.stats'
own (`frozen`).

Samples come from numpy's generators (scipy's invgamma has no sampler of its
own and inverts its cdf, ~40× slower than 1/Gamma).

>>> d = frozen("invgamma", {"a": 3.0, "scale": 2.0})
>>> float(d.mean()), float(d.var())
(1.0, 1.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

_NORM_PDF_C = np.sqrt(2 * np.pi)
_NORM_PDF_LOGC = np.log(_NORM_PDF_C)


def _special():
    from scipy import special

    return special


class Family:
    """A continuous family in standard form (loc 0, scale 1), its shape parameters given positionally in
    scipy.stats' order.  The support is [lower, +inf) for all of depl's families.  Each family gives `cdf`,
    `sf`, `ppf`, `isf`, `logpdf`, `stats` (mean, variance, skewness) and `draw` (samples from a numpy
    generator), and `pdf` where scipy's is not exp(logpdf)."""

    name: str
    shapes: tuple[str, ...] = ()
    lower: float = 0.0
    open_pdf: bool = False  # the density is defined on the open support only (scipy's _open_support_mask)

    def valid(self, *shapes: float) -> bool:
        """Whether the shape parameters are in the family's domain (scipy's _argcheck: every shape > 0)."""
        return all(s > 0 for s in shapes)

    def pdf(self, y: np.ndarray, *shapes: float) -> np.ndarray:
        return np.exp(self.logpdf(y, *shapes))


class Norm(Family):
    name, lower = "norm", -np.inf

    def cdf(self, y, *shapes):
        return _special().ndtr(y)

    def sf(self, y, *shapes):
        return _special().ndtr(-y)

    def ppf(self, q, *shapes):
        return _special().ndtri(q)

    def isf(self, q, *shapes):
        return -_special().ndtri(q)

    def logpdf(self, y, *shapes):
        return -y**2 / 2.0 - _NORM_PDF_LOGC

    def pdf(self, y, *shapes):
        return np.exp(-y**2 / 2.0) / _NORM_PDF_C

    def stats(self, *shapes) -> tuple[Any, Any, Any]:
        return 0.0, 1.0, 0.0

    def draw(self, rng, size, *shapes):
        return rng.standard_normal(size)


class StudentT(Family):
    name, shapes, lower = "t", ("df",), -np.inf

    def cdf(self, y, df):
        return _special().stdtr(df, y)

    def sf(self, y, df):
        return _special().stdtr(df, -y)

    def ppf(self, q, df):
        return _special().stdtrit(df, q)

    def isf(self, q, df):
        return -_special().stdtrit(df, q)

    def logpdf(self, y, df):
        sc = _special()
        return (np.log(sc.poch(0.5 * df, 0.5)) - 0.5 * (np.log(df) + np.log(np.pi))
                - (df + 1) / 2 * np.log1p(y * y / df))

    def stats(self, df) -> tuple[Any, Any, Any]:
        x = np.float64(df)
        mu = 0.0 if x > 1 else np.inf
        mu2 = x / (x - 2.0) if x > 2 else np.inf if x > 1 else np.nan
        return mu, mu2, 0.0 if x > 3 else np.nan

    def draw(self, rng, size, df):
        return rng.standard_t(df, size)


class Gamma(Family):
    name, shapes = "gamma", ("a",)

    def cdf(self, y, a):
        return _special().gammainc(a, y)

    def sf(self, y, a):
        return _special().gammaincc(a, y)

    def ppf(self, q, a):
        return _special().gammaincinv(a, q)

    def isf(self, q, a):
        return _special().gammainccinv(a, q)

    def logpdf(self, y, a):
        sc = _special()
        return sc.xlogy(a - 1.0, y) - y - sc.gammaln(a)

    def stats(self, a) -> tuple[Any, Any, Any]:
        x = np.float64(a)
        return x, x, 2.0 / np.sqrt(x)

    def draw(self, rng, size, a):
        return rng.standard_gamma(a, size)


class InvGamma(Family):
    name, shapes, open_pdf = "invgamma", ("a",), True

    def cdf(self, y, a):
        return _special().gammaincc(a, 1.0 / y)

    def sf(self, y, a):
        return _special().gammainc(a, 1.0 / y)

    def ppf(self, q, a):
        return 1.0 / _special().gammainccinv(a, q)

    def isf(self, q, a):
        return 1.0 / _special().gammaincinv(a, q)

    def logpdf(self, y, a):
        return -(a + 1) * np.log(y) - _special().gammaln(a) - 1.0 / y

    def stats(self, a) -> tuple[Any, Any, Any]:
        x = np.float64(a)
        m1 = 1. / (x - 1.) if x > 1 else np.inf
        m2 = 1. / (x - 1.)**2 / (x - 2.) if x > 2 else np.inf
        return m1, m2, 4. * np.sqrt(x - 2.) / (x - 3.) if x > 3 else np.nan

    def draw(self, rng, size, a):
        return 1.0 / rng.standard_gamma(a, size)


class LogNorm(Family):
    name, shapes, open_pdf = "lognorm", ("s",), True

    def cdf(self, y, s):
        return _special().ndtr(np.log(y) / s)

    def sf(self, y, s):
        return _special().ndtr(-(np.log(y) / s))

    def ppf(self, q, s):
        return np.exp(s * _special().ndtri(q))

    def isf(self, q, s):
        return np.exp(s * -_special().ndtri(q))

    def logpdf(self, y, s):
        with np.errstate(divide="ignore"):
            return np.where(y != 0, -np.log(y)**2 / (2 * s**2) - np.log(s * y * np.sqrt(2 * np.pi)), -np.inf)

    def stats(self, s) -> tuple[Any, Any, Any]:
        x = np.float64(s)
        p = np.exp(x * x)
        return np.sqrt(p), p * (p - 1), np.sqrt(p - 1) * (2 + p)

    def draw(self, rng, size, s):
        return np.exp(s * rng.standard_normal(size))


class Expon(Family):
    name = "expon"

    def cdf(self, y, *shapes):
        return -_special().expm1(-y)

    def sf(self, y, *shapes):
        return np.exp(-y)

    def ppf(self, q, *shapes):
        return -_special().log1p(-q)

    def isf(self, q, *shapes):
        return -np.log(q)

    def logpdf(self, y, *shapes):
        return -y

    def pdf(self, y, *shapes):
        return np.exp(-y)

    def stats(self, *shapes) -> tuple[Any, Any, Any]:
        return 1.0, 1.0, 2.0

    def draw(self, rng, size, *shapes):
        return rng.standard_exponential(size)


FAMILIES: dict[str, Family] = {f.name: f for f in (Norm(), StudentT(), Gamma(), InvGamma(), LogNorm(), Expon())}
"""depl's own families by scipy.stats' name."""


def standard_draw(name: str, shapes: tuple, rng, size) -> np.ndarray:
    """Samples of the standard form of family `name` from a numpy Generator (or RandomState)."""
    return FAMILIES[name].draw(rng, size, *shapes)


class Frozen:
    """One of FAMILIES with its parameters: the face of a frozen scipy.stats distribution, scipy's generic
    wrappers (rv_continuous' loc/scale, support masks, edges) around the family's standard form.

    Hashed and compared by identity, like scipy's (depl.dist keys its lattice cache by the object).
    """

    def __init__(self, name: str, shapes: tuple[float, ...] = (), loc: float = 0.0, scale: float = 1.0):
        if name not in FAMILIES:
            raise ValueError(f"{name!r} is not one of {sorted(FAMILIES)}")
        family = FAMILIES[name]
        if len(shapes) != len(family.shapes):
            raise ValueError(f"{name} takes shape parameter(s) {family.shapes}, got {shapes}")
        self.name, self.shapes, self.loc, self.scale = name, tuple(shapes), loc, scale

    @property
    def family(self) -> Family:
        return FAMILIES[self.name]

    def __repr__(self) -> str:
        return f"Frozen({self.name!r}, {self.kwds})"

    @property
    def kwds(self) -> dict[str, float]:
        """The parameters by name, as scipy.stats takes them."""
        return dict(zip(self.family.shapes, self.shapes), loc=self.loc, scale=self.scale)

    def in_domain(self) -> bool:
        """Whether the parameters are valid (as scipy's argument check: the family's, and scale > 0)."""
        return self.family.valid(*self.shapes) and self.scale > 0

    # -- the generic wrappers of scipy.stats' rv_continuous ------------------------------------- #
    def _std(self, x) -> np.ndarray:
        x = np.asarray(x)
        return np.asarray((x - self.loc) / self.scale, dtype=np.promote_types(x.dtype, np.float64))

    def _where(self, y: np.ndarray, inside: np.ndarray, fill: float, f) -> Any:
        out = np.full(y.shape, fill)
        out[np.isnan(y)] = np.nan
        if inside.any():
            out[inside] = f(y[inside])
        return out[()]

    def _cdf_like(self, x, f, upper: bool) -> Any:
        y = self._std(x)
        a = self.family.lower
        with np.errstate(invalid="ignore"):
            inside = (a < y) & (y < np.inf)
            out = np.zeros(y.shape)
            out[(y <= a) if upper else (y >= np.inf)] = 1.0
        out[np.isnan(y)] = np.nan
        if inside.any():
            out[inside] = f(y[inside], *self.shapes)
        return out[()]

    def cdf(self, x):
        return self._cdf_like(x, self.family.cdf, upper=False)

    def sf(self, x):
        return self._cdf_like(x, self.family.sf, upper=True)

    def _quantile(self, q, f, upper: bool) -> Any:
        q = np.asarray(q)
        out = np.full(q.shape, np.nan)
        lo, hi = self.family.lower * self.scale + self.loc, np.inf * self.scale + self.loc
        out[q == 0] = hi if upper else lo
        out[q == 1] = lo if upper else hi
        inside = (0 < q) & (q < 1)
        if inside.any():
            out[inside] = f(q[inside], *self.shapes) * self.scale + self.loc
        return out[()]

    def ppf(self, q):
        return self._quantile(q, self.family.ppf, upper=False)

    def isf(self, q):
        return self._quantile(q, self.family.isf, upper=True)

    def median(self):
        return self.ppf(0.5)

    def interval(self, confidence: float):
        """The central interval holding `confidence` of the mass (scipy's: ppf at (1 ∓ confidence)/2)."""
        if not 0 <= confidence <= 1:
            raise ValueError(f"confidence {confidence}: must be in [0, 1]")
        return self.ppf((1.0 - confidence) / 2), self.ppf((1.0 + confidence) / 2)

    def _support_mask(self, y: np.ndarray) -> np.ndarray:
        a = self.family.lower
        with np.errstate(invalid="ignore"):
            return ((a < y) & (y < np.inf)) if self.family.open_pdf else ((a <= y) & (y <= np.inf))

    def pdf(self, x):
        y = self._std(x)
        return self._where(y, self._support_mask(y), 0.0,
                           lambda v: self.family.pdf(v, *self.shapes) / self.scale)

    def logpdf(self, x):
        y = self._std(x)
        return self._where(y, self._support_mask(y), -np.inf,
                           lambda v: self.family.logpdf(v, *self.shapes) - np.log(self.scale))

    def logcdf(self, x):
        """log cdf, as scipy.stats computes it in the tails (imports scipy.stats)."""
        return self.as_scipy().logcdf(x)

    def stats(self, moments: str = "mv"):
        if "k" in moments:  # the kurtosis is scipy.stats' (depl never asks for it)
            return self.as_scipy().stats(moments=moments)
        mu, mu2, g1 = self.family.stats(*self.shapes)
        out = {"m": np.float64(mu * self.scale + self.loc), "v": np.float64(mu2 * self.scale * self.scale),
               "s": np.float64(g1)}
        res = tuple(out[m] for m in moments)
        return res[0] if len(res) == 1 else res

    def mean(self):
        return self.stats("m")

    def var(self):
        return self.stats("v")

    def std(self):
        return np.sqrt(self.var())

    def support(self):
        return np.float64(self.family.lower * self.scale + self.loc), np.float64(np.inf * self.scale + self.loc)

    def rvs(self, size=None, random_state=None):
        """Samples, from numpy's generators (a Generator or RandomState, or a seed for default_rng)."""
        rng = random_state if isinstance(random_state, (np.random.Generator, np.random.RandomState)) \
            else np.random.default_rng(random_state)
        return self.loc + self.scale * self.family.draw(rng, size, *self.shapes)

    def as_scipy(self):
        """The same distribution as a frozen scipy.stats object (imports scipy.stats)."""
        if "_frozen_scipy" not in self.__dict__:
            from scipy import stats

            self.__dict__["_frozen_scipy"] = getattr(stats, self.name)(**self.kwds)
        return self.__dict__["_frozen_scipy"]


def is_family(name: str) -> bool:
    """Whether `name` is a continuous distribution depl can use (one of FAMILIES, or scipy.stats')."""
    if name in FAMILIES:
        return True
    from scipy import stats

    return isinstance(getattr(stats, name, None), stats.rv_continuous)


def shape_names(name: str) -> tuple[str, ...]:
    """The shape parameters of a family (see `is_family`), besides loc and scale."""
    if name in FAMILIES:
        return FAMILIES[name].shapes
    from scipy import stats

    return tuple(s.strip() for s in (getattr(stats, name).shapes or "").split(",") if s.strip())


def frozen(name: str, params: dict[str, float]):
    """The distribution `name` with `params` (shapes by name, loc, scale): a `Frozen` for FAMILIES, else
    scipy.stats' frozen distribution."""
    if name in FAMILIES:
        shapes = tuple(params[s] for s in FAMILIES[name].shapes)
        return Frozen(name, shapes, params.get("loc", 0.0), params.get("scale", 1.0))
    from scipy import stats

    return getattr(stats, name)(**params)


def in_domain(dist) -> bool:
    """Whether a distribution from `frozen` has valid parameters.  scipy.stats says so in public: the support
    of a frozen distribution is NaN exactly where its shapes fail its check or scale ≤ 0."""
    if isinstance(dist, Frozen):
        return dist.in_domain()
    return not bool(np.isnan(dist.support()[0]))


def _scipy_parameters(dist, shapes: tuple[str, ...]) -> tuple[tuple, Any, Any]:
    """(shapes, loc, scale) of a frozen scipy.stats distribution, from the arguments it was made with
    (positional in scipy's order — the shapes, loc, scale — or by name; loc 0 and scale 1 by default)."""
    given = dict(zip((*shapes, "loc", "scale"), dist.args))
    given.update(dist.kwds)
    return tuple(given[s] for s in shapes), given.get("loc", 0), given.get("scale", 1)


def standard_form(dist) -> tuple[str, tuple, float, float] | None:
    """(family, shapes, loc, scale) of a `Frozen`, or of a frozen scipy.stats distribution of FAMILIES;
    None for any other."""
    if isinstance(dist, Frozen):
        return dist.name, dist.shapes, dist.loc, dist.scale
    name = getattr(getattr(dist, "dist", None), "name", "")
    if name not in FAMILIES:
        return None
    return (name, *_scipy_parameters(dist, FAMILIES[name].shapes))


def norm_ppf(q):
    """The standard normal's quantile (scipy.stats.norm.ppf)."""
    return Frozen("norm").ppf(q)
