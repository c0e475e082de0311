"""What `depl reproduce` runs: the networks, methods, targets and sample sizes.

>>> cfg = Config.quick(seed=1)
>>> cfg.targets
(9.0, 11.0, 13.0)
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("optimal", "depl", "best-exp")
NETWORKS = ("paper-alexnet", "paper-mobilenet")
VERSIONS = ("fast-unsteady", "intermediate", "slow-steady")
PAPER_SAVING = 0.27


@dataclass(frozen=True)
class Config:
    """What to run.  `full()` is the committed report; `quick()` is what the tests use."""

    targets: tuple[float, ...]  # ℓmax, the bound on the 99th percentile
    band_targets: tuple[float, ...]  # Fig. 9
    eta_values: tuple[int, ...]  # Fig. 5/6 right
    eta_targets: tuple[float, ...]
    mc_runs: int
    perf_target: float  # the |M| and |N| instances
    perf_versions: tuple[int, ...]  # |M|
    perf_versions_optimal: int  # optimal only up to this |M|
    perf_clusters: tuple[int, ...]  # |N|
    perf_clusters_optimal: int
    sensitivity_targets: tuple[float, ...]  # () = no sensitivity section
    networks: tuple[str, ...] = NETWORKS
    eta: int = 200  # DepL's η everywhere but the η study (paper default)
    seed: int = 0
    is_quick: bool = False  # (not `quick`: that name is the classmethod)

    @classmethod
    def full(cls, seed: int = 0) -> "Config":
        return cls(
            targets=tuple(float(x) for x in range(5, 14)), band_targets=(5.0, 9.0, 13.0),
            eta_values=(25, 50, 100, 200, 400), eta_targets=(5.0, 9.0, 13.0), mc_runs=20_000,
            perf_target=11.0, perf_versions=(3, 4, 5, 6, 8), perf_versions_optimal=5,
            perf_clusters=(4, 8, 16, 32), perf_clusters_optimal=16,
            sensitivity_targets=(7.0, 9.0, 11.0, 13.0), seed=seed,
        )

    @classmethod
    def quick(cls, seed: int = 0) -> "Config":
        return cls(
            targets=(9.0, 11.0, 13.0), band_targets=(9.0, 11.0, 13.0),
            eta_values=(50, 200), eta_targets=(11.0,), mc_runs=4_000,
            perf_target=13.0, perf_versions=(3, 4), perf_versions_optimal=4,
            perf_clusters=(4, 8), perf_clusters_optimal=8,
            sensitivity_targets=(15.0,), seed=seed, is_quick=True,
        )


__all__ = ["Config", "METHODS", "NETWORKS", "VERSIONS", "PAPER_SAVING"]
