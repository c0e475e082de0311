"""Speed of real training: the local back end against a plain PyTorch loop, and Flower's overhead.

    .venv/bin/python benchmarks/bench_train.py [--epochs 10] [--repeats 3] [--flower]

1. **local vs plain.**  The `full` version of the built-in `mnist1d-small`
   scenario (a 1-D CNN, 64 channels) trained on all 4,000 MNIST-1D samples,
   one node, batch 64, SGD with momentum: depl's local back end
   (`walk_plan` + `LocalFederation`: plan walk, seeded order, per-epoch test
   loss) against a plain loop written the usual way (a shuffled permutation,
   mini-batch slices, the test loss after every epoch).  Both run in this
   process, one torch thread, interleaved epoch blocks, so the machine's
   drift hits both alike.  Goal: ratio ≤ 1.10.
2. **Flower (--flower).**  The same plan on Flower's simulation engine with
   1 and with 3 seeds, one engine start each: start-up = time to the first
   finished epoch (minus one epoch), per-epoch cost = the rest divided by the
   remaining epochs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from depl.plan import Epoch, Plan, with_figures
from depl.scenario import load_scenario
from depl.train.engine.federation import (INIT_STREAM, LocalFederation, derive_seed, job_from_plan, node_data,
                                   test_data, walk_plan)
from depl.train.task.prune import build_version


def make_plan(epochs: int, cluster: str = "solo") -> Plan:
    s = load_scenario("mnist1d-small")
    d = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    d["clusters"].append({"name": "solo", "capacity": 100.0, "bandwidth": 10.0, "unit_cost": 1.0, "nodes": 1})
    from depl.scenario import parse_scenario

    s = parse_scenario(d, "bench")
    eps = [Epoch(k + 1, "full", cluster, 1.0) for k in range(epochs)]
    return with_figures(Plan("bench", s.name, True, [x.name for x in s.datasets], eps, 0, 0, 0, 0, 0,
                          omega=s.target.quantile, loss_target=s.target.loss, deadline=s.target.deadline), s)


def plain_loop(job, epochs: int, seed: int) -> float:
    """The loop one writes by hand: same net, data, optimiser and batch size."""
    spec = job.versions["full"]
    x, y = node_data(job.data, 1, True, 0)
    xt, yt = test_data(job.data)
    t0 = time.perf_counter()
    model = build_version(spec, derive_seed(seed, INIT_STREAM))
    opt_args = dict(lr=job.options.lr, momentum=job.options.momentum)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        opt = torch.optim.SGD(model.parameters(), **opt_args)
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), job.options.batch_size):
            idx = perm[i:i + job.options.batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            F.cross_entropy(model(xt), yt).item()
    return (time.perf_counter() - t0) / epochs


def depl_local(job, epochs: int, seed: int) -> float:
    t0 = time.perf_counter()
    walk_plan(job, seed, LocalFederation())
    return (time.perf_counter() - t0) / epochs


def bench_local(epochs: int, repeats: int) -> None:
    torch.set_num_threads(1)
    job = job_from_plan(make_plan(epochs))
    depl_local(job, 2, 99)  # warm caches (data generation, skeletons)
    plain_loop(job, 2, 99)
    p, d = [], []
    for r in range(repeats):
        p.append(plain_loop(job, epochs, r))
        d.append(depl_local(job, epochs, r))
    mp, md = min(p), min(d)  # the least disturbed run of each: other processes only add time
    print(f"local vs plain PyTorch, {epochs} epochs × {repeats} repeats, 4000 samples, batch 64, 1 thread")
    print(f"  plain loop      : {mp * 1000:7.1f} ms/epoch  (runs: {', '.join(f'{v * 1000:.1f}' for v in p)})")
    print(f"  depl local      : {md * 1000:7.1f} ms/epoch  (runs: {', '.join(f'{v * 1000:.1f}' for v in d)})")
    print(f"  ratio local/plain = {md / mp:.3f} (best runs; medians: {statistics.median(d) / statistics.median(p):.3f}; goal ≤ 1.10)")


def bench_flower(epochs: int) -> None:
    from depl.store import Store
    from depl.train.engine import execute
    from depl.train.apps.flower_app import run_simulation

    job = job_from_plan(make_plan(epochs))
    torch.set_num_threads(1)
    per_epoch_local = depl_local(job, epochs, 0)
    print(f"flower simulation engine ({epochs} epochs per seed; local back end: {per_epoch_local * 1000:.1f} ms/epoch)")
    results = {}
    for seeds in (1, 3):
        out = Path(tempfile.mkdtemp(prefix="depl-bench-", dir="/tmp"))
        store = Store(out / "runs.sqlite")
        rid = execute.run_id_for(job, "flower")
        execute.register(store, rid, "plan", job, {"backend": "flower"})
        t = run_simulation(store, rid, job, list(range(seeds)), out)
        results[seeds] = t
        per_epoch = (t["total"] - t["first_epoch_done"]) / max(1, seeds * epochs - 1)
        startup = t["first_epoch_done"] - per_epoch
        print(f"  {seeds} seed(s): total {t['total']:.1f} s; first epoch done after {t['first_epoch_done']:.1f} s "
              f"→ start-up ≈ {startup:.1f} s, then {per_epoch * 1000:.0f} ms/epoch "
              f"(local {per_epoch_local * 1000:.0f} ms: overhead {(per_epoch - per_epoch_local) * 1000:.0f} ms/epoch)")
    print("  start-up is paid once per `depl run`: with 3 seeds it is not 3 times the 1-seed start-up")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flower", action="store_true")
    a = ap.parse_args()
    bench_local(a.epochs, a.repeats)
    if a.flower:
        bench_flower(a.epochs)
