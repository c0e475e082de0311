"""The closed loop after selection: calibration draw → the planner's fixed sequence at ω′ = ω + D → the closed loop
spending δ = D, on landscapes whose truth is known.  P(final coverage < ω) must be ≤ α.

The landscape is built as benchmarks/bench_selection.py builds its own, around the level the planner certifies: one
schedule's prefixes K = 1..L (cost grows with K), the true P(ℓ(K) ≤ ℓmax) = p_K far below for short plans, then
rising evenly (25 lengths) from ω′ − 0.05 to 0.999; the law as fitted ranks lengths by K.  A run has one latent
u ~ U(0, 1) (a good run is good at every epoch): its calibration score at every K is bench_selection's, and its loss
trajectory ℓ(k) = ℓmax + s·(Φ⁻¹(u) − Φ⁻¹(p_k)), so that P(ℓ(k) ≤ ℓmax) = p_k exactly.  The closed loop observes
the validation loss v_k = ℓ(k) − g_k, g_k ~ N(0, σ²) independent, and stops at the first epoch k < K where a stop's
P(test loss > ℓmax) ≤ δ (keeping ℓ(k)):

* **measured gap** (the default rule with `--gap-from`): the gap measured on N fresh runs of the plan returned
  (depl.gap.MeasuredGap: each run's largest g_k over its epochs with v_k ≤ ℓmax; a stop needs v_k < ℓmax − t,
  t = the maxima's conformal (1 − δ) bound) — a guarantee on average over the N gap runs' draw, so the coverage
  reported is averaged over `--gap-draws` of them;
* **modelled gap**: the Gaussian with σ known (a stop needs v_k ≤ ℓmax − σ·z₁₋δ).

Given the plan (K) and the stop's threshold t, the closed loop's coverage is exact: by monotonicity a stop fails
only at an epoch with ℓ(k) > ℓmax, which precedes every epoch below ℓmax, so

    coverage = p_K − ∫_{z ≤ Φ⁻¹(p_K)} φ(z) [1 − Π_{k<K, c_k<z} Φ((s(z − c_k) + t)/σ)] dz,   c_k = Φ⁻¹(p_k).

Rules compared, per calibration draw (n runs per profiled experiment, E experiments):

* **slack D** (`depl plan --slack D`): the fixed sequence at ω′ = ω + D picks the cheapest certified K; δ = D;
* **bound after selection** (the rule it replaces): the fixed sequence at ω picks K; δ = max(0, L − ω), L the
  one-sided Clopper–Pearson lower bound at α/E from the same runs of the chosen schedule — read after the choice;
* **D not certified** (a control: the test can fail): the plan certified at ω, δ = D spent anyway.

    PYTHONPATH=src python scripts/adaptive_selection.py --reps 500   # the table in docs/adaptive.md (35 min, loaded 2 cores)
    PYTHONPATH=src python scripts/adaptive_selection.py --quick      # two cells, 300 draws
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import stats

from depl.certificate import clopper_pearson_lower, clopper_pearson_upper
from depl.gap import MeasuredGap
from depl.loss.calibrated import CalibratedModel

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_selection", ROOT / "benchmarks" / "bench_selection.py")
bench = sys.modules.setdefault("bench_selection", importlib.util.module_from_spec(_spec))
if not hasattr(bench, "FittedStandIn"):
    _spec.loader.exec_module(bench)

ALPHA, TARGET = 0.05, 1.0
SCALE, SIGMA = 0.1, 0.05          # s: loss per unit of Φ⁻¹(u); σ: the validation–test gap's sd
GAP_RUNS = 200                    # N: the runs the gap is measured on (docs/adaptive-store: 189–200 seeds)
# the cells of docs/adaptive.md's coverage table: (ω, runs per experiment, experiments)
# and, where certification is tight (the plan returned close to its level), 1,000 runs
CELLS = [(0.9, 64, 3), (0.95, 64, 3), (0.9, 52, 1), (0.95, 52, 1), (0.9, 144, 1), (0.9, 1000, 1), (0.95, 1000, 1)]
SLACKS = (0.01, 0.02)


def landscape(omega_certified: float, steps: int = 25, lengths: int = 32) -> tuple[np.ndarray, dict[int, float]]:
    """(true P(ℓ(K) ≤ ℓmax) per K = 1..lengths, the fitted law's prediction per K): short plans far below, then
    `steps` lengths rising evenly from ω′ − 0.05 to 0.999 — many schedules just below ω′, so that the one certified
    on lucky runs is the one whose runs overstate it."""
    w = omega_certified
    p = np.empty(lengths)
    first = lengths - steps
    p[:first] = np.linspace(0.3, w - 0.08, first)
    p[first:] = np.linspace(w - 0.05, 0.999, steps)
    return p, {K: 0.5 + 0.49 * K / lengths for K in range(1, lengths + 1)}


def draw(p: np.ndarray, predicted: dict[int, float], n: int, experiments: int, rng) -> list:
    """One calibration draw: per experiment, n runs' scores at every K (bench_selection's, one latent u per run)."""
    out = []
    for _ in range(experiments):
        v = rng.random(n)
        rows = [np.sort(np.clip(v * predicted[K] / p[K - 1], 0, 1)) for K in range(1, p.size + 1)]
        # a run meets ℓmax at K when v ≤ p_K: its loss TARGET·v/p_K (bench_selection's rule; the certificate counts it)
        out.append(bench._Experiment(("a",) * p.size, 1.0, rows, TARGET * v[:, None] / p[None, :]))
    return out


def picked(runs: list, predicted: dict[int, float], level: float, lengths: int) -> tuple[int, int, int] | None:
    """(K, runs, met) of the cheapest K the fixed sequence certifies at `level` on these runs; None: none."""
    law = CalibratedModel(bench.FittedStandIn(predicted), runs[0].epoch_scores[-1], experiments=runs, alpha=ALPHA,
                          target=(TARGET, level))
    for K in range(1, lengths + 1):
        ok, n, met = law.certificate(("a",) * K, 1.0)
        if ok:
            return K, n, met
    return None


def _grid(upper: float) -> tuple[np.ndarray, np.ndarray]:
    z = np.linspace(-8.0, upper, 4001)
    return z, stats.norm.pdf(z)


def coverage(p: np.ndarray, K: int, t: float) -> float:
    """The closed loop's exact coverage for the K-prefix stopping at v_k < ℓmax − t (the module's formula)."""
    if K <= 1 or not np.isfinite(t):
        return float(p[K - 1])
    c = stats.norm.ppf(p[:K])
    z, w = _grid(float(c[-1]))
    keep = np.ones_like(z)
    for ck in c[:-1]:
        harmful = z > ck
        keep = np.where(harmful, keep * stats.norm.cdf((SCALE * (z - ck) + t) / SIGMA), keep)
    loss = np.trapezoid(w * (1.0 - keep), z)
    return float(p[K - 1] - loss)


def gap_thresholds(p: np.ndarray, K: int, delta: float, draws: int, rng) -> np.ndarray:
    """t of `draws` gap measurements, each on GAP_RUNS fresh runs of the K-prefix (depl.gap.MeasuredGap)."""
    c = stats.norm.ppf(p[:K])
    out = np.empty(draws)
    for i in range(draws):
        z = stats.norm.ppf(rng.random(GAP_RUNS))[:, None]
        test = TARGET + SCALE * (z - c[None, :])
        g = SIGMA * rng.standard_normal(test.shape)
        val = test - g
        most = np.where(val <= TARGET, g, -np.inf).max(axis=1)
        out[i] = MeasuredGap(tuple(sorted(float(x) for x in most[np.isfinite(most)])), TARGET).threshold(delta)
    return out


@lru_cache(maxsize=None)
def measured_coverage(key: tuple, K: int, delta: float, draws: int, seed: int) -> float:
    """The coverage averaged over the gap runs' draws (the measured gap's guarantee is on that average)."""
    p = np.array(key)
    ts = gap_thresholds(p, K, delta, draws, np.random.default_rng([seed, K, int(delta * 1e6)]))
    return float(np.mean([coverage(p, K, t) for t in ts]))


def cell(omega: float, n: int, experiments: int, slack: float, reps: int, gap_draws: int, seed: int) -> dict:
    """P(final coverage < ω) over `reps` calibration draws, for the slack rule (measured and modelled gap) and the
    bound read after selection (modelled gap), with how often each certified a plan and spent slack."""
    high = omega + slack
    p, predicted = landscape(high)
    rng = np.random.default_rng([seed, n, experiments, int(omega * 1e4), int(slack * 1e4)])
    z = stats.norm.ppf(1 - slack)
    wrong = {"measured": 0, "modelled": 0, "after": 0, "given": 0}
    certified = {"slack": 0, "after": 0}
    spent_after, truth_below = [], 0
    for _ in range(reps):
        runs = draw(p, predicted, n, experiments, rng)
        got = picked(runs, predicted, high, p.size)
        if got is not None:
            K = got[0]
            certified["slack"] += 1
            wrong["measured"] += measured_coverage(tuple(p), K, slack, gap_draws, seed) < omega
            wrong["modelled"] += coverage(p, K, SIGMA * z) < omega
        # the rule it replaces: certified at ω, the slack read from the same runs after the choice
        p0, pred0 = landscape(omega)
        runs0 = draw(p0, pred0, n, experiments, rng)
        got0 = picked(runs0, pred0, omega, p0.size)
        if got0 is not None:
            K0, m, met = got0
            certified["after"] += 1
            lower = clopper_pearson_lower(met, m, ALPHA / experiments)
            truth_below += lower > p0[K0 - 1]
            d = max(0.0, lower - omega)
            spent_after.append(d)
            t = SIGMA * stats.norm.ppf(1 - d) if d > 0 else np.inf
            wrong["after"] += coverage(p0, K0, t) < omega
            wrong["given"] += coverage(p0, K0, SIGMA * z) < omega
    return {"omega": omega, "runs": n, "experiments": experiments, "slack": slack, "reps": reps,
            "wrong": wrong, "certified": certified, "mean_delta_after": float(np.mean(spent_after or [0.0])),
            "bound_above_truth": truth_below}


def _rate(k: int, n: int) -> str:
    return f"{k / n:.3f} [≤ {clopper_pearson_upper(k, n, 0.05):.3f}]" if n else "–"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="calibration draws per cell")
    ap.add_argument("--gap-draws", type=int, default=200, help="draws of the N gap runs the coverage is averaged over")
    ap.add_argument("--quick", action="store_true", help="two cells, 300 draws")
    ap.add_argument("--seed", type=int, default=20261128)
    a = ap.parse_args()
    cells = [(0.9, 64, 3, 0.02), (0.9, 1000, 1, 0.02)] if a.quick else \
        [(w, n, e, d) for (w, n, e) in CELLS for d in SLACKS]
    reps = 300 if a.quick else a.reps
    print(f"α = {ALPHA}; {reps} calibration draws per row; P(wrong) = P(the closed loop's coverage < ω), with its "
          f"one-sided 95% upper bound; s = {SCALE}, σ = {SIGMA}, N = {GAP_RUNS} gap runs")
    print("| ω | runs × experiments | D | slack D, measured gap: P(wrong) | modelled gap: P(wrong) | certified at ω + D "
          "| bound after selection: P(wrong) | its mean δ | P(L > true p) | certified at ω | D not certified: P(wrong) |")
    print("|---:|---:|---:|---|---|---:|---|---:|---:|---:|---|")
    bad = 0
    for w, n, e, d in cells:
        r = cell(w, n, e, d, reps, a.gap_draws, a.seed)
        cs, ca = r["certified"]["slack"], r["certified"]["after"]
        print(f"| {w:g} | {n} × {e} | {d:g} | {_rate(r['wrong']['measured'], reps)} | "
              f"{_rate(r['wrong']['modelled'], reps)} | {cs / reps:.2f} | {_rate(r['wrong']['after'], reps)} | "
              f"{r['mean_delta_after']:.4f} | {r['bound_above_truth'] / max(ca, 1):.3f} | {ca / reps:.2f} | "
              f"{_rate(r['wrong']['given'], reps)} |",
              flush=True)
        bad += clopper_pearson_lower(r["wrong"]["measured"], reps, 0.001) > ALPHA
    return 4 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
