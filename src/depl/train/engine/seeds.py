"""The work of the local back end's executors (depl.train.backends.executors): tasks of seeds, the one writer, worker processes.

The seeds of a run are cut into batches once, from the whole seed list, and
the store records each seed's batch before it trains (so a resumed run
batches them as the first attempt did, whatever its options or the automatic
choice would cut now, and its trajectories are bit-for-bit those of an
uninterrupted run).  A batch of one seed is the
per-seed loop (`federation.walk_plan`); a larger batch is one stack of
`vectorised.walk_plan_stack`.  A task (`SeedBatch`) is one batch's pending
seeds that have the same number of epochs done, with their checkpoints; an
adaptive run's task is depl.train.loops.adaptive's `AdaptiveBatch`.  Both are `Task`s:
plain data that any process can train, sending `Item`s back.

Who writes the store: **only the parent process.**  Workers (processes on
this machine, or Ray tasks anywhere) receive a task as plain data — the job
as JSON, the seeds, their checkpoints — and send every batch-epoch's rows and
checkpoints back; the parent writes each batch-epoch in one transaction
(`Store.record_epochs`).  Why not let every worker write: SQLite takes one
writer at a time, so parallel writers only queue on its lock (busy
timeouts under load); a Ray worker on another machine cannot reach the file
at all; and with one writer the transaction boundaries are exactly the
batch-epochs, so a ``kill -9`` of the parent leaves every batch at a whole
epoch with its checkpoints, and the resume retrains only what was not yet
written.  Workers whose parent died stop at their next epoch.
"""

from __future__ import annotations

import math
import os
import queue as queue_mod
import traceback
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Protocol

from ...store import EpochRow, Store, diverges, drop_inherited_locks
from ..task.data import DrawError
from ..task.source import DataError, JobError

DEFAULT_SEED_BATCH = 32

Entry = tuple[int, EpochRow, "bytes | None", bool]   # (seed, its epoch's row, its checkpoint or None, final)
OnEpoch = Callable[[str, int, int, EpochRow], None]   # (run_id, seed, epoch, result)


@dataclass(frozen=True)
class Item:
    """One batch-epoch of a task, as a worker sends it to the one writer (one transaction of the store)."""

    run_id: str
    entries: tuple[Entry, ...]
    decisions: tuple[tuple[int, dict], ...] = ()  # adaptive runs: (seed, the decision's record after the epoch)
    decided: tuple[tuple[int, EpochRow, Any], ...] = ()  # adaptive runs: (seed, row, Decision), shown once written
    models: tuple[tuple[int, dict], ...] = ()  # (seed, models.final_payload of its model): a seed's last epoch, or
                                               # an epoch of SeedBatch.keep_at


class Task(Protocol):
    """What an executor runs: plain data (picklable, for worker processes and Ray tasks)."""

    run_id: str
    seeds: tuple[int, ...]

    def loaded(self, store: Store) -> "Task":
        """The task with what it needs from the store (checkpoints, …), read just before it is sent."""

    def run(self, emit: Callable[[Item], None]) -> None:
        """Train the task in this process; `emit` gets every batch-epoch."""

    def warm(self) -> None:
        """Load the task's data in this process, so that forked workers inherit it."""


@dataclass
class Writer:
    """The store's one writer: `keep(item)` first (a run's final models into its folder: depl.train.task.models),
    then every batch-epoch in one transaction, then `shown(item)` (progress)."""

    store: Store
    shown: Callable[[Item], None] | None = None
    keep: Callable[[Item], None] | None = None

    def load(self, task: Task) -> Task:
        return task.loaded(self.store)

    def write(self, item: Item) -> None:
        if self.keep is not None:   # before the epoch is committed: a kill in between retrains it, never loses it
            self.keep(item)
        self.store.record_epochs(item.run_id, list(item.entries), decisions=list(item.decisions))
        if self.shown is not None:
            self.shown(item)


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def batch_size(n_seeds: int, seed_batch: int, workers: int) -> int:
    """Seeds per batch: at most `seed_batch`, and small enough that every worker gets one."""
    return max(1, min(seed_batch, math.ceil(n_seeds / max(1, workers))))


def local_device(asked: str) -> str:
    """The torch device of `asked` (cpu, cuda or auto) in this process: resolved where the work runs."""
    import torch

    if asked == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if asked == "cuda" and not torch.cuda.is_available():
        raise JobError(f"device cuda: torch {torch.__version__} on this worker sees no CUDA device")
    return asked


def job_here(spec: dict, device: str | None):
    """The job of `spec` (Job.to_json()), on `device` as resolved in this process (None: the job's own)."""
    # depl.train.engine.federation imports torch
    from .federation import Job

    job = Job.from_json(spec)
    if device is None:
        return job
    return replace(job, options=job.options.model_copy(update={"device": local_device(device)}))


@dataclass(frozen=True)
class SeedBatch:
    """Seeds of one batch with the same epochs done: trained as one stack (one seed: the per-seed loop)."""

    run_id: str
    job: dict                        # Job.to_json()
    n_epochs: int
    seeds: tuple[int, ...]
    done: int                        # epochs every seed of the task has done
    checkpoints: tuple[bytes, ...] = ()
    device: str | None = None        # cpu, cuda or auto, resolved on the worker; None: the job's device
    keep_models: bool = False        # send each seed's final model back with its last epoch (Item.models)
    keep_at: tuple[int, ...] = ()    # with keep_models, the epochs before the last whose models go back too (a
                                     # search's shorter candidates end there: depl.train.loops.search.SearchKeeper)

    def loaded(self, store: Store) -> "SeedBatch":
        """The task with its seeds' checkpoints (read only now: a long run's checkpoints are not all held at once)."""
        if self.done == 0:
            return self
        blobs = []
        for s in self.seeds:
            ck = store.checkpoint(self.run_id, s)
            if ck is None or ck[0] != self.done:
                raise RuntimeError(f"run {self.run_id} seed {s}: {self.done} epochs recorded but no matching checkpoint")
            blobs.append(ck[1])
        return replace(self, checkpoints=tuple(blobs))

    def run(self, emit: Callable[[Item], None]) -> None:
        # depl.train.engine.federation and depl.train.task.models and depl.train.engine.vectorised import torch
        from .federation import LocalFederation, node_data, state_bytes, test_data, walk_plan
        from ..task.models import final_payload
        from .vectorised import walk_plan_stack

        job = job_here(self.job, self.device)
        n = self.n_epochs

        def rows(seeds, results, models):
            final = results[0].epoch == n
            send = self.keep_models and (final or results[0].epoch in self.keep_at)
            # a diverged seed's row goes to the store's `diverged` table, without a checkpoint
            blobs = [None] * len(results) if final else [None if diverges(r) else state_bytes(m)
                                                         for r, m in zip(results, models())]
            # a seed's last epoch (and each of keep_at) brings its trained model back (a stack's unstacked: one
            # module per seed)
            kept = tuple((s, final_payload(m)) for s, r, m in zip(seeds, results, models()) if not diverges(r)) \
                if send else ()
            emit(Item(self.run_id, tuple((s, as_row(r), b, final) for s, r, b in zip(seeds, results, blobs)),
                      models=kept))

        if len(self.seeds) == 1 or not job.stacks:  # the per-seed loop (each seed on its own draw of the data)
            for i, seed in enumerate(self.seeds):
                start = (self.done, self.checkpoints[i]) if self.done else None
                walk_plan(job, seed, LocalFederation(), lambda r, m, s=seed: rows((s,), [r], lambda: [m]), start)
                if not job.stackable:   # a seed's own data is no other seed's: not kept past it
                    node_data.cache_clear()
                    test_data.cache_clear()
        else:  # one stack: on the shared data, or on every seed's own draw stacked (vectorised.StackData)
            start = (self.done, list(self.checkpoints)) if self.done else None
            walk_plan_stack(job, list(self.seeds), rows, start)
            if not job.stackable:   # the seeds' own draws are no other seed's: not kept past them
                node_data.cache_clear()
                test_data.cache_clear()

    def warm(self) -> None:
        warm_job(self.job, self.seeds[0])


def warm_job(spec: dict, seed: int = 0) -> None:
    """Load a job's test and node data here (cached by depl.train.engine.federation); `seed`: one of the seeds to train."""
    # depl.train.engine.federation imports torch
    from .federation import Job, node_data, test_data

    job = Job.from_json(spec)
    if not job.stackable:  # every seed draws its own data: only what the draws share (a generator's pool) ahead
        try:
            job.seeded(seed).data.load()
        except DataError:  # that seed's own draw: told where the seed trains, after the seeds before it
            pass
        return
    test_data(job.data)
    for nodes in set(job.nodes.values()):
        for node in range(nodes):
            node_data(job.data, nodes, job.options.iid, node)


def make_tasks(store: Store, run_id: str, job, seeds: list[int], size: int,
               device: str | None = None) -> list[SeedBatch]:
    """The tasks left of a run, without checkpoints (`SeedBatch.loaded` adds them when the task is sent).

    A seed whose batch the store records (`Store.batches`) trains in that batch, whatever `size` is now: a
    resumed run stacks its seeds as the first attempt did.  The other seeds are cut into batches of `size` in
    the order of `seeds`, and those still to train are recorded before any of them trains."""
    n = len(job.epochs)
    spec = job.to_json()
    gone = store.diverged(run_id)
    done = {s: store.done_epochs(run_id, s) for s in seeds}
    recorded = store.batches(run_id)
    fresh = [s for s in seeds if s not in recorded]
    cut = {s: fresh[i - i % size] for i, s in enumerate(fresh)}
    store.record_batches(run_id, {s: b for s, b in cut.items() if done[s] < n and s not in gone})
    batches: dict[int, list[int]] = {}   # batch → its seeds in this call, in the order of `seeds`
    for s in seeds:
        batches.setdefault(recorded[s] if s in recorded else cut[s], []).append(s)
    out = []
    for members in batches.values():
        by_done: dict[int, list[int]] = {}
        for s in members:
            if done[s] < n and s not in gone:
                by_done.setdefault(done[s], []).append(s)
        out += [SeedBatch(run_id, spec, n, tuple(group), d, device=device) for d, group in sorted(by_done.items())]
    return out


def as_row(r) -> EpochRow:
    return EpochRow(*(getattr(r, f.name) for f in fields(EpochRow)))


def shown_rows(progress: OnEpoch) -> Callable[[Item], None]:
    """An open-loop run's progress, called with every row written."""

    def shown(item: Item) -> None:
        for seed, row, _, _ in item.entries:
            progress(item.run_id, seed, row.epoch, row)

    return shown


# --------------------------------------------------------------------------- #
# Worker processes on this machine
# --------------------------------------------------------------------------- #

def _worker(tasks, results, threads: int, parent: int) -> None:
    import torch

    drop_inherited_locks()  # the parent is the store's one writer; a kill -9 of it must free the store

    torch.set_num_threads(threads)

    def emit(item: Item) -> None:
        if os.getppid() != parent:  # the parent was killed: nobody would write this
            os._exit(1)
        results.put(("epoch", item))

    while (task := tasks.get()) is not None:
        try:
            task.run(emit)
        except DataError as e:  # data that cannot be used (a seed's own draw of yours): the message is the user's
            results.put(("refused", e if isinstance(e, DrawError) else DataError(str(e))))  # both pickle whole
            return
        except BaseException:
            results.put(("error", traceback.format_exc()))
            return
        results.put(("done", None))


def _start_method(parent_threads: int, cuda_started: bool = False) -> str:
    """fork when it is safe, else spawn.

    A forked worker starts at once with the parent's imported torch and its
    data (MNIST-1D is generated in memory; a spawned worker regenerates it,
    seconds each).  Forking is unsafe once torch has run a parallel region
    with several threads (the OpenMP pool does not survive a fork); with one
    thread it never starts one.  A process forked after its parent started
    CUDA cannot use CUDA at all ("Cannot re-initialize CUDA in forked
    subprocess", seen with `--device cuda --workers 16` on an H200).
    """
    import multiprocessing as mp

    safe = parent_threads == 1 and not cuda_started
    return "fork" if safe and "fork" in mp.get_all_start_methods() else "spawn"


def _warm(tasks: list[Task]) -> None:
    """Load every task's data here, so that forked workers inherit it."""
    import torch._dynamo  # noqa: F401  torch.optim imports it lazily (seconds): once here, not in every worker

    for task in {id(getattr(t, "job", t)): t for t in tasks}.values():  # the tasks of one job share its dict
        task.warm()


def run_on_processes(tasks: list[Task], workers: int, threads: int, writer: Writer) -> None:
    """Tasks over `workers` processes; each is sent when a worker is free, results written here."""
    import multiprocessing as mp

    import torch

    ctx = mp.get_context(_start_method(torch.get_num_threads(), torch.cuda.is_initialized()))
    if ctx.get_start_method() == "fork":
        _warm(tasks)
    todo, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(todo, results, threads, os.getpid()), daemon=True)
             for _ in range(workers)]
    for p in procs:
        p.start()
    pending = list(tasks)
    refused = None  # a worker's DataError: no task is sent after it, those running end and are written first
    try:
        for _ in range(workers):
            todo.put(writer.load(pending.pop(0)))
        running = workers
        while running:
            try:
                kind, payload = results.get(timeout=5.0)
            except queue_mod.Empty:
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(f"a training worker died (exit code {dead[0].exitcode})") from None
                continue
            if kind == "epoch":
                writer.write(payload)
            elif kind == "error":
                raise RuntimeError(f"a training worker failed:\n{payload}")
            elif kind == "refused":  # that worker has returned
                refused = refused or payload
                running -= 1
            elif pending and refused is None:
                todo.put(writer.load(pending.pop(0)))
            else:
                todo.put(None)
                running -= 1
        if refused is not None:
            raise refused
    finally:
        for p in procs:
            if p.is_alive():
                p.join(timeout=5.0)
            if p.is_alive():
                p.terminate()
