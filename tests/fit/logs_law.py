"""Training logs generated from a known law with numpy, written as a user's CSV would be."""

from __future__ import annotations

import csv
import math

import numpy as np

L0 = 2.3
# version → (floor, scale in epochs, log-sd): ℓ(k) = (f + (ℓ0 − f)·exp(−φ·k/scale))·exp(σ·Z)
LAW = {"big": (0.4, 5.0, 0.06), "small": (0.8, 3.0, 0.08)}


def phi(fraction: float) -> float:
    """φ(S) with S0 = the full data: ln(1 + f)/ln 2."""
    return math.log1p(fraction) / math.log(2.0)


def median(model: str, k, fraction: float = 1.0):
    f, scale, _ = LAW[model]
    return f + (L0 - f) * np.exp(-phi(fraction) * np.asarray(k, dtype=float) / scale)


def rows(seeds: int = 9, epochs: int = 12, switch_at: int = 6, rng=None) -> list[dict]:
    rng = rng or np.random.default_rng(0)
    runs = {"big-full": (["big"] * epochs, 1.0), "small-full": (["small"] * epochs, 1.0),
            "big-half": (["big"] * epochs, 0.5), "small-half": (["small"] * epochs, 0.5),
            "big-to-small": (["big"] * switch_at + ["small"] * (epochs - switch_at), 1.0)}
    out = []
    for run, (sched, frac) in runs.items():
        for seed in range(seeds):
            out.append({"run": run, "seed": seed, "epoch": 0, "model": sched[0], "test_loss": L0,
                        "data_fraction": frac, "nodes": 2, "test_accuracy": 0.1})
            for k, m in enumerate(sched, start=1):
                loss = float(median(m, k, frac) * math.exp(LAW[m][2] * rng.standard_normal()))
                out.append({"run": run, "seed": seed, "epoch": k, "model": m, "test_loss": loss,
                            "data_fraction": frac, "nodes": 2, "test_accuracy": 0.5})
    return out


def write_csv(path, data: list[dict], columns=None) -> None:
    columns = columns or list(data[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(data)
