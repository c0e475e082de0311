"""Goodness of fit, measured honestly.

A KS p-value computed against parameters fitted on the same data is too
kind (the fit has already pulled the distribution towards the data); the
parametric bootstrap refits on samples drawn from the fitted law and
compares (`scipy.stats.goodness_of_fit`).  The held-out log-likelihood
scores a fitted law on seeds the fit never saw.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class FamilyFit:
    family: str
    params: dict            # scipy's parameter names → values
    n: int                  # observations fitted
    ks: float               # KS statistic on the fitting data
    p_naive: float          # KS p-value ignoring that the parameters were fitted
    p_boot: float | None    # parametric-bootstrap p-value (None: not computed)
    heldout: float          # mean log-density of the held-out observations (−inf: some are impossible)
    heldout_n: int
    impossible: int         # held-out observations outside the support
    usable: bool            # finite mean and variance (a scenario can use it)

    @property
    def frozen(self):
        return getattr(stats, self.family)(**self.params)


def _param_names(family: str) -> list[str]:
    dist = getattr(stats, family)
    shapes = [s.strip() for s in (dist.shapes or "").split(",") if s.strip()]
    return shapes + ["loc", "scale"]


SHAPE_BOUNDS = {"skewnorm": ("a", 20.0)}
"""Shapes a fit may not run off to: a skew-normal's |a| beyond 20 is a half-normal to within 0.1 % of its skewness,
and maximum likelihood on samples with a sharp edge drives it to ±1e7 (a degenerate law, printed as such); such a
fit is redone with the shape held at the bound, keeping its sign."""


def fit_family(family: str, data: np.ndarray, heldout: np.ndarray, *, fixed: dict | None = None,
               bootstrap: int = 0, rng: np.random.Generator | None = None) -> FamilyFit | None:
    """MLE of `family` on `data` (with `fixed` parameters, e.g. loc=0), scored on `heldout`."""
    dist = getattr(stats, family)
    fixed = dict(fixed or {})
    kw = {("f" + k if k not in ("loc", "scale") else "f" + k): v for k, v in fixed.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            est = dist.fit(data, **kw)
            shape, bound = SHAPE_BOUNDS.get(family, (None, math.inf))
            names = _param_names(family)
            if shape is not None and shape not in fixed and abs(est[names.index(shape)]) > bound:
                est = dist.fit(data, **{**kw, "f" + shape: math.copysign(bound, est[names.index(shape)])})
        except Exception:
            return None
    params = dict(zip(_param_names(family), map(float, est)))
    frozen = dist(**params)
    ks = stats.kstest(data, frozen.cdf)
    p_boot = None
    if bootstrap > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                g = stats.goodness_of_fit(dist, data, known_params=fixed or None, statistic="ks",
                                          n_mc_samples=bootstrap, random_state=rng)
                p_boot = float(g.pvalue)
            except Exception:
                p_boot = None
    with np.errstate(divide="ignore"):
        lp = frozen.logpdf(heldout) if heldout.size else np.array([])
    impossible = int(np.sum(~np.isfinite(lp)))
    heldout_ll = float(np.mean(lp)) if lp.size else math.nan
    m, v = frozen.mean(), frozen.var()
    return FamilyFit(family, params, int(data.size), float(ks.statistic), float(ks.pvalue), p_boot, heldout_ll,
                     int(heldout.size), impossible, bool(np.isfinite(m) and np.isfinite(v)))


def best_usable(fits: list[FamilyFit | None]) -> FamilyFit | None:
    """The usable fit with the highest held-out log-likelihood."""
    ok = [f for f in fits if f is not None and f.usable and math.isfinite(f.heldout)]
    if not ok:
        ok = [f for f in fits if f is not None and f.usable]
        return max(ok, key=lambda f: (-f.impossible, f.p_naive)) if ok else None
    return max(ok, key=lambda f: f.heldout)


def heldout_logpdf(dist, x: np.ndarray, floor: float = 1e-12) -> tuple[np.ndarray, int]:
    """The law's own log-density at the held-out x, floored at log(`floor`), and how many x it gives
    (almost) no density: one impossible observation must not make a law's score −inf."""
    lp = np.asarray(dist.logpdf(np.asarray(x, dtype=float)), dtype=float)
    impossible = int(np.sum(~(lp >= math.log(floor))))
    return np.maximum(np.nan_to_num(lp, nan=-np.inf), math.log(floor)), impossible


def pvalue_text(x) -> str:
    """A p-value as the reports print it (— when not computed)."""
    if x is None:
        return "—"
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"
