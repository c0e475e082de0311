"""What the training commands share: the options every command that trains seeds takes (`trains_seeds`: --threads,
--device, --seed-batch, --workers, --ray-address, --executor, --allow-code, --data), the lines they print about seeds
(diverged, a run's summary) and the closed loop's run as it goes (`AdaptiveShow`, for `depl run --adaptive` and
`depl validate --adaptive`).  The commands: depl.cli.run (run), depl.cli.profile (profile), depl.cli.runs (runs
show), depl.cli.apps (export-app, run-app, fleet-gateway), depl.cli.models, depl.cli.validation, depl.cli.certify,
depl.cli.coverage.

Every command imports the training code inside its body, so `depl plan` and the other planning commands work
without the `train` extra.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..workflows.common import Training
from ..workflows.common import allow_code as allow_folders
from ..workflows.common import data_folders
from ..workflows.common import check_executor as known_executor
from ..workflows.common import check_ray_address as probe_ray
from .console import choice, command_line, console, epoch_progress, fail, refusals, warn


class Rule(str, Enum):
    """The closed loop's decisions (docs/adaptive.md)."""

    slack = "slack"              # stops that spend the plan's slack only: rests on the open-loop certificate
    conditional = "conditional"  # also the law-conditioned stops, cuts and re-plans


class KeepModels(str, Enum):
    none = "none"
    best = "best"
    all = "all"


KEEP_HELP = ("the seeds' final models kept in OUT/models/RUN_ID (depl runs models, depl export-model, "
             "depl.load_model; --adaptive: each of the epoch its seed ended at): all, best (the lowest final test "
             "loss) or none [default: all for up to 16 seeds, best above]")


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


# Where an exported Flower app's ClientApps train: a device named in advance (no `auto`: the app runs elsewhere).
AppDevice = Enum("AppDevice", [(m.name, m.value) for m in Device if m is not Device.auto], type=str)


DEVICE_HELP = "cpu, cuda, or auto (cuda when torch sees a GPU, else cpu)"

def training_options(threads: Optional[int], device: str, seed_batch: Optional[int] = None,
                     workers: Optional[int] = None, ray_address: Optional[str] = None,
                     executor: Optional[str] = None) -> Training:
    """How seeds are trained, from the options every training command shares (run, profile, validate, …)."""
    return Training(threads, device, seed_batch, workers, ray_address, executor)


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


EXECUTOR_HELP = ("the executor that trains the seed batches, by its name (depl.train.backends.executors: loop, stack, "
                 "processes, ray, and any registered since: docs/extending.md) [default: decided as --seed-batch "
                 "says; nothing measured when named]")


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


def check_executor(name: Optional[str]) -> Optional[str]:
    """--executor, checked as it is read: a name no executor is registered under is refused naming those that are."""
    with refusals():
        return known_executor(name)


EXECUTOR = typer.Option(None, "--executor", metavar="NAME", callback=check_executor, help=EXECUTOR_HELP)
ALLOW_CODE = typer.Option(None, "--allow-code", metavar="DIR",
                          help="a folder of your own code (net/source = MODULE:FUNCTION) that this command may import "
                          "from (repeatable; adds to $DEPL_CODE); a plan or scenario never allows its own code: "
                          "docs/security.md")


DATA = typer.Option(None, "--data", metavar="DIR",
                    help="a folder data is read from (repeatable; before $DEPL_DATA's): a dataset's `path` must lie "
                    "in one, and a Fashion-MNIST or CIFAR-10 dataset without one is looked for there (Fashion-MNIST "
                    "then in /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)")


def allow_code(folders: Optional[List[Path]]) -> None:
    """--allow-code's folders allowed for this process and those it starts; a refusal to import code then repeats
    this command line with --allow-code FOLDER."""
    allow_folders(folders, command_line())


def _local_options() -> dict:
    """--seed-batch, --workers, --ray-address and --executor of `depl run`, whose help says they are the local back
    end's."""
    return {"seed_batch": typer.Option(None, "--seed-batch", min=1, help="local: " + SEED_BATCH_HELP),
            "workers": typer.Option(None, "--workers", min=1, help="local: " + WORKERS_HELP),
            "ray_address": typer.Option(None, "--ray-address", callback=check_ray_address, help="local: " + RAY_HELP),
            "executor": typer.Option(None, "--executor", metavar="NAME", callback=check_executor,
                                     help="local: " + EXECUTOR_HELP)}


def trains_seeds(*, seed_batch: bool = True, local: bool = False):
    """The options every command that trains seeds takes, declared once: --threads, --device, --seed-batch
    (unless the command batches seeds its own way), --workers, --ray-address, --executor, --allow-code and --data, after
    the command's own options (`local`: their help says they are the local back end's, as in `depl run`).  The
    command receives them as `training` (a depl.workflows.common.Training), with the folders of --allow-code
    already allowed.  (typer has no option groups: the wrapper's signature is the command's, less `training`,
    plus these.)"""
    own_options = _local_options() if local else {}
    shared = [("threads", Optional[int], THREADS if seed_batch else FIXED_THREADS), ("device", str, DEVICE)]
    shared += [("seed_batch", Optional[int], own_options.get("seed_batch", SEED_BATCH))] if seed_batch else []
    shared += [("workers", Optional[int], own_options.get("workers", WORKERS if seed_batch else FIXED_WORKERS)),
               ("ray_address", Optional[str], own_options.get("ray_address", RAY_ADDRESS)),
               ("executor", Optional[str], own_options.get("executor", EXECUTOR)),
               ("allow", Optional[List[Path]], ALLOW_CODE), ("data", Optional[List[Path]], DATA)]

    def decorate(command):
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "training"]
        added = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d, annotation=t)
                 for n, t, d in shared]

        @functools.wraps(command)
        def with_training(*args, **kwargs):
            allow_code(kwargs.pop("allow"))
            data_folders(kwargs.pop("data"))
            options = {n: kwargs.pop(n) for n, _, _ in shared[:-2]}
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


def summary(store, run_id: str, title: str, seeds=None, con=console) -> None:
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


def refuse_adaptive_options(rule: str | None, validation: float | None, what: str, gap_from=None,
                            certificate=None) -> None:
    """--rule, --validation, --gap-from and --certificate given to an open-loop command (`what`: runs,
    validations): exit 2."""
    if rule:
        fail(f"--rule applies to --adaptive {what} only")
    if gap_from:
        fail(f"--gap-from applies to --adaptive {what} only")
    if certificate:
        fail(f"--certificate applies to --adaptive {what} only")
    if validation is not None:
        fail(f"--validation {validation:g}: applies to --adaptive {what} only (an open-loop one holds out no split)")


class AdaptiveShow:
    """What the closed loop's workflows (`run_adaptive`, `validate_adaptive`) are given to say a run on `con` as it
    goes: `started` prints the run's header and opens the seeds' progress bar, `progress` moves it; `done` prints
    the seeds' outcome.  Used as a context (the bar closes with it)."""

    def __init__(self, con=console):
        self.con, self._stack, self._bar, self._task = con, contextlib.ExitStack(), None, None
        self.keep_models = "none"   # the run's, once started (--keep-models resolved)

    def __enter__(self) -> "AdaptiveShow":
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def started(self, a) -> None:
        _adaptive_header(a, self.con)
        self.keep_models = a.keep_models
        self._bar = self._stack.enter_context(epoch_progress("seeds"))  # a seed's epochs are not known: it counts seeds
        self._task = self._bar.add_task("adaptive", total=len(a.todo))

    def progress(self, seed, epoch, r, d) -> None:
        self._bar.update(self._task, advance=0 if d.rest else 1,
                         description=f"seed {seed} epoch {epoch} val {d.observed:.3f} {d.action}")
        if d.action in ("deadline-miss",) or d.note.startswith("the rest overran"):
            warn(f"seed {seed} after epoch {epoch}: {d.action}: {d.note}")

    def done(self, done) -> None:
        """The seeds' outcome (depl.workflows.training.AdaptiveResult), after the bar has closed."""
        import numpy as np

        con = self.con
        con.print(f"done in {done.seconds:.1f} s")
        p, finals, costs = done.plan, done.finals, done.costs
        ok = np.isfinite(costs)
        con.print(f"adaptive: {len(done.seeds)} seeds · final test loss mean {np.mean(finals[np.isfinite(finals)]):.4f} · "
                  f"P(ℓ ≤ {p.loss_target:g}) {np.mean(finals <= p.loss_target):.3f} · mean cost "
                  f"{np.mean(costs[ok]):.4g} (open-loop plan {p.cost:.4g}) · decisions "
                  + ", ".join(f"{k} {v}" for k, v in sorted(done.actions.items())), markup=False)
        if done.models is not None:
            con.print(f"models ({self.keep_models}, each of the epoch its seed ended at): {escape(str(done.models))}"
                      + (f", {len(done.models_written)} written now" if done.models_written else ""), highlight=False)


def _adaptive_header(a, con) -> None:
    from ..adaptive import promise   # depl.adaptive imports scipy.stats, which `depl plan` never loads

    p, d0, n = a.plan, a.initial, len(a.seeds)
    con.print(f"run [bold]{a.run_id}[/] · adaptive · plan {escape(str(a.plan_file))} · {len(p.epochs)} epochs planned × "
              f"{n} seeds · rule {a.rule} · validation split {a.job.data.validation:g} · store {escape(a.store.path)}"
              + (f" · {n - len(a.todo)} seeds already done" if len(a.todo) < n else ""), highlight=False)
    con.print(a.split_note, highlight=False, markup=False)

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
