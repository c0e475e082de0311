"""Stage 2: the layered recursion finds the same lowest-cost path as Dijkstra on the graph."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from depl.planners.schedule import GraphSpec, expanded_graph_edges, lowest_cost_path


def random_spec(seed: int, eta: int) -> GraphSpec:
    rng = np.random.default_rng(seed)
    M, K = int(rng.integers(2, 4)), int(rng.integers(6, 14))
    l0 = 10.0
    k = np.arange(1, K + 1)
    du = -rng.uniform(0.5, 2.0, (M, 1)) / np.sqrt(k + rng.uniform(0, 2, (M, 1)))
    sw = np.where(rng.random((M, M)) < 0.7, rng.uniform(0.0, 0.5, (M, M)), 0.0)
    np.fill_diagonal(sw, 0.0)
    allowed = np.triu(rng.random((M, M)) < 0.8) | np.eye(M, dtype=bool)
    tmin = rng.uniform(1.0, 3.0, M)
    return GraphSpec(models=[f"m{i}" for i in range(M)], l0=l0, du_epoch=du, du_switch=sw, allowed=allowed,
                     weight=rng.uniform(1.0, 3.0, M), tmin=tmin, deadline=float(tmin.mean() * K * 0.8),
                     target=l0 + float(du.sum(axis=1).min()) * 0.5, eta=eta)


def dijkstra_cost(spec: GraphSpec) -> float:
    g = nx.DiGraph()
    for u, v, w in expanded_graph_edges(spec):
        g.add_edge(u, v, weight=w)
    if ("Ω",) not in g:
        return np.inf
    try:
        return nx.dijkstra_path_length(g, ("s",), ("Ω",))
    except nx.NetworkXNoPath:
        return np.inf


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("eta", [8, 15])
def test_recursion_equals_dijkstra_on_the_same_graph(seed, eta):
    assert_recursion_is_dijkstra(random_spec(seed, eta))


def assert_recursion_is_dijkstra(spec):
    path = lowest_cost_path(spec, labels=False)
    ref = dijkstra_cost(spec)
    if path is None:
        assert ref == np.inf
    else:
        assert path.cost == pytest.approx(ref, rel=1e-12)


def first_feasible(draw, seed: int, tries: int = 20):
    """The first of draw(seed), draw(seed + 1000), … with a labelled path, and that path.  The labelled search is
    no proof of infeasibility (its bins may hide a path), so an instance without one is replaced by the next draw,
    never passed with nothing checked."""
    for k in range(tries):
        spec = draw(seed + 1000 * k)
        path = lowest_cost_path(spec)
        if path is not None:
            return spec, path
    raise AssertionError(f"no instance with a feasible path in {tries} draws from seed {seed}")


@pytest.mark.parametrize("seed", range(12))
def test_labelled_paths_are_exactly_feasible(seed):
    spec, path = first_feasible(lambda s: random_spec(s, 30), seed)
    idx = {m: i for i, m in enumerate(spec.models)}
    s = [idx[m] for m in path.schedule]
    u = spec.l0 + sum(spec.du_epoch[m, k] for k, m in enumerate(s)) + sum(spec.du_switch[a, b] for a, b in zip(s, s[1:]))
    assert u <= spec.target + 1e-12
    assert sum(spec.tmin[m] for m in s) <= spec.deadline + 1e-12
    assert all(spec.allowed[a, b] for a, b in zip(s, s[1:]))
    assert path.cost == pytest.approx(sum(spec.weight[m] for m in s))


@pytest.mark.parametrize("seed", range(4))
def test_full_grid_and_reachable_graph_agree(seed):
    spec = random_spec(seed, 6)
    g_full, g_reach = nx.DiGraph(), nx.DiGraph()
    g_full.add_weighted_edges_from(expanded_graph_edges(spec, full=True))
    g_reach.add_weighted_edges_from(expanded_graph_edges(spec))
    assert g_reach.number_of_nodes() <= g_full.number_of_nodes()

    def cost(g):
        try:
            return nx.dijkstra_path_length(g, ("s",), ("Ω",))
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return np.inf

    assert cost(g_full) == pytest.approx(cost(g_reach))


def with_targets(spec: GraphSpec, seed: int, never: bool) -> GraphSpec:
    """`spec` with a bound per path length (a law calibrated per epoch), some lengths never feasible."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    targets = spec.target + rng.uniform(-0.4, 0.4, spec.K)
    if never:
        targets[rng.random(spec.K) < 0.3] = -np.inf
    return replace(spec, targets=targets)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("never", [False, True])
def test_per_length_targets_recursion_equals_dijkstra(seed, never):
    assert_recursion_is_dijkstra(with_targets(random_spec(seed, 12), seed, never))


@pytest.mark.parametrize("seed", range(12))
def test_per_length_targets_labelled_paths_meet_their_lengths_target(seed):
    spec, path = first_feasible(lambda s: with_targets(random_spec(s, 30), s, True), seed)
    K = len(path.schedule)
    assert np.isfinite(spec.targets[K - 1]) and path.u <= spec.targets[K - 1] + 1e-12
    assert path.time <= spec.deadline + 1e-12


def test_one_target_per_length_is_the_one_target():
    """Per-length targets all equal to the target: the same graph, the same path."""
    from dataclasses import replace

    for seed in range(12):
        spec = random_spec(seed, 30)
        same = replace(spec, targets=np.full(spec.K, spec.target))
        a, b = lowest_cost_path(spec), lowest_cost_path(same)
        assert (a is None) == (b is None) and (a is None or (a.schedule, a.cost) == (b.schedule, b.cost))
