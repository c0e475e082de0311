"""Planner speed, measured side by side in one run (not a timed test).

1. `depl plan paper-alexnet` (method depl) at η = 200 on one core: median of
   several solves, and how it scales with η.
2. The expanded graph of stage 2 searched two ways on the *same* graph (bins
   only, `labels=False`): depl's layered recursion vs networkx Dijkstra over
   the listed vertices and edges, at small η where Dijkstra is affordable.
   Both must find the same cost; the ratio of their times is printed.

Run:  .venv/bin/python benchmarks/bench_planner.py  [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import networkx as nx  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from depl.planners import Options, make_plan  # noqa: E402
from depl.planners.common import Context  # noqa: E402
from depl.planners.depl import _starts  # noqa: E402
from depl.planners.schedule import Surrogate, expanded_graph_edges, lowest_cost_path  # noqa: E402
from depl.scenario import load_scenario  # noqa: E402


def timed(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def dijkstra(spec, full: bool):
    g = nx.DiGraph()
    g.add_weighted_edges_from(expanded_graph_edges(spec, full=full))
    try:
        cost = nx.dijkstra_path_length(g, ("s",), ("Ω",))
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        cost = None
    return cost, g.number_of_nodes(), g.number_of_edges()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats and smaller η")
    args = ap.parse_args()
    repeat = 3 if args.quick else 7
    s = load_scenario("paper-alexnet")
    print(f"python {sys.version.split()[0]}, one thread; scenario paper-alexnet (target {s.target.loss}, ω {s.target.quantile})")

    print("\n1. `depl plan paper-alexnet`, method depl: median solve time")
    print(f"{'eta':>6} {'seconds':>9} {'cost':>10}")
    for eta in ([50, 200] if args.quick else [50, 100, 200, 400]):
        sec, plan = timed(lambda: make_plan(s, "depl", Options(eta=eta)), repeat)
        print(f"{eta:>6} {sec:>9.3f} {plan.cost:>10.2f}")

    print("\n2. Stage 2 on the same expanded graph: layered recursion vs networkx Dijkstra")
    ctx = Context(s, ["cifar10"])
    sigma0, lam = _starts(ctx, exact=False)[0].sigma0, _starts(ctx, exact=False)[0].price
    sur = Surrogate.for_quantile(ctx.omega, sigma0)
    print("   graph = every vertex of the |M|·K·η² grid (as the paper counts V), or only those")
    print("   reachable from the start (a frugal Dijkstra); time includes building the graph.")
    print(f"{'eta':>5} {'graph':>9} {'vertices':>9} {'edges':>9} {'recursion s':>12} {'dijkstra s':>11} {'ratio':>7}  same cost")
    for eta in ([10, 20] if args.quick else [10, 20, 40, 80]):
        spec = ctx.spec(sur, ctx.table.epoch_weight(lam), ctx.target - sur.const, eta=eta)
        t_rec, path = timed(lambda: lowest_cost_path(spec, labels=False), repeat)
        for full in (True, False):
            if full and eta > 40:
                continue  # networkx on millions of vertices: minutes and gigabytes
            t_dij, (cost, nv, ne) = timed(lambda: dijkstra(spec, full), 1 if full else repeat)
            same = (path is None and cost is None) or (
                path is not None and cost is not None and abs(path.cost - cost) <= 1e-9 * cost)
            kind = "full" if full else "reachable"
            print(f"{eta:>5} {kind:>9} {nv:>9} {ne:>9} {t_rec:>12.4f} {t_dij:>11.3f} {t_dij / t_rec:>7.1f}  {same}")
            if not same:
                print("MISMATCH: the two searches disagree", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    with threadpool_limits(1):
        sys.exit(main())
