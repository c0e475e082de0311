"""Adaptive runs (`depl run --adaptive`, `depl validate --adaptive`): the closed loop of depl.adaptive, for real.

A seed trains the plan epoch by epoch: seeds not started yet together as one
vectorised stack while their rests agree (`run_batch`), a seed whose rest
changes on its own in the per-seed loop (`run_seed`, `walk_plan`); a resumed
run re-forms the stacks its seeds were in (bit for bit: `run_batch`).  After every epoch the model is scored on
the validation split (depl.train.task.data.validation: fresh samples where the
source can generate them — MNIST-1D —, else a share of the plan's training
samples held out; never trained on; the test set stays the guarantee's), the policy decides, and the epoch's row, its checkpoint and the
decision go to the store in one transaction.  The decision's rest is what the
walk trains next; an empty rest ends the seed (its last test loss is its
final loss, its cost what it spent).

Time: clusters are simulated in this process, so wall seconds say nothing of a
cluster's speed.  An epoch's time in the scenario's units is its planned T(k)
(eq. 1) times the cluster's slowdown — 1, or the factor injected by
`--slow CLUSTER:FACTOR` (rehearsing a slow node: the policy only learns it
from the epoch times it measures, as it would from a real cluster).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

from ...adaptive import RULES as RULES_BY_NAME
from ...adaptive import DEFAULT_RULE, Decision, Policy, Slack, rule_named
from ...gap import MeasuredGap
from ...plan import Epoch, Plan
from ...state import START, RunState
from ...store import EpochRow, Store, StoreError, diverges
from ..task import data as data_mod
from ..backends.executors import Options, get, run_tasks
from ..engine.federation import Job, LocalFederation, job_from_plan, on_device, state_bytes, test_data, version_specs, walk_plan
from ..task.losses import Loss
from ..task.models import final_payload
from ..engine.seeds import Item, Writer, warm_job
from ..engine.execute import run_id_for as execute_run_id
from ..engine.vectorised import walk_plan_stack

# the validation split's default size, a share of the selected samples: a carved split is paid for in training
# samples (0.1); a fresh one only in forward passes, and its noise is half of what the stops must allow for
# (the gap test − validation, docs/adaptive.md), so it is as large as the training data
VALIDATION_SHARE = {"carved": 0.1, "fresh": 1.0}
MIN_VALIDATION = 2  # a one-sample split has no spread: its gap sd would be 0, every stop below ℓmax "sure"


def adaptive_job(plan: Plan, device: str = "cpu", validation: float | None = None) -> Job:
    """The plan's job with a validation split held out (`validation`: its share of the selected samples, None:
    VALIDATION_SHARE of the source's kind of split), every version of the plan's network and every cluster
    set up (a re-plan may choose them)."""
    job = job_from_plan(plan, device)
    scenario = plan.scenario_object()
    split = data_mod.split_kind(job.data.source)
    data = replace(job.data, validation=VALIDATION_SHARE[split] if validation is None else validation, split=split)
    n_val = len(data_mod.validation(data)[1])  # a split that cannot be made is refused before any training
    if n_val < MIN_VALIDATION:
        raise data_mod.DataError(
            f"validation share {data.validation:g}: a split of {n_val} sample(s) of {len(data_mod.select(data)[1])} "
            f"selected; the stops need at least {MIN_VALIDATION} to estimate the validation–test gap (raise --validation)")
    first = job.versions[plan.epochs[0].model]
    trainable = [m.name for m in scenario.models if m.train is not None]
    versions = {n: v for n, v in version_specs(scenario, job.data.load(), trainable).items()
                if (v.net, v.width, v.net_args) == (first.net, first.width, first.net_args)}
    return replace(job, data=data, versions=versions, nodes={c.name: c.nodes for c in scenario.clusters})


def training_samples(job: Job) -> int:
    return int(len(data_mod.select(job.data)[1]))


def split_note(job: Job) -> str:
    """How the run's validation split was made, for the run's output: fresh samples, or carved out (less data)."""
    n_val, n_train = len(data_mod.validation(job.data)[1]), training_samples(job)
    if job.data.split == "fresh":
        return (f"validation split: {n_val} fresh {job.data.source} samples (the generator at another seed); "
                f"all {n_train} selected samples trained on")
    return (f"validation split: {n_val} samples carved out of the {n_val + n_train} selected ({job.data.source} "
            f"cannot generate more); trains on {n_train}, the policy plans at that φ")


def policy_for(plan: Plan, job: Job, **kw) -> Policy:
    """The policy of a run: the law of the plan's scenario, at the φ of the samples actually trained on."""
    return Policy(plan, samples=float(training_samples(job)), **kw)


@torch.no_grad()
def validation_loss(model, xy, n_test: int, criterion: Loss = Loss()) -> tuple[float, float]:
    """(mean validation loss — the run's loss, cross-entropy unless given —, sd of test − validation loss of this
    model: the two splits' sampling noise)."""
    model.eval()
    per = criterion.per_sample(model(xy[0]), xy[1]).double()
    n = per.numel()
    sd = float(per.std()) if n > 1 else math.inf   # one sample says nothing of the gap: no stop is sure
    return float(per.mean()), sd * math.sqrt(1.0 / n + 1.0 / max(n_test, 1))


def finished(store, run_id: str, seed: int) -> bool:
    """A seed is over when a decision after an epoch left no rest, or it diverged (`store`: a Store or a Ledger)."""
    if store.diverged_at(run_id, seed) is not None:
        return True
    ds = store.decisions(run_id, seed)
    return bool(ds) and ds[-1]["epoch"] > 0 and not ds[-1]["rest"]


def pending(store, run_id: str, seeds: list[int]) -> list[int]:
    return [s for s in seeds if not finished(store, run_id, s)]


def record(d: Decision, state: RunState, gap_sd: float = 0.0) -> dict:
    return {**d.to_json(), "time_spent": state.time_spent, "cost_spent": state.cost_spent, "gap_sd": gap_sd}


def first_record(d0: Decision, policy: Policy) -> dict:
    """A seed's epoch-0 decision, with what decides its stops (`Policy.rule_record`: δ and its source, the gap)."""
    return {**record(d0, START), **policy.rule_record()}


# --------------------------------------------------------------------------- #
# What a task knows of its seeds: the store's records, read when it is sent
# --------------------------------------------------------------------------- #

def _stored(x):
    """A number as the store reads it back: NaN and ±inf are NULL there (None)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _as_read(seed: int, d: dict) -> dict:
    """A decision's record as `Store.decisions` returns it once written (its detail through JSON)."""
    head = ("epoch", "observed", "p_plan", "p_new", "quantile", "action")
    detail = json.loads(json.dumps({k: v for k, v in d.items() if k not in head}, allow_nan=False, default=_stored))
    return {"seed": int(seed), "epoch": int(d["epoch"]), "observed": _stored(d["observed"]),
            "p_plan": _stored(d["p_plan"]), "p_new": _stored(d["p_new"]), "quantile": _stored(d["quantile"]),
            "action": str(d["action"]), **detail}


@dataclass(frozen=True)
class SeedRecord:
    """One seed of a run as the store has it: its decisions, its epochs, where it diverged, its checkpoint."""

    decisions: tuple[dict, ...] = ()
    trajectory: tuple[EpochRow, ...] = ()
    diverged_at: int | None = None
    checkpoint: tuple[int, bytes] | None = None

    @classmethod
    def read(cls, store: Store, run_id: str, seed: int) -> "SeedRecord":
        return cls(tuple(store.decisions(run_id, seed)), tuple(store.trajectory(run_id, seed)),
                   store.diverged_at(run_id, seed), store.checkpoint(run_id, seed))


class Ledger:
    """The store as an adaptive task sees it, in whichever process trains it: its seeds' records as read when the
    task was sent, and every batch-epoch it records since — kept here, and sent to the store's one writer
    (`emit`), which writes it in one transaction.  It answers the reads the closed loop makes (`finished`,
    `_standing`, resuming) as the store would after those writes."""

    def __init__(self, run_id: str, path: str, records: dict[int, SeedRecord], emit: Callable[[Item], None],
                 keep_models: bool = False):
        self.run_id, self.path, self.emit, self.keep_models = run_id, path, emit, keep_models
        self._seeds = {s: {"decisions": {d["epoch"]: d for d in r.decisions}, "trajectory": list(r.trajectory),
                           "diverged_at": r.diverged_at, "checkpoint": r.checkpoint} for s, r in records.items()}

    def decisions(self, run_id: str, seed: int) -> list[dict]:
        by_epoch = self._seeds[seed]["decisions"]
        return [by_epoch[k] for k in sorted(by_epoch)]

    def trajectory(self, run_id: str, seed: int) -> list[EpochRow]:
        return list(self._seeds[seed]["trajectory"])

    def diverged_at(self, run_id: str, seed: int) -> int | None:
        return self._seeds[seed]["diverged_at"]

    def resume_point(self, run_id: str, seed: int) -> tuple[int, bytes] | None:
        """`Store.resume_point`, with its checks: epochs 1..done without a gap, the checkpoint of epoch done."""
        rows = self._seeds[seed]["trajectory"]
        if not rows:
            return None
        n, lo, hi = len(rows), rows[0].epoch, rows[-1].epoch
        if lo != 1 or hi != n:
            raise StoreError(f"{self.path}: run {run_id!r} seed {seed} has {n} epochs recorded between {lo} and {hi}; "
                             "a gap means the store was altered, it cannot be resumed")
        ck = self._seeds[seed]["checkpoint"]
        if ck is None or ck[0] != hi:
            raise StoreError(f"{self.path}: run {run_id!r} seed {seed}: {hi} epochs recorded but the checkpoint is "
                             f"{'missing' if ck is None else 'of epoch ' + str(ck[0])}; it cannot be resumed")
        return ck

    def record_epoch(self, run_id: str, seed: int, row: EpochRow) -> None:
        self.record_epochs(run_id, [(seed, row, None, False)])

    def record_epochs(self, run_id: str, items: list, decisions: list = (), decided: list = (), models: list = ()) -> None:
        """`Store.record_epochs` (one transaction: sent to the writer); `decided`: (seed, row, Decision) to show;
        `models`: (seed, the model it stopped with) for the seeds this batch-epoch ends, sent back only where the
        run keeps its models (`keep_models`: depl.train.task.models.final_payload, written by the writer's keeper)."""
        for seed, d in decisions:
            self._seeds[seed]["decisions"][int(d["epoch"])] = _as_read(seed, d)
        for seed, row, checkpoint, final in items:
            rec = self._seeds[seed]
            if diverges(row):
                rec["diverged_at"] = row.epoch
            else:
                rec["trajectory"].append(row)
            if final or diverges(row):
                rec["checkpoint"] = None
            elif checkpoint is not None:
                rec["checkpoint"] = (row.epoch, checkpoint)
        kept = tuple((s, final_payload(m)) for s, m in models) if self.keep_models else ()
        self.emit(Item(run_id, tuple(items), tuple(decisions), tuple(decided), kept))


@dataclass(frozen=True)
class AdaptiveBatch:
    """An adaptive run's seeds of one batch (`run_batch`), as a task of depl.train.backends.executors: plain data."""

    run_id: str
    job: dict                                 # Job.to_json()
    plan: Plan
    seeds: tuple[int, ...]
    slow: dict[str, float]
    policy_options: dict                      # `policy_for`'s keywords (rule, slack, gap …)
    records: tuple[SeedRecord, ...] = ()      # the seeds' records, read when the task is sent
    path: str = ""                            # the store's, for messages
    keep_models: bool = False                 # send each seed's model back with the epoch it ends at (Item.models)

    def loaded(self, store: Store) -> "AdaptiveBatch":
        return replace(self, records=tuple(SeedRecord.read(store, self.run_id, s) for s in self.seeds),
                       path=str(store.path))

    def ledger(self, emit: Callable[[Item], None]) -> Ledger:
        return Ledger(self.run_id, self.path, dict(zip(self.seeds, self.records)), emit, self.keep_models)

    def run(self, emit: Callable[[Item], None]) -> None:
        _train_batch(self.ledger(emit), self.run_id, Job.from_json(self.job), self.plan, list(self.seeds), self.slow,
                     self.policy_options)

    def warm(self) -> None:
        warm_job(self.job, self.seeds[0])


def _shown(progress) -> Callable[[Item], None] | None:
    """progress(seed, epoch, row, decision) for every decision written."""
    if progress is None:
        return None

    def shown(item: Item) -> None:
        for seed, row, d in item.decided:
            progress(seed, row.epoch, row, d)

    return shown


# --------------------------------------------------------------------------- #
# Training
# --------------------------------------------------------------------------- #

def run_seed(store: Store, run_id: str, job: Job, plan: Plan, seed: int, slow: dict[str, float] | None = None,
             progress=None, keep: Callable[[Item], None] | None = None, **policy_options) -> list[Decision]:
    """Train one seed adaptively to its end in the per-seed loop, in this process, resuming from the store;
    returns the decisions taken here.  `keep(item)`: hears every batch-epoch before it is written, with the
    model of the epoch the seed ends at (depl.train.task.models.ModelKeeper)."""
    task = AdaptiveBatch(run_id, job.to_json(), plan, (seed,), dict(slow or {}), policy_options,
                         keep_models=keep is not None).loaded(store)
    return _seed_loop(task.ledger(Writer(store, _shown(progress), keep).write), run_id, job, plan, seed, task.slow,
                      policy_options)


def run_batch(store: Store, run_id: str, job: Job, plan: Plan, seeds: list[int], slow: dict[str, float] | None = None,
              progress=None, *, executor: str = "stack", keep: Callable[[Item], None] | None = None,
              **policy_options) -> None:
    """Train seeds adaptively to their end, resuming from the store: the seeds not started yet as one vectorised
    stack (`vectorised.walk_plan_stack`) while their rests agree, the others one by one (the per-seed loop) —
    one task of depl.train.backends.executors, run by `executor` (a registered name), written here.

    Every seed of the stack gets its own policy and decision after every epoch, recorded with the epoch's
    rows and checkpoints in one transaction per epoch; a seed whose decision changes its rest leaves the
    stack — a stopped or ended seed is over, a re-planned or cut one goes on from its checkpoint in the
    per-seed loop.  While the rests agree the seeds train what `run_seed` would train each of them; their
    trajectories equal the per-seed loop's up to float rounding (the batched kernels round otherwise, and
    differently for stacks of different sizes), and are deterministic for the same seeds in the same stack.

    Resuming is bit for bit: each decision of a seed that goes on in the stack records the stack it trains in
    next (`stack`: its seeds, in order), and a resumed run re-forms that stack from its seeds' checkpoints,
    policies and states (`_resumed_stacks`) — not the per-seed loop, whose kernels round otherwise —, then
    starts the fresh seeds' stack and the per-seed loop as an uninterrupted run does.  (Ask for the same
    seeds: a stack resumed with fewer of its seeds is a smaller stack.)

    `keep(item)` (depl.train.task.models.ModelKeeper): hears every batch-epoch before it is written; a seed's last
    one brings the model it stopped with (the version it trained last: pruned where it pruned).
    """
    run_batches(store, run_id, job, plan, [list(seeds)], slow, progress, executor=executor, keep=keep,
                **policy_options)


def run_batches(store: Store, run_id: str, job: Job, plan: Plan, batches: list[list[int]],
                slow: dict[str, float] | None = None, progress=None, *, executor: str = "stack",
                options: Options | None = None, keep: Callable[[Item], None] | None = None, **policy_options) -> None:
    """`run_batch` for every batch of seeds, each one task of `executor` (worker processes train several at once)."""
    tasks = [AdaptiveBatch(run_id, job.to_json(), plan, tuple(b), dict(slow or {}), policy_options,
                           keep_models=keep is not None) for b in batches if b]
    run_tasks(tasks, Writer(store, _shown(progress), keep), get(executor), options or Options())


def _train_batch(ledger: Ledger, run_id: str, job: Job, plan: Plan, seeds: list[int], slow: dict[str, float],
                 policy_options: dict) -> None:
    """The work of one `AdaptiveBatch`, in whichever process trains it."""
    for group in _resumed_stacks(ledger, run_id, seeds):
        _walk_stack(ledger, run_id, job, plan, group, slow, policy_options, resume=True)
    fresh = [s for s in seeds if not finished(ledger, run_id, s) and not ledger.decisions(run_id, s)]
    if len(fresh) > 1 and job.stackable:
        _walk_stack(ledger, run_id, job, plan, fresh, slow, policy_options)
    for s in seeds:  # the seeds that left the stack with a rest to train, and those started before
        _seed_loop(ledger, run_id, job, plan, s, slow, policy_options)


def _validation(job: Job):
    """(the validation split on the job's device, the size of the test set)."""
    val = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in data_mod.validation(job.data))
    return on_device(val, job.options.device), len(test_data(job.data)[1])


def _epoch_row(r) -> EpochRow:
    return EpochRow(r.epoch, r.model, r.cluster, r.test_loss, r.test_accuracy, r.train_loss, r.seconds)


def _seed_loop(ledger: Ledger, run_id: str, job: Job, plan: Plan, seed: int, slow: dict[str, float],
               policy_options: dict) -> list[Decision]:
    """One seed in the per-seed loop to its end, from where the ledger has it; the decisions taken here."""
    if finished(ledger, run_id, seed):
        return []
    policy = policy_for(plan, job, **policy_options)
    val, n_test = _validation(job.seeded(seed))  # a carved split comes out of this seed's own draw
    taken: list[Decision] = []
    if not ledger.decisions(run_id, seed):
        d0 = policy.initial()
        ledger.record_epochs(run_id, [], decisions=[(seed, first_record(d0, policy))])
        taken = [d0]
    state, rest, trained = _standing(ledger, run_id, seed, policy, slow)
    now = {"rest": rest, "state": state}

    def on_epoch(r, model) -> None:
        e, rest = now["rest"][0], now["rest"][1:]
        loss, gap = validation_loss(model, val, n_test, job.options.criterion)
        row = _epoch_row(r)
        ok = not diverges(row) and math.isfinite(loss)
        st, d = policy.step(now["state"], e, loss, policy.rehearsed_seconds(e, slow), rest, gap_sd=gap, decide=ok)
        if d is None:
            ledger.record_epoch(run_id, seed, row)
            now["rest"] = []
            return
        taken.append(d)
        end = not d.rest
        ledger.record_epochs(run_id, [(seed, row, None if end else state_bytes(model), end)],
                             decisions=[(seed, record(d, st, gap))], decided=[(seed, row, d)],
                             models=[(seed, model)] if end else [])
        now["rest"], now["state"] = list(d.rest), st

    def decide(_state, _results):
        return [(e.epoch, e.model, e.cluster) for e in now["rest"]]

    walk = [(row.epoch, row.model, row.cluster) for row in trained] + [(e.epoch, e.model, e.cluster) for e in now["rest"]]
    start = ledger.resume_point(run_id, seed) if trained else None
    walk_plan(replace(job, epochs=walk), seed, LocalFederation(), on_epoch, start, decide)
    return taken


def _standing(ledger: Ledger, run_id: str, seed: int, policy: Policy, slow: dict[str, float]):
    """Where a seed stands: (its state after its recorded epochs — their validation losses, times and costs,
    which `policy` has now observed —, the rest last decided, its recorded epochs)."""
    past = ledger.decisions(run_id, seed)
    trained = ledger.trajectory(run_id, seed)
    state, by_epoch = START, {d["epoch"]: d for d in past}
    for row in trained:
        e = Epoch(row.epoch, row.model, row.cluster, _compute(by_epoch, row.epoch))
        state, _ = policy.step(state, e, by_epoch[row.epoch]["observed"], policy.rehearsed_seconds(e, slow), (),
                               decide=False)
    last = by_epoch[max(k for k in by_epoch if k <= len(trained))]
    return state, [Epoch(int(a), str(m), str(c), float(x)) for a, m, c, x in last["rest"]], trained


def _resumed_stacks(ledger: Ledger, run_id: str, seeds: list[int]) -> list[list[int]]:
    """The stacks a resumed run re-forms: the unfinished seeds of `seeds` whose last decision names the stack they
    train in next (`stack`), grouped by it, in its order."""
    groups: dict[tuple[int, ...], set[int]] = {}
    for s in seeds:
        ds = ledger.decisions(run_id, s)
        if not ds or finished(ledger, run_id, s) or not ds[-1].get("stack") or not ds[-1]["rest"]:
            continue
        groups.setdefault(tuple(int(x) for x in ds[-1]["stack"]), set()).add(s)
    return [[s for s in stack if s in members] for stack, members in groups.items()]


def _walk_stack(ledger: Ledger, run_id: str, job: Job, plan: Plan, seeds: list[int], slow: dict[str, float],
                policy_options: dict, resume: bool = False) -> None:
    """Train `seeds` as one stack while their rests agree: fresh seeds from the epoch-0 decision, or (`resume`)
    seeds of one recorded stack from where the ledger has them — the same epochs trained and the same rest, each
    seed's policy and state rebuilt from its recorded epochs and decisions (`_standing`), the stack from their
    checkpoints."""
    val, n_test = _validation(job)
    # δ is the plan's, before any epoch (it reads no seed): computed once, shared by every seed's policy
    lead = policy_for(plan, job, **policy_options)
    policies = {s: lead.fresh() for s in seeds}
    start = None
    if resume:
        standing = {s: _standing(ledger, run_id, s, policies[s], slow) for s in seeds}
        state, rest, trained = standing[seeds[0]]
        done = [(r.epoch, r.model, r.cluster) for r in trained]
        if any(([(r.epoch, r.model, r.cluster) for r in t], list(r_)) != (done, list(rest))
               for _, r_, t in standing.values()):
            return  # not one stack after all (an altered store): the per-seed loop takes them
        walk = done + [(e.epoch, e.model, e.cluster) for e in rest]
        if done:
            start = (len(done), [ledger.resume_point(run_id, s)[1] for s in seeds])
        now = {"rest": list(rest), "state": {s: standing[s][0] for s in seeds}}
    else:
        d0 = lead.initial()  # the epoch-0 decision reads no seed: made once (a carved split's re-plan runs the planner)
        ledger.record_epochs(run_id, [], decisions=[(s, {**first_record(d0, lead), "stack": list(seeds)}) for s in seeds])
        walk = [(e.epoch, e.model, e.cluster) for e in d0.rest]
        now = {"rest": list(d0.rest), "state": {s: START for s in seeds}}

    def on_epochs(batch, results, models):
        e, rest = now["rest"][0], tuple(now["rest"][1:])
        items, decisions, decided, leave, ended = [], [], [], set(), []
        for seed, r, model in zip(batch, results, models()):
            policy = policies[seed]
            loss, gap = validation_loss(model, val, n_test, job.options.criterion)
            row = _epoch_row(r)
            ok = not diverges(row) and math.isfinite(loss)
            st, d = policy.step(now["state"][seed], e, loss, policy.rehearsed_seconds(e, slow), rest, gap_sd=gap,
                                decide=ok)
            if d is None:
                items.append((seed, row, None, False))  # as the per-seed loop: the seed is over (with the others' epoch)
                leave.add(seed)
                continue
            end = not d.rest
            items.append((seed, row, None if end else state_bytes(model), end))
            if end:
                ended.append((seed, model))
            decisions.append((seed, record(d, st, gap)))
            now["state"][seed] = st
            if tuple(d.rest) != rest:
                leave.add(seed)
            decided.append((seed, row, d))
        stack = [s for s in batch if s not in leave]  # the stack the staying seeds train in next
        for seed, d in decisions:
            if seed not in leave and d["rest"]:
                d["stack"] = stack
        if items:
            ledger.record_epochs(run_id, items, decisions=decisions, decided=decided, models=ended)
        now["rest"] = list(rest)
        return leave

    walk_plan_stack(replace(job, epochs=walk), list(seeds), on_epochs, start)


def _compute(by_epoch: dict, epoch: int) -> float:
    """The compute an epoch was planned with: from the rest of the decision before it."""
    for k in sorted((k for k in by_epoch if k < epoch), reverse=True):
        for a, _m, _c, x in by_epoch[k]["rest"]:
            if int(a) == epoch:
                return float(x)
    raise ValueError(f"epoch {epoch} is in no recorded decision's rest; the store was altered")


def outcome(store: Store, run_id: str, seeds: list[int]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(final test loss, cost spent) per seed (a diverged seed: +inf), and how often each action was taken."""
    finals, costs, actions = [], [], {}
    gone = store.diverged(run_id)
    for s in seeds:
        ds = store.decisions(run_id, s)
        for d in ds:
            actions[d["action"]] = actions.get(d["action"], 0) + 1
        traj = store.trajectory(run_id, s)
        finals.append(math.inf if s in gone or not traj else traj[-1].test_loss)
        costs.append(ds[-1].get("cost_spent", math.nan) if ds else math.nan)
    return np.array(finals), np.array(costs), actions


# the keywords of `policy_for` and `run_batch` for each rule a command names (`--rule`); the rules are depl.adaptive's
RULES = {name: {"rule": rule_named(name)} for name in RULES_BY_NAME}


def adaptive_run_id(job: Job, slow: dict[str, float], rule: str = DEFAULT_RULE, gap: MeasuredGap | None = None,
                    slack: Slack | None = None) -> str:
    """The adaptive run's identity: its job, its rule (v4: stops spend only slack certified for the plan — v3
    spent a lower bound read after the planner's choice, v2 the point estimate —; "-stop-only": the slack rule
    alone), the slack (its source and δ), the gap it stops by (measured: its digest), the injected slowdowns."""
    rule_named(rule)
    return execute_run_id(job, "local-adaptive-v4" + ("-stop-only" if rule == "slack" else "")
                + (f"-slack-{slack.source}{slack.delta:.12g}" if slack is not None and slack.delta > 0 else "")
                + (f"-gap{gap.digest}" if gap is not None else "")
                + "".join(f"-{c}x{f:g}" for c, f in sorted(slow.items())), prefix="adaptive")
