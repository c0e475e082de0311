"""The training workflows: a plan run for real over seeds (`run`: the local back end, Flower's simulation
engine or a Flower deployment), the closed loop (`run_adaptive`), and profiling (`profile`).

Each comes in two steps, so that a caller can say what is about to happen between them: `prepare_*` checks
everything and registers the run in its store (a refused run writes nothing), `train_*` trains; the one-call
form does both. The test loss after every epoch goes to the store, so a run resumes where it stopped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .common import Training, check_training, open_store, run_seeds, seed_range, start_training
from .errors import BadInput, ExternalFailure, as_bad_input, training_errors
from ..gap import measure
from ..plan import Plan
from ..scenario import load_scenario
from ..store import Store
from ..train.task.custom import CodeRefused
from ..train.task.source import JobError
from ..train.task.data import check_draws
from ..train.apps.fleet_gateway import DeploymentError, check_connection
from ..train.engine.seeds import DEFAULT_SEED_BATCH
from ..train.engine import execute, profile as prof
from ..train.engine.federation import job_from_plan
from ..train.task.models import default_keep, list_run, ModelKeeper, models_folder, plan_summary
from ..train.loops import adaptive as ad
from ..train.engine.execute import run_id_for
from ..adaptive import check_certificate

if TYPE_CHECKING:
    import numpy as np

    from ..scenario import Scenario

BACKENDS = ("local", "flower")
RULES = ("slack", "conditional")  # the closed loop's decisions (docs/adaptive.md)
MAX_SLOW = 1e6  # a cluster a million times slower (or faster) than planned is as far as a rehearsal goes

# progress(seed, epoch, test loss) after every epoch a seed trains
EpochProgress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class PlanRun:
    """A plan's run over seeds, registered in its store and ready to train (`prepare_run`)."""

    plan_file: Path
    plan: "Plan"
    job: Any                    # depl.train.engine.federation.Job
    store: "Store"
    run_id: str
    seeds: tuple[int, ...]
    backend: str
    device: str
    out: Path
    superlink: Optional[str] = None
    keep_models: str = "all"    # none, best or all: the seeds' final models kept in OUT/models/RUN_ID

    @property
    def epochs(self) -> int:
        return len(self.job.epochs)

    def done_epochs(self) -> int:
        """Epochs the store has already (a diverged seed is done: it trains no further epoch)."""
        gone = self.store.diverged(self.run_id)
        return sum(self.epochs if s in gone else min(self.store.done_epochs(self.run_id, s), self.epochs)
                   for s in self.seeds)


@dataclass(frozen=True)
class RunResult:
    """A plan's run, trained: its store (read-only where Flower's ServerApp wrote it), and what `flwr run`
    printed for a deployment."""

    run_id: str
    plan: "Plan"
    store: "Store"
    backend: str
    seconds: float
    flwr_output: str = ""
    seed_training: Any = None   # the local back end: how its seeds trained (depl.train.backends.executors.Decision)
    models: Optional[Path] = None   # where the run's final models are kept (None: --keep-models none, or Flower)
    models_written: tuple[int, ...] = ()   # the seeds whose model this call wrote
    seeds: tuple[int, ...] = ()
    unkept: tuple[int, ...] = ()   # seeds finished before this call whose model no call kept (--keep-models none)

    def diverged(self) -> dict[int, int]:
        """The seeds of this run whose losses went non-finite, each with its epoch where it did."""
        gone = self.store.diverged(self.run_id)
        return {s: gone[s] for s in self.seeds if s in gone}


def check_backend(backend: str, superlink: Optional[str], insecure: bool, ray_address: Optional[str]) -> None:
    """The back end's options, refused where they do not apply; a SuperLink connection that cannot be used is
    refused before any work."""
    if backend not in BACKENDS:
        raise BadInput(f"--backend {backend!r}: choose {' or '.join(BACKENDS)}")
    if ray_address and backend != "local":
        raise BadInput("--ray-address spreads the local back end's seed batches; it does not apply to --backend flower")
    if superlink and backend != "flower":
        raise BadInput("--superlink needs --backend flower")
    if insecure and not superlink:
        raise BadInput("--insecure applies to --superlink only (the simulation's SuperLink is on 127.0.0.1, "
                       "for this run)")
    if superlink:
        with as_bad_input(DeploymentError):
            check_connection(superlink, insecure)


def prepare_run(plan_file: str | Path, seeds: int = 1, first_seed: int = 0, *, backend: str = "local",
                store: Optional[str] = None, out: str | Path = Path("depl-runs"), training: Training = Training(),
                superlink: Optional[str] = None, insecure: bool = False, keep_models: Optional[str] = None) -> PlanRun:
    """Check the options and the plan, and register the run in its store (`store` [default: OUT/runs.sqlite]).
    `keep_models`: none, best or all of the seeds' final models kept in OUT/models/RUN_ID [default: all for up
    to 16 seeds, best above]."""
    plan_file, out = Path(plan_file), Path(out)
    check_backend(backend, superlink, insecure, training.ray_address)
    check_training(training, backend)
    dev = start_training(training.threads, training.device)  # the `train` extra, before what needs torch
    keep_models = check_keep(keep_models, seeds, backend)

    with as_bad_input(*training_errors()):
        p = Plan.load(plan_file)
        job = job_from_plan(p, dev)
        st = open_store(store, out)
        run_id = execute.run_id_for(job, backend)
        execute.register(st, run_id, "plan", job, {"backend": backend, "plan": p.to_json()})
    return PlanRun(plan_file, p, job, st, run_id, tuple(seed_range(first_seed, seeds)), backend, dev, out, superlink,
                   keep_models)


KEEP_MODELS = ("none", "best", "all")


def check_keep(keep: Optional[str], seeds: int, backend: str) -> str:
    """--keep-models, or its default for `seeds` seeds (all up to 16, best above)."""
    if keep is not None and keep not in KEEP_MODELS:
        raise BadInput(f"--keep-models {keep!r}: choose {', '.join(KEEP_MODELS)}")
    return keep or default_keep(seeds)


def train_run(r: PlanRun, training: Training = Training(), progress: Optional[EpochProgress] = None,
              said: Optional[Callable[[str], None]] = None) -> RunResult:
    """Train every pending seed of `r` on its back end; progress(seed, epoch, test loss) after every epoch (not
    for a deployment, whose ServerApp runs elsewhere); said(text): the local back end's line on how its seeds
    train (`run_seeds`)."""
    t0 = time.perf_counter()
    keeper = model_keeper(r)
    before = ()   # seeds this store finished before this call (each kept its model then, or never will)
    if keeper is not None:
        pending, gone = set(execute.pending(r.store, r.run_id, r.job, list(r.seeds))), r.store.diverged(r.run_id)
        before = tuple(s for s in r.seeds if s not in pending and s not in gone)
    st, flwr, how = backend_step(r, training, progress or (lambda seed, epoch, loss: None), said, keeper)

    folder = None if r.keep_models == "none" else models_folder(r.out, r.run_id)  # Flower's: its ServerApp's
    kept = {m["seed"] for m in list_run(keeper.folder)} if before else set()
    return RunResult(r.run_id, r.plan, st, r.backend, time.perf_counter() - t0, flwr, how, folder,
                     () if keeper is None else tuple(keeper.written), r.seeds, tuple(s for s in before if s not in kept))


def model_keeper(r: "PlanRun | AdaptiveRun"):
    """What keeps the run's final models (depl.train.task.models.ModelKeeper), or None (--keep-models none).  On the
    Flower back end the ServerApp keeps them (the app's run config says where): None here."""
    if r.keep_models == "none" or getattr(r, "backend", "local") != "local" or getattr(r, "superlink", None):
        return None

    with as_bad_input(OSError, prefix=f"{r.plan_file}: "):
        summary = plan_summary(r.plan_file, r.plan)
    return ModelKeeper(r.out, r.run_id, r.job, summary, r.keep_models)


def backend_step(r: PlanRun, training: Training, progress: EpochProgress,
                 said: Optional[Callable[[str], None]] = None, keep: Optional[Callable] = None
                 ) -> tuple["Store", str, Any]:
    """The one place the back end is chosen: (the store to read the run from, what `flwr run` printed, how the
    local back end trained the seeds)."""

    if r.superlink:
        return (*run_deployment(r), None)
    if r.backend == "local":
        how = run_seeds(r.store, [(r.run_id, r.job, list(r.seeds))], training,
                        lambda rid, seed, epoch, result: progress(seed, epoch, result.test_loss), said, keep)
        return r.store, "", how
    if left := execute.pending(r.store, r.run_id, r.job, list(r.seeds)):
        with as_bad_input(*training_errors()):  # Flower's apps train elsewhere: a bad draw is told here, if cheap
            check_draws([(r.job.data, left)])
        st = hand_over(r.store)
        run_flower_simulation(r, st, progress, training.threads or 1)
        return st, "", None
    return r.store, "", None


def run(plan_file: str | Path, seeds: int = 1, first_seed: int = 0, *, backend: str = "local",
        store: Optional[str] = None, out: str | Path = Path("depl-runs"), training: Training = Training(),
        superlink: Optional[str] = None, insecure: bool = False,
        progress: Optional[EpochProgress] = None, keep_models: Optional[str] = None) -> RunResult:
    """Train a plan for real over seeds F..F+N-1 (`depl run`); resumes; keeps the final models (`keep_models`)."""
    r = prepare_run(plan_file, seeds, first_seed, backend=backend, store=store, out=out, training=training,
                    superlink=superlink, insecure=insecure, keep_models=keep_models)
    return train_run(r, training, progress)


def hand_over(st):
    """Close our writer and keep reading: the ServerApp, another process, is the store's one writer now."""
    path = st.path
    st.close()
    return Store(path, readonly=True)


def flower_app_folder(r: PlanRun) -> Path:
    """Where the run's Flower app is written (the run folder's flower-app)."""
    return r.out / "flower-app"


def run_flower_simulation(r: PlanRun, st, progress: EpochProgress, threads: int) -> None:
    """The app `depl export-app` writes, run by `flwr run` on Flower's simulation engine."""
    # Flower only where a run uses it: the local back end trains where flwr is not installed (a GPU image)
    from ..train.apps.flower_app import export_app, simulate_app

    app = export_app(r.plan_file, flower_app_folder(r), len(r.seeds), r.seeds[0], str(st.path), r.device,
                     r.keep_models, r.out)
    try:
        simulate_app(app, r.out, max(r.job.nodes.values()), progress, threads, device=r.device)
    except RuntimeError as e:
        raise ExternalFailure(str(e)) from None
    left = execute.pending(st, r.run_id, r.job, list(r.seeds))
    if left:
        raise ExternalFailure(f"flwr run ended but seeds {left} are unfinished; Flower's logs: {r.out / 'flower'}")


def run_deployment(r: PlanRun) -> tuple["Store", str]:
    """Write the Flower app folder and submit it with `flwr run`; the ServerApp writes the store."""
    from ..train.apps.flower_app import export_app, run_deployment as submit   # Flower only where a run uses it

    app = export_app(r.plan_file, flower_app_folder(r), len(r.seeds), r.seeds[0], str(r.store.path), r.device,
                     r.keep_models, r.out)
    st = hand_over(r.store)
    done = submit(app, r.superlink)
    if done.returncode != 0:
        raise ExternalFailure(f"flwr run failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return st, done.stdout


def parse_slow(values: Optional[list[str]]) -> dict[str, float]:
    """CLUSTER:FACTOR texts (the cluster's epochs take FACTOR times their planned time) as {cluster: factor}."""
    out = {}
    for v in values or []:
        name, _, f = str(v).rpartition(":")
        try:
            factor = float(f)
        except ValueError:
            factor = math.nan
        # a factor beyond MAX_SLOW (1e308) passed, and broke the re-planning view (capacity / FACTOR = 0) once the
        # run had started; NaN fails every comparison
        if not name or not 1 / MAX_SLOW <= factor <= MAX_SLOW:
            raise BadInput(f"--slow {v!r}: expected CLUSTER:FACTOR with a factor from {1 / MAX_SLOW:g} to "
                           f"{MAX_SLOW:g}, e.g. far-edge:1.5")
        out[name] = factor
    return out


@dataclass(frozen=True)
class AdaptiveRun:
    """A closed-loop run registered in its store, ready to train (`prepare_adaptive`): what every seed's
    epoch-0 decision finds (`initial`, the same for all), the slack a stop may spend (`slack_record`: δ and its
    source) and the validation–test gap it allows for (`gap`: measured, or None: the sampling model)."""

    plan_file: Path
    plan: "Plan"
    job: Any
    store: "Store"
    run_id: str
    seeds: tuple[int, ...]
    todo: tuple[int, ...]       # the seeds not finished yet
    slow: dict = field(hash=False)
    rule: str
    split_note: str
    initial: Any                # depl.adaptive's Decision at epoch 0
    slack: float
    slack_record: Any = None    # depl.adaptive.Slack
    gap: Any = None             # depl.gap.MeasuredGap, or None
    certificate: dict = field(default_factory=dict, hash=False)   # `Policy`'s certificate keywords (--certificate)
    out: Path = Path("depl-runs")
    keep_models: str = "none"   # none, best or all: each seed's model of the epoch it ended at, in OUT/models/RUN_ID

    @property
    def models(self) -> Optional[Path]:
        """Where the run's models are kept (None: --keep-models none)."""

        return None if self.keep_models == "none" else models_folder(self.out, self.run_id)


@dataclass(frozen=True)
class AdaptiveResult:
    """The closed loop's seeds, trained: final test losses, costs (NaN: none) and the count of each action."""

    run_id: str
    plan: "Plan"
    seeds: tuple[int, ...]
    finals: "np.ndarray" = field(hash=False)
    costs: "np.ndarray" = field(hash=False)
    actions: dict = field(hash=False)
    seconds: float
    spec: dict = field(default_factory=dict, hash=False)   # the run spec's `adaptive` record: δ, its source, the gap
    models: Optional[Path] = None          # where the seeds' models are kept (None: none kept)
    models_written: tuple[int, ...] = ()   # the seeds whose model was written now


def prepare_adaptive(plan_file: str | Path, seeds: list[int], *, store: Optional[str] = None,
                     out: str | Path = Path("depl-runs"),
                     training: Training = Training(), validation: Optional[float] = None,
                     slow: Optional[dict[str, float]] = None, rule: str = "slack",
                     gap_from: Optional[list[str | Path]] = None,
                     certificate: Optional[str | Path] = None, keep_models: Optional[str] = "none") -> AdaptiveRun:
    """Check the plan and `slow` (clusters of its scenario), register the closed loop's run, and find its
    epoch-0 decision. `validation`: the split the decisions see; `gap_from`: stores (or run folders) of runs that
    logged validation and test losses on the same data, the validation–test gap is measured on (None: modelled
    from sample counts); `certificate`: a `depl certify` certificate of the plan (its fresh runs certify the
    slack L − ω a stop may spend; without it, or a plan certified at a stricter ω′ by `depl plan --slack`, none)
    — docs/adaptive.md.  `keep_models`: none, best or all of the seeds' models, each of the epoch the seed ended
    at, kept in OUT/models/RUN_ID (None: all for up to 16 seeds, best above)."""
    plan_file, out, slow = Path(plan_file), Path(out), dict(slow or {})
    keep_models = check_keep(keep_models, len(seeds), "local")
    if training.executor is not None:
        raise BadInput(f"--executor {training.executor}: an adaptive run trains its stacks in this process (each "
                       "seed's rest may change on its own); the executors train open-loop runs")
    dev = start_training(training.threads, training.device)

    with as_bad_input(*training_errors()):
        p = Plan.load(plan_file)
        if not p.feasible or not p.epochs:
            raise BadInput(f"{plan_file}: the plan is infeasible or empty; nothing to run")
        check_slow(slow, p.scenario_object())
        job = ad.adaptive_job(p, dev, validation)
        gap = measured_gap(gap_from, p, job)
        cert = read_certificate(certificate, p, dev)
        # what every seed's epoch-0 decision will find (it reads no seed), and what decides the stops: recorded
        pol = ad.policy_for(p, job, **ad.RULES[rule], gap=gap, **cert)
        d0 = pol.initial()
        st = open_store(store, out)
        run_id = ad.adaptive_run_id(job, slow, rule, gap, pol.slack_record)
        execute.register(st, run_id, "plan", job, {"backend": "local", "plan": p.to_json(),
                                                   "adaptive": {"rule": rule, "slow": slow, **pol.rule_record()}})
    todo = ad.pending(st, run_id, seeds)
    return AdaptiveRun(plan_file, p, job, st, run_id, tuple(seeds), tuple(todo), slow, rule, ad.split_note(job), d0,
                       pol.slack, pol.slack_record, gap, cert, out, keep_models)


def read_certificate(path: Optional[str | Path], plan: "Plan", device: str) -> dict:
    """`Policy`'s keywords for `--certificate FILE`: the certificate, checked to be of this plan — its scenario,
    method, ℓmax, ω, epochs, and the run its runs were trained in (the run id of the plan's job) —, or BadInput
    (exit 2) naming the file and the field."""
    if path is None:
        return {}
    import json


    path = Path(path)
    try:
        cert = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BadInput(f"--certificate {path}: cannot read ({e.strerror or e})") from None
    except ValueError as e:
        raise BadInput(f"--certificate {path}: not JSON ({e})") from None

    try:
        checked = check_certificate(plan, cert, f"--certificate {path}")
    except ValueError as e:
        raise BadInput(str(e)) from None
    ids = {run_id_for(job_from_plan(plan, d), "local", prefix="certify") for d in {"cpu", device, "cuda"}}
    if checked.run_id not in ids:
        raise BadInput(f"--certificate {path}: run_id = {checked.run_id!r} is not a run of this plan's job "
                       f"(expected {' or '.join(sorted(ids))}): its runs trained another plan, data or code")
    return {"certificate": cert, "certificate_source": str(path)}


def measured_gap(gap_from: Optional[list[str | Path]], plan: "Plan", job: Any):
    """The validation–test gap measured on the runs of `gap_from` on the job's data, at the plan's ℓmax (None: none
    given); BadInput naming the stores when none of their runs logged both losses on this data."""
    if not gap_from:
        return None

    try:
        return measure(gap_from, plan.loss_target, job.data.to_json())
    except ValueError as e:
        raise BadInput(f"--gap-from: {e}") from None


def check_slow(slow: dict[str, float], scenario: "Scenario") -> None:
    unknown = sorted(set(slow) - {c.name for c in scenario.clusters})
    if unknown:
        raise BadInput(f"--slow {unknown[0]}: no such cluster in the plan's scenario {scenario.name!r} "
                       f"(clusters: {', '.join(c.name for c in scenario.clusters)})")


def train_adaptive(a: AdaptiveRun, seed_batch: Optional[int] = None, progress: Optional[Callable] = None) -> AdaptiveResult:
    """Train the seeds not finished yet by the closed loop, `seed_batch` [default 32, nothing measured] in one
    vectorised stack while their rests agree; progress(seed, epoch, result, decision) after every epoch."""

    seed_batch = seed_batch or DEFAULT_SEED_BATCH

    with as_bad_input(*training_errors()):
        check_draws([(a.job.data, list(a.todo))])  # every seed's own draw of your data, before any trains (if cheap)

    keeper = model_keeper(a)
    t0 = time.perf_counter()
    todo = set(a.todo)
    # batches cut from the whole seed list, not from the seeds still to do: a resumed run stacks its fresh seeds
    # as the first attempt did (their batched kernels round alike), so it resumes bit for bit
    for i in range(0, len(a.seeds), seed_batch):
        batch = [s for s in a.seeds[i:i + seed_batch] if s in todo]
        if batch:
            with as_bad_input(*training_errors()):
                ad.run_batch(a.store, a.run_id, a.job, a.plan, batch, a.slow, progress, **ad.RULES[a.rule],
                             gap=a.gap, keep=keeper, **a.certificate)
    seconds = time.perf_counter() - t0
    finals, costs, actions = ad.outcome(a.store, a.run_id, list(a.seeds))
    (run,) = [r for r in a.store.runs() if r["run_id"] == a.run_id]
    return AdaptiveResult(a.run_id, a.plan, a.seeds, finals, costs, actions, seconds, run["spec"].get("adaptive") or {},
                          a.models, () if keeper is None else tuple(keeper.written))


def run_adaptive(plan_file: str | Path, seeds: list[int], *, store: Optional[str] = None,
                 out: str | Path = Path("depl-runs"),
                 training: Training = Training(), validation: Optional[float] = None,
                 slow: Optional[dict[str, float]] = None, rule: str = "slack",
                 progress: Optional[Callable] = None, gap_from: Optional[list[str | Path]] = None,
                 certificate: Optional[str | Path] = None, keep_models: Optional[str] = "none",
                 started: Optional[Callable[[AdaptiveRun], None]] = None) -> AdaptiveResult:
    """`depl run --adaptive`: every seed trained by the closed loop, its decisions into the store; resumes.
    `started(run)`: hears the run once it is registered (`prepare_adaptive`), before any seed trains."""
    a = prepare_adaptive(plan_file, seeds, store=store, out=out, training=training, validation=validation,
                         slow=slow, rule=rule, gap_from=gap_from, certificate=certificate, keep_models=keep_models)
    if started is not None:
        started(a)
    return train_adaptive(a, training.seed_batch, progress)


@dataclass(frozen=True)
class Profiling:
    """A scenario's profiling experiments, each registered in the store as its own run (`prepare_profile`):
    `jobs` [(experiment, job, run id)], every one trained `epochs` epochs on `seeds`."""

    scenario: "Scenario"
    jobs: tuple
    store: "Store"
    seeds: tuple[int, ...]
    epochs: int

    def done_epochs(self, run_id: Optional[str] = None) -> int:
        """Epochs the store has already, of one experiment's run or of all."""
        return sum(min(self.store.done_epochs(rid, s), self.epochs) for _, _, rid in self.jobs
                   if run_id in (None, rid) for s in self.seeds)

    @property
    def total_epochs(self) -> int:
        return len(self.jobs) * len(self.seeds) * self.epochs


@dataclass(frozen=True)
class Profiled:
    """Profiling done: the experiments' runs in the store."""

    scenario: "Scenario"
    run_ids: tuple[str, ...]
    store: "Store"
    seconds: float
    seed_training: Any = None   # how the seeds trained (depl.train.backends.executors.Decision)
    seeds: tuple[int, ...] = ()

    def diverged(self) -> dict[str, dict[int, int]]:
        """Each experiment's run → its seeds of this profile whose losses went non-finite, each with the epoch."""
        out = {}
        for rid in self.run_ids:
            gone = self.store.diverged(rid)
            out[rid] = {s: gone[s] for s in self.seeds if s in gone}
        return out


def parse_fractions(text: str) -> list[float]:
    """Data fractions as `depl profile --fractions` reads them: numbers separated by commas."""
    try:   # an empty item ("1,,0.5") is a typo, not a fraction to skip
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values:
        raise BadInput(f"--fractions {text!r}: expected numbers separated by commas, e.g. 1,0.5,0.25")
    return values


def prepare_profile(scenario: str, epochs: int = 30, seeds: int = 30, first_seed: int = 0, *,
                    fractions: tuple[float, ...] = (1.0,), versions: tuple[str, ...] = (),
                    switches: tuple[str, ...] = (), datasets: tuple[str, ...] = (), nodes: int = 1,
                    store: Optional[str] = None, out: str | Path = Path("depl-runs"),
                    training: Training = Training()) -> Profiling:
    """Check the scenario and the experiments (versions from scratch at data fractions, FROM:TO:K1 switches),
    then register each in the store; a refused profile writes nothing."""
    out = Path(out)
    check_training(training)
    dev = start_training(training.threads, training.device)

    # CodeRefused (the scenario's code_dir, by default its folder) named by the scenario given
    with as_bad_input(*training_errors()), as_bad_input(CodeRefused, prefix=f"{scenario}: "):
        s = load_scenario(scenario)
        names = list(datasets) if datasets else [d.name for d in s.datasets]
        unknown = [d for d in names if d not in {x.name for x in s.datasets}]
        if unknown:
            raise JobError(f"--dataset {unknown[0]!r}: no such dataset in {s.name!r}")
        exps = prof.experiments(s, list(versions), list(fractions), [prof.parse_switch(t) for t in switches], epochs)
        jobs = []
        for exp in exps:
            job = prof.experiment_job(s, names, exp, epochs, nodes, dev)
            jobs.append((exp, job, prof.experiment_run_id(s.name, exp, job)))
        st = open_store(store, out)  # only now: a refused profile writes nothing
        for exp, job, rid in jobs:
            execute.register(st, rid, "profile", job, {"experiment": exp.to_json(), "scenario": s.name})
    # the store keys (run, seed): any seeds coexist
    return Profiling(s, tuple(jobs), st, tuple(seed_range(first_seed, seeds)), epochs)


def train_profile(p: Profiling, training: Training = Training(), progress: Optional[Callable] = None,
                  said: Optional[Callable[[str], None]] = None) -> Profiled:
    """Train every experiment's pending seeds; progress(run_id, seed, epoch, result) after every epoch; said(text):
    how the seeds train (`run_seeds`)."""
    t0 = time.perf_counter()
    how = run_seeds(p.store, [(rid, job, list(p.seeds)) for _, job, rid in p.jobs], training, progress, said)
    return Profiled(p.scenario, tuple(rid for _, _, rid in p.jobs), p.store, time.perf_counter() - t0, how, p.seeds)


def profile(scenario: str, epochs: int = 30, seeds: int = 30, first_seed: int = 0, *,
            fractions: tuple[float, ...] = (1.0,), versions: tuple[str, ...] = (), switches: tuple[str, ...] = (),
            datasets: tuple[str, ...] = (), nodes: int = 1, store: Optional[str] = None,
            out: str | Path = Path("depl-runs"), training: Training = Training(),
            progress: Optional[Callable] = None) -> Profiled:
    """Profile model versions (`depl profile`): E epochs × N seeds from scratch, at data fractions, and switch
    experiments; resumes."""
    p = prepare_profile(scenario, epochs, seeds, first_seed, fractions=fractions, versions=versions,
                        switches=switches, datasets=datasets, nodes=nodes, store=store, out=out, training=training)
    return train_profile(p, training, progress)
