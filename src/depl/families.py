"""The distribution families of depl's loss laws, without importing scipy.stats.

A scenario's noise and switch jumps are scipy.stats families by name; importing
scipy.stats costs about a second of CPU, more than `depl plan` needs to plan
paper-alexnet.  For the families the laws use — norm, t, gamma, invgamma,
lognorm, expon — `Frozen` answers what depl asks of a frozen scipy.stats
distribution (`cdf`, `sf`, `ppf`, `isf`, `pdf`, `logpdf`, `mean`, `var`, `std`,
`stats`, `support`, `rvs`) with the same scipy.special ufuncs and the same
arithmetic as scipy.stats, so the numbers are scipy's to the last bit
(tests/test_families.py compares them).  scipy.special is imported at the first
evaluation that needs it (the moments need only numpy); anything else asked of
a `Frozen` (`interval`, `entropy`, `logcdf`, ...) is answered by the scipy.stats
distribution, imported then.  Any other family is scipy.stats' own (`frozen`).

Samples come from numpy's generators (scipy's invgamma has no sampler of its
own and inverts its cdf, ~40× slower than 1/Gamma).

>>> d = frozen("invgamma", {"a": 3.0, "scale": 2.0})
>>> float(d.mean()), float(d.var())
(1.0, 1.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

# family -> its shape parameters, in scipy.stats' order (loc and scale come besides)
FAMILIES: dict[str, tuple[str, ...]] = {
    "norm": (), "t": ("df",), "gamma": ("a",), "invgamma": ("a",), "lognorm": ("s",), "expon": (),
}
# lower end of the standard support (the upper end is +inf for all)
_LOWER = {"norm": -np.inf, "t": -np.inf, "gamma": 0.0, "invgamma": 0.0, "lognorm": 0.0, "expon": 0.0}
# families whose density is defined on the open support (scipy's _open_support_mask)
_OPEN_PDF = {"invgamma", "lognorm"}

_NORM_PDF_C = np.sqrt(2 * np.pi)
_NORM_PDF_LOGC = np.log(_NORM_PDF_C)


def _special():
    from scipy import special

    return special


# -- standard form (loc 0, scale 1): scipy.stats' _cdf, _sf, _ppf, ... ------------------------- #

def _cdf(name: str, y: np.ndarray, shapes: tuple) -> np.ndarray:
    sc = _special()
    if name == "norm":
        return sc.ndtr(y)
    if name == "t":
        return sc.stdtr(shapes[0], y)
    if name == "gamma":
        return sc.gammainc(shapes[0], y)
    if name == "invgamma":
        return sc.gammaincc(shapes[0], 1.0 / y)
    if name == "lognorm":
        return sc.ndtr(np.log(y) / shapes[0])
    return -sc.expm1(-y)  # expon


def _sf(name: str, y: np.ndarray, shapes: tuple) -> np.ndarray:
    sc = _special()
    if name == "norm":
        return sc.ndtr(-y)
    if name == "t":
        return sc.stdtr(shapes[0], -y)
    if name == "gamma":
        return sc.gammaincc(shapes[0], y)
    if name == "invgamma":
        return sc.gammainc(shapes[0], 1.0 / y)
    if name == "lognorm":
        return sc.ndtr(-(np.log(y) / shapes[0]))
    return np.exp(-y)  # expon


def _ppf(name: str, q: np.ndarray, shapes: tuple) -> np.ndarray:
    sc = _special()
    if name == "norm":
        return sc.ndtri(q)
    if name == "t":
        return sc.stdtrit(shapes[0], q)
    if name == "gamma":
        return sc.gammaincinv(shapes[0], q)
    if name == "invgamma":
        return 1.0 / sc.gammainccinv(shapes[0], q)
    if name == "lognorm":
        return np.exp(shapes[0] * sc.ndtri(q))
    return -sc.log1p(-q)  # expon


def _isf(name: str, q: np.ndarray, shapes: tuple) -> np.ndarray:
    sc = _special()
    if name == "norm":
        return -sc.ndtri(q)
    if name == "t":
        return -sc.stdtrit(shapes[0], q)
    if name == "gamma":
        return sc.gammainccinv(shapes[0], q)
    if name == "invgamma":
        return 1.0 / sc.gammaincinv(shapes[0], q)
    if name == "lognorm":
        return np.exp(shapes[0] * -sc.ndtri(q))
    return -np.log(q)  # expon


def _logpdf(name: str, y: np.ndarray, shapes: tuple) -> np.ndarray:
    if name == "norm":
        return -y**2 / 2.0 - _NORM_PDF_LOGC
    if name == "t":
        sc, df = _special(), shapes[0]
        return (np.log(sc.poch(0.5 * df, 0.5)) - 0.5 * (np.log(df) + np.log(np.pi))
                - (df + 1) / 2 * np.log1p(y * y / df))
    if name == "gamma":
        sc, a = _special(), shapes[0]
        return sc.xlogy(a - 1.0, y) - y - sc.gammaln(a)
    if name == "invgamma":
        sc, a = _special(), shapes[0]
        return -(a + 1) * np.log(y) - sc.gammaln(a) - 1.0 / y
    if name == "lognorm":
        s = shapes[0]
        with np.errstate(divide="ignore"):
            return np.where(y != 0, -np.log(y)**2 / (2 * s**2) - np.log(s * y * np.sqrt(2 * np.pi)), -np.inf)
    return -y  # expon


def _pdf(name: str, y: np.ndarray, shapes: tuple) -> np.ndarray:
    if name == "norm":
        return np.exp(-y**2 / 2.0) / _NORM_PDF_C
    if name == "expon":
        return np.exp(-y)
    return np.exp(_logpdf(name, y, shapes))


def _stats(name: str, shapes: tuple) -> tuple[Any, Any, Any]:
    """(mean, variance, skewness) in standard form, as scipy.stats' `_stats` computes them."""
    if name == "norm":
        return 0.0, 1.0, 0.0
    if name == "expon":
        return 1.0, 1.0, 2.0
    x = np.float64(shapes[0])
    if name == "t":
        mu = 0.0 if x > 1 else np.inf
        mu2 = x / (x - 2.0) if x > 2 else np.inf if x > 1 else np.nan
        return mu, mu2, 0.0 if x > 3 else np.nan
    if name == "gamma":
        return x, x, 2.0 / np.sqrt(x)
    if name == "invgamma":
        m1 = 1. / (x - 1.) if x > 1 else np.inf
        m2 = 1. / (x - 1.)**2 / (x - 2.) if x > 2 else np.inf
        return m1, m2, 4. * np.sqrt(x - 2.) / (x - 3.) if x > 3 else np.nan
    p = np.exp(x * x)  # lognorm
    return np.sqrt(p), p * (p - 1), np.sqrt(p - 1) * (2 + p)


def standard_draw(name: str, shapes: tuple, rng, size) -> np.ndarray:
    """Samples of the standard form from a numpy Generator (or RandomState)."""
    if name == "invgamma":
        return 1.0 / rng.standard_gamma(shapes[0], size)
    if name == "gamma":
        return rng.standard_gamma(shapes[0], size)
    if name == "norm":
        return rng.standard_normal(size)
    if name == "lognorm":
        return np.exp(shapes[0] * rng.standard_normal(size))
    if name == "t":
        return rng.standard_t(shapes[0], size)
    return rng.standard_exponential(size)  # expon


class Frozen:
    """One of FAMILIES with its parameters: the face of a frozen scipy.stats distribution.

    Hashed and compared by identity, like scipy's (depl.dist keys its lattice cache by the object).
    """

    def __init__(self, name: str, shapes: tuple[float, ...] = (), loc: float = 0.0, scale: float = 1.0):
        if name not in FAMILIES:
            raise ValueError(f"{name!r} is not one of {sorted(FAMILIES)}")
        if len(shapes) != len(FAMILIES[name]):
            raise ValueError(f"{name} takes shape parameter(s) {FAMILIES[name]}, got {shapes}")
        self.name, self.shapes, self.loc, self.scale = name, tuple(shapes), loc, scale

    def __repr__(self) -> str:
        params = dict(zip(FAMILIES[self.name], self.shapes), loc=self.loc, scale=self.scale)
        return f"Frozen({self.name!r}, {params})"

    @property
    def kwds(self) -> dict[str, float]:
        """The parameters by name, as scipy.stats takes them."""
        return dict(zip(FAMILIES[self.name], self.shapes), loc=self.loc, scale=self.scale)

    def in_domain(self) -> bool:
        """Whether the parameters are valid (shapes > 0 and scale > 0, as scipy's _argcheck)."""
        return all(s > 0 for s in self.shapes) and self.scale > 0

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
        a = _LOWER[self.name]
        with np.errstate(invalid="ignore"):
            inside = (a < y) & (y < np.inf)
            out = np.zeros(y.shape)
            out[(y <= a) if upper else (y >= np.inf)] = 1.0
        out[np.isnan(y)] = np.nan
        if inside.any():
            out[inside] = f(self.name, y[inside], self.shapes)
        return out[()]

    def cdf(self, x):
        return self._cdf_like(x, _cdf, upper=False)

    def sf(self, x):
        return self._cdf_like(x, _sf, upper=True)

    def _quantile(self, q, f, upper: bool) -> Any:
        q = np.asarray(q)
        out = np.full(q.shape, np.nan)
        lo, hi = _LOWER[self.name] * self.scale + self.loc, np.inf * self.scale + self.loc
        out[q == 0] = hi if upper else lo
        out[q == 1] = lo if upper else hi
        inside = (0 < q) & (q < 1)
        if inside.any():
            out[inside] = f(self.name, q[inside], self.shapes) * self.scale + self.loc
        return out[()]

    def ppf(self, q):
        return self._quantile(q, _ppf, upper=False)

    def isf(self, q):
        return self._quantile(q, _isf, upper=True)

    def _support_mask(self, y: np.ndarray) -> np.ndarray:
        a = _LOWER[self.name]
        with np.errstate(invalid="ignore"):
            return ((a < y) & (y < np.inf)) if self.name in _OPEN_PDF else ((a <= y) & (y <= np.inf))

    def pdf(self, x):
        y = self._std(x)
        return self._where(y, self._support_mask(y), 0.0,
                           lambda v: _pdf(self.name, v, self.shapes) / self.scale)

    def logpdf(self, x):
        y = self._std(x)
        return self._where(y, self._support_mask(y), -np.inf,
                           lambda v: _logpdf(self.name, v, self.shapes) - np.log(self.scale))

    def stats(self, moments: str = "mv"):
        mu, mu2, g1 = _stats(self.name, self.shapes)
        out = {"m": np.float64(mu * self.scale + self.loc), "v": np.float64(mu2 * self.scale * self.scale),
               "s": np.float64(g1)}
        if "k" in moments:
            return self.as_scipy().stats(moments=moments)
        res = tuple(out[m] for m in moments)
        return res[0] if len(res) == 1 else res

    def mean(self):
        return self.stats("m")

    def var(self):
        return self.stats("v")

    def std(self):
        return np.sqrt(self.var())

    def support(self):
        return np.float64(_LOWER[self.name] * self.scale + self.loc), np.float64(np.inf * self.scale + self.loc)

    def rvs(self, size=None, random_state=None):
        """Samples, from numpy's generators (a Generator or RandomState, or a seed for default_rng)."""
        rng = random_state if isinstance(random_state, (np.random.Generator, np.random.RandomState)) \
            else np.random.default_rng(random_state)
        return self.loc + self.scale * standard_draw(self.name, self.shapes, rng, size)

    # -- anything else: scipy.stats ------------------------------------------------------------ #
    def as_scipy(self):
        """The same distribution as a frozen scipy.stats object (imports scipy.stats)."""
        if "_frozen_scipy" not in self.__dict__:
            from scipy import stats

            self.__dict__["_frozen_scipy"] = getattr(stats, self.name)(**self.kwds)
        return self.__dict__["_frozen_scipy"]

    def __getattr__(self, attr: str):
        if attr.startswith("_") or attr in ("name", "shapes", "loc", "scale"):
            raise AttributeError(attr)
        return getattr(self.as_scipy(), attr)


def is_family(name: str) -> bool:
    """Whether `name` is a continuous distribution depl can use (one of FAMILIES, or scipy.stats')."""
    if name in FAMILIES:
        return True
    from scipy import stats

    return isinstance(getattr(stats, name, None), stats.rv_continuous)


def shape_names(name: str) -> tuple[str, ...]:
    """The shape parameters of a family (see `is_family`), besides loc and scale."""
    if name in FAMILIES:
        return FAMILIES[name]
    from scipy import stats

    return tuple(s.strip() for s in (getattr(stats, name).shapes or "").split(",") if s.strip())


def frozen(name: str, params: dict[str, float]):
    """The distribution `name` with `params` (shapes by name, loc, scale): a `Frozen` for FAMILIES, else
    scipy.stats' frozen distribution."""
    if name in FAMILIES:
        return Frozen(name, tuple(params[s] for s in FAMILIES[name]), params.get("loc", 0.0), params.get("scale", 1.0))
    from scipy import stats

    return getattr(stats, name)(**params)


def in_domain(dist) -> bool:
    """Whether a distribution from `frozen` has valid parameters."""
    if isinstance(dist, Frozen):
        return dist.in_domain()
    shapes, _, scale = dist.dist._parse_args(*dist.args, **dist.kwds)
    return bool(dist.dist._argcheck(*shapes)) and scale > 0


def standard_form(dist) -> tuple[str, tuple, float, float] | None:
    """(family, shapes, loc, scale) of a `Frozen`, or of a frozen scipy.stats distribution of FAMILIES;
    None for any other."""
    if isinstance(dist, Frozen):
        return dist.name, dist.shapes, dist.loc, dist.scale
    name = getattr(getattr(dist, "dist", None), "name", "")
    if name not in FAMILIES:
        return None
    shapes, loc, scale = dist.dist._parse_args(*dist.args, **dist.kwds)
    return name, shapes, loc, scale


def norm_ppf(q):
    """The standard normal's quantile (scipy.stats.norm.ppf)."""
    return Frozen("norm").ppf(q)
