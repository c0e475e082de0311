"""The local back end's executors: one protocol, one registry (`depl run`, `depl profile`, `depl validate`,
`depl certify`, adaptive runs).

An executor runs a list of tasks (`depl.train.seeds.Task`: plain data, the seeds of one batch of a job with
what they need from the store) and sends every batch-epoch (`seeds.Item`: rows, checkpoints, decisions)
back to the one writer in this process (`seeds.Writer`; `depl.train.seeds` says why only one process
writes).  What tells executors apart is where the tasks train (this process, worker processes, a Ray
cluster) and how many run at once — which decides how the seeds are cut into batches, and so the
trajectories: the batching is asked of the executor before any task is made (`Executor.batch`).

    loop        this process, every seed on its own: the per-seed loop (`federation.walk_plan`)
    stack       this process, a batch of seeds as one vectorised stack (`vectorised.walk_plan_stack`)
    processes   worker processes on this machine, one batch each (one task: this process)
    ray         a Ray cluster (`ray_address`), `cpus_per_task` CPUs a task

A new executor is one class with `name`, `batch` and `run`, and one `register(...)`; `get(name)` finds it,
`names()` lists them for the command line, and `choose(runs, options)` is the one place that picks one when
none is named (today: Ray when given an address, else worker processes when there are several workers, else
this process; a choice that measures the candidates and takes the fastest belongs there).

Flower is not an executor: its simulation engine runs the exported app's ServerApp, which is itself the
store's writer (another process, `depl.train.flower_app`) and walks all seeds of the plan as Flower rounds,
so there is no list of tasks to hand out nor batch-epochs coming back here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from ..store import Store
from .seeds import (DEFAULT_SEED_BATCH, OnEpoch, Task, Writer, batch_size, default_workers, make_tasks,
                    run_on_processes, shown_rows)


@dataclass(frozen=True)
class Options:
    """How a run's tasks are executed (the command line's --seed-batch, --workers, --threads, --ray-address…)."""

    seed_batch: int = DEFAULT_SEED_BATCH   # seeds trained together as one stack, at most
    workers: int | None = None             # tasks at once [default: one per core; Ray: the cluster's CPUs]
    threads: int = 1                       # torch threads of every process that trains
    ray_address: str | None = None
    cpus_per_task: float = 1.0             # Ray: the CPUs a task asks for
    device: str | None = None              # cpu, cuda or auto, resolved where a task trains; None: the job's

    def __post_init__(self) -> None:
        if self.cpus_per_task <= 0:
            raise ValueError(f"cpus per task {self.cpus_per_task:g}: expected a positive number")


class Executor(Protocol):
    """A back end of `depl run`'s local training: where the tasks of a run train."""

    name: str

    def batch(self, n_seeds: int, options: Options) -> int:
        """Seeds per task for a run of `n_seeds` seeds (the trajectories depend on it: decided before any task)."""

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        """Train every task; each batch-epoch goes to `writer.write` (in this process) as it is done, and each
        task is `writer.load`ed just before it is sent."""


_REGISTRY: dict[str, Executor] = {}


def register(executor: Executor) -> Executor:
    """Make `executor` available as `get(executor.name)`; a name is registered once."""
    if executor.name in _REGISTRY:
        raise ValueError(f"executor {executor.name!r} is registered already")
    _REGISTRY[executor.name] = executor
    return executor


def get(name: str) -> Executor:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"executor {name!r}: expected one of {', '.join(names())}") from None


def names() -> list[str]:
    return list(_REGISTRY)


Run = tuple[str, object, list[int]]  # (run_id, job, seeds)


def choose(runs: Sequence[Run], options: Options) -> Executor:
    """The executor when none is named.  Today a rule on the options; an automatic choice (measure the
    candidates on these runs, keep the fastest) would go here."""
    if options.ray_address is not None:
        return get("ray")
    return get("processes" if (options.workers or default_workers()) > 1 else "stack")


def tasks_of(store: Store, runs: Iterable[Run], executor: Executor, options: Options) -> list[Task]:
    """The tasks left of every run, cut from each run's whole seed list (a resumed run batches as the first did)."""
    return [t for run_id, job, seeds in runs
            for t in make_tasks(store, run_id, job, seeds, executor.batch(len(seeds), options), options.device)]


def run_all(store: Store, runs: Iterable[Run], *, executor: str | None = None, progress: OnEpoch | None = None,
            **options) -> None:
    """Train the pending seeds of every (run_id, job, seeds) to the end, into `store`, by `executor` (a registered
    name; None: `choose`); `options`: the fields of `Options`."""
    runs, opts = list(runs), Options(**options)
    ex = get(executor) if executor is not None else choose(runs, opts)
    writer = Writer(store, None if progress is None else shown_rows(progress))
    ex.run(tasks_of(store, runs, ex, opts), writer, opts)


def run_tasks(tasks: Sequence[Task], writer: Writer, executor: Executor, options: Options) -> None:
    """Tasks made elsewhere (an adaptive run's) by `executor`."""
    executor.run(tasks, writer, options)


# --------------------------------------------------------------------------- #
# The executors
# --------------------------------------------------------------------------- #

def _in_this_process(tasks: Sequence[Task], writer: Writer) -> None:
    """Each task loaded, trained and written here, in order."""
    for t in tasks:
        writer.load(t).run(writer.write)


@dataclass(frozen=True)
class InThisProcess:
    """The tasks one after the other in this process: `per_seed`, every seed on its own (the per-seed loop), else
    batches of up to `seed_batch` seeds, each one vectorised stack."""

    name: str
    per_seed: bool = False

    def batch(self, n_seeds: int, options: Options) -> int:
        return 1 if self.per_seed else batch_size(n_seeds, options.seed_batch, 1)

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        _in_this_process(tasks, writer)


@dataclass(frozen=True)
class Processes:
    """One batch per worker process (`workers`, default one per core); a single task trains in this process."""

    name: str = "processes"

    def batch(self, n_seeds: int, options: Options) -> int:
        return batch_size(n_seeds, options.seed_batch, options.workers or default_workers())

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        workers = min(options.workers or default_workers(), len(tasks))
        if workers <= 1:  # no process to start for one task
            _in_this_process(tasks, writer)
        else:
            run_on_processes(list(tasks), workers, options.threads, writer)


@dataclass(frozen=True)
class Ray:
    """Ray tasks of `cpus_per_task` CPUs on the cluster at `ray_address`; as many batches as it runs at once."""

    name: str = "ray"

    def _cluster(self, options: Options):
        from .ray_pool import RayError, connect

        if options.ray_address is None:
            raise RayError("the ray executor needs a cluster's address (--ray-address HOST:PORT)")
        return connect(options.ray_address)

    def slots(self, options: Options) -> int:
        from .ray_pool import slots

        return options.workers or slots(self._cluster(options), options.cpus_per_task)

    def batch(self, n_seeds: int, options: Options) -> int:
        return batch_size(n_seeds, options.seed_batch, self.slots(options))

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        from .ray_pool import run_on_ray

        run_on_ray(self._cluster(options), list(tasks), self.slots(options), options.threads, writer,
                   options.cpus_per_task)


for _executor in (InThisProcess("loop", per_seed=True), InThisProcess("stack"), Processes(), Ray()):
    register(_executor)
