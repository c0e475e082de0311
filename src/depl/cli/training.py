"""Training commands: run, profile, runs show, export-app, run-app (torch is imported inside each command).

Every command imports the training code inside its body, so `depl plan` and
the other planning commands work without the `train` extra.
"""

from __future__ import annotations

import math
import sys
import time
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from .console import check_output_file, choice, console, epoch_progress, fail, json_option, user_errors, warn

MAX_SEEDS = 100_000  # seeds of one command (each trains the whole plan)
MAX_SEED = 2**31 - 1  # seeds are SQLite integers and inputs of numpy's SeedSequence


class Backend(str, Enum):
    local = "local"
    flower = "flower"


class Rule(str, Enum):
    """The closed loop's decisions (docs/adaptive.md)."""

    slack = "slack"              # stops that spend the plan's slack only: rests on the open-loop certificate
    conditional = "conditional"  # also the law-conditioned stops, cuts and re-plans


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


# Where an exported Flower app's ClientApps train: a device named in advance (no `auto`: the app runs elsewhere).
AppDevice = Enum("AppDevice", [(m.name, m.value) for m in Device if m is not Device.auto], type=str)


class Kind(str, Enum):
    """The kinds of run in a store."""

    plan = "plan"
    profile = "profile"


def training_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is meant for the user (exit code 2), training's included."""
    from ..train.source import DataError

    try:
        from ..train.federation import JobError
    except ImportError:  # no `train` extra (torch): `runs show` reads a store without it, and no job was made
        return (*user_errors(), DataError)
    return (*user_errors(), DataError, JobError)


def need_training_extra() -> None:
    try:
        import torch  # noqa: F401
        import torch_pruning  # noqa: F401
    except ImportError as e:
        fail(f"real training needs the `train` extra (pip install 'depl[train]'): {e}")


def start_training(threads: int, device: str) -> str:
    """Check the `train` extra, set torch's threads, and return the torch device of `--device`."""
    need_training_extra()
    import torch

    torch.set_num_threads(max(1, threads))
    return resolve_device(device)


DEVICE_HELP = "cpu, cuda, or auto (cuda when torch sees a GPU, else cpu)"


def resolve_device(device: str) -> str:
    """The torch device of `--device`; cuda asked for but absent is bad input (exit 2)."""
    import torch

    name = device
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "none: a CPU-only build"
        fail(f"--device cuda: torch {torch.__version__} sees no CUDA device (CUDA in this build: {built}); "
             "use --device cpu or auto")
    return name


def seed_options(seed_batch: int, workers: Optional[int], ray_address: Optional[str], threads: int) -> dict:
    """The keyword arguments of `depl.train.executors.run_all` from the CLI options (shared by run, profile, validate)."""
    return dict(seed_batch=seed_batch, workers=workers, threads=threads, ray_address=ray_address)


SEED_BATCH_HELP = ("seeds trained together as one vectorised computation (1: the per-seed loop); "
                   "a seed's trajectory is deterministic for a given batching")
WORKERS_HELP = "worker processes over seed batches (default: one per core; with --ray-address, the cluster's CPUs)"
RULE_HELP = ("--adaptive: slack = stop a run once P(its test loss > ℓmax) ≤ δ = the plan's certified P − ω, no other "
             "decision but a deadline's re-plan (the guarantee rests on the open-loop certificate); conditional = also "
             "stop, cut or re-plan wherever the law conditioned on the run says the rest is no less likely to succeed "
             "(sound only if the law's conditional statements are right, which nothing certifies: docs/adaptive.md)")
VALIDATION_HELP = ("--adaptive: size of the validation split the decisions see, as a share of the plan's training "
                   "samples: fresh samples for mnist1d (default 1, up to 4), else carved out of the training samples "
                   "(default 0.1, at most 0.5)")
RAY_HELP = "train the seed batches on this Ray cluster (e.g. 127.0.0.1:6379); the store stays here"
MAX_SLOW = 1e6  # --slow: a cluster a million times slower (or faster) than planned is as far as a rehearsal goes


def check_ray_address(address: Optional[str]) -> Optional[str]:
    """--ray-address, checked as it is read (before any work): one where no cluster answers was refused only once
    the run had started (its store made, its first line printed)."""
    if address is not None:
        from ..train.ray_pool import RayError, probe

        try:
            probe(address)
        except RayError as e:
            fail(str(e))
    return address


# the options every command that trains seeds takes (one object per option: typer may share them)
THREADS = typer.Option(1, "--threads", min=1, help="torch threads per process")
DEVICE = typer.Option(Device.cpu.value, "--device", **choice(Device, "--device"), help=DEVICE_HELP)
SEED_BATCH = typer.Option(32, "--seed-batch", min=1, help=SEED_BATCH_HELP)
WORKERS = typer.Option(None, "--workers", min=1, help=WORKERS_HELP)
RAY_ADDRESS = typer.Option(None, "--ray-address", callback=check_ray_address, help=RAY_HELP)
ALLOW_CODE = typer.Option(None, "--allow-code", metavar="DIR",
                          help="a folder of your own code (net/source = MODULE:FUNCTION) that this command may import "
                          "from (repeatable; adds to $DEPL_CODE); a plan or scenario never allows its own code: "
                          "docs/security.md")


def allow_code(folders: Optional[List[Path]]) -> None:
    """--allow-code: the folders this command (and the processes it starts) may import your code from."""
    from ..train.custom import allow

    allow(folders)


def open_store(store: Optional[str], out: Path):
    """The run folder's store (or --store), the folder created first."""
    from ..store import Store, StoreError

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"--out {out}: cannot create the run folder ({e.strerror or e})") from None
    return Store(store or out / "runs.sqlite")


def _summary(store, run_id: str, title: str) -> None:
    import numpy as np
    from rich.table import Table

    losses, gone = store.losses(run_id), store.diverged(run_id)
    finals = np.array([v[-1] for s, v in losses.items() if v and s not in gone])
    if gone:
        console.print(f"{len(gone)} seeds diverged (non-finite loss; not resumed, final loss +inf): "
                      + ", ".join(f"seed {s} at epoch {k}" for s, k in list(gone.items())[:10])
                      + (" …" if len(gone) > 10 else ""), markup=False)
    if finals.size == 0:
        return
    t = Table(title=escape(title))
    for c in ("run", "seeds", "epochs", "final loss: mean", "min", "max", "99th pct"):
        t.add_column(c)
    t.add_row(run_id, str(len(finals)), str(max(len(v) for v in losses.values())), f"{finals.mean():.4f}",
              f"{finals.min():.4f}", f"{finals.max():.4f}", f"{np.percentile(finals, 99):.4f}")
    console.print(t)


def run(
    plan: Path = typer.Argument(..., help="a plan file (JSON, from `depl plan`)"),
    seeds: int = typer.Option(1, "--seeds", min=1, max=MAX_SEEDS, help="seeds 0..N-1 (with --first-seed: F..F+N-1)"),
    first_seed: int = typer.Option(0, "--first-seed", min=0, max=MAX_SEED,
                                   help="F: the first seed (new seeds for a plan already run)"),
    backend: str = typer.Option(Backend.local.value, "--backend", **choice(Backend, "--backend"),
                                    help="local (in process) or flower (Flower's simulation engine)"),
    store: Optional[str] = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]"),
    out: Path = typer.Option(Path("depl-runs"), "--out", help="the run folder (store, Flower state, Ray temp files)"),
    threads: int = THREADS,
    device: str = DEVICE,
    superlink: Optional[str] = typer.Option(
        None, "--superlink", help="flower: submit to this SuperLink connection of Flower's config.toml "
        "(a deployment, see docs/flower-deployment.md) instead of the simulation engine"),
    seed_batch: int = typer.Option(32, "--seed-batch", min=1, help="local: " + SEED_BATCH_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local: " + WORKERS_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", callback=check_ray_address,
                                              help="local: " + RAY_HELP),
    insecure: bool = typer.Option(False, "--insecure", help="--superlink: accept a connection without TLS or "
                                  "to a SuperLink's Control API over the network (docs/flower-deployment.md)"),
    adaptive: bool = typer.Option(False, "--adaptive", help="closed loop: after every epoch stop (or, --rule "
                                  "conditional, re-plan the rest) where the guarantee allows (docs/adaptive.md); local "
                                  "back end, --seed-batch seeds in one stack while their rests agree"),
    validation: Optional[float] = typer.Option(None, "--validation", min=0.01, max=4.0,
                                     help=VALIDATION_HELP),
    slow: Optional[List[str]] = typer.Option(None, "--slow", help="--adaptive: CLUSTER:FACTOR, the cluster's epochs "
                                             "take FACTOR times their planned time (a rehearsal; repeatable)"),
    rule: Optional[str] = typer.Option(None, "--rule", **choice(Rule, "--rule"), help=RULE_HELP + " [default: slack]"),
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Train a plan for real over seeds; the test loss after every epoch goes to the store. Resumes."""
    allow_code(allow)
    if adaptive:
        if backend != "local" or superlink or ray_address:
            fail("--adaptive runs on the local back end (each seed's rest may change on its own)")
        return _run_adaptive(plan, list(range(first_seed, first_seed + seeds)), store, out, threads, device,
                             validation, parse_slow(slow), seed_batch=seed_batch, rule=rule or Rule.slack.value)
    if slow:
        fail("--slow applies to --adaptive runs only")
    refuse_adaptive_options(rule, validation, "runs")
    if ray_address and backend != "local":
        fail("--ray-address spreads the local back end's seed batches; it does not apply to --backend flower")
    if superlink and backend != "flower":
        fail("--superlink needs --backend flower")
    if insecure and not superlink:
        fail("--insecure applies to --superlink only (the simulation's SuperLink is on 127.0.0.1, for this run)")
    if superlink:  # before any work: a connection we will not use stops the command now
        from ..train.fleet_gateway import DeploymentError, check_connection

        try:
            check_connection(superlink, insecure)
        except DeploymentError as e:
            fail(str(e))
    dev = start_training(threads, device)
    from ..plan import Plan
    from ..train import execute
    from ..train.federation import job_from_plan

    try:
        p = Plan.load(plan)
        job = job_from_plan(p, dev)
        st = open_store(store, out)
        run_id = execute.run_id_for(job, backend)
        execute.register(st, run_id, "plan", job, {"backend": backend, "plan": p.to_json()})
    except training_errors() as e:
        fail(str(e))
    seed_list = list(range(first_seed, first_seed + seeds))
    n = len(job.epochs)
    if superlink:
        _run_deployment(plan, seeds, first_seed, st, out, superlink, run_id, p, dev)
        return
    gone = st.diverged(run_id)  # a diverged seed is done: it trains no further epoch
    already = sum(n if s in gone else min(st.done_epochs(run_id, s), n) for s in seed_list)
    console.print(f"run [bold]{run_id}[/] · plan {escape(str(plan))} · {n} epochs × {seeds} seeds · back end {backend} · "
                  f"store {escape(st.path)}" + (f" · resuming ({already} epochs done)" if already else ""), highlight=False)
    t0 = time.perf_counter()
    with epoch_progress() as bar:
        task = bar.add_task(f"{backend}", total=n * seeds, completed=already)

        def progress(seed, epoch, r):
            loss = getattr(r, "test_loss", r)  # flower: the loss the ServerApp printed
            bar.update(task, advance=1, description=f"{backend} seed {seed} epoch {epoch} loss {loss:.3f}")

        if backend == "local":
            run_seeds(st, [(run_id, job, seed_list)], seed_options(seed_batch, workers, ray_address, threads),
                      lambda rid, seed, epoch, r: progress(seed, epoch, r))
        elif execute.pending(st, run_id, job, seed_list):
            st = _hand_over(st)
            _run_flower_simulation(plan, seeds, first_seed, st, out, dev, job, run_id, progress, threads)
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    _summary(st, run_id, f"plan {p.method} on {p.scenario}")


def refuse_adaptive_options(rule: str | None, validation: float | None, what: str) -> None:
    """--rule and --validation given to an open-loop command (`what`: runs, validations): exit 2."""
    if rule:
        fail(f"--rule applies to --adaptive {what} only")
    if validation is not None:
        fail(f"--validation {validation:g}: applies to --adaptive {what} only (an open-loop one holds out no split)")


def parse_slow(values) -> dict[str, float]:
    """--slow CLUSTER:FACTOR (repeatable) as {cluster: factor}; bad input exits 2."""
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
            fail(f"--slow {v!r}: expected CLUSTER:FACTOR with a factor from {1 / MAX_SLOW:g} to {MAX_SLOW:g}, "
                 "e.g. far-edge:1.5")
        out[name] = factor
    return out


def _run_adaptive(plan: Path, seed_list: list[int], store, out: Path, threads: int, device: str,
                  validation: float | None,
                  slow: dict[str, float], con=console, seed_batch: int = 32, rule: str = Rule.slack.value):
    """`depl run --adaptive`: every seed trained by the closed loop, its decisions into the store; seeds not
    started yet in batches of `seed_batch` (one vectorised stack while their rests agree, `adaptive.run_batch`).
    Returns (plan, final test losses, costs, actions) of the seeds."""
    dev = start_training(threads, device)
    import numpy as np

    from ..plan import Plan
    from ..train import adaptive as ad
    from ..train import execute

    try:
        p = Plan.load(plan)
        if not p.feasible or not p.epochs:
            fail(f"{plan}: the plan is infeasible or empty; nothing to run")
        scenario = p.scenario_object()
        unknown = sorted(set(slow) - {c.name for c in scenario.clusters})
        if unknown:
            fail(f"--slow {unknown[0]}: no such cluster in the plan's scenario {scenario.name!r} "
                 f"(clusters: {', '.join(c.name for c in scenario.clusters)})")
        job = ad.adaptive_job(p, dev, validation)
        st = open_store(store, out)
        run_id = ad.run_id_for(job, slow, rule)
        execute.register(st, run_id, "plan", job, {"backend": "local", "plan": p.to_json(), "adaptive": True,
                                                   "slow": slow, "rule": rule})
    except training_errors() as e:
        fail(str(e))
    todo = ad.pending(st, run_id, seed_list)
    con.print(f"run [bold]{run_id}[/] · adaptive · plan {escape(str(plan))} · {len(p.epochs)} epochs planned × "
                  f"{len(seed_list)} seeds · rule {rule} · validation split {job.data.validation:g} · store {escape(st.path)}"
                  + (f" · {len(seed_list) - len(todo)} seeds already done" if len(todo) < len(seed_list) else ""),
                  highlight=False)
    con.print(ad.split_note(job), highlight=False, markup=False)
    try:  # what every seed's epoch-0 decision will find (the same for all: it reads no seed)
        pol = ad.policy_for(p, job, **ad.RULES[rule])
        d0 = pol.initial()
    except training_errors() as e:
        fail(str(e))
    con.print(f"the plan on the run's data: P(ℓ(K) ≤ {p.loss_target:g}) = {d0.p_new:.4f} at ω = {p.omega:g}"
              + (" (re-planned at ω)" if d0.action == "replan" else "")
              + f"; a stop may spend δ = {pol.slack:.4f} (stops once P(test loss > {p.loss_target:g}) ≤ δ)",
              highlight=False, markup=False)
    t0 = time.perf_counter()
    with epoch_progress("seeds") as bar:  # a seed's epochs are not known in advance: the bar counts finished seeds
        task = bar.add_task("adaptive", total=len(todo))

        def progress(seed, epoch, r, d):
            bar.update(task, advance=0 if d.rest else 1,
                       description=f"seed {seed} epoch {epoch} val {d.observed:.3f} {d.action}")
            if d.action in ("deadline-miss",) or d.note.startswith("the rest overran"):
                warn(f"seed {seed} after epoch {epoch}: {d.action}: {d.note}")

        # batches cut from the whole seed list, not from the seeds still to do: a resumed run stacks its fresh seeds
        # as the first attempt did (their batched kernels round alike), so it resumes bit for bit
        for i in range(0, len(seed_list), seed_batch):
            batch = [s for s in seed_list[i:i + seed_batch] if s in todo]
            try:
                if batch:
                    ad.run_batch(st, run_id, job, p, batch, slow, progress, **ad.RULES[rule])
            except training_errors() as e:
                fail(str(e))
    con.print(f"done in {time.perf_counter() - t0:.1f} s")
    finals, costs, actions = ad.outcome(st, run_id, seed_list)
    ok = np.isfinite(costs)
    con.print(f"adaptive: {len(seed_list)} seeds · final test loss mean {np.mean(finals[np.isfinite(finals)]):.4f} · "
                  f"P(ℓ ≤ {p.loss_target:g}) {np.mean(finals <= p.loss_target):.3f} · mean cost "
                  f"{np.mean(costs[ok]):.4g} (open-loop plan {p.cost:.4g}) · decisions "
                  + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())), markup=False)
    return p, finals, costs, actions


def _hand_over(st):
    """Close our writer and keep reading: the ServerApp, another process, is the store's one writer now."""
    from ..store import Store

    path = st.path
    st.close()
    return Store(path, readonly=True)


def _run_flower_simulation(plan: Path, seeds: int, first_seed: int, st, out: Path, device: str, job, run_id: str,
                           progress, threads: int) -> None:
    """The app `depl export-app` writes, run by `flwr run` on Flower's simulation engine."""
    from ..train import execute
    from ..train.flower_app import export_app, simulate_app

    app = export_app(plan, out / "flower-app", seeds, first_seed, str(st.path), device)
    try:
        simulate_app(app, out, max(job.nodes.values()), progress, threads, device=device)
    except RuntimeError as e:
        fail(str(e), code=1)
    left = execute.pending(st, run_id, job, list(range(first_seed, first_seed + seeds)))
    if left:
        fail(f"flwr run ended but seeds {left} are unfinished; Flower's logs: {out / 'flower'}", code=1)


def export_app(
    plan: Path = typer.Argument(..., metavar="PLAN.json", help="a plan file (JSON, from `depl plan`)"),
    folder: Path = typer.Argument(..., metavar="DIR", help="the app folder to write"),
    seeds: int = typer.Option(1, "--seeds", min=1, help="seeds F..F+N-1 (the run config's `seeds`)"),
    first_seed: int = typer.Option(0, "--first-seed", min=0, help="F: the first seed (the run config's `first-seed`)"),
    store: Optional[str] = typer.Option(None, "--store", help="where the ServerApp writes [default: DIR/runs.sqlite]"),
    device: str = typer.Option(AppDevice.cpu.value, "--device", **choice(AppDevice, "--device"),
                                     help="cpu or cuda: where the ClientApps train (not auto: the nodes' devices "
                                     "are not known here)"),
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Write the plan as a Flower app (pyproject.toml with [tool.flwr.app]) for `flwr run DIR`."""
    need_training_extra()
    allow_code(allow)
    from ..train.flower_app import export_app

    try:
        app = export_app(plan, folder, seeds, first_seed, store, device)
    except training_errors() as e:
        fail(str(e))
    except OSError as e:  # DIR is a file, or cannot be created or written; nothing is left behind
        fail(f"{e.filename or folder}: {e.strerror or e}")
    from ..train.flower_app import app_commands

    console.print(f"Flower app written to {app}/pyproject.toml (the plan is embedded in its run config)\n"
                  + "\n".join(f"  {cmd}\n      # {what}" for cmd, what in app_commands(app)),
                  highlight=False, markup=False, soft_wrap=True)


def run_app(
    folder: Path = typer.Argument(..., metavar="DIR", help="an app folder written by `depl export-app`"),
    supernodes: Optional[int] = typer.Option(None, "--supernodes", min=1, max=1024,
                                             help="virtual SuperNodes of the simulation [default: the largest "
                                             "cluster's nodes]"),
    threads: int = THREADS,
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Run an app of `depl export-app` with `flwr run` on Flower's simulation engine, here. Resumes.

    A SuperLink of its own on 127.0.0.1, its state in DIR/.flwr (never ~/.flwr), stopped with all it started."""
    from ..train.flower_app import AppError, app_run_config, job_of_run_config, run_app as run_flower_app

    try:
        rc = app_run_config(folder)
        dev = start_training(threads, str(rc.get("device", "cpu")))
        allow_code(allow)
        job, run_id, _ = job_of_run_config(rc)
    except (AppError, *training_errors()) as e:
        fail(str(e))
    from ..store import Store
    from ..train import execute

    first = int(rc.get("first-seed", 0))
    seed_list = list(range(first, first + int(rc.get("seeds", 1))))
    store = str(rc.get("store", Path(folder) / "runs.sqlite"))
    n = len(job.epochs)
    console.print(f"run [bold]{run_id}[/] · app {escape(str(folder))} · {n} epochs × {len(seed_list)} seeds · "
                  f"flwr run on Flower's simulation engine ({dev}) · store {escape(store)}", highlight=False)
    t0 = time.perf_counter()
    with epoch_progress() as bar:
        task = bar.add_task("flower", total=n * len(seed_list))

        def progress(seed, epoch, loss):
            bar.update(task, advance=1, description=f"flower seed {seed} epoch {epoch} loss {loss:.3f}")

        try:
            run_flower_app(folder, supernodes, progress, threads)
        except RuntimeError as e:
            fail(str(e), code=1)
    try:
        st = Store(store, readonly=True)
    except training_errors() as e:
        fail(str(e), code=1)
    with st:
        left = execute.pending(st, run_id, job, seed_list)
        if left:
            fail(f"flwr run ended but seeds {left} are unfinished; Flower's logs: {Path(folder) / '.flwr'}", code=1)
        console.print(f"done in {time.perf_counter() - t0:.1f} s · the SuperLink and all it started are stopped")
        _summary(st, run_id, f"app {folder}")


def _run_deployment(plan: Path, seeds: int, first_seed: int, st, out: Path, superlink: str, run_id: str, p,
                    device: str = "cpu") -> None:
    """Write the Flower app folder and submit it with `flwr run`; the ServerApp writes the store."""
    from ..train.flower_app import export_app, run_deployment

    app = export_app(plan, out / "flower-app", seeds, first_seed, str(st.path), device)
    st = _hand_over(st)
    console.print(f"run [bold]{run_id}[/] · submitting {escape(str(app))} to SuperLink {escape(repr(superlink))} (flwr run)",
                  highlight=False)
    t0 = time.perf_counter()
    r = run_deployment(app, superlink)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        fail(f"flwr run failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}", code=1)
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    _summary(st, run_id, f"plan {p.method} on {p.scenario} (Flower deployment)")


def _floats(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        fail(f"{name} {text!r}: expected numbers separated by commas, e.g. 1,0.5,0.25")
    return values


def profile(
    scenario: str = typer.Argument(..., help="a built-in scenario name or a TOML file"),
    epochs: int = typer.Option(30, "--epochs", "-E", min=1, max=10_000,  # as a scenario's max_epochs
                               help="E: epochs of every experiment (the fitted law holds up to E: max_epochs)"),
    seeds: int = typer.Option(30, "--seeds", "-N", min=1, max=MAX_SEEDS,
                              help="seeds 0..N-1 (with --first-seed: F..F+N-1)"),
    first_seed: int = typer.Option(0, "--first-seed", min=0, max=MAX_SEED,
                                   help="the first seed: new seeds for an experiment already profiled, e.g. to "
                                   "calibrate a fitted law on seeds it was not fitted on (`depl calibrate`)"),
    fractions: str = typer.Option("1", "--fractions", help="data fractions, e.g. 1,0.5,0.25"),
    version: Optional[List[str]] = typer.Option(None, "--version", help="profile only these versions (repeatable)"),
    switch: Optional[List[str]] = typer.Option(None, "--switch", help="FROM:TO:K1 switch experiment (repeatable)"),
    datasets: Optional[List[str]] = typer.Option(None, "--dataset", help="datasets to train on [default: all]"),
    nodes: int = typer.Option(1, "--nodes", min=1, help="nodes doing FedAvg in every experiment"),
    store: Optional[str] = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]"),
    out: Path = typer.Option(Path("depl-runs"), "--out", help="the run folder (the store, Ray temp files)"),
    threads: int = THREADS,
    device: str = DEVICE,
    seed_batch: int = SEED_BATCH,
    workers: Optional[int] = WORKERS,
    ray_address: Optional[str] = RAY_ADDRESS,
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Profile model versions: E epochs × N seeds from scratch, at data fractions, and switch experiments. Resumes."""
    allow_code(allow)
    dev = start_training(threads, device)
    from ..scenario import load_scenario
    from ..train import execute
    from ..train import profile as prof
    from ..train.custom import CodeRefused

    try:
        s = load_scenario(scenario)
        names = list(datasets) if datasets else [d.name for d in s.datasets]
        unknown = [d for d in names if d not in {x.name for x in s.datasets}]
        if unknown:
            raise prof.JobError(f"--dataset {unknown[0]!r}: no such dataset in {s.name!r}")
        exps = prof.experiments(s, list(version or []), _floats(fractions, "--fractions"),
                                [prof.parse_switch(t) for t in (switch or [])], epochs)
        jobs = []
        for exp in exps:
            job = prof.experiment_job(s, names, exp, epochs, nodes, dev)
            jobs.append((exp, job, prof.experiment_run_id(s.name, exp, job)))
        st = open_store(store, out)  # only now: a refused profile writes nothing
        for exp, job, rid in jobs:
            execute.register(st, rid, "profile", job, {"experiment": exp.to_json(), "scenario": s.name})
    except CodeRefused as e:  # the scenario's code_dir (by default its folder)
        fail(f"{scenario}: {e}")
    except training_errors() as e:
        fail(str(e))
    seed_list = list(range(first_seed, first_seed + seeds))  # the store keys (run, seed): any seeds coexist
    total = len(jobs) * seeds * epochs
    done = sum(min(st.done_epochs(rid, sd), epochs) for _, _, rid in jobs for sd in seed_list)
    console.print(f"profiling {escape(s.name)}: {len(jobs)} experiments × {seeds} seeds "
                  f"({first_seed}..{first_seed + seeds - 1}) × {epochs} epochs · store {escape(st.path)}"
                  + (f" · resuming ({done} of {total} epochs done)" if done else ""), highlight=False)
    t0 = time.perf_counter()
    with epoch_progress() as bar:
        overall = bar.add_task("all experiments", total=total, completed=done)
        tasks = {}
        for exp, job, rid in jobs:
            exp_done = sum(min(st.done_epochs(rid, sd), epochs) for sd in seed_list)
            tasks[rid] = bar.add_task(exp.label, total=seeds * epochs, completed=exp_done)

        def progress(rid, seed, epoch, r):
            bar.update(tasks[rid], advance=1)
            bar.update(overall, advance=1)

        run_seeds(st, [(rid, job, seed_list) for _, job, rid in jobs],
                  seed_options(seed_batch, workers, ray_address, threads), progress)
    console.print(f"done in {time.perf_counter() - t0:.1f} s")


def run_seeds(st, runs, options: dict, progress) -> None:
    """`depl.train.executors.run_all`, with a Ray cluster that cannot be used reported as bad input."""
    from ..train.ray_pool import RayError
    from ..train.executors import run_all

    try:
        run_all(st, runs, progress=progress, **options)
    except RayError as e:
        fail(str(e))


def runs_show(
    store: Optional[str] = typer.Option(None, "--store", help="the store to read: SQLite path or sqlite:/// URL "
                                        "[default: OUT/runs.sqlite]"),
    out: Path = typer.Option(Path("depl-runs"), "--out", help="the run folder whose store to read (without --store)"),
    png: Optional[Path] = typer.Option(None, "--png", help="draw the loss bands (mean, 1st–99th percentile) here"),
    kind: Optional[str] = typer.Option(None, "--kind", **choice(Kind, "--kind"), help="only runs of this kind: plan or profile"),
    as_json: bool = json_option("print {store, runs: [...]} on stdout as one JSON object "
                                 "(nothing else there)"),
) -> None:
    """List the runs of a store; with --png, draw their measured loss bands (paper Fig. 2 style)."""
    from rich.table import Table

    from ..report.plots import plot_measured_bands
    from ..runspec import run_spec
    from ..store import Store
    from ..train.plots import band, bands, run_label

    if png is not None:
        check_output_file("--png", png)
    path = store or str(out / "runs.sqlite")
    if not Path(str(path).removeprefix("sqlite:///")).is_file():  # showing runs never creates a store
        fail(f"{path}: no such store (run `depl run` or `depl profile` first, or give --store)")
    try:
        st = Store(path, readonly=True)  # it only reads: no write access needed, no writer locked out
        runs = st.runs(kind)
        for r in runs:  # an altered store is refused before anything is printed
            run_spec(r, st.path)
    except training_errors() as e:
        fail(str(e))
    if as_json:
        if png is not None:  # refused before stdout gets its JSON: a failed command prints no result
            bs = bands(st, kind)
            if not bs:
                fail("no finished epochs to draw")
            plot_measured_bands(bs, png, decisions={b.run_id: st.decisions(b.run_id) for b in bs})
        _runs_json(st, runs)
        return
    t = Table(title=f"runs in {escape(st.path)}")
    for c in ("run", "kind", "what", "seeds", "diverged", "epochs", "final loss mean", "1st–99th pct", "s/epoch"):
        t.add_column(c)
    decided = []
    for r in runs:
        b = band(st, r)
        gone = _diverged_text(st.diverged(r["run_id"]))
        if b is None:
            t.add_row(escape(r["run_id"]), escape(r["kind"]), escape(run_label(r)), "0", gone, "0", "", "", "")
            continue
        secs = st.seconds_per_epoch(r["run_id"])
        ds = st.decisions(r["run_id"])
        f = _finals(st, r, b, ds)
        epochs = f"{f['epochs_min']}–{f['epochs']}" if f["epochs_min"] < f["epochs"] else str(f["epochs"])
        t.add_row(escape(r["run_id"]), escape(r["kind"]), escape(run_label(r)), str(b.runs), gone, epochs,
                  f"{f['final_loss_mean']:.4f}", f"{f['final_loss_low']:.4f} – {f['final_loss_high']:.4f}",
                  f"{secs:.3f}")
        decided += [(r["run_id"], d) for d in ds]
    console.print(t)
    if decided:
        _decisions_table(decided)
    if png is not None:
        bs = bands(st, kind)
        if not bs:
            fail("no finished epochs to draw")
        plot_measured_bands(bs, png, decisions={b.run_id: st.decisions(b.run_id) for b in bs})
        console.print(f"wrote {png}", markup=False)


def _decisions_table(decided: list[tuple[str, dict]], limit: int = 200) -> None:
    """The closed loop's decisions: every one that changed a plan or warned, and each seed's last."""
    from rich.table import Table

    last = {(rid, d["seed"]): d["epoch"] for rid, d in decided}
    shown = [(rid, d) for rid, d in decided if d["action"] != "continue" or last[(rid, d["seed"])] == d["epoch"]]
    t = Table(title="decisions of adaptive runs (changes and each seed's last; runs show --json has all)")
    for c in ("run", "seed", "after epoch", "val loss", "P(plan)", "P(kept)", "cond. quantile", "action", "epochs left",
              "cost spent", "saved", "note"):
        t.add_column(c)
    f = lambda x: "" if x is None else f"{x:.4g}"  # noqa: E731
    for rid, d in shown[:limit]:
        t.add_row(escape(rid), str(d["seed"]), str(d["epoch"]), f(d["observed"]), f(d["p_plan"]), f(d["p_new"]),
                  f(d["quantile"]), d["action"], str(len(d.get("rest", []))), f(d.get("cost_spent")), f(d.get("saved")),
                  escape(str(d.get("note", ""))))
    console.print(t)
    if len(shown) > limit:
        console.print(f"… {len(shown) - limit} more", markup=False)


def _diverged_text(gone: dict[int, int]) -> str:
    """'2 (seed 3 @1, seed 5 @4)': how many seeds diverged, and where."""
    if not gone:
        return "0"
    where = ", ".join(f"seed {s} @{k}" for s, k in list(gone.items())[:3])
    return f"{len(gone)} ({where}{', …' if len(gone) > 3 else ''})"


def _finals(st, run: dict, b, decisions: list) -> dict:
    """A run's final losses (mean, 1st and 99th percentile) and its epochs (fewest and most of a seed): the
    band's last epoch, or for an adaptive run (its seeds end at different epochs) each seed's last loss."""
    import numpy as np

    from ..train.plots import ends

    if not decisions:
        k = len(b.epochs)
        return {"epochs": k, "epochs_min": k, "final_loss_mean": b.mean[-1], "final_loss_low": b.low[-1],
                "final_loss_high": b.high[-1]}
    last, n = ends(st, run)
    low, high = np.percentile(last, [1, 99])
    return {"epochs": int(n.max()), "epochs_min": int(n.min()), "final_loss_mean": float(last.mean()),
            "final_loss_low": float(low), "final_loss_high": float(high)}


def _runs_json(st, runs: list[dict]) -> None:
    """Every run with its spec and, per seed-averaged epoch, the measured band (what `runs show` tabulates)."""
    from ..jsonout import dumps
    from ..train.plots import band, run_label

    out = []
    for r in runs:
        b = band(st, r)
        secs = st.seconds_per_epoch(r["run_id"])
        ds = st.decisions(r["run_id"])
        f = {"epochs": 0, "epochs_min": 0, "final_loss_mean": None, "final_loss_low": None, "final_loss_high": None} \
            if b is None else _finals(st, r, b, ds)
        out.append({"run": r["run_id"], "kind": r["kind"], "what": run_label(r), "created": r["created"],
                    "seeds": 0 if b is None else b.runs, **f, "seconds_per_epoch": secs, "spec": r["spec"],
                    "diverged": [{"seed": s, "epoch": k} for s, k in st.diverged(r["run_id"]).items()],
                    "decisions": ds,
                    "band": None if b is None else {"epoch": list(b.epochs), "mean": b.mean, "low": b.low, "high": b.high,
                                                   "seeds": b.seeds()}})
    sys.stdout.write(dumps({"store": st.path, "runs": out}) + "\n")


def fleet_gateway(
    listen: str = typer.Option(..., "--listen", help="HOST:PORT the SuperNodes dial (the network address)"),
    superlink: str = typer.Option("127.0.0.1:9093", "--superlink", help="the SuperLink, listening on loopback"),
    certfile: Path = typer.Option(..., "--ssl-certfile", help="the server certificate (the SuperLink's)"),
    keyfile: Path = typer.Option(..., "--ssl-keyfile", help="its private key"),
    ca: Optional[Path] = typer.Option(None, "--ssl-ca-certfile", help="the CA that signed the SuperLink's "
                                      "certificate [default: the system's]"),
    plan: Optional[Path] = typer.Option(None, "--plan", metavar="PLAN.json", help="the plan the deployment runs: "
                                        "sizes --max-body from its largest model (2 × its weights + 4 MiB)"),
    max_body: Optional[str] = typer.Option(None, "--max-body", metavar="SIZE", help="the largest request body "
                                           "passed on, e.g. 64MiB (413 over it) [default: from --plan, else 64MiB]"),
    header_timeout: float = typer.Option(10.0, "--header-timeout", metavar="SECONDS",
                                         help="for the TLS handshake, then for a request's line and headers"),
    body_timeout: float = typer.Option(30.0, "--body-timeout", metavar="SECONDS",
                                       help="for a request's body, plus 1 s per --body-min-rate bytes received"),
    body_min_rate: str = typer.Option("64KiB", "--body-min-rate", metavar="SIZE",
                                      help="bytes per second a body must keep up after --body-timeout"),
    keep_alive: int = typer.Option(5, "--keep-alive", metavar="SECONDS", help="idle time between requests"),
    max_connections: int = typer.Option(100, "--max-connections", metavar="N",
                                        help="open connections at once (503 and closed over it)"),
) -> None:
    """Serve a SuperLink's Fleet API (SuperNodes only) on the network; its Control API stays on loopback."""
    from ..train.fleet_gateway import Limits, check_tls, is_loopback, parse_size, serve, split_address

    for flag, v in (("--listen", listen), ("--superlink", superlink)):
        try:
            split_address(v)
        except ValueError as e:
            fail(f"{flag} {e}")
    if not is_loopback(split_address(superlink)[0]):
        fail(f"--superlink {superlink}: the SuperLink must listen on loopback (--host 127.0.0.1), "
              "the gateway is its only network face")
    for flag, f in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile), ("--ssl-ca-certfile", ca),
                    ("--plan", plan)):
        if f is not None and not f.is_file():
            fail(f"{flag} {f}: no such file")
    try:
        check_tls(str(certfile), str(keyfile), str(ca) if ca else None)
    except ValueError as e:
        fail(str(e))
    sizes = {}
    for flag, v in (("--max-body", max_body), ("--body-min-rate", body_min_rate)):
        try:
            sizes[flag] = None if v is None else parse_size(v)
        except ValueError as e:
            fail(f"{flag} {e}")
    for flag, v in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout),
                    ("--keep-alive", keep_alive), ("--max-connections", max_connections)):
        if not (math.isfinite(v) and v > 0):
            fail(f"{flag} {v:g}: expected a number > 0")
    limit = sizes["--max-body"]
    if plan is not None:
        need_training_extra()
        from ..train.fleet_gateway import plan_body_limit

        try:
            need, weights = plan_body_limit(plan)
        except training_errors() as e:
            fail(str(e))
        if limit is None:
            limit = need
        elif limit < need:
            warn(f"--max-body {limit} bytes is below what the plan's largest model needs ({need} bytes: "
                 f"2 × {weights} bytes of weights + 4 MiB); its messages may be refused (413)")
    limits = Limits(**({} if limit is None else {"max_body": limit}), header_timeout=header_timeout,
                    body_timeout=body_timeout, body_min_rate=sizes["--body-min-rate"], keep_alive=keep_alive,
                    max_connections=max_connections)
    serve(listen, superlink, str(certfile), str(keyfile), str(ca) if ca else None, limits)
