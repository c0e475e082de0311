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

**Candidates proposed from the runs** (`add`): α is spent by a rule fixed before the first run (`Spending`):
the candidates fixed in advance share `first` of it, and the k-th candidate proposed later (k = 1, 2, …) gets
(1 − first)·2^−k — Σ ≤ 1 over an unbounded list.  A proposed candidate counts only seeds drawn after it was
proposed, so whatever the runs before made it (its schedule, its target's margin), its test on the seeds after is
a test supermartingale given them: P(it is certified while p < ω) ≤ its share·α, and the union bound over every
slot of the rule keeps the family-wise error ≤ α (online multiple testing with e-values: Xu & Ramdas).

**The price** (`uses`): where the plan will be run `uses` times, the search weighs the runs a certificate takes
against what the plan saves.  The allocation counts first the candidate with the least expected total — its
expected runs to a decision, at its observed rate (before any run, at the law's guess `guesses`), times its cost,
over its chance of certifying, plus `uses` × its cost — and once one is certified a cheaper candidate takes more
runs only while `uses` × the saving × its chance of certifying exceeds what its expected runs cost (else it is
*priced out*: dropped).  Every such rule reads past runs only, so validity is as above.

What is assumed: the candidates fixed in advance, their weights and the spending rule are fixed before the first
run, a proposed candidate counts seeds drawn after it was proposed only, and the runs of each candidate on different
seeds are independent and identically distributed Bernoulli trials (met ℓmax or not) — the assumption of `depl
certify`.

**The horizon and the cap** (`horizon`, `max_runs`).  Every judgement of what a candidate's next runs are worth —
dropping, the price, whether it is promising, the order the allocation starts candidates in — reckons with the runs
left to the *horizon* (`horizon` − its runs), fixed before the first run; `max_runs` only caps the runs a candidate
counts (judged between batches: a batch a candidate starts below it, it counts whole).  When a candidate that would
count the next batch has counted `max_runs`, the whole search **pauses**
(`paused`; `finished` is true, the cheapest certified so far is returned): no decision is taken that a larger cap
would take otherwise.  So `extend` to a larger cap (up to the horizon) goes on exactly where it stopped, and gives
the decisions of one uninterrupted search with that cap: nothing before the pause depended on the cap.  A candidate
near ω that the runs left to a small cap could not certify is paused at the cap, not priced out by it.  A rerun is one
search observed longer, so its validity is the argument above, unchanged (every candidate ever certified is covered
by the same union bound).

`simulate` checks it by Monte Carlo on landscapes of true success probabilities (tests/test_search.py,
benchmarks/bench_search.py).  Pure numbers: numpy and scipy through `sequential`, no law, no scenario, no torch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..omega import Omega
from .alpha import check_alpha
from .bounds import clopper_pearson_upper
from .value import Outcome
from .sequential import DEFAULT_PRIOR, PRIORS, Sequential, Verdict, expected_runs, fewest_runs

WEIGHT_RULES = ("equal", "cheaper")
DROP_BELOW = 0.01
ALLOCATIONS = ("focus", "all")
DEFAULT_ALLOCATION = "focus"
FOCUS = 0.5            # `focus`: a candidate certifying within its runs left with at least this probability suffices
PATIENCE = 2           # candidates that fell short before one is proposed from the runs (`Search.stalled`)
# the runs a new search's decisions reckon with ("The horizon and the cap") where --horizon is not given, whatever
# --max-runs is (the first --max-runs where larger), so that a rerun with a larger --max-runs (up to it) decides as
# one search with that cap from the start
HORIZON = 1000
MAX_RUNS = 500         # the most runs a candidate of a new search counts where --max-runs is not given
# how many times the plan returned will be run, where the user does not say: a plan is run many times between two
# certificates, so its cost decides, and a certificate's runs weigh only where they cost more than a thousandth of
# the plan's cost per use (`--uses`)
USES = 1000


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


def value_shares(costs: Sequence[float], guesses: Sequence[float | None], omega: float, alpha: float,
                 uses: float | None, horizon: int, prior: str = DEFAULT_PRIOR) -> np.ndarray:
    """Shares of α fixed before any run where they buy most: halving (1/2, 1/4, …, normalised) in the order the
    search will try the candidates — by `Search.value` at the law's guesses (each at an equal share), reckoning with
    `horizon` runs, or by cost without `uses` — so the candidate likeliest to end the search holds the most α.
    Costs nondecreasing."""
    n = len(costs)
    probe = Search(list(costs), omega, alpha, max_runs=horizon, prior=prior, allocation="all", uses=uses,
                   guesses=list(guesses), horizon=horizon)
    order = probe.priority()
    w = np.zeros(n)
    for rank, i in enumerate(order):
        w[i] = 0.5 ** rank
    return w / w.sum()


@dataclass(frozen=True)
class Spending:
    """How α is shared, fixed before the first run: `first` of it over the candidates fixed in advance (by their
    weights), and (1 − first)·2^−k to the k-th candidate proposed from the runs (k = 1, 2, …): Σ ≤ 1 however many
    are proposed.  `first` = 1: none may be proposed."""

    first: float = 1.0

    def __post_init__(self):
        if not 0.0 < self.first <= 1.0:
            raise ValueError(f"spending: the share of the first candidates must be in (0, 1], not {self.first}")

    def later(self, k: int) -> float:
        """The share of α of the k-th candidate proposed from the runs (k ≥ 1)."""
        if k < 1:
            raise ValueError("proposals count from 1")
        return (1.0 - self.first) * 0.5 ** k

    def to_json(self) -> dict:
        return {"first": self.first, "later": "(1 - first) * 2**-k for the k-th proposed"}


@functools.lru_cache(maxsize=200_000)
def p_certify(omega: float, alpha: float, hits: int, runs: int, left: int, prior: str = DEFAULT_PRIOR) -> float:
    """P(the test at level α, at (hits, runs), certifies within `left` more runs) if each meets ℓmax at the
    Laplace rate (hits + 1)/(runs + 2): what dropping reads (cached: searches revisit the same counts)."""
    if left <= 0:
        return 0.0
    rate = (hits + 1) / (runs + 2)
    return expected_runs(rate, omega, alpha, max_runs=left, hits=hits, runs=runs, prior=prior).certify


_fewest = functools.lru_cache(maxsize=1024)(fewest_runs)


@functools.lru_cache(maxsize=200_000)
def _outlook(omega: float, alpha: float, rate: float, hits: int, runs: int, left: int, prior: str) -> tuple[float, float]:
    """(mean more runs to a decision, P(certified)) of a test at (hits, runs) within `left` more runs, each
    meeting ℓmax with probability `rate`."""
    if left <= 0:
        return 0.0, 0.0
    need = expected_runs(min(max(rate, 1e-9), 1.0 - 1e-9), omega, alpha, max_runs=left, hits=hits, runs=runs,
                         prior=prior)
    return need.mean_runs, need.certify


@dataclass
class Arm:
    """One candidate in the search: its cost, its share of α and its test."""

    index: int
    cost: float
    weight: float
    test: Sequential
    dropped_after: int | None = None   # the runs it had counted when it was dropped
    guess: float | None = None         # P(meets ℓmax) as its law guessed before any run (None: no guess)
    proposal: int = 0                  # 0: fixed in advance; k: the k-th proposed from the runs
    priced_out: bool = False           # dropped because its runs would cost more than it saves (`uses`)

    @property
    def status(self) -> str:
        """certified, refuted, dropped or undecided."""
        if self.test.decided:
            return self.test.state.verdict.value
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
    max_runs: int = 500                     # no candidate starts a batch once it has counted these (`paused`)
    drop_below: float = DROP_BELOW
    prior: str = DEFAULT_PRIOR              # each candidate's e-process (depl.certificate.PRIORS)
    allocation: str = DEFAULT_ALLOCATION    # which candidates in the race count the next batch (ALLOCATIONS)
    uses: float | None = None               # the plan's runs to come: weigh the certificate's runs (None: cost alone)
    guesses: Sequence[float] | None = None  # each first candidate's P(meets ℓmax) by its law, before any run
    spending: Spending = field(default_factory=Spending)   # α's shares, the first candidates' and the proposed
    horizon: int | None = None              # the runs decisions reckon with (module docstring) [default: max_runs]
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
        self.horizon = int(self.max_runs if self.horizon is None else self.horizon)
        if self.horizon < 1:
            raise ValueError("horizon: at least 1")
        if self.prior not in PRIORS:
            raise ValueError(f"prior {self.prior!r}: must be one of {', '.join(PRIORS)}")
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation {self.allocation!r}: must be one of {', '.join(ALLOCATIONS)}")
        if self.uses is not None and not self.uses > 0:
            raise ValueError(f"uses: a positive number of runs of the plan, not {self.uses}")
        self.uses = None if self.uses is None else float(self.uses)   # 1000 and 1000.0: one value, one manifest
        guesses = list(self.guesses) if self.guesses is not None else [None] * len(costs)
        if len(guesses) != len(costs):
            raise ValueError("guesses: one per candidate")
        w = w * self.spending.first
        self.arms = [Arm(i, c, float(wi), Sequential(self.omega, float(wi) * self.alpha, self.prior), guess=g)
                     for i, (c, wi, g) in enumerate(zip(costs, w, guesses))]
        self.started = []
        self._allocate()

    def take(self, weights: Sequence[float], guesses: Sequence[float | None]) -> None:
        """Before any run: the shares of α (`Arm.weight`) and the guesses its store recorded for the candidates
        fixed in advance, where they are this search's to rounding (computed on another machine, they differ in the
        last digits) — so that a rerun decides on the numbers its store bound."""
        if any(a.test.runs for a in self.arms) or len(weights) != len(self.arms) or len(guesses) != len(self.arms):
            raise ValueError("a search takes its store's numbers before any run, one per candidate")
        for a, w, g in zip(self.arms, weights, guesses):
            a.weight, a.guess = float(w), g
            a.test = Sequential(self.omega, a.weight * self.alpha, self.prior)
        self.started = []
        self._allocate()

    @property
    def proposed(self) -> int:
        """How many candidates were proposed from the runs."""
        return sum(a.proposal > 0 for a in self.arms)

    def add(self, cost: float, guess: float | None = None) -> int:
        """Propose a candidate from the runs so far: the next slot of the spending rule, its test at that share of
        α; it counts only runs recorded from now on.  Its index."""
        k = self.proposed + 1
        share = self.spending.later(k)
        if share <= 0.0:
            raise ValueError("this search's spending rule leaves no α for candidates proposed from its runs")
        i = len(self.arms)
        self.arms.append(Arm(i, float(cost), share, Sequential(self.omega, share * self.alpha, self.prior),
                             guess=guess, proposal=k))
        self._allocate()
        return i

    def by_cost(self) -> list[Arm]:
        return sorted(self.arms, key=lambda a: (a.cost, a.index))

    def best(self) -> int | None:
        """The cheapest certified candidate (None while none is)."""
        return next((a.index for a in self.by_cost() if a.status == "certified"), None)

    def alive(self) -> list[int]:
        """The candidates in the race, cheapest first: undecided, not dropped, cheaper than the best (one that has
        counted `max_runs` is in it still: it pauses the search, `paused`)."""
        b = self.best()
        top = math.inf if b is None else (self.arms[b].cost, b)
        return [a.index for a in self.by_cost() if a.status == "undecided"
                and (b is None or (a.cost, a.index) < top)]

    def left(self, i: int) -> int:
        """The runs candidate i's judgements reckon with: to the horizon (to the cap, where it grew past it; one
        that reached the horizon has none left, and is dropped)."""
        return max(self.horizon, self.max_runs) - self.arms[i].test.runs

    @property
    def paused(self) -> list[int]:
        """The candidates that would count the next batch but have counted `max_runs`: the search stops there, to go
        on where it stopped once the cap grows (`extend`)."""
        return [i for i in self.counting() if self.arms[i].test.runs >= self.max_runs]

    def outlook(self, i: int) -> tuple[float, float]:
        """Candidate i's (mean more runs to a decision, P(certified)) within its runs left: at its observed rate
        (Laplace) once it has counted the runs its test needs when every one meets ℓmax, before that at its law's
        guess where it has one."""
        a, t = self.arms[i], self.arms[i].test
        left = self.left(i)
        if a.guess is not None and t.runs < _fewest(float(self.omega), t.alpha, self.prior):
            rate = a.guess * (self.learned() if a.proposal == 0 else 1.0)
        else:
            rate = (t.hits + 1) / (t.runs + 2)
        return _outlook(float(self.omega), t.alpha, round(rate, 4), t.hits, t.runs, left, self.prior)

    def value(self, i: int) -> float:
        """Candidate i's expected total with `uses`: its runs' expected cost over its chance of certifying, plus
        `uses` × its cost (the cost alone without `uses`)."""
        a = self.arms[i]
        if self.uses is None:
            return a.cost
        more, p = self.outlook(i)
        return (more * a.cost) / max(p, 1e-6) + self.uses * a.cost

    def priority(self) -> list[int]:
        """The candidates in the race in the order the allocation starts them: cheapest first, or by `value`."""
        alive = self.alive()
        return alive if self.uses is None else sorted(alive, key=lambda i: (self.value(i), i))

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
        return p_certify(float(self.omega), t.alpha, t.hits, t.runs, self.left(i), self.prior) >= FOCUS

    def _allocate(self) -> None:
        """`focus`: start the candidates in the race in `priority` order, one at a time, until one counting is
        promising."""
        if self.allocation == "all":
            return
        alive = self.alive()
        for i in self.priority():
            if any(self.promising(j) for j in alive if j in self.started):
                break
            if i not in self.started:
                self.started.append(i)

    @property
    def finished(self) -> bool:
        """Nothing left in the race, or the search paused at the cap (`paused`)."""
        return not self.alive() or bool(self.paused)

    @property
    def stalled(self) -> bool:
        """The time to propose a candidate from the runs (`add`, where the spending rule leaves α for it): none
        certified, and none in the race promising, or `PATIENCE` more candidates that started counting fell short
        (dropped, refuted or no longer promising) since the last proposal — the law that proposed them was
        optimistic about them."""
        if self.best() is not None:
            return False
        alive = self.alive()
        if not any(self.promising(i) for i in alive):
            return True
        return len(self.fallen()) >= PATIENCE * (self.proposed + 1)

    def fallen(self) -> list[int]:
        """The candidates that started counting and fell short: dropped, refuted, or no longer promising."""
        began = [a for a in self.arms if a.test.runs > 0]
        return [a.index for a in began if a.status in ("refuted", "dropped") or
                (a.status == "undecided" and not self.promising(a.index))]

    def learned(self) -> float:
        """What the runs say of the law's guesses: the pooled observed rate of the fallen candidates fixed in advance
        over their pooled guess (1 where none fell or none had a guess) — below 1 where the law was optimistic."""
        fell = [self.arms[i] for i in self.fallen() if self.arms[i].guess is not None and self.arms[i].proposal == 0]
        if not fell:
            return 1.0
        seen = sum(a.test.hits + 1 for a in fell) / sum(a.test.runs + 2 for a in fell)
        return min(1.0, seen / (sum(a.guess for a in fell) / len(fell)))

    def extend(self, max_runs: int) -> None:
        """Go on to `max_runs` (at least the current): a search paused at the smaller cap goes on where it stopped,
        as one uninterrupted search with the larger cap (up to the horizon) would have; no past run or decision
        changes (each test is anytime-valid: Ville's inequality holds over its whole sequence, however long it is
        let run)."""
        if max_runs < self.max_runs:
            raise ValueError(f"max_runs only grows: {max_runs} < {self.max_runs}")
        self.max_runs = int(max_runs)
        self._allocate()

    def record(self, i: int, met: bool) -> None:
        """One run of candidate i (a run after its test decided is not counted).  The cap is judged between batches
        (`paused`): a candidate that started a batch below `max_runs` counts it whole, so that a search paused at its
        cap and one with a larger cap count the same seeds."""
        a = self.arms[i]
        if not a.test.decided:
            a.test.add(bool(met))

    def after_batch(self) -> None:
        """Drop each candidate whose test, at its observed rate, would certify within its runs left with
        probability < drop_below, once it has counted fewest_runs at its level (a function of its past runs only)."""
        for i in self.alive():
            a = self.arms[i]
            t = a.test
            if t.runs < _fewest(float(self.omega), t.alpha, self.prior):  # too few runs for its rate to say anything
                continue
            if p_certify(float(self.omega), t.alpha, t.hits, t.runs, self.left(i), self.prior) < self.drop_below:
                a.dropped_after = t.runs
        self._price_out()
        self._allocate()

    def _price_out(self) -> None:
        """With `uses`, once a candidate is certified: drop each cheaper one whose expected runs (at its rate, or
        its guess) cost more than `uses` × what it would save × its chance of certifying."""
        b = self.best()
        if self.uses is None or b is None:
            return
        for i in self.alive():
            a = self.arms[i]
            more, p = self.outlook(i)
            if more * a.cost >= self.uses * (self.arms[b].cost - a.cost) * p:
                a.dropped_after, a.priced_out = a.test.runs, True

    @property
    def outcome(self) -> Outcome:
        """certified (some candidate is), refuted (every one is) or undecided."""
        if self.best() is not None:
            return Outcome.CERTIFIED
        return Outcome.REFUTED if all(a.status == "refuted" for a in self.arms) else Outcome.UNDECIDED

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
    mean_runs_cost: float = 0.0       # Σ runs × cost over the candidates, per search
    mean_plan_cost: float = math.nan  # the cost of the plan returned, over the searches that returned one

    @property
    def p_wrong(self) -> float:
        return self.wrong / self.reps

    @property
    def wrong_upper(self) -> float:
        """The one-sided 95 % Clopper–Pearson upper bound on P(wrong)."""
        return clopper_pearson_upper(self.wrong, self.reps, 0.05)


def simulate(ps: Sequence[float], omega: float, alpha: float, *, reps: int = 1000, max_runs: int = 300,
             batch: int = 8, shares: Sequence[float] | None = None, correlated: bool = False,
             drop_below: float = DROP_BELOW, seed: int = 0, allocation: str = DEFAULT_ALLOCATION,
             costs: Sequence[float] | None = None, uses: float | None = None,
             guesses: Sequence[float] | None = None, spending: Spending | None = None,
             propose: Callable | None = None, proposals: int = 0, horizon: int | None = None,
             grow_to: int | None = None) -> Simulated:
    """Run the search `reps` times on candidates (cheapest first) meeting ℓmax with true probabilities `ps`.
    `correlated`: a seed's outcomes are nested (one uniform u per seed, candidate i meets ℓmax iff u < p_i, as
    prefixes of one run are), else independent.  `costs` [default 0, 1, …], `uses`, `guesses` and `spending` as the
    search takes them.  `propose(search, rng) -> (p, cost, guess)`: a candidate proposed from the runs whenever the
    search would finish with none certified, up to `proposals` times (its true p, which may be adversarial).
    `horizon` as the search takes it; `grow_to`: a search paused at `max_runs` goes on to this larger cap (`extend`),
    as a rerun with a larger --max-runs does."""
    rng = np.random.default_rng(seed)
    base = [float(x) for x in ps]
    wrong, certified, seeds_total, runs_total, runs_cost, plan_cost = 0, 0, 0, 0, 0.0, 0.0
    returned = np.zeros(len(base) + proposals, int)
    for _ in range(reps):
        truth = list(base)
        s = Search(list(costs) if costs is not None else list(range(len(base))), omega, alpha, shares, max_runs,
                   drop_below, allocation=allocation, uses=uses, guesses=guesses, spending=spending or Spending(),
                   horizon=horizon)
        seeds = 0
        while True:
            if s.stalled and propose is not None and s.proposed < proposals:
                p, cost, guess = propose(s, rng)
                s.add(cost, guess)
                truth.append(float(p))
            if s.paused and grow_to is not None and grow_to > s.max_runs:
                s.extend(grow_to)
            if s.finished:
                break
            alive = s.counting()
            for _k in range(batch):
                u = rng.random() if correlated else rng.random(len(truth))
                for i in alive:
                    s.record(i, (u if correlated else u[i]) < truth[i])
            seeds += batch
            s.after_batch()
        b = s.best()
        seeds_total += seeds
        runs_total += sum(a.test.runs for a in s.arms)
        runs_cost += sum(a.test.runs * a.cost for a in s.arms)
        if b is not None:
            certified += 1
            returned[b] += 1
            wrong += bool(truth[b] < omega)
            plan_cost += s.arms[b].cost
    return Simulated(reps, wrong, certified, seeds_total / reps, runs_total / reps, returned, alpha,
                     runs_cost / reps, plan_cost / certified if certified else math.nan)


def ladder(omega: float, steps: int) -> list[float]:
    """ω, then stricter levels ω + k(1 − ω)/steps, k = 1 … steps − 1: the levels candidates are planned at."""
    return [omega + k * (1.0 - omega) / steps for k in range(max(1, steps))]


__all__ = ["WEIGHT_RULES", "DROP_BELOW", "ALLOCATIONS", "DEFAULT_ALLOCATION", "FOCUS", "weights", "p_certify", "Arm",
           "Search", "Spending", "Simulated", "simulate", "ladder", "value_shares"]
