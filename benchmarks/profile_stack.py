"""Where a stack's epoch goes: `torch.profiler` over one epoch of S seeds of `depl profile`'s job, one thread.

    PYTHONPATH=src python benchmarks/profile_stack.py [--scenario mnist1d-small] [--version full] [--seeds 16]

The job `depl profile SCENARIO --version VERSION --epochs 1` trains (each seed on its own draw where the scenario's
runs draw their data), trained once untimed (imports, data), then once under the profiler; prints the operators
by their own CPU time and the share of the epoch each takes.
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="mnist1d-small")
    ap.add_argument("--version", default="full")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--rows", type=int, default=12)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from depl.scenario import load_scenario
    from depl.train.engine.profile import experiment_job, experiments
    from depl.train.engine.vectorised import walk_plan_stack

    torch.set_num_threads(1)
    s = load_scenario(a.scenario)
    job = experiment_job(s, [d.name for d in s.datasets], experiments(s, [a.version], [1.0], [], 1)[0], 1)
    seeds = list(range(a.seeds))
    walk_plan_stack(job, seeds)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        walk_plan_stack(job, seeds)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops)
    print(f"{a.scenario} {a.version}, a stack of {a.seeds} seeds, one epoch: {total / 1e6:.2f} s of CPU, by operator:")
    for e in ops[:a.rows]:
        print(f"  {e.key:<40} {e.self_cpu_time_total / total:6.1%}  {e.count:6d} calls")


if __name__ == "__main__":
    main()
