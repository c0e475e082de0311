"""The sequential test of a plan's success probability, and confidence rules for it's success probability p = P(ℓ(K) ≤ ℓmax), from independent real runs.

Each run of a plan on a new seed is a Bernoulli trial: it meets ℓmax or not.
A certificate says "with probability ≥ 1 − α over the runs it was built
from, p ≥ ω".  Two rules give one:

* **fixed n** (`depl.certificate.bounds.clopper_pearson_lower`): n runs decided
  in advance; the one-sided Clopper–Pearson bound, the exact binomial one.
* **sequential** (`Sequential`): runs arrive one by one, in seed order, and
  the test may stop as soon as the evidence suffices — anytime-valid, so
  looking after every run costs nothing in α.  It is a test supermartingale
  (Ville's inequality): the mixture likelihood ratio

      M⁺ₙ = ∫ (θ/ω)^S ((1−θ)/(1−ω))^F π(dθ)      (S met ℓmax, F did not)

  of "p = θ", θ drawn from a prior π on [ω, 1] fixed in advance, against
  "p = ω".  For every θ ≥ ω and every p ≤ ω the factor of one run has mean
  p·θ/ω + (1−p)(1−θ)/(1−ω) ≤ 1 (it grows with p and is 1 at p = ω), so each
  θ's likelihood ratio is a nonnegative supermartingale starting at 1, and
  so is their average M⁺ (Fubini).  Hence P(M⁺ₙ ≥ 1/α for some n) ≤ α:
  declaring "p ≥ ω" the first time M⁺ₙ ≥ 1/α is wrong with probability
  ≤ α, whenever one stops.  The mirror M⁻ₙ (θ uniform on [0, ω]) refutes
  "p ≥ ω" the same way.  This is Robbins' method of mixtures (Robbins 1970;
  Howard, Ramdas, McAuliffe and Sekhon 2021, "Time-uniform, nonparametric,
  nonasymptotic confidence sequences", sec. 3; Ramdas, Grünwald, Vovk and
  Shafer 2023, "Game-theoretic statistics and safe anytime-valid inference",
  on e-processes), one-sided, in closed form: ∫_a^b θ^S (1−θ)^F dθ is a
  difference of regularized incomplete beta functions.

  The prior (`PRIORS`, by name) decides where the test is fast.  "uniform"
  (θ uniform on [ω, 1], depl 0.1.0's rule) needs 43 runs, all meeting ℓmax,
  to certify ω 0.9 at α 0.05, where a fixed n needs 29 (log α / log ω).
  "spiked", the default, puts weight 0.44 on θ = 1 (whose likelihood ratio
  is ω^(−S) until the first miss, then 0), 0.22 uniform on the lower 65 % of
  [ω, 1] and 0.34 uniform on all of it: 34 runs (ω 0.8: 16, ω 0.95: 70,
  ≤ 1.2× the fixed-n floor), for at most 10 % more runs on average where p
  is near ω (ω + 0.03, ω + 0.05 at ω 0.9) — what a mixture must pay there,
  since weight moved towards 1 is weight taken from θ near p.  Its weights
  were chosen on that trade-off (`benchmarks/bench_certify.py --priors`).
  A mixture's evidence depends on (S, F) only, so the stopping law below is
  exact; a plug-in betting e-process (Waudby-Smith and Ramdas 2023,
  "Estimating means of bounded random variables by betting") is path
  dependent, and was not taken for that reason.  Written here, not taken
  from a library: `confseq` (the authors' package) ships as a C++ source
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
from .value import Outcome


def _check(omega: Omega, alpha: float) -> None:
    check_omega(omega)
    check_alpha(alpha)


@dataclass(frozen=True)
class Prior:
    """A mixing distribution for θ on [ω, 1]: the alternative M⁺ averages over (module docstring).

    `spike` is the weight of θ = 1 (the likelihood ratio ω^(−S) while no run has missed, 0 after a miss); each
    of `pieces`, (weight, a, top), is θ^(a−1) normalised on [ω, ω + top·(1 − ω)] — uniform where a = 1.  The
    pieces are given in units of 1 − ω, so one prior serves every ω (and every q of the anytime bounds).
    The weights sum to 1."""

    name: str
    spike: float
    pieces: tuple[tuple[float, float, float], ...]
    about: str

    def __post_init__(self):
        total = self.spike + sum(w for w, _, _ in self.pieces)
        if not (abs(total - 1.0) < 1e-12 and self.spike >= 0 and all(w > 0 and a > 0 and 0 < top <= 1
                                                                      for w, a, top in self.pieces)):
            raise ValueError(f"prior {self.name!r}: weights must be ≥ 0 and sum to 1, a > 0, top in (0, 1]")


#: The e-processes of the sequential test, by name.  "spiked" is the default (docs/certificate.md, "The test":
#: 34 runs, all meeting ℓmax, certify ω 0.9 at α 0.05, where "uniform" needs 43; ≤ 10 % more runs on average
#: where p is near ω).  "uniform" is the rule of every certificate written before it (depl 0.1.0), kept to
#: reproduce them.  "spike" and "beta" are the simpler candidates it was compared with
#: (`benchmarks/bench_certify.py --priors`).
PRIORS: dict[str, Prior] = {p.name: p for p in (
    Prior("spiked", 0.44, ((0.22, 1.0, 0.65), (0.34, 1.0, 1.0)),
          "θ = 1 with weight 0.44, uniform on [ω, ω + 0.65(1 − ω)] with 0.22, uniform on [ω, 1] with 0.34"),
    Prior("uniform", 0.0, ((1.0, 1.0, 1.0),), "θ uniform on [ω, 1]"),
    Prior("spike", 0.39, ((0.61, 1.0, 1.0),), "θ = 1 with weight 0.39, uniform on [ω, 1] with 0.61"),
    Prior("beta", 0.0, ((1.0, 45.0, 1.0),), "θ ∝ θ^44 on [ω, 1] (a Beta(45, 1) restricted to [ω, 1])"),
)}
DEFAULT_PRIOR = "spiked"


def prior_named(prior: "str | Prior") -> Prior:
    """The prior of that name (or the Prior itself); ValueError naming the choices otherwise."""
    if isinstance(prior, Prior):
        return prior
    if prior not in PRIORS:
        raise ValueError(f"prior {prior!r}: must be one of {', '.join(PRIORS)}")
    return PRIORS[prior]


def _log_piece(s, f, omega: float, a: float, top: float):
    """log ∫ θ^(s+a−1) (1−θ)^f dθ over [ω, h], h = ω + top·(1 − ω), arrays broadcast; −inf where it is 0.  Each
    mass is a difference of two regularized incomplete beta tails, the upper ones or the lower ones, whichever
    are smaller (a difference of two numbers near 1 loses the digits); top = 1 is one upper tail."""
    A, B = np.asarray(s, float) + a, np.asarray(f, float) + 1.0
    if top >= 1.0:
        mass = special.betainc(B, A, 1.0 - omega)
    else:
        h = omega + top * (1.0 - omega)
        up_lo, up_hi = special.betainc(B, A, 1.0 - omega), special.betainc(B, A, 1.0 - h)
        low_hi, low_lo = special.betainc(A, B, h), special.betainc(A, B, omega)
        mass = np.where(up_lo <= low_hi, up_lo - up_hi, low_hi - low_lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        return special.betaln(A, B) + np.log(np.maximum(mass, 0.0))


def _log_mass(s, f, omega: float, above: bool):
    """log ∫ θ^s (1−θ)^f dθ over [ω, 1] (`above`) or [0, ω], arrays broadcast; −inf where it is 0.  Each tail
    is scipy's regularized incomplete beta taken directly (never 1 − the other tail: no cancellation)."""
    a, b = np.asarray(s, float) + 1.0, np.asarray(f, float) + 1.0
    mass = special.betainc(b, a, 1.0 - omega) if above else special.betainc(a, b, omega)
    with np.errstate(divide="ignore"):
        return special.betaln(a, b) + np.log(mass)


def log_evidence_above(s, f, omega: float, prior: "str | Prior" = DEFAULT_PRIOR):
    """log M⁺: the evidence for p > ω after s runs met ℓmax and f did not, under `prior` (module docstring)."""
    pr = prior_named(prior)
    s, f = np.asarray(s, float), np.asarray(f, float)
    lr = -s * math.log(omega) - f * math.log1p(-omega)  # − log ω^s (1−ω)^f: the likelihood under p = ω, divided out
    terms = []
    if pr.spike > 0:
        terms.append(math.log(pr.spike) + np.where(f == 0, lr, -np.inf))
    for w, a, top in pr.pieces:
        h = omega + top * (1.0 - omega)  # log ∫ θ^(a−1) over [ω, h] = log((h^a − ω^a)/a)
        norm = a * math.log(h) + math.log(-math.expm1(a * (math.log(omega) - math.log(h)))) - math.log(a)
        terms.append(math.log(w) + _log_piece(s, f, omega, a, top) - norm + lr)
    out = terms[0]
    with np.errstate(invalid="ignore"):  # log(0 + 0) is −inf, as it should be
        for term in terms[1:]:
            out = np.logaddexp(out, term)
    return out


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


def anytime_lower(hits: int, runs: int, alpha: float, prior: "str | Prior" = DEFAULT_PRIOR) -> float:
    """The largest q whose "p ≤ q" the sequential test (under `prior`) rejects at level α after these runs: an
    anytime-valid lower confidence bound on p (0 if it rejects none).  The rejection is monotone in q (checked
    in tests for every prior)."""
    bar, pr = math.log(1.0 / alpha), prior_named(prior)

    def rejected(q: float) -> bool:
        return float(log_evidence_above(hits, runs - hits, q, pr)) >= bar

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

    verdict: Outcome      # certified (p ≥ ω at level α), refuted (p < ω at level α) or undecided
    runs: int
    hits: int
    omega: float
    alpha: float
    log_e_above: float    # log M⁺ (certifies when ≥ log 1/α)
    log_e_below: float    # log M⁻ (refutes when ≥ log 1/α)
    prior: str = DEFAULT_PRIOR  # the e-process's prior (`PRIORS`): M⁺ and the lower bound are its

    @property
    def lower(self) -> float:
        """Anytime-valid lower confidence bound on p."""
        return anytime_lower(self.hits, self.runs, self.alpha, self.prior)

    @property
    def upper(self) -> float:
        return anytime_upper(self.hits, self.runs, self.alpha)

    def to_json(self) -> dict:
        return {"verdict": Outcome(self.verdict).value, "runs": self.runs, "hits": self.hits, "omega": self.omega,
                "alpha": self.alpha, "prior": self.prior, "lower_bound": self.lower, "upper_bound": self.upper,
                "e_value_certify": math.exp(min(self.log_e_above, 700.0)),
                "e_value_refute": math.exp(min(self.log_e_below, 700.0)),
                "clopper_pearson_lower": clopper_pearson_lower(self.hits, self.runs, self.alpha)}


class Sequential:
    """The sequential test of "p ≥ ω" at level α, fed one run at a time in a fixed order (seed order):
    it stops at the first run after which M⁺ ≥ 1/α (certified) or M⁻ ≥ 1/α (refuted).  `prior` names M⁺'s
    mixing distribution (`PRIORS`; "uniform" reproduces the certificates of depl 0.1.0)."""

    def __init__(self, omega: Omega, alpha: float, prior: "str | Prior" = DEFAULT_PRIOR):
        _check(omega, alpha)
        self.prior = prior_named(prior)
        self.omega, self.alpha = float(omega), float(alpha)
        self.runs = self.hits = 0
        self._bar = math.log(1.0 / alpha)
        self._state = self._verdict()

    def _verdict(self) -> Verdict:
        f = self.runs - self.hits
        up = float(log_evidence_above(self.hits, f, self.omega, self.prior))
        down = float(log_evidence_below(self.hits, f, self.omega))
        v = Outcome.CERTIFIED if up >= self._bar else Outcome.REFUTED if down >= self._bar else Outcome.UNDECIDED
        return Verdict(v, self.runs, self.hits, self.omega, self.alpha, up, down, self.prior.name)

    @property
    def rule(self) -> str:
        """The test in words, for a certificate to record which e-process decided it."""
        return (f"sequential mixture test (depl.certificate), prior {self.prior.name!r}: {self.prior.about}; "
                "refuted by θ uniform on [0, ω]")

    @property
    def state(self) -> Verdict:
        return self._state

    @property
    def decided(self) -> bool:
        return self._state.verdict is not Outcome.UNDECIDED

    def add(self, met: bool) -> Verdict:
        """One more run (met ℓmax or not); a decided test takes no more."""
        if self.decided:
            raise RuntimeError("the test has stopped; a run after its decision does not count")
        self.runs += 1
        self.hits += bool(met)
        self._state = self._verdict()
        return self._state


def boundaries(omega: Omega, alpha: float, max_runs: int,
               prior: "str | Prior" = DEFAULT_PRIOR) -> tuple[np.ndarray, np.ndarray]:
    """For n = 0..max_runs, the fewest hits that certify and the most hits that refute after n runs
    (n + 1 and −1 where none does): the test (under `prior`) as two integer sequences.  M⁺ grows and M⁻
    shrinks with the hits at a given n (a hit for a miss multiplies each θ's likelihood ratio by
    (θ/ω)/((1−θ)/(1−ω)) > 1 for every θ > ω, and θ = 1's from 0 to > 0), so each boundary is found by bisection."""
    _check(omega, alpha)
    pr = prior_named(prior)
    bar = math.log(1.0 / alpha)
    n = np.arange(max_runs + 1)
    lo, hi = np.zeros_like(n), n + 1  # cert: the fewest s in [0, n] with M⁺ ≥ 1/α (n + 1 if none), every n at once
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        ok = log_evidence_above(mid, n - mid, omega, pr) >= bar
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


def fewest_runs(omega: Omega, alpha: float, prior: "str | Prior" = DEFAULT_PRIOR) -> int:
    """The fewest runs after which the sequential test can certify ω at level α: when every one meets ℓmax
    (34 at ω 0.9, α 0.05 under "spiked", 43 under "uniform"; the fixed-n floor, log α / log ω, is 29)."""
    n = 64
    while True:  # doubling: ω near 1 needs thousands
        cert, _ = boundaries(omega, alpha, n, prior)
        hit = np.flatnonzero(cert <= np.arange(n + 1))
        if hit.size:
            return int(hit[0])
        n *= 2


def more_runs_if_all_meet(hits: int, runs: int, omega: Omega, alpha: float,
                          prior: "str | Prior" = DEFAULT_PRIOR, most: int = 1_000_000) -> int | None:
    """The fewest more runs after which the sequential test, having counted `hits` of `runs`, certifies ω at
    level α if every one of them meets ℓmax (`fewest_runs` from no run at all); None beyond `most` more runs.

    >>> more_runs_if_all_meet(4, 4, 0.9, 0.05) == fewest_runs(0.9, 0.05) - 4
    True
    """
    n = max(64, 2 * runs)
    while True:
        cert, _ = boundaries(omega, alpha, runs + n, prior)
        k = np.arange(1, n + 1)
        hit = np.flatnonzero(hits + k >= cert[runs + k])
        if hit.size:
            return int(k[hit[0]]) if k[hit[0]] <= most else None
        if n >= most:
            return None
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
                  runs: int = 0, prior: "str | Prior" = DEFAULT_PRIOR) -> RunsNeeded:
    """The law of the sequential test's stopping time for success probability `p`, exactly: a dynamic
    programme over the runs' hit counts, each path stopped where it crosses `boundaries` (every prior's
    evidence depends on the counts only, so the programme is exact).  From a test that has counted `runs`
    runs, `hits` of them met ℓmax (undecided): the runs still to come, up to `max_runs` more."""
    cert, ref = boundaries(omega, alpha, runs + max_runs, prior)
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


__all__ = ["more_runs_if_all_meet", "Sequential", "Verdict", "RunsNeeded", "Prior", "PRIORS", "DEFAULT_PRIOR", "prior_named",
           "boundaries", "fewest_runs", "expected_runs", "fixed_n_for",
           "anytime_lower", "anytime_upper",
           "log_evidence_above", "log_evidence_below"]
