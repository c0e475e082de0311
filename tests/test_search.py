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


def test_monte_carlo_a_landscape_of_bad_candidates_is_almost_never_certified():
    r = simulate([0.86, 0.87, 0.88, 0.88], 0.9, 0.1, reps=150, max_runs=200, batch=8, seed=7)
    assert r.wrong == r.certified and r.wrong_upper <= 0.1
