"""Seed-epochs per second of fashion-small on the CPU and on a CUDA GPU, at 1, 8 and 32 stacked seeds, side by side.

    PYTHONPATH=src python benchmarks/bench_gpu.py [--device cpu,cuda] [--seeds 1,8,32] [--short 1] [--long 4]
                                                  [--threads N] [--json FILE]

Every cell is a fresh `depl profile fashion-small --version full --fractions 1 --nodes 2 --seeds S --epochs E
--seed-batch S --workers 1 --threads N --device D` process: the built-in AlexNet-style CNN on 2,000 Fashion-MNIST
images a seed, FedAvg over 2 nodes, the S seeds as one stack in one process, on the CPU (N torch threads, by
default one per core) or on the GPU.  Start-up is cancelled as in bench_many_seeds.py (whose `cell` times every
process, start to exit): a cost per seed-epoch is

    (T(S seeds, --long epochs) − T(S seeds, --short epochs)) / (S · (--long − --short)),

so that what a process pays once (Python and torch imports, CUDA's initialisation, reading Fashion-MNIST, the
store) cancels; its inverse is the rate printed.  One process before the first cell reads Fashion-MNIST (and
starts CUDA) once, as after any first run, so that no cell pays a cold disk.

Prints the GPU's name (torch.cuda.get_device_name), the CPU model and its cores, the load average at the start
and at the end, and for every size the two rates and the ratio GPU/CPU.  `--device cpu` measures the CPU alone
(no GPU needed); `--device cuda` asked where torch sees no CUDA device is refused in one line, exit 2.  With the
defaults the whole script takes a few minutes on a machine with a GPU (12 processes; the CPU's 32-seed cells are
the longest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_many_seeds import cell, load
from depl.scenario import load_scenario
from depl.train.engine.autochoice import cpu_model

DEVICES = ("cpu", "cuda")


def refuse(message: str) -> None:
    print(f"bench_gpu.py: {message}", file=sys.stderr)
    sys.exit(2)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu,cuda", help="cpu, cuda or both (cpu,cuda)")
    ap.add_argument("--seeds", default="1,8,32", help="stack sizes, separated by commas")
    ap.add_argument("--short", type=int, default=1, help="epochs of the short cells")
    ap.add_argument("--long", type=int, default=4, help="epochs of the long cells (at most fashion-small's max_epochs)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of every cell")
    ap.add_argument("--json", help="also write the cells and the rates here")
    a = ap.parse_args(argv)
    asked = {d.strip() for d in a.device.split(",") if d.strip()}
    a.devices = [d for d in DEVICES if d in asked]   # the CPU first, each once
    if asked - set(DEVICES) or not asked:
        refuse(f"--device {a.device!r}: choose cpu, cuda or cpu,cuda")
    try:
        a.sizes = [int(v) for v in a.seeds.split(",")]
    except ValueError:
        a.sizes = []
    if not a.sizes or min(a.sizes) < 1:
        refuse(f"--seeds {a.seeds!r}: expected positive whole numbers separated by commas, e.g. 1,8,32")
    most = load_scenario("fashion-small").max_epochs
    if not 0 < a.short < a.long <= most or a.threads < 1:
        refuse(f"need 0 < --short < --long <= {most} (fashion-small's max_epochs) and --threads >= 1")
    a.scenario, a.version = "fashion-small", "full"   # what bench_many_seeds.cell runs
    return a


def gpu_name(devices: list[str]) -> str | None:
    """The GPU's name where cuda is asked; refused in one line where torch sees no CUDA device."""
    if "cuda" not in devices:
        return None
    import torch

    if not torch.cuda.is_available():
        refuse(f"--device cuda: torch {torch.__version__} sees no CUDA device (CUDA in this build: "
               f"{torch.version.cuda or 'none'}); run it with --device cpu here, or on a machine with a GPU")
    return torch.cuda.get_device_name(0)


def warm(devices: list[str], env: dict) -> None:
    """Fashion-MNIST read (and CUDA started) once before the first cell: no cell pays a cold disk."""
    code = ("import sys\nfrom depl.train.task.data import DataError, load_source\n"
            "try:\n    load_source('fashion-mnist')\nexcept DataError as e:\n    sys.exit(str(e))\n"
            + ("import torch\ntorch.zeros(1, device='cuda')\n" if "cuda" in devices else ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        refuse((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    gpu = gpu_name(a.devices)
    folder = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    env = {**os.environ, "DEPL_CACHE": str(folder / "cache")}
    warm(a.devices, env)
    start = load()
    print(f"GPU: {gpu or 'not measured'}; CPU: {cpu_model()}, {os.cpu_count()} cores; torch threads: {a.threads} a "
          f"cell; load average {start} (1, 5, 15 min) at the start; depl profile fashion-small --version full, "
          f"stacks of {a.seeds} seeds × {a.short} and {a.long} epochs on {' and '.join(a.devices)}", flush=True)
    cells, rates = [], {d: {} for d in a.devices}
    for seeds in a.sizes:
        for device in a.devices:
            options = ["--fractions", "1", "--nodes", "2", "--seed-batch", str(seeds), "--workers", "1",
                       "--threads", str(a.threads), "--device", device]
            print(f"{device}:", flush=True)
            t = {}
            for epochs in (a.long, a.short):
                c = cell(a, seeds, epochs, folder, env, options) | {"device": device}
                cells.append(c)
                t[epochs] = c["training"]
            gap = t[a.long] - t[a.short]   # none where the load moved more than the longer cell trained
            rates[device][seeds] = seeds * (a.long - a.short) / gap if gap > 0 else None
    end = load()
    head = f"{'seeds':>5} | " + " | ".join(f"{d + ' s-ep/s':>13}" for d in a.devices)
    both = len(a.devices) == 2
    print(head + (" | GPU/CPU" if both else ""))
    print("-" * (len(head) + 10 * both))
    ratios = {}
    for seeds in a.sizes:
        got = [rates[d][seeds] for d in a.devices]
        line = f"{seeds:>5} | " + " | ".join(f"{r:>13.2f}" if r else f"{'—':>13}" for r in got)
        if both:
            ratios[seeds] = rates["cuda"][seeds] / rates["cpu"][seeds] if all(got) else None
            line += f" | {ratios[seeds]:6.2f}×" if ratios[seeds] else " |      —"
        print(line)
    if None in (r for v in rates.values() for r in v.values()):
        print("—: the long cell took no longer than the short one (the load moved): raise --long")
    print(f"seed-epochs per second, start-up cancelled; GPU {gpu or 'not measured'}, CPU {cpu_model()} "
          f"({os.cpu_count()} cores, torch threads: "
          f"{a.threads}); load average {start} at the start, {end} at the end")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "gpu": gpu, "cpu": cpu_model(), "cores": os.cpu_count(), "threads": a.threads, "short": a.short,
            "long": a.long, "load_start": start, "load_end": end, "cells": cells,
            "rates": {d: {str(s): r for s, r in v.items()} for d, v in rates.items()},
            "ratio": {str(s): r for s, r in ratios.items()}}, indent=1))


if __name__ == "__main__":
    main()
