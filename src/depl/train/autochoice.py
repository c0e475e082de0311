"""How to train many seeds of a job on this machine, chosen by measuring: the per-seed loop or stacks, how many
seeds per stack, how many worker processes, how many torch threads each.

Which is fastest depends on the network, the data and the CPU (its vector width, its caches, its cores, what else
runs on it), so no rule is hard-coded: before a batch of runs, `choose` trains a few mini-batches of each
`Candidate`, then tests on those mini-batches' share of an epoch's test pass — every worker of the candidate at
once, each on its own stack of seeds, as the runs would — in `ROUNDS` interleaved rounds, each round's
candidates between two measurements of the per-seed loop.  The loop is always a candidate, and it is kept
unless another beat it, in every round, by at least `MARGIN` and the loop's own largest spread within a round
(how much the machine moved while a round was measured): the pick is never one that measured slower than the
loop.  Of those that beat it so, the fastest (median of its rounds) is picked.

The measurement is a few seconds to a minute (worker start-up included); its outcome, a `Choice` with every
measured rate, is cached as JSON in `cache_dir` per network, data shape, machine (CPU model, cores, torch version)
and candidate list, so the next batch of runs on the same machine reads it instead of measuring again.
`default_cache_dir()` is the per-user cache: `$DEPL_CACHE`, else `$XDG_CACHE_HOME/depl`, else `~/.cache/depl`.

    choice = choose(job, n_seeds=32, cache_dir=default_cache_dir())
    choice.picked        # Candidate(seed_batch=16, workers=2, threads=1)
    choice.why           # "812 seed-steps/s, 1.91× the per-seed loop's 426; at least 1.62× in each of 3 rounds, …"

A candidate's `seed_batch` is the stack each worker trains (1: the per-seed loop, `federation.local_epoch`);
the seeds of a run are cut into such batches, so a candidate never has more busy workers than batches.
`candidates_for(job, n_seeds)` is the one place that says which candidates a job has.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .cachedir import default_cache_dir, write_whole  # noqa: F401 - default_cache_dir: part of this API

MIN_SECONDS = 1.0    # each worker trains this long (a shorter window is too brief to time on a busy machine)
MAX_STEPS = 64       # mini-batches per timed chunk at most (a node's epoch, if shorter)
ROUNDS = 3           # candidates are measured in this many interleaved rounds; a rate is its rounds' median
STACKS = (4, 8, 16, 32)
MARGIN = 0.10        # a candidate must beat the loop by at least this much (relative) in every round to be picked
CACHE_VERSION = 3    # 3: every worker times the same window (2 measured workers that stopped apart)


@dataclass(frozen=True)
class Candidate:
    seed_batch: int      # seeds per stack (1: the per-seed loop)
    workers: int         # worker processes, each training its own batch
    threads: int = 1     # torch threads per worker

    @property
    def label(self) -> str:
        how = "loop" if self.seed_batch == 1 else f"stack {self.seed_batch}"
        return f"{how} × {self.workers} worker{'s' * (self.workers > 1)} × {self.threads} thread{'s' * (self.threads > 1)}"


LOOP = Candidate(1, 1, 1)   # the per-seed loop in one process, one thread: what every candidate must beat


@dataclass(frozen=True)
class Choice:
    picked: Candidate
    rates: dict[str, float]          # label → seed-steps per second (a step's share of the test pass included),
                                     # measured: the median of its rounds
    loop_rate: float                 # the per-seed loop's rate in one process, one thread
    key: dict                        # what the measurement holds for: network, data shape, machine, candidates
    measured_seconds: float          # the measurement's wall time, worker start-up included
    ratios: dict[str, list[float]] = field(default_factory=dict)   # label → its rate / the loop's, round by round
    margin: float = MARGIN           # what a candidate had to beat the loop by in every round: max(MARGIN, noise)
    noise: float = 0.0               # the loop's largest spread within a round (its two measurements, relative)
    cached: bool = field(default=False, compare=False)   # read from the cache rather than measured now

    @property
    def why(self) -> str:
        """Why this pick: its rate against the loop's, or why the loop was kept."""
        loop, rounds = self.loop_rate, len(self.ratios.get(LOOP.label, []))
        need = (f"{1 + self.margin:.2f}× (1 + the larger of the margin {self.key.get('margin', MARGIN):.0%} and the "
                f"loop's own spread in a round {self.noise:.0%})")
        if self.picked != LOOP:
            r = self.ratios[self.picked.label]
            return (f"{self.rates[self.picked.label]:.0f} seed-steps/s, {self.rates[self.picked.label] / loop:.2f}× "
                    f"the per-seed loop's {loop:.0f}; at least {min(r):.2f}× in each of {len(r)} rounds, "
                    f"needed {need}")
        others = {k: v for k, v in self.rates.items() if k != LOOP.label}
        if not others:
            return f"the per-seed loop, the only candidate ({loop:.0f} seed-steps/s)"
        best = max(others, key=others.get)
        if others[best] <= loop:
            return f"the per-seed loop, the fastest of {len(self.rates)} measured ({loop:.0f} seed-steps/s)"
        r = self.ratios[best]
        return (f"the per-seed loop kept ({loop:.0f} seed-steps/s): the fastest other, {best}, was "
                f"{others[best] / loop:.2f}× it but {min(r):.2f}× in its worst round, not {need} in each of "
                f"{rounds}")

    def to_json(self) -> dict:
        return {"version": CACHE_VERSION, "picked": asdict(self.picked), "rates": self.rates,
                "loop_rate": self.loop_rate, "ratios": self.ratios, "margin": self.margin, "noise": self.noise,
                "key": self.key, "measured_seconds": self.measured_seconds}

    @classmethod
    def from_json(cls, d: dict) -> "Choice":
        return cls(Candidate(**d["picked"]), {k: float(v) for k, v in d["rates"].items()}, float(d["loop_rate"]),
                   d["key"], float(d["measured_seconds"]),
                   {k: [float(x) for x in v] for k, v in d["ratios"].items()}, float(d["margin"]), float(d["noise"]),
                   cached=True)


def machine() -> dict:
    """What a measured rate is a rate of, besides the job: CPU model, cores this process may use, torch."""
    import torch

    return {"cpu": cpu_model(), "cores": usable_cores(), "torch": torch.__version__}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_candidates(n_seeds: int, cores: int | None = None) -> list[Candidate]:
    """The per-seed loop and stacks of `STACKS` seeds, on one worker or one per core, one thread each, and one
    worker with every core's threads; a stack larger than a worker's share of the seeds is that share."""
    cores = cores or usable_cores()
    out: list[Candidate] = []
    for workers, threads in {(1, 1), (cores, 1), (1, cores)}:
        share = math.ceil(n_seeds / workers)
        for b in (1, *STACKS):
            batch = min(b, share)
            # no more workers than batches: the others would have nothing to train
            c = Candidate(batch, min(workers, math.ceil(n_seeds / batch)), threads)
            if c not in out:
                out.append(c)
    return sorted(out, key=lambda c: (c.seed_batch, c.workers, c.threads))


def candidates_for(job, n_seeds: int, cores: int | None = None) -> list[Candidate]:
    """The candidates worth measuring for `n_seeds` seeds of `job`: the one place a rule about the job drops
    some.  Seeds that draw their own data (`Job.stackable` false) share no data tensor to stack over: they
    train one by one, so only the candidates of one seed per stack (the loop, on one or more workers) are left."""
    cands = default_candidates(n_seeds, cores)
    if getattr(job, "stackable", True):
        return cands
    return [c for c in cands if c.seed_batch == 1]


def job_key(job) -> dict:
    """The network and data shape of the job's first epoch: what one of its mini-batches costs."""
    spec = job.versions[job.init_version or job.epochs[0][1]]
    return {"net": spec.net, "width": spec.width, "ratio": spec.ratio, "net_args": spec.net_args,
            "code": spec.code_dir is not None, "input_shape": list(spec.input_shape), "classes": spec.n_classes,
            "batch_size": job.options.batch_size, "device": job.options.device}


def cache_file(cache_dir: str | os.PathLike, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"autochoice-{digest}.json"


def choose(job, n_seeds: int, candidates: list[Candidate] | None = None,
           cache_dir: str | os.PathLike | None = None, *, margin: float = MARGIN,
           said: Callable[[str], None] | None = None) -> Choice:
    """The fastest way to train `n_seeds` seeds of `job` here that beats the per-seed loop by `margin` in every
    round (else the loop): measured, or read from `cache_dir`'s cache.  The loop is a candidate whether listed
    or not.  `said(text)` is told before a measurement starts (it takes a while)."""
    cands = candidates or candidates_for(job, n_seeds)
    cands = cands if LOOP in cands else [LOOP, *cands]
    cores = usable_cores()
    for c in cands:
        if min(c.seed_batch, c.workers, c.threads) < 1 or c.workers * c.threads > cores:
            raise ValueError(f"candidate {c.label}: needs 1 ≤ seed batch, workers, threads and workers × threads ≤ "
                             f"{cores} cores")
    key = {"job": job_key(job), "machine": machine(), "candidates": [asdict(c) for c in cands], "margin": margin}
    path = cache_file(cache_dir, key) if cache_dir is not None else None
    if path is not None and path.exists():
        cached = _read(path, key)
        if cached is not None:
            return cached
    if said is not None:
        said(f"measuring {len(cands)} ways to train {n_seeds} seeds on this machine ({key['machine']['cpu']}, "
             f"{cores} cores), {ROUNDS} rounds; once per network, data shape and machine"
             + (f" (cached in {path.parent})" if path is not None else ""))
    choice = measure(job, cands, key, margin)
    if path is not None:   # two runs choosing at once each write a complete file
        write_whole(path, lambda tmp: tmp.write_text(json.dumps(choice.to_json(), indent=1)))
    return choice


def _read(path: Path, key: dict) -> Choice | None:
    """The cached choice, or None when the file is unreadable or holds another key (then it is measured anew)."""
    try:
        d = json.loads(path.read_text())
        if d.get("version") != CACHE_VERSION or d.get("key") != key:
            return None
        return Choice.from_json(d)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def measure(job, candidates: list[Candidate], key: dict, margin: float = MARGIN) -> Choice:
    """Every candidate's rate, the median of its interleaved rounds, on a pool of spawned workers; each round's
    candidates measured between two measurements of the loop, against which they are compared."""
    t0 = time.perf_counter()
    rounds: list[dict[Candidate, float]] = []   # per round: candidate → rate
    loops: list[tuple[float, float]] = []       # per round: the loop before and after its candidates
    others = [c for c in candidates if c != LOOP]
    n = max(c.workers for c in candidates)
    with _Pool(n, job.to_json()) as pool:
        pool.rate(Candidate(1, n))   # untimed: every worker's first window runs slow (caches, allocator, kernels)
        for r in range(ROUNDS):
            todo = others if r == 0 else _contenders(rounds, loops, margin)
            if r and not todo:   # nothing can beat the loop by the margin any more: no round would change that
                break
            before = pool.rate(LOOP)
            rates = {c: pool.rate(c) for c in todo}
            loops.append((before, pool.rate(LOOP)))
            rounds.append(rates)
    return decide(candidates, rounds, loops, key, margin, time.perf_counter() - t0)


def decide(candidates: list[Candidate], rounds: list[dict[Candidate, float]], loops: list[tuple[float, float]],
           key: dict, margin: float = MARGIN, seconds: float = 0.0) -> Choice:
    """The pick from measured rounds: the fastest candidate (median of its rounds) among those measured in every
    round and at least 1 + max(margin, the loop's spread) times the loop in each; else the loop."""
    noise = _noise(loops)
    need = 1 + max(margin, noise)
    loop_by_round = [(a + b) / 2 for a, b in loops]
    ratios = {c: [got[c] / loop for got, loop in zip(rounds, loop_by_round) if c in got] for c in candidates
              if c != LOOP}
    rates = {c: statistics.median(got[c] for got in rounds if c in got) for c in ratios}
    rates[LOOP] = statistics.median(loop_by_round)
    ratios[LOOP] = [1.0] * len(rounds)
    fit = [c for c, r in ratios.items() if c != LOOP and len(r) == len(rounds) and min(r) >= need]
    picked = max(fit, key=lambda c: rates[c]) if fit else LOOP
    order = [c for c in candidates if c in rates]
    return Choice(picked, {c.label: rates[c] for c in order}, rates[LOOP], key, seconds,
                  {c.label: ratios[c] for c in order}, max(margin, noise), noise)


def _noise(loops: list[tuple[float, float]]) -> float:
    """The loop's largest relative spread within a round: how far the machine moved while a round was measured."""
    return max((max(a, b) / min(a, b) - 1 for a, b in loops), default=0.0)


def _contenders(rounds: list[dict[Candidate, float]], loops: list[tuple[float, float]],
                margin: float) -> list[Candidate]:
    """Those measured again: every candidate measured in every round so far that beat the loop by the margin (and
    the loop's spread so far) in each; the others cannot be picked, whatever their next rounds."""
    need = 1 + max(margin, _noise(loops))
    loop_by_round = [(a + b) / 2 for a, b in loops]
    return [c for c in rounds[-1] if all(c in got and got[c] / loop >= need for got, loop in zip(rounds, loop_by_round))]


class _Pool:
    """Worker processes that each train a candidate's stack for a few mini-batches when told to."""

    def __init__(self, n: int, job_json: dict):
        # spawned: a worker sets its own thread count, which a forked copy of a threaded parent cannot do safely
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(n)]
        # a candidate's workers start timing together, so that their steps overlap as a run's would
        # (held here: a spawned worker reopens them by name after the parent has moved on)
        self.barriers = {w: ctx.Barrier(w) for w in range(1, n + 1)}
        self.procs = [ctx.Process(target=_serve, args=(job_json, box, self.results, self.barriers), daemon=True)
                      for box in self.inboxes]
        for p in self.procs:
            p.start()

    def __enter__(self) -> "_Pool":
        return self

    def __exit__(self, *exc) -> None:
        for box in self.inboxes:
            box.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():  # pragma: no cover - a worker stuck past its last candidate
                p.terminate()

    def rate(self, c: Candidate) -> float:
        """Seed-steps per second of the candidate's workers together: all their steps over the wall time from
        the first worker's start to the last one's end (perf_counter is one clock for every process)."""
        for box in self.inboxes[:c.workers]:
            box.put(asdict(c))
        got = [self._next(c) for _ in range(c.workers)]
        for g in got:
            if isinstance(g, str):
                raise RuntimeError(f"measuring {c.label}: {g}")
        # each worker's own rate over its window, summed: the windows are the same wall-clock time (each
        # worker trains until MIN_SECONDS after the common start), up to the last chunk each one finished
        return sum(n / (end - start) for n, start, end in got)


    def _next(self, c: Candidate):
        """One worker's answer; a worker that died (killed, out of memory) is an error, not a wait forever."""
        while True:
            try:
                return self.results.get(timeout=1)
            except queue.Empty:
                dead = [p.exitcode for p in self.procs[:c.workers] if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"measuring {c.label}: a worker exited with code {dead[0]}") from None


def _serve(job_json: dict, inbox, results, barriers: dict) -> None:
    """A measuring worker: its job's data loaded once, then one candidate after another until None."""
    import torch

    from .federation import Job

    job = Job.from_json(job_json)
    data = _first_epoch_data(job)
    while (msg := inbox.get()) is not None:
        try:
            c = Candidate(**msg)
            torch.set_num_threads(c.threads)
            results.put(_train_timed(job, data, c.seed_batch, barriers[c.workers]))
        except Exception as e:  # noqa: BLE001 - sent back whole: the parent raises it with the candidate's name
            results.put(f"{type(e).__name__}: {e}")


def _first_epoch_data(job):
    """The first epoch's training samples (repeated to MAX_STEPS + 1 mini-batches if fewer), its test set, and
    the mini-batches in one of its epochs (what a step's share of the epoch's test pass is)."""
    from .federation import node_data, on_device, test_data

    cluster = job.epochs[0][2]
    x, y = on_device(node_data(job.data, job.nodes[cluster], job.options.iid, 0), job.options.device)
    steps_per_epoch = max(1, math.ceil(len(y) / job.options.batch_size))
    need = (MAX_STEPS + 1) * job.options.batch_size
    reps = math.ceil(need / len(y))   # a node with fewer samples than the steps: its data again
    x_test, y_test = on_device(test_data(job.data), job.options.device)
    return (x.repeat(reps, *([1] * (x.dim() - 1)))[:need], y.repeat(reps)[:need], x_test, y_test,
            steps_per_epoch)


def _train_timed(job, data, seed_batch: int, barrier) -> tuple[int, float, float]:
    """(seed-steps, start, end) of one worker training `seed_batch` seeds (the loop for 1), started with the
    candidate's other workers: chunks of a node's epoch of mini-batches (at most MAX_STEPS), each followed by
    its share of the epoch's test pass, until MIN_SECONDS have passed.  Every worker times the same wall-clock
    window, whatever its first mini-batch took: workers that each counted their own number of steps from a
    noisy first timing would end at different times, and the one left running alone would hide how fast they
    run together."""
    from .federation import evaluate, initial_model, local_epoch
    from .vectorised import Stack, evaluate_stack, local_epoch_stack

    x, y, x_test, y_test, per_epoch = data
    bs = job.options.batch_size
    opts = job.options.model_copy(update={"local_epochs": 1})  # one pass per chunk: the steps counted are the steps made
    loss = opts.criterion
    if seed_batch == 1:
        model = initial_model(job, 0)
        train = lambda xs, ys, seed: local_epoch(model, xs, ys, opts, seed)  # noqa: E731
        test = lambda n: evaluate(model, x_test[:n], y_test[:n], criterion=loss)  # noqa: E731
    else:
        stack = Stack([initial_model(job, s) for s in range(seed_batch)])
        seeds = list(range(seed_batch))
        train = lambda xs, ys, seed: local_epoch_stack(stack, xs, ys, opts, [seed + s for s in seeds])  # noqa: E731
        test = lambda n: evaluate_stack(stack, x_test[:n], y_test[:n], loss)  # noqa: E731
    train(x[:bs], y[:bs], 0)   # untimed: the first call's costs (allocation, kernel choice) are not a step's
    test(min(len(y_test), bs))
    chunk = max(1, min(MAX_STEPS, per_epoch))
    share = min(len(y_test), math.ceil(len(y_test) * chunk / per_epoch))
    barrier.wait()
    start, steps = time.perf_counter(), 0
    while steps == 0 or time.perf_counter() - start < MIN_SECONDS:
        train(x[bs:bs * (chunk + 1)], y[bs:bs * (chunk + 1)], 1 + steps)
        test(share)
        steps += chunk
    return seed_batch * steps, start, time.perf_counter()
