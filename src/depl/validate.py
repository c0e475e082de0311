"""A plan against real runs on held-out seeds: does its guarantee hold?

A plan promises P(ℓ(K) ≤ ℓmax) ≥ ω.  Run for real over n seeds that the loss
model was not fitted on, the number of runs meeting ℓmax is Binomial(n, p);
the one-sided (1 − α) Clopper–Pearson bounds of p (exact, at the plan's α) give one of
the three verdicts every command uses: certified (the lower bound reaches ω),
refuted (the upper bound lies below ω) or undecided.  The measured band (mean and 1–99%
per epoch) is drawn over the band the loss model plans (Monte Carlo) by
`depl.report.plots.plot_validation`.

Everything "planned" — the band, its mean, the law's quantile — comes
from one law, the one the plan was made with: a scenario whose law predicts
another ℓ(K) for the plan is refused (`law_mismatch`), so the report's text
and its plot cannot disagree.

>>> import numpy as np
>>> from depl.certificate import DEFAULT_ALPHA
>>> v = coverage(np.array([0.5] * 95 + [2.0] * 5), target=1.0, omega=0.9, alpha=DEFAULT_ALPHA)
>>> v.hits, v.verdict.value, [round(b, 3) for b in v.ci]
(95, 'undecided', [0.898, 0.98])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .band import Band, quantiles
from .certificate import Certificate, Kind, Outcome, bound_words, fixed_n_verdict, one_sided_bounds, seed_ranges
from .jsonout import clean
from .loss import LossModel, loss_model_for
from .omega import Omega
from .plan import Plan
from .scenario import Scenario
from .predict import predict


@dataclass(frozen=True)
class Coverage:
    runs: int
    hits: int
    omega: float
    target: float
    alpha: float                 # the plan's α: each bound one-sided at confidence 1 − α

    @property
    def ci(self) -> tuple[float, float]:
        """The one-sided (1 − α) lower and upper Clopper–Pearson bounds the verdict tests (together the two-sided
        interval at 1 − 2α)."""
        return one_sided_bounds(self.hits, self.runs, self.alpha)

    @property
    def rate(self) -> float:
        return self.hits / self.runs

    @property
    def verdict(self) -> Outcome:
        """certified, refuted or undecided (`depl.certificate.fixed_n_verdict`: the one-sided bounds `ci` at α)."""
        return fixed_n_verdict(self.hits, self.runs, self.omega, self.alpha)

    @property
    def bound_words(self) -> str:
        """The bound behind the verdict, as every command prints it beside the verdict: the lower bound where
        certified, the upper where refuted, both where undecided."""
        return bound_words(self.verdict, *self.ci, self.alpha, self.omega)

    def certificate(self, seeds, **evidence) -> Certificate:
        """The verdict as the one certificate (kind `validation`): the runs of `seeds` (one per seed, kept as
        ranges), the whole α spent on the fixed-n test, its lower bound and, in the evidence, its upper bound, the
        test in words (`RULE`) and `evidence`."""
        low, high = self.ci
        return Certificate(Kind.VALIDATION, self.verdict, float(self.omega), float(self.target), float(self.alpha),
                           float(self.alpha), self.runs, self.hits, seed_ranges((s, s) for s in seeds), float(low),
                           clean({"upper_bound": float(high), "rule": RULE, **evidence}))


RULE = "a number of held-out runs fixed in advance, one-sided Clopper–Pearson bounds at α"
"""The test of a `validation` certificate, in words (its evidence's `rule`)."""


def coverage(final: np.ndarray, target: float, omega: Omega, alpha: float) -> Coverage:
    """Empirical P(ℓ(K) ≤ target), judged by its exact (Clopper–Pearson) one-sided (1 − α) bounds."""
    n, hits = int(final.size), int(np.sum(final <= target))
    return Coverage(n, hits, omega, target, alpha)


@dataclass(frozen=True)
class Validation:
    plan_file: str
    method: str
    loss_model: str
    epochs: int
    cost: float
    law_quantile: float          # the law's ω-quantile of ℓ(K) for the plan (the law's number, not a certificate)
    planned_mean: float
    seeds: list[int]
    coverage: Coverage
    final_mean: float
    final_sd: float
    final_quantile: float        # empirical ω-quantile of the measured ℓ(K)
    measured: Band
    planned: Band
    diverged: list[int] = field(default_factory=list)
    """Seeds whose loss became non-finite: in the coverage as ℓ(K) = +inf (misses) and in the
    ω-quantile; not in the band, the mean or the sd (of the seeds that did not diverge)."""

    def certificate(self, **evidence) -> Certificate:
        """The plan judged, as the one certificate (kind `validation`): its verdict, runs, hits and bounds, and in
        its evidence the plan, the measured and planned ℓ(K) and bands, and `evidence` (the run id, the store).
        Strict JSON: an infinite quantile, a band's +∞ (its `infinite` epochs) or an empty band is null."""
        d = {k: v for k, v in asdict(self).items() if k not in ("measured", "planned", "coverage", "seeds")}
        return self.coverage.certificate(self.seeds, **d, coverage=self.coverage.rate,
                                         measured_band=self.measured.to_json(), planned_band=self.planned.to_json(),
                                         **evidence)


def law_mismatch(plan: Plan, own: Scenario, other: Scenario, other_source: str) -> str | None:
    """Why judging `plan` (made with `own`) by `other`'s loss law would mix two laws; None when they agree.

    The laws are compared by what they predict for this plan's schedule (mean
    and certified ω-quantile of ℓ(K)), so any two spellings of one law agree.
    """
    if own.calibration is not None and not own.calibration.use:
        other = other.uncalibrated()   # planned with the law as fitted (`depl plan --uncalibrated`): judged by it
    a = predict(own, plan.schedule, plan.omega, plan.datasets)
    b = predict(other, plan.schedule, plan.omega, plan.datasets)
    if np.allclose([a.loss_mean, a.loss_quantile], [b.loss_mean, b.loss_quantile], rtol=1e-9, atol=0.0):
        return None
    return (f"{plan.source} was planned with the loss law of scenario {own.name!r} (mean ℓ(K) {a.loss_mean:.4g}, "
            f"{plan.omega:g}-quantile {a.loss_quantile:.4g}), but {other_source} ({other.name!r}) gives its "
            f"schedule mean {b.loss_mean:.4g}, {plan.omega:g}-quantile {b.loss_quantile:.4g}: validate with the plan's "
            "own scenario, or make its plan first (`depl plan SCENARIO --out PLAN.json`)")


def validate(plan: Plan, scenario: Scenario, trajectories: np.ndarray, seeds: list[int], plan_file: str = "",
             loss: LossModel | None = None, mc_runs: int = 20_000, mc_seed: int = 0,
             diverged: list[int] = ()) -> Validation:
    """Judge `plan` by measured `trajectories` (runs × K+1, column 0 = ℓ(0)) of its schedule.

    `diverged`: the seeds of `seeds` whose loss became non-finite (they have no row in
    `trajectories`); each is a run that missed the target.  `scenario` is the plan's own
    (the planned band is drawn from its law; see `law_mismatch`)."""
    loss = loss or loss_model_for(scenario)
    phi = scenario.phi(scenario.samples(plan.datasets))
    planned = loss.simulate(list(plan.schedule), phi, mc_runs, np.random.default_rng(mc_seed))
    final = trajectories[:, -1]
    every = np.concatenate([final, np.full(len(diverged), np.inf)])
    if trajectories.shape[0]:
        measured = Band.of(trajectories)
    else:  # every seed diverged: nothing to draw
        nan = np.full(trajectories.shape[1], np.nan)
        measured = Band(nan, nan, nan, np.arange(trajectories.shape[1]), 0)
    return Validation(
        plan_file, plan.method, scenario.loss_model or "increments", len(plan.epochs), float(plan.cost),
        float(plan.loss_quantile), float(plan.loss_mean), list(map(int, seeds)),
        coverage(every, plan.loss_target, plan.omega, plan.alpha), float(final.mean()) if final.size else float("nan"),
        float(final.std(ddof=1)) if final.size > 1 else 0.0,
        _quantile(every, plan.omega), measured, Band.of(planned), list(map(int, diverged)))


def _quantile(x: np.ndarray, q: float) -> float:
    """numpy's (linear) quantile, also when +inf values are among `x` (numpy gives NaN there): depl.band.quantiles."""
    return float(quantiles(x, q))
