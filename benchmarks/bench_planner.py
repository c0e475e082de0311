"""Planner speed, measured side by side in one run (not a timed test).

1. `depl plan paper-alexnet` (method depl) at η = 200 on one core: median of
   several solves, and how it scales with η.
2. The expanded graph of stage 2 searched two ways on the *same* graph (bins
   only, `labels=False`): depl's layered recursion vs networkx Dijkstra over
   the listed vertices and edges, at small η where Dijkstra is affordable.
   Both must find the same cost; the ratio of their times is printed.
3. A large edge/cloud instance — 10 clusters with transfer costs β, 12
   datasets, 6 versions, a horizon of 300 epochs — against the 5 s target,
   and how the CPU time of `depl` grows with K, |N|, |D|, |M| and η around a
   mid-size instance: fitted exponents p in time ∝ size^p.

Part 1 also times the whole `depl plan paper-alexnet` process (CPU of the
child, least of several runs) and, with `--before-src PATH`, the same command
with another source tree run by run beside it, printing the ratio; then where
the process's time goes, import by import.

Run:  .venv/bin/python benchmarks/bench_planner.py  [--quick] [--before-src ../main/src] [--process-only]
      [--repeat N]
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


def edge_cloud(n_clusters: int, n_datasets: int, n_models: int, horizon: int, seed: int = 0):
    """A random edge/cloud instance: clusters of 1–4 nodes with β per dataset,
    datasets of very different sizes, pruned versions in a chain of switches,
    the paper's increments law, and a deadline that allows `horizon` epochs."""
    import numpy as np

    from depl.scenario import parse_scenario

    rng = np.random.default_rng(seed)
    l0 = 20.0
    models = [{"name": f"v{i}", "size": float(20 / (1 + i)), "work": float(2.5 / (1 + 0.5 * i)),
               "progress": {"A": float(1.2 + 0.3 * i), "B": float(0.5 + 0.4 * i)},
               "noise": {"family": "invgamma", "mean": 1.0, "var": float(0.006 + 0.006 * i)}}
              for i in range(n_models)]
    switches = [{"from": f"v{a}", "to": f"v{b}", "jump": {"family": "t", "params": {"df": 4.0, "loc": 0.3, "scale": 0.08}}}
                for a in range(n_models) for b in range(a + 1, n_models)]
    clusters = [{"name": f"n{j}", "capacity": float(rng.uniform(40, 150)), "bandwidth": float(rng.uniform(5, 100)),
                 "unit_cost": float(rng.uniform(0.6, 1.6)), "nodes": int(rng.integers(1, 5))} for j in range(n_clusters)]
    datasets = [{"name": f"d{j}", "samples": float(rng.choice([2_000, 8_000, 30_000])),
                 "transfer_cost": {c["name"]: float(rng.uniform(0, 30)) for c in clusters if rng.random() < 0.6}}
                for j in range(n_datasets)]
    total = sum(d["samples"] for d in datasets)
    fast = min(m["work"] for m in models) * total / max(c["capacity"] * c["nodes"] for c in clusters)
    data = {"name": f"edge-cloud-{n_clusters}x{n_datasets}x{n_models}", "initial_loss": l0, "max_epochs": horizon,
            "target": {"loss": 9.0, "quantile": 0.99, "deadline": float(horizon * fast)},
            "data_law": {"s0": 20_000.0, "reference_samples": total},
            "clusters": clusters, "datasets": datasets, "models": models, "switches": switches}
    return parse_scenario(data)


def cpu(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def scaling(quick: bool) -> None:
    from depl.planners import Infeasible
    from depl.experiments import growth_exponent

    big = edge_cloud(10, 12, 6, 300)
    try:
        sec, plan = cpu(lambda: make_plan(big, "depl"))
        print(f"\n3. {big.name}, horizon 300, β on 10 clusters: depl {sec:.2f} s CPU "
              f"(target < 5 s), cost {plan.cost:.1f}, K = {len(plan.epochs)}, datasets {len(plan.datasets)}")
    except Infeasible as e:
        print(f"\n3. {big.name}: infeasible ({e})")
    base = dict(n_clusters=4, n_datasets=4, n_models=3, horizon=100)
    axes = {"K (horizon)": ("horizon", [50, 100, 200] if quick else [50, 100, 200, 300]),
            "|N| clusters": ("n_clusters", [2, 4, 8] if quick else [2, 4, 6, 8, 10]),
            "|D| datasets": ("n_datasets", [2, 4, 8] if quick else [2, 4, 6, 8, 12]),
            "|M| versions": ("n_models", [2, 3, 4] if quick else [2, 3, 4, 5, 6])}
    print(f"   growth around {base} (CPU seconds of depl; p in time ∝ size^p)")
    for label, (key, sizes) in axes.items():
        xs, ys = [], []
        for n in sizes:
            try:
                sec, _ = cpu(lambda: make_plan(edge_cloud(**{**base, key: n}), "depl"))
            except Infeasible:
                continue
            xs.append(n)
            ys.append(sec)
        cells = "  ".join(f"{x}: {y:.2f}" for x, y in zip(xs, ys))
        print(f"   {label:<14} {cells}   p = {growth_exponent(xs, ys):.2f}")
    s, xs, ys = load_scenario("paper-alexnet"), [], []
    for eta in [50, 100, 200, 400]:
        xs.append(eta)
        ys.append(cpu(lambda: make_plan(s, "depl", Options(eta=eta)))[0])
    print(f"   {'η (alexnet)':<14} " + "  ".join(f"{x}: {y:.2f}" for x, y in zip(xs, ys))
          + f"   p = {growth_exponent(xs, ys):.2f}")


SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
PLAN = ["-m", "depl.cli", "plan", "paper-alexnet"]
# what the process spends, rung by rung: each rung imports what the one before did and more
LADDER = [
    ("an empty interpreter", "pass"),
    ("+ numpy", "import numpy"),
    ("+ scipy.special (the families' cdf/ppf)", "import numpy, scipy.special"),
    # `import pydantic` alone is lazy: BaseModel and the validators are what a scenario's models need
    ("+ pydantic (the scenario's checks)", "import numpy, scipy.special\nfrom pydantic import BaseModel, ConfigDict, "
                                           "Field, ValidationError, field_validator, model_validator"),
    # typer (which brings its click: click's own up to typer 0.2x, a bundled copy after) and rich
    ("+ typer, rich (the command line)", "import numpy, scipy.special, typer, rich.console, rich.table\n"
                                                "from pydantic import BaseModel, ConfigDict, Field, ValidationError, "
                                                "field_validator, model_validator"),
    ("+ depl's modules, the scenario loaded", "import numpy, scipy.special\nfrom depl.cli import main\n"
                                               "from depl.planners import get_planner\nget_planner('depl')\n"
                                               "from depl.scenario import load_scenario\nload_scenario('paper-alexnet')"),
    ("+ planning and printing (the whole process)", None),
]


def process_time(repeat: int, before_src: str | None) -> None:
    """The whole `depl plan paper-alexnet` process (interpreter, imports, plan, output), CPU seconds of the
    child (user + sys), the least of `repeat` runs: with this tree's code and, interleaved run by run, with
    `before_src`'s; then where the time goes.  Bytecode is cached (in a temporary PYTHONPYCACHEPREFIX, never
    in the source trees) as it is for an installed depl; the first run of each tree fills the cache."""
    import resource
    import subprocess
    import tempfile

    cache = tempfile.mkdtemp(prefix="depl-bench-pycache-")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(COLUMNS="200", PYTHONPYCACHEPREFIX=cache)

    def child_cpu(args, src: str) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, *args], check=True, capture_output=True, env={**env, "PYTHONPATH": src})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    trees = [("this tree", SRC)] + ([("before", os.path.abspath(before_src))] if before_src else [])
    times: dict[str, list[float]] = {label: [] for label, _ in trees}
    for _, src in trees:
        child_cpu(PLAN, src)  # compiles the bytecode
    for _ in range(repeat):
        for label, src in trees:
            times[label].append(child_cpu(PLAN, src))
    print(f"   whole process `depl plan paper-alexnet`, CPU s (least / median of {repeat}, interleaved); target < 1 s")
    for label, src in trees:
        print(f"   {label:<10} {min(times[label]):>6.2f} {statistics.median(times[label]):>6.2f}   {src}")
    if before_src:
        print(f"   before / this tree: {min(times['before']) / min(times['this tree']):.2f}× (least), "
              f"{statistics.median(times['before']) / statistics.median(times['this tree']):.2f}× (median)")
    print("   where the time goes (this tree; least of the runs, each rung includes the ones above):")
    print(f"   {'':<46} {'cumulative':>10} {'this rung':>10}")
    prev = 0.0
    for label, code in LADDER:
        t = min(times["this tree"]) if code is None else min(child_cpu(["-c", code], SRC) for _ in range(repeat))
        print(f"   {label:<46} {t:>10.2f} {t - prev:>10.2f}")
        prev = t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats and smaller η")
    ap.add_argument("--skip-scaling", action="store_true", help="only parts 1 and 2")
    ap.add_argument("--before-src", metavar="PATH",
                    help="another source tree (its src folder, e.g. a checkout of main): the whole `depl plan "
                         "paper-alexnet` process is timed with it too, run by run, and the ratio printed")
    ap.add_argument("--process-only", action="store_true", help="only the whole-process timing of part 1")
    ap.add_argument("--repeat", type=int, help="timings per cell (default 7; 3 with --quick)")
    args = ap.parse_args()
    repeat = args.repeat if args.repeat is not None else 3 if args.quick else 7
    s = load_scenario("paper-alexnet")
    print(f"python {sys.version.split()[0]}, one thread; scenario paper-alexnet (target {s.target.loss}, ω {s.target.quantile})")

    print("\n1. `depl plan paper-alexnet`, method depl: median solve time" + (" (skipped)" if args.process_only else ""))
    if not args.process_only:
        print(f"{'eta':>6} {'seconds':>9} {'cost':>10}")
        for eta in ([50, 200] if args.quick else [50, 100, 200, 400]):
            sec, plan = timed(lambda: make_plan(s, "depl", Options(eta=eta)), repeat)
            print(f"{eta:>6} {sec:>9.3f} {plan.cost:>10.2f}")
    process_time(repeat, args.before_src)
    if args.process_only:
        return 0

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
    if not args.skip_scaling:
        scaling(args.quick)
    return 0


if __name__ == "__main__":
    with threadpool_limits(1):
        sys.exit(main())
