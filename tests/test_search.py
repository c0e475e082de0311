"""The certified search (depl.certificate.search): its rules one by one, and by Monte Carlo on adversarial
landscapes, P(the returned candidate's true p < ω) ≤ α (benchmarks/bench_search.py has the full table)."""

from __future__ import annotations

import numpy as np
import pytest

from depl.certificate import Sequential, fewest_runs
from depl.certificate.search import Search, ladder, p_certify, simulate, weights


def test_weights_sum_to_one_and_favour_the_cheaper_when_asked():
    assert weights(4).tolist() == [0.25] * 4
    w = weights(4, "cheaper")
    assert w.sum() == pytest.approx(1.0) and np.all(np.diff(w) < 0)
    with pytest.raises(ValueError):
        weights(3, "loudest")


def test_a_search_refuses_unsorted_costs_and_shares_over_one():
    with pytest.raises(ValueError, match="cheapest first"):
        Search([2.0, 1.0], 0.9, 0.05)
    with pytest.raises(ValueError, match="at most 1"):
        Search([1.0, 2.0], 0.9, 0.05, shares=[0.6, 0.6])


def test_each_candidate_is_tested_at_its_share_of_alpha():
    s = Search([1.0, 2.0, 3.0, 4.0], 0.8, 0.05)
    assert [a.test.alpha for a in s.arms] == pytest.approx([0.0125] * 4)


def _feed(s: Search, outcomes: dict[int, list[bool]], n: int) -> None:
    for k in range(n):
        for i in s.alive():
            s.record(i, outcomes[i][k])


def test_it_returns_the_cheapest_certified_and_stops_spending_on_costlier_ones():
    s = Search([1.0, 2.0, 3.0], 0.5, 0.05, max_runs=400)
    hits = {0: [True] * 400, 1: [True] * 400, 2: [True] * 400}
    alone = Sequential(0.5, 0.05 / 3)
    need = 0
    while not alone.decided:
        alone.add(True)
        need += 1
    _feed(s, hits, need)   # every candidate certifies at the same run: the cheapest is returned
    assert s.best() == 0 and s.outcome == "certified" and s.finished
    assert [a.test.runs for a in s.arms] == [need] * 3


def test_a_costlier_certified_candidate_waits_for_the_cheaper_ones_to_be_decided():
    s = Search([1.0, 2.0], 0.5, 0.05, max_runs=400)
    # the cheap one meets ℓmax half the time (undecided for long), the dear one always: the dear one certifies
    outcomes = {0: [k % 2 == 0 for k in range(400)], 1: [True] * 400}
    _feed(s, outcomes, 20)
    assert s.arms[1].status == "certified" and s.best() == 1 and s.alive() == [0]
    assert not s.finished   # the cheaper candidate is still in the race: it could still be certified


def test_dropping_is_a_function_of_past_runs_and_never_certifies():
    s = Search([1.0, 2.0], 0.9, 0.05, max_runs=300)
    k = fewest_runs(0.9, 0.025)
    outcomes = {0: [i % 5 != 0 for i in range(300)], 1: [i % 5 != 0 for i in range(300)]}  # 80 % against ω 0.9
    _feed(s, outcomes, k - 1)
    s.after_batch()
    assert all(a.status == "undecided" for a in s.arms)   # not judged before the runs a certificate needs
    _feed(s, outcomes, 1)
    s.after_batch()
    assert [a.status for a in s.arms] == ["dropped", "dropped"] and s.finished and s.outcome == "undecided"
    assert p_certify(0.9, 0.025, s.arms[0].test.hits, k, 300 - k) < 0.01
    assert s.likeliest() in (0, 1) and s.more_runs(0)["mean_more_runs"] > 0


def test_ladder_starts_at_omega_and_stays_below_one():
    assert ladder(0.9, 5) == pytest.approx([0.9, 0.92, 0.94, 0.96, 0.98])


@pytest.mark.slow  # a Monte Carlo of whole searches
@pytest.mark.parametrize("correlated", [False, True])
def test_monte_carlo_the_returned_candidate_meets_omega_but_with_probability_at_most_alpha(correlated):
    """Adversarial: the three cheapest meet ℓmax with probability ω − 0.02 (never refuted in the budget, and
    the likeliest to be certified wrongly), two exactly ω, one well above."""
    omega, alpha = 0.9, 0.05
    ps = [0.88, 0.88, 0.88, 0.9, 0.9, 0.97]
    r = simulate(ps, omega, alpha, reps=150, max_runs=200, batch=8, correlated=correlated, seed=1 + correlated)
    assert r.wrong_upper <= alpha, (r.wrong, r.reps)
    assert r.certified >= 0.5 * r.reps    # and it does find the good one most of the time
    assert r.returned[5] >= r.returned[:3].sum()


@pytest.mark.slow  # a Monte Carlo of whole searches
def test_monte_carlo_a_landscape_of_bad_candidates_is_almost_never_certified():
    r = simulate([0.86, 0.87, 0.88, 0.88], 0.9, 0.1, reps=150, max_runs=200, batch=8, seed=7)
    assert r.wrong == r.certified and r.wrong_upper <= 0.1


# --------------------------------------------------------------------------- #
# The price (uses), α where it buys most, candidates proposed from the runs
# --------------------------------------------------------------------------- #

def test_with_uses_a_cheaper_candidate_is_priced_out_once_a_costlier_one_is_certified():
    """100 uses: saving 1 per use cannot pay for the runs a candidate near ω still needs; with a million it can."""
    from depl.certificate.search import Search

    for uses, priced in ((100, True), (1e6, False)):
        s = Search([100.0, 101.0], 0.9, 0.05, max_runs=500, allocation="all", uses=uses)
        k = 0
        while s.arms[1].status != "certified":   # [0] meets ℓmax 39 times in 40: dozens more runs
            for i in s.alive():
                s.record(i, i == 1 or k % 40 != 1)
            k += 1
        s.after_batch()
        assert s.best() == 1
        assert (s.arms[0].status == "dropped" and s.arms[0].priced_out) is priced
        assert s.finished is priced


def test_uses_given_as_a_whole_number_or_a_float_are_one_value_in_the_manifest():
    """--uses 1000 and 1000.0 (the default is a whole number, the command line's a float): one search, one
    manifest, one digest (its α-ledger account)."""
    import json

    from depl.workflows.search import check_uses

    made = [Search([1.0, 2.0], 0.9, 0.05, uses=u).uses for u in (1000, 1000.0, check_uses(1000))]
    assert [json.dumps(u) for u in made] == ["1000.0"] * 3


def test_value_shares_give_the_most_alpha_to_the_candidate_the_search_tries_first():
    from depl.certificate.search import value_shares

    costs, guesses = [100.0, 120.0, 300.0], [0.92, 0.93, 0.999]
    cheap = value_shares(costs, guesses, 0.9, 0.05, None, 500)      # cost alone: the cheapest first
    assert cheap.argmax() == 0 and cheap.sum() == pytest.approx(1.0)
    few = value_shares(costs, guesses, 0.9, 0.05, 10, 500)          # 10 uses: the one that certifies in few runs
    assert few.argmax() == 2 and few.sum() == pytest.approx(1.0)


def test_a_proposed_candidate_takes_its_slot_of_the_spending_rule_and_counts_only_later_runs():
    from depl.certificate.search import Spending

    s = Search([1.0, 2.0], 0.9, 0.05, spending=Spending(0.75))
    assert sum(a.weight for a in s.arms) == pytest.approx(0.75)
    _feed(s, {0: [False] * 10, 1: [False] * 10}, 10)
    i = s.add(0.5, guess=0.99)
    j = s.add(3.0)
    assert (s.arms[i].weight, s.arms[j].weight) == pytest.approx((0.125, 0.0625))
    assert s.arms[i].test.runs == 0 and s.arms[i].test.alpha == pytest.approx(0.125 * 0.05)
    assert s.alive()[0] == i                     # the cheapest in the race, whatever its index
    with pytest.raises(ValueError, match="no α"):
        Search([1.0], 0.9, 0.05).add(1.0)


@pytest.mark.slow  # a Monte Carlo of whole searches
def test_monte_carlo_adversarial_proposals_keep_the_error_below_alpha():
    """Every candidate fixed in advance below ω, and each proposed one just below ω, cheaper than all, with a law
    that guesses 0.99: the search proposes three and the returned plan is wrong with probability ≤ α."""
    from depl.certificate.search import Spending

    def adversary(s, rng):
        return 0.89, -1.0 - s.proposed, 0.99

    r = simulate([0.86, 0.87, 0.88, 0.88], 0.9, 0.05, reps=120, max_runs=200, batch=8, seed=11,
                 spending=Spending(0.75), propose=adversary, proposals=3, uses=100, costs=[1, 2, 3, 4],
                 guesses=[0.99] * 4)
    assert r.wrong_upper <= 0.05 and r.wrong == r.certified


@pytest.mark.slow  # a Monte Carlo of whole searches
def test_monte_carlo_an_optimistic_law_is_overcome_by_a_proposal_with_margin():
    """The law guesses 0.97 for six candidates that meet ℓmax 0.85–0.905 of the time; a candidate proposed with the
    margin the runs showed (true 0.975, twice the cost) is certified, within 600 seeds on average."""
    from depl.certificate.search import Spending, value_shares

    costs = [3919.2, 4047.3, 5077.4, 5300.0, 6100.0, 7000.0]

    def margin(s, rng):
        return 0.975, 2 * max(a.cost for a in s.arms), 0.975

    shares = value_shares(costs, [0.97] * 6, 0.9, 0.0375, 100, 500)
    r = simulate([0.85, 0.86, 0.87, 0.88, 0.89, 0.905], 0.9, 0.05, reps=30, max_runs=500, batch=32, costs=costs,
                 uses=100, guesses=[0.97] * 6, shares=shares, spending=Spending(0.75), propose=margin, proposals=3,
                 seed=6)
    assert r.certified >= 28 and r.mean_seeds <= 600 and r.wrong <= 1


# --------------------------------------------------------------------------- #
# The cap pauses the search; a larger cap goes on exactly where it stopped
# --------------------------------------------------------------------------- #

def _run(s: Search, outcome, grow_to: int | None = None, batch: int = 8, seed: int = 0) -> list[tuple]:
    """Feed seeds 0, 1, … (each candidate's outcome on a seed a function of the two) until the search finishes, going
    on to `grow_to` where it pauses at its cap; each batch's (counting, seeds) and the arms' end states."""
    seen = []
    while True:
        if s.paused and grow_to is not None and grow_to > s.max_runs:
            s.extend(grow_to)
        if s.finished:
            break
        alive = s.counting()
        for k in range(seed, seed + batch):
            for i in alive:
                s.record(i, outcome(i, k))
        seen.append((tuple(alive), seed))
        seed += batch
        s.after_batch()
    return seen + [(a.status, a.test.runs, a.test.hits, a.dropped_after, a.priced_out) for a in s.arms]


def test_a_search_paused_at_its_cap_goes_on_as_one_uninterrupted_search_with_the_larger_cap():
    """A candidate near ω (0.93) that a cap of 40 runs cannot certify pauses the search there — it is neither
    dropped nor priced out by the cap — and going on to 400 gives, batch by batch, the decisions of a search that had
    400 from the start."""
    rng = np.random.default_rng(3)
    u = rng.random((4, 2000))
    ps = [0.93, 0.95, 0.999, 0.999]

    def outcome(i, k):
        return bool(u[i, k] < ps[i])

    def search(cap):
        return Search([352.0, 360.9, 470.3, 535.9], 0.9, 0.05, max_runs=cap, horizon=500, uses=1000,
                      guesses=[0.99, 0.93, 0.9999, 0.9999])

    small = search(40)
    first = _run(small, outcome)
    assert small.paused and small.finished and small.outcome != "refuted"
    assert all(small.arms[i].status == "undecided" and small.arms[i].test.runs == 40 for i in small.paused)
    grown = _run(small, outcome, grow_to=400, seed=8 * (len(first) - len(small.arms)))
    whole = _run(search(400), outcome)
    assert first[:-len(small.arms)] == whole[:len(first) - len(small.arms)]   # the same batches up to the pause
    assert first[:-len(small.arms)] + grown[:-len(small.arms)] == whole[:-len(small.arms)]
    assert grown[-len(small.arms):] == whole[-len(small.arms):]               # and the same end
    assert not search(400).paused


def test_monte_carlo_a_grown_cap_replays_an_uninterrupted_search_and_keeps_the_error_below_alpha():
    """By Monte Carlo: searches paused at 60 runs and grown to 300 draw the same seeds, count the same runs and return
    the same candidates as searches with 300 from the start (the same random stream: any decision taken otherwise
    would shift it); the cap binds (a search left at 60 returns less often)."""
    kw = dict(costs=[352.0, 360.9, 470.3], uses=1000, guesses=[0.99, 0.93, 0.9999], horizon=500, reps=60,
              batch=16, seed=4)
    grown = simulate([0.92, 0.95, 0.998], 0.9, 0.05, max_runs=60, grow_to=300, **kw)
    whole = simulate([0.92, 0.95, 0.998], 0.9, 0.05, max_runs=300, **kw)
    left = simulate([0.92, 0.95, 0.998], 0.9, 0.05, max_runs=60, **kw)
    assert (grown.mean_seeds, grown.mean_runs, grown.returned.tolist(), grown.wrong) == \
        (whole.mean_seeds, whole.mean_runs, whole.returned.tolist(), whole.wrong)
    assert (left.mean_seeds, left.returned.tolist()) != (whole.mean_seeds, whole.returned.tolist())
    assert whole.wrong_upper <= 0.1 and whole.wrong == 0
