"""Ask the loss law directly: the law of ℓ(K) for a schedule the user writes.

A schedule is ``version:epochs`` segments in order, e.g. ``full:10,pruned-0.5:20``
(10 epochs of `full`, then 20 of `pruned-0.5`).  The quantile is certified the
way a plan's is: the upper end of the FFT lattice's bracket (depl.dist).

>>> from depl.scenario import load_scenario
>>> p = predict(load_scenario("paper-alexnet"), parse_schedule("intermediate:20"))
>>> p.epochs, p.quantile, p.loss_quantile >= p.loss_mean
(20, 0.99, True)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .loss import loss_model_for
from .loss.calibrated import CalibratedDistribution
from .scenario import Scenario


class ScheduleError(ValueError):
    """A schedule that cannot be used; the message is meant for the user."""


# The law of ℓ(K) is built epoch by epoch on an FFT lattice that widens with K
# (depl.dist.sum_distribution): time and memory grow about as K². On a 2-core
# machine K = 200 takes 13 s and 0.2 GB, K = 800 takes 107 s and 0.56 GB, so a
# longer schedule is refused before anything is allocated.
MAX_EPOCHS = 1000
_EPOCHS = re.compile(r"[0-9]+")  # ASCII digits only: int() would take "3_000" and "٣"


def parse_schedule(text: str) -> list[str]:
    """``"a:3,b:2"`` → ``["a", "a", "a", "b", "b"]``; at most MAX_EPOCHS epochs in all."""
    segments: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        name, sep, n = part.rpartition(":")
        if not sep or not name.strip():
            raise ScheduleError(f"schedule {text!r}: segment {part!r} is not VERSION:EPOCHS (e.g. full:10)")
        if not _EPOCHS.fullmatch(n.strip()):
            raise ScheduleError(f"schedule {text!r}: segment {part!r}: {n!r} is not a whole number of epochs")
        k = int(n)
        if k < 1:
            raise ScheduleError(f"schedule {text!r}: segment {part!r}: a segment has at least one epoch")
        segments.append((name.strip(), k))
    total = sum(k for _, k in segments)
    if total > MAX_EPOCHS:
        raise ScheduleError(f"schedule {text!r}: K = {total} epochs; predict computes the law of ℓ(K) "
                            f"for K ≤ {MAX_EPOCHS} (its cost grows as K²)")
    return [name for name, k in segments for _ in range(k)]


@dataclass(frozen=True)
class Prediction:
    scenario: str
    schedule: list[list]              # [[version, epochs], ...] in order
    epochs: int                       # K
    datasets: list[str]
    phi: float                        # φ(S) of the datasets' samples
    quantile: float                   # q
    loss_quantile: float              # certified upper bound on the q-quantile of ℓ(K)
    loss_quantile_bounds: tuple[float, float]
    loss_mean: float
    loss_std: float
    band: tuple[float, float]         # 1st and 99th percentiles of ℓ(K)
    target: float
    p_meet: tuple[float, float]       # certified bracket of P(ℓ(K) ≤ target)
    band_low_law: str = "law"         # whose 1st percentile: "law", or "as fitted" (a calibrated law's base)

    def to_json(self) -> dict:
        d = asdict(self)
        d["loss_quantile_bounds"] = list(self.loss_quantile_bounds)
        d["band"] = list(self.band)
        d["p_meet"] = list(self.p_meet)
        return d


def predict(s: Scenario, schedule: list[str], quantile: float | None = None,
            datasets: list[str] | None = None) -> Prediction:
    """The law of ℓ(K) after `schedule` on `datasets` (default: all of them); `quantile` default ω."""
    q = s.target.quantile if quantile is None else quantile
    if not 0 < q < 1:
        raise ScheduleError(f"quantile {q}: must be in (0, 1)")
    names = [d.name for d in s.datasets] if datasets is None else list(datasets)
    unknown = [d for d in names if d not in {x.name for x in s.datasets}]
    if unknown:
        raise ScheduleError(f"dataset {unknown[0]!r}: not a dataset of {s.name!r} "
                            f"({', '.join(d.name for d in s.datasets)})")
    loss = loss_model_for(s)
    bad = [m for m in schedule if m not in loss.model_names]
    if bad:
        raise ScheduleError(f"version {bad[0]!r}: not a model of {s.name!r} ({', '.join(loss.model_names)})")
    for a, b in zip(schedule, schedule[1:]):
        if a != b and not loss.can_switch(a, b):
            raise ScheduleError(f"switch {a} → {b}: {s.name!r} has no law for it (no [[switches]] entry)")
    segs: list[list] = []
    for m in schedule:
        if segs and segs[-1][0] == m:
            segs[-1][1] += 1
        else:
            segs.append([m, 1])
    phi = s.phi(s.samples(names))
    d = loss.distribution(schedule, phi)
    lo, hi = d.quantile_bounds(q)
    # A calibrated law certifies upper quantiles only (split conformal is one-sided: P(ℓ ≤ q̃_p) ≥ p); its low
    # quantiles read the lowest scores, which are 0 for runs below the least loss the law allows (then −∞).
    # The band's lower end is the law's own 1st percentile, said so (docs/fitting.md).
    calibrated = isinstance(d, CalibratedDistribution)
    low = float((d.base if calibrated else d).quantile(0.01))
    return Prediction(s.name, segs, len(schedule), names, float(phi), float(q), float(hi), (float(lo), float(hi)),
                      float(d.mean()), float(d.std()), (low, float(d.quantile(0.99))),
                      float(s.target.loss), d.cdf_bounds(s.target.loss), "as fitted" if calibrated else "law")
