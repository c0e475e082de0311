"""`depl fit`: the loss laws fitted to profiled runs or training logs, written as a scenario."""

from __future__ import annotations

import os
import time
import tomllib
import warnings
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .console import check_output_file, choice, console, fail, json_option, user_errors


def _models() -> type[Enum]:
    """The loss law `depl fit --out` writes: auto or any registered law (depl.laws)."""
    from ..laws import law_names

    return Enum("Model", [("auto", "auto")] + [(n, n) for n in law_names()], type=str)


Model = _models()


def fitting_errors() -> tuple[type[Exception], ...]:
    from ..fit.runs import FitError

    return (*user_errors(), FitError)


def fitted_name(base: str, name: str | None = None) -> str:
    """The fitted scenario's name: --name, else BASE-fitted (a plan of it never passes for one of the base)."""
    if name is not None:
        return name
    return base if base.endswith("-fitted") else f"{base}-fitted"


def _sibling(out: Path, tag: str) -> Path:
    return out.with_name(f"{out.stem}.{tag}{out.suffix or '.toml'}")


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
    from ..scenario import OMEGA_RULE, omega_problem
    for flag, v, ok, rule in (("--omega", omega, lambda x: omega_problem(x) is None, OMEGA_RULE),
                              ("--target-loss", target_loss, lambda x: 0 < x < 1e12, "> 0"),
                              ("--deadline", deadline, lambda x: 0 < x < 1e12, "> 0")):
        if v is not None and not ok(v):  # also refuses nan (every comparison is false)
            fail(f"{flag} {v}: must be {rule}")
    # refused before the fit, not after minutes of it
    from ..scenario import name_problem

    if name is not None and (name_problem(name) or not name.strip()):
        fail(f"--name {name!r}: {name_problem(name) or 'empty'}")
    if png is not None and png.exists() and not png.is_dir():
        fail(f"--png {png}: exists and is not a folder (the plots are written into a folder)")
    if out is not None:
        if out.is_dir():
            fail(f"--out {out}: is a folder; give the scenario file to write, e.g. {out / 'fitted.toml'}")
        check_output_file("--out", out)
    if png is not None:
        check_output_file("--png", png / "fit-bands.png")
    from ..scenario import load_scenario, parse_scenario, with_target
    from ..store import Store
    from ..fit.report import report_lines, run_fit, toml_dumps
    from ..report.plots import plot_calibration, plot_fit, plot_multipliers

    from ..fit.logs import is_log_file

    path = store.removeprefix("sqlite:///")
    logs = is_log_file(path)
    if not Path(path).is_file():
        fail(f"{path}: no such {'log file' if logs else 'store (run `depl profile` first)'}")
    t0 = time.perf_counter()
    import numpy as np

    from ..fit.runs import FitError
    from ..runspec import run_spec

    try:
        with warnings.catch_warnings():
            # a degenerate fit is reported below, once; numpy's RuntimeWarnings would only add noise to stderr
            warnings.simplefilter("ignore", RuntimeWarning)
            if logs:
                base, r = _fit_logs(path, scenario, bootstrap, seed, name, target_loss, omega, deadline, calibration_seeds)
            else:
                st = Store(store, readonly=True)  # fit only reads the profiles
                if scenario is None:
                    names = {run_spec(r, path).scenario for r in st.runs("profile")} - {None}
                    if len(names) != 1:
                        raise FitError(f"{path}: cannot tell which scenario the runs were profiled with ({sorted(names)}); give --scenario")
                    scenario = names.pop()
                base = load_scenario(scenario)
                r = run_fit(st, base, bootstrap=bootstrap, seed=seed, calibration_seeds=calibration_seeds, omega=omega)
    except fitting_errors() as e:
        fail(str(e))
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as e:  # from scipy/numpy inside a fit
        fail(f"{path}: the loss laws cannot be fitted to these runs ({e}); are the test losses on a sane scale?")
    for line in report_lines(r):
        console.print(line, markup=False)
    if r.profile.diverged:
        console.print(f"skipped {r.profile.diverged} diverged seeds (non-finite loss; `depl runs show` lists them)",
                      markup=False)
    console.print(f"fitted in {time.perf_counter() - t0:.1f} s", markup=False)
    if png is not None:
        with warnings.catch_warnings():  # a version with few runs gives empty quantiles: numpy's warnings are noise
            warnings.simplefilter("ignore", RuntimeWarning)
            png.mkdir(parents=True, exist_ok=True)
            plot_fit(r, png / "fit-bands.png")
            plot_multipliers(r, png / "fit-multipliers.png")
            console.print(f"plots written to {png}/fit-bands.png, {png}/fit-multipliers.png", markup=False)
            if r.calibration:
                plot_calibration(r, png / "fit-calibration.png")
                console.print(f"reliability and PIT histograms written to {png}/fit-calibration.png", markup=False)
    if out is not None:
        chosen = r.chosen if model == "auto" else model
        fitted = fitted_name(base.name, name)
        epochs = max(e.epochs for e in r.profile.experiments)
        seeds = fitted_seeds(r.profile)
        for tag, data in r.data.items():
            data = {**with_target(data, target_loss, omega, deadline, fitted), "fitted_epochs": epochs,
                    "fitted_seeds": seeds}
            header = (f"Written by `depl fit {store}` ({tag} model{', chosen by held-out fit' if tag == r.chosen else ''}).\n"
                      f"Base scenario: {base.name}; loss sections (models' progress/noise/level, switches, data_law,\n"
                      f"loss_model, max_epochs = fitted_epochs = the profiled epochs) fitted from {len(r.profile.experiments)} "
                      f"{'logged runs' if logs else 'profiling experiments'} on seeds {seeds[0]}..{seeds[1]} "
                      "(fitted_seeds; `depl calibrate` refuses runs on them)."
                      + ("\nThe clusters and datasets are a template of the logs' setting (an epoch at full compute = one time\n"
                         "unit): edit them, and the versions' size and work, to plan for your system." if logs and scenario is None else "")
                      + (f"\n[calibration]: {r.calibration[tag].message()}.\n"
                         "`depl plan` plans with the calibrated law while use = true; `depl plan --uncalibrated` "
                         "(or use = false) with the law as fitted." if tag in r.calibration else ""))
            if isinstance(data.get("code_dir"), str) and Path(data["code_dir"]).is_absolute():
                # your code's folder relative to the written file (read relative to it): the project moves whole
                data = {**data, "code_dir": os.path.relpath(data["code_dir"], out.resolve().parent)}
            text = toml_dumps(data, header)
            try:
                parse_scenario(tomllib.loads(text), str(out))  # what we write must load
            except Exception as e:  # pragma: no cover - a bug, not a user error
                fail(f"the fitted scenario does not validate: {e}", 1)
            for p in ([out] if tag == chosen else []) + [_sibling(out, tag)]:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
        console.print(f"scenario {fitted!r} written to {out} ({chosen} model); every law: "
                      + ", ".join(str(_sibling(out, t)) for t in r.data), markup=False)
        if logs and scenario is None:
            console.print("its clusters and datasets are a one-cluster template of the logs' setting (no --scenario): "
                          "edit them, and the versions' size and work, to plan for your system", markup=False)


def fitted_seeds(profile) -> list[int]:
    """[first, last] of the seeds the laws were fitted on (every experiment's; the calibration seeds are apart)."""
    seeds = [int(x) for e in profile.experiments for x in e.seeds]
    return [min(seeds), max(seeds)]


def _fit_logs(path: str, scenario: Optional[str], bootstrap: int, seed: int, name, target_loss, omega, deadline,
              calibration_seeds: Optional[int] = None):
    """Fit logs (CSV/Parquet); the base scenario is --scenario's system or a template of the logs' setting."""
    from ..scenario import load_scenario
    from ..fit.logs import base_scenario, read_logs
    from ..fit.report import fit_profile

    logs = read_logs(path)
    base, reference = base_scenario(logs, load_scenario(scenario) if scenario else None, name=name,
                                    target_loss=target_loss, omega=omega, deadline=deadline)
    return base, fit_profile(logs.profile(reference), base, bootstrap=bootstrap, seed=seed,
                             calibration_seeds=calibration_seeds)


RELIABILITY_LEVELS = (0.5, 0.8, 0.9, 0.95)


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
    from .console import err_console, print_json

    from ..scenario import omega_problem
    if omega is not None and (why := omega_problem(omega, "--omega")):
        fail(why)
    if out.is_dir():
        fail(f"--out {out}: is a folder; give the scenario file to write, e.g. {out / 'calibrated.toml'}")
    check_output_file("--out", out)
    if png is not None:
        if png.exists() and not png.is_dir():
            fail(f"--png {png}: exists and is not a folder (the plot is written into a folder)")
        check_output_file("--png", png / "calibration.png")
    path = store.removeprefix("sqlite:///")
    if not Path(path).is_file():
        fail(f"{path}: no such store (run `depl profile --first-seed N` first)")
    import numpy as np

    from ..fit.calibrate import recalibrate, reliability, with_calibration
    from ..fit.report import toml_dumps
    from ..fit.runs import load_profile
    from ..scenario import CalibrationTable, parse_scenario, read_toml, scenario_source
    from ..store import Store

    con = err_console if as_json else console
    try:
        text, source = scenario_source(scenario)
        base = parse_scenario(read_toml(text, source), source)
        omega = base.target.quantile if omega is None else omega
        prof = load_profile(Store(store, readonly=True), base, min_seeds=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cal, pit = recalibrate(base, prof, omega)
    except fitting_errors() as e:
        fail(str(e))
    seeds = sorted({int(s) for e in prof.experiments for s in e.seeds})
    # as `depl fit`: use = false below ω's runs; also below the scenario's own target quantile, which it must load with
    table = cal.table()
    fewest = min([cal.runs] + [r.size for r in cal.epochs])  # at every scored epoch (docs/fitting.md)
    table["use"] = bool(cal.reaches and fewest >= CalibrationTable.needed(base.target.quantile))
    levels = sorted(set(RELIABILITY_LEVELS) | {round(float(omega), 6)})
    before = reliability(cal.scores, levels, "none")
    after = reliability(cal.scores, levels, "conformal") if cal.runs >= 2 else np.full(len(levels), np.nan)
    more = f"profile more seeds past the law's: `depl profile --first-seed {max(seeds[-1], base.fitted_seeds[1]) + 1}`"
    runs = (f"runs ({len(prof.experiments)} experiments, seeds {seeds[0]}..{seeds[-1]}; the law was fitted on seeds "
            f"{base.fitted_seeds[0]}..{base.fitted_seeds[1]}) by `depl calibrate`")
    comment = [f"[calibration]: {cal.message(runs, more)}.",
               "[calibration]: `depl plan` plans with the calibrated law while use = true; `depl plan --uncalibrated` "
               "(or use = false) with the law as fitted."]
    new = with_calibration(text, toml_dumps({"calibration": table}), comment)
    try:
        written = parse_scenario(tomllib.loads(new), str(out))  # what we write must load, with the same law
    except Exception as e:  # pragma: no cover - a bug, not a user error
        fail(f"the calibrated scenario does not validate: {e}", 1)
    same = {k: v for k, v in tomllib.loads(new).items() if k != "calibration"}
    if same != {k: v for k, v in tomllib.loads(text).items() if k != "calibration"}:  # pragma: no cover - a bug
        fail("the calibrated scenario's law differs from the scenario's: not written", 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new, encoding="utf-8")
    if png is not None:
        from ..report.plots import plot_reliability

        png.mkdir(parents=True, exist_ok=True)
        law = written.loss_model or "increments"
        plot_reliability({law: cal}, {law: pit}, png / "calibration.png", "new runs")
    if as_json:
        print_json({"scenario": base.name, "source": source, "store": path, "out": str(out),
                    "experiments": [e.label for e in prof.experiments], "runs": cal.runs,
                    "seeds": [seeds[0], seeds[-1]], "fitted_seeds": base.fitted_seeds, "omega": cal.omega,
                    "needed": cal.needed, "reaches": cal.reaches, "use": table["use"],
                    "level": cal.level if cal.reaches else None,
                    "epoch_levels": cal.levels().tolist() if cal.reaches else None,
                    "reliability": {"levels": levels, "before": before.tolist(), "after": after.tolist()},
                    "png": str(png / "calibration.png") if png is not None else None})
        return
    con.print(f"{base.name}: {cal.runs} runs of {len(prof.experiments)} experiments on seeds {seeds[0]}..{seeds[-1]} "
              f"(the law was fitted on seeds {base.fitted_seeds[0]}..{base.fitted_seeds[1]}); {path}", markup=False)
    con.print(cal.message("new runs", more), markup=False)
    con.print("reliability: observed P(ℓ(E) ≤ the p-quantile) on these runs; calibrated: cross-fitted (each half of "
              "the runs judged by the calibration of the other half)", markup=False)
    con.print(f"{'p':<12}" + "".join(f"{p:>8g}" for p in levels), markup=False)
    con.print(f"{'as fitted':<12}" + "".join(f"{x:8.3f}" for x in before), markup=False)
    con.print(f"{'calibrated':<12}" + "".join(f"{x:8.3f}" for x in after), markup=False)
    con.print(f"scenario {written.name!r} written to {out} ([calibration] use = {str(table['use']).lower()}; "
              "the law as it was)" + (f"; plot: {png / 'calibration.png'}" if png is not None else ""), markup=False)
