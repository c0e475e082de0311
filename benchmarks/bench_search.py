"""The certified search (`depl plan --certify`, depl.certificate.search) by Monte Carlo on adversarial landscapes.

Each landscape is a list of candidates, cheapest first, with true success probabilities P(ℓ(K) ≤ ℓmax): the
cheapest ones just below ω (ω − 0.02: never refuted within the budget, the likeliest to be certified wrongly),
some exactly at ω, one well above.  Each row runs the search `--reps` times (batches of 8 seeds, at most
`--max-runs` runs per candidate, α = 0.05) and reports

* P(wrong): the share of searches whose returned candidate has p < ω, with its one-sided 95 % Clopper–Pearson
  upper bound — the certificate promises ≤ α;
* certified: the share that returned a candidate; good: the share that returned the one well above ω;
* seeds and runs: the seeds drawn and the runs counted over all candidates, per search (mean).

Weights `equal` (α/n each) and `cheaper` (∝ 1/(i + 1)); outcomes of one seed independent across candidates or
nested (one uniform per seed: as prefixes of one training run are).

    PYTHONPATH=src python benchmarks/bench_search.py [--reps 1000] [--max-runs 300] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depl.certificate.search import simulate, weights  # noqa: E402

LANDSCAPES = {
    "3 at ω−0.02, 2 at ω, 1 at 0.97": (0.9, [0.88, 0.88, 0.88, 0.9, 0.9, 0.97]),
    "6 at ω−0.02, 1 at ω, 1 at 0.97": (0.9, [0.88] * 6 + [0.9, 0.97]),
    "4 at ω−0.02 only": (0.9, [0.88] * 4),
    "ω 0.8: 3 at 0.78, 2 at 0.8, 1 at 0.9": (0.8, [0.78, 0.78, 0.78, 0.8, 0.8, 0.9]),
    "the cheapest at 0.99, 3 more at 0.99–1": (0.9, [0.99, 0.993, 1.0, 0.998]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--max-runs", type=int, default=300)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="one landscape, 50 searches: the script runs")
    ap.add_argument("--allocation", choices=("focus", "all", "both"), default="focus",
                    help="which candidates in the race count each batch (depl.certificate.search.ALLOCATIONS)")
    a = ap.parse_args(argv)
    reps = 50 if a.quick else a.reps
    cases = list(LANDSCAPES.items())[:1] if a.quick else list(LANDSCAPES.items())
    print(f"α = {a.alpha:g}, {reps} searches per row, batches of 8 seeds, at most {a.max_runs} runs per candidate\n")
    print("| landscape | ω | allocation | weights | seed outcomes | P(wrong) [≤ 95 % upper] | certified | good | seeds "
          "| runs |")
    print("|---|---:|---|---|---|---|---:|---:|---:|---:|")
    allocations = ("focus", "all") if a.allocation == "both" else (a.allocation,)
    t0 = time.perf_counter()
    for i, (name, (omega, ps)) in enumerate(cases):
        good = next((j for j in range(len(ps)) if ps[j] >= omega + 0.05), None)  # the cheapest well above ω
        rows = [(x, w, c) for x in allocations for w in ("equal", "cheaper") for c in (False, True)]
        for alloc, rule, correlated in rows:
            r = simulate(ps, omega, a.alpha, reps=reps, max_runs=a.max_runs, batch=8, allocation=alloc,
                         shares=weights(len(ps), rule), correlated=correlated, seed=1000 * i + 2 * correlated)
            print(f"| {name} | {omega:g} | {alloc} | {rule} | {'nested' if correlated else 'independent'} | "
                  f"{r.p_wrong:.3f} [≤ {r.wrong_upper:.3f}] | {r.certified / reps:.2f} | "
                  f"{'—' if good is None else format(r.returned[good] / reps, '.2f')} | {r.mean_seeds:.0f} | "
                  f"{r.mean_runs:.0f} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
