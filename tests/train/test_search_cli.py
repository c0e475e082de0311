"""`depl plan SCENARIO --certify`, for real: digits-small at ω 0.5, ℓmax 1.5 (its candidates decide within one or
two batches of 10 seeds), the certificate recounted from the store, a resume, and the refusals."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from depl.paths import informational
from depl.plan import Plan
from depl.store import Store
from trainkit import search_fields

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

# every candidate in the race on every seed (`--allocation all`): the nested candidates share their runs
ARGS = ("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "30", "--batch",
        "10", "--out", "plan.json", "--json", "--allocation", "all")


@pytest.fixture(scope="module")
def searched(depl_cli, tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    r = depl_cli(*ARGS, "--png", "candidates.png", "--keep-models", "all", cwd=folder, env=book(folder))
    return folder, r


def book(folder) -> dict:
    """The seed book of the search's task (depl.ledger.TaskSeeds), kept in its folder."""
    return {"DEPL_SEED_LEDGER": str(folder / "seeds")}


def test_the_search_returns_a_certified_plan_whose_certificate_recounts_from_the_store(searched):
    folder, r = searched
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    cert = search_fields(out["certificate"])
    assert out["exit_code"] == 0 and cert["certified"] and cert["alpha"] == 0.05 and cert["omega"] == 0.5
    assert out["omega"] == 0.5 and out["loss_target"] == 1.5       # the scenario's own target, not a candidate's
    saved = Plan.load(folder / "plan.json")                         # a plan `depl certify` and `depl run` read
    assert saved.info["certificate"] == out["certificate"] or \
        search_fields(saved.info["certificate"])["returned"] == cert["returned"]
    saved.scenario_object()                                         # its figures check out against its law
    rows = cert["candidates"]
    fixed = [c for c in rows if not c["proposal"]]               # proposed from the runs: after these
    assert [c["cost"] for c in fixed] == sorted(c["cost"] for c in fixed)
    assert sum(c["weight"] for c in fixed) == pytest.approx(0.75) and sum(c["weight"] for c in rows) <= 1.0
    b = cert["returned"]
    assert rows[b]["verdict"] == "certified" and saved.cost == pytest.approx(rows[b]["cost"])
    # every cheaper candidate was refuted or dropped: the plan returned is the cheapest the runs could certify
    assert all(c["verdict"] in ("refuted", "dropped") for c in rows if c["cost"] < rows[b]["cost"])
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
    first = search_fields(json.loads(r.stdout)["certificate"])
    with Store(folder / "runs.sqlite") as st:
        before = {c["trains_with"]: st.losses(c["trains_with"]) for c in first["candidates"]}
    again = depl_cli(*ARGS, cwd=folder)
    assert again.returncode == 0, again.stderr
    second = search_fields(json.loads(again.stdout)["certificate"])
    keep = ("verdict", "runs", "met", "lower_bound")
    assert [[c[k] for k in keep] for c in second["candidates"]] == [[c[k] for k in keep] for c in first["candidates"]]
    assert second["returned"] == first["returned"] and second["runs_trained"] == first["runs_trained"]
    with Store(folder / "runs.sqlite") as st:
        assert {rid: st.losses(rid) for rid in before} == before


OTHERWISE = [(("--alpha", "0.1"), "--alpha (was 0.05)"),
             (("--first-seed", "900000"), "--first-seed (was"),   # a seed clear of the lineage
             (("--batch", "16"), "--batch (was 10)"),
             (("--prior", "uniform"), "--prior (was spiked)"),
             (("--allocation", "focus"), "--allocation (was all)"),
             (("--max-runs", "20"), "--max-runs only grows"),
             (("--quantile", "0.55"), "ω (--quantile) (was 0.5)")]


def test_a_rerun_that_would_analyse_the_stores_seeds_otherwise_is_refused(depl_cli, searched):
    """A store binds everything the search's decisions depend on; only a larger --max-runs goes on."""
    folder, _ = searched
    with Store(folder / "runs.sqlite") as st:
        before = st.count_epochs()
    listed = (folder / "search-candidates.json").read_text()
    commands = []
    for args, _ in OTHERWISE:   # the search's command with one option changed (or added)
        i = ARGS.index(args[0]) if args[0] in ARGS else None
        argv = list(ARGS)
        if i is not None:
            argv[i + 1] = args[1]
        else:
            argv += list(args)
        commands.append(argv)
    for r, (args, what) in zip(depl_cli.each(commands, cwd=folder), OTHERWISE):   # one start-up for them all
        assert r.returncode == 2, (args, r.stderr)
        line = [x for x in r.stderr.splitlines() if x.startswith("error") or "error:" in x]
        assert what in r.stderr and "analysed once" in r.stderr or "only grows" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and len(line) == 1, (args, r.stderr)
    with Store(folder / "runs.sqlite") as st:
        assert st.count_epochs() == before                          # nothing trained
    assert (folder / "search-candidates.json").read_text() == listed


def test_an_undecided_search_exits_3_and_says_what_more_it_needs(depl_cli, tmp_path):
    # every candidate counting every batch (`all`): the first batch brings each to the cap, and the search pauses
    r = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "2",
                 "--batch", "2", "--allocation", "all", "--out", "p.json", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "undecided: no candidate certified within --max-runs 2 runs counted each" in r.stdout
    assert "more runs" in r.stdout and not (tmp_path / "p.json").exists()
    # --max-runs counts runs per candidate; the search trained whole batches for every job: the cost line says so
    trained = int(r.stdout.split("  cost: ")[1].split(" runs trained")[0])
    assert trained > 2 and "--max-runs 2 caps the runs each candidate counts (the most counted: 2), not those " \
        "trained" in r.stdout
    # undecided: a larger --max-runs may go on, so every candidate's models stay — by default its best one
    kept = {p.name: len(list(p.glob("seed-*.json"))) for p in (tmp_path / "models").iterdir()}
    assert len(kept) >= 2 and set(kept.values()) == {1}
    # --json says the same reason (the rerun replays the store: nothing trained)
    again = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "2",
                     "--batch", "2", "--allocation", "all", "--out", "p.json", "--json", cwd=tmp_path)
    said = json.loads(again.stdout)
    assert again.returncode == said["exit_code"] == 3 and said["feasible"] is False
    assert said["reason"].startswith("undecided: no candidate certified within --max-runs 2")
    assert said["reason"] in again.stderr


def test_a_prefix_read_from_the_longer_run_is_the_shorter_plan_trained_on_its_own(searched, tmp_path):
    """One run of a schedule yields every prefix: a nested candidate trained alone on the same seed has the
    per-epoch losses the search read from its group's longer run."""
    from depl.train.backends.executors import run_all
    from depl.train.engine.execute import register, run_id_for
    from depl.workflows.search import prepare_search

    folder, r = searched
    cert = search_fields(json.loads(r.stdout)["certificate"])
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
    # float32: a stack of 10 seeds sums in another order than one seed alone (1e-5 apart after two epochs)
    assert alone == pytest.approx(longer[:c.epochs], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("args, why", [(["--alpha", "0"], "--alpha 0"), (["--alpha", "0.7"], "(0, 0.5]"),
                                       (["--store", "."], "is a folder"),
                                       (["--slack", "0.02"], "--slack: not used by --certify"),
                                       (["--uncalibrated", "--time-limit", "5"],
                                        "--time-limit, --uncalibrated: not used by --certify"),
                                       (["--uses", "0"], "--uses"), (["--uses", "nan"], "--uses nan")])
def test_bad_search_options_are_refused_in_one_line_before_anything_is_written(depl_cli, tmp_path, args, why):
    r = depl_cli("plan", "digits-small", "--certify", *args, "--out", "p.json", cwd=tmp_path)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def _one_error_line(r) -> str:
    lines = [x for x in r.stderr.splitlines() if x.startswith("error")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_the_searchs_seeds_are_refused_to_another_store_and_to_certify(depl_cli, searched, tmp_path):
    """The search's seeds are in its task's seed book: a second search in another store, or `depl certify` of a
    candidate the search did not return, on those seeds is refused, whatever store or plan file it uses."""
    folder, r = searched
    first = search_fields(json.loads(r.stdout)["certificate"])["first_seed"]
    again, law, cert = depl_cli.each([   # one start-up for the three (the plan without --certify uses no seed)
        [*ARGS[:-2], "--out", tmp_path / "other.json", "--first-seed", first],
        ["plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--out", "law.json"],
        ["certify", "law.json", "--first-seed", first + 3, "--max-runs", "4", "--out", "c"]], cwd=tmp_path,
        env=book(folder))
    assert "seed book" in _one_error_line(again) and not (tmp_path / "other.json").exists()
    assert law.returncode == 0, law.stderr
    assert "seed book" in _one_error_line(cert) and not (tmp_path / "c").exists()


def test_an_edited_candidate_list_is_refused(depl_cli, searched, tmp_path):
    folder, _ = searched
    import shutil

    for name in ("runs.sqlite", "search-candidates.json"):
        shutil.copy(folder / name, tmp_path / name)
    listed = json.loads((tmp_path / "search-candidates.json").read_text())
    listed["candidates"][0]["weight"] = 0.5
    (tmp_path / "search-candidates.json").write_text(json.dumps(listed))
    r = depl_cli(*ARGS, cwd=tmp_path, env=book(tmp_path))
    assert "written once" in _one_error_line(r)


def test_a_larger_max_runs_goes_on_where_the_search_stopped(depl_cli, tmp_path):
    """--max-runs 2, then 4: every seed counted before is counted again as it was, the seeds go on from the
    third, the decisions are those of one search run with --max-runs 4 from the start on the same seeds, and a rerun
    at 4 replays it all without training; a smaller --max-runs is refused."""
    args = ("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--batch", "2", "--out",
            "p.json", "--json")
    one = depl_cli(*args, "--max-runs", "2", cwd=tmp_path)
    assert one.returncode == 3, one.stderr
    c1 = search_fields(json.loads(one.stdout)["certificate"])
    with Store(tmp_path / "runs.sqlite") as st:
        held = {rid: st.losses(rid) for rid in {c["trains_with"] for c in c1["candidates"]}}
    # at 4, a rerun at 4 and a refused 3, one after another in one interpreter (one start-up)
    two, three, smaller = depl_cli.each([[*args, "--max-runs", n] for n in (4, 4, 3)], cwd=tmp_path)
    assert two.returncode in (0, 3), two.stderr
    c2 = search_fields(json.loads(two.stdout)["certificate"])
    assert c2["first_seed"] == c1["first_seed"] and c2["seeds"][0] == c1["seeds"][0]
    for a, b in zip(c1["candidates"], c2["candidates"]):
        if a["runs"]:
            assert b["first_counted"] == a["first_counted"] and b["runs"] >= a["runs"]
            assert b["met"] >= a["met"] and b["runs"] - a["runs"] >= b["met"] - a["met"]
        assert a["verdict"] != "dropped" or b["verdict"] == "dropped"        # a past decision stands
    assert any(b["runs"] > a["runs"] for a, b in zip(c1["candidates"], c2["candidates"]))
    with Store(tmp_path / "runs.sqlite") as st:   # after all three: the first's runs as they were, and the rerun
        for rid, losses in held.items():           # trained nothing (the store holds what the search at 4 trained)
            assert {s: v for s, v in st.losses(rid).items() if s in losses} == losses
        assert st.count_epochs() == c2["seed_epochs"]
    keep = ("verdict", "runs", "met", "first_counted", "dropped_after", "priced_out", "lower_bound")
    (tmp_path / "whole").mkdir()
    whole = depl_cli(*args, "--max-runs", "4", "--first-seed", str(c1["first_seed"]), cwd=tmp_path / "whole",
                     env=book(tmp_path / "whole"))
    cw = search_fields(json.loads(whole.stdout)["certificate"])
    assert whole.returncode == two.returncode and (cw["returned"], cw["seeds"]) == (c2["returned"], c2["seeds"])
    assert [[c[k] for k in keep] for c in cw["candidates"]] == [[c[k] for k in keep] for c in c2["candidates"]]
    c3 = search_fields(json.loads(three.stdout)["certificate"])
    assert [[c[k] for k in keep] for c in c3["candidates"]] == [[c[k] for k in keep] for c in c2["candidates"]]
    assert c3["seed_epochs"] == c2["seed_epochs"]
    assert "only grows" in _one_error_line(smaller)


def _dropped_or_not_returned(cert: dict) -> int:
    return next(i for i, c in enumerate(cert["evidence"]["candidates"]) if i != cert["evidence"]["returned"])


def _returned(cert: dict) -> dict:
    return cert["evidence"]["candidates"][cert["evidence"]["returned"]]


EDITS = {   # on the JSON of the plan's certificate (depl.certificate.Certificate.to_json)
    "a share raised": lambda c: c["evidence"]["candidates"][_dropped_or_not_returned(c)].update(weight=0.5),
    "α raised": lambda c: c.update(alpha=0.1),
    "the returned share and α raised": lambda c: _returned(c).update(weight=0.6, alpha=0.03),
    "the lower bound raised": lambda c: _returned(c).update(lower_bound=0.99),
    "the seeds removed": lambda c: c.update(seeds=[]),
    "the seeds moved": lambda c: c.update(seeds=[[c["seeds"][0][0] + 1000, c["seeds"][0][1] + 1000]]),
}


def test_an_edited_search_certificate_is_refused_before_anything_trains(depl_cli, searched):
    """A plan's search certificate is checked against its store's manifest and recounted: an edited one is one
    line, exit 2, and `depl validate` trains nothing (it would have trained the search's own seeds)."""
    folder, _ = searched
    names = []
    for k, edit in enumerate(EDITS.values()):
        plan = json.loads((folder / "plan.json").read_text())
        edit(plan["info"]["certificate"])
        names.append(f"edited-{k}.json")
        (folder / names[-1]).write_text(json.dumps(plan))
    refused = depl_cli.each(   # one start-up for them all
        [["validate", "digits-small", name, "--seeds", "2", "--out", f"v-{name}"] for name in names], cwd=folder,
        env=book(folder))
    for r, name, edit in zip(refused, names, EDITS):
        assert "info.certificate" in _one_error_line(r), edit
        assert not (folder / f"v-{name}").exists(), edit


def test_a_store_deleted_and_made_again_is_another_analysis_of_the_same_seeds(depl_cli, tmp_path):
    """The seed book remembers the search after its store is gone: the same seeds under other options are refused,
    and a new search without --first-seed starts above them."""
    args = ("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "2", "--out",
            "p.json", "--json")
    one = depl_cli(*args, "--batch", "2", cwd=tmp_path)
    first = search_fields(json.loads(one.stdout)["certificate"])["first_seed"]
    for f in ("runs.sqlite", "search-candidates.json"):
        (tmp_path / f).unlink()
    again, fresh = depl_cli.each([[*args, "--batch", "4", "--first-seed", first], [*args, "--batch", "4"]],
                                 cwd=tmp_path)
    assert "seed book" in _one_error_line(again)
    assert search_fields(json.loads(fresh.stdout)["certificate"])["first_seed"] > first + 1


def test_uses_and_the_horizon_are_the_searchs_recorded_priced_with_and_binding(depl_cli, tmp_path):
    """--uses and --horizon are recorded and shape the search: the candidates' shares of α follow --uses, the price
    of each candidate said before any run reckons with the horizon (its rerun's too, neither given again: the
    store's), a rerun takes the store's values and another value of either is refused naming the option."""
    import re

    args = ("plan", "digits-small", "--quantile", "0.5", "--loss", "1.5", "--certify", "--max-runs", "2", "--batch",
            "2", "--out", "p.json", "--json")
    few, uses, horizon, same = depl_cli.each(   # one start-up for the four; the last replays the store
        [[*args, "--uses", "10", "--horizon", "40"], [*args, "--uses", "1000000"], [*args, "--horizon", "1000"],
         args], cwd=tmp_path)
    c = search_fields(json.loads(few.stdout)["certificate"])
    assert c["uses"] == 10 and "runs' cost" in few.stderr and "law p" in few.stderr
    assert sum(r["weight"] for r in c["candidates"] if not r.get("proposal")) == pytest.approx(0.75)
    assert "--uses (was 10" in _one_error_line(uses)
    assert "--horizon (was 40)" in _one_error_line(horizon)
    for r in (few, same):
        c = search_fields(json.loads(r.stdout)["certificate"])
        assert c["uses"] == 10 and c["horizon"] == 40, r.stderr
        fixed = [x for x in c["candidates"] if not x.get("proposal")]
        runs = [float(x) for x in re.findall(r"~([0-9.]+) runs to decide", r.stderr)]
        shares = [float(x) for x in re.findall(r"α×([0-9.e-]+), law p", r.stderr)]
        assert len(runs) == len(shares) == len(fixed) > 1 and max(runs) <= 40 and "(horizon 40 runs)" in r.stderr
        assert shares == [float(f"{x['weight']:.3g}") for x in fixed]


def test_the_returned_plans_runs_are_its_kept_models(depl_cli, searched):
    """The search keeps the models its runs train, as depl run does: once decided, only the returned plan's stay,
    each the model of epoch K of its plan — its own run's last epoch, or a longer run's prefix."""
    import depl

    folder, r = searched
    cert = search_fields(json.loads(r.stdout)["certificate"])
    m, b = cert["models"], cert["candidates"][cert["returned"]]
    assert m["keep"] == "all"
    assert sorted(p.name for p in (folder / "models").iterdir()) == [m["run"]]   # the others' removed
    sides = {d["seed"]: d for d in (json.loads(p.read_text()) for p in (folder / "models" / m["run"]).glob("*.json"))}
    assert m["kept"] == len(sides)
    with Store(folder / "runs.sqlite") as st:
        held = [(st.losses(rid), st.diverged(rid)) for rid in b["read_from"]]
    start = b["first_counted"]
    counted = [s for s in range(start, start + b["runs"]) if not any(s in g for _, g in held)]
    assert set(counted) <= set(sides)                      # every run the certificate counted is a kept model
    for s in counted:                                       # the model of epoch K, whichever run trained it
        assert sides[s]["epochs"] == b["epochs"]
        assert sides[s]["final_test_loss"] == next(ls[s][b["epochs"] - 1] for ls, _ in held
                                                   if len(ls.get(s, [])) >= b["epochs"])
    listed = depl_cli("runs", "models", str(folder), "--json", cwd=folder)
    assert listed.returncode == 0 and m["run"] in listed.stdout, listed.stderr
    model = depl.load_model(folder, counted[0], run=m["run"])
    assert sum(p.numel() for p in model.parameters()) == sides[counted[0]]["parameters"]


def test_search_options_without_certify_are_refused(depl_cli, tmp_path):
    r = depl_cli("plan", "digits-small", "--max-runs", "5", "--keep-models", "all", cwd=tmp_path)
    line = _one_error_line(r)
    assert "--max-runs, --keep-models: used only by --certify" in line


def test_the_searchs_alpha_goes_to_the_alpha_ledger_once(depl_cli, searched):
    """The certificate the search issued is in the task's α ledger, its account the search's manifest; a rerun
    (the same certificate) spends nothing new."""
    folder, r = searched
    led = search_fields(json.loads(r.stdout)["certificate"])["alpha_ledger"]
    assert led["written"] and led["account"].startswith("search:")
    again = depl_cli(*ARGS, cwd=folder, env=book(folder))
    assert again.returncode == 0, again.stderr
    where = Path(os.environ["DEPL_ALPHA_LEDGER"]) / "digits-small.alpha.json"   # the tests' own ledger folder
    assert led["path"] == informational(where)   # said, not followed: no absolute path of this machine
    entries = json.loads(where.read_text())["entries"]
    mine = [e for e in entries if e["calibration"] == led["account"]]
    assert len(mine) == 1 and mine[0]["alpha"] == 0.05 and mine[0]["omega"] == 0.5 and mine[0]["loss"] == 1.5


def test_the_price_printed_is_at_the_share_of_alpha_the_search_tests_at(searched):
    """Each candidate's price is its test's at the α it gets: the first candidates' shares of the spending rule's
    first part (what the certificate records as each one's weight), not of the whole α."""
    from depl.workflows.search import USES, prepare_search, price

    folder, r = searched
    cert = search_fields(json.loads(r.stdout)["certificate"])
    fixed = [c for c in cert["candidates"] if not c["proposal"]]
    prices = price(prepare_search("digits-small", quantile=0.5, loss=1.5), 30, USES)
    assert [p["share"] for p in prices] == pytest.approx([c["weight"] for c in fixed])
    assert [0.05 * p["share"] for p in prices] == pytest.approx([c["alpha"] for c in fixed])
