"""`depl run`: a plan trained for real over seeds — on the local back end (its executors), Flower's simulation
engine, a Flower deployment, or by the closed loop (--adaptive).  The workflow: depl.workflows.training."""

from __future__ import annotations

import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..ledger import as_ranges, ranges_text
from ..workflows.common import MAX_SEED, MAX_SEEDS, Training, seed_range
from .console import choice, console, epoch_progress, err_console, fail, json_option, next_step, print_json, refusals
from .training import (CERTIFICATE_HELP, GAP_FROM_HELP, KEEP_HELP, RULE_HELP, VALIDATION_HELP, AdaptiveShow, KeepModels,
                       Rule, refuse_adaptive_options, said, summary, trains_seeds)
from .. import workflows


class Backend(str, Enum):
    local = "local"
    flower = "flower"


PLAN = typer.Argument(..., help="a plan file (JSON, from `depl plan`)")
SEEDS = typer.Option(1, "--seeds", min=1, max=MAX_SEEDS, help="seeds 0..N-1 (with --first-seed: F..F+N-1)")
FIRST_SEED = typer.Option(0, "--first-seed", min=0, max=MAX_SEED,
                          help="F: the first seed (new seeds for a plan already run)")
BACKEND = typer.Option(Backend.local.value, "--backend", **choice(Backend, "--backend"),
                       help="local (in process) or flower (Flower's simulation engine)")
STORE = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]")
OUT = typer.Option(Path("depl-runs"), "--out", help="the run folder (store, Flower state, Ray temp files)")
SUPERLINK = typer.Option(None, "--superlink", help="flower: submit to this SuperLink connection of Flower's "
                         "config.toml (a deployment, see docs/flower-deployment.md) instead of the simulation engine")
INSECURE = typer.Option(False, "--insecure", help="--superlink: accept a connection without TLS or to a SuperLink's "
                        "Control API over the network (docs/flower-deployment.md)")
ADAPTIVE = typer.Option(False, "--adaptive", help="closed loop: after every epoch stop (or, --rule conditional, "
                        "re-plan the rest) where the guarantee allows (docs/adaptive.md); local back end, --seed-batch "
                        "seeds (default 32, nothing measured) in one stack while their rests agree")
VALIDATION = typer.Option(None, "--validation", min=0.01, max=4.0, help=VALIDATION_HELP)
SLOW = typer.Option(None, "--slow", help="--adaptive: CLUSTER:FACTOR, the cluster's epochs take FACTOR times their "
                    "planned time (a rehearsal; repeatable)")
RULE = typer.Option(None, "--rule", **choice(Rule, "--rule"), help=RULE_HELP + " [default: slack]")
GAP_FROM = typer.Option(None, "--gap-from", metavar="STORE", help=GAP_FROM_HELP)
CERTIFICATE = typer.Option(None, "--certificate", metavar="FILE", help=CERTIFICATE_HELP)
RUN_JSON = json_option("print the run on stdout as one JSON object (its seeds, final losses, the seeds that "
                       "diverged), nothing else there; not with --adaptive")
KEEP = typer.Option(None, "--keep-models", **choice(KeepModels, "--keep-models"), help=KEEP_HELP)


@trains_seeds(local=True)
def run(
    plan: Path = PLAN, seeds: int = SEEDS, first_seed: int = FIRST_SEED, backend: str = BACKEND,
    store: Optional[str] = STORE, out: Path = OUT, superlink: Optional[str] = SUPERLINK, insecure: bool = INSECURE,
    adaptive: bool = ADAPTIVE, validation: Optional[float] = VALIDATION, slow: Optional[List[str]] = SLOW,
    rule: Optional[str] = RULE, gap_from: Optional[List[Path]] = GAP_FROM, certificate: Optional[Path] = CERTIFICATE,
    as_json: bool = RUN_JSON, keep_models: Optional[str] = KEEP, training: Training = None,
) -> None:
    """Train a plan for real over seeds; the test loss after every epoch goes to the store, the final models to
    OUT/models. Resumes."""
    if adaptive:
        _adaptive(plan, seed_range(first_seed, seeds), backend, superlink, store, out, training, validation, slow,
                  rule, gap_from, as_json, keep_models, certificate)
        return
    if slow:
        fail("--slow applies to --adaptive runs only")
    refuse_adaptive_options(rule, validation, "runs", gap_from, certificate)
    with refusals():
        prepared = workflows.prepare_run(plan, seeds, first_seed, backend=backend, store=store, out=out,
                                         training=training, superlink=superlink, insecure=insecure,
                                         keep_models=keep_models)
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    done = show_plan_run(prepared, training, con)
    if done.flwr_output:
        (sys.stderr if as_json else sys.stdout).write(done.flwr_output)
    con.print(f"done in {done.seconds:.1f} s")
    if done.models is not None:
        con.print(f"models ({prepared.keep_models}): {escape(str(done.models))}"
                  + (f", {len(done.models_written)} written now" if done.models_written else ""), highlight=False)
        if done.unkept:   # finished by an earlier call that kept no model of them: none can be kept now
            n, which = len(done.unkept), ranges_text(as_ranges(done.unkept), 3)
            con.print(f"  {n} seed{'s' * (n > 1)} finished before this call keep no model ({which}"
                      + ("; best compares only the models kept" if prepared.keep_models == "best" else "")
                      + "): train them in a new run folder (--out) to keep them", highlight=False)
    summary(done.store, done.run_id, f"plan {done.plan.method} on {done.plan.scenario}"
            + (" (Flower deployment)" if superlink else ""), done.seeds, con)
    next_step(f"depl runs models {shlex.quote(str(out))}" if done.models is not None else
              f"depl runs show {shlex.quote(str(done.store.path))}", con)
    if as_json:
        print_json(run_json(done))


def _adaptive(plan: Path, seed_list: list[int], backend: str, superlink, store, out: Path, training: Training,
              validation, slow, rule, gap_from, as_json: bool, keep_models, certificate=None) -> None:
    """`depl run --adaptive`: the closed loop on the local back end, its decisions said as it goes."""
    if as_json:
        fail("--json: an adaptive run prints its decisions as text (`depl runs show --json` has them all)")
    if backend != "local" or superlink or training.ray_address:
        fail("--adaptive runs on the local back end (each seed's rest may change on its own)")
    with refusals():
        slowed = workflows.parse_slow(slow)
    with AdaptiveShow() as show, refusals():
        done = workflows.run_adaptive(plan, seed_list, store=store, out=out, training=training, validation=validation,
                                      slow=slowed, rule=rule or Rule.slack.value, gap_from=gap_from,
                                      certificate=certificate, keep_models=keep_models, started=show.started,
                                      progress=show.progress)
    show.done(done)
    next_step(f"depl runs models {shlex.quote(str(out))}" if done.models is not None else
              f"depl runs show {shlex.quote(str(store or out / 'runs.sqlite'))}")


def show_plan_run(r, training: Training, con=console):
    """Train a prepared plan run (depl.workflows.training.train_run) under its header line and progress bar."""
    if r.superlink:  # the ServerApp trains elsewhere: no progress here
        con.print(f"run [bold]{r.run_id}[/] · submitting {escape(str(workflows.flower_app_folder(r)))} to SuperLink "
                  f"{escape(repr(r.superlink))} (flwr run)", highlight=False)
        with refusals():
            return workflows.train_run(r, training)
    already, seeds = r.done_epochs(), len(r.seeds)
    con.print(f"run [bold]{r.run_id}[/] · plan {escape(str(r.plan_file))} · {r.epochs} epochs × {seeds} seeds · "
              f"back end {r.backend} · store {escape(r.store.path)}"
              + (f" · resuming ({already} epochs done)" if already else ""), highlight=False)
    with epoch_progress() as bar, refusals():
        task = bar.add_task(f"{r.backend}", total=r.epochs * seeds, completed=already)

        def progress(seed, epoch, loss):
            bar.update(task, advance=1, description=f"{r.backend} seed {seed} epoch {epoch} loss {loss:.3f}")

        return workflows.train_run(r, training, progress, said(con))


def run_json(done) -> dict:
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
