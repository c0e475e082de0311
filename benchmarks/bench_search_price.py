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
  a guess of 0.99 — what a proposal rule could do worst;
* "law low on a valid candidate": the eight candidates of the committed search on mnist1d-small
  (docs/certificate-store/search/mnist1d-small-2/: costs 299.3 … 2075.4, the law's guesses as it recorded them):
  the cheapest below ω (0.88), the next valid but close to ω (0.94, 196 of 208 runs met ℓmax), the calibrated law's
  own plan valid (0.975) where its law guessed 0.928, the rest near 1.

Three rules: "0.1"; "today" (the rule above, its decisions reckoning with a horizon of `HORIZON` runs whatever the
cap, a candidate at the cap pausing the search); "floor" (today's, but half of the first candidates' α shared equally
and half by value-halving: a rule that bets less on the law's guesses, measured and not adopted).

`--nested`: a group of nested candidates (one run yields every prefix; cost = epochs), separate shares (today:
each an equal share, the cheapest first, the group training its longest candidate counting) against a fixed
sequence (the longest first at the group's whole α, a shorter one certified only once every longer one is, the group
training the candidate being tested): P(wrong), seed-epochs trained, the returned plan's epochs.

Each row: P(wrong) (the returned plan below ω) with its one-sided 95 % Clopper–Pearson upper bound (≤ α promised),
the share certified, the mean seeds drawn, the runs' cost (Σ runs × cost), the returned plan's mean cost, and the
total (runs' cost + uses × plan cost).

    PYTHONPATH=src python benchmarks/bench_search_price.py [--reps 400] [--quick] [--nested]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402

from depl.certificate.bounds import clopper_pearson_upper  # noqa: E402
from depl.certificate.search import DROP_BELOW, Search, Spending, p_certify, simulate, value_shares  # noqa: E402
from depl.certificate.sequential import Sequential, fewest_runs  # noqa: E402
from depl.workflows.search import HORIZON  # noqa: E402

OMEGA, ALPHA, MAX_RUNS, BATCH = 0.9, 0.05, 500, 32
COSTS = [3919.2, 4047.3, 5077.4, 5300.0, 6100.0, 7000.0]
LANDSCAPES = {
    "law right": ([0.94, 0.96, 0.995, 0.995, 0.998, 0.999], [0.97, 0.975, 0.99, 0.99, 0.995, 0.998], COSTS),
    "law optimistic": ([0.85, 0.86, 0.87, 0.88, 0.89, 0.905], [0.97] * 6, COSTS),
    "adversarial proposals": ([0.86, 0.87, 0.88, 0.88], [0.99] * 4, [1.0, 2.0, 3.0, 4.0]),
    "law low on a valid candidate": ([0.88, 0.94, 0.975, 0.998, 0.999, 0.999, 0.999, 0.999],
                                     [0.9373, 0.9897, 0.9280, 0.99998, 0.9999998, 0.9999998, 0.9999998, 0.9999998],
                                     [299.3, 352.0, 360.9, 470.3, 535.9, 1612.8, 1836.8, 2075.4]),
}
RULES = ("0.1", "today", "floor")


def with_margin(s, rng):
    """A proposal planned with the margin the runs showed: meets ℓmax with probability 0.975, twice the cost."""
    return 0.975, 2 * max(a.cost for a in s.arms), 0.975


def adversary(s, rng):
    """The worst a proposal rule could do: just below ω, cheaper than every candidate, the law guessing 0.99."""
    return 0.89, -1.0 - s.proposed, 0.99


def row(name: str, rule: str, uses: float, reps: int, seed: int) -> str:
    ps, guesses, costs = LANDSCAPES[name]
    propose = adversary if name == "adversarial proposals" else with_margin
    horizon = max(HORIZON, MAX_RUNS)
    if rule == "0.1":
        r = simulate(ps, OMEGA, ALPHA, reps=reps, max_runs=MAX_RUNS, batch=BATCH, costs=costs, seed=seed)
    else:
        shares = value_shares(costs, guesses, OMEGA, ALPHA * 0.75, uses, horizon)
        if rule == "floor":
            shares = 0.5 * np.full(len(costs), 1.0 / len(costs)) + 0.5 * shares
        r = simulate(ps, OMEGA, ALPHA, reps=reps, max_runs=MAX_RUNS, batch=BATCH, costs=costs, uses=uses,
                     guesses=guesses, shares=shares, spending=Spending(0.75), propose=propose, proposals=3, seed=seed,
                     horizon=horizon)
    total = r.mean_runs_cost + uses * r.mean_plan_cost if r.certified else float("nan")
    return (f"| {name} | {rule} | {uses:g} | {r.p_wrong:.3f} [≤ {r.wrong_upper:.3f}] | {r.certified / reps:.2f} | "
            f"{r.mean_seeds:.0f} | {r.mean_runs_cost:.4g} | {r.mean_plan_cost:.1f} | {total:.4g} |")


NESTED = {"valid from the shortest": [0.93, 0.97, 0.995], "the shortest below ω": [0.85, 0.95, 0.995],
          "four, all valid": [0.95, 0.97, 0.99, 0.995], "all below ω": [0.88, 0.89, 0.895]}
NESTED_BATCH = 16


def separate(ps, epochs, reps, seed):
    """Today: each nested candidate its equal share, the cheapest first (`focus`), the group training the longest
    candidate counting: (seed-epochs, returned) per search."""
    rng, out = np.random.default_rng(seed), []
    for _ in range(reps):
        s, trained = Search([float(e) for e in epochs], OMEGA, ALPHA, max_runs=MAX_RUNS), 0
        while not s.finished:
            alive = s.counting()
            for _k in range(NESTED_BATCH):
                u = rng.random()                 # one run: candidate i meets ℓmax iff u < p_i (prefixes nest)
                for i in alive:
                    s.record(i, u < ps[i])
            trained += NESTED_BATCH * max(epochs[i] for i in alive)
            s.after_batch()
        out.append((trained, s.best()))
    return out


def fixed_sequence(ps, epochs, reps, seed):
    """The longest first at the group's whole α; a shorter candidate counts the same seeds (prefixes of the same
    runs) and is certified only once every longer one is (its gate); the group trains the candidate being tested and
    stops at the first that is refuted or dropped."""
    rng, out, few = np.random.default_rng(seed), [], fewest_runs(OMEGA, ALPHA)
    n = len(ps)
    for _ in range(reps):
        tests, stage, trained, best = [Sequential(OMEGA, ALPHA) for _ in range(n)], n - 1, 0, None
        while stage >= 0 and tests[stage].runs < MAX_RUNS:
            for _k in range(NESTED_BATCH):
                u = rng.random()
                for i in range(stage + 1):
                    if not tests[i].decided:
                        tests[i].add(u < ps[i])
            trained += NESTED_BATCH * epochs[stage]
            while stage >= 0 and tests[stage].state.verdict == "certified":
                best, stage = stage, stage - 1
            if stage < 0:
                break
            t = tests[stage]
            if t.state.verdict == "refuted" or (t.runs >= few and p_certify(
                    OMEGA, ALPHA, t.hits, t.runs, MAX_RUNS - t.runs) < DROP_BELOW):
                break
        out.append((trained, best))
    return out


def nested_rows(reps: int) -> None:
    print(f"Nested candidates (cost = epochs 10, 12, 14, 16), ω = {OMEGA:g}, α = {ALPHA:g}, {reps} searches per row, "
          f"batches of {NESTED_BATCH} seeds, at most {MAX_RUNS} runs; the same seeds for both rules of a row pair\n")
    print("| true p, shortest first | rule | P(wrong) [≤ 95 % upper] | certified | seed-epochs | plan's epochs |")
    print("|---|---|---|---:|---:|---:|")
    for k, (name, ps) in enumerate(NESTED.items()):
        epochs = [10, 12, 14, 16][:len(ps)]
        for rule, fn in (("separate shares", separate), ("fixed sequence", fixed_sequence)):
            out = fn(ps, epochs, reps, 10 + k)
            wrong = sum(b is not None and ps[b] < OMEGA for _, b in out)
            got = [epochs[b] for _, b in out if b is not None]
            print(f"| {name}: {', '.join(f'{p:g}' for p in ps)} | {rule} | {wrong / reps:.3f} "
                  f"[≤ {clopper_pearson_upper(wrong, reps, 0.05):.3f}] | {len(got) / reps:.2f} | "
                  f"{np.mean([t for t, _ in out]):.0f} | {np.mean(got) if got else float('nan'):.2f} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, help="searches per row (default 400; 20 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one landscape, 20 searches unless --reps: the script runs")
    ap.add_argument("--nested", action="store_true", help="the nested candidates' table instead")
    a = ap.parse_args(argv)
    reps = a.reps if a.reps is not None else 20 if a.quick else 400
    if a.nested:
        nested_rows(reps)
        return 0
    names = ["law right"] if a.quick else list(LANDSCAPES)
    print(f"ω = {OMEGA:g}, α = {ALPHA:g}, {reps} searches per row, batches of {BATCH} seeds, at most {MAX_RUNS} "
          "runs per candidate; the same seeds for both rules of a row pair\n")
    print("| landscape | rule | uses | P(wrong) [≤ 95 % upper] | certified | seeds | runs' cost | plan cost | "
          "total |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for i, name in enumerate(names):
        for uses in (100, 1e6):
            for rule in RULES:
                print(row(name, rule, uses, reps, seed=100 * i + (uses > 1000)), flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
