"""`Band`: the loss per epoch as a mean and a 1st–99th percentile band, over many runs.

One record for every band the package draws: Monte Carlo trajectories of a
plan (`depl.simulate`), measured seeds of a store (`depl.train.plots`), the
planned and measured bands of a validation.  It sits below all of them and
imports only numpy, so the simulator and training both use it; the drawing
lives in `depl.report`.

>>> import numpy as np
>>> b = Band.of(np.array([[1.0, 0.5], [1.0, 0.75], [1.0, 1.0]]))
>>> b.mean.tolist(), b.runs, b.epochs.tolist()
([1.0, 0.75], 3, [0, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Band:
    """Per epoch: mean and the low/high percentiles (1st/99th unless made otherwise) of the loss."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    epochs: np.ndarray  # the epoch number of every column
    runs: int  # trajectories (Monte Carlo runs or measured seeds) behind it
    label: str = ""
    run_id: str = ""
    counts: np.ndarray | None = None  # trajectories behind each epoch, where they differ (`of_ragged`); else `runs`

    def seeds(self) -> list[int]:
        """The trajectories behind each epoch's mean and percentiles."""
        return [int(c) for c in self.counts] if self.counts is not None else [self.runs] * len(self.epochs)

    @classmethod
    def of(cls, trajectories: np.ndarray, epochs: np.ndarray | None = None, lo: float = 0.01, hi: float = 0.99,
           label: str = "", run_id: str = "") -> "Band":
        """The band of `trajectories` (runs × epochs); `epochs` defaults to 0, 1, …"""
        trajectories = np.asarray(trajectories, float)
        q = np.quantile(trajectories, [lo, hi], axis=0)
        k = np.arange(trajectories.shape[1]) if epochs is None else np.asarray(epochs)
        return cls(trajectories.mean(axis=0), q[0], q[1], k, int(trajectories.shape[0]), label, run_id)

    @classmethod
    def of_ragged(cls, trajectories: list, lo: float = 0.01, hi: float = 0.99, label: str = "",
                  run_id: str = "") -> "Band":
        """The band of trajectories of different lengths (an adaptive run's seeds stop at different epochs):
        at epoch k (1, 2, …) over the trajectories that reached it."""
        rows = [np.asarray(t, float) for t in trajectories if len(t)]
        n = max(len(t) for t in rows)
        cols = [np.array([t[k] for t in rows if len(t) > k]) for k in range(n)]
        q = np.array([np.quantile(c, [lo, hi]) for c in cols])
        return cls(np.array([c.mean() for c in cols]), q[:, 0], q[:, 1], np.arange(1, n + 1), len(rows), label, run_id,
                   np.array([len(c) for c in cols]))


__all__ = ["Band"]
