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
(`depl.train.executors.run_all`); a seed a run of the group already holds far enough is read, not trained, so a
rerun with the same arguments replays the store to the same decisions (and a store whose groups trained their
longest job on every seed, as depl did before groups stopped short, replays as it was).  A store whose runs were
counted at another α or from another first seed is refused (each search spends its α once, on its own seeds).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ..certificate.search import Search
from ..plan import Plan
from ..store import Store, StoreError
from . import execute
from .federation import Job, job_from_plan

FORMAT = "depl.search/1"


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
        segs: list[list] = []
        for e in self.plan.epochs:
            if segs and segs[-1][0] == e.model and segs[-1][1] == e.cluster:
                segs[-1][2] += 1
            else:
                segs.append([e.model, e.cluster, 1])
        return ", ".join(f"{m} ×{n} on {c}" for m, c, n in segs) + f" (data: {', '.join(self.plan.datasets)})"


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


def recorded_candidates(st: Store, certificate: dict) -> list[Candidate]:
    """The candidates of a search as its certificate (`depl.search/1`) records them: each the first K epochs of
    the plan and job of its group's run in `st` (`trains_with`), at its recorded cost.  StoreError where the
    store has no such run."""
    specs = {r["run_id"]: r["spec"] for r in st.runs("search")}
    out = []
    for row in certificate["candidates"]:
        if row["trains_with"] not in specs:
            raise StoreError(f"{st.path}: no search run {row['trains_with']} (candidate [{row['index']}]): not the "
                             "store of this search")
        spec, k = specs[row["trains_with"]], int(row["epochs"])
        job, plan = Job.from_json(spec["job"]), Plan.from_json(spec["plan"])
        out.append(Candidate(dataclasses.replace(plan, epochs=plan.epochs[:k], cost=float(row["cost"])),
                             row.get("proposed_at") or {}, dataclasses.replace(job, epochs=job.epochs[:k])))
    return out


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


def _identity(alpha: float, first_seed: int, prior: str, allocation: str = "all") -> dict:
    """What a search's runs are counted by: its α, first seed, e-process and allocation (unnamed: the uniform
    mixture and every candidate in the race counting every seed, what a search recorded before either was named,
    so that its store still replays)."""
    return {"alpha": alpha, "first_seed": first_seed, **({} if prior == "uniform" else {"prior": prior}),
            **({} if allocation == "all" else {"allocation": allocation})}


def _counted_by(spec: dict) -> dict | None:
    theirs = ((spec.get("plan") or {}).get("info") or {}).get("search")
    return None if theirs is None else {"prior": "uniform", "allocation": "all", **theirs}


def recorded_allocation(st: Store) -> str | None:
    """The allocation the search runs in `st` were counted by (None: the store has none)."""
    for r in st.runs("search"):
        theirs = _counted_by(r["spec"])
        if theirs is not None:
            return str(theirs["allocation"])
    return None


def check_store(st: Store, run_ids: dict[int, str], alpha: float, first_seed: int, prior: str,
                allocation: str = "all") -> None:
    """Refuse a store whose runs of these jobs were counted by a search at another α, from another first seed, by
    another e-process or allocation (a record without one was decided by the uniform mixture, every candidate in
    the race counting every seed, as depl 0.1.0 decided)."""
    mine = {"prior": "uniform", "allocation": "all", **_identity(alpha, first_seed, prior, allocation)}
    for r in st.runs("search"):
        if r["run_id"] in run_ids.values():
            theirs = _counted_by(r["spec"])
            if theirs is not None and theirs != mine:
                raise StoreError(f"{st.path}: run {r['run_id']} was counted by a search at α {theirs['alpha']:g} "
                                 f"from seed {theirs['first_seed']} with the {theirs['prior']} e-process, allocation "
                                 f"{theirs['allocation']} (this one: α {alpha:g} from seed {first_seed}, {prior}, "
                                 f"{allocation}); a search spends its α once, on its own seeds: use that --alpha, "
                                 "--first-seed, --prior and --allocation to resume it, or another --store")


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


def run_search(cands: list[Candidate], search: Search, *, store: str | Store, first_seed: int, batch: int = 32,
               options: dict | None = None, progress: Callable | None = None,
               on_batch: Callable | None = None) -> Searched:
    """Train seeds F, F+1, … `batch` at a time for every group with a candidate in the race, each group its longest
    such candidate's job, feed each candidate's outcomes to `search` in seed order, until it is finished.
    `progress(run_id, seed, epoch, result)` after every epoch; `on_batch(search, seeds drawn, seconds)` after every
    batch.  Raises ValueError (StoreError …)."""
    from .executors import run_all

    group(cands)
    st = store if isinstance(store, Store) else Store(store)
    ids = {i: execute.run_id_for(c.job, "local", prefix="search") for i, c in enumerate(cands)}
    check_store(st, ids, search.alpha, first_seed, search.prior, search.allocation)
    run_ids = {g: ids[g] for g in sorted({c.group for c in cands})}
    epochs = {ids[i]: c.epochs for i, c in enumerate(cands)}
    # the runs of each candidate's group that cover it, the longest first
    covering = {i: list(dict.fromkeys(ids[j] for j in sorted(range(len(cands)), key=lambda j: (-cands[j].epochs, j))
                                      if cands[j].group == c.group and cands[j].epochs >= c.epochs))
                for i, c in enumerate(cands)}
    registered: set[str] = set()
    target = cands[0].plan.loss_target
    trained: dict[str, int] = {}
    read_from: dict[int, list[str]] = {i: [] for i in range(len(cands))}
    outcomes: dict[int, list[float]] = {i: [] for i in range(len(cands))}
    t0, start = time.perf_counter(), first_seed
    first_counted: dict[int, int] = {}
    while not search.finished:
        alive = search.counting()  # the allocation: the candidates in the race that count this batch
        seeds = list(range(start, start + batch))
        # each group trains its longest candidate in the race, on the seeds no run of the group holds that far
        longest = {}
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
                if ids[j] not in registered:
                    _register(st, cands[j], ids[j], search, first_seed)
                    registered.add(ids[j])
                todo.append((ids[j], cands[j].job, need))
        if todo:
            run_all(st, todo, progress=progress, **{**(options or {}), "seed_batch": batch})
            read.update({rid: (st.losses(rid), st.diverged(rid)) for rid, _, _ in todo})
        for j in longest.values():
            for s in seeds:
                rid = source(read, covering[j], s, cands[j].epochs)
                if rid is None:
                    raise StoreError(f"{st.path}: run {ids[j]} has no epoch {cands[j].epochs} of seed {s} after "
                                     "training it")
                trained[rid] = trained.get(rid, 0) + 1
        for s in seeds:
            for i in alive:
                if search.arms[i].test.decided or search.arms[i].test.runs >= search.max_runs:
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
    return Searched(search, cands, first_seed, start - first_seed, trained, run_ids, str(st.path),
                    time.perf_counter() - t0, outcomes, epochs,
                    {i: sorted(r, key=covering[i].index) for i, r in read_from.items()}, first_counted)
