"""`depl plan --certify`'s training: candidate plans, fixed in advance, run on the same fresh seeds until the
certified search (`depl.certificate.search`) returns the cheapest one the runs certify.

One run of a schedule yields every prefix: candidates whose jobs train the same thing — the same data, model
versions, nodes per cluster and training options, and the same (epoch, model version, cluster) for every epoch of
the shorter — form a group, and each seed trains only the group's longest job; each candidate reads ℓ(K_i) at its
own length K_i from the stored per-epoch test losses (the compute per node changes the cost and the time, never
the losses: it is not part of a job).  A seed that diverged at epoch d is a miss for every candidate of K ≥ d and
counts as the finite run it was for the shorter ones.

Seeds F, F+1, … train in batches, every group with a candidate still in the race on the same seed numbers
(`depl.train.executors.run_all`), into the store under run ids `search-…` of the group's job; a rerun with the
same arguments replays the store to the same decisions, and a store whose runs were counted at another α or from
another first seed is refused (each search spends its α once, on its own seeds).
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
    """Whether a run of `longer` trains `shorter` as its first epochs (the same data, options, first version, and
    the same version on the same cluster, with the same specs and node counts, at every epoch of `shorter`)."""
    n = len(shorter.epochs)
    if len(longer.epochs) < n or _rest(longer) != _rest(shorter) or list(longer.epochs[:n]) != list(shorter.epochs):
        return False
    return all(longer.versions[v].to_json() == shorter.versions[v].to_json() and longer.nodes[c] == shorter.nodes[c]
               for _, v, c in shorter.epochs)


def group(cands: list[Candidate]) -> None:
    """Give every candidate the longest candidate whose runs train it (itself where none is longer)."""
    for c in cands:
        covering = [i for i, d in enumerate(cands) if covers(d.job, c.job)]
        c.group = max(covering, key=lambda i: (cands[i].epochs, -i))


def make_candidate(plan: Plan, proposed: dict, device: str = "cpu") -> Candidate:
    return Candidate(plan, proposed, job_from_plan(plan, device))


@dataclass
class Searched:
    """What the search decided, on which seeds, and what it cost."""

    search: Search
    candidates: list[Candidate]
    first_seed: int
    seeds: int                            # seeds F .. F + seeds − 1 drawn
    trained: dict[int, int]               # group → seeds trained for it
    run_ids: dict[int, str]               # group → its run id in the store
    store: str
    seconds: float
    outcomes: dict[int, list[float]] = field(default_factory=dict)  # candidate → ℓ(K_i) of each counted seed

    @property
    def runs_trained(self) -> int:
        return sum(self.trained.values())

    @property
    def seed_epochs(self) -> int:
        return sum(n * self.candidates[g].epochs for g, n in self.trained.items())


def _identity(alpha: float, first_seed: int, prior: str) -> dict:
    """What a search's runs are counted by: its α, first seed and e-process (unnamed: the uniform mixture, the one
    a search recorded before the e-process was named, so that its store still replays)."""
    return {"alpha": alpha, "first_seed": first_seed, **({} if prior == "uniform" else {"prior": prior})}


def check_store(st: Store, run_ids: dict[int, str], alpha: float, first_seed: int, prior: str) -> None:
    """Refuse a store whose runs of these jobs were counted by a search at another α, from another first seed or by
    another e-process (a record without one was decided by the uniform mixture, as depl 0.1.0 decided)."""
    mine = {"prior": "uniform", **_identity(alpha, first_seed, prior)}
    for r in st.runs("search"):
        if r["run_id"] in run_ids.values():
            theirs = ((r["spec"].get("plan") or {}).get("info") or {}).get("search")
            if theirs is not None:
                theirs = {"prior": "uniform", **theirs}
            if theirs is not None and theirs != mine:
                raise StoreError(f"{st.path}: run {r['run_id']} was counted by a search at α {theirs['alpha']:g} "
                                 f"from seed {theirs['first_seed']} with the {theirs['prior']} e-process (this one: "
                                 f"α {alpha:g} from seed {first_seed}, {prior}); a search spends its α once, on its "
                                 "own seeds: use that --alpha, --first-seed and --prior to resume it, or another "
                                 "--store")


def _register(st: Store, cands: list[Candidate], alpha: float, first_seed: int, prior: str) -> dict[int, str]:
    run_ids = {g: execute.run_id_for(cands[g].job, "local", prefix="search") for g in sorted({c.group for c in cands})}
    check_store(st, run_ids, alpha, first_seed, prior)
    for g, rid in run_ids.items():
        p = dataclasses.replace(cands[g].plan, solve_seconds=0.0).to_json()  # its identity: nothing timed
        p["info"] = {"search": _identity(alpha, first_seed, prior)}
        execute.register(st, rid, "search", cands[g].job, {"backend": "local", "plan": p})
    return run_ids


def final_loss(losses: dict[int, list[float]], gone: dict[int, int], seed: int, k: int) -> float:
    """ℓ(K = k) of a seed from its run's per-epoch losses (+inf if it diverged at or before epoch k)."""
    if seed in gone and gone[seed] <= k:
        return math.inf
    row = losses.get(seed, [])
    return float(row[k - 1]) if len(row) >= k else math.inf


def run_search(cands: list[Candidate], search: Search, *, store: str | Store, first_seed: int, batch: int = 32,
               options: dict | None = None, progress: Callable | None = None,
               on_batch: Callable | None = None) -> Searched:
    """Train seeds F, F+1, … `batch` at a time for every group with a candidate in the race, feed each candidate's
    outcomes to `search` in seed order, until it is finished.  `progress(run_id, seed, epoch, result)` after every
    epoch; `on_batch(search, seeds drawn, seconds)` after every batch.  Raises ValueError (StoreError …)."""
    from .executors import run_all

    group(cands)
    st = store if isinstance(store, Store) else Store(store)
    run_ids = _register(st, cands, search.alpha, first_seed, search.prior)
    target = cands[0].plan.loss_target
    trained = {g: 0 for g in run_ids}
    outcomes: dict[int, list[float]] = {i: [] for i in range(len(cands))}
    t0, start = time.perf_counter(), first_seed
    while not search.finished:
        alive = search.alive()
        groups = sorted({cands[i].group for i in alive})
        seeds = list(range(start, start + batch))
        run_all(st, [(run_ids[g], cands[g].job, seeds) for g in groups], progress=progress,
                **{**(options or {}), "seed_batch": batch})
        read = {g: (st.losses(run_ids[g]), st.diverged(run_ids[g])) for g in groups}
        for s in seeds:
            for i in alive:
                if search.arms[i].test.decided or search.arms[i].test.runs >= search.max_runs:
                    continue
                loss = final_loss(*read[cands[i].group], s, cands[i].epochs)
                outcomes[i].append(loss)
                search.record(i, loss <= target)
        for g in groups:
            trained[g] += len(seeds)
        start += len(seeds)
        search.after_batch()
        if on_batch is not None:
            on_batch(search, start - first_seed, time.perf_counter() - t0)
    return Searched(search, cands, first_seed, start - first_seed, trained, run_ids, str(st.path),
                    time.perf_counter() - t0, outcomes)
