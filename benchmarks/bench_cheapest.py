"""depl against a *proven* optimum on random instances outside the test set (not CI).

tests/planners/test_cheapest.py checks 54 fixed `random_instance` seeds in CI;
this draws more (by default seeds 20000–20199: 1–3 clusters with β, 1–3
datasets of very different sizes, the data law on and off, 2–3 versions, the
increments or the level law, ≤ 8 epochs, η = 40, as the test) and prints,
per instance, depl's cost over optimal's and whether optimal proved it, then
the distribution of the ratios and every instance above 1.01×.

Run:  PYTHONPATH=src .venv/bin/python benchmarks/bench_cheapest.py [--first-seed 20000] [--n 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from random_scenarios import random_instance  # noqa: E402

from depl.loss import loss_model_for  # noqa: E402
from depl.planners import Infeasible, Options, make_plan  # noqa: E402


def planned(s, method, options):
    try:
        return make_plan(s, method, options)
    except Infeasible:
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first-seed", type=int, default=20_000)
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    options = Options(eta=40, time_limit=120)
    ratios, misses, unproven, disagree, cpu = [], [], [], [], {"depl": 0.0, "optimal": 0.0}
    print(f"{'seed':>6} {'law':>10} {'depl/opt':>9} proven")
    for seed in range(args.first_seed, args.first_seed + args.n):
        s = random_instance(seed, max_epochs=8)
        plans = {}
        for method in ("depl", "optimal"):
            t0 = time.process_time()
            plans[method] = planned(s, method, options)
            cpu[method] += time.process_time() - t0
        depl, opt = plans["depl"], plans["optimal"]
        law = type(loss_model_for(s)).__name__.removesuffix("Model")
        if depl is None or opt is None:
            if (depl is None) != (opt is None):
                disagree.append(seed)
            print(f"{seed:>6} {law:>10} {'infeasible' if depl is None and opt is None else 'DISAGREE':>9}", flush=True)
            continue
        r = depl.cost / opt.cost
        ratios.append(r)
        if r > 1.01:
            misses.append((seed, law, r))
        if not opt.optimal_proven:
            unproven.append(seed)
        print(f"{seed:>6} {law:>10} {r:>9.5f} {opt.optimal_proven}", flush=True)
    a = np.array(ratios)
    print(f"\n{a.size} feasible of {args.n}; depl / proven optimum: median {np.median(a):.5f}, "
          f"p90 {np.quantile(a, 0.9):.5f}, max {a.max():.5f}; above 1.001×: {(a > 1.001).sum()}, "
          f"above 1.01×: {len(misses)}")
    print(f"optimal not proven: {unproven or 'none'}; feasibility disagrees: {disagree or 'none'}; "
          f"CPU depl {cpu['depl']:.1f} s, optimal {cpu['optimal']:.1f} s")
    for seed, law, r in misses:
        print(f"   miss: seed {seed} ({law} law) {r:.4f}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
