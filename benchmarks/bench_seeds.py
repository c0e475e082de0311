"""Seed-epochs per second: the vectorised multi-seed path against the per-seed loop, side by side.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_seeds.py [--seeds 1,8,32,128] [--epochs 1] [--loop-seeds 4]
                                                              [--samples 4000]

The network of `mnist1d-small`'s `full` version (1-D CNN, 64 channels) on all
4,000 MNIST-1D training samples (`--samples N`: the first N, a shorter epoch
on a busy machine; the work per mini-batch is the same), one node, batch 64, SGD with momentum, the
test loss after every epoch — what `depl profile` trains.  For every number
of seeds S, measured one after the other in this run:

* **loop**: today's per-seed loop (`walk_plan` + `LocalFederation`), one
  torch thread; it trains seeds one after the other, so its rate does not
  depend on S and is measured on min(S, --loop-seeds) seeds;
* **vectorised**: the S seeds as one stack (`walk_plan_stack`), one process,
  one torch thread;
* **vectorised, W workers**: `depl.train.executors.run_all` — the S seeds cut into
  W batches over W worker processes (one thread each), results written to a
  SQLite store by the parent, as `depl profile` does (worker start-up
  included; skipped when S < W).

Then the **ceiling** this machine sets: the floating-point work of one
seed-epoch (forward and backward of every mini-batch, then the test pass,
counted by `torch.utils.flop_counter.FlopCounterMode`) divided by the rate
of a batched single-thread matrix product (`torch.bmm`, 32 seeds, the
shape of the net's widest layer) — the seed-epochs per second one core
could reach if training were nothing but perfectly efficient matrix
products.  Its ratio to the loop bounds what any vectorisation can gain per
core; times the cores, what workers can.

Each measurement runs in a fresh process so its peak resident memory
(ru_maxrss) is its own; data generation is done before the clock starts.
Rates are seed-epochs per second of wall time; ratios are against the loop.
The machine's load average is printed: on a shared machine the numbers move.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import tempfile
import time


def _job(epochs: int, samples: int):
    from depl.plan import Epoch, Plan, with_figures
    from depl.scenario import load_scenario, parse_scenario
    from depl.train.federation import job_from_plan

    s = load_scenario("mnist1d-small")
    d = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    d["clusters"].append({"name": "solo", "capacity": 100.0, "bandwidth": 10.0, "unit_cost": 1.0, "nodes": 1})
    d["datasets"] = [{"name": "bench", "samples": samples, "source": "mnist1d", "share": [0.0, samples / 4000]}]
    s = parse_scenario(d, "bench")
    eps = [Epoch(k + 1, "full", "solo", 1.0) for k in range(epochs)]
    return job_from_plan(with_figures(Plan("bench", s.name, True, [x.name for x in s.datasets], eps, 0, 0, 0, 0, 0,
                          omega=s.target.quantile, loss_target=s.target.loss, deadline=s.target.deadline), s))


def _measure(kind: str, seeds: int, epochs: int, samples: int, workers: int, out) -> None:
    import torch

    torch.set_num_threads(1)
    from depl.train.federation import LocalFederation, node_data, test_data, walk_plan
    from depl.train.vectorised import walk_plan_stack

    job = _job(epochs, samples)
    node_data(job.data, 1, True, 0), test_data(job.data)  # generate the data before the clock starts
    # one-time imports are not training: torch.optim imports torch._dynamo lazily, vmap functorch
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    torch.vmap(torch.sin)(torch.zeros(2, 2))
    t0 = time.perf_counter()
    if kind == "loop":
        for s in range(seeds):
            walk_plan(job, s, LocalFederation())
    elif kind == "vectorised":
        walk_plan_stack(job, list(range(seeds)))
    else:
        from depl.store import Store
        from depl.train.executors import run_all

        with tempfile.TemporaryDirectory() as tmp, Store(os.path.join(tmp, "s.sqlite")) as st:
            st.start_run("bench", "profile", {})
            run_all(st, [("bench", job, list(range(seeds)))], workers=workers)
            assert st.count_epochs() == seeds * epochs
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if kind == "workers":  # the workers' peaks (the largest child), besides the parent's
        peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    out.put({"rate": seeds * epochs / dt, "seconds": dt, "peak_mb": peak / 1024})


def _ceiling(samples: int, out) -> None:
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(1)
    from depl.train.federation import initial_model, node_data, test_data

    job = _job(1, samples)
    (x, y), (xt, yt) = node_data(job.data, 1, True, 0), test_data(job.data)
    model = initial_model(job, 0)
    bs = job.options.batch_size
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(model(x[:bs]), y[:bs]).backward()
    step = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(xt)
    flops = step * (len(y) / bs) + fc.get_total_flops()
    # the widest convolution as a batched GEMM: (batch·positions) × (channels·kernel) × channels
    a, b = torch.randn(32, 640, 192), torch.randn(32, 192, 64)
    for _ in range(3):
        torch.bmm(a, b)
    n, t0 = 30, time.perf_counter()
    for _ in range(n):
        torch.bmm(a, b)
    gemm = n * 2 * 32 * 640 * 192 * 64 / (time.perf_counter() - t0)
    out.put({"flops": flops, "gemm": gemm, "rate": gemm / flops})


def measure(kind: str, seeds: int, epochs: int, samples: int, workers: int = 1) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_ceiling if kind == "ceiling" else _measure,
                    args=(samples, q) if kind == "ceiling" else (kind, seeds, epochs, samples, workers, q))
    p.start()
    r = q.get()
    p.join()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,8,32,128")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--loop-seeds", type=int, default=4, help="seeds the loop's rate is measured on (at most S)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--samples", type=int, default=4000, help="training samples per epoch (at most 4000)")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    sizes = [int(v) for v in a.seeds.split(",")]
    print(f"mnist1d-small full net, {a.samples} samples, batch 64, {a.epochs} epoch(s); {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f} at start")
    head = (f"{'seeds':>5} | {'loop s-ep/s':>11} {'MB':>5} | {'vectorised':>10} {'MB':>5} {'ratio':>6} | "
            f"{f'{a.workers} workers':>10} {'MB':>5} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    rows = []
    for s in sizes:
        loop = measure("loop", min(s, a.loop_seeds), a.epochs, a.samples)
        vec = measure("vectorised", s, a.epochs, a.samples)
        row = {"seeds": s, "loop": loop, "vectorised": vec}
        line = (f"{s:>5} | {loop['rate']:>11.2f} {loop['peak_mb']:>5.0f} | {vec['rate']:>10.2f} {vec['peak_mb']:>5.0f} "
                f"{vec['rate'] / loop['rate']:>5.2f}×")
        if a.workers > 1 and s >= a.workers:
            w = measure("workers", s, a.epochs, a.samples, a.workers)
            row["workers"] = w
            line += f" | {w['rate']:>10.2f} {w['peak_mb']:>5.0f} {w['rate'] / loop['rate']:>5.2f}×"
        print(line, flush=True)
        rows.append(row)
    c = measure("ceiling", 0, 0, a.samples)
    loop_rate = rows[0]["loop"]["rate"] if rows else float("nan")
    print(f"ceiling: {c['flops'] / 1e9:.3f} GFLOP per seed-epoch; batched GEMM {c['gemm'] / 1e9:.1f} GFLOP/s on one "
          f"thread → at most {c['rate']:.2f} seed-epochs/s per core = {c['rate'] / loop_rate:.1f}× the loop per core, "
          f"{(os.cpu_count() or 1) * c['rate'] / loop_rate:.1f}× on {os.cpu_count()} cores")
    rows.append({"ceiling": c})
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
