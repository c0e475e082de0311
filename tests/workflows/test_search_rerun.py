"""A rerun of `depl plan --certify` on a store bound to another search is refused before the candidates are
planned, where what differs is known without planning (depl.workflows.search.prepare_search's `rerun`)."""

from __future__ import annotations

import pytest

from depl.store import Store
from depl.train.loops.search import MANIFEST, MAX_RUNS
from depl.workflows.errors import BadInput
from depl.workflows.search import prepare_search

BOUND = {"format": "depl.search-manifest/1", "candidates": [], "omega": 0.5, "loss_target": 1.5, "alpha": 0.05,
         "prior": "spiked", "allocation": "all", "drop_below": 0.0, "uses": 1000, "spending": {},
         "batch": 10, "first_seed": 500}


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "runs.sqlite"
    with Store(path) as st:   # the rows depl.train.loops.search.bind writes before a search's first run
        st.start_run(MANIFEST, MANIFEST, BOUND)
        st.start_run(f"{MAX_RUNS}-0", MAX_RUNS, {"from_seeds": 0, "max_runs": 30})
    return path


@pytest.mark.parametrize("given, rerun, said", [
    ({"alpha": 0.1}, {}, "--alpha (was 0.05)"), ({"quantile": 0.55}, {}, "ω (--quantile) (was 0.5)"),
    ({"loss": 1.4}, {}, "ℓmax (--loss) (was 1.5)"), ({}, {"batch": 16}, "--batch (was 10)"),
    ({}, {"first_seed": 900}, "--first-seed (was 500)"), ({}, {"prior": "uniform"}, "--prior (was spiked)"),
    ({}, {"allocation": "focus"}, "--allocation (was all)"), ({}, {"uses": 10.0}, "--uses (was 1000)"),
    ({}, {"max_runs": 20}, "--max-runs only grows")])
def test_a_rerun_with_other_options_is_refused_before_any_planning(store, given, rerun, said):
    # a method no planner has: had the candidates been planned, the refusal would name it instead
    with pytest.raises(BadInput) as e:
        prepare_search("digits-small", "no-such-planner", quantile=given.get("quantile", 0.5),
                       loss=given.get("loss", 1.5), alpha=given.get("alpha"), store=store, rerun=rerun)
    assert said in str(e.value) and str(e.value).startswith(str(store)) and "\n" not in str(e.value)


def test_the_stores_own_options_and_values_no_search_takes_go_on_to_planning(store):
    """The store's options, or none: planning comes next (here it refuses the method); a --prior of none of the
    choices is refused as that later, not as another search's."""
    for rerun in ({}, {"batch": 10, "first_seed": 500, "prior": "spiked", "allocation": "all", "max_runs": 40},
                  {"prior": "nope"}, {"uses": float("nan")}):
        with pytest.raises(Exception) as e:
            prepare_search("digits-small", "no-such-planner", quantile=0.5, loss=1.5, store=store, rerun=rerun)
        assert "no-such-planner" in str(e.value), (rerun, e.value)
