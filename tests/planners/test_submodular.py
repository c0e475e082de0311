"""minimize_set_function: exact on submodular functions, sensible on stage 1's objective.

Exactness is checked against brute force over the non-empty subsets of up to
10 elements, on random functions that are submodular by construction:
sums of concave functions of non-negative modular weights, and directed cut
functions, each minus an arbitrary modular term (which keeps submodularity
and moves the minimiser anywhere, ∅ and the whole set included).
"""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depl.planners import submodular
from depl.planners.submodular import minimize_set_function

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REL = 1e-7

CONCAVE = {
    "sqrt": math.sqrt,
    "log1p": math.log1p,
    "cap": None,  # min(·, cap), cap drawn with the function
}

weight = st.floats(0.0, 3.0, allow_nan=False, allow_infinity=False)
unit = st.floats(-0.5, 1.5, allow_nan=False, allow_infinity=False)


def brute_min(f, ground):
    return min(f(list(c)) for r in range(1, len(ground) + 1) for c in itertools.combinations(ground, r))


def assert_optimal(f, ground):
    res = minimize_set_function(f, ground)
    assert res, "the result must be non-empty"
    assert set(res) <= set(ground) and len(set(res)) == len(res)
    assert res == [e for e in ground if e in res], "elements come in ground's order"
    best = brute_min(f, ground)
    got = f(res)
    assert abs(got - best) <= REL * max(1.0, abs(best)), (res, got, best)
    return res


@st.composite
def concave_of_modular(draw, empty_inf=False):
    """f(S) = Σ_j g_j(Σ_{i∈S} w_ij) − Σ_{i∈S} c_i, g_j concave and non-decreasing."""
    n = draw(st.integers(1, 10))
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(sorted(CONCAVE)))
        w = draw(st.lists(weight, min_size=n, max_size=n))
        cap = draw(st.floats(0.5, 5.0))
        g = (lambda s, cap=cap: min(s, cap)) if kind == "cap" else CONCAVE[kind]
        terms.append((g, w))
    # The modular part is drawn relative to each element's value alone, so
    # that minimisers of every size occur.
    u = draw(st.lists(unit, min_size=n, max_size=n))
    c = [ui * sum(g(w[i]) for g, w in terms) for i, ui in enumerate(u)]
    ground = [f"e{i}" for i in range(n)]
    index = {e: i for i, e in enumerate(ground)}

    def f(S):
        if empty_inf and not S:
            return math.inf
        ids = [index[e] for e in S]
        return sum(g(sum(w[i] for i in ids)) for g, w in terms) - sum(c[i] for i in ids)

    return f, ground


@st.composite
def cut_minus_modular(draw):
    """f(S) = Σ_{i∈S, j∉S} a_ij + λ·√|S| − Σ_{i∈S} c_i on a random weighted digraph."""
    n = draw(st.integers(2, 10))
    edges = draw(
        st.dictionaries(
            st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] != e[1]),
            st.floats(0.0, 2.0),
            max_size=3 * n,
        )
    )
    lam = draw(st.sampled_from([0.0, 0.5, 2.0]))
    u = draw(st.lists(unit, min_size=n, max_size=n))
    out = [sum(a for (i, _), a in edges.items() if i == k) for k in range(n)]
    c = [ui * (out[k] + lam) for k, ui in enumerate(u)]
    ground = [f"v{i}" for i in range(n)]
    index = {e: i for i, e in enumerate(ground)}

    def f(S):
        ids = {index[e] for e in S}
        cut = sum(a for (i, j), a in edges.items() if i in ids and j not in ids)
        return cut + lam * math.sqrt(len(ids)) - sum(c[i] for i in ids)

    return f, ground


@SETTINGS
@given(concave_of_modular())
def test_exact_on_concave_of_modular(fg):
    assert_optimal(*fg)


@SETTINGS
@given(cut_minus_modular())
def test_exact_on_cut_functions(fg):
    assert_optimal(*fg)


@SETTINGS
@given(concave_of_modular(empty_inf=True))
def test_exact_when_empty_set_is_infinite(fg):
    assert_optimal(*fg)


def test_best_non_empty_when_the_empty_set_is_optimal():
    # f ≥ 0 = f(∅), submodular (a coverage term plus a modular one): the best
    # non-empty set is the pair {a, b} (1.0), not a singleton (1.5).
    def f(S):
        s = set(S)
        return 2.0 * bool(s & {"a", "b"}) + 3.0 * ("c" in s) - 0.5 * len(s & {"a", "b"})

    assert minimize_set_function(f, ["a", "b", "c"]) == ["a", "b"]
    g = lambda S: math.sqrt(sum({"a": 4.0, "b": 1.0, "c": 9.0}[e] for e in S))
    assert minimize_set_function(g, ["a", "b", "c"]) == ["b"]


# --- infinite values -------------------------------------------------------------------


@SETTINGS
@given(concave_of_modular(), st.data())
def test_inf_outside_a_lattice(fg, data):
    """f = inf unless S contains `need` and avoids `ban`: submodular on that lattice."""
    f, ground = fg
    need = data.draw(st.sampled_from(ground))
    ban = data.draw(st.sampled_from([None] + [e for e in ground if e != need]))

    def g(S):
        return f(S) if need in S and ban not in S else math.inf

    res = minimize_set_function(g, ground)
    assert res and math.isfinite(g(res))
    assert need in res and ban not in res
    # The penalty standing in for inf makes the problem not exactly submodular, so
    # optimality is not guaranteed, and not asserted: CI's hypothesis run found a
    # case where the minimiser returned 0.0 against a brute-force optimum of -0.047
    # (stop 17).  What is guaranteed is a set of finite value, on the lattice.


def test_only_a_large_set_is_finite():
    # Every set of fewer than three elements is infeasible: a flat penalty
    # gives the bottom-up chains nothing to go on.
    sizes = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 1.0, "e": 1.0}

    def f(S):
        if len(S) < 3:
            return math.inf
        return 100.0 - sum(sizes[x] for x in S) + 2.0 * len(S) ** 2

    res = minimize_set_function(f, list(sizes))
    assert math.isfinite(f(res))
    assert f(res) == brute_min(f, list(sizes))


def test_all_infinite_and_nan():
    res = minimize_set_function(lambda S: math.inf, ["a", "b", "c"])
    assert len(res) >= 1
    res = minimize_set_function(lambda S: math.nan if len(S) != 2 else float(ord(S[0][0])), ["x", "b", "c"])
    assert res == ["b", "c"]


# --- stage 1's objective -----------------------------------------------------------------


def k_times_t(total, a, b, c, s0, need):
    """K·T of `total` samples: epochs ceil(a / log1p(S/s0)), epoch time b·S + c; inf below `need`."""
    if total <= 0 or total < need:
        return math.inf
    return math.ceil(a / math.log1p(total / s0)) * (b * total + c)


def depl_objective(sizes, a, b, c, s0, need):
    return lambda S: k_times_t(sum(sizes[e] for e in S), a, b, c, s0, need)


@st.composite
def depl_like(draw):
    n = draw(st.integers(2, 10))
    sizes = draw(st.lists(st.integers(100, 50_000), min_size=n, max_size=n))
    a = draw(st.floats(1.0, 60.0))
    b = draw(st.floats(1e-4, 1e-2))
    c = draw(st.floats(0.0, 100.0))
    s0 = draw(st.floats(500.0, 20_000.0))
    need = draw(st.sampled_from([0.0, 0.25 * sum(sizes)]))
    ground = [f"d{i}" for i in range(n)]
    return depl_objective(dict(zip(ground, sizes)), a, b, c, s0, need), ground


@SETTINGS
@given(depl_like())
def test_depl_objective_is_never_worse_than_its_probes(fg):
    """Stage 1's K·T is not submodular in general, so no factor to the optimum is promised (hypothesis found
    5.79 against an optimum of 3.86 with 8 datasets); what is promised is the best set met, never worse than the
    probes every run starts from: each singleton and the whole set."""
    f, ground = fg
    res = minimize_set_function(f, ground)
    assert res and set(res) <= set(ground)
    probes = [f([e]) for e in ground] + [f(list(ground))]
    assert math.isfinite(f(res)) or not any(math.isfinite(v) for v in probes)
    assert f(res) <= min(probes) * (1 + 1e-9) and f(res) >= brute_min(f, ground) * (1 - 1e-9)


def test_depl_objective_typical_quality():
    """On 150 seeded instances of 6–12 datasets: optimal or within a few percent."""
    rng = np.random.default_rng(20240611)
    ratios = []
    for _ in range(150):
        n = int(rng.integers(6, 13))
        sizes = rng.integers(100, 50_000, n).tolist()
        need = float(rng.choice([0.0, rng.uniform(0, sum(sizes) / 2)]))
        ground = [f"d{i}" for i in range(n)]
        f = depl_objective(
            dict(zip(ground, sizes)),
            a=float(rng.uniform(1, 60)),
            b=float(rng.uniform(1e-4, 1e-2)),
            c=float(rng.uniform(0, 100)),
            s0=float(rng.uniform(500, 20_000)),
            need=need,
        )
        res = minimize_set_function(f, ground)
        ratios.append(f(res) / brute_min(f, ground))
    ratios = np.array(ratios)
    assert ratios.min() >= 1.0 - 1e-12
    assert np.median(ratios) <= 1.001
    assert np.mean(ratios) <= 1.01
    assert ratios.max() <= 1.25


def test_forty_elements_is_quick():
    """|ground| = 40: stage 1's objective in a few thousand evaluations of f."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(500, 20_000, 40).tolist()
    ground = [f"d{i}" for i in range(40)]
    base = depl_objective(dict(zip(ground, sizes)), a=20.0, b=1e-3, c=25.0, s0=5000.0, need=0.0)
    calls = 0

    def f(S):
        nonlocal calls
        calls += 1
        return base(S)

    res = minimize_set_function(f, ground)
    assert res
    assert calls < 20_000
    # The objective depends only on the total: the optimum over reachable totals.
    reach = {0}
    for s in sizes:
        reach |= {r + s for r in reach}
    best = min(k_times_t(t, 20.0, 1e-3, 25.0, 5000.0, 0.0) for t in reach)
    assert f(res) <= 1.01 * best


# --- the rest ------------------------------------------------------------------------------


def test_small_and_degenerate_grounds():
    assert minimize_set_function(lambda S: 5.0, ["only"]) == ["only"]
    assert minimize_set_function(lambda S: -float(len(S)), ["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError):
        minimize_set_function(lambda S: 0.0, [])
    with pytest.raises(ValueError):
        minimize_set_function(lambda S: 0.0, ["a", "a"])


def test_docstring_example():
    failures, tried = doctest.testmod(submodular, verbose=False)
    assert tried >= 2 and failures == 0
