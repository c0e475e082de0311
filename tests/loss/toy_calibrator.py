"""A toy calibrator in one module: every quantile of ℓ(K) is read at the level of the highest calibration score
(never below any rank a split-conformal rule would take).  Registered by one line in the test that uses it."""

from __future__ import annotations

import numpy as np

from depl.loss import LossModel


class _AtTop:
    """The base law's distribution with every quantile read at one level."""

    def __init__(self, base, level: float):
        self.base, self.top = base, level
        self.error_bound = base.error_bound

    def quantile(self, q):
        return np.where(np.asarray(q) > 0, self.base.quantile(self.top), self.base.quantile(0.0))

    def quantile_bounds(self, q):
        return self.base.quantile_bounds(self.top)

    def mean(self) -> float:
        return float(self.base.mean())

    def std(self) -> float:
        return float(self.base.std())

    def cdf(self, x):
        return np.where(self.base.cdf(x) >= self.top, 1.0, 0.0)


class WorstScore(LossModel):
    def __init__(self, base: LossModel, scores, method, epoch_scores=None, experiments=None, **rules):
        self.base, self.top = base, float(np.max(scores))
        self.initial_loss, self.model_names = base.initial_loss, base.model_names

    def distribution(self, schedule, phi=1.0, *, start=None, **kw):
        return _AtTop(self.base.distribution(schedule, phi, start=start, **kw), self.top)

    def terms(self, schedule, phi=1.0, *, start=None):
        raise TypeError("a recalibrated law is not a sum of independent terms")

    def simulate(self, schedule, phi, runs, rng, *, start=None):
        return self.base.simulate(schedule, phi, runs, rng, start=start)

    def epoch_cumulants(self, K, phi=1.0):
        return self.base.epoch_cumulants(K, phi)

    def switch_cumulants(self, a, b, phi=1.0):
        return self.base.switch_cumulants(a, b, phi)

    def can_switch(self, a, b):
        return self.base.can_switch(a, b)

    def uncalibrated(self):
        return self.base

    def certified_levels(self, ends, omega):
        return np.full(len(ends), self.top)
