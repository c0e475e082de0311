"""What `depl reproduce` runs: the networks, methods, targets and sample sizes.

>>> cfg = Config.quick(seed=1)
>>> cfg.targets
(9.0, 11.0, 13.0)
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("optimal", "depl", "best-exp")  # the paper's three, compared under eq. (2) as printed
# The two readings of the paper's best-exp (docs/planner.md): SPEC's cost-minimising planner against a
# tightened mean target, and the paper's words (versions for the lowest expected loss, cost-blind).
READINGS = ("best-exp", "best-exp-loss")
COST_MODELS = ("per-epoch", "resource-time")  # eq. (2) as printed; κ·x·T(k) per epoch (a cloud bill)
COMBINATIONS = tuple((b, c) for b in READINGS for c in COST_MODELS)
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
    map_grid: str = "medium"  # depl.experiments.map.GRIDS, or "none"
    networks: tuple[str, ...] = NETWORKS
    eta: int = 200  # DepL's η everywhere but the η study (paper default)
    seed: int = 0
    is_quick: bool = False  # (not `quick`: that name is the classmethod)

    @classmethod
    def full(cls, seed: int = 0, map_grid: str = "medium") -> "Config":
        return cls(
            targets=tuple(float(x) for x in range(5, 14)), band_targets=(5.0, 9.0, 13.0),
            eta_values=(25, 50, 100, 200, 400), eta_targets=(5.0, 9.0, 13.0), mc_runs=20_000,
            perf_target=11.0, perf_versions=(3, 4, 5, 6, 8), perf_versions_optimal=5,
            perf_clusters=(4, 8, 16, 32), perf_clusters_optimal=16,
            sensitivity_targets=(7.0, 9.0, 11.0, 13.0), seed=seed, map_grid=map_grid,
        )

    @classmethod
    def quick(cls, seed: int = 0, map_grid: str = "tiny") -> "Config":
        return cls(
            targets=(9.0, 11.0, 13.0), band_targets=(9.0, 11.0, 13.0),
            eta_values=(50, 200), eta_targets=(11.0,), mc_runs=4_000,
            perf_target=13.0, perf_versions=(3, 4), perf_versions_optimal=4,
            perf_clusters=(4, 8), perf_clusters_optimal=8,
            sensitivity_targets=(15.0,), seed=seed, is_quick=True, map_grid=map_grid,
        )


def sweep_methods(cost_model: str) -> tuple[str, ...]:
    """The methods planned at every target under `cost_model`: the paper's three under eq. (2) as
    printed, and DepL against both readings of best-exp under each cost model."""
    base = METHODS if cost_model == COST_MODELS[0] else ("depl",)
    return base + tuple(m for m in READINGS if m not in base)


__all__ = ["Config", "METHODS", "READINGS", "COST_MODELS", "COMBINATIONS", "NETWORKS", "VERSIONS", "PAPER_SAVING",
           "sweep_methods"]
