"""The automatic choice of how to train many seeds: the measured fastest, cached per network, data and machine."""

import json
import math

import pytest

from depl.train.engine import autochoice
from depl.train.engine.autochoice import (LOOP, MARGIN, Candidate, Choice, Estimate, cache_file, choose, decide,
                                   default_candidates, measure, probe, usable_cores)
from depl.store import Store
from depl.train.engine import execute
from depl.train.backends import executors
from depl.train.engine.federation import job_from_plan
from trainkit import make_plan

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


@pytest.fixture
def auto(tmp_path, monkeypatch):
    """The automatic choice on (the test suite turns it off), with a cache of this test's own."""
    monkeypatch.setenv("DEPL_AUTOCHOICE", "1")
    monkeypatch.setenv("DEPL_CACHE", str(tmp_path / "cache"))
    return {"DEPL_AUTOCHOICE": "1", "DEPL_CACHE": str(tmp_path / "cache")}


def tiny_job():
    return job_from_plan(make_plan([("full", "B")], width=4, share_to=0.1))


def test_the_pick_beats_the_loop_by_the_margin_in_every_round_and_the_second_call_reads_the_cache(tmp_path):
    job = tiny_job()
    cands = [Candidate(2, 1), Candidate(4, 1)]   # the loop is added: it is always a candidate
    if usable_cores() >= 2:
        cands.append(Candidate(2, 2))
    steady = lambda: (1.0, 2)   # noqa: E731 - the load each call sees: the same (another load: measured again)
    first = choose(job, 4, cands, cache_dir=tmp_path, share=None, load=steady)   # every way, however short the job
    assert not first.cached
    assert set(first.rates) == {c.label for c in [LOOP, *cands]}
    assert all(math.isfinite(r) and r > 0 for r in first.rates.values())
    assert first.loop_rate == first.rates[LOOP.label] and first.margin >= MARGIN
    # what the rule promises, on the rates it measured: the pick beat the loop by the margin in each of its rounds
    # and is the fastest that did; the loop when none did
    beat = [c for c in cands if len(first.ratios[c.label]) == len(first.ratios[LOOP.label])
            and min(first.ratios[c.label]) >= 1 + first.margin]
    assert first.picked == (max(beat, key=lambda c: first.rates[c.label]) if beat else LOOP)
    assert first.rates[first.picked.label] >= first.loop_rate
    assert first.key["machine"]["cores"] == usable_cores()
    path = cache_file(tmp_path, first.key)
    assert json.loads(path.read_text())["picked"] == {"seed_batch": first.picked.seed_batch,
                                                       "workers": first.picked.workers, "threads": 1}
    again = choose(job, 4, cands, cache_dir=tmp_path, share=None, load=steady)
    assert again.cached
    assert again == first  # the same record, read back


def test_the_loop_is_kept_when_no_candidate_beats_it_by_the_margin():
    # measured for real; no rate can be 101× the loop's, so nothing is measured after the first round
    c = choose(tiny_job(), 4, [Candidate(2, 1), Candidate(4, 1)], margin=100.0, share=None)
    assert c.picked == LOOP and not c.cached
    assert len(c.ratios[LOOP.label]) == 1 and all(len(r) == 1 for r in c.ratios.values())
    assert c.why.startswith("the per-seed loop")
    assert "101.00×" in c.why or "the fastest of" in c.why


def test_the_rule_on_given_rounds_keeps_the_loop_unless_a_candidate_beats_it_by_more_than_its_noise():
    s4, s8, s16 = Candidate(4, 1), Candidate(8, 1), Candidate(16, 1)
    cands = [LOOP, s4, s8, s16]
    key = {"candidates": [], "margin": MARGIN}
    steady = [(100.0, 100.0)] * 3
    # stack 8 is fastest by its median but once no faster than the loop; stack 4 beats it by ≥ 20 % every round
    rounds = [{s4: 130.0, s8: 200.0, s16: 90.0}, {s4: 125.0, s8: 105.0}, {s4: 120.0, s8: 210.0}]
    c = decide(cands, rounds, steady, key)
    assert c.picked == s4 and c.ratios[s16.label] == [0.9] and c.noise == 0.0
    assert c.why.startswith("125 seed-steps/s, 1.25× the per-seed loop's 100; at least 1.20× in each of 3 rounds")
    # the loop itself moved 30 % within a round: 1.2–1.3× is within the noise, the loop is kept
    noisy = [(100.0, 100.0), (90.0, 117.0), (100.0, 100.0)]
    c = decide(cands, rounds, noisy, key)
    assert c.picked == LOOP and c.margin == pytest.approx(0.3)
    assert "the per-seed loop kept" in c.why and "not 1.30×" in c.why
    # all slower than the loop: the loop
    c = decide(cands, [{s4: 50.0, s8: 60.0, s16: 70.0}], [(100.0, 100.0)], key)
    assert c.picked == LOOP and c.why.startswith("the per-seed loop, the fastest of 4 measured")


def test_a_cache_file_of_another_key_or_unreadable_is_not_used(tmp_path):
    from depl.train.engine.autochoice import _read

    key = {"job": {"net": "cnn1d"}, "machine": {"cpu": "x"}, "candidates": []}
    load = {"loadavg": 1.0, "cpus": 2, "per_cpu": 0.5, "spread": [0.01]}
    rec = Choice(Candidate(2, 1), {Candidate(2, 1).label: 5.0, LOOP.label: 2.0}, 2.0, key, 1.0,
                 {Candidate(2, 1).label: [2.5], LOOP.label: [1.0]}, load=load, code=autochoice.code_version())
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rec.to_json()))
    assert _read(path, key, (1.0, 2)) == (rec, "")
    assert _read(path, {**key, "machine": {"cpu": "y"}}, (1.0, 2)) == (None, "its file holds another network, "
                                                                         "data shape or machine")
    path.write_text("{not json")
    assert _read(path, key, (1.0, 2))[1].endswith("is unreadable (JSONDecodeError)")


def test_default_candidates_are_the_loop_and_stacks_no_larger_than_a_workers_share():
    cands = default_candidates(6, cores=2)
    assert Candidate(1, 1, 1) in cands and Candidate(1, 2, 1) in cands and Candidate(1, 1, 2) in cands
    assert Candidate(6, 1, 1) in cands and Candidate(3, 2, 1) in cands
    assert all(c.seed_batch <= math.ceil(6 / c.workers) and c.workers * c.threads <= 2 for c in cands)
    assert len(set(cands)) == len(cands)


def test_a_candidate_beyond_the_cores_is_refused():
    job = tiny_job()
    with pytest.raises(ValueError, match="workers × threads"):
        choose(job, 4, [Candidate(2, usable_cores() + 1)])


def test_default_candidates_have_no_more_workers_than_batches():
    assert default_candidates(1, cores=2) == [Candidate(1, 1, 1), Candidate(1, 1, 2)]
    assert all(c.workers <= math.ceil(3 / c.seed_batch) for c in default_candidates(3, cores=4))


def rows(st, rid, seeds) -> dict:
    """Every seed's recorded epochs, but the wall seconds (not a result)."""
    return {s: [(r.epoch, r.model, r.cluster, r.test_loss, r.test_accuracy, r.train_loss) for r in st.trajectory(rid, s)]
            for s in seeds}


class Stop(Exception):
    pass


def test_a_resumed_run_keeps_the_batches_it_was_first_cut_into_whatever_is_decided_now(tmp_path):
    job = job_from_plan(make_plan([("full", "B"), ("full", "B")], width=4, share_to=0.1))
    seeds, rid = [0, 1, 2, 3], execute.run_id_for(job, "local")
    out = {}
    for name, how in (("stack", {"executor": "stack", "seed_batch": 2}), ("loop", {"executor": "loop"})):
        with Store(tmp_path / f"{name}.sqlite") as st:
            execute.register(st, rid, "plan", job)
            executors.run_all(st, [(rid, job, seeds)], **how)
            out[name] = rows(st, rid, seeds)
    assert out["loop"] != out["stack"]   # the batching shows in the trajectories: it must be kept
    with Store(tmp_path / "resumed.sqlite") as st:
        execute.register(st, rid, "plan", job)

        def stop(run_id, seed, epoch, row):
            raise Stop  # after the first batch-epoch is written: seeds 0 and 1 at epoch 1, 2 and 3 not begun

        with pytest.raises(Stop):
            executors.run_all(st, [(rid, job, seeds)], executor="stack", seed_batch=2, progress=stop)
        assert st.batches(rid) == {0: 0, 1: 0, 2: 2, 3: 2} and st.done_epochs(rid, 0) == 1
        assert st.done_epochs(rid, 2) == 0
        d = executors.run_all(st, [(rid, job, seeds)], executor="loop")   # a batching of 1 asked now
        assert d.executor.name == "loop" and st.batches(rid) == {0: 0, 1: 0, 2: 2, 3: 2}
        assert rows(st, rid, seeds) == out["stack"]   # every seed as the uninterrupted run of stacks of 2


def test_the_decision_without_measuring_few_seeds_another_device_off_given_or_nothing_left(tmp_path, auto,
                                                                                          monkeypatch):
    job = tiny_job()
    runs = [("r", job, [0, 1, 2])]
    few = executors.decide(runs, todo=2)
    assert (few.how, few.executor.name, few.batch, few.workers) == ("few", "loop", 1, 1)
    assert few.line == "seeds: the per-seed loop × 1 worker × 1 thread — 2 seeds to train: too few to be worth " \
                       "measuring the alternatives"
    assert executors.decide(runs, todo=0).how == "done"
    gpu = executors.decide(runs, device="cuda")
    assert gpu.how == "device" and "device cuda" in gpu.why and gpu.options.seed_batch == 32
    # on a GPU one process trains the stacks unless --workers is given (several would each start CUDA)
    assert (gpu.executor.name, gpu.workers) == ("stack", 1)
    assert executors.decide(runs, device="cuda", seed_batch=8).executor.name == "stack"
    assert executors.decide(runs, device="cuda", workers=3).executor.name == "processes"
    given = executors.decide(runs, workers=1, threads=1)
    assert (given.how, given.executor.name, given.batch) == ("named", "stack", 3)
    assert given.why == "given: --workers 1, --threads 1; nothing measured"
    monkeypatch.setenv("DEPL_AUTOCHOICE", "0")
    off = executors.decide(runs)
    assert off.how == "off" and off.options.seed_batch == 32
    assert not list(tmp_path.glob("cache/autochoice-*.json"))   # none of them measured (data/: MNIST-1D's pool)


def test_depl_run_measures_prints_and_records_its_choice_then_reads_it_back_and_options_override_it(
        depl_cli, tmp_path, auto):
    plan = tmp_path / "plan.json"
    make_plan([("full", "B"), ("full", "B")], width=4, share_to=0.1).save(plan)
    # 4 seeds of a tiny job: a tenth of it is no time to measure in; the loop, said why, nothing cached
    short = depl_cli("run", plan, "--seeds", "4", "--out", tmp_path / "s", env=auto)
    assert short.returncode == 0, short.stderr
    said = short.stdout.replace("\n", " ")
    assert "seeds: the per-seed loop × 1 worker × 1 thread — nothing measured: the job ≈ " in said
    assert "s a measurement needs; the per-seed loop" in said and "measuring" not in said
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("autochoice-*"))
    auto = {**auto, "DEPL_AUTOCHOICE": "full"}   # every way measured, whatever the job's length
    r = depl_cli("run", plan, "--seeds", "4", "--out", tmp_path / "a", env=auto)
    assert r.returncode == 0, r.stderr
    said = r.stdout.replace("\n", " ")
    assert "measuring up to 6 ways to train 4 seeds on this machine" in said and " — measured in " in said
    assert "measured the loop and " in said and "the loop's spread" in said
    (cache,) = (tmp_path / "cache").glob("autochoice-*.json")
    picked = Candidate(**json.loads(cache.read_text())["picked"])
    size = min(picked.seed_batch, math.ceil(4 / picked.workers))
    assert f"seeds: {'the per-seed loop' if size == 1 else f'stacks of {size} seeds'} × {picked.workers} worker" \
        in said
    with Store(tmp_path / "a" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        assert st.batches(run["run_id"]) == {s: s - s % size for s in range(4)}   # the pick's batching, recorded
        assert st.count_epochs(run["run_id"]) == 8
    again = depl_cli("run", plan, "--seeds", "4", "--out", tmp_path / "b", env=auto)
    assert again.returncode == 0, again.stderr
    said = again.stdout.replace("\n", " ")
    if "measuring" in said:   # the load per CPU moved by more than 0.5 since (a busy machine): said so
        assert "the cached choice is not used: measured under load" in said, said
    else:
        assert " — cached (measured in " in said and " by an earlier call under load " in said
    named = depl_cli("run", plan, "--seeds", "4", "--seed-batch", "3", "--out", tmp_path / "c",
                     env={**auto, "DEPL_CACHE": str(tmp_path / "other")})
    assert named.returncode == 0, named.stderr
    assert "— given: --seed-batch 3; nothing measured" in named.stdout.replace("\n", " ")
    assert not list((tmp_path / "other").glob("autochoice-*"))   # nothing measured, nothing cached
    with Store(tmp_path / "c" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        workers = min(2, usable_cores())   # one worker per core, batches of at most ⌈4 / workers⌉ and 3
        b = min(3, math.ceil(4 / workers))
        assert st.batches(run["run_id"]) == {s: s - s % b for s in range(4)}


def test_validate_json_says_how_its_seeds_trained(depl_cli, tmp_path, auto):
    from depl import workflows

    plan = tmp_path / "plan.json"
    workflows.plan("digits-small", quantile=0.5, loss=1.0, out=plan)
    r = depl_cli("validate", "digits-small", plan, "--seeds", "2", "--out", tmp_path / "v", "--json", env=auto)
    assert r.returncode in (0, 4), r.stderr
    how = json.loads(r.stdout)["seed_training"]
    assert (how["how"], how["executor"], how["batch"], how["workers"]) == ("few", "loop", 1, 1)
    assert how["line"] in r.stderr.replace("\n", " ")


class GivenPool:
    """Rates given per candidate, each window advancing a given clock by its length and `cost` (the budget's
    arithmetic, without timing anything)."""

    def __init__(self, rates: dict, cost: float = 0.2):
        self.rates, self.cost, self.now, self.windows = rates, cost, 0.0, []

    def clock(self) -> float:
        return self.now

    def rate(self, c: Candidate, window: float) -> float:
        self.now += window + self.cost
        self.windows.append(c)
        return self.rates.get(c, self.rates[LOOP])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def estimate(seconds: float) -> Estimate:
    return Estimate(seconds, 100, 0.01, 0.01, 0.0, 100.0)


def test_the_measurement_stops_within_its_share_of_the_job_and_picks_among_what_it_measured():
    s4, s8, w2 = Candidate(4, 1), Candidate(8, 1), Candidate(4, 2)
    cands = [LOOP, s4, s8, w2, Candidate(16, 1), Candidate(32, 1)]
    pool = GivenPool({LOOP: 100.0, s4: 150.0, s8: 300.0, w2: 200.0})
    key = {"candidates": [], "margin": MARGIN}
    # a job of 100 s by the loop: 10 s to measure in, less once stack 8 is measured 3× the loop (≈ 33 s → 3.3 s)
    c = measure(None, cands, key, est=estimate(100.0), share=0.1, clock=pool.clock, t0=0.0, pool=pool)
    b = c.budget
    assert c.measured_seconds == pool.now <= 0.1 * b["fastest_job_seconds"] + 1e-9
    assert b["fastest_job_seconds"] == pytest.approx(100.0 / 3) and b["share"] <= 0.1
    assert b["stopped"] and b["measured"] < b["candidates"] == 5
    assert c.picked in (s8, LOOP) and set(c.rates) <= {x.label for x in cands}
    assert all(x in (LOOP, *[y for y in cands if y.label in c.rates]) for x in pool.windows[1:])
    # the same rates without a bound: every candidate, every round
    full = measure(None, cands, key, pool=GivenPool({LOOP: 100.0, s4: 150.0, s8: 300.0, w2: 200.0}),
                   clock=pool.clock)
    assert full.budget["measured"] == 5 and full.picked == s8 and len(full.ratios[s8.label]) == 3
    # a budget spent before the first round: the loop, nothing cached by choose (no round)
    none = measure(None, cands, key, est=estimate(1.0), share=0.1, clock=pool.clock, t0=pool.now,
                   pool=GivenPool({LOOP: 100.0}))
    assert none.picked == LOOP and none.ratios[LOOP.label] == [] and "no round measured" in none.why


def test_a_real_measurement_of_a_tiny_job_takes_at_most_its_share_and_says_so(tmp_path):
    job = tiny_job()
    per_seed = probe(job, 1).seconds
    todo = max(4, math.ceil(40 / per_seed))   # a job of about 40 s by the loop: about 4 s to measure in
    said = []
    c = choose(job, 8, [Candidate(4, 1), Candidate(8, 1)], cache_dir=tmp_path, todo=todo, min_budget=1.0,
               said=said.append)
    b = c.budget
    # the budget is checked before every window; one window (≤ 1 s) and its start may pass it
    assert c.measured_seconds <= 0.1 * b["fastest_job_seconds"] + 2.0, b
    assert said[0].startswith("measuring up to 3 ways to train 8 seeds") and "within 10% of the job" in said[0]
    assert said[1] == c.summary and f"{b['share']:.1%} of the job" in said[1] and "the loop's spread" in said[1]


def test_a_short_job_is_not_measured_and_the_decision_says_why(tmp_path, auto):
    job = tiny_job()
    said = []
    c = choose(job, 4, cache_dir=tmp_path, todo=4, said=said.append)
    assert c.picked == LOOP and c.budget["skipped"] and not said
    assert "is under the 5 s a measurement needs" in c.reason and not list(tmp_path.glob("autochoice-*"))
    d = executors.decide([("r", job, [0, 1, 2, 3])])
    assert (d.how, d.executor.name, d.batch) == ("short", "loop", 1)
    assert d.line.startswith("seeds: the per-seed loop × 1 worker × 1 thread — nothing measured: the job ≈ ")


@pytest.mark.parametrize("then, now, why", [
    ((0.2, 2), (3.0, 2), "moved by more than 0.5"),
    ((2.4, 2), (1.8, 2), "it was overloaded then and is not now"),
    ((0.2, 2), (0.6, 2), None),
])
def test_a_cached_choice_is_measured_again_under_another_load_or_code(tmp_path, then, now, why):
    job = tiny_job()
    s4 = Candidate(4, 1)
    rates = {LOOP: 100.0, s4: 150.0}
    first = choose(job, 8, [s4], tmp_path, share=None, pool=GivenPool(rates), load=lambda: then)
    assert first.load["loadavg"] == then[0] and first.load["cpus"] == then[1] and len(first.load["spread"]) == 3
    assert first.code == autochoice.code_version() and first.picked == s4
    said = []
    again = choose(job, 8, [s4], tmp_path, share=None, pool=GivenPool(rates), load=lambda: now, said=said.append)
    if why is None:
        assert again.cached and not said
    else:
        assert not again.cached and why in again.reason and why in said[0]
        assert said[0].startswith("measuring up to 2 ways") and "the cached choice is not used: measured under " \
            f"load {then[0]:.1f} on 2 CPUs" in said[0]
    # another version of the measuring code: measured again, said so
    path = cache_file(tmp_path, first.key)
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "code": "0.0.1/3/000000000000", "load": first.load}))
    said = []
    third = choose(job, 8, [s4], tmp_path, share=None, pool=GivenPool(rates), load=lambda: then, said=said.append)
    assert not third.cached and "measured by other code (0.0.1/3/000000000000, now " in said[0]


def test_a_first_round_measures_each_kinds_largest_stack_first_then_from_the_loop_up():
    """32 seeds on 2 cores: the kinds in turn (2 workers, 1 worker, 1 worker × 2 threads), each opening with its
    largest stack, so a round the budget cuts after four ways has measured a whole share per worker."""
    order = autochoice.first_round_order([c for c in autochoice.default_candidates(32, cores=2) if c != LOOP])
    labels = [(c.seed_batch, c.workers, c.threads) for c in order]
    assert labels[:4] == [(16, 2, 1), (32, 1, 1), (32, 1, 2), (1, 2, 1)]
    assert sorted(labels) == sorted((c.seed_batch, c.workers, c.threads)
                                    for c in autochoice.default_candidates(32, cores=2) if c != LOOP)
    by_kind = [[b for b, w, t in labels if (w, t) == kind] for kind in ((2, 1), (1, 1), (1, 2))]
    assert by_kind == [[16, 1, 4, 8], [32, 4, 8, 16], [32, 1, 4, 8, 16]]
