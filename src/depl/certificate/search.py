"""The certified search: many candidate plans, fixed in advance, tested on the same fresh runs at once, and the
cheapest one the runs certify returned — with one confidence 1 − α for whichever is returned.

Each candidate i (cheapest first) has its own sequential test of "p_i ≥ ω" (`depl.certificate.Sequential`) at
level w_i·α, the weights fixed before any run, Σ w_i ≤ 1 (`weights`).  Runs arrive in batches of seeds; every
candidate still in the race counts the batch's seeds in seed order until its test decides.  Between batches a
candidate is **dropped** — it takes no more runs — once the test, at the candidate's observed rate
(Laplace-smoothed, (hits + 1)/(runs + 2)), certifies within the runs left with probability below `drop_below`
(`depl.certificate.expected_runs`), judged only once it has counted the runs its test needs to certify when
every one meets ℓmax (`fewest_runs`; before that its rate says too little); and a candidate costlier than one already certified takes no more runs
either.  Which candidates in the race count the next batch is the **allocation** (`ALLOCATIONS`): `all`, every
one of them; `focus` (the default), the cheapest in the race alone while it is promising — it has not yet counted
`fewest_runs`, or at its observed rate it certifies within its runs left with probability ≥ `FOCUS` — and the
next cheapest added, one at a time, while none of those counting is; a candidate that started counting goes on
until it decides, is dropped or stops (its seeds are consecutive).  Runs go where they decide the cheapest
certifiable candidate: a costlier candidate trains only once the cheaper ones look unlikely to certify.
The search stops when the cheapest candidate neither dropped nor refuted is certified, when no
candidate is left in the race, or when the runs run out; it returns the cheapest certified candidate.

**Why the returned plan holds with probability ≥ 1 − α (the family-wise error).**  For a candidate whose
true p_i < ω, its test's e-process M⁺_i is a nonnegative supermartingale with mean ≤ 1 under any rule that
decides, from the runs seen so far only, whether the candidate counts the next run (a stopped or skipped
supermartingale is still one: optional stopping).  Ville's inequality gives P(M⁺_i ever ≥ 1/(w_i α)) ≤ w_i α,
whatever that rule — dropping, the allocation, the stop of the search, the order of the batches (a candidate
that starts counting late counts seeds drawn after that decision, never ones already seen).  The union bound over the
candidates with p_i < ω gives P(some candidate with p_i < ω is certified) ≤ Σ w_i α ≤ α (weighted
e-Bonferroni), so the plan returned, being one of the certified, meets ℓmax with probability ≥ ω except with
probability ≤ α.  Dropping never certifies, so it costs no α; the runs of a candidate may be correlated with
another's (prefixes of one training run): the union bound needs no independence between candidates.

What is assumed: the candidates and their weights are fixed before the first run (nothing a run shows can
add a candidate or move weight to it), and the runs of each candidate on different seeds are independent and
identically distributed Bernoulli trials (met ℓmax or not) — the assumption of `depl certify`.

`simulate` checks it by Monte Carlo on landscapes of true success probabilities (tests/test_search.py,
benchmarks/bench_search.py).  Pure numbers: numpy and scipy through `sequential`, no law, no scenario, no torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..omega import Omega
from .alpha import check_alpha
from .bounds import clopper_pearson_upper
from .sequential import DEFAULT_PRIOR, PRIORS, Sequential, Verdict, expected_runs, fewest_runs

WEIGHT_RULES = ("equal", "cheaper")
DROP_BELOW = 0.01
ALLOCATIONS = ("focus", "all")
DEFAULT_ALLOCATION = "focus"
FOCUS = 0.5            # `focus`: a candidate certifying within its runs left with at least this probability suffices


def weights(n: int, rule: str = "equal") -> np.ndarray:
    """The share of α of each of n candidates, cheapest first, summing to 1: `equal` (1/n each) or `cheaper`
    (∝ 1/(i + 1): more on the cheaper candidates, which are the ones worth certifying)."""
    if n < 1:
        raise ValueError("a search needs at least one candidate")
    if rule == "equal":
        w = np.ones(n)
    elif rule == "cheaper":
        w = 1.0 / np.arange(1, n + 1)
    else:
        raise ValueError(f"weights {rule!r}: choose one of {', '.join(WEIGHT_RULES)}")
    return w / w.sum()


@functools.lru_cache(maxsize=200_000)
def p_certify(omega: float, alpha: float, hits: int, runs: int, left: int, prior: str = DEFAULT_PRIOR) -> float:
    """P(the test at level α, at (hits, runs), certifies within `left` more runs) if each meets ℓmax at the
    Laplace rate (hits + 1)/(runs + 2): what dropping reads (cached: searches revisit the same counts)."""
    if left <= 0:
        return 0.0
    rate = (hits + 1) / (runs + 2)
    return expected_runs(rate, omega, alpha, max_runs=left, hits=hits, runs=runs, prior=prior).certify


_fewest = functools.lru_cache(maxsize=1024)(fewest_runs)


@dataclass
class Arm:
    """One candidate in the search: its cost, its share of α and its test."""

    index: int
    cost: float
    weight: float
    test: Sequential
    dropped_after: int | None = None   # the runs it had counted when it was dropped

    @property
    def status(self) -> str:
        """certified, refuted, dropped or undecided."""
        if self.test.decided:
            return self.test.state.verdict
        return "dropped" if self.dropped_after is not None else "undecided"

    @property
    def state(self) -> Verdict:
        return self.test.state


@dataclass
class Search:
    """The search over candidates of nondecreasing `costs` (module docstring); feed it runs with `record`, one
    seed at a time in seed order, and call `after_batch` between batches."""

    costs: Sequence[float]
    omega: Omega
    alpha: float
    shares: Sequence[float] | None = None   # w_i, Σ ≤ 1 [default: weights(n, "equal")]
    max_runs: int = 500                     # the most runs any candidate counts
    drop_below: float = DROP_BELOW
    prior: str = DEFAULT_PRIOR              # each candidate's e-process (depl.certificate.PRIORS)
    allocation: str = DEFAULT_ALLOCATION    # which candidates in the race count the next batch (ALLOCATIONS)
    arms: list[Arm] = field(init=False)
    started: list[int] = field(init=False)  # the candidates that started counting, in the order they started

    def __post_init__(self):
        check_alpha(self.alpha)
        costs = [float(c) for c in self.costs]
        if not costs or any(b < a for a, b in zip(costs, costs[1:])):
            raise ValueError("a search's candidates come cheapest first (costs nondecreasing), at least one")
        w = weights(len(costs)) if self.shares is None else np.asarray(self.shares, float)
        if len(w) != len(costs) or np.any(w <= 0) or w.sum() > 1.0 + 1e-12:
            raise ValueError("weights: one positive share per candidate, summing to at most 1")
        if self.max_runs < 1:
            raise ValueError("max_runs: at least 1")
        if self.prior not in PRIORS:
            raise ValueError(f"prior {self.prior!r}: must be one of {', '.join(PRIORS)}")
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation {self.allocation!r}: must be one of {', '.join(ALLOCATIONS)}")
        self.arms = [Arm(i, c, float(wi), Sequential(self.omega, float(wi) * self.alpha, self.prior))
                     for i, (c, wi) in enumerate(zip(costs, w))]
        self.started = []
        self._allocate()

    def best(self) -> int | None:
        """The cheapest certified candidate (None while none is)."""
        return next((a.index for a in self.arms if a.status == "certified"), None)

    def alive(self) -> list[int]:
        """The candidates that take the next runs: undecided, not dropped, runs left, cheaper than the best."""
        b = self.best()
        return [a.index for a in self.arms if a.status == "undecided" and a.test.runs < self.max_runs
                and (b is None or a.index < b)]

    def counting(self) -> list[int]:
        """The candidates in the race that count the next batch (the allocation; cheapest first)."""
        alive = self.alive()
        if self.allocation == "all":
            return alive
        return [i for i in alive if i in self.started]

    def promising(self, i: int) -> bool:
        """Whether candidate i, counting alone, is worth the next runs (`focus`): too few runs yet for its rate to
        say anything, or it certifies within its runs left with probability ≥ FOCUS at its observed rate."""
        t = self.arms[i].test
        if t.runs < _fewest(float(self.omega), t.alpha, self.prior):
            return True
        return p_certify(float(self.omega), t.alpha, t.hits, t.runs, self.max_runs - t.runs, self.prior) >= FOCUS

    def _allocate(self) -> None:
        """`focus`: start the cheapest candidates in the race, one at a time, until one counting is promising."""
        if self.allocation == "all":
            return
        alive = self.alive()
        for i in alive:
            if any(self.promising(j) for j in alive if j in self.started):
                break
            if i not in self.started:
                self.started.append(i)

    @property
    def finished(self) -> bool:
        return not self.alive()

    def extend(self, max_runs: int) -> None:
        """Go on to `max_runs` (at least the current): candidates that stopped at the smaller limit, undecided, take
        runs again; no past run or decision changes (each test is anytime-valid: Ville's inequality holds over its
        whole sequence, however long it is let run)."""
        if max_runs < self.max_runs:
            raise ValueError(f"max_runs only grows: {max_runs} < {self.max_runs}")
        self.max_runs = int(max_runs)
        self._allocate()

    def record(self, i: int, met: bool) -> None:
        """One run of candidate i (a run after its test decided is not counted)."""
        a = self.arms[i]
        if not a.test.decided and a.test.runs < self.max_runs:
            a.test.add(bool(met))

    def after_batch(self) -> None:
        """Drop each candidate whose test, at its observed rate, would certify within its runs left with
        probability < drop_below, once it has counted fewest_runs at its level (a function of its past runs only)."""
        for i in self.alive():
            a = self.arms[i]
            t = a.test
            if t.runs < _fewest(float(self.omega), t.alpha, self.prior):  # too few runs for its rate to say anything
                continue
            if p_certify(float(self.omega), t.alpha, t.hits, t.runs, self.max_runs - t.runs, self.prior) < \
                    self.drop_below:
                a.dropped_after = t.runs
        self._allocate()

    @property
    def outcome(self) -> str:
        """certified (some candidate is), refuted (every one is) or undecided."""
        if self.best() is not None:
            return "certified"
        return "refuted" if all(a.status == "refuted" for a in self.arms) else "undecided"

    def more_runs(self, i: int, horizon: int | None = None) -> dict:
        """What going on with candidate i would cost at its observed rate: mean and median more runs, and
        P(certified) within `horizon` more [default 10 × max(max_runs, 100)]."""
        t = self.arms[i].test
        horizon = horizon or 10 * max(self.max_runs, 100)
        rate = (t.hits + 1) / (t.runs + 2)
        need = expected_runs(rate, self.omega, t.alpha, max_runs=horizon, hits=t.hits, runs=t.runs, prior=self.prior)
        return {"rate": rate, "mean_more_runs": need.mean_runs, "median_more_runs": need.median_runs,
                "p_certify": need.certify, "horizon": horizon}

    def likeliest(self) -> int | None:
        """Among the candidates not refuted, the one likeliest to certify if the runs went on (cheapest on a tie)."""
        left = [a.index for a in self.arms if a.status in ("undecided", "dropped")]
        return max(left, key=lambda i: (self.more_runs(i)["p_certify"], -i)) if left else None


@dataclass(frozen=True)
class Simulated:
    """A Monte Carlo of the search on one landscape of true success probabilities."""

    reps: int
    wrong: int                # draws whose returned candidate has p < ω
    certified: int            # draws that returned a candidate
    mean_seeds: float         # seeds drawn per search (each trains every candidate group still in the race)
    mean_runs: float          # runs counted over all candidates per search
    returned: np.ndarray      # how often each candidate was returned
    alpha: float

    @property
    def p_wrong(self) -> float:
        return self.wrong / self.reps

    @property
    def wrong_upper(self) -> float:
        """The one-sided 95 % Clopper–Pearson upper bound on P(wrong)."""
        return clopper_pearson_upper(self.wrong, self.reps, 0.05)


def simulate(ps: Sequence[float], omega: float, alpha: float, *, reps: int = 1000, max_runs: int = 300,
             batch: int = 8, shares: Sequence[float] | None = None, correlated: bool = False,
             drop_below: float = DROP_BELOW, seed: int = 0, allocation: str = DEFAULT_ALLOCATION) -> Simulated:
    """Run the search `reps` times on candidates (cheapest first) meeting ℓmax with true probabilities `ps`.
    `correlated`: a seed's outcomes are nested (one uniform u per seed, candidate i meets ℓmax iff u < p_i, as
    prefixes of one run are), else independent."""
    rng = np.random.default_rng(seed)
    ps = np.asarray(ps, float)
    n, wrong, certified, seeds_total, runs_total = len(ps), 0, 0, 0, 0
    returned = np.zeros(n, int)
    for _ in range(reps):
        s = Search(list(range(n)), omega, alpha, shares, max_runs, drop_below, allocation=allocation)
        seeds = 0
        while not s.finished:
            alive = s.counting()
            u = rng.random(batch) if correlated else None
            for k in range(batch):
                draws = u[k] if correlated else rng.random(n)
                for i in alive:
                    s.record(i, (draws if correlated else draws[i]) < ps[i])
            seeds += batch
            s.after_batch()
        b = s.best()
        seeds_total += seeds
        runs_total += sum(a.test.runs for a in s.arms)
        if b is not None:
            certified += 1
            returned[b] += 1
            wrong += bool(ps[b] < omega)
    return Simulated(reps, wrong, certified, seeds_total / reps, runs_total / reps, returned, alpha)


def ladder(omega: float, steps: int) -> list[float]:
    """ω, then stricter levels ω + k(1 − ω)/steps, k = 1 … steps − 1: the levels candidates are planned at."""
    return [omega + k * (1.0 - omega) / steps for k in range(max(1, steps))]


__all__ = ["WEIGHT_RULES", "DROP_BELOW", "ALLOCATIONS", "DEFAULT_ALLOCATION", "FOCUS", "weights", "p_certify", "Arm", "Search", "Simulated", "simulate",
           "ladder"]
