"""The local back end's executors: one protocol, one registry (`depl run`, `depl profile`, `depl validate`,
`depl certify`, adaptive runs).

An executor runs a list of tasks (`depl.train.engine.seeds.Task`: plain data, the seeds of one batch of a job with
what they need from the store) and sends every batch-epoch (`seeds.Item`: rows, checkpoints, decisions)
back to the one writer in this process (`seeds.Writer`; `depl.train.engine.seeds` says why only one process
writes).  What tells executors apart is where the tasks train (this process, worker processes, a Ray
cluster) and how many run at once — which decides how the seeds are cut into batches, and so the
trajectories: the batching is asked of the executor before any task is made (`Executor.batch`).

    loop        this process, every seed on its own: the per-seed loop (`federation.walk_plan`)
    stack       this process, a batch of seeds as one vectorised stack (`vectorised.walk_plan_stack`)
    processes   worker processes on this machine, one batch each (one task: this process)
    ray         a Ray cluster (`ray_address`), `cpus_per_task` CPUs a task

A new executor is one class with `name`, `batch` and `run`, and one `register(...)`; `get(name)` finds it,
`names()` lists them for the command line, and `decide(...)` is the one place that picks one, with its seed
batch, workers and threads, when none is named: Ray when given an address; the fixed rule (`fixed_rule`:
worker processes when there are several workers, else a stack in this process) when any of seed batch, workers
or threads is given, when `$DEPL_AUTOCHOICE` is 0 or the device is not the CPU; the per-seed loop for two
seeds or fewer; else what `autochoice.choose` measured fastest on the first run's job (cached per network,
data shape and machine in `autochoice.default_cache_dir()`), never a way that measured slower than the loop.
Whatever is decided, a seed already cut into a batch keeps it (`seeds.make_tasks`, `Store.batches`).

Flower is not an executor: its simulation engine runs the exported app's ServerApp, which is itself the
store's writer (another process, `depl.train.apps.flower_app`) and walks all seeds of the plan as Flower rounds,
so there is no list of tasks to hand out nor batch-epochs coming back here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

from ...paths import informational
from ...store import Store
from ..engine.seeds import (DEFAULT_SEED_BATCH, OnEpoch, Task, Writer, batch_size, default_workers, make_tasks,
                    run_on_processes, shown_rows)
from ..engine import autochoice
from ..engine.autochoice import SHARE
from ..task.data import check_draws
from .ray_pool import RayError, connect, run_on_ray, slots


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


def fixed_rule(options: Options) -> Executor:
    """The executor when none is named and nothing is measured: Ray when given an address, else worker processes
    when there are several workers, else this process."""
    if options.ray_address is not None:
        return get("ray")
    return get("processes" if (options.workers or default_workers()) > 1 else "stack")


AUTO_ENV = "DEPL_AUTOCHOICE"   # 0 (off, no, false): never measure, the fixed defaults unless options are given;
                               # full: measure every way whatever the job's length (no share of it as a bound)
FEW_SEEDS = 2                  # seeds left to train at most this many: the per-seed loop, nothing measured


@dataclass(frozen=True)
class Decision:
    """How the seeds of a call of `run_all` train, and why: `how` is measured, cached, named (an executor or
    options given), off ($DEPL_AUTOCHOICE), device (not the CPU), few (seeds), short (a job too
    short to measure within its share) or done (none left to train)."""

    executor: Executor
    options: Options
    how: str
    why: str
    choice: Any = None              # the autochoice.Choice when measured or cached
    cache: str | None = None        # its cache file
    seeds: int = 0                  # the seeds of the largest run (the batch cut from them; 0: not known)
    stackable: bool = True          # whether its seeds may train as one stack (`Job.stacks`: not if draws' sizes vary)

    @property
    def batch(self) -> int:
        """Seeds per batch cut now from the largest run (a seed already cut keeps its batch: `seeds.make_tasks`)."""
        if self.executor.name == "ray" or not self.seeds:   # Ray's batch asks the cluster
            return 1 if self.executor.name == "loop" else self.options.seed_batch
        return self.executor.batch(self.seeds, self.options)

    @property
    def workers(self) -> int:
        return 1 if self.executor.name in ("loop", "stack") else (self.options.workers or default_workers())

    @property
    def label(self) -> str:
        o, b, w = self.options, self.batch, self.workers
        if self.executor.name == "ray":
            return f"Ray at {o.ray_address}: batches of ≤ {b} seeds × {o.threads} thread(s) each"
        how = "the per-seed loop" if b == 1 else f"stacks of {b} seeds"
        if b > 1 and not self.stackable:
            how = f"batches of {b} seeds, each seed on its own (each run draws its own data, of sizes that may differ)"
        return f"{how} × {w} worker{'s' * (w > 1)} × {o.threads} thread{'s' * (o.threads > 1)}"

    @property
    def line(self) -> str:
        """One line for the user: what trains the seeds, and why."""
        return f"seeds: {self.label} — {self.why}"

    def to_json(self) -> dict:
        o = self.options
        out = {"executor": self.executor.name, "seed_batch": o.seed_batch, "batch": self.batch,
               "workers": self.workers, "threads": o.threads, "how": self.how, "why": self.why, "line": self.line}
        if self.choice is not None:
            c = self.choice
            # the cache file said only (informational: this machine's cache, written into results others read)
            cache = None if self.cache is None else informational(self.cache)
            out.update(loop_rate=c.loop_rate, picked_rate=c.rates[c.picked.label], rates=c.rates, margin=c.margin,
                       measured_seconds=c.measured_seconds, cache=cache, noise=c.noise, load=c.load,
                       budget=c.budget, reason=c.reason)
        return out


def auto_enabled() -> bool:
    return os.environ.get(AUTO_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def auto_share() -> float | None:
    """The share of a job its measurement may take: `autochoice.SHARE`, or None (no bound) when
    $DEPL_AUTOCHOICE is `full`."""
    return None if os.environ.get(AUTO_ENV, "").strip().lower() == "full" else SHARE


def decide(runs: Sequence[Run], *, executor: str | None = None, todo: int | None = None,
           seed_batch: int | None = None, workers: int | None = None, threads: int | None = None,
           cache_dir: str | os.PathLike | None = None, said: Callable[[str], None] | None = None,
           **options) -> Decision:
    """How to train `runs` [(run id, job, seeds)], `todo` of whose seeds are left to train (None: all): see the
    module's docstring.  seed_batch, workers, threads: None unless given; given ones turn the measurement off
    (the others keep `Options`' defaults).  `options`: Options' other fields.  `said(text)` hears that a
    measurement starts.  `cache_dir` [default: autochoice.default_cache_dir()]."""
    n_seeds = max((len(r[2]) for r in runs), default=0)   # a stack is cut from one run's seeds
    stackable = all(getattr(r[1], "stacks", True) for r in runs)
    return replace(_decide(runs, executor, todo, seed_batch, workers, threads, cache_dir, said, options), seeds=n_seeds,
                   stackable=stackable)


def _one_process_on_a_gpu(fixed: Options, runs: Sequence[Run]) -> Options:
    """On a device other than the CPU the seeds train as stacks in this one process unless --workers says otherwise:
    worker processes on one GPU would each start CUDA (and a process forked after CUDA started cannot use it).  On an
    NVIDIA H200 one process training a stack of 32 fashion-small seeds ran 1.86× as fast as 16 CPU threads
    (docs/results/speed.md, "On a GPU")."""
    device = fixed.device or next((r[1].options.device for r in runs), "cpu")
    return fixed if device == "cpu" or fixed.workers is not None else replace(fixed, workers=1)


def _decide(runs, executor, todo, seed_batch, workers, threads, cache_dir, said, options) -> Decision:
    given = {k: v for k, v in (("seed_batch", seed_batch), ("workers", workers), ("threads", threads))
             if v is not None}
    fixed = _one_process_on_a_gpu(Options(**given, **options), runs)
    if executor is not None:
        return Decision(get(executor), fixed, "named", f"the {executor} executor, as asked; nothing measured")
    if fixed.ray_address is not None:
        return Decision(get("ray"), fixed, "named", "a Ray cluster's address given; nothing measured")
    if given:
        return Decision(fixed_rule(fixed), fixed, "named", "given: " + ", ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in given.items()) + "; nothing measured")
    if not auto_enabled():
        return Decision(fixed_rule(fixed), fixed, "off", f"${AUTO_ENV}={os.environ[AUTO_ENV]}: nothing measured, "
                        "the fixed defaults")
    runs = [r for r in runs if r[2]]
    n = sum(len(r[2]) for r in runs) if todo is None else todo
    if not runs or n == 0:
        return Decision(get("loop"), fixed, "done", "no seed left to train")
    job = runs[0][1]
    device = fixed.device or job.options.device
    if device != "cpu":
        return Decision(fixed_rule(fixed), fixed, "device", f"device {device}: the automatic choice measures on the "
                        "CPU only, so stacks in one process (--seed-batch and --workers choose by hand)")
    if n <= FEW_SEEDS:
        return Decision(get("loop"), fixed, "few", f"{n} seed{'s' * (n > 1)} to train: too few to be worth "
                        "measuring the alternatives")
    cache_dir = autochoice.default_cache_dir() if cache_dir is None else Path(cache_dir)
    n_seeds = max(len(r[2]) for r in runs)
    cands = autochoice.candidates_for(job, n_seeds)
    choice = autochoice.choose(job, n_seeds, cands, cache_dir, said=said, todo=n, share=auto_share())
    c = choice.picked
    opts = replace(fixed, seed_batch=c.seed_batch, workers=c.workers, threads=c.threads)
    name = "processes" if c.workers > 1 else "loop" if c.seed_batch == 1 else "stack"
    if choice.budget.get("skipped"):
        return Decision(get(name), opts, "short", f"nothing measured: {choice.reason}; the per-seed loop",
                        choice, None)
    b, load = choice.budget, choice.load
    if choice.cached:
        why = (f"cached (measured in {choice.measured_seconds:.0f} s by an earlier call under load "
               f"{load['loadavg']:.1f} on {load['cpus']} CPUs): ")
    else:
        share = f", {b['share']:.1%} of the job" if b.get("share") is not None else ""
        why = (f"measured in {choice.measured_seconds:.1f} s{share} ({b['measured']} of {b['candidates']} ways "
               f"besides the loop, the loop's spread {choice.noise:.0%}; {choice.reason}): ")
    return Decision(get(name), opts, "cached" if choice.cached else "measured", why + choice.why, choice,
                    str(autochoice.cache_file(cache_dir, choice.key)))


def tasks_of(store: Store, runs: Iterable[Run], executor: Executor, options: Options) -> list[Task]:
    """The tasks left of every run, cut from each run's whole seed list (a resumed run batches as the first did:
    `seeds.make_tasks`)."""
    return [t for run_id, job, seeds in runs
            for t in make_tasks(store, run_id, job, seeds, executor.batch(len(seeds), options), options.device)]


def run_all(store: Store, runs: Iterable[Run], *, executor: str | None = None, progress: OnEpoch | None = None,
            said: Callable[[str], None] | None = None, keep: Callable[[Any], None] | None = None,
            keep_at: dict[str, tuple[int, ...]] | None = None, **options) -> Decision:
    """Train the pending seeds of every (run_id, job, seeds) to the end, into `store`, by `executor` (a registered
    name; None: `decide`), and return how they were trained; `options`: the fields of `Options` (seed_batch,
    workers, threads: None or absent unless given) and `decide`'s cache_dir.  `said(text)` is told how the
    seeds train (one line) before they do, and that a measurement starts when one does.  `keep(item)`: hears
    every batch-epoch before it is written (the final models it brings: depl.train.task.models.ModelKeeper);
    `keep_at`: run id → the epochs before the last whose models it brings too."""
    runs = list(runs)
    left = [(job, pending_seeds(store, rid, job, seeds)) for rid, job, seeds in runs]
    check_draws([(job.data, seeds) for job, seeds in left])  # every seed's own draw of your data, where cheap
    todo = sum(len(seeds) for _, seeds in left)
    d = decide(runs, executor=executor, todo=todo, said=said, **options)
    if said is not None:
        said(d.line)
    writer = Writer(store, None if progress is None else shown_rows(progress), keep)
    tasks = tasks_of(store, runs, d.executor, d.options)
    if keep is not None:   # the final models travel back only where they are kept
        tasks = [replace(t, keep_models=True, keep_at=(keep_at or {}).get(t.run_id, ())) for t in tasks]
    d.executor.run(tasks, writer, d.options)
    return d


def pending_seeds(store: Store, run_id: str, job, seeds: list[int]) -> list[int]:
    """The seeds of `seeds` with epochs left to train (a diverged seed has none)."""
    gone, n = store.diverged(run_id), len(job.epochs)
    return [s for s in seeds if s not in gone and store.done_epochs(run_id, s) < n]


def run_tasks(tasks: Sequence[Task], writer: Writer, executor: Executor, options: Options) -> None:
    """Tasks made elsewhere (an adaptive run's) by `executor`."""
    executor.run(tasks, writer, options)


# --------------------------------------------------------------------------- #
# The executors
# --------------------------------------------------------------------------- #

def _in_this_process(tasks: Sequence[Task], writer: Writer, threads: int) -> None:
    """Each task loaded, trained and written here, in order, on `threads` torch threads."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for t in tasks:
            writer.load(t).run(writer.write)
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class InThisProcess:
    """The tasks one after the other in this process: `per_seed`, every seed on its own (the per-seed loop), else
    batches of up to `seed_batch` seeds, each one vectorised stack."""

    name: str
    per_seed: bool = False

    def batch(self, n_seeds: int, options: Options) -> int:
        return 1 if self.per_seed else batch_size(n_seeds, options.seed_batch, 1)

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        _in_this_process(tasks, writer, options.threads)


@dataclass(frozen=True)
class Processes:
    """One batch per worker process (`workers`, default one per core); a single task trains in this process."""

    name: str = "processes"

    def batch(self, n_seeds: int, options: Options) -> int:
        return batch_size(n_seeds, options.seed_batch, options.workers or default_workers())

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        workers = min(options.workers or default_workers(), len(tasks))
        if workers <= 1:  # no process to start for one task
            _in_this_process(tasks, writer, options.threads)
        else:
            run_on_processes(list(tasks), workers, options.threads, writer)


@dataclass(frozen=True)
class Ray:
    """Ray tasks of `cpus_per_task` CPUs on the cluster at `ray_address`; as many batches as it runs at once."""

    name: str = "ray"

    def _cluster(self, options: Options):
        if options.ray_address is None:
            raise RayError("the ray executor needs a cluster's address (--ray-address HOST:PORT)")
        return connect(options.ray_address)

    def slots(self, options: Options) -> int:
        return options.workers or slots(self._cluster(options), options.cpus_per_task)

    def batch(self, n_seeds: int, options: Options) -> int:
        return batch_size(n_seeds, options.seed_batch, self.slots(options))

    def run(self, tasks: Sequence[Task], writer: Writer, options: Options) -> None:
        run_on_ray(self._cluster(options), list(tasks), self.slots(options), options.threads, writer,
                   options.cpus_per_task)


for _executor in (InThisProcess("loop", per_seed=True), InThisProcess("stack"), Processes(), Ray()):
    register(_executor)
