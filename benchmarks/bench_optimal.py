"""How long `optimal` takes to prove optimality: 4 clusters × 3 datasets × 4 versions.

Random instances (tests/random_scenarios.py, not in the repo) with transfer
costs β, nodes 1–3, the data law, Student-t/normal switch jumps, and targets
that need up to about 60 epochs.  Prints, per instance, the plan's epochs,
DepL's cost over the optimum, optimal's wall time (DepL's incumbent included),
whether it proved optimality within the limit, and its certified gap.

Run:  PYTHONPATH=src .venv/bin/python benchmarks/bench_optimal.py [--n 6] [--time-limit 600]
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

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from random_scenarios import random_scenario  # noqa: E402

from depl.planners import Infeasible, Options, make_plan  # noqa: E402
from depl.scenario import parse_scenario, scenario_dict  # noqa: E402
from depl.planners.optimal import DEFAULT_TIME_LIMIT  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT)
    args = ap.parse_args()
    times = []
    print(f"{'seed':>4} {'target':>6} {'K':>3} {'depl/opt':>8} {'depl s':>7} {'optimal s':>9} proven  gap")
    for seed in range(args.first_seed, args.first_seed + args.n):
        frac = 0.35 + 0.3 * ((seed * 7) % 10) / 10
        d = scenario_dict(random_scenario(seed, n_models=4, n_clusters=4, n_datasets=3, target_frac=frac))
        # Slower progress (A × 0.3–0.5) and twice the time, so plans need tens of epochs; K ≤ 60.
        for m in d["models"]:
            m["progress"]["A"] *= 0.3 + 0.2 * ((seed * 3) % 5) / 4
        d["target"]["deadline"] *= 2
        d["max_epochs"] = 60
        s = parse_scenario(d, f"random-{seed}")
        try:
            t0 = time.perf_counter()
            depl = make_plan(s, "depl")
            t_depl = time.perf_counter() - t0
            t0 = time.perf_counter()
            opt = make_plan(s, "optimal", Options(time_limit=args.time_limit))
            dt = time.perf_counter() - t0
        except Infeasible:
            print(f"{seed:>4} {frac:>6.2f}  infeasible")
            continue
        times.append(dt)
        gap = (opt.cost - opt.lower_bound) / opt.cost
        print(f"{seed:>4} {frac:>6.2f} {len(opt.epochs):>3} {depl.cost / opt.cost:>8.4f} {t_depl:>7.1f} {dt:>9.1f} "
              f"{str(opt.optimal_proven):>6} {gap:.2%}", flush=True)
    if times:
        print(f"\noptimal: median {statistics.median(times):.1f} s, max {max(times):.1f} s "
              f"(limit {args.time_limit:g} s)")


if __name__ == "__main__":
    main()
