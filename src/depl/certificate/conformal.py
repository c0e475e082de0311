"""Split-conformal rules on PIT scores: which sorted score a calibrated ω-quantile is read at, and how many
scores reach ω — the one place every calibrated law, calibration report and planner takes them from.

n held-out runs are scored under the law as fitted, u_i = F(ℓ_i); sorted, u_(1) ≤ … ≤ u_(n).  The calibrated
ω-quantile is F⁻¹(u_(j)) at the rank

    j = ⌈(n+1)·ω⌉                      (marginal split conformal: P(new u ≤ u_(j)) ≥ ω, averaged over draws)

and no rank (j > n: the quantile is +∞, nothing is certified) when the scores cannot reach ω.  The rule
holds for any n and any law F fitted on other runs (Vovk et al. 2005; Lei et al. 2018) — on average over
the draw of the n runs: for one unlucky draw the coverage of u_(j) may be well below ω.

With a confidence 1 − α (the training-conditional or "PAC" rule, Vovk 2012; Bates et al. 2021): the
coverage of u_(j), P(new u ≤ u_(j)) given the n runs, is Beta(j, n + 1 − j) distributed whatever the law
(continuous scores), so

    j_α = the smallest j with  P(Beta(j, n + 1 − j) < ω) ≤ α

makes "the coverage is ≥ ω" hold with probability ≥ 1 − α over the runs (`pac_rank`).  In the count of runs
that met ℓmax, it is exactly the one-sided Clopper–Pearson lower bound on distinct runs reaching ω:
P(Beta(h, n + 1 − h) < ω) ≤ α  ⇔  h ≥ j_α.  It needs n ≥ log α / log ω runs (29 for ω = 0.9, α = 0.05).

Choosing a plan among many on the same runs is a test of many hypotheses "this schedule's coverage is
< ω".  `fixed_sequence` tests them in an order fixed before the runs are looked at, each at level α,
stopping at the first that is not rejected: the chance of certifying any schedule whose coverage is below ω
is then ≤ α (Learn-then-Test, Angelopoulos, Bates et al. 2021, sec. 4; the fixed-sequence procedure of
Maurer 1995), so the statement holds for whichever certified schedule the planner returns.

Pure functions of numpy arrays: no law, no scenario.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

_ROUND = 1e-9   # (n+1)·ω within this of an integer is that integer (ω = 0.9, n = 9 → rank 9, not 10)


def scores_needed(omega: float) -> int:
    """The fewest scores whose rank reaches ω: ⌈(n+1)ω⌉ ≤ n ⇔ n ≥ ω/(1−ω)."""
    return max(1, math.ceil(omega / (1.0 - omega) - _ROUND))


def pac_rank(n: int, omega: float, alpha: float) -> int:
    """The 1-based rank j_α of the sorted score whose coverage is ≥ ω with confidence 1 − α (> n: none)."""
    if n <= 0 or omega <= 0:
        return 1
    j = np.arange(1, n + 1)
    ok = special.betainc(j, n + 1 - j, omega) <= alpha     # P(Beta(j, n+1−j) < ω), falling in j
    return int(j[ok][0]) if ok.any() else n + 1


def pac_scores_needed(omega: float, alpha: float) -> int:
    """The fewest scores whose PAC rank reaches ω at confidence 1 − α: ω^n ≤ α (j = n is the last rank)."""
    return max(1, math.ceil(math.log(alpha) / math.log(omega) - _ROUND))


def certifies(hits: int, runs: int, omega: float, alpha: float) -> bool:
    """Whether `hits` of `runs` distinct runs meeting ℓmax certify P(meet) ≥ ω at confidence 1 − α (the one-sided
    Clopper–Pearson lower bound reaches ω)."""
    return runs > 0 and hits >= pac_rank(runs, omega, alpha)


def fixed_sequence(passes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(m,) bool: the hypotheses certified when they are tested in `order` (indices), each by its own
    level-α test (`passes`), stopping at the first that fails: every one before it, none after."""
    passes, order = np.asarray(passes, dtype=bool), np.asarray(order, dtype=int)
    out = np.zeros(passes.size, dtype=bool)
    for i in order:
        if not passes[i]:
            break
        out[i] = True
    return out


def _ranks(n: int, w: np.ndarray, alpha: float | None) -> np.ndarray:
    """The 1-based rank of the sorted value read at level w: marginal ⌈(n+1)w⌉, or the PAC rank j_α (> n: none)."""
    if alpha is None:
        return np.ceil((n + 1) * w - _ROUND).astype(int)
    return np.vectorize(lambda x: pac_rank(n, float(x), alpha), otypes=[int])(w)


def level(scores: np.ndarray, omega, alpha: float | None = None):
    """u_(j) of the sorted scores at the marginal rank ⌈(n+1)ω⌉ (`alpha` None) or the PAC rank j_α; 1 where the
    rank is beyond n (then the quantile is +∞); 0 at ω ≤ 0.  `omega` may be an array (one level each)."""
    n, w = scores.size, np.asarray(omega, dtype=float)
    j = _ranks(n, w, alpha)
    out = np.where(j > n, 1.0, scores[np.clip(j, 1, max(n, 1)) - 1] if n else 1.0)
    return np.where(w <= 0, 0.0, out)


def upper(values: np.ndarray, omega: float, alpha: float | None = None) -> float:
    """The conformal upper ω-bound of real `values` (sorted): the value at `level`'s rank, +∞ beyond n — a new
    value exchangeable with them exceeds it with probability ≤ 1 − ω (with `alpha`: given the values, with
    confidence 1 − α)."""
    n = values.size
    j = int(_ranks(n, np.asarray(float(omega)), alpha))
    return math.inf if j > n or n == 0 else float(values[max(j, 1) - 1])


def cdf_rank(scores: np.ndarray, u, alpha: float | None = None):
    """The calibrated cdf at base level u, the inverse of `level`: #{u_i ≤ u}/(n+1) (mass 1/(n+1) beyond every
    level), or with `alpha` the Clopper–Pearson lower bound of the h = #{u_i ≤ u} runs below it (the largest
    ω whose PAC rank h reaches)."""
    h = np.searchsorted(scores, u, side="right")
    n = scores.size
    if alpha is None:
        return h / (n + 1)
    with np.errstate(invalid="ignore"):
        return np.where(h > 0, special.betaincinv(np.maximum(h, 1), n + 1 - np.maximum(h, 1), alpha), 0.0)


def top(n: int, alpha: float | None = None) -> float:
    """The highest level n scores reach: n/(n+1), or α^(1/n) with a confidence 1 − α."""
    if n <= 0:
        return 0.0
    return n / (n + 1) if alpha is None else alpha ** (1.0 / n)
