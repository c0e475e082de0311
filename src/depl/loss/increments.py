"""The paper's loss model (eq. 8 with switch jumps), as fixed by SPEC.

    ℓ(k) = ℓ(k−1) − g_m(k)·x_k + jump,   g_m(k) = A_m·φ(S)/√(k + B_m)

x_k ~ X_m i.i.d., jump ~ l_sw(m→m') when the version changes between epoch
k−1 and k; all draws independent, so ℓ(K) is ℓ(0) plus a sum of independent
terms and its law is a convolution (depl.dist).

Given a run's state after k0 epochs (depl.state.RunState) the law is Markov:
ℓ(k0 + K) is the observed ℓ(k0) plus the remaining increments of epochs
k0+1..k0+K — g_m at the global epoch, so a version that comes later makes the
progress of a late epoch — and a jump if the next version is not the one
trained last.  A state with no observed loss gives the law of the whole
schedule, past and next, from ℓ(0).
"""

from __future__ import annotations

from functools import cached_property
from typing import Sequence

import numpy as np

from ..dist import Term, draw
from ..scenario import Scenario
from ..state import RunState
from .base import LossModel, started


class IncrementsModel(LossModel):
    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.initial_loss = scenario.initial_loss
        self.model_names = [m.name for m in scenario.models]
        self._noise = {m.name: m.noise.frozen for m in scenario.models}
        self._jump = {k: s.jump.frozen for k, s in scenario.switch_map.items()}
        self._models = {m.name: m for m in scenario.models}

    # -- the terms of ℓ(K) -------------------------------------------------- #
    def terms(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None) -> list[Term]:
        if not started(start):
            return self._terms(schedule, phi, 0, self.initial_loss, None)
        if not start.losses:
            return self.terms(start.past + tuple(schedule), phi)
        return self._terms(schedule, phi, start.epoch, float(start.losses[-1]), start.past[-1])

    def _terms(self, schedule, phi: float, k0: int, level: float, prev: str | None) -> list[Term]:
        """ℓ(k0) = level, then the epochs k0+1.. of `schedule` (a jump first if `prev` is another version)."""
        out = [Term(0.0, None, level)]
        for k, m in enumerate(schedule, start=k0 + 1):
            out.append(Term(-float(self._models[m].g(k, phi)), self._noise[m]))
            if prev is not None and prev != m:
                out.append(Term(1.0, self._jump[(prev, m)]))
            prev = m
        return out

    def simulate(self, schedule: Sequence[str], phi: float, runs: int, rng: np.random.Generator, *,
                 start: RunState | None = None) -> np.ndarray:
        if not started(start):
            return self._simulate(schedule, phi, runs, rng, 0, self.initial_loss, None)
        if not start.losses:
            return self.simulate(start.past + tuple(schedule), phi, runs, rng)[:, start.epoch:]
        return self._simulate(schedule, phi, runs, rng, start.epoch, float(start.losses[-1]), start.past[-1])

    def _simulate(self, schedule, phi, runs, rng, k0: int, level: float, prev: str | None) -> np.ndarray:
        K = len(schedule)
        steps = np.empty((runs, K))
        sched = np.asarray(schedule)
        for m in set(schedule):
            cols = np.flatnonzero(sched == m)
            g = self._models[m].g(cols + 1 + k0, phi)
            x = draw(self._noise[m], (runs, cols.size), rng)
            steps[:, cols] = -g * x
        for k in range(K):
            before = schedule[k - 1] if k > 0 else prev
            if before is not None and schedule[k] != before:
                steps[:, k] += draw(self._jump[(before, schedule[k])], runs, rng)
        out = np.empty((runs, K + 1))
        out[:, 0] = level
        np.cumsum(steps, axis=1, out=out[:, 1:])
        out[:, 1:] += level
        return out

    # -- cumulants for the expanded graph ----------------------------------- #
    @cached_property
    def _noise_cumulants(self) -> np.ndarray:
        out = np.empty((len(self.model_names), 3))
        for i, m in enumerate(self.model_names):
            out[i] = Term(1.0, self._noise[m]).cumulants()
        return out

    def epoch_cumulants(self, K: int, phi: float = 1.0) -> np.ndarray:
        k = np.arange(1, K + 1, dtype=float)
        out = np.empty((len(self.model_names), K, 3))
        for i, m in enumerate(self.model_names):
            g = self._models[m].g(k, phi)
            c1, c2, c3 = self._noise_cumulants[i]
            out[i, :, 0] = -g * c1
            out[i, :, 1] = g**2 * c2
            out[i, :, 2] = -(g**3) * c3
        return out

    def switch_cumulants(self, a: str, b: str, phi: float = 1.0) -> np.ndarray:
        return np.asarray(Term(1.0, self._jump[(a, b)]).cumulants())

    def can_switch(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self._jump

    def progress_is_monotone(self) -> bool:
        return all(d.support()[0] >= 0 for d in self._noise.values())

    def cumulants_scale_with_phi(self) -> bool:
        return True   # each epoch's progress is A·φ/√(k+B) times the noise

    def cumulants_exact(self) -> bool:
        return True   # ℓ(K) is ℓ(0) plus independent increments: their cumulants add up to its own
