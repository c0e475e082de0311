"""A seed-epoch's cost at 32 seeds against a 1-seed process's, whole `depl profile` processes, start-up cancelled.

    PYTHONPATH=src python benchmarks/bench_many_seeds.py [--scenario mnist1d-small] [--version full]
                                                         [--seeds 32] [--short 2] [--long 40] [--long-many 20]
                                                         [--rounds 1] [--how "--seed-batch 16 --workers 2"]
                                                         [--json FILE]

Every cell is a fresh `depl profile SCENARIO --version VERSION --seeds S --epochs E` process (start-up, data,
the automatic choice of how to train the seeds, training, the store: what a user waits for), timed from its
start to its exit.  A size's cost per seed-epoch is the difference of two lengths, so that what a process
pays once (Python and torch imports, data, the store, worker start-up) cancels:

* 1 seed: (T(1 seed, --long epochs) − T(1 seed, --short epochs)) / (--long − --short);
* S seeds: (T(S, --long-many) − T(S, --short)) / (S · (--long-many − --short)),

and the ratio printed is the first over the second: how many times more seed-epochs per second the S-seed
process trains once started.  The automatic choice measures in the first S-seed cell (a fresh cache folder
per benchmark; the long cell runs first): the seconds it spent measuring (`measured in X s`, printed by
`depl profile`) are taken off that cell, as a choice cached from an earlier run costs nothing.  The short
S-seed cell then trains the way the long one picked, named (`--seed-batch`, `--workers`, `--threads`): a job
that short is not measured (the loop), and the difference would not be one way's.  Both S-seed cells'
`seeds:` lines are printed, so that a reader sees they trained the same way.  `--how OPTIONS` names the way
for both S-seed cells instead (nothing measured), e.g. two workers where the automatic choice kept one.  The rounds are interleaved and each cost is the median of its rounds.

Prints the CPU model (/proc/cpuinfo, as `lscpu` names it), its cores and the load average at the start and at
the end beside the ratio: on a shared machine the numbers move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from depl.train.engine.autochoice import cpu_model  # the CPU's name, as the automatic choice records it


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


HOW = re.compile(r"seeds: (?:(?:stacks|batches) of (\d+) seeds|the per-seed loop)[^×]*× (\d+) workers? × (\d+) threads?")


def named(how: str) -> list[str]:
    """The options that train the seeds as a `seeds:` line says they were trained."""
    m = HOW.match(how)
    if m is None:
        sys.exit(f"cannot read how the seeds trained from {how!r}")
    return ["--seed-batch", m.group(1) or "1", "--workers", m.group(2), "--threads", m.group(3)]


def cell(a, seeds: int, epochs: int, folder: Path, env: dict, options: list[str] = ()) -> dict:
    out = folder / f"s{seeds}-e{epochs}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "depl", "profile", a.scenario, "--version", a.version, "--seeds", str(seeds),
           "--epochs", str(epochs), "--out", str(out), *options]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    said = r.stdout.replace("\n", " ")
    how = next((line for line in r.stdout.splitlines() if line.startswith("seeds:")), "")
    got = re.search(r"— measured in ([0-9.]+) s", said)
    choosing = float(got.group(1)) if got else 0.0
    c = {"seeds": seeds, "epochs": epochs, "seconds": seconds, "choosing": choosing,
         "training": seconds - choosing, "how": how, "load": os.getloadavg()[0]}
    print(f"  {seeds:3d} seeds × {epochs:3d} epochs: {seconds:7.1f} s"
          + (f" ({choosing:.1f} s of it choosing, taken off)" if choosing else "")
          + f", load {c['load']:.2f}" + (f"\n      {how[:200]}" if seeds > 1 and how else ""), flush=True)
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="mnist1d-small")
    ap.add_argument("--version", default="full")
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--short", type=int, default=2, help="epochs of the short cells (both sizes)")
    ap.add_argument("--long", type=int, default=40, help="epochs of the 1-seed long cell")
    ap.add_argument("--long-many", type=int, default=20, help="epochs of the S-seed long cell")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--how", default="", help="options naming how the S-seed cells train (default: measured)")
    ap.add_argument("--json", help="also write the cells and the result here")
    a = ap.parse_args()
    if not (0 < a.short < a.long and a.short < a.long_many and a.seeds > 1 and a.rounds > 0):
        sys.exit("need 0 < --short < --long, --short < --long-many, --seeds > 1 and --rounds > 0")
    folder = Path(tempfile.mkdtemp(prefix="bench-many-seeds-"))
    env = {**os.environ, "DEPL_CACHE": str(folder / "cache")}
    env.pop("DEPL_AUTOCHOICE", None)   # the automatic choice, as a user's run makes it
    # MNIST-1D's generated samples and pool made once before the first cell, as after any first run
    subprocess.run([sys.executable, "-c", "from depl.train.task.data import mnist1d, mnist1d_pool; "
                    "mnist1d(); mnist1d_pool()"], check=True, env=env)
    start = load()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {start} (1, 5, 15 min) at the start; "
          f"depl profile {a.scenario} --version {a.version}: 1 seed × {a.short} and {a.long} epochs, "
          f"{a.seeds} seeds × {a.short} and {a.long_many} epochs; {a.rounds} round(s)")
    cells = []
    for r in range(a.rounds):
        print(f"round {r + 1}:")
        for seeds, epochs in ((1, a.short), (1, a.long), (a.seeds, a.long_many)):
            cells.append(cell(a, seeds, epochs, folder, env, a.how.split() if seeds > 1 else ()) | {"round": r + 1})
        cells.append(cell(a, a.seeds, a.short, folder, env, named(cells[-1]["how"])) | {"round": r + 1})

    def per_seed_epoch(seeds: int, long: int, rnd: int) -> float:
        t = {c["epochs"]: c["training"] for c in cells if c["seeds"] == seeds and c["round"] == rnd}
        return (t[long] - t[a.short]) / (seeds * (long - a.short))

    one = [per_seed_epoch(1, a.long, r + 1) for r in range(a.rounds)]
    many = [per_seed_epoch(a.seeds, a.long_many, r + 1) for r in range(a.rounds)]
    ratio = statistics.median(one) / statistics.median(many)
    end = load()
    print(f"a seed-epoch: {statistics.median(one):.3f} s in a 1-seed process, {statistics.median(many):.3f} s at "
          f"{a.seeds} seeds (start-up cancelled; rounds: " + ", ".join(
              f"{o / m:.2f}×" for o, m in zip(one, many)) + ")")
    print(f"{ratio:.2f}× per seed-epoch at {a.seeds} seeds on {cpu_model()} ({os.cpu_count()} cores), "
          f"load average {start} at the start, {end} at the end")
    if a.json:
        Path(a.json).write_text(json.dumps({"cpu": cpu_model(), "cores": os.cpu_count(), "load_start": start,
                                            "load_end": end, "cells": cells, "one": one, "many": many,
                                            "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
