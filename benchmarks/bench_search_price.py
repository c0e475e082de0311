"""The certified search's price, by Monte Carlo: the rule of depl 0.1 (α shared equally over the candidates fixed in
advance, the cheapest tried first, no candidate proposed from the runs) against today's (α halving in the order the
search tries the candidates, that order weighing `--uses`, a cheaper candidate priced out once its runs cost more
than it saves, up to three candidates proposed from the runs with a quarter of α), side by side on the same seeds.

Landscapes (true P(ℓ(K) ≤ ℓmax) of each candidate, its cost, the law's guess):

* "law right": six candidates modelled on a 6-class MLP task on edge and cloud (costs 3919.2 … 7000; the cheapest
  valid at 0.94, the next at 0.96, the rest near 1; the law guesses 0.97–0.998);
* "law optimistic": the same costs, every candidate at 0.85–0.905 where the law guesses 0.97; a candidate proposed
  with the runs' margin meets ℓmax with probability 0.975 and costs twice the dearest;
* "adversarial proposals": four candidates below ω, and every proposal just below ω (0.89), cheaper than all, with
  a guess of 0.99 — what a proposal rule could do worst.

Each row: P(wrong) (the returned plan below ω) with its one-sided 95 % Clopper–Pearson upper bound (≤ α promised),
the share certified, the mean seeds drawn, the runs' cost (Σ runs × cost), the returned plan's mean cost, and the
total (runs' cost + uses × plan cost).

    PYTHONPATH=src python benchmarks/bench_search_price.py [--reps 400] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depl.certificate.search import Spending, simulate, value_shares  # noqa: E402

OMEGA, ALPHA, MAX_RUNS, BATCH = 0.9, 0.05, 500, 32
COSTS = [3919.2, 4047.3, 5077.4, 5300.0, 6100.0, 7000.0]
LANDSCAPES = {
    "law right": ([0.94, 0.96, 0.995, 0.995, 0.998, 0.999], [0.97, 0.975, 0.99, 0.99, 0.995, 0.998], COSTS),
    "law optimistic": ([0.85, 0.86, 0.87, 0.88, 0.89, 0.905], [0.97] * 6, COSTS),
    "adversarial proposals": ([0.86, 0.87, 0.88, 0.88], [0.99] * 4, [1.0, 2.0, 3.0, 4.0]),
}


def with_margin(s, rng):
    """A proposal planned with the margin the runs showed: meets ℓmax with probability 0.975, twice the cost."""
    return 0.975, 2 * max(a.cost for a in s.arms), 0.975


def adversary(s, rng):
    """The worst a proposal rule could do: just below ω, cheaper than every candidate, the law guessing 0.99."""
    return 0.89, -1.0 - s.proposed, 0.99


def row(name: str, rule: str, uses: float, reps: int, seed: int) -> str:
    ps, guesses, costs = LANDSCAPES[name]
    propose = adversary if name == "adversarial proposals" else with_margin
    if rule == "0.1":
        r = simulate(ps, OMEGA, ALPHA, reps=reps, max_runs=MAX_RUNS, batch=BATCH, costs=costs, seed=seed)
    else:
        shares = value_shares(costs, guesses, OMEGA, ALPHA * 0.75, uses, MAX_RUNS)
        r = simulate(ps, OMEGA, ALPHA, reps=reps, max_runs=MAX_RUNS, batch=BATCH, costs=costs, uses=uses,
                     guesses=guesses, shares=shares, spending=Spending(0.75), propose=propose, proposals=3, seed=seed)
    total = r.mean_runs_cost + uses * r.mean_plan_cost if r.certified else float("nan")
    return (f"| {name} | {rule} | {uses:g} | {r.p_wrong:.3f} [≤ {r.wrong_upper:.3f}] | {r.certified / reps:.2f} | "
            f"{r.mean_seeds:.0f} | {r.mean_runs_cost:.4g} | {r.mean_plan_cost:.1f} | {total:.4g} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="one landscape, 20 searches: the script runs")
    a = ap.parse_args(argv)
    reps = 20 if a.quick else a.reps
    names = ["law right"] if a.quick else list(LANDSCAPES)
    print(f"ω = {OMEGA:g}, α = {ALPHA:g}, {reps} searches per row, batches of {BATCH} seeds, at most {MAX_RUNS} "
          "runs per candidate; the same seeds for both rules of a row pair\n")
    print("| landscape | rule | uses | P(wrong) [≤ 95 % upper] | certified | seeds | runs' cost | plan cost | "
          "total |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for i, name in enumerate(names):
        for uses in (100, 1e6):
            for rule in ("0.1", "today"):
                print(row(name, rule, uses, reps, seed=100 * i + (uses > 1000)), flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
