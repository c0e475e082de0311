"""How to train many seeds of a job on this machine, chosen by measuring: the per-seed loop or stacks, how many
seeds per stack, how many worker processes, how many torch threads each.

Which is fastest depends on the network, the data and the CPU (its vector width, its caches, its cores, what else
runs on it), so no rule is hard-coded: before a batch of runs, `choose` trains a few mini-batches of each
`Candidate` — every worker of the candidate at once, each on its own stack of seeds, as the runs would — and keeps
the one with the most seed-steps per second of wall time.  The measurement is a few seconds (worker start-up
included); its outcome, a `Choice` with every measured rate, is cached as JSON in `cache_dir` per network, data
shape, machine (CPU model, cores, torch version) and candidate list, so the next batch of runs on the same machine
reads it instead of measuring again.

    choice = choose(job, n_seeds=32, cache_dir=run_folder)
    choice.picked        # Candidate(seed_batch=16, workers=2, threads=1)
    choice.why           # 'fastest of 11 measured: 812 seed-steps/s, 1.9× the per-seed loop (426 seed-steps/s)'

A candidate's `seed_batch` is the stack each worker trains (1: the per-seed loop, `federation.local_epoch`);
the seeds of a run are cut into such batches, so a candidate never has more busy workers than batches.
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

STEPS = 4            # timed mini-batches per worker and candidate at least (after one untimed: first-call costs)
MIN_SECONDS = 0.3    # and at least this long (a short stack's few steps are too brief to time on a busy machine)
MAX_STEPS = 64
ROUNDS = 3           # candidates are measured in this many interleaved rounds; a rate is its rounds' median
STACKS = (4, 8, 16, 32)
SLACK = 2.0          # after the first round, only candidates at least 1/SLACK of the best rate are measured again
CACHE_VERSION = 1


@dataclass(frozen=True)
class Candidate:
    seed_batch: int      # seeds per stack (1: the per-seed loop)
    workers: int         # worker processes, each training its own batch
    threads: int = 1     # torch threads per worker

    @property
    def label(self) -> str:
        how = "loop" if self.seed_batch == 1 else f"stack {self.seed_batch}"
        return f"{how} × {self.workers} worker{'s' * (self.workers > 1)} × {self.threads} thread{'s' * (self.threads > 1)}"


@dataclass(frozen=True)
class Choice:
    picked: Candidate
    rates: dict[str, float]          # candidate label → seed-steps per second, measured (median of its rounds)
    loop_rate: float                 # the per-seed loop's rate in one process, one thread (nan if not measured)
    key: dict                        # what the measurement holds for: network, data shape, machine, candidates
    measured_seconds: float          # the measurement's wall time, worker start-up included
    cached: bool = field(default=False, compare=False)   # read from the cache rather than measured now

    @property
    def why(self) -> str:
        rate = self.rates[self.picked.label]
        loop = (f", {rate / self.loop_rate:.2f}× the per-seed loop ({self.loop_rate:.0f} seed-steps/s)"
                if math.isfinite(self.loop_rate) else "")
        return f"fastest of {len(self.rates)} measured: {rate:.0f} seed-steps/s{loop}"

    def to_json(self) -> dict:
        return {"version": CACHE_VERSION, "picked": asdict(self.picked), "rates": self.rates,
                "loop_rate": self.loop_rate if math.isfinite(self.loop_rate) else None, "key": self.key,
                "measured_seconds": self.measured_seconds}

    @classmethod
    def from_json(cls, d: dict) -> "Choice":
        loop = d["loop_rate"]
        return cls(Candidate(**d["picked"]), {k: float(v) for k, v in d["rates"].items()},
                   float("nan") if loop is None else float(loop), d["key"], float(d["measured_seconds"]), cached=True)


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
           cache_dir: str | os.PathLike | None = None) -> Choice:
    """The fastest way to train `n_seeds` seeds of `job` here: measured, or read from `cache_dir`'s cache."""
    cands = candidates or default_candidates(n_seeds)
    cores = usable_cores()
    for c in cands:
        if min(c.seed_batch, c.workers, c.threads) < 1 or c.workers * c.threads > cores:
            raise ValueError(f"candidate {c.label}: needs 1 ≤ seed batch, workers, threads and workers × threads ≤ "
                             f"{cores} cores")
    key = {"job": job_key(job), "machine": machine(), "candidates": [asdict(c) for c in cands]}
    path = cache_file(cache_dir, key) if cache_dir is not None else None
    if path is not None and path.exists():
        cached = _read(path, key)
        if cached is not None:
            return cached
    choice = measure(job, cands, key)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(choice.to_json(), indent=1))
        tmp.replace(path)   # whole or absent: two runs choosing at once each write a complete file
    return choice


def _read(path: Path, key: dict) -> Choice | None:
    """The cached choice, or None when the file is unreadable or holds another key (then it is measured anew)."""
    try:
        d = json.loads(path.read_text())
        if d.get("version") != CACHE_VERSION or d.get("key") != key:
            return None
        return Choice.from_json(d)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure(job, candidates: list[Candidate], key: dict) -> Choice:
    """Every candidate's rate, the median of its interleaved rounds, on a pool of spawned workers."""
    t0 = time.perf_counter()
    loop = Candidate(1, 1, 1)
    todo = candidates if loop in candidates else [loop, *candidates]
    rounds: dict[Candidate, list[float]] = {c: [] for c in todo}
    with _Pool(max(c.workers for c in todo), job.to_json()) as pool:
        for r in range(ROUNDS):
            for c in _contenders(rounds, loop) if r else todo:
                rounds[c].append(pool.rate(c))
    rates = {c: statistics.median(r) for c, r in rounds.items()}
    picked = max(candidates, key=lambda c: rates[c])
    return Choice(picked, {c.label: rates[c] for c in candidates}, rates[loop], key, time.perf_counter() - t0)


def _contenders(rounds: dict[Candidate, list[float]], loop: Candidate) -> list[Candidate]:
    """Those measured again: the loop (its rate is reported) and every candidate within SLACK of the best so far
    (a candidate far slower cannot win, and on a busy machine a slow one can take most of the time)."""
    best = max(statistics.median(r) for r in rounds.values())
    return [c for c, r in rounds.items() if c == loop or statistics.median(r) * SLACK >= best]


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
        return sum(n for n, _, _ in got) / (max(end for _, _, end in got) - min(start for _, start, _ in got))


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
    from .federation import node_data, on_device

    cluster = job.epochs[0][2]
    x, y = on_device(node_data(job.data, job.nodes[cluster], job.options.iid, 0), job.options.device)
    need = (MAX_STEPS + 1) * job.options.batch_size
    reps = math.ceil(need / len(y))   # a node with fewer samples than the steps: its data again
    return x.repeat(reps, *([1] * (x.dim() - 1)))[:need], y.repeat(reps)[:need]


def _train_timed(job, data, seed_batch: int, barrier) -> tuple[int, float, float]:
    """(seed-steps, start, end) of one worker training `seed_batch` seeds (the loop for 1) for at least STEPS
    mini-batches and MIN_SECONDS, started with the candidate's other workers."""
    from .federation import initial_model, local_epoch
    from .vectorised import Stack, local_epoch_stack

    x, y = data
    bs = job.options.batch_size
    if seed_batch == 1:
        model = initial_model(job, 0)
        train = lambda xs, ys, seed: local_epoch(model, xs, ys, job.options, seed)  # noqa: E731
    else:
        stack = Stack([initial_model(job, s) for s in range(seed_batch)])
        seeds = list(range(seed_batch))
        train = lambda xs, ys, seed: local_epoch_stack(stack, xs, ys, job.options, [seed + s for s in seeds])  # noqa: E731
    t0 = time.perf_counter()
    train(x[:bs], y[:bs], 0)
    steps = min(MAX_STEPS, max(STEPS, math.ceil(MIN_SECONDS / (time.perf_counter() - t0))))
    barrier.wait()
    start = time.perf_counter()
    train(x[bs:bs * (steps + 1)], y[bs:bs * (steps + 1)], 1)
    return seed_batch * steps, start, time.perf_counter()
