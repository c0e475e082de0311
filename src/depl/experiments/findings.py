"""The paper's claims checked on finished `Results` (reported, never assumed), and derived numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import METHODS, PAPER_SAVING, VERSIONS
from .results import Outcome, Results


@dataclass(frozen=True)
class Finding:
    network: str
    claim: str
    holds: str  # "holds", "partly", "does not hold"
    detail: str


def _verdict(n: int, of: int) -> str:
    return "holds" if of and n == of else ("does not hold" if n == 0 else "partly")


def _share(o: Outcome, version: str) -> float:
    return o.epochs_per_version.get(version, 0) / o.K if o.feasible and o.K else math.nan


def findings(r: Results, network: str) -> list[Finding]:
    cfg = r.config
    ts = [t for t in cfg.targets if all(r.outcome(network, t, m).feasible for m in METHODS)]
    out: list[Finding] = []
    if not ts:
        return out
    loose, tight = max(ts), min(ts)

    def used(t, m):
        return r.outcome(network, t, m).versions_used

    only_int = [m for m in ("optimal", "depl") if used(loose, m) == ["intermediate"]]
    out.append(Finding(network, f"loose target (ℓmax = {loose:g}): optimal and depl use only \"intermediate\"",
                       _verdict(len(only_int), 2),
                       "; ".join(f"{m}: {', '.join(used(loose, m))}" for m in ("optimal", "depl"))))
    all3 = [m for m in ("optimal", "depl") if len(used(tight, m)) == len(VERSIONS)]
    out.append(Finding(network, f"tight target (ℓmax = {tight:g}): optimal and depl use all three versions",
                       _verdict(len(all3), 2),
                       "; ".join(f"{m}: {', '.join(used(tight, m))}" for m in ("optimal", "depl"))))
    lean = [t for t in ts if _share(r.outcome(network, t, "best-exp"), "fast-unsteady")
            > max(_share(r.outcome(network, t, m), "fast-unsteady") for m in ("optimal", "depl")) + 1e-12]
    shares = ", ".join(f"{t:g}: {_share(r.outcome(network, t, 'best-exp'), 'fast-unsteady'):.0%} vs "
                       f"{_share(r.outcome(network, t, 'optimal'), 'fast-unsteady'):.0%}" for t in ts)
    out.append(Finding(network, "best-exp leans on \"fast-unsteady\" more than optimal and depl",
                       _verdict(len(lean), len(ts)),
                       f"more at {len(lean)} of {len(ts)} targets (share of fast-unsteady epochs, best-exp vs "
                       f"optimal, per ℓmax: {shares})"))
    more = [t for t in ts if r.outcome(network, t, "best-exp").K > r.outcome(network, t, "depl").K]
    out.append(Finding(network, "best-exp runs more epochs than depl", _verdict(len(more), len(ts)),
                       f"more at {len(more)} of {len(ts)} targets (K per ℓmax, best-exp/depl: "
                       + ", ".join(f"{t:g}: {r.outcome(network, t, 'best-exp').K}/{r.outcome(network, t, 'depl').K}"
                                   for t in ts) + ")"))
    saving = [saving_over_best_exp(r, network, t) for t in ts]
    big = [s for s in saving if s > PAPER_SAVING]
    out.append(Finding(network, "depl saves over 27% of best-exp's cost", _verdict(len(big), len(ts)),
                       f"saving above 27% at {len(big)} of {len(ts)} targets; largest {max(saving):.2%}"))
    bt = [t for t in cfg.band_targets if t in ts]
    wider = [t for t in bt if r.outcome(network, t, "best-exp").band_width
             > r.outcome(network, t, "depl").band_width * (1 + 1e-9)]
    out.append(Finding(network, "best-exp's 1st–99th percentile band is wider (Fig. 9)", _verdict(len(wider), len(bt)),
                       f"wider at {len(wider)} of {len(bt)} band targets (width of ℓ(K), best-exp/depl: "
                       + ", ".join(f"{t:g}: {r.outcome(network, t, 'best-exp').band_width:.3f}/"
                                   f"{r.outcome(network, t, 'depl').band_width:.3f}" for t in bt) + ")"))
    return out


def saving_over_best_exp(r: Results, network: str, target: float, table: str = "sweep") -> float:
    """(cost of best-exp − cost of depl) / cost of best-exp."""
    get = (lambda m: r.sweep[(network, target, m)]) if table == "sweep" else (lambda m: r.sensitivity[(network, target, m)])
    b, d = get("best-exp"), get("depl")
    return (b.cost - d.cost) / b.cost if b.feasible and d.feasible else math.nan


def gap_to_optimal(r: Results, network: str, target: float, table: str = "sweep") -> float:
    """(cost of depl − cost of optimal) / cost of optimal."""
    get = (lambda m: r.sweep[(network, target, m)]) if table == "sweep" else (lambda m: r.sensitivity[(network, target, m)])
    o, d = get("optimal"), get("depl")
    return (d.cost - o.cost) / o.cost if o.feasible and d.feasible else math.nan


def growth_exponent(x, y) -> float:
    """p in y ∝ x^p, by least squares on log–log (numpy.polyfit)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    if ok.sum() < 2 or np.ptp(np.log(x[ok])) == 0:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def perf_series(r: Results) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(axis, method) -> [(size, seconds)] sorted by size; K from the AlexNet sweep, η from the η study."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    net = r.config.networks[0]
    for m in ("depl", "optimal"):
        pts = {}
        for t in r.config.targets:
            o = r.sweep.get((net, t, m))
            if o is not None and o.feasible:
                pts[o.K] = min(pts.get(o.K, math.inf), o.solve_seconds)
        series[("K", m)] = sorted(pts.items())
    for p in r.perf:
        series.setdefault((p.axis, p.method), []).append((p.value, p.seconds))
    eta_t = r.config.eta_targets[len(r.config.eta_targets) // 2] if r.config.eta_targets else None
    series[("η", "depl")] = sorted((e.eta, e.solve_seconds) for e in r.eta if e.scenario == net and e.target == eta_t)
    return {k: sorted(v) for k, v in series.items()}


__all__ = ["Finding", "findings", "saving_over_best_exp", "gap_to_optimal", "growth_exponent", "perf_series"]
