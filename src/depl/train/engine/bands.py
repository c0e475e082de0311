"""Measured loss bands (paper Fig. 2 style): mean and 1st–99th percentile per epoch.

Plain functions over a finished store; nothing here trains and nothing draws
(`depl.report.plots.plot_measured_bands` draws them).
"""

from __future__ import annotations

import numpy as np

from ...band import Band
from ...runspec import run_spec
from ...store import Store


def run_label(run: dict) -> str:
    spec = run_spec(run, "the store")
    exp = spec.experiment
    if exp:
        if exp.kind == "switch":
            return f"{exp.version} → {exp.to} after {exp.switch_after}"
        return exp.version if exp.fraction == 1.0 else f"{exp.version} @ {exp.fraction:g} data"
    return f"{run['run_id']} ({spec.backend or '?'})"


def band(store: Store, run: dict, q: tuple[float, float] = (1.0, 99.0)) -> Band | None:
    """The band of one run over its seeds, for the epochs every seed has reached (diverged seeds left out);
    an adaptive run's (its seeds end where they stop): at every epoch over the seeds that trained it."""
    losses = _kept(store, run)
    if not losses:
        return None
    if store.decisions(run["run_id"]) and any(losses.values()):
        return Band.of_ragged(list(losses.values()), q[0] / 100, q[1] / 100, label=run_label(run) + ", seeds training",
                              run_id=run["run_id"])
    k = min(len(v) for v in losses.values())
    if k == 0:
        return None
    a = np.array([v[:k] for v in losses.values()])
    return Band.of(a, np.arange(1, k + 1), q[0] / 100, q[1] / 100, label=run_label(run), run_id=run["run_id"])


def ends(store: Store, run: dict) -> tuple[np.ndarray, np.ndarray]:
    """(each seed's last test loss, its number of epochs), diverged seeds left out: an adaptive run's seeds end
    at different epochs, and its final losses are these, not the band's at the epoch every seed reached."""
    losses = [v for v in _kept(store, run).values() if v]
    return np.array([v[-1] for v in losses]), np.array([len(v) for v in losses], dtype=int)


def _kept(store: Store, run: dict) -> dict[int, list[float]]:
    """Each seed's test losses by epoch, the diverged seeds left out."""
    gone = store.diverged(run["run_id"])
    return {s: v for s, v in store.losses(run["run_id"]).items() if s not in gone}


def bands(store: Store, kind: str | None = None, experiment: str | None = "version",
          fraction: float | None = 1.0) -> list[Band]:
    """Bands of the store's runs; for profiles, by default the versions at the full data."""
    out = []
    for run in store.runs(kind):
        exp = run_spec(run, store.path).experiment
        if exp is not None:
            if experiment is not None and exp.kind != experiment:
                continue
            if fraction is not None and exp.kind == "version" and exp.fraction != fraction:
                continue
        b = band(store, run)
        if b is not None:
            out.append(b)
    return out
