"""Split-conformal rules on PIT scores: which sorted score a calibrated ω-quantile is read at, and how many
scores reach ω — the one place every calibrated law, calibration report and planner takes them from.

n held-out runs are scored under the law as fitted, u_i = F(ℓ_i); sorted, u_(1) ≤ … ≤ u_(n).  The calibrated
ω-quantile is F⁻¹(u_(j)) at the rank

    j = ⌈(n+1)·ω⌉                      (marginal split conformal: P(new u ≤ u_(j)) ≥ ω, averaged over draws)

and no rank (j > n: the quantile is +∞, nothing is certified) when the scores cannot reach ω.  The rule
holds for any n and any law F fitted on other runs (Vovk et al. 2005; Lei et al. 2018).

Pure functions of numpy arrays: no law, no scenario.
"""

from __future__ import annotations

import math

import numpy as np

_ROUND = 1e-9   # (n+1)·ω within this of an integer is that integer (ω = 0.9, n = 9 → rank 9, not 10)


def rank(n: int, omega: float) -> int:
    """The 1-based rank j of the sorted score a calibrated ω-quantile is read at from n scores (> n: none)."""
    return max(1, math.ceil((n + 1) * omega - _ROUND))


def scores_needed(omega: float) -> int:
    """The fewest scores whose rank reaches ω: ⌈(n+1)ω⌉ ≤ n ⇔ n ≥ ω/(1−ω)."""
    return max(1, math.ceil(omega / (1.0 - omega) - _ROUND))


def level(scores: np.ndarray, omega):
    """u_(⌈(n+1)ω⌉) of the sorted scores, 1 where the rank is beyond n (then the quantile is +∞); 0 at ω ≤ 0.
    `omega` may be an array (one level each)."""
    n = scores.size
    j = np.ceil((n + 1) * np.asarray(omega, dtype=float) - _ROUND).astype(int)
    out = np.where(j > n, 1.0, scores[np.clip(j, 1, max(n, 1)) - 1] if n else 1.0)
    return np.where(np.asarray(omega) <= 0, 0.0, out)


def cdf_rank(scores: np.ndarray, u):
    """The calibrated cdf at base level u, #{u_i ≤ u}/(n+1): the inverse of `level` (mass 1/(n+1) beyond every
    level)."""
    return np.searchsorted(scores, u, side="right") / (scores.size + 1)
