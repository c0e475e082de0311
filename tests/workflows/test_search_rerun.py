"""A rerun of `depl plan --certify` on a store bound to another search is refused before the candidates are
planned, where what differs is known without planning (depl.workflows.search.prepare_search's `rerun`); the price
printed before any run reckons with the horizon the search takes (the one given, else the store's, else the
default), and so does `depl plan`'s price of a certificate."""

from __future__ import annotations

import pytest

from depl.store import Store
from depl.train.loops.search import MANIFEST, MAX_RUNS
from depl.workflows.errors import BadInput
from depl.workflows.planning import certify_price
from depl.workflows.search import HORIZON, prepare_search, price, settings, shares

BOUND = {"format": "depl.search-manifest/1", "candidates": [], "omega": 0.5, "loss_target": 1.5, "alpha": 0.05,
         "prior": "spiked", "allocation": "all", "drop_below": 0.0, "uses": 1000.0, "spending": {},
         "horizon": 300, "batch": 10, "first_seed": 500}


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
    ({}, {"allocation": "focus"}, "--allocation (was all)"), ({}, {"uses": 10.0}, "--uses (was 1000.0)"),
    ({}, {"horizon": 400}, "--horizon (was 300)"),
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
                  {"prior": "nope"}, {"uses": float("nan")}, {"uses": 1000}, {"uses": 1000.0},
                  {"horizon": 300, "max_runs": 400}):   # 1000 and 1000.0 one value; the cap may grow past the horizon
        with pytest.raises(Exception) as e:
            prepare_search("digits-small", "no-such-planner", quantile=0.5, loss=1.5, store=store, rerun=rerun)
        assert "no-such-planner" in str(e.value), (rerun, e.value)


@pytest.mark.parametrize("rerun, said", [
    ({"horizon": 0}, "--horizon 0: "), ({"horizon": 2.5}, "--horizon 2.5: "),
    ({"horizon": 100}, "--horizon 100: below --max-runs 500 (its default)"),
    ({"horizon": 100, "max_runs": 200}, "--horizon 100: below --max-runs 200,")])
def test_a_horizon_no_search_takes_is_refused_before_any_planning(tmp_path, rerun, said):
    with pytest.raises(BadInput) as e:
        prepare_search("digits-small", "no-such-planner", store=tmp_path / "runs.sqlite", rerun=rerun)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def prepared():
    """digits-small's candidates at ω 0.5, ℓmax 1.5, for a new store (planned once)."""
    return prepare_search("digits-small", quantile=0.5, loss=1.5)


def test_the_price_reckons_with_the_horizon_given_else_the_stores(prepared):
    """The price of each candidate is its test's within the horizon the search takes, at the share of α it takes
    there: the one given, else the store's search's (a rerun), else the default."""
    import dataclasses

    rerun = dataclasses.replace(prepared, began=BOUND, caps=((0, 30),))
    for prep, given, horizon, uses in ((prepared, None, HORIZON, 1000.0), (prepared, 40, 40, 1000.0),
                                       (rerun, None, 300, 1000.0)):
        rows = price(prep, 30, horizon=given)
        assert settings(prep.began, list(prep.caps), 30, None, given) == (30, uses, horizon)
        assert [r["horizon"] for r in rows] == [horizon] * len(rows)
        assert [r["share"] for r in rows] == pytest.approx([0.75 * w for w in shares(prep, uses, horizon)])
        assert max(r["expected_runs"] for r in rows) <= horizon
    # a candidate the law gives little chance decides later than a short horizon lets it
    assert max(r["expected_runs"] for r in price(prepared, 30)) > 40


def test_depl_plans_price_of_a_certificate_is_at_a_new_searchs_horizon(prepared):
    from depl.certificate import expected_runs

    plan = prepared.candidates[0].plan
    pr = certify_price(plan)
    assert pr["horizon"] == settings({}, [])[2] == HORIZON
    need = expected_runs(pr["law_p"], plan.omega, pr["alpha"], max_runs=HORIZON)
    assert pr["expected_runs"] == pytest.approx(need.mean_runs)
