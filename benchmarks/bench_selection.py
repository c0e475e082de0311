"""P(the plan returned meets ℓmax less often than ω) when a planner picks the cheapest certified schedule on the
same calibration runs: the confidence rule of a calibrated law (PAC rank, fixed sequence per profiled
experiment, Bonferroni over experiments: depl.loss.calibrated.CalibratedModel.certified_schedules) against the
marginal split-conformal count ⌈(n+1)ω⌉ it replaces.

Synthetic landscapes with exact coverages: per length K = 1..L (cost grows with K) the true P(ℓ(K) ≤ ℓmax) is
far below ω for short plans, ω − 0.03 for `cheap` lengths just before one at ω exactly, above ω for the
longest; the law as fitted ranks lengths by K.  Each calibration draw gives every run one latent uniform (a good
run is good at every length), so the runs of one experiment are correlated across K as real runs are.  The
truth is the landscape's, not the rule's: the check is independent of the code it checks.

    PYTHONPATH=src python benchmarks/bench_selection.py                 # the table in docs/certificate.md
    PYTHONPATH=src python benchmarks/bench_selection.py --reps 300 --quick
    PYTHONPATH=src python benchmarks/bench_selection.py --real docs/coverage-store --runs 30,52 --reps 1000

`--real STORE` resamples real trajectories instead: the 200 held-out runs of every plan of the coverage table
(docs/coverage-store), each plan's first K epochs a candidate (K = 1..its length, cost growing with K), each
run's PIT at every epoch under the law as fitted, and the truth the share of all 200 runs that met ℓmax at K;
a calibration draw is n of the 200 runs, without replacement.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from depl.certificate import conformal
from depl.certificate import clopper_pearson_lower, clopper_pearson_upper
from depl.loss.calibrated import CalibratedModel
from depl.scenario import Conditions

OMEGA, ALPHA, TARGET = 0.9, 0.05, 1.0


@dataclass
class _Dist:
    coverage: float

    def cdf(self, x):
        return self.coverage


class FittedStandIn:
    """A law as fitted that predicts each length's P(ℓ(K) ≤ ℓmax): all the fixed sequence reads of a law."""

    initial_loss, model_names = 2.0, ["a"]

    def __init__(self, predicted: dict[int, float]):
        self.predicted = predicted

    def distribution(self, schedule, phi=1.0, **kw):
        return _Dist(self.predicted[len(schedule)])


@dataclass
class _Experiment:
    """A calibration experiment as the law reads one (depl.scenario.CalibrationExperiment): its runs' PIT rows,
    their losses (runs × K; the certificate counts ℓ(K) ≤ ℓmax on them) and conditions (one setting here)."""

    schedule: tuple
    phi: float
    epoch_scores: list
    losses: np.ndarray
    label: str = "a"
    conditions: object = Conditions(nodes=1, source="synthetic", shares=[(0.0, 1.0)], epochs=1)


def landscape(lengths: int, cheap: int) -> tuple[np.ndarray, dict[int, float]]:
    """(true coverage per length 1..lengths, the fitted law's predicted coverage per length)."""
    p = np.empty(lengths)
    first = lengths - cheap - 3
    p[:first] = np.linspace(0.3, 0.8, first)
    p[first:first + cheap] = OMEGA - 0.03
    p[first + cheap] = OMEGA
    p[first + cheap + 1:] = [0.95, 0.99]
    return p, {K: 0.5 + 0.49 * K / lengths for K in range(1, lengths + 1)}


def picked(p: np.ndarray, predicted: dict[int, float], n: int, rng, alpha: float | None,
           experiments: int = 1) -> float:
    """The true coverage of the cheapest length certified on one draw of n runs per experiment (nan: none);
    `alpha` None: the marginal count."""
    runs = []
    for _ in range(experiments):
        v = rng.random(n)
        rows = [np.sort(np.clip(v * predicted[K] / p[K - 1], 0, 1)) for K in range(1, p.size + 1)]
        # a run meets ℓmax at K when v ≤ p_K: its loss TARGET·v/p_K (its PIT, v·F(ℓmax)/p_K, orders it alike)
        losses = TARGET * v[:, None] / p[None, :]
        runs.append(_Experiment(("a",) * p.size, 1.0, rows, losses))
    if alpha is None:
        ok = [max(conformal.level(e.epoch_scores[K - 1], OMEGA) for e in runs) <= predicted[K]
              for K in range(1, p.size + 1)]
    else:
        law = CalibratedModel(FittedStandIn(predicted), runs[0].epoch_scores[-1], experiments=runs, alpha=alpha,
                              target=(TARGET, OMEGA))
        ok = [law.certificate(("a",) * K, 1.0)[0] for K in range(1, p.size + 1)]
    ks = [K for K in range(1, p.size + 1) if ok[K - 1]]
    return float(p[ks[0] - 1]) if ks else float("nan")


def row(n: int, cheap: int, experiments: int, reps: int, seed: int) -> dict:
    p, predicted = landscape(cheap + 12, cheap)
    out = {"runs": n, "cheaper at ω−0.03": cheap, "experiments": experiments}
    for name, alpha in (("confidence rule", ALPHA), ("marginal count", None)):
        rng = np.random.default_rng(seed)
        got = np.array([picked(p, predicted, n, rng, alpha, experiments) for _ in range(reps)])
        wrong = int(np.sum(got < OMEGA))
        out[name] = (wrong, reps, clopper_pearson_upper(wrong, reps, 0.05), float(np.mean(np.isfinite(got))))
    return out


def real_cells(folder: str) -> list[dict]:
    """Per plan of a coverage store: its ω, ℓmax, the fitted law's P(ℓ(K) ≤ ℓmax) per K, every run's PIT per K
    (runs × K) and the share of the runs that met ℓmax per K (the truth)."""
    import json
    from pathlib import Path

    from depl.loss import loss_model_for
    from depl.plan import Plan
    from depl.store import Store

    root = Path(folder)
    table = json.loads((root / "coverage.json").read_text())
    st = Store(str(root / "runs.sqlite"), readonly=True)
    out = []
    for c in table["cells"]:
        if not c.get("plan_file") or not c.get("run_id"):
            continue   # a cell with no plan (infeasible at its ω)
        plan = Plan.load(root / "plans" / Path(c["plan_file"]).name)   # the store folder keeps its plans
        s = plan.scenario_object()
        law = loss_model_for(s, calibrated=False)
        phi = s.phi(s.samples(plan.datasets))
        schedule = [e.model for e in plan.epochs]
        runs = np.array([v for v in st.losses(c["run_id"]).values() if len(v) == len(schedule)])
        laws = [law.distribution(schedule[:K], phi) for K in range(1, len(schedule) + 1)]
        pit = np.stack([np.clip(d.cdf(runs[:, K]), 0, 1) for K, d in enumerate(laws)], axis=1)
        out.append({"key": c["key"], "omega": c["omega"], "target": c["target"], "losses": np.nan_to_num(runs, nan=np.inf),
                    "predicted": {K: float(d.cdf(c["target"])) for K, d in enumerate(laws, 1)}, "pit": pit,
                    "truth": np.mean(np.nan_to_num(runs, nan=np.inf) <= c["target"], axis=0)})
    return out


def picked_real(cell: dict, n: int, rng, alpha: float | None) -> float:
    """The true share meeting ℓmax of the shortest prefix certified on n of the plan's real runs (nan: none)."""
    pit, omega, predicted = cell["pit"], cell["omega"], cell["predicted"]
    chosen = rng.choice(pit.shape[0], size=n, replace=False)
    draw = pit[chosen]
    rows = [np.sort(draw[:, K]) for K in range(pit.shape[1])]
    Ks = range(1, pit.shape[1] + 1)
    if alpha is None:
        ok = [conformal.level(rows[K - 1], omega) <= predicted[K] for K in Ks]
    else:
        exp = _Experiment(("a",) * pit.shape[1], 1.0, rows, cell["losses"][chosen])
        law = CalibratedModel(FittedStandIn(predicted), rows[-1], experiments=[exp], alpha=alpha,
                              target=(cell["target"], omega))
        ok = [law.certificate(("a",) * K, 1.0)[0] for K in Ks]
    ks = [K for K in Ks if ok[K - 1]]
    return float(cell["truth"][ks[0] - 1]) if ks else float("nan")


def real_table(folder: str, sizes: list[int], reps: int, seed: int) -> None:
    cells = real_cells(folder)
    print(f"{len(cells)} plans of {folder}, {reps} draws each; P(wrong) = P(the returned prefix's true share < ω), "
          "pooled over the plans (where no prefix reaches ω, certifying any is wrong)")
    print("| runs | plans | confidence rule: P(wrong), mean | worst plan | certified | marginal count: P(wrong), "
          "mean | worst plan | certified |")
    print("|---:|---:|---:|---|---:|---:|---|---:|")
    for n in sizes:
        cells_n = [c for c in cells if c["pit"].shape[0] >= n]
        row = []
        for alpha in (ALPHA, None):
            rng = np.random.default_rng(seed)
            got = np.array([[picked_real(c, n, rng, alpha) for _ in range(reps)] for c in cells_n])
            per_plan = np.mean(got < np.array([c["omega"] for c in cells_n])[:, None], axis=1)
            worst = int(np.argmax(per_plan))
            row += [f"{per_plan.mean():.3f}", f"{per_plan[worst]:.3f} ({cells_n[worst]['key']})",
                    f"{np.mean(np.isfinite(got)):.2f}"]
        print(f"| {n} | {len(cells_n)} | " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="calibration draws per row")
    ap.add_argument("--quick", action="store_true", help="two rows only")
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--real", metavar="STORE", help="resample the real runs of a coverage store's plans instead")
    ap.add_argument("--runs", default="30,52", help="--real: calibration runs per draw, comma-separated")
    a = ap.parse_args()
    if a.real:
        real_table(a.real, [int(x) for x in a.runs.split(",")], a.reps, a.seed)
        return
    cases = [(40, 12, 1), (80, 30, 1)] if a.quick else [(30, 10, 1), (52, 20, 1), (80, 30, 1), (150, 60, 1),
                                                   (52, 20, 4), (150, 60, 4)]
    print(f"ω = {OMEGA}, α = {ALPHA}; {a.reps} calibration draws per row; P(wrong) = P(the returned plan's true "
          "coverage < ω), with its one-sided 95% upper bound; certified = P(some plan certified)")
    print("| runs | cheaper at ω−0.03 | experiments | confidence rule: P(wrong) [≤ upper] | certified "
          "| marginal count: P(wrong) [≤ upper] | certified |")
    print("|---:|---:|---:|---|---:|---|---:|")
    bad = []
    for n, cheap, experiments in cases:
        r = row(n, cheap, experiments, a.reps, a.seed)
        cells = []
        for name in ("confidence rule", "marginal count"):
            w, reps, up, cert = r[name]
            cells += [f"{w / reps:.3f} [≤ {up:.3f}]", f"{cert:.2f}"]
        print(f"| {n} | {cheap} | {experiments} | " + " | ".join(cells) + " |")
        w, reps = r["confidence rule"][:2]
        if clopper_pearson_lower(w, reps, 0.001) > ALPHA:
            bad.append((n, cheap, experiments))
    # what this benchmark checks: the confidence rule keeps P(wrong) ≤ α (refuted only at 99.9% confidence)
    print("confidence rule within α: yes" if not bad else f"confidence rule exceeds α at {bad}")
    raise SystemExit(4 if bad else 0)


if __name__ == "__main__":
    main()
