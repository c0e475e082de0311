"""Experiments: reproduce the paper's Section VI-B evaluation (Figs. 5–9) and measure the planners.

`run(config)` plans both built-in paper scenarios over a sweep of the target
99th percentile with the three methods, checks every plan by Monte Carlo,
measures DepL against η and the planners' solve time against K, |M|, |N|
and η, and re-runs the comparison on clearly labelled *variants* of the
scenario (a sensitivity study, not the reproduction).  It returns finished
`Results`; `depl.report` draws and writes them.

Modules: `config` (what to run), `variants` (scenarios derived from the
built-in ones), `results` (the records), `runner` (planning and Monte
Carlo), `findings` (the paper's claims checked on the results).
"""

from .config import METHODS, NETWORKS, PAPER_SAVING, VERSIONS, Config
from .findings import Finding, findings, gap_to_optimal, growth_exponent, perf_series, saving_over_best_exp
from .results import EtaPoint, Step, Outcome, PerfPoint, Results, SingleVersion
from .runner import jobs, mc_seed, per_version, plan_and_check, run, single_version_rows
from .variants import VARIANTS, with_extra_clusters, with_extra_versions, with_loss_target

__all__ = ["Config", "METHODS", "NETWORKS", "VERSIONS", "PAPER_SAVING", "Finding", "findings", "gap_to_optimal",
           "growth_exponent", "perf_series", "saving_over_best_exp", "EtaPoint", "Step", "Outcome", "PerfPoint",
           "Results", "SingleVersion", "jobs", "mc_seed", "per_version", "plan_and_check", "run",
           "single_version_rows", "VARIANTS", "with_extra_clusters", "with_extra_versions", "with_loss_target"]
