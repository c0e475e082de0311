"""A fitted scenario's [measured] conditions (written by `depl fit`): plans are made of them only.

Without them a law fitted on runs over all the data, on 2 nodes, planned half the data or another node count,
which no run measured (docs/commands.md's chain, before [measured]: a plan on one of two datasets, 0 of 100 fresh runs met ℓmax)."""

from __future__ import annotations

import pytest

from depl.planners import Infeasible, make_plan
from depl.scenario import ScenarioError, load_scenario, parse_scenario, scenario_dict


def with_measured(name: str, **measured) -> dict:
    data = scenario_dict(load_scenario(name))
    data["measured"] = measured
    return data


def test_without_a_measured_table_plans_are_what_they_were():
    s = load_scenario("mnist1d-small")
    assert s.measured is None and s.measured_only() is s
    assert make_plan(s).to_json() | {"solve_seconds": 0} == make_plan(s).to_json() | {"solve_seconds": 0}


def test_plans_keep_the_amount_of_data_the_profile_measured():
    """A profile that never varied the data fits no data law: the law says nothing of less data."""
    data = scenario_dict(load_scenario("mnist1d-small"))
    data.pop("data_law")
    s = parse_scenario(data)
    full = s.samples([d.name for d in s.datasets])
    free = make_plan(s, "depl")
    assert s.samples(free.datasets) < full  # unrestricted, the cheapest plan drops data no run measured
    kept = parse_scenario({**data, "measured": {"nodes": 2, "samples": [full]}})
    for method in ("depl", "optimal", "best-exp"):
        p = make_plan(kept, method)
        assert kept.samples(p.datasets) == full, method
    # a data law measured from half to all of the data: any choice in between
    half = parse_scenario(with_measured("mnist1d-small", nodes=2, samples=[full / 2, full]))
    assert half.measured_data(["mnist1d-a"]) and half.measured_data(["mnist1d-a", "mnist1d-b"])
    assert not kept.measured_data(["mnist1d-a"])


def test_plans_use_only_clusters_of_the_measured_node_count_and_say_what_to_profile():
    data = with_measured("mnist1d-small", nodes=2, samples=[4000.0])
    data["clusters"][0]["nodes"] = 3  # edge: 3 nodes, which no run measured
    s = parse_scenario(data)
    p = make_plan(s)
    assert {e.cluster for e in p.epochs} <= {c.name for c in s.clusters if c.nodes == 2}
    data["measured"]["nodes"] = 4
    with pytest.raises(Infeasible, match=r"measured on 4 node\(s\).*depl profile SCENARIO --nodes 2"):
        make_plan(parse_scenario(data))


def test_no_choice_of_datasets_holding_a_measured_amount_is_infeasible_with_what_to_profile():
    s = parse_scenario(with_measured("mnist1d-small", nodes=2, samples=[123.0]))
    with pytest.raises(Infeasible, match="no choice of its datasets holds that much"):
        make_plan(s)


@pytest.mark.parametrize("measured, why", [({"nodes": 0, "samples": [1.0]}, "nodes"),
                                           ({"nodes": 2, "samples": []}, "samples"),
                                           ({"nodes": 2, "samples": [-1.0]}, "positive")])
def test_a_bad_measured_table_is_refused_naming_the_field(measured, why):
    with pytest.raises(ScenarioError, match=why):
        parse_scenario(with_measured("mnist1d-small", **measured))
