"""Seed-epochs per second: the per-seed loop, the vectorised stacks, workers and the automatic choice, side by side.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_seeds.py [--seeds 1,8,32,128] [--epochs 1] [--loop-seeds 4]
                                                              [--samples 4000] [--repeats 1] [--workers W]

The network of `mnist1d-small`'s `full` version (1-D CNN, 64 channels) on all
4,000 MNIST-1D training samples (`--samples N`: the first N, a shorter epoch
on a busy machine; the work per mini-batch is the same), one node, batch 64, SGD with momentum, the
test loss after every epoch — what `depl profile` trains.  For every number
of seeds S, measured in interleaved rounds (`--repeats`; each path's rate is
the median of its rounds, so a load that comes and goes on a shared machine
falls on every path alike):

* **loop**: the per-seed loop (`walk_plan` + `LocalFederation`), one
  torch thread; it trains seeds one after the other, so its rate does not
  depend on S and is measured on min(S, --loop-seeds) seeds;
* **stack, vmap**: the S seeds as one stack (`walk_plan_stack`) computed by
  `torch.vmap` over `functional_call` (a convolution becomes a grouped one),
  one process, one thread;
* **stack, GEMM**: the same stack as batched matrix products, one im2col
  GEMM per layer over seeds × batch (`vectorised.GemmNet`; what a stack of
  this net runs by default);
* **W workers**: `depl.train.backends.executors.run_all` — the S seeds cut into batches
  of at most 32 over W worker processes (one thread each), results written
  to a SQLite store by the parent, as `depl profile` does (worker start-up
  included; skipped when S < W);
* **automatic**: what `depl run` decides without --seed-batch/--workers/--threads
  (`train.backends.executors.decide`): the per-seed loop for S ≤ 2 (nothing
  measured), else `train.engine.autochoice.choose` measures a few mini-batches of
  the loop and of stacks of 4–32 seeds on 1 or W workers, with 1 or W
  threads, within a tenth of the S seeds' epochs (estimated from a probe of
  the loop; a job under about 50 s by the loop is not measured), and keeps
  the loop unless a candidate beat it in every round by the margin; the S seeds are then trained as it picked: in this process
  without a store (as the loop and stack rows) when it picked one worker,
  else by `run_all` (as the workers row).  Beside its rate: the choice's own
  measurement (seconds, not counted in the rate; `depl` caches it per
  network and machine, the benchmark measures afresh in every round) and
  the ratio to the loop it measured while choosing, next to the ratio the
  whole epochs then reached.

Every rate is also put beside the **ceiling** this machine sets: the
floating-point work of one seed-epoch (forward and backward of every
mini-batch, then the test pass, counted by
`torch.utils.flop_counter.FlopCounterMode`) divided by the rate of a batched
single-thread matrix product (`torch.bmm`, 32 seeds, the shape of the net's
widest layer) — the seed-epochs per second one core could reach if training
were nothing but perfectly efficient matrix products — times the cores the
path uses.

Each measurement runs in a fresh process so its peak resident memory
(ru_maxrss) is its own; data generation is done before the clock starts.
Rates are seed-epochs per second of wall time.  The CPU model and the
machine's load average are printed: on a shared machine the numbers move.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time


def _job(epochs: int, samples: int):
    from depl.plan import Epoch, Plan, with_figures
    from depl.scenario import load_scenario, parse_scenario
    from depl.train.engine.federation import job_from_plan

    s = load_scenario("mnist1d-small")
    d = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    d["clusters"].append({"name": "solo", "capacity": 100.0, "bandwidth": 10.0, "unit_cost": 1.0, "nodes": 1})
    d["datasets"] = [{"name": "bench", "samples": samples, "source": "mnist1d", "share": [0.0, samples / 4000]}]
    d["training"]["data_draw"] = "fixed"   # one data for every seed: the stack shares it (a drawn run trains alone)
    d.pop("calibration", None)             # speed only: no certificate asked of these epochs
    s = parse_scenario(d, "bench")
    eps = [Epoch(k + 1, "full", "solo", 1.0) for k in range(epochs)]
    return job_from_plan(with_figures(Plan("bench", s.name, True, [x.name for x in s.datasets], eps, 0, 0, 0, 0, 0,
                          omega=s.target.quantile, loss_target=s.target.loss, deadline=s.target.deadline), s))


def _measure(kind: str, seeds: int, epochs: int, samples: int, workers: int, out) -> None:
    import torch

    torch.set_num_threads(1)
    from depl.train.engine.federation import LocalFederation, node_data, test_data, walk_plan
    from depl.train.engine.vectorised import walk_plan_stack

    job = _job(epochs, samples)
    node_data(job.data, 1, True, 0), test_data(job.data)  # generate the data before the clock starts
    # one-time imports are not training: torch.optim imports torch._dynamo lazily, vmap functorch
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    torch.vmap(torch.sin)(torch.zeros(2, 2))
    extra = {}
    how = {"seed_batch": 32, "workers": workers, "threads": 1}
    if kind == "auto":
        from depl.train.engine.autochoice import LOOP, candidates_for, choose
        from depl.train.backends.executors import FEW_SEEDS

        if seeds <= FEW_SEEDS:   # as `depl run` decides: nothing measured
            picked, seconds, measured = LOOP, 0.0, None
        else:
            choice = choose(job, seeds, candidates_for(job, seeds, workers), todo=seeds)
            picked, seconds = choice.picked, choice.measured_seconds
            measured = choice.rates[picked.label] / choice.loop_rate
        how = {"seed_batch": picked.seed_batch, "workers": picked.workers, "threads": picked.threads}
        extra = {"picked": picked.label, "choice_seconds": seconds, "measured_ratio": measured, "cores": workers,
                 "cores_used": picked.workers * picked.threads}
    if kind == "auto" and how["workers"] == 1:  # in this process, without a store, as the loop and stack rows
        torch.set_num_threads(how["threads"])
        kind = "loop" if how["seed_batch"] == 1 else "batches"
    t0 = time.perf_counter()
    if kind == "loop":
        for s in range(seeds):
            walk_plan(job, s, LocalFederation())
    elif kind == "batches":
        for i in range(0, seeds, how["seed_batch"]):
            walk_plan_stack(job, list(range(i, min(seeds, i + how["seed_batch"]))))
    elif kind in ("vmap", "gemm"):
        walk_plan_stack(job, list(range(seeds)), kernels=kind)
    else:
        from depl.store import Store
        from depl.train.backends.executors import run_all

        with tempfile.TemporaryDirectory() as tmp, Store(os.path.join(tmp, "s.sqlite")) as st:
            st.start_run("bench", "profile", {})
            run_all(st, [("bench", job, list(range(seeds)))], **how)
            assert st.count_epochs() == seeds * epochs
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if kind in ("workers", "auto"):  # the workers' peaks (the largest child), besides the parent's
        peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    out.put({"rate": seeds * epochs / dt, "seconds": dt, "peak_mb": peak / 1024, **extra})


def _ceiling(samples: int, out) -> None:
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(1)
    from depl.train.engine.federation import initial_model, node_data, test_data

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


PATHS = ("loop", "vmap", "gemm", "workers", "auto")


def label(kind: str, r: dict, workers: int) -> str:
    return {"loop": "loop (1 thread)", "vmap": "stack, vmap", "gemm": "stack, GEMM",
            "workers": f"{workers} workers (stack ≤ 32)"}.get(kind) or "automatic (picks: after the table)"


def measure_row(s: int, a) -> dict:
    """Every path at S seeds, in `a.repeats` interleaved rounds; each path's rate is the median of its rounds."""
    kinds = [k for k in PATHS if k != "workers" or (a.workers > 1 and s >= a.workers)]
    got: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(a.repeats):
        for k in kinds:
            got[k].append(measure(k, min(s, a.loop_seeds) if k == "loop" else s, a.epochs, a.samples, a.workers))
    row = {}
    for k, runs in got.items():
        rate = statistics.median(r["rate"] for r in runs)
        row[k] = {**runs[0], "rate": rate, "peak_mb": max(r["peak_mb"] for r in runs),
                  "rounds": [r["rate"] for r in runs]}
        if k == "auto":   # each round chose afresh: every pick and the ratio it measured
            row[k].update(picks=[r["picked"] for r in runs], measured_ratios=[r["measured_ratio"] for r in runs],
                          choice_seconds_rounds=[r["choice_seconds"] for r in runs])
    return row


def cores_used(kind: str, r: dict, workers: int) -> int:
    return {"workers": workers, "auto": r.get("cores_used", 1)}.get(kind, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,8,32,128")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--loop-seeds", type=int, default=4, help="seeds the loop's rate is measured on (at most S)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="worker processes (and the cores the automatic choice may use)")
    ap.add_argument("--samples", type=int, default=4000, help="training samples per epoch (at most 4000)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds; each rate is their median")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    sizes = [int(v) for v in a.seeds.split(",")]
    from depl.train.engine.autochoice import cpu_model
    from depl.train.backends.executors import FEW_SEEDS

    print(f"{cpu_model()}, {os.cpu_count()} cores; mnist1d-small full net, {a.samples} samples, batch 64, "
          f"{a.epochs} epoch(s), median of {a.repeats} round(s); load average "
          + "{:.1f} {:.1f} {:.1f} (1, 5, 15 min) at start".format(*os.getloadavg()))
    c = measure("ceiling", 0, 0, a.samples)
    print(f"ceiling: {c['flops'] / 1e9:.3f} GFLOP per seed-epoch; batched GEMM {c['gemm'] / 1e9:.1f} GFLOP/s on one "
          f"thread → at most {c['rate']:.2f} seed-epochs/s per core")
    head = f"{'seeds':>5} | {'path':<44} | {'s-ep/s':>8} {'MB':>5} | {'× loop':>7} | {'× ceiling':>9}"
    print(head)
    print("-" * len(head))
    rows = []
    for s in sizes:
        row = measure_row(s, a)
        loop = row["loop"]["rate"]
        for k, r in row.items():
            note = "" if k != "auto" else (
                f"  (≤ {FEW_SEEDS} seeds: the loop, nothing measured)" if None in r["measured_ratios"] else
                f"  (chosen in {'/'.join(f'{x:.0f}' for x in r['choice_seconds_rounds'])} s; measured "
                f"{'/'.join(f'{x:.2f}' for x in r['measured_ratios'])}× the loop while choosing)")
            ceiling = c["rate"] * cores_used(k, r, a.workers)
            print(f"{s:>5} | {label(k, r, a.workers):<44} | {r['rate']:>8.2f} {r['peak_mb']:>5.0f} | "
                  f"{r['rate'] / loop:>6.2f}× | {r['rate'] / ceiling:>8.2f}×{note}", flush=True)
        rows.append({"seeds": s, **row})
    for r in rows:
        print(f"automatic at {r['seeds']} seeds, picked round by round: {' / '.join(r['auto']['picks'])}")
    rows.append({"ceiling": c, "cpu": cpu_model()})
    print("load average {:.1f} {:.1f} {:.1f} (1, 5, 15 min) at the end".format(*os.getloadavg()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
