"""A certified search's group trains, each batch, only as far as its longest candidate still in the race: real
training at tiny size (digits, 3 epochs), the committed searches replayed from their stores without training."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from depl.certificate import Certificate
from depl.certificate.search import Search
from depl.plan import Plan
from depl.store import Store, StoreError
from depl.train.engine.execute import register, run_id_for
from depl.train.backends.executors import run_all
from depl.train.engine.federation import Job
from depl.train.loops.search import Candidate, _register, covers, group, recorded_candidates, run_search

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "certificate-store" / "search"
TRAIN = dict(workers=1, threads=1)


def _spec(store: Path, rid: str) -> dict:
    with Store(store, readonly=True) as st:
        return next(r["spec"] for r in st.runs("search") if r["run_id"] == rid)


def _candidates(store: Path, rid: str, lengths: list[int], costs: list[float]) -> list[Candidate]:
    """Candidates that are the first `lengths` epochs of a stored search run's plan and job."""
    spec = _spec(store, rid)
    job, plan = Job.from_json(spec["job"]), Plan.from_json(spec["plan"])
    return [Candidate(dataclasses.replace(plan, epochs=plan.epochs[:k], cost=c), {},
                      dataclasses.replace(job, epochs=job.epochs[:k])) for k, c in zip(lengths, costs)]


def _epochs(store: Path) -> dict[str, int]:
    with Store(store, readonly=True) as st:
        return {r["run_id"]: st.count_epochs(r["run_id"]) for r in st.runs()}


KEEP = ("verdict", "runs", "met", "lower_bound", "dropped_after")


def _decisions(search: Search) -> list[tuple]:
    return [(a.status, a.test.runs, a.test.hits, a.state.lower, a.dropped_after) for a in search.arms]


# --------------------------------------------------------------------------- #
# covers: a schedule over the job's length does not nest
# --------------------------------------------------------------------------- #

def _digits_job() -> Job:
    return Job.from_json(_spec(RECORDS / "digits-small-2" / "runs.sqlite", "search-ceaf020f90a5")["job"])


def test_a_learning_rate_scheduled_over_the_jobs_length_does_not_nest():
    job = _digits_job()
    short = dataclasses.replace(job, epochs=job.epochs[:3])
    assert covers(job, short) and covers(job, job) and not covers(short, job)
    for sched, nests in (("cosine", False), ("step", True)):
        opts = job.options.model_copy(update={"schedule": sched, "step_every": 2 if sched == "step" else None})
        long_s, short_s = (dataclasses.replace(j, options=opts) for j in (job, short))
        assert covers(long_s, short_s) is nests, sched
        assert covers(long_s, long_s) and covers(short_s, short_s)
    # one epoch: the first epoch's rate is the same over any length, even cosine
    opts = job.options.model_copy(update={"schedule": "cosine"})
    assert covers(dataclasses.replace(job, options=opts), dataclasses.replace(job, epochs=job.epochs[:1], options=opts))


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_a_shorter_jobs_run_is_the_longer_runs_prefix_exactly_where_they_nest(tmp_path, schedule):
    """Trained for real: the data draw, the initialisation, pruning at the switch and the learning rate of a run
    of 2 epochs are those of a run of 3 on the same seed — unless the rate is scheduled over the run's length."""
    job = _digits_job()
    opts = job.options.model_copy(update={"schedule": schedule})
    long_j = dataclasses.replace(job, epochs=job.epochs[:3], options=opts)
    short_j = dataclasses.replace(job, epochs=job.epochs[:2], options=opts)
    with Store(tmp_path / "runs.sqlite") as st:
        ids = []
        for j in (long_j, short_j):
            rid = run_id_for(j, "local", prefix="prefix")
            register(st, rid, "plan", j, {"backend": "local"})
            run_all(st, [(rid, j, [5, 6])], seed_batch=2, **TRAIN)
            ids.append(rid)
        long_l, short_l = st.losses(ids[0]), st.losses(ids[1])
    for s in (5, 6):
        assert len(long_l[s]) == 3 and len(short_l[s]) == 2
        same = short_l[s] == pytest.approx(long_l[s][:2], rel=1e-6, abs=1e-7)
        assert same is (schedule == "constant"), (s, short_l[s], long_l[s])
        assert covers(long_j, short_j) is (schedule == "constant")


# --------------------------------------------------------------------------- #
# run_search: the group stops short once its longest candidate left the race
# --------------------------------------------------------------------------- #

FIRST, BATCH = 40, 4


def _search(max_runs: int = 40) -> Search:
    # every run meets ℓmax (2.5 ≥ any loss after an epoch); the 3-epoch candidate holds nearly all of α, so it
    # certifies after 10 runs (3 batches) while the 2-epoch one, at a tenth of that, needs 13 (a 4th batch)
    return Search([1.0, 2.0], 0.5, 0.05, shares=[0.005, 0.045], max_runs=max_runs, allocation="all")


def _group_cands() -> list[Candidate]:
    cands = _candidates(RECORDS / "digits-small-2" / "runs.sqlite", "search-ceaf020f90a5", [2, 3], [1.0, 2.0])
    for c in cands:
        c.plan = dataclasses.replace(c.plan, loss_target=2.5)
    return cands


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("groups")
    s = _search()
    r = run_search(_group_cands(), s, store=folder / "runs.sqlite", first_seed=FIRST, batch=BATCH, options=TRAIN)
    return folder, r


def test_a_group_whose_longest_candidate_left_the_race_trains_fewer_epochs_on_later_seeds(truncated):
    folder, r = truncated
    cands, s = r.candidates, r.search
    assert [c.group for c in cands] == [1, 1]                         # one group: the 3-epoch job covers the 2
    assert s.arms[1].status == "certified" and s.arms[0].status == "certified"
    long_runs, short_runs = s.arms[1].test.runs, s.arms[0].test.runs
    assert long_runs < short_runs <= r.seeds                          # the longest left the race first
    long_id, short_id = r.run_ids[1], run_id_for(cands[0].job, "local", prefix="search")
    with Store(folder / "runs.sqlite", readonly=True) as st:
        long_l, short_l = st.losses(long_id), st.losses(short_id)
        total = st.count_epochs()
    batches_long = -(-long_runs // BATCH) * BATCH                     # the batches it was in the race for
    assert sorted(long_l) == list(range(FIRST, FIRST + batches_long))
    assert all(len(v) == 3 for v in long_l.values())
    assert sorted(short_l) == list(range(FIRST + batches_long, FIRST + r.seeds))   # later seeds: 2 epochs each
    assert all(len(v) == 2 for v in short_l.values())
    assert r.trained == {long_id: batches_long, short_id: r.seeds - batches_long}
    assert r.seed_epochs == total == 3 * batches_long + 2 * (r.seeds - batches_long) < 3 * r.seeds
    assert r.runs_trained == r.seeds
    assert r.read_from == {0: [long_id, short_id], 1: [long_id]}
    # the outcomes counted are the losses of the run that trained each seed, at each candidate's own length
    assert r.outcomes[0] == [(long_l.get(x) or short_l[x])[1] for x in range(FIRST, FIRST + short_runs)]


def test_a_rerun_replays_the_truncated_store_to_the_same_decisions_without_training(truncated):
    folder, r = truncated
    before = _epochs(folder / "runs.sqlite")
    s = _search()
    again = run_search(_group_cands(), s, store=folder / "runs.sqlite", first_seed=FIRST, batch=BATCH,
                       options=TRAIN)
    assert _epochs(folder / "runs.sqlite") == before
    assert _decisions(s) == _decisions(r.search) and again.outcomes == r.outcomes
    assert (again.trained, again.seed_epochs, again.read_from) == (r.trained, r.seed_epochs, r.read_from)


def test_a_store_whose_group_trained_its_longest_job_on_every_seed_replays_to_the_same_decisions(truncated, tmp_path):
    """A store whose group trained the 3-epoch job on every seed, further than the search needs.  Read back, it trains
    nothing, counts what it holds, and decides as the truncated search did (the same hits for every candidate)."""
    _, r = truncated
    cands = _group_cands()
    group(cands)
    rid = run_id_for(cands[1].job, "local", prefix="search")
    with Store(tmp_path / "runs.sqlite") as st:
        _register(st, cands[1], rid, _search(), FIRST)
        run_all(st, [(rid, cands[1].job, list(range(FIRST, FIRST + r.seeds)))], seed_batch=BATCH, **TRAIN)
    before = _epochs(tmp_path / "runs.sqlite")
    s = _search()
    old = run_search(_group_cands(), s, store=tmp_path / "runs.sqlite", first_seed=FIRST, batch=BATCH, options=TRAIN)
    assert _epochs(tmp_path / "runs.sqlite") == before == {rid: 3 * r.seeds}
    assert _decisions(s) == _decisions(r.search)
    assert old.trained == {rid: r.seeds} and old.seed_epochs == 3 * r.seeds and old.read_from == {0: [rid], 1: [rid]}
    for i in (0, 1):
        assert old.outcomes[i] == pytest.approx(r.outcomes[i], rel=1e-6, abs=1e-7)


# --------------------------------------------------------------------------- #
# The committed searches (docs/certificate.md) read back from their stores
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("name", ["digits-small-2", "mnist1d-small"])
def test_a_committed_search_replays_from_its_store_without_training(tmp_path, name):
    """Its candidates as they were (each the first K epochs of its group's run), its store read back: the same
    verdicts, runs, hits and bounds, the same cost, and not one epoch trained."""
    cert = Certificate.of_plan(json.loads((RECORDS / name / "plan.json").read_text())["info"])
    ev = cert.evidence
    store = tmp_path / "runs.sqlite"
    shutil.copy(RECORDS / name / "runs.sqlite", store)
    before = _epochs(store)
    rows = cert.candidates
    with Store(store, readonly=True) as st:
        cands = recorded_candidates(st, cert)
    s = Search([c["cost"] for c in rows], cert.omega, cert.alpha, shares=[c["weight"] for c in rows],
               max_runs=ev["max_runs"], drop_below=ev["drop_below"], prior=ev["prior"],
               allocation=ev["allocation"])
    r = run_search(cands, s, store=store, first_seed=ev["first_seed"], batch=16, options=TRAIN)
    assert _epochs(store) == before
    assert [r.run_ids[c.group] for c in cands] == [c["trains_with"] for c in rows]
    assert [[getattr(a, "status")] + [a.test.runs, a.test.hits, a.state.lower, a.dropped_after] for a in s.arms] == \
        [[c[k] for k in KEEP] for c in rows]
    assert (s.best(), r.runs_trained, r.seed_epochs) == (cert.returned, ev["runs_trained"], ev["seed_epochs"])
    assert [r.seeds] == [len(cert.seed_list)] and s.outcome is cert.verdict


def test_the_plan_returneds_certificate_recounts_from_the_runs_its_seeds_were_read_from(truncated):
    """`depl validate`/`depl run` recount a search's certificate from its store (depl.ledger.search_problem): from
    every run the plan's seeds were read from, the longest first; its group's run alone does not hold them all."""
    from depl.ledger import search_problem
    from depl.workflows.search import search_certificate

    _, r = truncated
    cert = search_certificate(r)
    b = cert.returned
    assert b == 0 and len(cert.candidates[b]["read_from"]) == 2
    assert {t["run"]: t["seeds"] for t in cert.evidence["trained"]} == r.trained
    plan = dataclasses.replace(r.candidates[b].plan, info={"certificate": cert.to_json()})
    assert search_problem(plan, "plan.json", cert) is None
    row = {**cert.candidates[b], "read_from": cert.candidates[b]["read_from"][:1]}
    cut = cert.with_evidence(candidates=[row if i == b else c for i, c in enumerate(cert.candidates)])
    why = search_problem(dataclasses.replace(plan, info={"certificate": cut.to_json()}), "plan.json", cut)
    assert why is not None and "not what the file says" in why


@pytest.mark.parametrize("name, short, seeds", [("digits-small-2", 1424, 80), ("mnist1d-small", 4864, 176)])
def test_the_docs_figures_of_a_group_stopping_short_are_the_replay_scripts(name, short, seeds):
    """docs/certificate.md's seed-epochs of the committed searches where groups stop short: scripts/search_replay.py's
    output (the same decisions, nothing trained), and the page says them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_replay", ROOT / "scripts" / "search_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.replay(RECORDS / name, 16)
    assert out["same_decisions"] and out["epochs_trained_by_the_replay"] == 0
    assert out["seed_epochs_held"] == out["seed_epochs_recorded"] > out["seed_epochs_stopping_short"] == short
    doc = " ".join((ROOT / "docs" / "certificate.md").read_text(encoding="utf-8").split())
    assert f"{short:,} seed-epochs" in doc and f"{seeds} seeds after" in doc
    assert f"python scripts/search_replay.py docs/certificate-store/search/{name}" in doc


# --------------------------------------------------------------------------- #
# the allocation: focus trains a costlier candidate only once the cheaper ones look unlikely to certify
# --------------------------------------------------------------------------- #

def test_focus_counts_the_cheapest_alone_while_it_is_promising_and_its_certificate_recounts(tmp_path):
    """The 2-epoch candidate and the costlier 3-epoch one of its group: under focus only the cheapest counts while
    it is promising (every run meets ℓmax), it certifies, and the group never trains the 3-epoch job."""
    cands = _group_cands()
    s = Search([1.0, 2.0], 0.5, 0.05, max_runs=40)                    # the default allocation: focus
    assert s.allocation == "focus" and s.counting() == [0]
    r = run_search(cands, s, store=tmp_path / "runs.sqlite", first_seed=FIRST, batch=BATCH, options=TRAIN)
    assert s.arms[0].status == "certified" and s.best() == 0
    assert s.arms[1].test.runs == 0 and r.first_counted == {0: FIRST}
    short_id = run_id_for(cands[0].job, "local", prefix="search")
    with Store(tmp_path / "runs.sqlite", readonly=True) as st:
        held = {rid: len(v) for rid, v in ((x["run_id"], st.losses(x["run_id"])) for x in st.runs("search"))}
    assert held == {short_id: r.seeds}                                # the 3-epoch job never trained
    assert r.seed_epochs == 2 * r.seeds
    # the same seeds under `all`: both count every seed, the group trains its longest job
    s_all = Search([1.0, 2.0], 0.5, 0.05, max_runs=40, allocation="all")
    r_all = run_search(_group_cands(), s_all, store=tmp_path / "all.sqlite", first_seed=FIRST, batch=BATCH,
                       options=TRAIN)
    assert s_all.arms[1].test.runs > 0 and r_all.seed_epochs > r.seed_epochs
    # a store counted under one allocation is not resumed under another
    with pytest.raises(StoreError, match="allocation"):
        run_search(_group_cands(), Search([1.0, 2.0], 0.5, 0.05, max_runs=40, allocation="all"),
                   store=tmp_path / "runs.sqlite", first_seed=FIRST, batch=BATCH, options=TRAIN)


def test_focus_starts_the_next_candidate_once_the_cheapest_looks_unlikely_to_certify():
    """Pure numbers: the cheapest misses every run; once it has counted the runs its rate needs to say anything,
    it is not promising and the next one starts counting — on seeds after that decision only."""
    s = Search([1.0, 2.0, 3.0], 0.9, 0.05, max_runs=300)
    seen = []
    while s.best() is None and not s.finished and len(seen) < 200:
        now = s.counting()
        seen.append(now)
        for _ in range(8):
            for i in now:
                s.record(i, i > 0)                                    # [0] always misses, the others always meet
        s.after_batch()
    assert seen[0] == [0] and any(1 in x for x in seen) and all(2 not in x for x in seen)
    first_with_1 = next(k for k, x in enumerate(seen) if 1 in x)
    batches = len(seen) - first_with_1                                # it counted only batches after it started,
    assert 8 * (batches - 1) < s.arms[1].test.runs <= 8 * batches     # until it decided
    assert s.best() == 1


# --------------------------------------------------------------------------- #
# candidates proposed from the runs: recorded, counted on later seeds only, proposed again the same on a replay
# --------------------------------------------------------------------------- #

class _StallsOnce(Search):
    """The search's own rules, but stalled after its first batch (what two candidates falling short would do)."""

    @property
    def stalled(self) -> bool:
        return self.best() is None and self.proposed == 0 and self.arms[0].test.runs >= BATCH


def _proposing(cost: float = 2.0):
    def propose(search, outcomes, cands, drawn):
        three = _group_cands()[1]
        three.plan = dataclasses.replace(three.plan, cost=cost)
        three.proposed = {"after_seeds": drawn, "guess": 0.99}
        return [three]
    return propose


def _stalling() -> Search:
    from depl.certificate.search import Spending

    return _StallsOnce([1.0], 0.5, 0.05, max_runs=40, spending=Spending(0.75), allocation="all")


def test_a_proposed_candidate_counts_only_later_seeds_and_a_replay_proposes_it_again(tmp_path):
    store = tmp_path / "runs.sqlite"
    r = run_search(_group_cands()[:1], _stalling(), store=store, first_seed=FIRST, batch=BATCH, options=TRAIN,
                   propose=_proposing(), proposals=1)
    s = r.search
    assert len(r.candidates) == 2 and s.arms[1].proposal == 1 and s.arms[1].weight == pytest.approx(0.125)
    assert r.first_counted[1] == FIRST + BATCH                    # the seeds after it was proposed, not before
    assert s.arms[1].test.runs <= r.seeds - BATCH
    with Store(store, readonly=True) as st:
        (row,) = [x["spec"] for x in st.runs("search-proposal")]
    assert row["from_seeds"] == BATCH and row["share"] == pytest.approx(0.125) and row["epochs"] == 3
    before = _epochs(store)
    again = run_search(_group_cands()[:1], _stalling(), store=store, first_seed=FIRST, batch=BATCH, options=TRAIN,
                       propose=_proposing(), proposals=1)
    assert _epochs(store) == before                               # read back, nothing trained
    assert [(a.status, a.test.runs, a.test.hits) for a in again.search.arms] == \
        [(a.status, a.test.runs, a.test.hits) for a in s.arms]
    with pytest.raises(StoreError, match="proposed"):               # another proposal rule on the same runs
        run_search(_group_cands()[:1], _stalling(), store=store, first_seed=FIRST, batch=BATCH, options=TRAIN,
                   propose=_proposing(cost=3.0), proposals=1)


def _schedules(cands) -> set:
    plans = [getattr(c, "plan", c) for c in cands]   # candidates or plans
    return {(tuple(p.datasets), tuple((e.model, e.cluster) for e in p.epochs)) for p in plans}


def test_the_margin_the_runs_showed_tightens_the_target_a_proposal_is_planned_for():
    """One version (digits-small's full net alone): runs whose ω′-quantile is 1.5× the law's ω-quantile — the
    proposal is the planner's cheapest plan for ℓmax/1.5 (or 10 %, 20 %, … stricter where that plan is a candidate
    already), not already a candidate, with a guess; runs that met the law ask for 10 % all the same."""
    from depl.scenario import load_scenario
    from depl.workflows.search import margin, prepare_search, propose_from_runs, without_versions

    one = without_versions(load_scenario("digits-small"), {"pruned-0.5"})
    assert [m.name for m in one.models] == ["full"] and not one.switches
    assert without_versions(one, {"full"}) is None                  # no version left
    prep = prepare_search(one)
    c0 = prep.candidates[0]
    outcomes = {0: [1.5 * c0.plan.loss_quantile] * 20, 1: []}
    m = margin(prep, outcomes, prep.candidates)
    assert m["candidate"] == 0 and m["ratio"] == pytest.approx(1.5) and m["version"] == "full"
    assert margin(prep, {0: [1.0] * 5}, prep.candidates) is None    # too few runs to say
    (new,) = propose_from_runs(prep)(None, outcomes, prep.candidates, 32)
    loss = prep.scenario.target.loss
    assert any(new.proposed["loss"] == pytest.approx(loss / 1.5 * f) for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5))
    assert new.proposed["after_seeds"] == 32 and 0.0 <= new.proposed["guess"] <= 1.0 and "without" not in new.proposed
    assert _schedules([new]).isdisjoint(_schedules(prep.candidates))
    assert new.plan.loss_target == loss                             # tested at the scenario's own target
    (met,) = propose_from_runs(prep)(None, {0: [0.9 * c0.plan.loss_quantile] * 20}, prep.candidates, 32)
    assert any(met.proposed["loss"] == pytest.approx(0.9 * loss * f) for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5))


def test_a_law_optimistic_about_one_version_is_not_held_against_plans_without_it():
    """digits-small: every candidate ends in pruned-0.5; runs of the cheapest at 1.5× the law's quantile — the
    proposal is planned without pruned-0.5 (and its switch), at ℓmax itself (no run of the full net says the law
    is off for it), cheaper than the whole space planned for ℓmax/1.5, and records what it was planned without."""
    from depl.planners import make_plan, Options
    from depl.workflows.planning import retarget
    from depl.workflows.search import prepare_search, propose_from_runs

    prep = prepare_search("digits-small")
    assert {c.plan.epochs[-1].model for c in prep.candidates} == {"pruned-0.5"}
    c0 = prep.candidates[0]
    (new,) = propose_from_runs(prep)(None, {0: [1.5 * c0.plan.loss_quantile] * 20}, prep.candidates, 32)
    assert new.proposed["without"] == ["pruned-0.5"] and new.proposed["margin"] is None
    assert {e.model for e in new.plan.epochs} == {"full"}
    loss = prep.scenario.target.loss
    assert any(new.proposed["loss"] == pytest.approx(loss * f) for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5))
    assert _schedules([new]).isdisjoint(_schedules(prep.candidates)) and new.plan.loss_target == loss
    # what the whole space offers at ℓmax/1.5 (at ω or ω′, 10 %, 20 %, … stricter while its plans are candidates):
    # dearer than the proposal
    have, w = _schedules(prep.candidates), prep.scenario.target.quantile
    for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5):
        whole = [p for q in (w, w + (1 - w) / 2) if _schedules([p := make_plan(retarget(
            prep.scenario.uncalibrated(), loss=loss / 1.5 * f, quantile=q), "depl", Options(eta=200))]).isdisjoint(have)]
        if whole:
            break
    assert new.plan.cost < min(p.cost for p in whole)


@pytest.mark.parametrize("name, scenario, first", [("mnist1d-small-2", "mnist1d-small", 1800000),
                                                   ("mnist1d-noniid-2", "mnist1d-noniid", 1900000)])
def test_a_committed_search_of_the_price_rule_replays_through_its_command(depl_cli, tmp_path, name, scenario, first):
    """The command that made it, on a copy of its store: the candidates planned again from the scenario, the store
    bound to the same search, every decision replayed, not one epoch trained."""
    cert = Certificate.of_plan(json.loads((RECORDS / name / "plan.json").read_text())["info"])
    shutil.copy(RECORDS / name / "runs.sqlite", tmp_path / "runs.sqlite")
    before = _epochs(tmp_path / "runs.sqlite")
    r = depl_cli("plan", scenario, "--certify", "--first-seed", first, "--batch", 16, "--max-runs", 300, "--uses",
                 1000, "--keep-models", "none", "--out", tmp_path / "plan.json", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    again = Certificate.from_json(json.loads(r.stdout)["certificate"])
    keep = ("verdict", "runs", "met", "lower_bound", "cost", "weight")
    assert [[c[k] for k in keep] for c in again.candidates] == [[c[k] for k in keep] for c in cert.candidates]
    assert (again.returned, again.evidence["runs_trained"], again.seeds) == \
        (cert.returned, cert.evidence["runs_trained"], cert.seeds)
    assert _epochs(tmp_path / "runs.sqlite") == before


def _nudge(store: Path, factor: float) -> dict:
    """Move the numbers a search computed in a store's manifest — each candidate's guess and share of α — by
    `factor`, as another machine's last digits would; the manifest as it is then."""
    with sqlite3.connect(store) as db:
        (spec,) = db.execute("SELECT spec FROM runs WHERE kind = 'search-manifest'").fetchone()
        m = json.loads(spec)
        for c in m["candidates"]:
            c["guess"], c["share"] = c["guess"] * factor, c["share"] * factor
        db.execute("UPDATE runs SET spec = ? WHERE kind = 'search-manifest'", (json.dumps(m),))
    return m


def test_a_search_replays_on_the_numbers_its_store_bound_not_this_machines_last_digits(depl_cli, tmp_path):
    """A law's P(meets ℓmax) and the shares of α computed from it differ between machines in their last digits: a
    rerun is the search its store bound when they agree to 1e-9, and decides on the store's numbers; numbers that
    differ more are another search, refused in one line."""
    shutil.copy(RECORDS / "mnist1d-small-2" / "runs.sqlite", tmp_path / "runs.sqlite")
    before = _epochs(tmp_path / "runs.sqlite")
    m = _nudge(tmp_path / "runs.sqlite", 1.0 + 1e-12)
    args = ("plan", "mnist1d-small", "--certify", "--first-seed", 1800000, "--batch", 16, "--max-runs", 300,
            "--uses", 1000, "--keep-models", "none", "--json")
    r = depl_cli(*args, "--out", tmp_path / "plan.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    again = Certificate.from_json(json.loads(r.stdout)["certificate"])
    assert [(c["weight"], c["law_p"]) for c in again.candidates] == [(c["share"], c["guess"]) for c in m["candidates"]]
    assert _epochs(tmp_path / "runs.sqlite") == before
    _nudge(tmp_path / "runs.sqlite", 1.0 + 1e-6)
    # (a new seed book: the one above holds these seeds for the search as bound, and refuses first)
    r = depl_cli(*args, "--out", tmp_path / "plan-2.json", cwd=tmp_path, env={"DEPL_SEED_LEDGER": str(tmp_path)})
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "holds a search with another list of candidates" in errors[0]
    assert not (tmp_path / "plan-2.json").exists()
