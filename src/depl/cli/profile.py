"""`depl profile`: model versions trained from scratch at data fractions, and switch experiments, for the loss law
to be fitted on (`depl fit`).  The workflow: depl.workflows.training (prepare_profile, train_profile)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..workflows.common import MAX_SEED, MAX_SEEDS, Training
from .console import console, epoch_progress, err_console, json_option, next_step, print_json, refusals
from .training import diverged_line, said, trains_seeds
from .. import workflows

SCENARIO = typer.Argument(..., help="a built-in scenario name or a TOML file")
EPOCHS = typer.Option(30, "--epochs", "-E", min=1, max=10_000,  # as a scenario's max_epochs
                      help="E: epochs of every experiment (the fitted law holds up to E: max_epochs)")
SEEDS = typer.Option(30, "--seeds", "-N", min=1, max=MAX_SEEDS, help="seeds 0..N-1 (with --first-seed: F..F+N-1)")
FIRST_SEED = typer.Option(0, "--first-seed", min=0, max=MAX_SEED,
                          help="the first seed: new seeds for an experiment already profiled, e.g. to calibrate a "
                          "fitted law on seeds it was not fitted on (`depl calibrate`)")
FRACTIONS = typer.Option("1", "--fractions", help="data fractions, e.g. 1,0.5,0.25")
VERSION = typer.Option(None, "--version", help="profile only these versions (repeatable)")
SWITCH = typer.Option(None, "--switch", help="FROM:TO:K1 switch experiment (repeatable)")
DATASETS = typer.Option(None, "--dataset", help="datasets to train on [default: all]")
NODES = typer.Option(1, "--nodes", min=1, help="nodes doing FedAvg in every experiment")
STORE = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]")
OUT = typer.Option(Path("depl-runs"), "--out", help="the run folder (the store, Ray temp files)")
PROFILE_JSON = json_option("print the experiments' runs on stdout as one JSON object (each with the seeds that "
                           "diverged), nothing else there")


@trains_seeds()
def profile(
    scenario: str = SCENARIO, epochs: int = EPOCHS, seeds: int = SEEDS, first_seed: int = FIRST_SEED,
    fractions: str = FRACTIONS, version: Optional[List[str]] = VERSION, switch: Optional[List[str]] = SWITCH,
    datasets: Optional[List[str]] = DATASETS, nodes: int = NODES, store: Optional[str] = STORE, out: Path = OUT,
    as_json: bool = PROFILE_JSON, training: Training = None,
) -> None:
    """Profile model versions: E epochs × N seeds from scratch, at data fractions, and switch experiments. Resumes."""
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    with refusals():
        p = workflows.prepare_profile(scenario, epochs, seeds, first_seed,
                                      fractions=tuple(workflows.parse_fractions(fractions)),
                                      versions=tuple(version or ()), switches=tuple(switch or ()),
                                      datasets=tuple(datasets or ()), nodes=nodes, store=store, out=out,
                                      training=training)
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

        profiled = workflows.train_profile(p, training, progress, said(con))
    con.print(f"done in {profiled.seconds:.1f} s")
    labels = {rid: exp.label for exp, _, rid in p.jobs}
    gone = profiled.diverged()
    line = diverged_line(len(p.jobs) * len(p.seeds), [(labels[rid] if len(p.jobs) > 1 else "", g)
                                                      for rid, g in gone.items()])
    if line:
        con.print(line, markup=False, highlight=False)
    # a scenario file is named again (the store names the scenario, which only a built-in's name finds)
    base = f" --scenario {shlex.quote(scenario)}" if Path(scenario).is_file() else ""
    next_step(f"depl fit {shlex.quote(str(p.store.path))}{base} --out {shlex.quote(fit_out(scenario))}", con)
    if as_json:
        print_json(_profile_json(p, profiled, labels, epochs))


def fit_out(scenario: str) -> str:
    """The fit's file the next step names: fitted.toml, or fitted-2.toml, -3, … where that is the scenario just
    profiled (a next step never writes over its own input)."""
    name, k = "fitted.toml", 1
    while Path(scenario).is_file() and Path(name).resolve() == Path(scenario).resolve():
        k += 1
        name = f"fitted-{k}.toml"
    return name


def _profile_json(p, profiled, labels: dict, epochs: int) -> dict:
    """What `depl profile --json` prints: the experiments' runs, each with the seeds that diverged."""
    gone = profiled.diverged()
    return {"scenario": p.scenario.name, "store": str(p.store.path), "seeds": list(p.seeds), "epochs": epochs,
            "seconds": profiled.seconds, "runs_trained": len(p.jobs) * len(p.seeds),
            "diverged_runs": sum(len(g) for g in gone.values()),
            "runs": [{"run": rid, "experiment": labels[rid], "diverged": sorted(gone[rid]),
                      "diverged_at": [{"seed": s, "epoch": k} for s, k in gone[rid].items()]}
                     for rid in profiled.run_ids],
            "seed_training": None if profiled.seed_training is None else profiled.seed_training.to_json()}
