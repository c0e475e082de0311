"""Ask the loss law directly: the law of ℓ(K) for a schedule the user writes.

A schedule is ``version:epochs`` segments in order, e.g. ``full:10,pruned-0.5:20``
(10 epochs of `full`, then 20 of `pruned-0.5`).  The quantile is certified the
way a plan's is: the upper end of the FFT lattice's bracket (depl.dist).

A level outside the law's range is said in words, not as a bracket: below the
law's lowest representable loss (a calibrated law whose calibration runs at
that level scored below every loss it allows: its quantile is −∞), or above
its highest (a lattice law holds 1 − δ of the mass; a calibrated one reaches
levels up to n/(n+1) of its n scores) — `quantile_range` and `notes`; the
bound is then ±∞ (null in --json).  A negative mean or quantile is noted too:
a loss is never below 0, and no plan is certified where the law says so.

>>> from depl.scenario import load_scenario
>>> p = predict(load_scenario("paper-alexnet"), parse_schedule("intermediate:20"))
>>> p.epochs, p.quantile, p.loss_quantile >= p.loss_mean
(20, 0.99, True)
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from .loss import loss_model_for
from .loss.calibrated import CalibratedDistribution
from .scenario import Scenario
from .certificate import conformal


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
    quantile_range: str = "within"    # "within" the law's range; "below" its lowest / "above" its highest loss
    notes: tuple[str, ...] = ()       # what the numbers cannot say, in words (out of range, a negative loss)
    estimate: float | None = None     # where no bound is certified: the law's own estimate of the q-quantile …
    estimate_by: str = ""             # … and which law gave it, in words (labelled: an estimate, no certificate)

    def quantile_words(self) -> str:
        """What is known of the q-quantile, after "q-quantile of ℓ(K)": a bound with its exact bracket, or, out of
        the law's range, why there is none — never an empty or inverted bracket."""
        lo, hi = self.loss_quantile_bounds
        if self.quantile_range == "within":
            return f"≤ {signed(self.loss_quantile)}  (exact bracket [{signed(lo)}, {signed(hi)}])"
        if self.estimate is not None:
            return f"≈ {signed(self.estimate)}  (the law's estimate, {self.estimate_by}; {self.notes[0]})"
        return self.notes[0]

    def to_json(self) -> dict:
        d = asdict(self)
        d["loss_quantile_bounds"] = list(self.loss_quantile_bounds)
        d["band"] = list(self.band)
        d["p_meet"] = list(self.p_meet)
        d["notes"] = list(self.notes)
        return d


def signed(x: float, digits: int = 5) -> str:
    """A loss to `digits` significant digits, ±∞ as ±∞ (Python writes inf, which a rich console takes for markup)."""
    return ("+∞" if x > 0 else "−∞") if math.isinf(x) else f"{x:.{digits}g}"


def _out_of_range(d, q: float, epochs: int) -> tuple[str, list[str]]:
    """("within"/"below"/"above", the notes) for the q-quantile of the law `d` (calibrated or not)."""
    lo, hi = d.quantile_bounds(q)
    calibrated = isinstance(d, CalibratedDistribution)
    grid = d.base if calibrated else d
    qs = f"{q:.10g}"
    if hi == -math.inf:
        low = float(grid.support[0]) if grid.pmf.size else math.nan
        why = (": the calibration runs at this level scored below every loss the law allows" if calibrated else "")
        return "below", [f"below the law's lowest representable loss ({signed(low)}){why} — no certified bound, "
                         "no bracket"]
    if hi == math.inf:
        if calibrated and float(d.level(q)) >= 1.0:
            n = d.scores.size
            why = _not_certified(d, q, epochs)
            if why:
                return "above", [f"not certified with this law's calibration: {why}"]
            if math.ceil((n + 1) * q - 1e-9) > n:
                why = (f"its {n} epoch-{epochs} calibration scores reach levels up to n/(n+1) = {n / (n + 1):.4g}; "
                       f"q = {qs} needs at least {max(1, math.ceil(q / (1 - q) - 1e-9)):.4g}")
            else:
                why = f"over {1 - q:.3g} of its calibration runs at epoch {epochs} lay above every loss the law allows"
            return "above", [f"not certified with this law's calibration: {why}"]
        top = float(grid.support[-1] + grid.n_terms * grid.h) if grid.pmf.size else math.nan
        return "above", [f"above the law's highest representable loss ({signed(top)}): not certified with this "
                         f"law's grid (it holds 1 − {grid.delta:.2g} of the mass)"]
    return "within", []


def _not_certified(d: CalibratedDistribution, q: float, epochs: int) -> str | None:
    """Why the calibration certifies no q-quantile where its own experiments decide (too few runs of this schedule
    for the confidence 1 − α, or the schedule refused by the fixed sequence); None where the pooled scores decide."""
    n = min((g.size for g in d.own), default=0)
    if d.own and d.alpha is not None and n < conformal.pac_scores_needed(q, d.alpha):
        return (f"{n} calibration runs of this schedule; a certificate at confidence {1 - d.alpha:g} takes at "
                f"least {conformal.pac_scores_needed(q, d.alpha)} of them (every one at or below the level)")
    if d.refused is not None and q >= d.refused - 1e-12:
        if not d.own:
            return ("no calibration experiment ran this schedule (profile it, `depl profile --first-seed N`, then "
                    "`depl calibrate`)")
        return ("its experiment's fixed sequence stopped before this schedule (a schedule the law ranks likelier "
                "failed first; docs/certificate.md)")
    if d.own and d.alpha is not None:
        return f"its {n} calibration runs of this schedule at epoch {epochs} do not reach it at confidence {1 - d.alpha:g}"
    return None


def estimate(d, q: float) -> tuple[float | None, str]:
    """The law's own estimate of the q-quantile where no bound is certified: the law recalibrated by the marginal
    split-conformal rank of its pooled calibration scores (an estimate on average over calibration draws, no
    confidence), else the law as fitted; (None, "") where neither is finite."""
    if isinstance(d, CalibratedDistribution):
        marginal = CalibratedDistribution(d.base, d.scores)
        x = float(marginal.quantile(q))
        if math.isfinite(x):
            return x, f"its {d.scores.size} pooled calibration runs at the marginal split-conformal rank"
        d = d.base
    x = float(d.quantile(q))
    return (x, "the law as fitted") if math.isfinite(x) else (None, "")


def _negative(mean: float, hi: float, q: float) -> list[str]:
    """Notes on a negative mean or quantile: a loss is never below 0, so the law is out of its range there."""
    what = [w for w, v in (("mean", mean), (f"{q:.10g}-quantile", hi)) if math.isfinite(v) and v < 0]
    if not what:
        return []
    return [f"negative {' and '.join(what)}: a loss is never below 0, so the law is extrapolated past where it "
            "holds here (no plan is certified on such a schedule)"]


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
    where, notes = _out_of_range(d, q, len(schedule))
    guess, by = estimate(d, q) if where == "above" else (None, "")
    mean = float(d.mean())
    return Prediction(s.name, segs, len(schedule), names, float(phi), float(q), float(hi), (float(lo), float(hi)),
                      mean, float(d.std()), (low, float(d.quantile(0.99))),
                      float(s.target.loss), d.cdf_bounds(s.target.loss), "as fitted" if calibrated else "law",
                      where, tuple(notes + _negative(mean, float(hi), q)), guess, by)
