"""Many seeds of the local back end: batches of seeds (`vectorised`), over worker processes or a Ray cluster.

The seeds of a run are cut into batches once, from the whole seed list (so a
resumed run batches them as the first attempt did and its trajectories are
bit-for-bit those of an uninterrupted run).  A batch of one seed is the
per-seed loop (`federation.walk_plan`); a larger batch is one stack of
`vectorised.walk_plan_stack`.  A task is one batch's pending seeds that have
the same number of epochs done, with their checkpoints.

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
from dataclasses import dataclass, fields
from typing import Callable, Iterable

from ..store import EpochRow, Store, diverges

# one batch-epoch of a task: (run_id, [(seed, result, checkpoint or None, final)])
Item = tuple[str, list[tuple[int, EpochRow, "bytes | None", bool]]]
OnEpoch = Callable[[str, int, int, EpochRow], None]   # (run_id, seed, epoch, result)

DEFAULT_SEED_BATCH = 32


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Task:
    run_id: str
    job: dict                        # Job.to_json()
    n_epochs: int
    seeds: tuple[int, ...]
    done: int                        # epochs every seed of the task has done
    checkpoints: tuple[bytes, ...] = ()


def batch_size(n_seeds: int, seed_batch: int, workers: int) -> int:
    """Seeds per batch: at most `seed_batch`, and small enough that every worker gets one."""
    return max(1, min(seed_batch, math.ceil(n_seeds / max(1, workers))))


def make_tasks(store: Store, run_id: str, job, seeds: list[int], size: int) -> list[Task]:
    """The tasks left of a run, without checkpoints (`load` adds them when the task is sent)."""
    n = len(job.epochs)
    spec = job.to_json()
    out = []
    gone = store.diverged(run_id)
    for i in range(0, len(seeds), size):
        by_done: dict[int, list[int]] = {}
        for s in seeds[i:i + size]:
            d = store.done_epochs(run_id, s)
            if d < n and s not in gone:
                by_done.setdefault(d, []).append(s)
        out += [Task(run_id, spec, n, tuple(group), d) for d, group in sorted(by_done.items())]
    return out


def load(store: Store, task: Task) -> Task:
    """The task with its seeds' checkpoints (read only now: a long run's checkpoints are not all held at once)."""
    if task.done == 0:
        return task
    blobs = []
    for s in task.seeds:
        ck = store.checkpoint(task.run_id, s)
        if ck is None or ck[0] != task.done:
            raise RuntimeError(f"run {task.run_id} seed {s}: {task.done} epochs recorded but no matching checkpoint")
        blobs.append(ck[1])
    return Task(task.run_id, task.job, task.n_epochs, task.seeds, task.done, tuple(blobs))


def run_task(task: Task, emit: Callable[[Item], None]) -> None:
    """Train a task (in any process); `emit` gets every batch-epoch."""
    from .federation import Job, LocalFederation, state_bytes, walk_plan
    from .vectorised import walk_plan_stack

    job = Job.from_json(task.job)
    n = task.n_epochs

    def rows(seeds, results, models):
        final = results[0].epoch == n
        # a diverged seed's row goes to the store's `diverged` table, without a checkpoint
        blobs = [None] * len(results) if final else [None if diverges(r) else state_bytes(m)
                                                     for r, m in zip(results, models())]
        emit((task.run_id, [(s, as_row(r), b, final) for s, r, b in zip(seeds, results, blobs)]))

    if len(task.seeds) == 1:  # one seed: the per-seed loop itself
        start = (task.done, task.checkpoints[0]) if task.done else None
        walk_plan(job, task.seeds[0], LocalFederation(), lambda r, m: rows(task.seeds, [r], lambda: [m]), start)
    else:
        start = (task.done, list(task.checkpoints)) if task.done else None
        walk_plan_stack(job, list(task.seeds), rows, start)


def as_row(r) -> EpochRow:
    return EpochRow(*(getattr(r, f.name) for f in fields(EpochRow)))


def write(store: Store, item: Item, progress: OnEpoch | None) -> None:
    run_id, entries = item
    store.record_epochs(run_id, entries)
    if progress is not None:
        for seed, row, _, _ in entries:
            progress(run_id, seed, row.epoch, row)


def run_all(store: Store, runs: Iterable[tuple[str, object, list[int]]], *, seed_batch: int = DEFAULT_SEED_BATCH,
            workers: int | None = None, threads: int = 1, ray_address: str | None = None,
            progress: OnEpoch | None = None) -> None:
    """Train the pending seeds of every (run_id, job, seeds) to the end, into `store`.

    `workers`: processes on this machine [default: one per core], or with
    `ray_address` the number of batches in flight [default: the cluster's CPUs].
    """
    runs = list(runs)
    ray = None
    if ray_address is not None:
        from .ray_pool import connect

        ray = connect(ray_address)
        workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    workers = workers or default_workers()
    # cut from the whole seed list, for a given number of workers: the batching does not depend on progress
    tasks = [t for run_id, job, seeds in runs
             for t in make_tasks(store, run_id, job, seeds, batch_size(len(seeds), seed_batch, workers))]
    write_item = lambda item: write(store, item, progress)  # noqa: E731
    if ray is not None:
        from .ray_pool import run_on_ray

        run_on_ray(ray, store, tasks, workers, threads, write_item, load, run_task)
    elif workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            run_task(load(store, t), write_item)
    else:
        run_on_processes(store, tasks, min(workers, len(tasks)), threads, write_item)


# --------------------------------------------------------------------------- #
# Worker processes on this machine
# --------------------------------------------------------------------------- #

def _worker(tasks, results, threads: int, parent: int) -> None:
    import torch

    from ..store import drop_inherited_locks

    drop_inherited_locks()  # the parent is the store's one writer; a kill -9 of it must free the store

    torch.set_num_threads(threads)

    def emit(item: Item) -> None:
        if os.getppid() != parent:  # the parent was killed: nobody would write this
            os._exit(1)
        results.put(("epoch", item))

    while (task := tasks.get()) is not None:
        try:
            run_task(task, emit)
        except BaseException:
            results.put(("error", traceback.format_exc()))
            return
        results.put(("done", None))


def _start_method(parent_threads: int) -> str:
    """fork when it is safe, else spawn.

    A forked worker starts at once with the parent's imported torch and its
    data (MNIST-1D is generated in memory; a spawned worker regenerates it,
    seconds each).  Forking is unsafe once torch has run a parallel region
    with several threads (the OpenMP pool does not survive a fork); with one
    thread it never starts one.
    """
    import multiprocessing as mp

    return "fork" if parent_threads == 1 and "fork" in mp.get_all_start_methods() else "spawn"


def _warm(tasks: list[Task]) -> None:
    """Load every task's data here, so that forked workers inherit it."""
    import torch._dynamo  # noqa: F401  torch.optim imports it lazily (seconds): once here, not in every worker

    from .federation import Job, node_data, test_data

    for spec in {id(t.job): t.job for t in tasks}.values():
        job = Job.from_json(spec)
        test_data(job.data)
        for nodes in set(job.nodes.values()):
            for node in range(nodes):
                node_data(job.data, nodes, job.options.iid, node)


def run_on_processes(store: Store, tasks: list[Task], workers: int, threads: int,
                     write_item: Callable[[Item], None]) -> None:
    """Tasks over `workers` processes; each is sent when a worker is free, results written here."""
    import multiprocessing as mp

    import torch

    ctx = mp.get_context(_start_method(torch.get_num_threads()))
    if ctx.get_start_method() == "fork":
        _warm(tasks)
    todo, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(todo, results, threads, os.getpid()), daemon=True)
             for _ in range(workers)]
    for p in procs:
        p.start()
    pending = list(tasks)
    try:
        for _ in range(workers):
            todo.put(load(store, pending.pop(0)))
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
                write_item(payload)
            elif kind == "error":
                raise RuntimeError(f"a training worker failed:\n{payload}")
            elif pending:
                todo.put(load(store, pending.pop(0)))
            else:
                todo.put(None)
                running -= 1
    finally:
        for p in procs:
            if p.is_alive():
                p.join(timeout=5.0)
            if p.is_alive():
                p.terminate()
