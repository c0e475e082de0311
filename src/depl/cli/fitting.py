"""`depl fit`: the loss laws fitted to profiled runs or training logs, written as a scenario."""

from __future__ import annotations

import os
import shlex
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .console import choice, console, json_option, next_step, print_json, refusals
from .. import workflows
from ..laws import law_names


def _models() -> type[Enum]:
    """The loss law `depl fit --out` writes: auto or any registered law (depl.laws)."""
    return Enum("Model", [("auto", "auto")] + [(n, n) for n in law_names()], type=str)


Model = _models()


def fit(
    store: str = typer.Argument(..., metavar="STORE|LOGS", help="a runs store written by `depl profile` (SQLite path or "
                                "sqlite:/// URL), or training logs: a .csv or .parquet file, one row per (run, seed, "
                                "epoch) with columns run, seed, epoch, model, test_loss [data_fraction, nodes, "
                                "test_accuracy]; epoch 0 = the untrained network (docs/fitting.md)"),
    scenario: Optional[str] = typer.Option(None, "--scenario", help="the scenario the runs were profiled with "
                                           "(default: the one named in the store; for logs, a one-cluster template); "
                                           "its other sections are kept"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the chosen model's scenario here "
                                       "(and every law's next to it: NAME.increments.toml, NAME.level.toml, NAME.level-memory.toml)"),
    png: Optional[Path] = typer.Option(None, "--png", help="folder for the plots: measured vs fitted bands, x histograms"),
    model: str = typer.Option("auto", "--model", **choice(Model, "--model"),
                                help="auto (chosen by held-out fit) or a law (increments, level, level-memory): the "
                                     "model of --out"),
    bootstrap: int = typer.Option(200, "--bootstrap", min=0, max=100_000,
                                  help="parametric-bootstrap samples per KS test (0: none)"),
    seed: int = typer.Option(0, "--seed", min=0, help="random seed of the fit's bootstrap (same seed, same numbers)"),
    target_loss: Optional[float] = typer.Option(None, "--target-loss", help="set [target] loss in the files written"),
    omega: Optional[float] = typer.Option(None, "--omega", help="set [target] quantile in the files written"),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="set [target] deadline in the files written"),
    name: Optional[str] = typer.Option(None, "--name", help="the scenario name in the files written "
                                       "[default: BASE-fitted, BASE the base scenario's name]"),
    calibration_seeds: Optional[int] = typer.Option(
        None, "--calibration-seeds", min=0, max=100_000,
        help="seeds per experiment (the last ones) set apart: no law is fitted on them, and each law is recalibrated "
             "on them (split conformal on PIT scores, written as [calibration]; docs/fitting.md); 0: no calibration "
             "[default: a quarter of the seeds, leaving 3 to fit]"),
) -> None:
    """Fit the loss models (paper's increments, level) to profiled runs; report, choose by held-out fit, write."""
    with refusals():   # depl.workflows imports its fitting module (scipy.stats) here, on first use
        done = workflows.fit(store, scenario, out=out, png=png, model=model, bootstrap=bootstrap, seed=seed,
                             target_loss=target_loss, omega=omega, deadline=deadline, name=name,
                             calibration_seeds=calibration_seeds)
    r = done.result
    for line in workflows.report_lines(r):
        console.print(line, markup=False)
    if r.profile.diverged:
        console.print(f"skipped {r.profile.diverged} diverged seeds (non-finite loss; `depl runs show` lists them)",
                      markup=False)
    console.print(f"fitted in {done.seconds:.1f} s", markup=False)
    if done.plots:
        console.print(f"plots written to {png}/fit-bands.png, {png}/fit-multipliers.png", markup=False)
        if r.calibration:
            console.print(f"reliability and PIT histograms written to {png}/fit-calibration.png", markup=False)
    if done.out is not None:
        console.print(f"scenario {done.name!r} written to {done.out} ({done.chosen} model); every law: "
                      + ", ".join(map(str, done.siblings)), markup=False)
        if done.template:
            console.print("its clusters and datasets are a one-cluster template of the logs' setting (no --scenario): "
                          "edit them, and the versions' size and work, to plan for your system", markup=False)
    if done.out is not None:
        next_step(_plan_next(done))


def _plan_next(done) -> str:
    """The command after a fit: on profiled runs, the certified search (`depl plan FITTED --certify`: the cheapest
    plan fresh runs certify), with the folder of your code to allow where the scenario trains code of yours; on
    training logs (nothing here can train them), the plan by the law."""
    out = shlex.quote(str(done.out))
    if done.logs:
        return f"depl plan {out} --out plan.json"
    code = ""
    if done.base.code_hashes and done.base.code_dir:
        code = f" --allow-code {shlex.quote(os.path.relpath(done.base.code_dir))}"
    return f"depl plan {out} --certify --out plan.json{code}, then depl run plan.json --seeds 5{code}"




def calibrate(
    scenario: str = typer.Argument(..., help="the scenario whose law to calibrate: a built-in name or a TOML file "
                                   "(its fitted_seeds say which seeds the law was fitted on)"),
    store: str = typer.Argument(..., metavar="RUNS", help="runs.sqlite of `depl profile` (path or sqlite:/// URL): "
                                "experiments of the scenario's versions, on seeds the law was not fitted on "
                                "(`depl profile --first-seed`)"),
    out: Path = typer.Option(..., "--out", "-o", help="the calibrated scenario to write (may be SCENARIO's own "
                             "file): SCENARIO's text with its [calibration] table replaced, the law untouched"),
    omega: Optional[float] = typer.Option(None, "--omega", help="the ω to calibrate for (the file keeps every score: "
                                          "any ω the scores reach can be planned) [default: the scenario's target "
                                          "quantile]"),
    png: Optional[Path] = typer.Option(None, "--png", help="folder for the plot: reliability before/after and the "
                                       "PIT histograms (calibration.png)"),
    as_json: bool = json_option("print {scenario, runs, level, reliability, ...} on stdout as "
                                 "one JSON object (nothing else there)"),
) -> None:
    """Calibrate a scenario's fitted law on new runs, without refitting it (as `depl fit --calibration-seeds`).

    SCENARIO: a built-in name or a TOML file whose fitted_seeds say which seeds its law was fitted on.
    RUNS: runs.sqlite of `depl profile` (path or sqlite:/// URL) — experiments of the scenario's versions, under
    its conditions, on other seeds (`depl profile --first-seed`).

    Each run of RUNS (an experiment's seed) gives one PIT score under the law at each epoch it ran; split
    conformal on the epoch-K scores recalibrates the ω-quantile of a K-epoch plan (docs/fitting.md). Runs on the seeds the law was fitted on,
    and experiments the law cannot score, are refused (exit 2)."""
    with refusals():
        done = workflows.calibrate(scenario, store, out, omega=omega, png=png)
    if as_json:
        print_json(done.to_json())
        return
    con, cal, (first, last), fitted = console, done.calibration, done.seeds, done.base.fitted_seeds
    con.print(f"{done.base.name}: {cal.runs} runs of {len(done.experiments)} experiments on seeds {first}..{last} "
              f"(the law was fitted on seeds {fitted[0]}..{fitted[1]}); {done.store}", markup=False)
    if done.unfinished:
        con.print(f"{done.unfinished} of these runs diverged or stopped before their last epoch: each counts, as a "
                  "run that met no ℓmax (loss +inf from where it stopped)", markup=False)
    con.print(cal.message("new runs", done.more), markup=False)
    con.print("reliability: observed P(ℓ(E) ≤ the p-quantile) on these runs; calibrated: cross-fitted (each half of "
              "the runs judged by the calibration of the other half)", markup=False)
    con.print(f"{'p':<12}" + "".join(f"{p:>8g}" for p in done.levels), markup=False)
    con.print(f"{'as fitted':<12}" + "".join(f"{x:8.3f}" for x in done.before), markup=False)
    con.print(f"{'calibrated':<12}" + "".join(f"{x:8.3f}" for x in done.after), markup=False)
    con.print(f"scenario {done.written.name!r} written to {out} ([calibration] use = {str(done.use).lower()}; "
              "the law as it was)" + (f"; plot: {done.png}" if done.png is not None else ""), markup=False)
    next_step(f"depl plan {out} --out plan.json")
