"""A toy loss law, written as a user would add one: this module and one `register_law` line.

Every epoch makes exactly the expected progress g_m(k) of the scenario's versions, times a
Gaussian factor 1 ± 10%: ℓ(K) = ℓ(0) − Σ g_m(k)·(1 + 0.1·Z_k).  No switches."""

from __future__ import annotations

import numpy as np
from scipy import stats

from depl.dist import Term
from depl.loss import LossModel

SPREAD = 0.1


class ToyModel(LossModel):
    def __init__(self, scenario):
        self.initial_loss = scenario.initial_loss
        self.model_names = [m.name for m in scenario.models]
        self._models = {m.name: m for m in scenario.models}
        self._noise = stats.norm(1.0, SPREAD)

    def _g(self, schedule, phi, k0=0):
        return np.array([self._models[m].g(k, phi) for k, m in enumerate(schedule, start=k0 + 1)])

    def terms(self, schedule, phi=1.0, *, start=None):
        k0 = start.epoch if start is not None else 0
        level = start.last_loss if start is not None and start.losses else self.initial_loss
        return [Term(0.0, None, level)] + [Term(-float(g), self._noise) for g in self._g(schedule, phi, k0)]

    def simulate(self, schedule, phi, runs, rng, *, start=None):
        g = self._g(schedule, phi)
        steps = -g * rng.normal(1.0, SPREAD, (runs, len(schedule)))
        return self.initial_loss + np.concatenate([np.zeros((runs, 1)), np.cumsum(steps, axis=1)], axis=1)

    def epoch_cumulants(self, K, phi=1.0):
        k = np.arange(1, K + 1)
        out = np.zeros((len(self.model_names), K, 3))
        for i, m in enumerate(self.model_names):
            g = self._models[m].g(k, phi)
            out[i, :, 0], out[i, :, 1] = -g, (SPREAD * g) ** 2
        return out

    def switch_cumulants(self, a, b, phi=1.0):
        raise ValueError("the toy law has no switches")

    def can_switch(self, a, b):
        return a == b

    def progress_is_monotone(self):
        return False
