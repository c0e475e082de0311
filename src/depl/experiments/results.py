"""The records a reproduction produces: plans checked by Monte Carlo, η and solve-time points."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..band import Band
from .config import Config


@dataclass
class Outcome:
    """One plan, checked by Monte Carlo."""

    scenario: str
    target: float
    method: str
    feasible: bool
    cost: float = math.nan
    loss_mean: float = math.nan
    loss_quantile: float = math.nan
    solve_seconds: float = math.nan
    segments: list = field(default_factory=list)
    epochs_per_version: dict = field(default_factory=dict)
    cost_per_version: dict = field(default_factory=dict)
    p_meet: float = math.nan
    p_meet_ci: tuple = (math.nan, math.nan)
    mc_quantile: float = math.nan
    mc_quantile_ci: tuple = (math.nan, math.nan)
    mc_runs: int = 0
    omega: float = 0.99
    band: Band | None = None
    message: str = ""
    cost_model: str = "per-epoch"

    @property
    def K(self) -> int:
        return sum(self.epochs_per_version.values())

    @property
    def versions_used(self) -> list[str]:
        return [m for m, n in self.epochs_per_version.items() if n > 0]

    @property
    def meets(self) -> bool:
        """The Monte Carlo check does not refute ω: the one-sided (1 − α) upper bound on P(ℓ(K) ≤ ℓmax) (`p_meet_ci`,
        α the plan's) reaches ω."""
        return self.feasible and self.p_meet_ci[1] >= self.omega

    @property
    def band_width(self) -> float:
        """99th − 1st percentile of ℓ(K) (Fig. 9's shaded area at the last epoch)."""
        return float(self.band.high[-1] - self.band.low[-1]) if self.band is not None else math.nan


@dataclass
class EtaPoint:
    scenario: str
    target: float
    eta: int
    cost: float
    solve_seconds: float


@dataclass
class PerfPoint:
    axis: str  # "K", "|M|", "|N|", "η"
    value: float
    method: str
    seconds: float
    cost: float
    K: int


@dataclass
class SingleVersion:
    """The cheapest plan that uses one version only, for one target."""

    scenario: str
    target: float
    version: str
    K_quantile: int | None  # epochs for the 99th percentile to meet ℓmax
    cost_quantile: float
    K_mean: int | None  # epochs for the expected loss to meet ℓmax
    cost_mean: float
    margin: float  # 99th percentile − E[ℓ(K)] of the K_quantile plan


@dataclass
class Results:
    config: Config
    sweep: dict = field(default_factory=dict)  # (scenario, target, method, cost model) -> Outcome
    eta: list = field(default_factory=list)
    perf: list = field(default_factory=list)
    single: list = field(default_factory=list)
    sensitivity: dict = field(default_factory=dict)  # (variant, target, method) -> Outcome
    map: list = field(default_factory=list)  # depl.experiments.map records (dicts), loaded and new
    seconds: float = 0.0

    def outcome(self, scenario: str, target: float, method: str, cost_model: str = "per-epoch") -> Outcome:
        return self.sweep[(scenario, float(target), method, cost_model)]


@dataclass(frozen=True)
class Step:
    label: str
    weight: float  # a rough guess of its seconds, for the progress bar's ETA
    run: Callable[[Results], None]


__all__ = ["Outcome", "EtaPoint", "PerfPoint", "SingleVersion", "Results", "Step"]
