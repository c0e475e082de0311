"""`Band`: the loss per epoch as a mean and a 1st–99th percentile band, over many runs.

One record for every band the package draws: Monte Carlo trajectories of a
plan (`depl.simulate`), measured seeds of a store (`depl.train.engine.bands`), the
planned and measured bands of a validation.  It sits below all of them and
imports only numpy, so the simulator and training both use it; the drawing
lives in `depl.report`.

>>> import numpy as np
>>> b = Band.of(np.array([[1.0, 0.5], [1.0, 0.75], [1.0, 1.0]]))
>>> b.mean.tolist(), b.runs, b.epochs.tolist()
([1.0, 0.75], 3, [0, 1])

A trajectory may be +∞ at an epoch: a calibrated law puts the share of its
calibration runs that lay above every loss the law allows beyond that loss
(depl.loss.calibrated).  The band keeps it: a mean over such runs is +∞, and
so is a percentile whose order statistics reach +∞ (`quantiles`; numpy's
would be NaN, with a warning) — never NaN.  A plot draws the band where it is
finite and says where it is not (`Band.infinite`, `Band.infinite_note`); a
`--json` output writes +∞ as null (depl.jsonout), so in a band null means +∞.

>>> b = Band.of(np.array([[1.0, np.inf], [1.0, 0.5], [1.0, 0.75]]))
>>> b.mean.tolist(), b.high.tolist(), b.infinite()
([1.0, inf], [1.0, inf], {'mean': [1], 'low': [], 'high': [1]})
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def quantiles(x, qs) -> np.ndarray:
    """numpy's (linear) quantiles `qs` of each column of `x` (runs × epochs; or of a 1-D `x`), also where +∞ (or −∞)
    values are among them: a quantile between two order statistics of which the upper is +∞ is +∞ (the lower
    −∞: −∞), one at an order statistic is that value — where numpy computes ∞ − ∞ and gives NaN.  Columns of
    finite values are numpy's, bit for bit; a column holding NaN gives NaN."""
    x = np.asarray(x, float)
    qs = np.asarray(qs, float)
    if x.ndim == 1:
        return quantiles(x[:, None], qs)[..., 0]
    finite = np.isfinite(x).all(axis=0)
    if finite.all():
        return np.quantile(x, qs, axis=0)
    out = np.empty(qs.shape + (x.shape[1],))
    if finite.any():
        out[..., finite] = np.quantile(x[:, finite], qs, axis=0)
    for j in np.flatnonzero(~finite):
        col = np.sort(x[:, j])  # NaN sorts last
        if np.isnan(col[-1]):
            out[..., j] = np.nan
            continue
        h = (col.size - 1) * np.atleast_1d(qs).ravel()
        i = np.floor(h).astype(int)
        t = h - i
        a, b = col[i], col[np.minimum(i + 1, col.size - 1)]
        v = a.copy()  # at an order statistic (t = 0) or between equal ones
        between = (t > 0) & (a != b)
        both = between & np.isfinite(a) & np.isfinite(b)
        diff, tb = b[both] - a[both], t[both]
        v[both] = np.where(tb >= 0.5, b[both] - diff * (1 - tb), a[both] + diff * tb)  # numpy's lerp
        v[between & np.isposinf(b)] = np.inf
        v[between & np.isneginf(a) & ~np.isposinf(b)] = -np.inf
        out[..., j] = v.reshape(qs.shape)
    return out


def epoch_ranges(epochs) -> str:
    """[1, 2, 3, 5] → "1–3, 5"."""
    out, run = [], []
    for k in map(int, epochs):
        if run and k == run[-1] + 1:
            run.append(k)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
        run = [k]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return ", ".join(out)


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

    def infinite(self) -> dict[str, list[int]]:
        """The epochs at which the mean, the low and the high percentile are +∞ (some trajectories are)."""
        return {name: [int(k) for k in self.epochs[np.isposinf(getattr(self, name))]]
                for name in ("mean", "low", "high")}

    def finite(self, name: str) -> np.ndarray:
        """`mean`, `low` or `high` with its non-finite values as NaN: what a plot draws (a gap where it is +∞)."""
        v = np.asarray(getattr(self, name), float)
        return np.where(np.isfinite(v), v, np.nan)

    def to_json(self) -> dict:
        """mean, low, high per epoch, and the epochs at which each is +∞ (`infinite`): in strict JSON (depl.jsonout)
        +∞ is written null, and `infinite` says which nulls are +∞."""
        return {"mean": self.mean.tolist(), "low": self.low.tolist(), "high": self.high.tolist(),
                "infinite": self.infinite()}

    def infinite_note(self, pct: tuple[str, str] = ("1st", "99th")) -> str:
        """Where the band is +∞, in words ("" where it is finite throughout): what a plot of it says."""
        inf = self.infinite()
        parts = [f"{what} +∞ at epoch{'s' if len(inf[key]) > 1 else ''} {epoch_ranges(inf[key])}"
                 for key, what in (("mean", "mean"), ("low", f"{pct[0]} pct"), ("high", f"{pct[1]} pct")) if inf[key]]
        return "; ".join(parts) + " (some runs +∞): drawn where finite" if parts else ""

    @classmethod
    def of(cls, trajectories: np.ndarray, epochs: np.ndarray | None = None, lo: float = 0.01, hi: float = 0.99,
           label: str = "", run_id: str = "") -> "Band":
        """The band of `trajectories` (runs × epochs); `epochs` defaults to 0, 1, …"""
        trajectories = np.asarray(trajectories, float)
        q = quantiles(trajectories, [lo, hi])
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
        q = np.array([quantiles(c, [lo, hi]) for c in cols])
        return cls(np.array([c.mean() for c in cols]), q[:, 0], q[:, 1], np.arange(1, n + 1), len(rows), label, run_id,
                   np.array([len(c) for c in cols]))


__all__ = ["Band", "quantiles", "epoch_ranges"]
