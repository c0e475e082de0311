"""Binomial bounds on a success probability p from independent runs: the one place depl computes them.

`hits` of `runs` independent runs met ℓmax; each bound is exact (Clopper–Pearson, through the beta
distribution's quantile, scipy.special.betaincinv — no scipy.stats, so planning can import it):

* `clopper_pearson_lower(h, n, α)`: the one-sided (1 − α) lower bound, 0 when h = 0;
* `clopper_pearson_upper(h, n, α)`: the one-sided (1 − α) upper bound, 1 when h = n;
* `clopper_pearson_interval(h, n, level)`: the two-sided interval at `level` (each side (1 − level)/2),
  scipy.stats.binomtest(h, n).proportion_ci(level, "exact") to rounding (tests/test_certificate.py);
* `one_sided_bounds(h, n, α)`: the lower and the upper one-sided (1 − α) bound together — the two numbers
  `fixed_n_verdict` tests, as every command prints them beside its verdict.
"""

from __future__ import annotations

from scipy import special

from .alpha import confidence_words
from .value import Outcome


def clopper_pearson_lower(hits: int, runs: int, alpha: float) -> float:
    """The one-sided (1 − α) Clopper–Pearson lower bound on p from `hits` of `runs` (0 when hits = 0)."""
    if runs <= 0 or hits <= 0:
        return 0.0
    return float(special.betaincinv(hits, runs - hits + 1, alpha))


def clopper_pearson_upper(hits: int, runs: int, alpha: float) -> float:
    """The one-sided (1 − α) Clopper–Pearson upper bound on p (1 when every run hit)."""
    if runs <= 0 or hits >= runs:
        return 1.0
    return float(special.betaincinv(hits + 1, runs - hits, 1.0 - alpha))


def clopper_pearson_interval(hits: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """The two-sided exact interval on p at confidence `level` ((1 − level)/2 on each side)."""
    tail = (1.0 - level) / 2.0
    return clopper_pearson_lower(hits, runs, tail), clopper_pearson_upper(hits, runs, tail)


def one_sided_bounds(hits: int, runs: int, alpha: float) -> tuple[float, float]:
    """The one-sided (1 − α) lower and upper Clopper–Pearson bounds on p: what `fixed_n_verdict` tests (together
    the two-sided interval at 1 − 2α)."""
    return clopper_pearson_lower(hits, runs, alpha), clopper_pearson_upper(hits, runs, alpha)


def quantile_ranks(n: int, q: float, level: float = 0.95) -> tuple[int, int]:
    """The 0-based order statistics (lo, hi) of n sorted values that bracket their q-quantile with confidence
    `level`, whatever their law (distribution-free; each side (1 − level)/2), clipped to [0, n − 1]."""
    return quantile_ranks_at(n, q, (1.0 - level) / 2.0)


def quantile_ranks_at(n: int, q: float, alpha: float) -> tuple[int, int]:
    """`quantile_ranks` with each side at `alpha` (each order statistic a one-sided (1 − α) bound on the
    q-quantile: the pair a two-sided 1 − 2α interval)."""
    from scipy import stats   # only here: planning imports this module and never loads scipy.stats

    lo = int(stats.binom.ppf(alpha, n, q)) - 1
    hi = int(stats.binom.ppf(1.0 - alpha, n, q))
    return max(lo, 0), min(hi, n - 1)


VERDICTS = tuple(o.value for o in Outcome)
"""The one word each command gives a promise "P(ℓ(K) ≤ ℓmax) ≥ ω" judged on runs: certified (with confidence
1 − α, p ≥ ω), refuted (with confidence 1 − α, p < ω), undecided (the runs cannot tell p from ω)."""


def bound_words(verdict: str, lower: float, upper: float, alpha: float, omega: float | None = None) -> str:
    """The bound behind a verdict of `fixed_n_verdict`, as every command prints it beside the verdict: the lower
    bound where certified, the upper where refuted, both where undecided; `omega` named where given.

    >>> bound_words("refuted", 0.80, 0.89, 0.05, 0.9)
    'one-sided 95 % upper bound 0.890 < ω = 0.9'
    """
    pct, at = confidence_words(alpha), "" if omega is None else f" = {omega:g}"
    if verdict == "certified":
        return f"one-sided {pct} lower bound {lower:.3f} ≥ ω{at}"
    if verdict == "refuted":
        return f"one-sided {pct} upper bound {upper:.3f} < ω{at}"
    return f"one-sided {pct} bounds [{lower:.3f}, {upper:.3f}] hold ω{at}"


def fixed_n_verdict(hits: int, runs: int, omega: float, alpha: float) -> Outcome:
    """The verdict of n runs fixed in advance: certified where the one-sided (1 − α) Clopper–Pearson lower bound
    reaches ω, refuted where the one-sided (1 − α) upper bound lies below ω, else undecided (each side errs with
    probability ≤ α)."""
    if runs > 0 and clopper_pearson_lower(hits, runs, alpha) >= omega:
        return Outcome.CERTIFIED
    if runs > 0 and clopper_pearson_upper(hits, runs, alpha) < omega:
        return Outcome.REFUTED
    return Outcome.UNDECIDED
