"""Calibration of a fitted law on runs it was not fitted on (`depl fit --calibration-seeds`).

Each calibration run (an experiment's seed that no fit saw) gives one score:
the PIT u = F_e(ℓ(E)) of its loss at the experiment's last epoch under the
fitted law of the experiment's schedule.  One score per (experiment, seed),
so that scores of different seeds are independent draws; the epochs of one
seed are not (depl.loss.calibrated states the guarantee and its price).

Also here: the reliability of a law on held-out runs before and after
calibration (cross-fitted: each half of the calibration runs is judged by the
calibration of the other half, so "after" is measured on runs it did not
see), the PIT values per version and per switch for the report's histograms,
and the comparison with the alternatives (no calibration, isotonic
recalibration of the CDF) that docs/fitting.md reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..loss import loss_model_for
from ..loss.calibrated import conformal_level, runs_needed
from ..scenario import Scenario
from .runs import Profile

LEVELS = np.round(np.arange(0.05, 1.0, 0.05), 2)


@dataclass
class Scores:
    """The PIT of each run's last loss under a law: by experiment label, with the kind of experiment."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    @property
    def all(self) -> np.ndarray:
        return np.sort(np.concatenate(list(self.values.values()))) if self.values else np.empty(0)

    @property
    def n(self) -> int:
        return int(sum(v.size for v in self.values.values()))

    def groups(self) -> dict[str, np.ndarray]:
        """Per version (its experiments at every data fraction) and 'switches' (every switch experiment)."""
        out: dict[str, list] = {}
        for label, v in self.values.items():
            key = "switches" if self.kinds[label] == "switch" else label.split("@")[0]
            out.setdefault(key, []).append(v)
        return {k: np.concatenate(v) for k, v in out.items()}


def pit_scores(scenario: Scenario, prof: Profile, *, calibrated: bool = False, epochs: str = "last") -> Scores:
    """PIT of every run of `prof` under the scenario's law (uncalibrated unless asked): F_e(ℓ(E)), or with
    epochs='all' the PIT of ℓ(k) at every epoch (for the histograms, not for calibration: dependent)."""
    law = loss_model_for(scenario, calibrated=calibrated)
    known = set(law.model_names)
    out = Scores()
    for e in prof.experiments:
        if not set(e.schedule) <= known or e.losses.shape[0] == 0:
            continue
        phi = scenario.phi(e.samples)
        ks = range(1, e.epochs + 1) if epochs == "all" else [e.epochs]
        u = [np.clip(law.distribution(e.schedule[:k], phi).cdf(e.losses[:, k - 1]), 0.0, 1.0) for k in ks]
        out.values[e.label] = np.concatenate(u)
        out.kinds[e.label] = e.kind
    return out


@dataclass
class Calibration:
    scores: np.ndarray       # sorted PIT scores of the calibration runs
    omega: float
    runs: int                # calibration runs (experiment, seed)
    needed: int              # runs split conformal needs to reach ω

    @property
    def reaches(self) -> bool:
        return self.runs >= self.needed

    @property
    def level(self) -> float:
        """The base law's level at which the calibrated ω-quantile is taken (1: none)."""
        return float(conformal_level(self.scores, self.omega))

    def message(self) -> str:
        if self.reaches:
            return (f"calibrated on {self.runs} held-out runs: the certified {self.omega:g}-quantile is the law's "
                    f"{self.level:.3f}-quantile (split conformal on PIT scores)")
        return (f"calibration cannot reach ω = {self.omega:g} with {self.runs} held-out runs: split conformal needs "
                f"n ≥ {self.needed} ({self.needed - self.runs} more; more seeds per experiment with "
                f"--calibration-seeds, or more profiled seeds); the file keeps the scores with use = false, and plans "
                f"with the uncalibrated law")

    def table(self, method: str = "conformal-pit") -> dict:
        """The scenario's [calibration] table."""
        return {"method": method, "use": bool(self.reaches), "omega": float(self.omega),
                "scores": [round(float(u), 6) for u in self.scores]}


def calibrate(scenario: Scenario, calib: Profile, omega: float) -> Calibration:
    s = pit_scores(scenario, calib).all
    return Calibration(s, float(omega), int(s.size), runs_needed(omega))


# --------------------------------------------------------------------------- #
# Reliability, and the alternatives
# --------------------------------------------------------------------------- #

def isotonic_level(scores: np.ndarray, omega):
    """The level isotonic recalibration of the CDF (Kuleshov et al. 2018) takes the ω-quantile at: the
    isotonic fit of the empirical frequency P̂(u ≤ p) on p, inverted at ω (no finite-sample correction)."""
    from sklearn.isotonic import IsotonicRegression

    u = np.sort(np.asarray(scores, dtype=float))
    freq = np.arange(1, u.size + 1) / u.size
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True).fit(u, freq)
    grid = np.linspace(0.0, 1.0, 10_001)
    cal = iso.predict(grid)
    omega = np.atleast_1d(np.asarray(omega, dtype=float))
    idx = np.searchsorted(cal, omega - 1e-12, side="left")
    return np.where(idx >= grid.size, 1.0, grid[np.minimum(idx, grid.size - 1)])


LEVEL_RULES = {
    "none": lambda fit, p: np.asarray(p, dtype=float),
    "isotonic": isotonic_level,
    "conformal": conformal_level,
}


def reliability(scores: np.ndarray, levels=LEVELS, rule: str = "none", rng=None, folds: int = 2,
                repeats: int = 50) -> np.ndarray:
    """Observed frequency of ℓ ≤ the rule's p-quantile, for each nominal p, on runs the rule did not see
    (random halves of the runs: calibrate on one, count on the other; averaged over `repeats` splits)."""
    u = np.asarray(scores, dtype=float)
    if rule == "none":
        return np.array([np.mean(u <= p) for p in levels])
    rng = rng or np.random.default_rng(0)
    out = np.zeros(len(levels))
    for _ in range(repeats):
        perm = rng.permutation(u.size)
        parts = np.array_split(perm, folds)
        for i in range(folds):
            test = u[parts[i]]
            fit = np.sort(u[np.concatenate([parts[j] for j in range(folds) if j != i])])
            lv = np.asarray(LEVEL_RULES[rule](fit, np.asarray(levels)), dtype=float)
            out += np.array([np.mean(test <= lv_p) if lv_p < 1 else 1.0 for lv_p in lv]) / (folds * repeats)
    return out
