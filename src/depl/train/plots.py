"""Measured loss bands (paper Fig. 2 style): mean and 1st–99th percentile per epoch.

Plain functions over a finished store; nothing here trains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..store import Store


@dataclass
class Band:
    label: str
    run_id: str
    seeds: int
    epochs: np.ndarray
    mean: np.ndarray
    lo: np.ndarray      # 1st percentile
    hi: np.ndarray      # 99th percentile
    std: np.ndarray


def run_label(run: dict) -> str:
    spec = run["spec"]
    exp = spec.get("experiment")
    if exp:
        if exp["kind"] == "switch":
            return f"{exp['version']} → {exp['to']} after {exp['switch_after']}"
        return exp["version"] if exp["fraction"] == 1.0 else f"{exp['version']} @ {exp['fraction']:g} data"
    return f"{run['run_id']} ({spec.get('backend', '?')})"


def band(store: Store, run: dict, q: tuple[float, float] = (1.0, 99.0)) -> Band | None:
    """The band of one run over its seeds, for the epochs every seed has reached (diverged seeds left out)."""
    gone = store.diverged(run["run_id"])
    losses = {s: v for s, v in store.losses(run["run_id"]).items() if s not in gone}
    if not losses:
        return None
    k = min(len(v) for v in losses.values())
    if k == 0:
        return None
    a = np.array([v[:k] for v in losses.values()])
    return Band(run_label(run), run["run_id"], a.shape[0], np.arange(1, k + 1), a.mean(0),
                np.percentile(a, q[0], axis=0), np.percentile(a, q[1], axis=0), a.std(0))


def bands(store: Store, kind: str | None = None, experiment: str | None = "version",
          fraction: float | None = 1.0) -> list[Band]:
    """Bands of the store's runs; for profiles, by default the versions at the full data."""
    out = []
    for run in store.runs(kind):
        exp = run["spec"].get("experiment")
        if exp is not None:
            if experiment is not None and exp["kind"] != experiment:
                continue
            if fraction is not None and exp["kind"] == "version" and exp["fraction"] != fraction:
                continue
        b = band(store, run)
        if b is not None:
            out.append(b)
    return out


def plot_bands(bs: list[Band], path: str, title: str = "measured test loss: mean and 1st–99th percentile") -> None:
    """Fig. 2 style: one shaded 1–99% band and a mean line per run (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax, ax2 = axes
    for i, b in enumerate(bs):
        c = f"C{i % 10}"
        ax.fill_between(b.epochs, b.lo, b.hi, color=c, alpha=0.25, linewidth=0)
        ax.plot(b.epochs, b.mean, color=c, label=f"{b.label} ({b.seeds} seeds)")
        ax2.plot(b.epochs, b.hi - b.lo, color=c, label=b.label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test loss")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("width of the 1–99% band")
    ax2.set_yscale("log")
    ax2.set_title("spread per version", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
