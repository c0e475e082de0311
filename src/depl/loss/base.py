"""The loss-model interface the planners, the simulator and the reports see.

A loss model answers, for a *schedule* (the model version of every epoch,
in order) and a data factor φ:

* `terms(schedule, phi)` — ℓ(K) as independent terms (depl.dist.Term), whose
  law `distribution(schedule, phi)` computes by FFT: a GridDistribution with
  scipy.stats' face (`cdf`, `sf`, `ppf`/`quantile`, `pdf`, `logpdf`, `mean`,
  `var`, `std`, `rvs`) and the certified `quantile_bounds`, `cdf_bounds`;
* `simulate(schedule, phi, runs, rng)` — whole trajectories ℓ(0..K), by
  Monte Carlo, independent of the numeric distribution;
* all three take `start=` a depl.state.RunState: the run has trained
  `start.epoch` epochs (`start.past` versions, `start.losses` observed) and
  `schedule` is what comes next, epochs start.epoch+1..start.epoch+K; the law
  is then that of ℓ(start.epoch + K) given the state, and the trajectories
  run from ℓ(start.epoch).  `start=None` (or a run not started) is the plan
  made before training;
* `epoch_cumulants(models, K, phi)` and `switch_cumulants(a, b, phi)` — the
  cumulants κ1..κ3 of each epoch's and each switch's contribution to ℓ(K).
  They are additive along a schedule (the log of the characteristic
  function of a sum of independent draws is the sum of theirs), which is
  what the expanded graph of the planners needs.

Another loss model (a fitted one) plugs into the planners by implementing
`terms`, `simulate`, `epoch_cumulants`, `switch_cumulants` and `can_switch`,
and into scenarios by one line of depl.laws (`register_law`).

What else the planners need of a law they ask it (never its class): the law
its certified quantiles are read from (`uncalibrated`), whether its
cumulants are exact (`cumulants_exact`), the level a K-epoch plan is
certified at (`certified_levels`, `levels_follow_schedule`), and the handles
some laws give for bounding a search (`median_floor`,
`memoryless_switches`).  The defaults are the safe answers: a law that
overrides none of them is planned correctly, only searched with less help.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..dist import GridDistribution, Term, sum_distribution
from ..state import RunState


class LossModel(ABC):
    initial_loss: float
    model_names: list[str]

    @abstractmethod
    def terms(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None) -> list[Term]:
        """ℓ(K) for `schedule` as a sum of independent terms (a constant one carries ℓ(0)); given `start`,
        ℓ(start.epoch + K) given the run's state."""

    def law_parts(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None):
        """(`terms`, the same law as a frozen scipy.stats distribution or None): a law that knows ℓ(K) in
        closed form returns it, and `distribution`'s density and samples are then exact."""
        # a law written before the state seam (terms(schedule, phi)) still plans from the start
        return (self.terms(schedule, phi) if start is None else self.terms(schedule, phi, start=start)), None

    def distribution(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None,
                     tol: float | None = None, h: float | None = None, cache: dict | None = None) -> GridDistribution:
        """The law of ℓ(K) (given `start`: of ℓ(start.epoch + K) given the run's state): FFT convolution of
        `terms` with its certified bracket.

        `tol`/`h` set the lattice (depl.dist.sum_distribution); `cache` reuses
        the lattice masses of terms seen before (default: one per model).
        """
        if cache is None:
            cache = self.__dict__.setdefault("_lattice_cache", {})
            if len(cache) > 20_000:
                cache.clear()
        terms, exact = self.law_parts(schedule, phi, start=start)
        d = sum_distribution(terms, tol=tol, h=h, cache=cache)
        return d if exact is None else replace(d, exact=exact)

    @abstractmethod
    def simulate(self, schedule: Sequence[str], phi: float, runs: int, rng: np.random.Generator, *,
                 start: RunState | None = None) -> np.ndarray:
        """Trajectories, shape (runs, K+1); column 0 is ℓ(0) (given `start`: ℓ(start.epoch), observed or drawn)."""

    @abstractmethod
    def epoch_cumulants(self, K: int, phi: float = 1.0) -> np.ndarray:
        """Array (|M|, K, 3): κ1, κ2, κ3 of epoch k = 1..K's change of the loss, per model."""

    @abstractmethod
    def switch_cumulants(self, a: str, b: str, phi: float = 1.0) -> np.ndarray:
        """κ1, κ2, κ3 of the loss change of switching from `a` to `b`."""

    @abstractmethod
    def can_switch(self, a: str, b: str) -> bool:
        """Whether a schedule may go from `a` to `b` between two epochs."""

    def progress_is_monotone(self) -> bool:
        """True if one more epoch never raises the loss (positive noise support)."""
        return False

    def mean_path(self, schedule: Sequence[str], phi: float = 1.0) -> np.ndarray:
        """E[ℓ(k)] for k = 0..K."""
        K = len(schedule)
        idx = {m: i for i, m in enumerate(self.model_names)}
        cum = self.epoch_cumulants(K, phi)
        out = np.empty(K + 1)
        out[0] = self.initial_loss
        for k, m in enumerate(schedule):
            step = cum[idx[m], k, 0]
            if k > 0 and schedule[k - 1] != m:
                step += self.switch_cumulants(schedule[k - 1], m, phi)[0]
            out[k + 1] = out[k] + step
        return out


    # -- what the planners ask of a law ------------------------------------- #
    def uncalibrated(self) -> "LossModel":
        """The law the certified quantiles are taken from: a recalibrated law's base (depl.loss.calibrated),
        else the law itself."""
        return self

    def cumulants_exact(self) -> bool:
        """Whether the additive cumulants give ℓ(K)'s exact mean and variance from ℓ(0) or an observed loss (so
        that Cantelli's bound may rule schedules out)."""
        return False

    def cumulants_scale_with_phi(self) -> bool:
        """Whether every epoch's cumulants κ1, κ2, κ3 at data factor φ are φ, φ², φ³ times those at φ = 1 and a
        plan's certified quantile is read at ω itself (so one search at φ = 1 ranks every dataset choice)."""
        return False

    def certified_levels(self, ends: np.ndarray, omega: float) -> np.ndarray | None:
        """Per end epoch in `ends`, the level of `uncalibrated()` at which a plan ending there has its
        ω-quantile certified (1: nothing of that length is); None: the level is ω itself (a law as fitted)."""
        return None

    def levels_follow_schedule(self) -> bool:
        """Whether the certified level of a plan depends on its schedule, not only on its length (then one more
        epoch may raise the certified quantile anywhere, and searches must not bisect on a length)."""
        return False

    def shortfall(self) -> str | None:
        """Why the law certifies no plan at its scenario's target with the confidence it was asked for, and what
        would, in words (depl.loss.calibrated); None when that is not the reason (the default)."""
        return None

    # -- a calibrator's questions (depl.loss.calibrated answers them; every law has these safe defaults) ------- #
    def certified_by(self, schedule: Sequence[str], phi: float, omega: float) -> str | None:
        """Which calibration runs read the ω-quantile of `schedule` at φ, in words (printed with a plan); None:
        the law says nothing of runs (a law as fitted, or a calibrator that keeps no record of them)."""
        return None

    def certificate(self, schedule: Sequence[str], phi: float) -> tuple[bool, int, int] | None:
        """(certified, runs, runs that met ℓmax) of `schedule` at φ with the law's confidence 1 − α, counted on
        runs of that schedule; None: no runs certify it (the default: a plan is then "not certified yet")."""
        return None

    def median_floor(self, phi: float, K: int, switches: np.ndarray) -> np.ndarray | None:
        """(K,): a lower bound on the median of ℓ(k), k = 1..K, over every schedule with at most `switches[k-1]`
        switches in its first k epochs, before training; None: the law gives no such bound."""
        return None

    def memoryless_switches(self) -> dict | None:
        """Where ℓ(K) after a switch a → b depends only on b's curve at the global epoch K and the switch's own
        parameters: {(a, b): (the switch's parameters, b's curve)}; None for any other law."""
        return None


def segments(schedule) -> list[tuple]:
    """A schedule as its runs of one version, in order: [("full", 2), ("pruned-0.5", 3)] (of any items: runs of
    equal (version, cluster) pairs for a plan's epochs)."""
    out: list[tuple[str, int]] = []
    for m in schedule:
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1] + 1)
        else:
            out.append((m, 1))
    return out


def started(start: RunState | None) -> bool:
    """Whether a law must condition on `start` (None and a run not started are the plan before training)."""
    return start is not None and start.epoch > 0
