"""Dataset choice: the paper's stage-1 proxy (eq. 7) against depl's cost ranking (eq. 2), vs the proven optimum.

On random instances that are not in the repo (tests/random_scenarios.py:
1–3 clusters with 1–3 nodes and transfer costs β, 2–4 datasets with the data
law, 2–3 versions with Student-t or normal switch jumps, ω 0.9–0.99) it plans
each with depl under the paper's stage 1 (`dataset_rule="paper"`, first
feasible choice), under depl's previous rule (eq. 7, up to 3 choices within
1.5× of the first) and under `"cost"` (the default), and with `optimal`, and prints cost / optimal per instance and in summary
(median, worst, how many above 1.01×), with optimal's run time and whether
it proved optimality.

Run:  PYTHONPATH=src .venv/bin/python benchmarks/bench_datasets.py [--n 20] [--time-limit 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from random_scenarios import random_scenario  # noqa: E402

from depl.planners import Infeasible, Options, make_plan  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=500)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--eta", type=int, default=100)
    args = ap.parse_args()
    # The paper's stage 1 (first feasible choice by eq. 7), depl before this change
    # (eq. 7, up to 3 choices within 1.5× of the first), depl now (eq. 2, the defaults).
    rules = {"paper": Options(eta=args.eta, dataset_rule="paper", dataset_candidates=1),
             "paper3": Options(eta=args.eta, dataset_rule="paper", dataset_candidates=3, dataset_slack=1.5),
             "cost": Options(eta=args.eta)}
    ratios: dict[str, list[float]] = {rule: [] for rule in rules}
    opt_times, proven = [], 0
    print(f"{'seed':>5} {'N×D×M':>7} {'paper/opt':>10} {'paper3/opt':>10} {'cost/opt':>9} {'optimal s':>9} proven")
    for seed in range(args.first_seed, args.first_seed + args.n):
        rng = np.random.default_rng(seed)
        shape = (int(rng.integers(1, 4)), int(rng.integers(2, 5)), int(rng.integers(2, 4)))
        s = random_scenario(seed, n_clusters=shape[0], n_datasets=shape[1], n_models=shape[2])
        try:
            costs = {rule: make_plan(s, "depl", opts).cost for rule, opts in rules.items()}
        except Infeasible:
            print(f"{seed:>5} {'×'.join(map(str, shape)):>7}  infeasible")
            continue
        t0 = time.perf_counter()
        opt = make_plan(s, "optimal", Options(eta=args.eta, time_limit=args.time_limit))
        dt = time.perf_counter() - t0
        opt_times.append(dt)
        proven += opt.optimal_proven
        for rule in ratios:
            ratios[rule].append(costs[rule] / opt.cost)
        print(f"{seed:>5} {'×'.join(map(str, shape)):>7} {costs['paper'] / opt.cost:>10.4f} "
              f"{costs['paper3'] / opt.cost:>10.4f} {costs['cost'] / opt.cost:>9.4f} {dt:>9.1f} {opt.optimal_proven}",
              flush=True)
    n = len(opt_times)
    print(f"\n{n} feasible instances; optimal proven on {proven}, median {statistics.median(opt_times):.1f} s, "
          f"max {max(opt_times):.1f} s")
    for rule, r in ratios.items():
        print(f"depl {rule:<6}: cost/optimal median {statistics.median(r):.4f}, worst {max(r):.4f}, "
              f"above 1.01× on {sum(x > 1.01 for x in r)} of {n}")


if __name__ == "__main__":
    main()
