"""Calibration rules compared on runs no law was fitted on: none, isotonic recalibration, split conformal.

    python scripts/calibration_compare.py STORE|LOGS [--scenario S] [--fit-seeds F] [--splits R]
        [--validation STORE --plan PLAN.json]

Each experiment's first F seeds fit every law (`depl fit`'s procedure, no
bootstrap); the others are never fitted on.  Their PIT scores (last epoch,
one per (experiment, seed)) are split R times at random into a calibration
half and a test half; each rule picks, on the calibration half, the law's
level for the ω-quantile, and the test half says how often ℓ(E) lies at or
below it.  Printed: a markdown table per law and ω — the mean test coverage
over the splits, its 10th percentile, and the mean level (a higher level is a
wider, costlier certificate).

With --validation (the store of `depl validate`) and its --plan: the plan's
schedule run for real on seeds never profiled.  Each rule is calibrated on all
the runs not fitted on, and its ω-quantile of the plan's ℓ(K) is judged on
the validation runs: coverage with a Clopper–Pearson 95% interval — a run
unlike the calibration runs (another schedule, another length), so a test of
the exchangeability the guarantee assumes.  docs/fitting-results.md quotes the output.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="a runs store of `depl profile`, or training logs (.csv/.parquet)")
    ap.add_argument("--scenario", default=None)
    ap.add_argument("--fit-seeds", type=int, default=12, help="seeds per experiment the laws are fitted on")
    ap.add_argument("--splits", type=int, default=400)
    ap.add_argument("--omega", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    ap.add_argument("--target-loss", type=float, default=0.5, help="for logs without --scenario (unused here)")
    ap.add_argument("--validation", default=None, help="a `depl validate` store of --plan's real runs")
    ap.add_argument("--plan", default=None)
    a = ap.parse_args(argv)

    from depl.fit.calibrate import LEVEL_RULES, pit_scores
    from depl.fit.logs import base_scenario, is_log_file, read_logs
    from depl.fit.report import fit_profile
    from depl.fit.runs import Profile, load_profile
    from depl.scenario import load_scenario
    from depl.store import Store

    if is_log_file(a.source):
        logs = read_logs(a.source)
        base, ref = base_scenario(logs, load_scenario(a.scenario) if a.scenario else None, target_loss=a.target_loss)
        prof = logs.profile(ref)
    else:
        st = Store(a.source, readonly=True)
        name = a.scenario or {r["spec"].get("scenario") for r in st.runs("profile")}.pop()
        base = load_scenario(name)
        prof = load_profile(st, base)
    fit = Profile(prof.scenario, [e.subset(np.arange(e.seeds.size) < a.fit_seeds) for e in prof.experiments])
    rest = Profile(prof.scenario, [e.subset(np.arange(e.seeds.size) >= a.fit_seeds) for e in prof.experiments])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit_profile(fit, base, bootstrap=0, calibration_seeds=0)
    rng = np.random.default_rng(0)
    print(f"source {a.source}: {len(prof.experiments)} experiments; laws fitted on {a.fit_seeds} seeds each; "
          f"{sum(e.seeds.size for e in rest.experiments)} other runs, split {a.splits}× into calibration/test halves\n")
    print("| law | ω | rule | mean test coverage | 10th pct | mean level |")
    print("|---|---|---|---|---|---|")
    for law, s in r.scenarios.items():
        u = pit_scores(s, rest).all
        for omega in a.omega:
            for rule, f in LEVEL_RULES.items():
                cov, lv = [], []
                for _ in range(a.splits):
                    perm = rng.permutation(u.size)
                    cal, test = np.sort(u[perm[: u.size // 2]]), u[perm[u.size // 2:]]
                    level = float(np.asarray(f(cal, omega)).ravel()[0])
                    cov.append(1.0 if level >= 1 else float(np.mean(test <= level)))
                    lv.append(level)
                print(f"| {law} | {omega:g} | {rule} | {np.mean(cov):.3f} | {np.quantile(cov, 0.1):.3f} | {np.mean(lv):.3f} |")
    if a.validation:
        validation(a, r, rest)
    return 0


def validation(a, r, rest) -> None:
    from depl.fit.calibrate import LEVEL_RULES, pit_scores
    from depl.loss import loss_model_for
    from depl.plan import Plan
    from scipy import stats
    from depl.store import Store

    plan = Plan.load(a.plan)
    st = Store(a.validation, readonly=True)
    runs = st.runs("plan")
    K = len(plan.epochs)
    final = np.array([v[K - 1] for v in st.losses(runs[0]["run_id"]).values() if len(v) >= K])
    print(f"\nplan {a.plan}: {'+'.join(f'{m}' for m in dict.fromkeys(plan.schedule))} × {K} epochs, "
          f"{final.size} real runs on seeds never profiled; calibrated on all {rest.experiments[0].seeds.size} "
          "other seeds of every experiment\n")
    print("| law | ω | rule | level | ω-quantile of ℓ(K) | coverage | Clopper–Pearson 95% |")
    print("|---|---|---|---|---|---|---|")
    for law, s in r.scenarios.items():
        u = pit_scores(s, rest).all
        d = loss_model_for(s).distribution(plan.schedule, s.phi(s.samples(plan.datasets)))
        for omega in a.omega:
            for rule, f in LEVEL_RULES.items():
                level = float(np.asarray(f(np.sort(u), omega)).ravel()[0])
                q = np.inf if level >= 1 else float(d.quantile(level))
                hits = int(np.sum(final <= q))
                lo, hi = stats.binomtest(hits, final.size).proportion_ci(0.95, method="exact")
                print(f"| {law} | {omega:g} | {rule} | {level:.3f} | {q:.4f} | {hits / final.size:.3f} | [{lo:.3f}, {hi:.3f}] |")


if __name__ == "__main__":
    sys.exit(main())
