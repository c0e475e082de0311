"""The sequential test of a plan's success probability, and confidence rules for it's success probability p = P(ℓ(K) ≤ ℓmax), from independent real runs.

Each run of a plan on a new seed is a Bernoulli trial: it meets ℓmax or not.
A certificate says "with probability ≥ 1 − α over the runs it was built
from, p ≥ ω".  Two rules give one:

* **fixed n** (`depl.certificate.bounds.clopper_pearson_lower`): n runs decided
  in advance; the one-sided Clopper–Pearson bound, the exact binomial one.
* **sequential** (`Sequential`): runs arrive one by one, in seed order, and
  the test may stop as soon as the evidence suffices — anytime-valid, so
  looking after every run costs nothing in α.  It is a test martingale
  (Ville's inequality): the mixture likelihood ratio

      M⁺ₙ = ∫_ω^1 (θ/ω)^S ((1−θ)/(1−ω))^F dθ / (1 − ω)      (S met ℓmax, F did not)

  of "p = θ" for θ uniform on [ω, 1] against "p = ω".  For every p ≤ ω it
  is a nonnegative supermartingale with mean ≤ 1 (each factor's mean,
  p·θ/ω + (1−p)(1−θ)/(1−ω), grows with p and is 1 at p = ω), so
  P(M⁺ₙ ≥ 1/α for some n) ≤ α: declaring "p ≥ ω" the first time
  M⁺ₙ ≥ 1/α is wrong with probability ≤ α, whenever one stops.  The mirror
  M⁻ₙ (θ uniform on [0, ω]) refutes "p ≥ ω" the same way.  This is Robbins'
  method of mixtures (Robbins 1970; Howard, Ramdas, McAuliffe and Sekhon
  2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
  sec. 3), one-sided, in closed form: ∫_a^b θ^S (1−θ)^F dθ is a difference
  of regularized incomplete beta functions.  Written here, not taken from a
  library: `confseq` (the authors' package) ships as a C++ source
  distribution only, last released in 2023, and no well-kept pure-Python
  package has this one-sided Bernoulli test; scipy.special has the beta
  functions it needs.

`expected_runs` gives the law of the sequential test's stopping time for a
given p (exactly, by dynamic programming over (S, F)), and `fixed_n_for`
the fixed n with the same power: what a certificate costs in runs either way.

Needs numpy and scipy.special only (planning imports this: no scipy.stats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..omega import Omega, check_omega
from .alpha import check_alpha
from .bounds import clopper_pearson_lower


def _check(omega: Omega, alpha: float) -> None:
    check_omega(omega)
    check_alpha(alpha)


def _log_mass(s, f, omega: float, above: bool):
    """log ∫ θ^s (1−θ)^f dθ over [ω, 1] (`above`) or [0, ω], arrays broadcast; −inf where it is 0.  Each tail
    is scipy's regularized incomplete beta taken directly (never 1 − the other tail: no cancellation)."""
    a, b = np.asarray(s, float) + 1.0, np.asarray(f, float) + 1.0
    mass = special.betainc(b, a, 1.0 - omega) if above else special.betainc(a, b, omega)
    with np.errstate(divide="ignore"):
        return special.betaln(a, b) + np.log(mass)


def log_evidence_above(s, f, omega: float):
    """log M⁺: the evidence for p > ω after s runs met ℓmax and f did not (module docstring)."""
    s, f = np.asarray(s, float), np.asarray(f, float)
    return _log_mass(s, f, omega, True) - math.log1p(-omega) - s * math.log(omega) - f * math.log1p(-omega)


def log_evidence_below(s, f, omega: float):
    """log M⁻: the evidence for p < ω (the mirror of `log_evidence_above`)."""
    s, f = np.asarray(s, float), np.asarray(f, float)
    return _log_mass(s, f, omega, False) - math.log(omega) - s * math.log(omega) - f * math.log1p(-omega)


def _bisect(pred, lo: float, hi: float, iters: int = 60) -> float:
    """The boundary in [lo, hi] where `pred` turns from True to False (pred(lo) True, pred(hi) False)."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if pred(mid) else (lo, mid)
    return lo


_EDGE = 1e-9  # the bounds are searched in [_EDGE, 1 − _EDGE]


def anytime_lower(hits: int, runs: int, alpha: float) -> float:
    """The largest q whose "p ≤ q" the sequential test rejects at level α after these runs: an anytime-valid
    lower confidence bound on p (0 if it rejects none).  The rejection is monotone in q (checked in tests)."""
    bar = math.log(1.0 / alpha)

    def rejected(q: float) -> bool:
        return float(log_evidence_above(hits, runs - hits, q)) >= bar

    if runs == 0 or not rejected(_EDGE):
        return 0.0
    return 1.0 - _EDGE if rejected(1.0 - _EDGE) else _bisect(rejected, _EDGE, 1.0 - _EDGE)


def anytime_upper(hits: int, runs: int, alpha: float) -> float:
    """The smallest q whose "p ≥ q" the sequential test rejects at level α: an anytime-valid upper bound
    on p (1 if it rejects none)."""
    bar = math.log(1.0 / alpha)

    def kept(q: float) -> bool:
        return float(log_evidence_below(hits, runs - hits, q)) < bar

    if runs == 0 or kept(1.0 - _EDGE):
        return 1.0
    return _EDGE if not kept(_EDGE) else _bisect(kept, _EDGE, 1.0 - _EDGE)


@dataclass(frozen=True)
class Verdict:
    """Where the sequential test stands after `runs` runs, `hits` of which met ℓmax."""

    verdict: str          # "certified" (p ≥ ω at level α), "refuted" (p < ω at level α) or "undecided"
    runs: int
    hits: int
    omega: float
    alpha: float
    log_e_above: float    # log M⁺ (certifies when ≥ log 1/α)
    log_e_below: float    # log M⁻ (refutes when ≥ log 1/α)

    @property
    def lower(self) -> float:
        """Anytime-valid lower confidence bound on p."""
        return anytime_lower(self.hits, self.runs, self.alpha)

    @property
    def upper(self) -> float:
        return anytime_upper(self.hits, self.runs, self.alpha)

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "runs": self.runs, "hits": self.hits, "omega": self.omega,
                "alpha": self.alpha, "lower_bound": self.lower, "upper_bound": self.upper,
                "e_value_certify": math.exp(min(self.log_e_above, 700.0)),
                "e_value_refute": math.exp(min(self.log_e_below, 700.0)),
                "clopper_pearson_lower": clopper_pearson_lower(self.hits, self.runs, self.alpha)}


class Sequential:
    """The sequential test of "p ≥ ω" at level α, fed one run at a time in a fixed order (seed order):
    it stops at the first run after which M⁺ ≥ 1/α (certified) or M⁻ ≥ 1/α (refuted)."""

    def __init__(self, omega: Omega, alpha: float):
        _check(omega, alpha)
        self.omega, self.alpha = float(omega), float(alpha)
        self.runs = self.hits = 0
        self._bar = math.log(1.0 / alpha)
        self._state = self._verdict()

    def _verdict(self) -> Verdict:
        f = self.runs - self.hits
        up = float(log_evidence_above(self.hits, f, self.omega))
        down = float(log_evidence_below(self.hits, f, self.omega))
        v = "certified" if up >= self._bar else "refuted" if down >= self._bar else "undecided"
        return Verdict(v, self.runs, self.hits, self.omega, self.alpha, up, down)

    @property
    def state(self) -> Verdict:
        return self._state

    @property
    def decided(self) -> bool:
        return self._state.verdict != "undecided"

    def add(self, met: bool) -> Verdict:
        """One more run (met ℓmax or not); a decided test takes no more."""
        if self.decided:
            raise RuntimeError("the test has stopped; a run after its decision does not count")
        self.runs += 1
        self.hits += bool(met)
        self._state = self._verdict()
        return self._state


def boundaries(omega: Omega, alpha: float, max_runs: int) -> tuple[np.ndarray, np.ndarray]:
    """For n = 0..max_runs, the fewest hits that certify and the most hits that refute after n runs
    (n + 1 and −1 where none does): the test as two integer sequences.  M⁺ grows and M⁻ shrinks with the
    hits at a given n (a hit for a miss multiplies M⁺ by (θ/ω)/((1−θ)/(1−ω)) > 1 for every θ > ω), so each
    boundary is found by bisection."""
    _check(omega, alpha)
    bar = math.log(1.0 / alpha)
    n = np.arange(max_runs + 1)
    lo, hi = np.zeros_like(n), n + 1  # cert: the fewest s in [0, n] with M⁺ ≥ 1/α (n + 1 if none), every n at once
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        ok = log_evidence_above(mid, n - mid, omega) >= bar
        active = lo < hi
        hi = np.where(active & ok, mid, hi)
        lo = np.where(active & ~ok, mid + 1, lo)
    cert = lo
    lo, hi = np.full_like(n, -1), n.copy()  # ref: the most s in [0, n] with M⁻ ≥ 1/α (−1 if none)
    while np.any(lo < hi):
        mid = (lo + hi + 1) // 2
        ok = log_evidence_below(np.maximum(mid, 0), n - np.maximum(mid, 0), omega) >= bar
        active = lo < hi
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid - 1, hi)
    return cert.astype(np.int64), lo.astype(np.int64)


def fewest_runs(omega: Omega, alpha: float) -> int:
    """The fewest runs after which the sequential test can certify ω at level α: when every one meets ℓmax
    (43 at ω 0.9, α 0.05)."""
    n = 64
    while True:  # doubling: ω near 1 needs thousands
        cert, _ = boundaries(omega, alpha, n)
        hit = np.flatnonzero(cert <= np.arange(n + 1))
        if hit.size:
            return int(hit[0])
        n *= 2


@dataclass(frozen=True)
class RunsNeeded:
    """The sequential test's cost and outcome when every run meets ℓmax with probability p."""

    p: float
    mean_runs: float        # E[min(runs until the test stops, max_runs)]
    median_runs: int | None  # None if the test stops by max_runs with probability < 1/2
    certify: float          # P(certified by max_runs)
    refute: float           # P(refuted by max_runs)
    max_runs: int


def expected_runs(p: float, omega: Omega, alpha: float, max_runs: int = 1000, hits: int = 0,
                  runs: int = 0) -> RunsNeeded:
    """The law of the sequential test's stopping time for success probability `p`, exactly: a dynamic
    programme over the runs' hit counts, each path stopped where it crosses `boundaries`.  From a test that
    has counted `runs` runs, `hits` of them met ℓmax (undecided): the runs still to come, up to `max_runs` more."""
    cert, ref = boundaries(omega, alpha, runs + max_runs)
    alive = np.zeros(runs + max_runs + 2)
    alive[hits] = 1.0  # P(S = s, not stopped) after the runs so far
    mean = certified = refuted = stopped = 0.0
    median = None
    for k in range(1, max_runs + 1):
        n = runs + k
        nxt = np.zeros_like(alive)
        nxt[1:] += alive[:-1] * p
        nxt[:] += alive * (1.0 - p)
        s = np.arange(nxt.size)
        up, down = s >= cert[n], s <= ref[n]
        c, r = float(nxt[up].sum()), float(nxt[down & ~up].sum())
        certified += c
        refuted += r
        mean += k * (c + r)
        stopped += c + r
        nxt[up | down] = 0.0
        alive = nxt
        if median is None and stopped >= 0.5:
            median = k
    mean += max_runs * float(alive.sum())
    return RunsNeeded(float(p), mean, median, certified, refuted, max_runs)


def fixed_n_for(p: float, omega: Omega, alpha: float, power: float, max_runs: int = 5000) -> int | None:
    """The fewest runs n, fixed in advance, whose one-sided Clopper–Pearson bound reaches ω with probability
    ≥ `power` when each run meets ℓmax with probability p (None if none up to max_runs does)."""
    _check(omega, alpha)
    for n in range(1, max_runs + 1):
        # the fewest hits k whose CP lower bound reaches ω: CP is increasing in k
        ks = np.arange(n + 1)
        lows = np.where(ks > 0, special.betaincinv(np.maximum(ks, 1), n - ks + 1, alpha), 0.0)
        ok = ks[lows >= omega]
        if ok.size == 0:
            continue
        # P(Bin(n, p) ≥ k): the regularized incomplete beta, again without scipy.stats
        k = int(ok.min())
        if float(special.betainc(k, n - k + 1, p)) >= power:
            return n
    return None


__all__ = ["Sequential", "Verdict", "RunsNeeded", "boundaries", "fewest_runs", "expected_runs", "fixed_n_for",
           "anytime_lower", "anytime_upper",
           "log_evidence_above", "log_evidence_below"]
