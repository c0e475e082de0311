"""A distribution of a scenario (a version's noise, a switch's jump): a family of depl.families by name with its
parameters, or with its mean and variance."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, field_validator, model_validator

from .. import families
from .base import Strict


def _solve_mean_var(family: str, mean: float, var: float, given: dict[str, float]) -> dict[str, float]:
    """Parameters of `family` with the given mean and variance (closed forms)."""
    if var <= 0:
        raise ValueError(f"var must be > 0, got {var}")
    if family == "invgamma":
        if mean <= 0:
            raise ValueError(f"an Inverse-Gamma has a positive mean, got mean = {mean}")
        a = mean**2 / var + 2.0
        return {"a": a, "scale": mean * (a - 1.0)}
    if family == "gamma":
        if mean <= 0:
            raise ValueError(f"a Gamma has a positive mean, got mean = {mean}")
        return {"a": mean**2 / var, "scale": var / mean}
    if family == "norm":
        return {"loc": mean, "scale": math.sqrt(var)}
    if family == "lognorm":
        if mean <= 0:
            raise ValueError(f"a log-normal has a positive mean, got mean = {mean}")
        s2 = math.log1p(var / mean**2)
        return {"s": math.sqrt(s2), "scale": mean * math.exp(-s2 / 2)}
    if family == "t":
        df = given.get("df")
        if df is None or df <= 2:
            raise ValueError("a Student-t given by mean/var needs params.df > 2 (its variance is finite only then)")
        return {"df": df, "loc": mean, "scale": math.sqrt(var * (df - 2) / df)}
    raise ValueError(
        f"mean/var can be solved for invgamma, gamma, norm, lognorm and t (with df); "
        f"give `params` for family {family!r}"
    )


class DistSpec(Strict):
    """A scipy.stats distribution: `family` with `params`, or with `mean` and `var`."""

    family: str
    params: dict[str, float] = Field(default_factory=dict)
    mean: float | None = None
    var: float | None = None

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if not families.is_family(v):
            raise ValueError(f"{v!r} is not a continuous distribution of scipy.stats (e.g. invgamma, gamma, norm, lognorm, t)")
        return v

    @model_validator(mode="after")
    def _resolvable(self) -> "DistSpec":
        if (self.mean is None) != (self.var is None):
            raise ValueError("give both `mean` and `var`, or neither")
        if self.mean is not None:
            # mean/var fix two parameters; only a Student-t's df may be given besides them
            extra = sorted(set(self.params) - ({"df"} if self.family == "t" else set()))
            if extra:
                raise ValueError(f"give either `params` or `mean` and `var`, not both: params {extra} "
                                 f"would be ignored (mean/var determine {self.family}'s parameters)")
        try:
            frozen = self.frozen
            m, v = frozen.mean(), frozen.var()
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.family} with these parameters: {e}") from None
        if not np.isfinite(m):
            raise ValueError(f"{self.family} with parameters {self.resolved_params} has no finite mean")
        if not np.isfinite(v):
            raise ValueError(f"{self.family} with parameters {self.resolved_params} has no finite variance")
        return self

    @property
    def resolved_params(self) -> dict[str, float]:
        if self.mean is not None and self.var is not None:
            return _solve_mean_var(self.family, self.mean, self.var, self.params)
        return dict(self.params)

    @property
    def frozen(self):
        """The distribution: a depl.families.Frozen for the families the laws use (scipy.stats' face and
        numbers without importing scipy.stats), else the frozen scipy.stats distribution."""
        params = self.resolved_params
        shapes = list(families.shape_names(self.family))
        unknown = set(params) - set(shapes) - {"loc", "scale"}
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; {self.family} takes {shapes + ['loc', 'scale']}")
        missing = [s for s in shapes if s not in params]
        if missing:
            raise ValueError(f"missing shape parameter(s) {missing} for {self.family}")
        frozen = families.frozen(self.family, params)
        if not families.in_domain(frozen):
            raise ValueError(f"parameters {params} are outside the domain of {self.family}")
        return frozen
