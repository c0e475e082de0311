"""Training commands: run, profile, runs show, export-app, run-app (torch is imported inside each command;
`depl runs models` and `depl export-model`: depl.cli.models).

Every command imports the training code inside its body, so `depl plan` and
the other planning commands work without the `train` extra.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import time
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..workflows.common import (MAX_SEED, MAX_SEEDS, Training, allow_code, need_training_extra, seed_range,
                                start_training)
from ..workflows.common import check_ray_address as probe_ray
from ..workflows.errors import training_errors
from .console import (check_output_file, choice, console, epoch_progress, err_console, fail, json_option,
                      print_json, refusals, warn)


class Backend(str, Enum):
    local = "local"
    flower = "flower"


class Rule(str, Enum):
    """The closed loop's decisions (docs/adaptive.md)."""

    slack = "slack"              # stops that spend the plan's slack only: rests on the open-loop certificate
    conditional = "conditional"  # also the law-conditioned stops, cuts and re-plans


class KeepModels(str, Enum):
    none = "none"
    best = "best"
    all = "all"


KEEP_HELP = ("the seeds' final models kept in OUT/models/RUN_ID (depl runs models, depl export-model, "
             "depl.load_model): all, best (the lowest final test loss) or none [default: all for up to 16 seeds, "
             "best above]")


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


DEVICE_HELP = "cpu, cuda, or auto (cuda when torch sees a GPU, else cpu)"


def training_options(threads: Optional[int], device: str, seed_batch: Optional[int] = None,
                     workers: Optional[int] = None, ray_address: Optional[str] = None) -> Training:
    """How seeds are trained, from the options every training command shares (run, profile, validate, …)."""
    return Training(threads, device, seed_batch, workers, ray_address)


def said(con=console):
    """Where a training command says how its seeds train (one line, and that a measurement starts)."""
    return lambda text: con.print(text, markup=False, highlight=False)


def auto_help(named: str) -> str:
    """The default of --seed-batch, --workers and --threads: measured, unless one of them is named."""
    return (f"[default: measured on this machine before training (docs/training.md); {named} when any of "
            "--seed-batch, --workers, --threads is named, nothing measured]")


SEED_BATCH_HELP = ("seeds trained together as one vectorised computation (1: the per-seed loop); "
                   "a seed's trajectory is deterministic for a given batching " + auto_help("32"))
WORKERS_HELP = ("worker processes over seed batches (with --ray-address: default the cluster's CPUs) "
                + auto_help("one per core"))
RULE_HELP = ("--adaptive: slack = stop a run once P(its test loss > ℓmax) ≤ δ, the slack certified for the plan "
             "(ω′ − ω of a plan made with `depl plan --slack`, or L − ω of --certificate FILE; else 0), no other "
             "decision but a deadline's re-plan (the guarantee rests on the open-loop certificate); conditional = also "
             "stop, cut or re-plan wherever the law conditioned on the run says the rest is no less likely to succeed "
             "(sound only if the law's conditional statements are right, which nothing certifies: docs/adaptive.md)")
VALIDATION_HELP = ("--adaptive: size of the validation split the decisions see, as a share of the plan's training "
                   "samples: fresh samples for mnist1d (default 1, up to 4), else carved out of the training samples "
                   "(default 0.1, at most 0.5)")
CERTIFICATE_HELP = ("--adaptive: a `depl certify` certificate of this plan (PLAN-certificate.json): its fresh runs "
                    "certify the slack δ = L − ω a stop may spend, L the anytime lower bound at its α "
                    "(a certificate of another plan is refused; docs/adaptive.md)")
RAY_HELP = "train the seed batches on this Ray cluster (e.g. 127.0.0.1:6379); the store stays here"
GAP_FROM_HELP = ("--adaptive: a store (or run folder) of runs that logged validation and test losses on the same data "
                 "(earlier adaptive runs): a stop's P(test loss > ℓmax) is read from the validation–test gap measured "
                 "there, not from a Gaussian modelled on sample counts (repeatable; docs/adaptive.md)")


def check_ray_address(address: Optional[str]) -> Optional[str]:
    """--ray-address, checked as it is read (before any work): one where no cluster answers was refused only once
    the run had started (its store made, its first line printed)."""
    with refusals():
        return probe_ray(address)


# the options every command that trains seeds takes (one object per option: typer may share them)
THREADS = typer.Option(None, "--threads", min=1, help="torch threads per process " + auto_help("1"))
# for a command that batches seeds its own way (`depl certify --batch`): nothing is measured
FIXED_THREADS = typer.Option(None, "--threads", min=1, help="torch threads per process [default: 1]")
FIXED_WORKERS = typer.Option(None, "--workers", min=1, help="worker processes over seed batches [default: one per "
                             "core; with --ray-address, the cluster's CPUs]")
DEVICE = typer.Option(Device.cpu.value, "--device", **choice(Device, "--device"), help=DEVICE_HELP)
SEED_BATCH = typer.Option(None, "--seed-batch", min=1, help=SEED_BATCH_HELP)
WORKERS = typer.Option(None, "--workers", min=1, help=WORKERS_HELP)
RAY_ADDRESS = typer.Option(None, "--ray-address", callback=check_ray_address, help=RAY_HELP)
ALLOW_CODE = typer.Option(None, "--allow-code", metavar="DIR",
                          help="a folder of your own code (net/source = MODULE:FUNCTION) that this command may import "
                          "from (repeatable; adds to $DEPL_CODE); a plan or scenario never allows its own code: "
                          "docs/security.md")


def trains_seeds(*, seed_batch: bool = True):
    """The options every command that trains seeds takes, declared once: --threads, --device, --seed-batch
    (unless the command batches seeds its own way), --workers, --ray-address and --allow-code, after the
    command's own options.  The command receives them as `training` (a depl.workflows.common.Training), with the
    folders of --allow-code already allowed.  (typer has no option groups: the wrapper's signature is the
    command's, less `training`, plus these.)"""
    shared = [("threads", Optional[int], THREADS if seed_batch else FIXED_THREADS), ("device", str, DEVICE)]
    shared += [("seed_batch", Optional[int], SEED_BATCH)] if seed_batch else []
    shared += [("workers", Optional[int], WORKERS if seed_batch else FIXED_WORKERS),
               ("ray_address", Optional[str], RAY_ADDRESS), ("allow", Optional[List[Path]], ALLOW_CODE)]

    def decorate(command):
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "training"]
        added = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d, annotation=t)
                 for n, t, d in shared]

        @functools.wraps(command)
        def with_training(*args, **kwargs):
            allow_code(kwargs.pop("allow"))
            options = {n: kwargs.pop(n) for n, _, _ in shared[:-1]}
            return command(*args, training=training_options(**options), **kwargs)

        with_training.__signature__ = inspect.Signature(own + added)
        with_training.__annotations__ = {**{p.name: p.annotation for p in own}, **{n: t for n, t, _ in shared}}
        return with_training

    return decorate


def diverged_line(runs: int, groups: list[tuple[str, dict[int, int]]], limit: int = 10) -> Optional[str]:
    """'2 of 8 runs diverged (seed 3 at epoch 1, seed 5 at epoch 4): their losses went non-finite …', or None
    where none did; `groups` [(what, {seed: epoch})]: one per run of the store (what: '' where there is one)."""
    n = sum(len(g) for _, g in groups)
    if not n:
        return None

    def where(gone: dict[int, int]) -> str:
        shown = ", ".join(f"seed {s} at epoch {k}" for s, k in list(gone.items())[:limit])
        return shown + (f", … ({len(gone) - limit} more)" if len(gone) > limit else "")

    text = "; ".join(f"{what}: {where(g)}" if what else where(g) for what, g in groups if g)
    return (f"{n} of {runs} runs diverged ({text}): their losses went non-finite (each stopped there, not "
            "resumed; its final loss counts as +inf)")


def _summary(store, run_id: str, title: str, seeds=None, con=console) -> None:
    """The run's diverged seeds (of `seeds`; None: all the store has) and its final losses, as a table."""
    import numpy as np
    from rich.table import Table

    losses, gone = store.losses(run_id), store.diverged(run_id)
    seeds = store.seeds(run_id) if seeds is None else list(seeds)
    finals = np.array([v[-1] for s, v in losses.items() if v and s not in gone])
    line = diverged_line(len(seeds), [("", {s: gone[s] for s in seeds if s in gone})])
    if line:
        con.print(line, markup=False, highlight=False)
    if finals.size == 0:
        return
    t = Table(title=escape(title))
    for c in ("run", "seeds", "epochs", "final loss: mean", "min", "max", "99th pct"):
        t.add_column(c)
    t.add_row(run_id, str(len(finals)), str(max(len(v) for v in losses.values())), f"{finals.mean():.4f}",
              f"{finals.min():.4f}", f"{finals.max():.4f}", f"{np.percentile(finals, 99):.4f}")
    con.print(t)


def _run_json(done) -> dict:
    """What `depl run --json` prints: the run, its seeds' final losses and the seeds that diverged."""
    import numpy as np

    losses, gone = done.store.losses(done.run_id), done.diverged()
    finals = np.array([losses[s][-1] for s in done.seeds if s not in gone and losses.get(s)])
    stat = (lambda f: float(f(finals)) if finals.size else None)  # noqa: E731
    return {"run_id": done.run_id, "plan": done.plan.method, "scenario": done.plan.scenario, "backend": done.backend,
            "store": str(done.store.path), "seeds": list(done.seeds), "epochs": len(done.plan.epochs),
            "seconds": done.seconds, "finished": int(finals.size), "final_loss_mean": stat(np.mean),
            "final_loss_min": stat(np.min), "final_loss_max": stat(np.max), "diverged": sorted(gone),
            "diverged_at": [{"seed": s, "epoch": k} for s, k in gone.items()],
            "seed_training": None if done.seed_training is None else done.seed_training.to_json()}


def run(
    plan: Path = typer.Argument(..., help="a plan file (JSON, from `depl plan`)"),
    seeds: int = typer.Option(1, "--seeds", min=1, max=MAX_SEEDS, help="seeds 0..N-1 (with --first-seed: F..F+N-1)"),
    first_seed: int = typer.Option(0, "--first-seed", min=0, max=MAX_SEED,
                                   help="F: the first seed (new seeds for a plan already run)"),
    backend: str = typer.Option(Backend.local.value, "--backend", **choice(Backend, "--backend"),
                                    help="local (in process) or flower (Flower's simulation engine)"),
    store: Optional[str] = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]"),
    out: Path = typer.Option(Path("depl-runs"), "--out", help="the run folder (store, Flower state, Ray temp files)"),
    threads: Optional[int] = THREADS,
    device: str = DEVICE,
    superlink: Optional[str] = typer.Option(
        None, "--superlink", help="flower: submit to this SuperLink connection of Flower's config.toml "
        "(a deployment, see docs/flower-deployment.md) instead of the simulation engine"),
    seed_batch: Optional[int] = typer.Option(None, "--seed-batch", min=1, help="local: " + SEED_BATCH_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local: " + WORKERS_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", callback=check_ray_address,
                                              help="local: " + RAY_HELP),
    insecure: bool = typer.Option(False, "--insecure", help="--superlink: accept a connection without TLS or "
                                  "to a SuperLink's Control API over the network (docs/flower-deployment.md)"),
    adaptive: bool = typer.Option(False, "--adaptive", help="closed loop: after every epoch stop (or, --rule "
                                  "conditional, re-plan the rest) where the guarantee allows (docs/adaptive.md); local "
                                  "back end, --seed-batch seeds (default 32, nothing measured) in one stack while "
                                  "their rests agree"),
    validation: Optional[float] = typer.Option(None, "--validation", min=0.01, max=4.0,
                                     help=VALIDATION_HELP),
    slow: Optional[List[str]] = typer.Option(None, "--slow", help="--adaptive: CLUSTER:FACTOR, the cluster's epochs "
                                             "take FACTOR times their planned time (a rehearsal; repeatable)"),
    rule: Optional[str] = typer.Option(None, "--rule", **choice(Rule, "--rule"), help=RULE_HELP + " [default: slack]"),
    gap_from: Optional[List[Path]] = typer.Option(None, "--gap-from", metavar="STORE", help=GAP_FROM_HELP),
    certificate: Optional[Path] = typer.Option(None, "--certificate", metavar="FILE", help=CERTIFICATE_HELP),
    allow: Optional[List[Path]] = ALLOW_CODE,
    as_json: bool = json_option("print the run on stdout as one JSON object (its seeds, final losses, the seeds "
                                "that diverged), nothing else there; not with --adaptive"),
    keep_models: Optional[str] = typer.Option(None, "--keep-models", **choice(KeepModels, "--keep-models"),
                                              help=KEEP_HELP),
) -> None:
    """Train a plan for real over seeds; the test loss after every epoch goes to the store, the final models to
    OUT/models. Resumes."""
    from ..workflows.training import parse_slow, prepare_run

    allow_code(allow)
    training = training_options(threads, device, seed_batch, workers, ray_address)
    if adaptive and as_json:
        fail("--json: an adaptive run prints its decisions as text (`depl runs show --json` has them all)")
    if adaptive:
        if backend != "local" or superlink or ray_address:
            fail("--adaptive runs on the local back end (each seed's rest may change on its own)")
        if keep_models not in (None, KeepModels.none.value):
            fail("--keep-models: an --adaptive run keeps its losses and decisions, not its models")
        with refusals():
            slowed = parse_slow(slow)
        show_adaptive_run(plan, seed_range(first_seed, seeds), store, out, training, validation, slowed,
                          rule or Rule.slack.value, gap_from=gap_from, certificate=certificate)
        return
    if slow:
        fail("--slow applies to --adaptive runs only")
    refuse_adaptive_options(rule, validation, "runs", gap_from, certificate)
    with refusals():
        prepared = prepare_run(plan, seeds, first_seed, backend=backend, store=store, out=out, training=training,
                               superlink=superlink, insecure=insecure, keep_models=keep_models)
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    done = show_plan_run(prepared, training, con)
    if done.flwr_output:
        (sys.stderr if as_json else sys.stdout).write(done.flwr_output)
    con.print(f"done in {done.seconds:.1f} s")
    if done.models is not None:
        con.print(f"models ({prepared.keep_models}): {escape(str(done.models))}"
                  + (f", {len(done.models_written)} written now" if done.models_written else ""), highlight=False)
    _summary(done.store, done.run_id, f"plan {done.plan.method} on {done.plan.scenario}"
             + (" (Flower deployment)" if superlink else ""), done.seeds, con)
    if as_json:
        print_json(_run_json(done))


def show_plan_run(r, training: Training, con=console):
    """Train a prepared plan run (depl.workflows.training.train_run) under its header line and progress bar."""
    from ..workflows.training import flower_app_folder, train_run

    if r.superlink:  # the ServerApp trains elsewhere: no progress here
        con.print(f"run [bold]{r.run_id}[/] · submitting {escape(str(flower_app_folder(r)))} to SuperLink "
                      f"{escape(repr(r.superlink))} (flwr run)", highlight=False)
        with refusals():
            return train_run(r, training)
    already, seeds = r.done_epochs(), len(r.seeds)
    con.print(f"run [bold]{r.run_id}[/] · plan {escape(str(r.plan_file))} · {r.epochs} epochs × {seeds} seeds · "
                  f"back end {r.backend} · store {escape(r.store.path)}"
                  + (f" · resuming ({already} epochs done)" if already else ""), highlight=False)
    with epoch_progress() as bar, refusals():
        task = bar.add_task(f"{r.backend}", total=r.epochs * seeds, completed=already)

        def progress(seed, epoch, loss):
            bar.update(task, advance=1, description=f"{r.backend} seed {seed} epoch {epoch} loss {loss:.3f}")

        return train_run(r, training, progress, said(con))


def refuse_adaptive_options(rule: str | None, validation: float | None, what: str, gap_from=None,
                            certificate=None) -> None:
    """--rule, --validation, --gap-from and --certificate given to an open-loop command (`what`: runs, validations): exit 2."""
    if rule:
        fail(f"--rule applies to --adaptive {what} only")
    if gap_from:
        fail(f"--gap-from applies to --adaptive {what} only")
    if certificate:
        fail(f"--certificate applies to --adaptive {what} only")
    if validation is not None:
        fail(f"--validation {validation:g}: applies to --adaptive {what} only (an open-loop one holds out no split)")


def show_adaptive_run(plan: Path, seed_list: list[int], store, out: Path, training: Training,
                      validation: float | None, slow: dict[str, float], rule: str, con=console, gap_from=None,
                      certificate=None):
    """Every seed trained by the closed loop (depl.workflows.training), said on `con` as it goes; its result."""
    import numpy as np

    from ..workflows.training import prepare_adaptive, train_adaptive

    with refusals():
        a = prepare_adaptive(plan, seed_list, store=store, out=out, training=training, validation=validation,
                             slow=slow, rule=rule, gap_from=gap_from, certificate=certificate)
    _adaptive_header(a, con)
    with epoch_progress("seeds") as bar, refusals():  # a seed's epochs are not known in advance: it counts seeds
        task = bar.add_task("adaptive", total=len(a.todo))

        def progress(seed, epoch, r, d):
            bar.update(task, advance=0 if d.rest else 1,
                       description=f"seed {seed} epoch {epoch} val {d.observed:.3f} {d.action}")
            if d.action in ("deadline-miss",) or d.note.startswith("the rest overran"):
                warn(f"seed {seed} after epoch {epoch}: {d.action}: {d.note}")

        done = train_adaptive(a, training.seed_batch, progress)
    con.print(f"done in {done.seconds:.1f} s")
    p, finals, costs = done.plan, done.finals, done.costs
    ok = np.isfinite(costs)
    con.print(f"adaptive: {len(seed_list)} seeds · final test loss mean {np.mean(finals[np.isfinite(finals)]):.4f} · "
              f"P(ℓ ≤ {p.loss_target:g}) {np.mean(finals <= p.loss_target):.3f} · mean cost "
              f"{np.mean(costs[ok]):.4g} (open-loop plan {p.cost:.4g}) · decisions "
              + ", ".join(f"{k} {v}" for k, v in sorted(done.actions.items())), markup=False)
    return done


def _adaptive_header(a, con) -> None:
    p, d0, n = a.plan, a.initial, len(a.seeds)
    con.print(f"run [bold]{a.run_id}[/] · adaptive · plan {escape(str(a.plan_file))} · {len(p.epochs)} epochs planned × "
              f"{n} seeds · rule {a.rule} · validation split {a.job.data.validation:g} · store {escape(a.store.path)}"
              + (f" · {n - len(a.todo)} seeds already done" if len(a.todo) < n else ""), highlight=False)
    con.print(a.split_note, highlight=False, markup=False)
    from ..adaptive import promise

    con.print(f"the plan on the run's data: P(ℓ(K) ≤ {p.loss_target:g}) = {d0.p_new:.4f} at ω = {promise(p):g}"
              + (" (re-planned at ω)" if d0.action == "replan" else "")
              + f"; a stop may spend δ = {a.slack:.4f} (stops once P(test loss > {p.loss_target:g}) ≤ δ)",
              highlight=False, markup=False)
    if a.slack_record is not None:
        con.print(a.slack_record.describe(), highlight=False, markup=False)
    con.print("validation–test gap: " + (f"measured — {a.gap.source}" if a.gap is not None else
                                         "modelled from sample counts (not measured: --gap-from STORE measures it)"),
              highlight=False, markup=False)
    if a.slack_record is not None:
        con.print("what the run promises: " + a.slack_record.statement(a.gap), highlight=False, markup=False)


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
    keep_models: Optional[str] = typer.Option(None, "--keep-models", **choice(KeepModels, "--keep-models"),
                                              help="the seeds' final models the ServerApp keeps, next to the store "
                                              "(models/RUN_ID): all, best or none [default: all for up to 16 seeds, "
                                              "best above]"),
) -> None:
    """Write the plan as a Flower app (pyproject.toml with [tool.flwr.app]) for `flwr run DIR`."""
    with refusals():
        need_training_extra()
    allow_code(allow)
    from ..train.flower_app import export_app

    try:
        app = export_app(plan, folder, seeds, first_seed, store, device, keep_models)
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
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads per process"),
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Run an app of `depl export-app` with `flwr run` on Flower's simulation engine, here. Resumes.

    A SuperLink of its own on 127.0.0.1, its state in DIR/.flwr (never ~/.flwr), stopped with all it started."""
    from ..train.flower_app import AppError, app_run_config, job_of_run_config, run_app as run_flower_app

    try:
        rc = app_run_config(folder)
        with refusals():
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
        _summary(st, run_id, f"app {folder}", seed_list)


@trains_seeds()
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
    as_json: bool = json_option("print the experiments' runs on stdout as one JSON object (each with the seeds that "
                                "diverged), nothing else there"),
    training: Training = None,
) -> None:
    """Profile model versions: E epochs × N seeds from scratch, at data fractions, and switch experiments. Resumes."""
    from ..workflows.training import parse_fractions, prepare_profile, train_profile

    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    with refusals():
        p = prepare_profile(scenario, epochs, seeds, first_seed, fractions=tuple(parse_fractions(fractions)),
                            versions=tuple(version or ()), switches=tuple(switch or ()),
                            datasets=tuple(datasets or ()), nodes=nodes, store=store, out=out, training=training)
    total, done = p.total_epochs, p.done_epochs()
    con.print(f"profiling {escape(p.scenario.name)}: {len(p.jobs)} experiments × {seeds} seeds "
                  f"({first_seed}..{first_seed + seeds - 1}) × {epochs} epochs · store {escape(p.store.path)}"
                  + (f" · resuming ({done} of {total} epochs done)" if done else ""), highlight=False)
    with epoch_progress() as bar, refusals():
        overall = bar.add_task("all experiments", total=total, completed=done)
        tasks = {rid: bar.add_task(exp.label, total=seeds * epochs, completed=p.done_epochs(rid))
                 for exp, _, rid in p.jobs}

        def progress(rid, seed, epoch, r):
            bar.update(tasks[rid], advance=1)
            bar.update(overall, advance=1)

        profiled = train_profile(p, training, progress, said(con))
    con.print(f"done in {profiled.seconds:.1f} s")
    labels = {rid: exp.label for exp, _, rid in p.jobs}
    gone = profiled.diverged()
    line = diverged_line(len(p.jobs) * len(p.seeds), [(labels[rid] if len(p.jobs) > 1 else "", g)
                                                      for rid, g in gone.items()])
    if line:
        con.print(line, markup=False, highlight=False)
    if as_json:
        print_json({"scenario": p.scenario.name, "store": str(p.store.path), "seeds": list(p.seeds), "epochs": epochs,
                    "seconds": profiled.seconds, "runs_trained": len(p.jobs) * len(p.seeds),
                    "diverged_runs": sum(len(g) for g in gone.values()),
                    "runs": [{"run": rid, "experiment": labels[rid], "diverged": sorted(gone[rid]),
                              "diverged_at": [{"seed": s, "epoch": k} for s, k in gone[rid].items()]}
                             for rid in profiled.run_ids],
                    "seed_training": None if profiled.seed_training is None else profiled.seed_training.to_json()})


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
    if png is not None:
        check_output_file("--png", png)
    st, runs = _read_store(store or str(out / "runs.sqlite"), kind)
    if as_json:
        if png is not None:  # refused before stdout gets its JSON: a failed command prints no result
            _draw_bands(st, kind, png)
        _runs_json(st, runs)
        return
    decided = _runs_table(st, runs)
    if decided:
        _decisions_table(decided)
    if png is not None:
        _draw_bands(st, kind, png)
        console.print(f"wrote {png}", markup=False)


def _read_store(path: str, kind: Optional[str]):
    """(the store, its runs of `kind`), read only; an absent store or an altered run spec refused."""
    from ..runspec import run_spec
    from ..store import Store

    if not Path(str(path).removeprefix("sqlite:///")).is_file():  # showing runs never creates a store
        fail(f"{path}: no such store (run `depl run` or `depl profile` first, or give --store)")
    try:
        st = Store(path, readonly=True)  # it only reads: no write access needed, no writer locked out
        runs = st.runs(kind)
        for r in runs:  # an altered store is refused before anything is printed
            run_spec(r, st.path)
    except training_errors() as e:
        fail(str(e))
    return st, runs


def _draw_bands(st, kind: Optional[str], png: Path) -> None:
    from ..report.plots import plot_measured_bands
    from ..train.bands import bands

    bs = bands(st, kind)
    if not bs:
        fail("no finished epochs to draw")
    plot_measured_bands(bs, png, decisions={b.run_id: st.decisions(b.run_id) for b in bs})


def _runs_table(st, runs: list[dict]) -> list[tuple[str, dict]]:
    """Print the table of the runs; the closed loop's decisions found in them [(run id, decision)]."""
    from rich.table import Table

    from ..train.bands import band, run_label

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
    return decided


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

    from ..train.bands import ends

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
    from ..train.bands import band, run_label

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
    from ..train.fleet_gateway import Limits, serve

    _check_gateway(listen, superlink, certfile, keyfile, ca, plan)
    sizes = {}
    for flag, v in (("--max-body", max_body), ("--body-min-rate", body_min_rate)):
        sizes[flag] = None if v is None else _size(flag, v)
    for flag, v in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout),
                    ("--keep-alive", keep_alive), ("--max-connections", max_connections)):
        if not (math.isfinite(v) and v > 0):
            fail(f"{flag} {v:g}: expected a number > 0")
    limit = sizes["--max-body"] if plan is None else _plan_body_limit(plan, sizes["--max-body"])
    limits = Limits(**({} if limit is None else {"max_body": limit}), header_timeout=header_timeout,
                    body_timeout=body_timeout, body_min_rate=sizes["--body-min-rate"], keep_alive=keep_alive,
                    max_connections=max_connections)
    serve(listen, superlink, str(certfile), str(keyfile), str(ca) if ca else None, limits)


def _check_gateway(listen: str, superlink: str, certfile: Path, keyfile: Path, ca: Optional[Path],
                   plan: Optional[Path]) -> None:
    """The gateway's addresses (the SuperLink's on loopback) and files, and its TLS that they make."""
    from ..train.fleet_gateway import check_tls, is_loopback, split_address

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


def _size(flag: str, text: str) -> int:
    from ..train.fleet_gateway import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        fail(f"{flag} {e}")


def _plan_body_limit(plan: Path, limit: Optional[int]) -> int:
    """--max-body from the plan's largest model (2 × its weights + 4 MiB), or said to be below it."""
    with refusals():
        need_training_extra()
    from ..train.fleet_gateway import plan_body_limit

    try:
        need, weights = plan_body_limit(plan)
    except training_errors() as e:
        fail(str(e))
    if limit is None:
        return need
    if limit < need:
        warn(f"--max-body {limit} bytes is below what the plan's largest model needs ({need} bytes: "
             f"2 × {weights} bytes of weights + 4 MiB); its messages may be refused (413)")
    return limit
