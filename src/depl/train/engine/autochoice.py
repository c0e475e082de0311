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

The measurement takes at most `SHARE` (10 %) of the job it serves: `probe` times the loop here for a moment
and estimates the job (its seeds × epochs × the loop's seed-epoch), and the measurement stops before a window
that would take it past a tenth of the job at the fastest rate measured so far, choosing among what it measured;
a job whose tenth is under `MIN_BUDGET` seconds is not measured (the loop).  Its outcome, a `Choice` with every
measured rate, the load it was measured under and the code version, is cached as JSON in `cache_dir` per
network, data shape, machine (CPU model, cores, torch version) and candidate list, so the next batch of runs on
the same machine reads it instead of measuring again — unless the load per CPU moved by more than
`LOAD_CHANGE`, an overloaded machine calmed, or the code changed (`stale`, `code_version`): then it is measured
again, and `said` hears why.
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..task.cachedir import default_cache_dir, write_whole  # noqa: F401 - default_cache_dir: part of this API
from .seeds import _start_method

MIN_SECONDS = 1.0    # each worker trains this long (a shorter window is too brief to time on a busy machine)
MAX_STEPS = 64       # mini-batches per timed chunk at most (a node's epoch, if shorter)
ROUNDS = 3           # candidates are measured in this many interleaved rounds; a rate is its rounds' median
STACKS = (4, 8, 16, 32)
MARGIN = 0.10        # a candidate must beat the loop by at least this much (relative) in every round to be picked
CACHE_VERSION = 4    # 4: measured within a share of the job, the load and code recorded with the choice
SHARE = 0.10         # the measurement takes at most this share of the job it serves (by the fastest rate measured)
MIN_BUDGET = 5.0     # seconds: a job whose share is less is not measured (pool start-up and three windows need it)
PROBE_SECONDS = 0.3  # the per-seed loop timed this long in this process to estimate the job
MIN_WINDOW = 0.25    # seconds: the shortest window a worker trains, however small the budget
LOAD_CHANGE = 0.5    # a cached choice is measured again when the load per CPU moved by more than this since


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
    load: dict = field(default_factory=dict)     # the load measured under: load average (1 min), CPUs, per CPU,
                                                 # and the loop's spread in each round
    code: str = ""                   # the measurement's code version (`code_version()`)
    budget: dict = field(default_factory=dict)   # job_seconds (by the per-seed loop), fastest_job_seconds (by the
                                                 # fastest rate measured), budget_seconds, share (of the latter),
                                                 # measured and candidates (how many), stopped (why it stopped early)
    cached: bool = field(default=False, compare=False)   # read from the cache rather than measured now
    reason: str = field(default="", compare=False)       # why it was measured now (none cached, or why not used)

    @property
    def summary(self) -> str:
        """What was measured, its spread and the share of the job it took."""
        b, rounds = self.budget, len(self.ratios.get(LOOP.label, []))
        measured = b.get("measured", len(self.rates) - 1)
        out = (f"measured the loop and {measured} of {b.get('candidates', len(self.rates) - 1)} other ways in "
               f"{rounds} round{'s' * (rounds != 1)}, {self.measured_seconds:.1f} s; the loop's spread "
               f"{self.noise:.0%} in a round")
        if b.get("fastest_job_seconds"):
            out += (f"; {b['share']:.1%} of the job (≈ {b['fastest_job_seconds']:.0f} s at the fastest rate "
                    f"measured, {b['job_seconds']:.0f} s by the loop; budget {b['budget_seconds']:.1f} s)")
        if b.get("stopped"):
            out += f"; stopped early: {b['stopped']}"
        ld = self.load
        if ld:
            out += f"; load {ld['loadavg']:.1f} on {ld['cpus']} CPUs"
        return out

    @property
    def why(self) -> str:
        """Why this pick: its rate against the loop's, or why the loop was kept."""
        loop, rounds = self.loop_rate, len(self.ratios.get(LOOP.label, []))
        if not rounds:
            return "the per-seed loop: no round measured" + (" (the job too short)" if self.budget.get("skipped")
                                                             else " within the budget")
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
                "key": self.key, "measured_seconds": self.measured_seconds, "load": self.load, "code": self.code,
                "budget": self.budget}

    @classmethod
    def from_json(cls, d: dict) -> "Choice":
        return cls(Candidate(**d["picked"]), {k: float(v) for k, v in d["rates"].items()}, float(d["loop_rate"]),
                   d["key"], float(d["measured_seconds"]),
                   {k: [float(x) for x in v] for k, v in d["ratios"].items()}, float(d["margin"]), float(d["noise"]),
                   dict(d["load"]), str(d["code"]), dict(d["budget"]), cached=True)


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
    some.  Seeds that draw their own data of sizes that may differ (`Job.stacks` false) have no tensor to
    stack: they train one by one, so only the candidates of one seed per stack (the loop, on one or more
    workers) are left.  Draws of the same sizes stack (`vectorised.StackData`); a stack's mini-batch costs the
    same whatever samples it holds, so its candidates are measured on the first seed's data."""
    cands = default_candidates(n_seeds, cores)
    if getattr(job, "stacks", True):
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


def code_version() -> str:
    """depl's version, `CACHE_VERSION` and a digest of the code measured and measuring (this module and the
    stacks', `vectorised.py`): a choice cached by other code is measured again."""
    from importlib.metadata import PackageNotFoundError, version

    try:  # not `depl.__version__`: the package's own module would reach the layers above (its load_model)
        __version__ = version("depl")
    except PackageNotFoundError:
        __version__ = "unknown"

    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("autochoice.py", "vectorised.py"):
        h.update((here / name).read_bytes())
    return f"{__version__}/{CACHE_VERSION}/{h.hexdigest()[:12]}"


def load_now() -> tuple[float, int]:
    """The machine's load average over the last minute and its CPUs (the load counts every CPU's runnable tasks)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average here
        load = 0.0
    return load, os.cpu_count() or 1


def stale(then: dict, now: tuple[float, int]) -> str | None:
    """Why a choice measured under the load `then` is not to be used under the load `now` = (load, CPUs), or
    None: the load per CPU moved by more than `LOAD_CHANGE`, or the machine was overloaded (load above its CPUs)
    and is not any more."""
    if not then:
        return "no load recorded with it"
    load, cpus = now
    per, was = load / cpus, then["per_cpu"]
    said = (f"measured under load {then['loadavg']:.1f} on {then['cpus']} CPUs ({was:.2f} per CPU), now "
            f"{load:.1f} on {cpus} ({per:.2f} per CPU)")
    if abs(per - was) > LOAD_CHANGE:
        return f"{said}: moved by more than {LOAD_CHANGE}"
    if was > 1 and per <= 1:
        return f"{said}: it was overloaded then and is not now"
    return None


@dataclass
class Estimate:
    """The job's time by the per-seed loop in this process, from a short probe of it."""

    seconds: float         # the job: its seed-epochs by the loop
    seed_epochs: int
    step_seconds: float    # one mini-batch of the loop
    test_seconds: float    # one epoch's test pass
    probe_seconds: float   # what the probe took (data loaded for it included)
    rate: float = 0.0      # the loop's seed-steps per second, a step's share of the test pass included


def probe(job, seeds: int, clock: Callable[[], float] = time.perf_counter, data=None) -> Estimate:
    """Time the per-seed loop here for `PROBE_SECONDS` (after an untimed mini-batch) and a slice of its test
    pass, and estimate the job from it: `seeds` × each epoch's mini-batches over its cluster's nodes and one
    test pass (every version as costly as the first: an estimate from above for pruned ones).  `data`: the
    job's `_first_epoch_data`, loaded before the clock starts (the job loads and keeps it anyway: `node_data`)."""
    # depl.train.engine.federation imports torch
    from .federation import evaluate, initial_model, local_epoch

    import torch

    x, y, x_test, y_test, per_epoch = data or _first_epoch_data(job)
    t0 = clock()
    bs = job.options.batch_size
    model = initial_model(job, 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as the loop trains (one thread; more wait for each other on a busy machine)
    opts = job.options.model_copy(update={"local_epochs": 1})  # one pass a step: the steps counted are those made
    try:
        local_epoch(model, x[:bs], y[:bs], opts, 0)
        start, steps = clock(), 0
        while steps == 0 or clock() - start < PROBE_SECONDS:
            i = 1 + steps % MAX_STEPS
            local_epoch(model, x[bs * i:bs * (i + 1)], y[bs * i:bs * (i + 1)], opts, 1 + steps)
            steps += 1
        step = (clock() - start) / steps * job.options.local_epochs
        n = min(len(y_test), 4 * bs)
        t = clock()
        evaluate(model, x_test[:n], y_test[:n], criterion=opts.criterion)
        test = (clock() - t) * len(y_test) / n
    finally:
        torch.set_num_threads(threads)
    nodes0 = job.nodes[job.epochs[0][2]]
    samples = per_epoch * bs * nodes0   # the training samples over the first cluster's nodes (about)
    seed_epoch = [job.nodes[c] * math.ceil(samples / job.nodes[c] / bs) * step + test for _, _, c in job.epochs]
    return Estimate(seeds * sum(seed_epoch), seeds * len(job.epochs), step, test, clock() - t0,
                    1 / (step + test / per_epoch))


def choose(job, n_seeds: int, candidates: list[Candidate] | None = None,
           cache_dir: str | os.PathLike | None = None, *, margin: float = MARGIN,
           said: Callable[[str], None] | None = None, todo: int | None = None, share: float | None = SHARE,
           min_budget: float = MIN_BUDGET, clock: Callable[[], float] = time.perf_counter,
           load: Callable[[], tuple[float, int]] = load_now, pool=None) -> Choice:
    """The fastest way to train `n_seeds` seeds of `job` here that beats the per-seed loop by `margin` in every
    round (else the loop): measured, or read from `cache_dir`'s cache when it was measured by this code under
    a load like now's (`stale`).  The loop is a candidate whether listed or not.  `said(text)` is told before
    a measurement starts (it takes a while), why, and what it measured.

    `todo`: the seeds the job trains in all [default n_seeds]; the measurement takes at most `share` of the
    job's time at the fastest rate measured so far (`probe` first estimates it by the loop), and none at all
    (the loop, not cached) when that share is under `min_budget` seconds; `share` None measures in full.
    `clock`, `load` and `pool` (a `_Pool`'s `rate`/context, for given rates) are injectable for tests."""
    cands = candidates or candidates_for(job, n_seeds)
    cands = cands if LOOP in cands else [LOOP, *cands]
    cores = usable_cores()
    for c in cands:
        if min(c.seed_batch, c.workers, c.threads) < 1 or c.workers * c.threads > cores:
            raise ValueError(f"candidate {c.label}: needs 1 ≤ seed batch, workers, threads and workers × threads ≤ "
                             f"{cores} cores")
    key = {"job": job_key(job), "machine": machine(), "candidates": [asdict(c) for c in cands], "margin": margin}
    path = cache_file(cache_dir, key) if cache_dir is not None else None
    now = load()
    reason = "none cached" if path is not None else "no cache"
    if path is not None and path.exists():
        cached, why_not = _read(path, key, now)
        if cached is not None:
            return cached
        reason = f"the cached choice is not used: {why_not}"
    # not costs of measuring: the job's own first data, kept (`node_data`), and torch's optimiser machinery
    # (torch.optim imports torch._dynamo lazily, seconds), which the job's first mini-batch imports anyway
    import torch._dynamo  # noqa: F401

    data = _first_epoch_data(job)
    t0 = clock()
    est = probe(job, todo or n_seeds, clock, data) if share is not None else None
    if est is not None and share * est.seconds < min_budget:
        rate = est.rate
        ld = {"loadavg": now[0], "cpus": now[1], "per_cpu": now[0] / now[1], "spread": []}
        return Choice(LOOP, {LOOP.label: rate}, rate, key, clock() - t0, {LOOP.label: []}, margin, 0.0, ld,
                      code_version(), {"job_seconds": est.seconds, "budget_seconds": share * est.seconds,
                                       "skipped": True, "measured": 0, "candidates": len(cands) - 1},
                      reason=f"the job ≈ {est.seconds:.0f} s by the per-seed loop ({est.seed_epochs} seed-epochs, "
                             f"probed in {est.probe_seconds:.1f} s): {share:.0%} of it, "
                             f"{share * est.seconds:.1f} s, is under the {min_budget:.0f} s a measurement needs")
    if said is not None:
        said(f"measuring up to {len(cands)} ways to train {n_seeds} seeds on this machine ({key['machine']['cpu']}, "
             f"{cores} cores, load {now[0]:.1f}), {ROUNDS} rounds"
             + (f", within {share:.0%} of the job (≈ {est.seconds:.0f} s by the per-seed loop)" if est else "")
             + f"; {reason}" + (f" (cache in {path.parent})" if path is not None else ""))
    choice = measure(job, cands, key, margin, est=est, share=share, clock=clock, t0=t0, load=now,
                     pool=pool or _Pool(max(c.workers for c in cands), job, data))
    choice = replace(choice, reason=reason)
    if not choice.ratios[LOOP.label] and est is not None:   # no round fit: the loop's rate is the probe's
        choice = replace(choice, rates={LOOP.label: est.rate}, loop_rate=est.rate)
    if said is not None:
        said(choice.summary)
    # two runs choosing at once each write a complete file; nothing measured (the budget spent before a
    # round), nothing cached
    if path is not None and choice.ratios[LOOP.label]:
        write_whole(path, lambda tmp: tmp.write_text(json.dumps(choice.to_json(), indent=1)))
    return choice


def _read(path: Path, key: dict, now: tuple[float, int]) -> tuple[Choice | None, str]:
    """The cached choice, or None and why not: the file is unreadable, holds another key, was measured by
    other code, or under another load (`stale`)."""
    try:
        d = json.loads(path.read_text())
        if d.get("version") != CACHE_VERSION or d.get("code") != code_version():
            return None, f"measured by other code ({d.get('code') or 'version ' + str(d.get('version'))}, now " \
                         f"{code_version()})"
        if d.get("key") != key:
            return None, "its file holds another network, data shape or machine"
        choice = Choice.from_json(d)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"its file {path} is unreadable ({type(e).__name__})"
    why = stale(choice.load, now)
    return (None, why) if why else (choice, "")


class _Budget:
    """The share of the job a measurement may take: `share` × the job's seconds at the fastest rate measured so
    far (the loop's estimate scaled by the best ratio to the loop), from `t0` on `clock`."""

    def __init__(self, est: Estimate | None, share: float | None, clock, t0: float):
        self.est, self.share, self.clock, self.t0 = est, share, clock, t0
        self.best = 1.0         # the fastest rate measured, relative to the loop's
        self.overhead = 0.5     # a window's cost beyond its length (messages, warm-up step): the most seen

    @property
    def job_seconds(self) -> float | None:
        return None if self.est is None else self.est.seconds / self.best

    @property
    def seconds(self) -> float:
        return math.inf if self.est is None else self.share * self.job_seconds

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def allows(self, windows: int, window: float) -> bool:
        return self.elapsed() + windows * (window + self.overhead) <= self.seconds

    def timed(self, rate: Callable[[Candidate, float], float], c: Candidate, window: float) -> float:
        t = self.clock()
        got = rate(c, window)
        self.overhead = max(self.overhead, self.clock() - t - window)
        return got


def measure(job, candidates: list[Candidate], key: dict, margin: float = MARGIN, *, est: Estimate | None = None,
            share: float | None = None, clock: Callable[[], float] = time.perf_counter, t0: float | None = None,
            load: tuple[float, int] | None = None, pool=None) -> Choice:
    """Every candidate's rate, the median of its interleaved rounds, on a pool of spawned workers; each round's
    candidates measured between two measurements of the loop, against which they are compared.  With `est`,
    within `share` of the job: a window is measured only if it (and the round's closing loop) fits; round 1
    cut short keeps what it measured, a later round cut short is dropped; the rest are not measured."""
    t0 = clock() if t0 is None else t0
    budget = _Budget(est, share, clock, t0)
    rounds: list[dict[Candidate, float]] = []   # per round: candidate → rate
    loops: list[tuple[float, float]] = []       # per round: the loop before and after its candidates
    others = first_round_order([c for c in candidates if c != LOOP])
    n = max(c.workers for c in candidates)
    stopped = None
    with (pool or _Pool(n, job, _first_epoch_data(job))) as p:
        window = MIN_SECONDS
        # untimed, and not a window's cost: the workers start (imports, data) and their first window runs slow
        # (caches, allocator, kernels)
        p.rate(Candidate(1, n), MIN_WINDOW if est is not None else MIN_SECONDS)
        if est is not None:   # the windows of a full first round in half of what is left
            window = min(MIN_SECONDS, max(MIN_WINDOW, (budget.seconds - budget.elapsed()) / 2 / (len(others) + 2)
                                          - budget.overhead))
        for r in range(ROUNDS):
            todo = others if r == 0 else _contenders(rounds, loops, margin)
            if r and not todo:   # nothing can beat the loop by the margin any more: no round would change that
                break
            if not budget.allows(3 if r == 0 else 2 + len(todo), window):
                stopped = (f"round {r + 1} would pass the budget ({budget.seconds:.1f} s, "
                           f"{budget.elapsed():.1f} s spent)")
                break
            before = budget.timed(p.rate, LOOP, window)
            rates = {}
            for c in todo:
                if not budget.allows(2, window):   # this window and the closing loop's
                    stopped = f"{len(todo) - len(rates)} of round {r + 1}'s ways left: the budget " \
                              f"({budget.seconds:.1f} s) was near"
                    break
                rates[c] = budget.timed(p.rate, c, window)
                budget.best = max(budget.best, rates[c] / before)
            if stopped and r > 0:   # a later round cut short: not every contender in it, dropped
                break
            loops.append((before, budget.timed(p.rate, LOOP, window)))
            rounds.append(rates)
            if stopped:
                break
    seconds = budget.elapsed()
    ld = load or load_now()
    spread = [max(a, b) / min(a, b) - 1 for a, b in loops]
    b = {"measured": len({c for got in rounds for c in got}), "candidates": len(others), "stopped": stopped,
         "window": window}
    if est is not None:
        b.update(job_seconds=est.seconds, fastest_job_seconds=budget.job_seconds, budget_seconds=budget.seconds,
                 share=seconds / budget.job_seconds)
    choice = decide(candidates, rounds, loops, key, margin, seconds)
    return replace(choice, load={"loadavg": ld[0], "cpus": ld[1], "per_cpu": ld[0] / ld[1], "spread": spread},
                   code=code_version(), budget=b)


def decide(candidates: list[Candidate], rounds: list[dict[Candidate, float]], loops: list[tuple[float, float]],
           key: dict, margin: float = MARGIN, seconds: float = 0.0) -> Choice:
    """The pick from measured rounds: the fastest candidate (median of its rounds) among those measured in every
    round and at least 1 + max(margin, the loop's spread) times the loop in each; else the loop (also when no
    round was measured).  A candidate measured in no round has no rate."""
    noise = _noise(loops)
    need = 1 + max(margin, noise)
    loop_by_round = [(a + b) / 2 for a, b in loops]
    ratios = {c: [got[c] / loop for got, loop in zip(rounds, loop_by_round) if c in got] for c in candidates
              if c != LOOP and any(c in got for got in rounds)}
    rates = {c: statistics.median(got[c] for got in rounds if c in got) for c in ratios}
    rates[LOOP] = statistics.median(loop_by_round) if loops else math.nan
    ratios[LOOP] = [1.0] * len(rounds)
    fit = [c for c, r in ratios.items() if c != LOOP and rounds and len(r) == len(rounds) and min(r) >= need]
    picked = max(fit, key=lambda c: rates[c]) if fit else LOOP
    order = [c for c in candidates if c in rates]
    return Choice(picked, {c.label: rates[c] for c in order}, rates[LOOP], key, seconds,
                  {c.label: ratios[c] for c in order}, max(margin, noise), noise)


def first_round_order(cands: list[Candidate]) -> list[Candidate]:
    """The order of a first round: one of each kind (workers × threads: several workers first, threads last —
    one worker with several threads waits on the others' cores under load) in turn, so that a round the budget
    cuts short has measured every kind.  Within a kind its largest stack comes first — the one that trains the
    most seeds per operation, each worker's whole share where the job has no more seeds than the largest stack,
    so the Python and kernel-launch cost of a step is paid once for them all — then the rest from the smallest
    (the loop) up: the two ends of the range before its middle."""
    kinds: dict[tuple[int, int], list[Candidate]] = {}
    for c in sorted(cands, key=lambda c: (c.threads, -c.workers, c.seed_batch)):
        kinds.setdefault((c.workers, c.threads), []).append(c)
    out, queues = [], [q[-1:] + q[:-1] for q in kinds.values()]   # each kind's largest stack, then from the loop up
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out


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
    """Worker processes that each train a candidate's stack for a few mini-batches when told to: forked with the
    job's data when this process has run torch on one thread only (at once, as `seeds.run_on_processes` starts
    its workers), else spawned (a forked copy of a threaded parent cannot set its own threads safely; a
    spawned worker imports torch and loads the data itself, seconds each on a busy machine)."""

    def __init__(self, n: int, job, data):
        import torch

        ctx = mp.get_context(_start_method(torch.get_num_threads()))
        args = (job, data) if ctx.get_start_method() == "fork" else (job.to_json(), None)
        self.results = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(n)]
        # a candidate's workers start timing together, so that their steps overlap as a run's would
        # (held here: a spawned worker reopens them by name after the parent has moved on)
        self.barriers = {w: ctx.Barrier(w) for w in range(1, n + 1)}
        self.procs = [ctx.Process(target=_serve, args=(*args, box, self.results, self.barriers), daemon=True)
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

    def rate(self, c: Candidate, window: float = MIN_SECONDS) -> float:
        """Seed-steps per second of the candidate's workers together, each training for `window` seconds from
        a common start."""
        for box in self.inboxes[:c.workers]:
            box.put({**asdict(c), "window": window})
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


def _serve(job, data, inbox, results, barriers: dict) -> None:
    """A measuring worker: its job's data (loaded here when spawned: `job` is then its JSON), then one candidate
    after another until None."""
    import torch

    # depl.train.engine.federation imports torch
    from .federation import Job

    if isinstance(job, dict):
        job = Job.from_json(job)
    data = data or _first_epoch_data(job)
    while (msg := inbox.get()) is not None:
        try:
            window = msg.pop("window")
            c = Candidate(**msg)
            torch.set_num_threads(c.threads)
            results.put(_train_timed(job, data, c.seed_batch, barriers[c.workers], window))
        except Exception as e:  # noqa: BLE001 - sent back whole: the parent raises it with the candidate's name
            results.put(f"{type(e).__name__}: {e}")


def _first_epoch_data(job):
    """The first epoch's training samples (repeated to MAX_STEPS + 1 mini-batches if fewer), its test set, and
    the mini-batches in one of its epochs (what a step's share of the epoch's test pass is)."""
    # depl.train.engine.federation imports torch
    from .federation import node_data, on_device, test_data

    cluster = job.epochs[0][2]
    x, y = on_device(node_data(job.data, job.nodes[cluster], job.options.iid, 0), job.options.device)
    steps_per_epoch = max(1, math.ceil(len(y) / job.options.batch_size))
    need = (MAX_STEPS + 1) * job.options.batch_size
    reps = math.ceil(need / len(y))   # a node with fewer samples than the steps: its data again
    x_test, y_test = on_device(test_data(job.data), job.options.device)
    return _rows_again(x, reps)[:need], _rows_again(y, reps)[:need], x_test, y_test, steps_per_epoch


def _rows_again(t, reps: int):
    """`t` repeated `reps` times along its first dimension (its samples) only, whatever its shape: inputs of any
    shape, targets (n,) or a regression's (n, d) ((n, 1) beside an (n, 1) output).  `Tensor.repeat` takes a
    count per dimension: one count alone fits 1-D tensors only."""
    return t.repeat(reps, *([1] * (t.dim() - 1)))


def _train_timed(job, data, seed_batch: int, barrier, window: float = MIN_SECONDS) -> tuple[int, float, float]:
    """(seed-steps, start, end) of one worker training `seed_batch` seeds (the loop for 1), started with the
    candidate's other workers: chunks of a node's epoch of mini-batches (at most MAX_STEPS), each followed by
    its share of the epoch's test pass, until `window` seconds have passed; a chunk is at most a quarter of
    the window by the untimed first mini-batch's time (a stack of 32 seeds' 64 mini-batches would otherwise
    run many windows past it).  Every worker times the same wall-clock
    window, whatever its first mini-batch took: workers that each counted their own number of steps from a
    noisy first timing would end at different times, and the one left running alone would hide how fast they
    run together."""
    # depl.train.engine.federation and depl.train.engine.vectorised import torch
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
    t = time.perf_counter()
    train(x[:bs], y[:bs], 0)   # untimed: the first call's costs (allocation, kernel choice) are not a step's
    first = time.perf_counter() - t
    test(min(len(y_test), bs))
    chunk = max(1, min(MAX_STEPS, per_epoch, int(window / 4 / max(first, 1e-6))))
    share = min(len(y_test), math.ceil(len(y_test) * chunk / per_epoch))
    barrier.wait()
    start, steps = time.perf_counter(), 0
    while steps == 0 or time.perf_counter() - start < window:
        train(x[bs:bs * (chunk + 1)], y[bs:bs * (chunk + 1)], 1 + steps)
        test(share)
        steps += chunk
    return seed_batch * steps, start, time.perf_counter()
