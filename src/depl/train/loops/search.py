"""`depl plan --certify`'s training: candidate plans, fixed in advance, run on the same fresh seeds until the
certified search (`depl.certificate.search`) returns the cheapest one the runs certify.

One run of a schedule yields every prefix: candidates whose jobs train the same thing — the same data, model
versions, nodes per cluster and training options, and the same (epoch, model version, cluster) for every epoch of
the shorter — form a group (`covers`; a learning rate scheduled over the whole run, `schedule = "cosine"`, makes
a shorter job's epochs differ from a longer one's, so such jobs nest only with themselves).  Each batch, a group
trains only its longest candidate still in the race — the group's longest job while that one is, a shorter one
once it was dropped, certified, refuted or stopped — under the run id `search-…` of that job; each candidate reads
ℓ(K_i) at its own length from the run of its group that holds the seed (`source`: the longest first).  A seed
that diverged at epoch d is a miss for every candidate of K ≥ d and counts as the finite run it was for the
shorter ones.

Seeds F, F+1, … train in batches, every group with a candidate still in the race on the same seed numbers
(`depl.train.backends.executors.run_all`); a seed a run of the group already holds far enough is read, not trained, so a
rerun with the same arguments replays the store to the same decisions (so does a store whose groups trained their
longest job on every seed, further than the search needs).

A store holds one search, bound by its **manifest** (`manifest`, the run row `search-manifest`, written before the
first run is trained): the candidates (their runs, epochs, costs, schedules and shares of α), ω, ℓmax, α, the
e-process, the allocation, the drop rule, the batch and the first seed — everything a decision depends on.  A rerun
that differs in any of them is refused (`bind`): the same seeds are analysed once.  Numbers the search computed are
compared to `depl.jsonout.RTOL` (another machine's last digits are the same search) and the rerun takes the store's
(`depl.certificate.search.Search.take`, a proposal's recorded cost and guess), so it decides as the store did.  Only `--max-runs` may grow: each
value is recorded with the seeds drawn when it took effect (`search-max-runs-K` rows), a rerun replays the store
under the values recorded, batch by batch, to where the runs stop (the search finished or paused at its cap, or a
batch needs training) and only there takes the new value: every past decision and counted seed stays as it was.
The cap only pauses the search (`depl.certificate.search.Search.paused`; its decisions reckon with the manifest's
horizon), so the rerun decides as one uninterrupted search with the larger cap would have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...certificate import Certificate, Outcome
from ...certificate.search import Search
from ...jsonout import alike
from ...loss.base import segments
from ...plan import Plan
from ...store import Store, StoreError
from ..engine import execute
from ..engine.federation import Job, job_from_plan
from ..task.models import ModelKeeper
from ..backends.executors import run_all

MANIFEST = "search-manifest"            # the run row binding a store to its search (kind and id)
MAX_RUNS = "search-max-runs"            # the rows recording each --max-runs and the seeds drawn when it took effect


@dataclass
class Candidate:
    """A candidate plan (with the search's own target), what it was planned at, and its training job."""

    plan: Plan
    proposed: dict                     # the level, target and law it was planned at
    job: Job
    group: int = -1                    # the candidate whose job its seeds train (itself or a longer one)

    @property
    def epochs(self) -> int:
        return len(self.plan.epochs)

    def words(self) -> str:
        """The schedule as a person reads it: version ×epochs on cluster, in order."""
        segs = segments([(e.model, e.cluster) for e in self.plan.epochs])
        return ", ".join(f"{m} ×{n} on {c}" for (m, c), n in segs) + f" (data: {', '.join(self.plan.datasets)})"


def _rest(job: Job) -> str:
    """What a job trains besides its epochs (its data, versions' specs, nodes and options), as one key."""
    d = job.to_json()
    d.pop("epochs")
    d["init_version"] = job.init_version or job.epochs[0][1]
    d.pop("nodes")
    d.pop("versions")
    return json.dumps(d, sort_keys=True)


def covers(longer: Job, shorter: Job) -> bool:
    """Whether a run of `longer` trains `shorter` as its first epochs: the same data, options and first version;
    the same version on the same cluster, with the same specs and node counts, and the same learning rate at
    every epoch of `shorter` (a rate scheduled over the job's length, cosine, differs between two lengths)."""
    n = len(shorter.epochs)
    if len(longer.epochs) < n or _rest(longer) != _rest(shorter) or list(longer.epochs[:n]) != list(shorter.epochs):
        return False
    o, m = longer.options, len(longer.epochs)
    if any(o.lr_at(k, n) != o.lr_at(k, m) for k in range(1, n + 1)):
        return False
    return all(longer.versions[v].to_json() == shorter.versions[v].to_json() and longer.nodes[c] == shorter.nodes[c]
               for _, v, c in shorter.epochs)


def group(cands: list[Candidate]) -> None:
    """Give every candidate the longest candidate whose runs train it (itself where none is longer)."""
    for c in cands:
        covering = [i for i, d in enumerate(cands) if covers(d.job, c.job)]
        c.group = max(covering, key=lambda i: (cands[i].epochs, -i))


def recorded_candidates(st: Store, certificate: "Certificate") -> list[Candidate]:
    """The candidates of a search as its certificate (kind search) records them: each the first K epochs of
    the plan and job of its group's run in `st` (`trains_with`), at its recorded cost.  StoreError where the
    store has no such run."""
    specs = {r["run_id"]: r["spec"] for r in st.runs("search")}
    out = []
    for row in certificate.candidates:
        if row["trains_with"] not in specs:
            raise StoreError(f"{st.path}: no search run {row['trains_with']} (candidate [{row['index']}]): not the "
                             "store of this search")
        spec, k = specs[row["trains_with"]], int(row["epochs"])
        job, plan = Job.from_json(spec["job"]), Plan.from_json(spec["plan"])
        out.append(Candidate(dataclasses.replace(plan, epochs=plan.epochs[:k], cost=float(row["cost"])),
                             row.get("proposed_at") or {}, dataclasses.replace(job, epochs=job.epochs[:k])))
    return out


def run_ids(cands: list[Candidate]) -> dict[int, str]:
    """Each candidate's own run id in a search's store (`search-…` of its job)."""
    return {i: execute.run_id_for(c.job, "local", prefix="search") for i, c in enumerate(cands)}


def make_candidate(plan: Plan, proposed: dict, device: str = "cpu") -> Candidate:
    return Candidate(plan, proposed, job_from_plan(plan, device))


@dataclass
class Searched:
    """What the search decided, on which seeds, and what it cost."""

    search: Search
    candidates: list[Candidate]
    first_seed: int
    seeds: int                            # seeds F .. F + seeds − 1 drawn
    trained: dict[str, int]               # run id → seeds of the search it holds (trained for it, or before)
    run_ids: dict[int, str]               # group → the run id of its longest job
    store: str
    seconds: float
    outcomes: dict[int, list[float]] = field(default_factory=dict)  # candidate → ℓ(K_i) of each counted seed
    epochs: dict[str, int] = field(default_factory=dict)            # run id → its job's epochs
    read_from: dict[int, list[str]] = field(default_factory=dict)   # candidate → the runs its seeds were read from
    first_counted: dict[int, int] = field(default_factory=dict)     # candidate → the first seed it counted

    @property
    def runs_trained(self) -> int:
        return sum(self.trained.values())

    @property
    def seed_epochs(self) -> int:
        return sum(n * self.epochs[rid] for rid, n in self.trained.items())


def _identity(alpha: float, first_seed: int, prior: str, allocation: str) -> dict:
    """What a search's runs are counted by: its α, first seed, e-process and allocation."""
    return {"alpha": alpha, "first_seed": first_seed, "prior": prior, "allocation": allocation}


def check_store(st: Store, run_ids: dict[int, str], alpha: float, first_seed: int, prior: str,
                allocation: str) -> None:
    """Refuse a store whose runs of these jobs were counted by a search at another α, from another first seed, by
    another e-process or allocation."""
    mine = _identity(alpha, first_seed, prior, allocation)
    for r in st.runs("search"):
        if r["run_id"] in run_ids.values():
            theirs = ((r["spec"].get("plan") or {}).get("info") or {}).get("search")
            if theirs is not None and theirs != mine:
                raise StoreError(f"{st.path}: run {r['run_id']} was counted by a search at α {theirs['alpha']:g} "
                                 f"from seed {theirs['first_seed']} with the {theirs['prior']} e-process, allocation "
                                 f"{theirs['allocation']} (this one: α {alpha:g} from seed {first_seed}, {prior}, "
                                 f"{allocation}); a search spends its α once, on its own seeds: use that --alpha, "
                                 "--first-seed, --prior and --allocation to resume it, or another --store")


def manifest(cands: list[Candidate], search: Search, ids: dict[int, str], first_seed: int, batch: int) -> dict:
    """Everything the search's decisions depend on, but --max-runs (module docstring)."""
    return {"format": "depl.search-manifest/1",
            "candidates": [{"index": i, "run": ids[i], "epochs": c.epochs, "cost": float(c.plan.cost),
                            "schedule": c.words(), "share": a.weight, "guess": a.guess}
                           for i, (c, a) in enumerate(zip(cands, search.arms))],
            "omega": float(search.omega), "loss_target": float(cands[0].plan.loss_target), "alpha": search.alpha,
            "prior": search.prior, "allocation": search.allocation, "drop_below": search.drop_below,
            "uses": search.uses, "spending": search.spending.to_json(), "horizon": search.horizon,
            "batch": int(batch), "first_seed": int(first_seed)}


WORDS = {"candidates": "list of candidates (runs, epochs, costs, shares of α or guesses)", "omega": "ω (--quantile)",
         "loss_target": "ℓmax (--loss)", "alpha": "--alpha", "prior": "--prior", "allocation": "--allocation",
         "drop_below": "drop rule", "batch": "--batch", "first_seed": "--first-seed", "format": "format",
         "uses": "--uses", "spending": "spending rule", "horizon": "--horizon"}


def bound(st: Store) -> tuple[dict | None, list[tuple[int, int]]]:
    """The store's manifest (None: no search bound it yet) and its --max-runs record [(seeds drawn, max_runs)]."""
    rows = st.runs(MANIFEST)
    m = rows[0]["spec"] if rows else None
    seg = sorted((int(r["spec"]["from_seeds"]), int(r["spec"]["max_runs"])) for r in st.runs(MAX_RUNS))
    return m, seg


def bind(st: Store, mine: dict, max_runs: int) -> list[tuple[int, int]]:
    """Bind `st` to this search (a new store), or check that it is bound to it: StoreError naming what differs.
    Returns the --max-runs record; a smaller --max-runs than the last recorded is refused, a larger one is taken
    where the runs stop (`run_search`)."""
    theirs, seg = bound(st)
    if theirs is None:
        if st.runs("search"):
            raise StoreError(f"{st.path}: holds search runs with no record of the search that counted them; a "
                             "search's runs are analysed once: start a new search in a new --store")
        st.start_run(MANIFEST, MANIFEST, mine)
        st.start_run(f"{MAX_RUNS}-0", MAX_RUNS, {"from_seeds": 0, "max_runs": int(max_runs)})
        return [(0, int(max_runs))]
    return check_bound(st.path, theirs, seg, mine, max_runs)


def check_bound(path, theirs: dict, seg: list[tuple[int, int]], mine: dict,
                max_runs: int | None) -> list[tuple[int, int]]:
    """StoreError naming what differs between the store's manifest `theirs` and `mine` (a key `mine` lacks: not
    known yet, not compared), or a `max_runs` smaller than the last recorded (None: not compared); else the
    --max-runs record `seg`."""
    differ = [k for k in WORDS if k in mine and not alike(theirs.get(k), mine.get(k))]
    if differ:
        was = {k: theirs.get(k) for k in differ if k != "candidates"}
        said = ", ".join(WORDS[k] + (f" (was {was[k]})" if k in was else "") for k in differ)
        raise StoreError(f"{path}: holds a search with another {said}; a search's seeds are analysed once, "
                         "by the options they began with: rerun it with those, or start a new search in a new "
                         "--store (its seeds are then new ones)")
    if max_runs is not None and max_runs < seg[-1][1]:
        raise StoreError(f"{path}: --max-runs {max_runs}: this search went on to --max-runs {seg[-1][1]}; "
                         f"--max-runs only grows (rerun with --max-runs {seg[-1][1]} or more)")
    return seg


def extend(st: Store, seg: list[tuple[int, int]], drawn: int, max_runs: int) -> list[tuple[int, int]]:
    """Record that --max-runs `max_runs` takes effect after `drawn` seeds."""
    st.start_run(f"{MAX_RUNS}-{len(seg)}", MAX_RUNS, {"from_seeds": int(drawn), "max_runs": int(max_runs)})
    return [*seg, (int(drawn), int(max_runs))]


def _register(st: Store, cand: Candidate, run_id: str, search: Search, first_seed: int) -> None:
    p = dataclasses.replace(cand.plan, solve_seconds=0.0).to_json()  # its identity: nothing timed
    p["info"] = {"search": _identity(search.alpha, first_seed, search.prior, search.allocation)}
    execute.register(st, run_id, "search", cand.job, {"backend": "local", "plan": p})


def source(read: dict[str, tuple[dict, dict]], runs: list[str], seed: int, k: int) -> str | None:
    """The first of `runs` (a group's runs that cover a job of k epochs, the longest first) that holds `seed` to
    epoch k or saw it diverge (`read`: run id → (its per-epoch losses, its diverged seeds)); None: none does."""
    for rid in runs:
        losses, gone = read.get(rid, ({}, {}))
        if seed in gone or len(losses.get(seed, ())) >= k:
            return rid
    return None


def final_loss(losses: dict[int, list[float]], gone: dict[int, int], seed: int, k: int) -> float:
    """ℓ(K = k) of a seed from its run's per-epoch losses (+inf if it diverged at or before epoch k)."""
    if seed in gone and gone[seed] <= k:
        return math.inf
    row = losses.get(seed, [])
    return float(row[k - 1]) if len(row) >= k else math.inf


def _layout(cands: list[Candidate]):
    """The candidates' run ids, each group's run, each run's epochs, and the runs of each candidate's group that
    cover it, the longest first (after `group`)."""
    group(cands)
    ids = run_ids(cands)
    group_runs = {g: ids[g] for g in sorted({c.group for c in cands})}
    epochs = {ids[i]: c.epochs for i, c in enumerate(cands)}
    order = sorted(range(len(cands)), key=lambda j: (-cands[j].epochs, j))
    covering = {i: list(dict.fromkeys(ids[j] for j in order if cands[j].group == c.group and cands[j].epochs >= c.epochs))
                for i, c in enumerate(cands)}
    return ids, group_runs, epochs, covering


class SearchKeeper:
    """Keeps the models of the search's runs as `depl run` does (depl.train.task.models.ModelKeeper, `keep`: best or
    all): candidate i's model of each seed trained for it — at epoch K_i of its group's run, its own run or a
    longer one's prefix — in RUN_FOLDER/models/<its run id>, so that the runs that certify the plan returned are
    also its trained models (`depl runs models`, `depl.load_model`).  Called with every batch-epoch
    (`depl.train.engine.seeds.Item`) before the store commits it."""

    def __init__(self, run_folder: Path, keep: str) -> None:
        self.run_folder, self.keep = Path(run_folder), keep
        self.keepers: dict[int, ModelKeeper] = {}
        self.wanted: dict[str, list[tuple[int, int]]] = {}   # run id → [(candidate, its epochs K)]

    def layout(self, cands: list[Candidate], ids: dict[int, str], covering: dict[int, list[str]]) -> None:
        """The candidates and the runs that train each (after `_layout`; again after a proposal)."""
        for i, c in enumerate(cands):
            if i not in self.keepers:
                p = dataclasses.replace(c.plan, solve_seconds=0.0)
                summary = {"file": None, "sha256": hashlib.sha256(json.dumps(p.to_json(), sort_keys=True,
                                                                             default=str).encode()).hexdigest(),
                           "method": p.method, "scenario": p.scenario, "epochs": c.epochs}
                self.keepers[i] = ModelKeeper(self.run_folder, ids[i], c.job, summary, self.keep)
        self.wanted = {}
        for i, runs in covering.items():
            for rid in runs:
                self.wanted.setdefault(rid, []).append((i, cands[i].epochs))

    def keep_at(self) -> dict[str, tuple[int, ...]]:
        """Each run's epochs whose models the candidates it trains want (`depl.train.backends.executors.run_all`)."""
        return {rid: tuple(sorted({k for _, k in want})) for rid, want in self.wanted.items()}

    def __call__(self, item) -> None:
        rows = {seed: row for seed, row, _, _ in item.entries}
        for seed, payload in item.models:
            row = rows.get(seed)
            for i, k in self.wanted.get(item.run_id, ()):
                if row is not None and row.epoch == k:
                    self.keepers[i].final(seed, row, payload)

    def folder(self, i: int) -> Path:
        return self.keepers[i].folder

    def keep_only(self, returned: int | None) -> None:
        """A search decided: the models of every candidate but the one returned (none: refuted) removed."""
        for i, k in self.keepers.items():
            if i != returned and k.folder.is_dir():
                shutil.rmtree(k.folder)


PROPOSAL = "search-proposal"


def _proposed(st: Store, c: Candidate, search: Search, index: int, drawn: int) -> dict:
    """Record a proposed candidate (or check the one recorded at its slot: a rerun proposes the same at the same
    seed, or the store's runs were analysed otherwise); the record, whose cost and guess the search takes."""
    k = search.proposed + 1
    row = json.loads(json.dumps({
        "index": index, "proposal": k, "from_seeds": int(drawn), "epochs": c.epochs, "cost": float(c.plan.cost),
        "schedule": c.words(), "share": search.spending.later(k), "guess": c.proposed.get("guess"),
        "run": run_ids([c])[0], "plan": dataclasses.replace(c.plan, solve_seconds=0.0).to_json(),
        "job": c.job.to_json(), "proposed_at": c.proposed}, default=str))   # as the store keeps it
    have = [r["spec"] for r in st.runs(PROPOSAL) if r["run_id"] == f"{PROPOSAL}-{k}"]
    if have and not alike({**have[0], "plan": None}, {**row, "plan": None}):
        raise StoreError(f"{st.path}: the search proposed candidate {have[0]['schedule']} (cost {have[0]['cost']:.6g}) "
                         f"after {have[0]['from_seeds']} seeds; this one proposes {row['schedule']} after {drawn}: "
                         "the store's runs were analysed by another depl or scenario; rerun it with those, or start a "
                         "new search in a new --store")
    if have:
        return have[0]
    st.start_run(f"{PROPOSAL}-{k}", PROPOSAL, row)
    return row


def _take(search: Search, max_runs: int) -> None:
    """Put `max_runs` in force (a recorded or a larger --max-runs): candidates stopped by the smaller one go on."""
    if search.max_runs != max_runs:
        search.extend(max_runs)


def _batch(cands: list[Candidate], search: Search, st: Store, ids: dict[int, str], covering: dict[int, list[str]],
           start: int, batch: int):
    """The next batch: the candidates counting it, its seeds, each group's longest candidate in the race, the runs
    read, and what to train — (run id, candidate, seeds) for each group, the seeds no run of the group holds far
    enough."""
    alive = search.counting()  # the allocation: the candidates in the race that count this batch
    seeds = list(range(start, start + batch))
    longest: dict[int, int] = {}
    for i in alive:
        g = cands[i].group
        if g not in longest or (cands[i].epochs, -i) > (cands[longest[g]].epochs, -longest[g]):
            longest[g] = i
    runs = sorted({rid for i in alive for rid in covering[i]})
    read = {rid: (st.losses(rid), st.diverged(rid)) for rid in runs}
    todo = []
    for g, j in sorted(longest.items()):
        need = [s for s in seeds if source(read, covering[j], s, cands[j].epochs) is None]
        if need:
            todo.append((ids[j], j, need))
    return alive, seeds, longest, read, todo


def run_search(cands: list[Candidate], search: Search, *, store: str | Store, first_seed: int, batch: int = 32,
               options: dict | None = None, progress: Callable | None = None,
               on_batch: Callable | None = None, max_runs: list[tuple[int, int]] | None = None,
               grow_to: int | None = None, propose: Callable | None = None, proposals: int = 0,
               keep: SearchKeeper | None = None) -> Searched:
    """Train seeds F, F+1, … `batch` at a time for every group with a candidate in the race, each group its longest
    such candidate's job, feed each candidate's outcomes to `search` in seed order, until it is finished.
    `progress(run_id, seed, epoch, result)` after every epoch; `on_batch(search, seeds drawn, seconds)` after every
    batch.  `max_runs`: the store's --max-runs record [(seeds drawn, max_runs)] (`bind`), replayed batch by batch;
    `grow_to`: a larger --max-runs, taken (and recorded) where the recorded runs stop — the search finished under
    the record, or a batch needs training.  `propose(search, outcomes, candidates, seeds drawn)`: new candidates
    from the runs so far, asked for when the search is stalled (`Search.stalled`), at most `proposals` in all; each
    takes the next slot of the search's spending rule, counts the seeds drawn from then on, and is recorded in the
    store (`search-proposal-K`): a rerun must propose the same at the same seed.  `keep`: keeps the models of the
    runs trained (`SearchKeeper`; once decided, only the returned candidate's).  Raises ValueError (StoreError …)."""
    cands = list(cands)
    st = store if isinstance(store, Store) else Store(store)
    ids, group_runs, epochs, covering = _layout(cands)
    if keep is not None:
        keep.layout(cands, ids, covering)
    check_store(st, ids, search.alpha, first_seed, search.prior, search.allocation)
    registered: set[str] = set()
    target = cands[0].plan.loss_target
    trained: dict[str, int] = {}
    read_from: dict[int, list[str]] = {i: [] for i in range(len(cands))}
    outcomes: dict[int, list[float]] = {i: [] for i in range(len(cands))}
    t0, start = time.perf_counter(), first_seed
    first_counted: dict[int, int] = {}
    seg = list(max_runs or [(0, search.max_runs)])
    asked_at = -1           # the fallen candidates when a proposal was last asked for (none found: not asked again)
    while True:
        drawn = start - first_seed
        _take(search, max(m for f, m in seg if f <= drawn))   # the --max-runs in force at this batch, as recorded
        if propose is not None and search.stalled and search.proposed < proposals and \
                len(search.fallen()) != asked_at:
            asked_at = len(search.fallen())
            new = propose(search, outcomes, cands, drawn)
            for c in new:
                rec = _proposed(st, c, search, len(cands), drawn)
                cands.append(c)
                search.add(rec["cost"], rec["guess"])
                read_from[len(cands) - 1], outcomes[len(cands) - 1] = [], []
            if new:
                ids, group_runs, epochs, covering = _layout(cands)
                if keep is not None:
                    keep.layout(cands, ids, covering)
        at_end = drawn >= seg[-1][0]
        if search.finished:
            if grow_to is not None and at_end and grow_to > search.max_runs:
                seg = extend(st, seg, drawn, grow_to)
                continue
            break
        alive, seeds, longest, read, todo = _batch(cands, search, st, ids, covering, start, batch)
        if todo and at_end and grow_to is not None and grow_to > search.max_runs:
            seg = extend(st, seg, drawn, grow_to)   # where the recorded runs stop: the larger --max-runs from here
            continue
        for rid, j in ((rid, j) for rid, j, _ in todo if rid not in registered):
            _register(st, cands[j], rid, search, first_seed)
            registered.add(rid)
        todo = [(rid, cands[j].job, need) for rid, j, need in todo]
        if todo:
            kept = {} if keep is None else {"keep": keep, "keep_at": keep.keep_at()}
            run_all(st, todo, progress=progress, **kept, **{**(options or {}), "seed_batch": batch})
            read.update({rid: (st.losses(rid), st.diverged(rid)) for rid, _, _ in todo})
        for j in longest.values():
            for s in seeds:
                rid = source(read, covering[j], s, cands[j].epochs)
                if rid is None:
                    raise StoreError(f"{st.path}: run {ids[j]} has no epoch {cands[j].epochs} of seed {s} after "
                                     "training it")
                trained[rid] = trained.get(rid, 0) + 1
        for s in seeds:
            for i in alive:   # a candidate counting the batch counts it whole (the cap is judged between batches)
                if search.arms[i].test.decided:
                    continue
                rid = source(read, covering[i], s, cands[i].epochs)
                first_counted.setdefault(i, s)
                if rid not in read_from[i]:
                    read_from[i].append(rid)
                loss = final_loss(*read[rid], s, cands[i].epochs)
                outcomes[i].append(loss)
                search.record(i, loss <= target)
        start += len(seeds)
        search.after_batch()
        if on_batch is not None:
            on_batch(search, start - first_seed, time.perf_counter() - t0)
    if keep is not None and search.outcome is not Outcome.UNDECIDED and not search.paused:
        keep.keep_only(search.best())
    return Searched(search, cands, first_seed, start - first_seed, trained, group_runs, str(st.path),
                    time.perf_counter() - t0, outcomes, epochs,
                    {i: sorted(r, key=covering[i].index) for i, r in read_from.items()}, first_counted)
