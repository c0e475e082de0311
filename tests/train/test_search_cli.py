"""`depl plan SCENARIO --certify`, for real: digits-small at ω 0.5, ℓmax 1.5 (its candidates decide within one or
two batches of 10 seeds), the certificate recounted from the store, a resume, and the refusals."""

from __future__ import annotations

import json
import math

import pytest

from depl.plan import Plan
from depl.store import Store

# every candidate in the race on every seed (`--allocation all`): the nested candidates share their runs
ARGS = ("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "30", "--batch",
        "10", "--out", "plan.json", "--json", "--allocation", "all")


@pytest.fixture(scope="module")
def searched(depl_cli, tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    r = depl_cli(*ARGS, "--png", "candidates.png", cwd=folder)
    return folder, r


def test_the_search_returns_a_certified_plan_whose_certificate_recounts_from_the_store(searched):
    folder, r = searched
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    cert = out["certificate"]
    assert out["exit_code"] == 0 and cert["certified"] and cert["alpha"] == 0.05 and cert["omega"] == 0.5
    assert out["omega"] == 0.5 and out["loss_target"] == 1.5       # the scenario's own target, not a candidate's
    saved = Plan.load(folder / "plan.json")                         # a plan `depl certify` and `depl run` read
    assert saved.info["certificate"] == json.loads(json.dumps(cert)) or saved.info["certificate"]["returned"] == \
        cert["returned"]
    saved.scenario_object()                                         # its figures check out against its law
    rows = cert["candidates"]
    assert [c["cost"] for c in rows] == sorted(c["cost"] for c in rows)
    assert sum(c["weight"] for c in rows) == pytest.approx(1.0)
    b = cert["returned"]
    assert rows[b]["verdict"] == "certified" and saved.cost == pytest.approx(rows[b]["cost"])
    # every cheaper candidate was refuted or dropped: the plan returned is the cheapest the runs could certify
    assert all(c["verdict"] in ("refuted", "dropped") for c in rows[:b])
    first = cert["first_seed"]
    with Store(folder / "runs.sqlite") as st:
        for c in rows:   # each candidate's count, read again from the store at its own length, from the run of its
            read = [(st.losses(rid), st.diverged(rid)) for rid in c["read_from"]]   # group that holds the seed
            assert c["read_from"][0] == c["trains_with"] or c["trains_with"] not in c["read_from"]
            finals = []
            start = first if c.get("first_counted") is None else c["first_counted"]
            for s in range(start, start + c["runs"]):
                losses, gone = next((ls, g) for ls, g in read if s in g or len(ls.get(s, [])) >= c["epochs"])
                finals.append(math.inf if s in gone and gone[s] <= c["epochs"] else losses[s][c["epochs"] - 1])
            assert sum(f <= 1.5 for f in finals) == c["met"], c
        held = {t["run"]: (t["epochs"], t["seeds"]) for t in cert["trained"]}
        assert held == {rid: (len(next(iter(st.losses(rid).values()))), len(st.losses(rid))) for rid in held}
        assert sum(e * n for e, n in held.values()) == cert["seed_epochs"] == st.count_epochs()
        trained = sum(n for _, n in held.values())
    assert trained == cert["runs_trained"]
    assert cert["runs_trained"] < sum(c["runs"] for c in rows)     # nested candidates shared their runs
    assert (folder / "candidates.png").stat().st_size > 0
    listed = json.loads((folder / "search-candidates.json").read_text())
    assert [c["schedule"] for c in listed["candidates"]] == [c["schedule"] for c in rows]


def test_a_rerun_replays_the_store_to_the_same_decisions_without_training(depl_cli, searched):
    folder, r = searched
    first = json.loads(r.stdout)["certificate"]
    with Store(folder / "runs.sqlite") as st:
        before = {c["trains_with"]: st.losses(c["trains_with"]) for c in first["candidates"]}
    again = depl_cli(*ARGS, cwd=folder)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)["certificate"]
    keep = ("verdict", "runs", "met", "lower_bound")
    assert [[c[k] for k in keep] for c in second["candidates"]] == [[c[k] for k in keep] for c in first["candidates"]]
    assert second["returned"] == first["returned"] and second["runs_trained"] == first["runs_trained"]
    with Store(folder / "runs.sqlite") as st:
        assert {rid: st.losses(rid) for rid in before} == before


@pytest.mark.parametrize("args", [("--alpha", "0.1"), ("--first-seed", "900000")])   # a seed clear of the lineage
def test_a_rerun_with_another_alpha_or_first_seed_on_the_same_store_is_refused(depl_cli, searched, args):
    folder, _ = searched
    r = depl_cli(*ARGS, *args, cwd=folder)
    assert r.returncode == 2, r.stderr
    assert "spends its α once" in r.stderr and "Traceback" not in r.stderr


def test_an_undecided_search_exits_3_and_says_what_more_it_needs(depl_cli, tmp_path):
    r = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "2",
                 "--batch", "2", "--out", "p.json", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "undecided: no candidate certified within --max-runs 2" in r.stdout and "more runs" in r.stdout
    assert not (tmp_path / "p.json").exists()


def test_a_prefix_read_from_the_longer_run_is_the_shorter_plan_trained_on_its_own(searched, tmp_path):
    """One run of a schedule yields every prefix: a nested candidate trained alone on the same seed has the
    per-epoch losses the search read from its group's longer run."""
    from depl.train.executors import run_all
    from depl.train.execute import register, run_id_for
    from depl.workflows.search import prepare_search

    folder, r = searched
    cert = json.loads(r.stdout)["certificate"]
    prep = prepare_search("digits-small", quantile=0.5, loss=1.5)
    assert [c.words() for c in prep.candidates] == [c["schedule"] for c in cert["candidates"]]
    nested = [i for i, c in enumerate(cert["candidates"])
              if c["trains_with"] != run_id_for(prep.candidates[i].job, "local", prefix="search")]
    assert nested, "digits-small's candidates include a prefix of a longer one"
    i = nested[0]
    c, seed = prep.candidates[i], cert["first_seed"]
    with Store(tmp_path / "alone.sqlite") as st:
        rid = run_id_for(c.job, "local", prefix="alone")
        register(st, rid, "plan", c.job, {"backend": "local"})
        run_all(st, [(rid, c.job, [seed])], seed_batch=1, workers=1, threads=1)
        alone = st.losses(rid)[seed]
    with Store(folder / "runs.sqlite") as st:
        longer = st.losses(cert["candidates"][i]["trains_with"])[seed]
    assert len(alone) == c.epochs < len(longer)
    assert alone == pytest.approx(longer[:c.epochs], rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("args, why", [(["--alpha", "0"], "--alpha 0"), (["--alpha", "0.7"], "(0, 0.5]"),
                                       (["--store", "."], "is a folder")])
def test_bad_search_options_are_refused_in_one_line_before_anything_is_written(depl_cli, tmp_path, args, why):
    r = depl_cli("plan", "digits-small", "--certify", *args, "--out", "p.json", cwd=tmp_path)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
