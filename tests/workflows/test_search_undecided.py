"""What an undecided `depl plan --certify` says about going on (depl.workflows.search.expected_more, printed by
depl.cli.search.undecided_hint), for the candidate likeliest to certify: one with no run counted yet, one whose
every run met ℓmax, one that missed."""

from __future__ import annotations

from depl.certificate import DEFAULT_PRIOR, Sequential
from depl.certificate.search import Search
from depl.cli.search import undecided_hint
from depl.workflows.search import expected_more

OMEGA, ALPHA = 0.9, 0.05


def _row(s: Search, i: int) -> dict:
    """Candidate i's row as the certificate writes it (depl.workflows.search.search_certificate), what the hint
    reads."""
    t = s.arms[i].test
    return {"runs": t.runs, "met": t.hits, "law_p": s.arms[i].guess}


def test_a_candidate_with_no_run_counted_says_so_and_what_the_search_expects_it_to_need():
    s = Search([1.0, 2.0], OMEGA, ALPHA, max_runs=100, guesses=[0.97, 0.99])
    more = expected_more(s)
    i = more["candidate"]
    said = undecided_hint(more, _row(s, i))
    assert s.arms[i].test.runs == 0 and "every run it counted" not in said and "0 of 0" not in said
    k = more["if_all_meet"]
    assert said.startswith(f"candidate [{i}] has no runs counted yet: it certifies after {k} runs at the fewest, "
                           "if each meets ℓmax; ")
    test = Sequential(OMEGA, s.arms[i].test.alpha, DEFAULT_PRIOR)     # exactly as many as the test takes
    verdicts = [test.add(True).verdict for _ in range(k)]
    assert verdicts[-1] == "certified" and verdicts[-2] == "undecided"
    # the search's own figures: its outlook at the law's guess within the candidate's runs left
    runs, p = s.outlook(i)
    assert (f"at its law's guess (P(ℓ(K) ≤ ℓmax) ≈ 0.970) the search expects about {runs:.0f} runs to decide "
            f"it within its {s.left(i)} runs left, certifying with probability {p:.2f}") in said
    assert 0 < runs <= s.left(i) and 0 < p < 1
    # without a guess the search's outlook is Laplace's 1/2, no figure worth printing: the fewest runs only
    bare = Search([1.0, 2.0], OMEGA, ALPHA, max_runs=100)
    assert undecided_hint(expected_more(bare), _row(bare, 0)) == (
        f"candidate [0] has no runs counted yet: it certifies after {k} runs at the fewest, if each meets ℓmax")


def test_a_candidate_that_counted_runs_is_read_by_them():
    s = Search([1.0], OMEGA, ALPHA, max_runs=100)
    for _ in range(4):
        s.record(0, True)
    more = expected_more(s)
    said = undecided_hint(more, _row(s, 0))
    assert said == (f"candidate [0]: every run it counted met ℓmax (4 of 4), it certifies after "
                    f"{more['if_all_meet']} more runs if each meets ℓmax too")
    s.record(0, False)
    more = expected_more(s)
    said = undecided_hint(more, _row(s, 0))
    assert said.startswith(f"candidate [0] at its rate ({5 / 7:.3f}) expects about ")
