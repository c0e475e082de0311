"""Numeric distributions of sums of independent random variables.

The final test loss of a schedule is ℓ(0) plus a sum of independent terms
(c·X with X a depl.families.Frozen or a frozen scipy.stats distribution).  Its law is a convolution; we
compute it on a lattice with the FFT and answer the questions of a frozen
scipy distribution: `cdf`, `sf`, `ppf` (= `quantile`), `pdf`, `logpdf`,
`mean`, `var`, `std`, `rvs(size, random_state)` — so that fitting and
goodness of fit use the law's own density and cdf, whatever the loss law.

Error bound (tested in tests/test_dist.py).  Each term c·X is rounded *down*
to the lattice h·ℤ; its mass outside [ppf(ε), isf(ε)] is dropped, and the
running sum's extreme tails below `trim` are dropped too.  Let C be the cdf of
the rounded sum restricted to what was kept (total mass 1 − δ, δ known), and
N the number of random terms.  The rounded sum is below the true sum S by
less than N·h, so for every x

    C(x − N·h)  ≤  P(S ≤ x)  ≤  C(x) + δ,

and for the quantile q_ω(S):

    C⁻¹(ω − δ)  ≤  q_ω(S)  ≤  C⁻¹(ω) + N·h.

`quantile_bounds` returns this bracket; `quantile` its midpoint estimate
C⁻¹(ω) + N·h/2, within N·h/2 (+ the δ shift) of the truth.  Planners certify
with the upper end, so a certified quantile is never optimistic.

>>> from scipy import stats
>>> d = sum_distribution([Term(1.0, stats.norm()), Term(1.0, stats.norm())], h=1e-3)
>>> round(float(d.quantile(0.975)), 2)   # N(0, 2): 1.96·√2 = 2.77
2.77
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .families import standard_draw, standard_form


def draw(dist, size, rng: np.random.Generator) -> np.ndarray:
    """Samples of a distribution (depl.families.Frozen or frozen scipy.stats), from numpy's own generator
    for the families it has (scipy's invgamma has no sampler of its own and inverts its cdf, ~40× slower)."""
    form = standard_form(dist)
    if form is None:
        return dist.rvs(size=size, random_state=rng)
    name, shapes, loc, scale = form
    return loc + scale * standard_draw(name, shapes, rng, size)


@dataclass(frozen=True)
class Term:
    """One independent term: shift + coef·X, with X a depl.families.Frozen or a frozen scipy.stats distribution."""

    coef: float
    dist: Any  # depl.families.Frozen or frozen scipy.stats distribution
    shift: float = 0.0

    def mean(self) -> float:
        return self.shift + self.coef * float(self.dist.mean())

    def var(self) -> float:
        return self.coef**2 * float(self.dist.var())

    def cumulants(self) -> tuple[float, float, float]:
        """κ1, κ2, κ3 of shift + coef·X (κ3 = 0 where X's third moment is infinite)."""
        m, v, s = (float(x) for x in self.dist.stats(moments="mvs"))
        k3 = s * v**1.5 if np.isfinite(s) else 0.0
        return self.shift + self.coef * m, self.coef**2 * v, self.coef**3 * k3

    def rvs(self, size, rng: np.random.Generator) -> np.ndarray:
        return self.shift + self.coef * draw(self.dist, size, rng)


@dataclass(frozen=True)
class GridDistribution:
    """The law of a sum, on the lattice offset + h·(i0 + j), j = 0..len(pmf)-1.

    `pmf[j]` is the probability that the *rounded-down* sum equals that point;
    the true sum lies in [point, point + n_terms·h).  `delta` is the dropped mass.
    """

    offset: float
    h: float
    i0: int
    pmf: np.ndarray
    n_terms: int
    delta: float
    exact_mean: float
    exact_var: float
    exact: Any = None
    """The same law as a frozen scipy.stats distribution when it is known in closed form (one log-normal
    term, say): then `pdf`, `logpdf` and `rvs` are exact; `cdf`/`ppf` stay the lattice's, which are certified."""

    # -- lattice helpers -------------------------------------------------- #
    @property
    def support(self) -> np.ndarray:
        """The lattice points of `pmf` (rounded-down values of the sum)."""
        return self.offset + self.h * (self.i0 + np.arange(self.pmf.size))

    @property
    def error_bound(self) -> float:
        """Half-width of the quantile bracket from rounding: N·h/2."""
        return self.n_terms * self.h / 2

    def _C(self, x) -> np.ndarray:
        cum = np.cumsum(self.pmf)
        j = np.floor((np.asarray(x, dtype=float) - self.offset) / self.h + 1e-9).astype(np.int64) - self.i0
        out = np.where(j < 0, 0.0, cum[np.clip(j, 0, cum.size - 1)])
        return out

    def _Cinv(self, q) -> np.ndarray:
        cum = np.cumsum(self.pmf)
        q = np.asarray(q, dtype=float)
        j = np.searchsorted(cum, q - 1e-15, side="left")
        val = self.offset + self.h * (self.i0 + j.astype(float))
        val = np.where(j >= cum.size, np.inf, val)
        return np.where(q <= 0, -np.inf, val)

    # -- the scipy-like face ---------------------------------------------- #
    def quantile(self, q):
        """Estimate of the q-quantile (within `error_bound` + the δ shift)."""
        return self._Cinv(q) + self.error_bound

    ppf = quantile

    def quantile_bounds(self, q) -> tuple[float, float]:
        """Certified bracket (lo, hi) with lo ≤ q-quantile ≤ hi."""
        return float(self._Cinv(q - self.delta)), float(self._Cinv(q) + self.n_terms * self.h)

    def cdf(self, x):
        """Estimate of P(S ≤ x)."""
        return self._C(np.asarray(x, dtype=float) - self.error_bound)

    def sf(self, x):
        """Estimate of P(S > x)."""
        return 1.0 - self.cdf(x)

    def pdf(self, x):
        """Density at x: exact when the law is known in closed form, else the lattice's histogram with bins of
        ≥ 1% of the sd (a lattice step alone is too fine to be a density: its pmf is rounded sums)."""
        x = np.asarray(x, dtype=float)
        if self.exact is not None:
            return self.exact.pdf(x)
        if self.n_terms == 0 or self.exact_var == 0:
            return np.zeros(x.shape)  # a point mass has no density
        step = max(1, int(round(max(self.h, 0.01 * self.std()) / self.h)))
        cum = np.concatenate([[0.0], np.cumsum(self.pmf)])
        j = np.floor((x - self.support[0]) / self.h).astype(np.int64)
        a = np.clip((j // step) * step, 0, self.pmf.size)
        b = np.clip(a + step, 0, self.pmf.size)
        inside = (j >= 0) & (j < self.pmf.size)
        return np.where(inside, (cum[b] - cum[a]) / (step * self.h), 0.0)

    def logpdf(self, x):
        if self.exact is not None:
            return self.exact.logpdf(np.asarray(x, dtype=float))
        with np.errstate(divide="ignore"):
            return np.log(self.pdf(x))

    def rvs(self, size=None, random_state=None):
        """Samples (exact when the law is known in closed form; else a lattice point drawn by its pmf, plus a
        uniform offset over the [point, point + N·h) the true sum lies in)."""
        rng = np.random.default_rng(random_state)
        if self.exact is not None:
            return draw(self.exact, size, rng)
        if self.n_terms == 0:
            return np.full(() if size is None else size, self.offset)
        j = rng.choice(self.pmf.size, size=size, p=self.pmf / self.pmf.sum())
        return self.offset + self.h * (self.i0 + j) + self.n_terms * self.h * rng.random(size)

    def cdf_bounds(self, x) -> tuple[float, float]:
        """Certified bracket of P(S ≤ x)."""
        x = float(x)
        return float(self._C(x - self.n_terms * self.h)), float(min(1.0, self._C(x) + self.delta))

    def mean(self) -> float:
        return self.exact_mean

    def var(self) -> float:
        return self.exact_var

    def std(self) -> float:
        return math.sqrt(self.exact_var)


def next_fast_len(n: int) -> int:
    """The least 5-smooth number (2^i·3^j·5^k) ≥ n: scipy.fft.next_fast_len(n, real=True)."""
    if n <= 6:
        return max(n, 1)
    best = 1 << (n - 1).bit_length()  # the next power of two
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            p = p35 << max(0, (-(-n // p35) - 1).bit_length())  # p35·2^i, the least ≥ n
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


def fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Linear convolution by real FFT (numpy.fft: the same pocketfft as scipy.fft, bit for bit, without
    importing scipy.fft; scipy.signal costs ~1 s to import for this)."""
    n = a.size + b.size - 1
    size = next_fast_len(n)
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n]


def _standard_cdf(name: str, shapes, y: np.ndarray, upper: bool):
    """cdf (or sf) in standard form by scipy.special, for the families the planners meet
    most; None for others.  The scipy.stats methods add ~1 ms of argument checks per call."""
    from scipy import special

    if name == "invgamma":  # P(Y ≤ y) = Q(a, 1/y) for y > 0
        with np.errstate(divide="ignore"):
            inv = np.where(y > 0, 1.0 / np.where(y > 0, y, 1.0), np.inf)
        return np.where(y > 0, (special.gammainc if upper else special.gammaincc)(shapes[0], inv),
                        1.0 if upper else 0.0)
    if name == "gamma":
        yp = np.maximum(y, 0.0)
        return (special.gammaincc if upper else special.gammainc)(shapes[0], yp)
    if name == "norm":
        return special.ndtr(-y if upper else y)
    if name == "t":
        return special.stdtr(shapes[0], -y if upper else y)
    return None


_TAILS: dict = {}


def _tails(X, eps: float) -> tuple[float, float]:
    """(ppf(eps), isf(eps)) of a frozen distribution, computed once per object."""
    key = (X, eps)
    if key not in _TAILS:
        if len(_TAILS) > 50_000:
            _TAILS.clear()
        _TAILS[key] = (float(X.ppf(eps)), float(X.isf(eps)))
    return _TAILS[key]


def _term_pmf(t: Term, h: float, eps: float) -> tuple[int, np.ndarray]:
    """Masses of floor(coef·X / h): (first lattice index, masses)."""
    c, X = t.coef, t.dist
    a, b = _tails(X, eps)
    lo, hi = (c * a, c * b) if c > 0 else (c * b, c * a)
    i_lo, i_hi = math.floor(lo / h), math.floor(hi / h)
    edges = h * np.arange(i_lo, i_hi + 2, dtype=float)
    # P(cX ≤ v) = P(X ≤ v/c) for c > 0, P(X ≥ v/c) for c < 0
    F = None
    form = standard_form(X)
    if form is not None and form[0] in ("invgamma", "gamma", "norm", "t"):
        name, shapes, loc, scale = form
        F = _standard_cdf(name, shapes, (edges / c - loc) / scale, upper=c < 0)
    if F is None:
        F = X.cdf(edges / c) if c > 0 else X.sf(edges / c)
    masses = np.clip(np.diff(F), 0.0, None)
    return i_lo, masses


def _moments(dist, cache: dict | None) -> tuple[float, float]:
    if cache is None:
        return float(dist.mean()), float(dist.var())
    key = ("moments", dist)
    if key not in cache:
        cache[key] = (float(dist.mean()), float(dist.var()))
    return cache[key]


def _trim(i0: int, pmf: np.ndarray, trim: float) -> tuple[int, np.ndarray]:
    """Drop the extreme tails holding at most `trim` mass on each side."""
    if trim <= 0 or pmf.size < 3:
        return i0, pmf
    cum = np.cumsum(pmf)
    lo = int(np.searchsorted(cum, trim, side="right"))
    rcum = np.cumsum(pmf[::-1])
    hi = pmf.size - int(np.searchsorted(rcum, trim, side="right"))
    if hi <= lo:
        return i0, pmf
    return i0 + lo, pmf[lo:hi]


def sum_distribution(
    terms: Sequence[Term],
    *,
    h: float | None = None,
    tol: float | None = None,
    eps: float = 1e-7,
    trim: float = 1e-14,
    cache: dict | None = None,
) -> GridDistribution:
    """The distribution of Σ terms by FFT convolution on a lattice.

    Give the lattice step `h`, or `tol`, the width of the certified quantile
    bracket (then h = tol/N).  By default tol is 1% of the sum's standard
    deviation.  `eps` is the tail mass dropped from each term.  `cache` (a
    dict kept by the caller) reuses the lattice masses of terms seen before.
    """
    random = [t for t in terms if t.dist is not None and t.coef != 0.0]
    offset = float(sum(t.shift for t in terms))
    moments = [_moments(t.dist, cache) for t in random]
    mean = offset + sum(t.coef * m for t, (m, _) in zip(random, moments))
    var = sum(t.coef**2 * v for t, (_, v) in zip(random, moments))
    n = len(random)
    if n == 0:
        return GridDistribution(offset, 1.0, 0, np.array([1.0]), 0, 0.0, mean, 0.0)
    if h is None:
        if tol is None:
            tol = 0.01 * math.sqrt(var) if var > 0 else 1e-6
        h = tol / n
    def masses(t: Term):
        if cache is None:
            return _term_pmf(t, h, eps)
        key = (t.coef, t.dist, h, eps)  # the object, not its id: the key keeps it alive
        if key not in cache:
            cache[key] = _term_pmf(t, h, eps)
        return cache[key]

    # The two shortest pieces first, always (Huffman's order): n terms of about m points each cost
    # O(n·m·log n) FFT work this way, against O(n²·m) when one running sum takes the terms one by one
    # (the closed loop's re-plans explore schedules of up to hundreds of terms; benchmarks/bench_sum.py
    # times both orders).  Every convolution trims at most `trim` a side and its loss is counted in δ,
    # whatever the order.
    heap = [(p.size, k, j, p) for k, (j, p) in enumerate(masses(t) for t in random)]
    heapq.heapify(heap)
    made = len(heap)
    while len(heap) > 1:
        _, _, ja, a = heapq.heappop(heap)
        _, _, jb, b = heapq.heappop(heap)
        pmf = fft_convolve(a, b) if min(a.size, b.size) > 64 else np.convolve(a, b)
        np.clip(pmf, 0.0, None, out=pmf)  # FFT round-off can leave -1e-17
        i0, pmf = _trim(ja + jb, pmf, trim)
        heapq.heappush(heap, (pmf.size, made, i0, pmf))
        made += 1
    _, _, i0, pmf = heap[0]
    delta = max(0.0, 1.0 - float(pmf.sum()))
    return GridDistribution(offset, h, i0, pmf, n, delta, mean, var)
