"""Adaptive runs: seeds in one vectorised stack while their rests agree (`adaptive.run_batch`) against the
per-seed loop (`adaptive.run_seed`, one seed after the other), side by side.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_adaptive.py [--seeds 8] [--first-seed 1000] [--target L]

The plan `depl plan mnist1d-small` writes (`--target L`: its loss target set to L first, a shorter plan),
trained adaptively with its fresh validation split over the same seeds both ways, each into its own
SQLite store, one torch thread, in this process (MNIST-1D is generated before the clock starts).  Prints
the wall seconds, seed-epochs per second and their ratio, the decisions taken each way, and the largest
difference of a final test loss (the batched kernels round differently).  The machine's load average is
printed: on a shared machine the numbers move.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--target", type=float, default=None)
    a = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from depl.planners import make_plan
    from depl.scenario import load_scenario, parse_scenario, scenario_dict
    from depl.store import Store
    from depl.train.loops import adaptive as ad
    from depl.train.task import data as data_mod

    s = load_scenario("mnist1d-small")
    if a.target is not None:
        d = scenario_dict(s)
        d["target"] = {**d["target"], "loss": a.target}
        s = parse_scenario(d, "bench")
    plan = make_plan(s, "depl")
    if not plan.feasible:
        raise SystemExit(f"no feasible plan for target {a.target}")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "plan.json"
        plan.save(f)
        from depl.plan import Plan

        plan = Plan.load(f)
        job = ad.adaptive_job(plan)
        data_mod.validation(job.data)  # data generated before the clock
        seeds = list(range(a.first_seed, a.first_seed + a.seeds))
        rid = ad.adaptive_run_id(job, {}, "conditional")  # the Python API's rule, as run below
        out = {}
        for how in ("loop", "stack"):
            with Store(Path(tmp) / f"{how}.sqlite") as st:
                st.start_run(rid, "plan", {"adaptive": True})
                t0 = time.perf_counter()
                if how == "loop":
                    for seed in seeds:
                        ad.run_seed(st, rid, job, plan, seed)
                else:
                    ad.run_batch(st, rid, job, plan, seeds)
                secs = time.perf_counter() - t0
                finals, costs, actions = ad.outcome(st, rid, seeds)
                epochs = sum(len(st.trajectory(rid, x)) for x in seeds)
                out[how] = (secs, epochs, finals, costs, actions)
    print(f"mnist1d-small plan: {len(plan.epochs)} epochs, cost {plan.cost:.4g}, target {plan.loss_target:g}; "
          f"{a.seeds} seeds from {a.first_seed}; load average {os.getloadavg()[0]:.2f}")
    print("| execution | wall s | seed-epochs | seed-epochs/s | ratio | mean cost | decisions |")
    print("|---|---|---|---|---|---|---|")
    base = out["loop"][1] / out["loop"][0]
    for how, (secs, epochs, finals, costs, actions) in out.items():
        rate = epochs / secs
        print(f"| {'per-seed loop' if how == 'loop' else 'one stack'} | {secs:.1f} | {epochs} | {rate:.3f} | "
              f"{rate / base:.2f} | {np.mean(costs):.4g} | " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items()))
              + " |")
    print(f"largest |final test loss, stack − loop|: {np.max(np.abs(out['stack'][2] - out['loop'][2])):.2e}")


if __name__ == "__main__":
    main()
