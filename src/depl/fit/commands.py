"""`depl fit` and `depl validate`; registered by depl.cli. No torch at import time."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from ..train.commands import RAY_HELP, SEED_BATCH_HELP, WORKERS_HELP

console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200, highlight=False)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
EXIT_BAD_INPUT = 2


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from ..cli import fail

    fail(message, code)  # one way to print an error: literal text (a "[target]" in it stays)


def _user_errors() -> tuple[type[Exception], ...]:
    from ..plan import PlanError
    from ..scenario import ScenarioError
    from ..store import StoreError
    from .runs import FitError

    return (PlanError, ScenarioError, StoreError, FitError)


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
    model: str = typer.Option("auto", "--model", help="auto (chosen by held-out fit), or a law: increments, level, "
                              "level-memory: the model of --out"),
    bootstrap: int = typer.Option(200, "--bootstrap", min=0, help="parametric-bootstrap samples per KS test (0: none)"),
    seed: int = typer.Option(0, "--seed", min=0),
    target_loss: Optional[float] = typer.Option(None, "--target-loss", help="set [target] loss in the files written"),
    omega: Optional[float] = typer.Option(None, "--omega", help="set [target] quantile in the files written"),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="set [target] deadline in the files written"),
    name: Optional[str] = typer.Option(None, "--name", help="the scenario name in the files written"),
    calibration_seeds: Optional[int] = typer.Option(
        None, "--calibration-seeds", min=0, max=100_000,
        help="seeds per experiment (the last ones) set apart: no law is fitted on them, and each law is recalibrated "
             "on them (split conformal on PIT scores, written as [calibration]; docs/fitting.md); 0: no calibration "
             "[default: a quarter of the seeds, leaving 3 to fit]"),
) -> None:
    """Fit the loss models (paper's increments, level) to profiled runs; report, choose by held-out fit, write."""
    from ..laws import law_names

    if model != "auto" and model not in law_names():
        _fail(f"--model {model!r}: choose auto, {', '.join(law_names())}")
    for flag, v, ok, rule in (("--omega", omega, lambda x: 0 < x < 1, "in (0, 1)"),
                              ("--target-loss", target_loss, lambda x: 0 < x < 1e12, "> 0"),
                              ("--deadline", deadline, lambda x: 0 < x < 1e12, "> 0")):
        if v is not None and not ok(v):  # also refuses nan (every comparison is false)
            _fail(f"{flag} {v}: must be {rule}")
    # refused before the fit, not after minutes of it
    if png is not None and png.exists() and not png.is_dir():
        _fail(f"--png {png}: exists and is not a folder (the plots are written into a folder)")
    if out is not None and out.is_dir():
        _fail(f"--out {out}: is a folder; give the scenario file to write, e.g. {out / 'fitted.toml'}")
    from ..scenario import load_scenario, parse_scenario, with_target
    from ..store import Store
    from .report import plot_calibration, plot_fit, plot_multipliers, report_lines, run_fit, toml_dumps

    from .logs import is_log_file

    path = store.removeprefix("sqlite:///")
    logs = is_log_file(path)
    if not Path(path).is_file():
        _fail(f"{path}: no such {'log file' if logs else 'store (run `depl profile` first)'}")
    t0 = time.perf_counter()
    import numpy as np

    from .runs import FitError

    try:
        with warnings.catch_warnings():
            # a degenerate fit is reported below, once; numpy's RuntimeWarnings would only add noise to stderr
            warnings.simplefilter("ignore", RuntimeWarning)
            if logs:
                base, r = _fit_logs(path, scenario, bootstrap, seed, name, target_loss, omega, deadline, calibration_seeds)
            else:
                st = Store(store, readonly=True)  # fit only reads the profiles
                if scenario is None:
                    names = {r["spec"].get("scenario") for r in st.runs("profile")} - {None}
                    if len(names) != 1:
                        raise FitError(f"{path}: cannot tell which scenario the runs were profiled with ({sorted(names)}); give --scenario")
                    scenario = names.pop()
                base = load_scenario(scenario)
                r = run_fit(st, base, bootstrap=bootstrap, seed=seed, calibration_seeds=calibration_seeds, omega=omega)
    except _user_errors() as e:
        _fail(str(e))
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as e:  # from scipy/numpy inside a fit
        _fail(f"{path}: the loss laws cannot be fitted to these runs ({e}); are the test losses on a sane scale?")
    for line in report_lines(r):
        console.print(line, markup=False)
    console.print(f"fitted in {time.perf_counter() - t0:.1f} s", markup=False)
    if png is not None:
        png.mkdir(parents=True, exist_ok=True)
        plot_fit(r, png / "fit-bands.png")
        plot_multipliers(r, png / "fit-multipliers.png")
        console.print(f"plots written to {png}/fit-bands.png, {png}/fit-multipliers.png", markup=False)
        if r.calibration:
            plot_calibration(r, png / "fit-calibration.png")
            console.print(f"reliability and PIT histograms written to {png}/fit-calibration.png", markup=False)
    if out is not None:
        chosen = r.chosen if model == "auto" else model
        for tag, data in r.data.items():
            data = with_target(data, target_loss, omega, deadline, name)
            header = (f"Written by `depl fit {store}` ({tag} model{', chosen by held-out fit' if tag == r.chosen else ''}).\n"
                      f"Base scenario: {base.name}; loss sections (models' progress/noise/level, switches, data_law,\n"
                      f"loss_model, max_epochs = the profiled epochs) fitted from {len(r.profile.experiments)} "
                      f"{'logged runs' if logs else 'profiling experiments'}."
                      + ("\nThe clusters and datasets are a template of the logs' setting (an epoch at full compute = one time\n"
                         "unit): edit them, and the versions' size and work, to plan for your system." if logs and scenario is None else "")
                      + (f"\n[calibration]: {r.calibration[tag].message()}.\n"
                         "`depl plan` plans with the calibrated law while use = true; `depl plan --uncalibrated` "
                         "(or use = false) with the law as fitted." if tag in r.calibration else ""))
            text = toml_dumps(data, header)
            try:
                parse_scenario(__import__("tomllib").loads(text), str(out))  # what we write must load
            except Exception as e:  # pragma: no cover - a bug, not a user error
                _fail(f"the fitted scenario does not validate: {e}", 1)
            for p in ([out] if tag == chosen else []) + [_sibling(out, tag)]:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
        console.print(f"scenario written to {out} ({chosen} model); every law: "
                      + ", ".join(str(_sibling(out, t)) for t in r.data), markup=False)
        if logs and scenario is None:
            console.print("its clusters and datasets are a one-cluster template of the logs' setting (no --scenario): "
                          "edit them, and the versions' size and work, to plan for your system", markup=False)


def _fit_logs(path: str, scenario: Optional[str], bootstrap: int, seed: int, name, target_loss, omega, deadline,
              calibration_seeds: Optional[int] = None):
    """Fit logs (CSV/Parquet); the base scenario is --scenario's system or a template of the logs' setting."""
    from ..scenario import load_scenario
    from .logs import base_scenario, read_logs
    from .report import fit_profile

    logs = read_logs(path)
    base, reference = base_scenario(logs, load_scenario(scenario) if scenario else None, name=name,
                                    target_loss=target_loss, omega=omega, deadline=deadline)
    return base, fit_profile(logs.profile(reference), base, bootstrap=bootstrap, seed=seed,
                             calibration_seeds=calibration_seeds)


def validate(
    scenario: str = typer.Argument(..., help="the scenario whose loss model draws the planned band (a name or TOML file)"),
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    seeds: int = typer.Option(200, "--seeds", min=2, max=100_000, help="held-out seeds F..F+N-1"),
    first_seed: int = typer.Option(1000, "--first-seed", min=0, max=2**31 - 1, help="F: the first seed (keep clear of the profiling seeds)"),
    out: Path = typer.Option(Path("depl-validate"), "--out", help="folder for the store, the report and the PNG"),
    store: Optional[str] = typer.Option(None, "--store", help="[default: OUT/runs.sqlite]"),
    png: Optional[Path] = typer.Option(None, "--png", help="band plot [default: OUT/PLAN-validate.png]"),
    threads: int = typer.Option(1, "--threads", min=1),
    as_json: bool = typer.Option(False, "--json", help="print the report (as in OUT/PLAN-validate.json) on stdout "
                                 "as one JSON object, nothing else there"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (cuda when torch sees a GPU, else cpu)"),
    seed_batch: int = typer.Option(32, "--seed-batch", min=1, help=SEED_BATCH_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help=RAY_HELP),
) -> None:
    """Run a plan for real on held-out seeds; coverage P(ℓ(K) ≤ ℓmax) with a Clopper–Pearson interval vs ω. Resumes."""
    from ..plan import Plan
    from ..scenario import load_scenario
    from ..store import Store
    from ..validate import plot_validation, validate as judge

    try:
        import torch
        import torch_pruning  # noqa: F401
    except ImportError as e:
        _fail(f"validation trains for real and needs the `train` extra (pip install 'depl[train]'): {e}")
    torch.set_num_threads(threads)
    from ..train.commands import resolve_device

    dev = resolve_device(device)
    from ..train import execute
    from ..train.data import DataError
    from ..train.federation import JobError, job_from_plan

    try:
        s = load_scenario(scenario)
        p = Plan.load(plan_file)
        if not p.feasible or not p.epochs:
            raise ValueError(f"{plan_file}: the plan is infeasible or empty; nothing to validate")
        unknown = set(p.schedule) - {m.name for m in s.models}
        if unknown:
            raise ValueError(f"{plan_file}: versions {sorted(unknown)} of the plan are not models of {s.name!r}")
        job = job_from_plan(p, dev)
        out.mkdir(parents=True, exist_ok=True)
        st = Store(store or out / "runs.sqlite")
        run_id = execute.run_id_for(job, "local")
        execute.register(st, run_id, "plan", job, {"backend": "local", "plan": p.to_json()})
    except (*_user_errors(), DataError, JobError, ValueError, OSError) as e:
        _fail(str(e))
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    seed_list = list(range(first_seed, first_seed + seeds))
    n = len(job.epochs)
    todo = execute.pending(st, run_id, job, seed_list)
    con.print(f"validating {plan_file} ({p.method}, {n} epochs) on seeds {first_seed}..{first_seed + seeds - 1} · "
                  f"run {run_id} · store {st.path}" + (f" · {seeds - len(todo)} seeds already done" if len(todo) < seeds else ""),
                  markup=False)
    t0 = time.perf_counter()
    from ..train.commands import _progress, run_seeds, seed_options

    with _progress() as bar:
        task = bar.add_task("validate", total=n * seeds, completed=sum(min(st.done_epochs(run_id, x), n) for x in seed_list))

        def progress(rid, seed, epoch, r):
            bar.update(task, advance=1, description=f"seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

        run_seeds(st, [(run_id, job, seed_list)], seed_options(seed_batch, workers, ray_address, threads), progress)
    losses = st.losses(run_id)
    import numpy as np

    traj = np.array([[s.initial_loss] + losses[x][:n] for x in seed_list])
    v = judge(p, s, traj, seed_list, str(plan_file))
    c = v.coverage
    con.print(f"[bold]validation[/] of {escape(str(plan_file))}: {escape(p.method)} plan with the {v.loss_model} "
              f"loss model of {escape(s.name)}, "
                  f"cost {p.cost:.4g}, {n} epochs; {c.runs} real runs in {time.perf_counter() - t0:.0f} s", markup=True)
    con.print(f"  coverage P(ℓ(K) ≤ {c.target:g}) = {c.rate:.3f} ({c.hits}/{c.runs})   Clopper–Pearson 95% "
                  f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]   ω = {c.omega:g}", markup=False)
    con.print(f"  measured ℓ(K): mean {v.final_mean:.4f}, sd {v.final_sd:.4f}, {c.omega:g}-quantile {v.final_quantile:.4f}"
                  f"   (plan: mean {v.planned_mean:.4f}, certified {c.omega:g}-quantile {v.certified_quantile:.4f})", markup=False)
    con.print("  guarantee: " + ("[green]not refuted[/] (the interval reaches ω)" if c.not_refuted
                                     else "[red]refuted[/] (the interval lies below ω)"), markup=True)
    png = png or out / f"{plan_file.stem}-validate.png"
    plot_validation(v, png)
    report = out / f"{plan_file.stem}-validate.json"
    report.write_text(json.dumps(v.to_json(), indent=1), encoding="utf-8")
    if as_json:
        from ..jsonout import dumps

        sys.stdout.write(dumps({**v.to_json(), "report": str(report), "png": str(png)}) + "\n")
    con.print(f"  band written to {png}; report to {report}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
    app.command("validate")(validate)
