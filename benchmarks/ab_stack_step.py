"""A stack's local epoch under this checkout's kernels against another revision's, interleaved in one process.

    PYTHONPATH=src python benchmarks/ab_stack_step.py [--base main] [--seeds 16] [--repeats 7]

`depl profile`'s job of mnist1d-small's `full` net (each seed on its own draw), node 0 of 2: one
`local_epoch_stack` (every mini-batch step of the node's samples) of the same stack, from the same weights, under
`src/depl/train/engine/vectorised.py` as it is here (B) and as it was at revision BASE (A), one thread, in turn A, B, A,
B…; prints each one's CPU time per epoch (`time.process_time`), medians and spreads (max − min), the ratio of the
medians, and the largest difference of the two epochs' trained weights and losses.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def load_at(rev: str):
    """depl.train.engine.vectorised as it was at `rev`, as the module depl.train.engine._vectorised_at."""
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(["git", "show", f"{rev}:src/depl/train/engine/vectorised.py"], cwd=root, capture_output=True,
                       text=True)
    if r.returncode != 0:
        print(f"--base {rev}: no src/depl/train/engine/vectorised.py there ({r.stderr.strip() or 'git show failed'})",
              file=sys.stderr)
        sys.exit(2)
    text = r.stdout
    path = Path(tempfile.mkdtemp()) / "vectorised_at.py"
    path.write_text(text)
    name = "depl.train.engine._vectorised_at"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--scenario", default="mnist1d-small")
    ap.add_argument("--version", default="full")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    import torch

    from depl.scenario import load_scenario
    from depl.train.engine import vectorised as new
    from depl.train.engine.federation import TRAIN_STREAM, derive_seed, initial_model
    from depl.train.engine.profile import experiment_job, experiments

    old = load_at(a.base)
    torch.set_num_threads(1)
    s = load_scenario(a.scenario)
    job = experiment_job(s, [d.name for d in s.datasets], experiments(s, [a.version], [1.0], [], 1)[0], 1)
    seeds = list(range(a.seeds))
    data = new.StackData(job, seeds)
    x, y = data.node(2, 0)
    models = [initial_model(job, sd) for sd in seeds]
    order = [derive_seed(sd, TRAIN_STREAM, 1, 0) for sd in seeds]

    def epoch(mod):
        stack = mod.Stack(models)
        t = time.process_time()
        loss = mod.local_epoch_stack(stack, x, y, job.options, order, 1, 1, data.own)
        return time.process_time() - t, stack.params, loss

    epoch(old), epoch(new)   # warm
    times = {"A": [], "B": []}
    for _ in range(a.repeats):
        for k, mod in (("A", old), ("B", new)):
            times[k].append(epoch(mod)[0])
    _, pa, la = epoch(old)
    _, pb, lb = epoch(new)
    diff = max(float((pa[k] - pb[k]).abs().max()) for k in pa)
    steps = -(-y.shape[-1] // job.options.batch_size)
    print(f"{a.scenario} {a.version}, a stack of {a.seeds} seeds, {steps} steps, one thread, {a.repeats} rounds")
    for k, name in (("A", f"{a.base}"), ("B", "this checkout")):
        v = times[k]
        print(f"  {k} {name:<14} median {statistics.median(v):.3f} s  spread {max(v) - min(v):.3f}  "
              f"({' '.join(f'{t:.3f}' for t in v)})")
    print(f"  B / A = {statistics.median(times['B']) / statistics.median(times['A']):.3f}; "
          f"weights differ by ≤ {diff:.2e}, losses by ≤ {float((la - lb).abs().max()):.2e}")


if __name__ == "__main__":
    main()
