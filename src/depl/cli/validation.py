"""`depl validate`: a plan run for real on held-out seeds and judged (the pipeline: depl.train.validation)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from .console import (EXIT_OK, EXIT_REFUTED, check_output_file, choice, console, epoch_progress, err_console, fail,
                      json_option, print_json, warn)
from .training import (ALLOW_CODE, DEVICE, RAY_ADDRESS, RULE_HELP, SEED_BATCH, THREADS, Rule, VALIDATION_HELP, WORKERS,
                       allow_code, refuse_adaptive_options, run_seeds, seed_options, start_training, training_errors)


def validate(
    scenario: str = typer.Argument(..., help="the scenario whose loss model draws the planned band (a name or TOML file)"),
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    seeds: int = typer.Option(200, "--seeds", min=2, max=100_000, help="held-out seeds F..F+N-1"),
    first_seed: int = typer.Option(1000, "--first-seed", min=0, max=2**31 - 1, help="F: the first seed (keep clear of the profiling seeds)"),
    out: Path = typer.Option(Path("depl-validate"), "--out", help="folder for the store, the report and the PNG"),
    store: Optional[str] = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]"),
    png: Optional[Path] = typer.Option(None, "--png", help="band plot [default: OUT/PLAN-validate.png]"),
    threads: int = THREADS,
    as_json: bool = json_option("print the report (as in OUT/PLAN-validate.json) on stdout "
                                 "as one JSON object, nothing else there"),
    device: str = DEVICE,
    seed_batch: int = SEED_BATCH,
    workers: Optional[int] = WORKERS,
    ray_address: Optional[str] = RAY_ADDRESS,
    adaptive: bool = typer.Option(False, "--adaptive", help="run the seeds by the closed loop (depl run --adaptive) "
                                  "and judge its coverage and mean cost (docs/adaptive.md)"),
    validation: Optional[float] = typer.Option(None, "--validation", min=0.01, max=4.0,
                                     help=VALIDATION_HELP),
    rule: Optional[str] = typer.Option(None, "--rule", **choice(Rule, "--rule"), help=RULE_HELP + " [default: slack]"),
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Run a plan for real on held-out seeds; coverage P(ℓ(K) ≤ ℓmax) with a Clopper–Pearson interval vs ω. Resumes.

    SCENARIO must have the loss law the plan was made with. Exits 4 when the guarantee is refuted (the interval's
    upper end lies below ω), 0 when it is not; the last line says which."""
    allow_code(allow)
    if adaptive:  # what the closed loop does not use is refused, as `depl run --adaptive` does, before any work
        if ray_address:
            fail("--adaptive runs on the local back end (each seed's rest may change on its own)")
        if png is not None:
            fail("--png: an adaptive validation draws no band (its seeds stop at different epochs)")
        _same_law(scenario, plan_file)
        return _validate_adaptive(plan_file, list(range(first_seed, first_seed + seeds)), store, out, threads, device,
                                  validation, as_json, seed_batch, rule or Rule.slack.value)
    refuse_adaptive_options(rule, validation, "validations")
    dev = start_training(threads, device)
    from ..report.plots import plot_validation
    from ..train.validation import prepare, write_report

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a folder")
    if png is not None:  # checked now: the plot is drawn after the training
        check_output_file("--png", png)
    seed_list = list(range(first_seed, first_seed + seeds))
    try:
        h = prepare(scenario, plan_file, seed_list, store or out / "runs.sqlite", dev, folder=out)
    except (*training_errors(), ValueError, OSError) as e:
        fail(str(e))
    p, n = h.plan, h.epochs
    if h.extrapolated:
        warn(h.extrapolated)
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    todo = h.pending()
    con.print(f"validating {plan_file} ({p.method}, {n} epochs) on seeds {first_seed}..{first_seed + seeds - 1} · "
              f"run {h.run_id} · store {h.store.path}" + (f" · {seeds - len(todo)} seeds already done" if len(todo) < seeds else ""),
              markup=False)
    t0 = time.perf_counter()
    with epoch_progress() as bar:
        task = bar.add_task("validate", total=n * seeds, completed=h.done_epochs())

        def progress(rid, seed, epoch, r):
            bar.update(task, advance=1, description=f"seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

        run_seeds(h.store, [(h.run_id, h.job, seed_list)], seed_options(seed_batch, workers, ray_address, threads), progress)
    v = h.judge()
    c = v.coverage
    con.print(f"[bold]validation[/] of {escape(str(plan_file))}: {escape(p.method)} plan with the {v.loss_model} "
              f"loss model of {escape(h.scenario.name)}, "
              f"cost {p.cost:.4g}, {n} epochs; {c.runs} real runs in {time.perf_counter() - t0:.0f} s", markup=True)
    con.print(f"  coverage P(ℓ(K) ≤ {c.target:g}) = {c.rate:.3f} ({c.hits}/{c.runs})   Clopper–Pearson 95% "
              f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]   ω = {c.omega:g}", markup=False)
    if v.diverged:
        gone = h.store.diverged(h.run_id)
        con.print(f"  {len(v.diverged)} seeds diverged (non-finite loss), counted as ℓ(K) = +inf: seeds "
                  f"{v.diverged[:10]}{' …' if len(v.diverged) > 10 else ''} at epochs "
                  f"{[gone[x] for x in v.diverged[:10]]}", markup=False)
    con.print(f"  measured ℓ(K): mean {v.final_mean:.4f}, sd {v.final_sd:.4f}, {c.omega:g}-quantile {v.final_quantile:.4f}"
              f"   (plan: mean {v.planned_mean:.4f}, certified {c.omega:g}-quantile {v.certified_quantile:.4f})", markup=False)
    png = png or out / f"{plan_file.stem}-validate.png"
    report = out / f"{plan_file.stem}-validate.json"
    write_report(v, report)
    plot_validation(v, png)
    con.print(f"  band written to {png}; report to {report}", markup=False)
    code = EXIT_OK if c.not_refuted else EXIT_REFUTED
    if as_json:
        print_json({**v.to_json(), "exit_code": code, "report": str(report), "png": str(png)})
    # the last line: what a script gating on the exit code is told
    con.print("guarantee: " + (f"[green]not refuted[/] (the interval reaches ω = {c.omega:g}); exit 0" if c.not_refuted
                               else f"[red]refuted[/] (the interval [{c.ci[0]:.3f}, {c.ci[1]:.3f}] lies below "
                               f"ω = {c.omega:g}); exit {EXIT_REFUTED}"), markup=True)
    raise typer.Exit(code)


def _same_law(scenario: str, plan_file: Path) -> None:
    """SCENARIO must have the plan's loss law (as for an open-loop validation): the closed loop decides with it."""
    from ..plan import Plan
    from ..scenario import load_scenario
    from ..validate import law_mismatch

    try:
        p = Plan.load(plan_file)
        why = law_mismatch(p, p.scenario_object(), load_scenario(scenario), str(scenario))
    except (*training_errors(), ValueError, OSError) as e:
        fail(str(e))
    if why:
        fail(why)


def _validate_adaptive(plan_file: Path, seed_list: list[int], store, out: Path, threads: int, device: str,
                       validation: float | None, as_json: bool, seed_batch: int = 32, rule: str = "slack") -> None:
    """Coverage of the final test loss and mean cost of adaptive runs on held-out seeds; exit 4 when refuted."""
    import numpy as np

    from ..validate import coverage
    from .training import _run_adaptive

    con = err_console if as_json else console
    p, finals, costs, actions = _run_adaptive(plan_file, seed_list, store, out, threads, device, validation, {}, con,
                                              seed_batch=seed_batch, rule=rule)
    c = coverage(finals, p.loss_target, p.omega)
    mean_cost = float(np.nanmean(costs))
    con.print(f"  adaptive coverage P(ℓ_test ≤ {c.target:g}) = {c.rate:.3f} ({c.hits}/{c.runs})   Clopper–Pearson 95% "
              f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]   ω = {c.omega:g}   mean cost {mean_cost:.4g} (open-loop plan "
              f"{p.cost:.4g})", markup=False)
    code = EXIT_OK if c.not_refuted else EXIT_REFUTED
    if as_json:
        print_json({"plan_file": str(plan_file), "adaptive": True, "runs": c.runs, "hits": c.hits, "coverage": c.rate,
                    "ci_low": c.ci[0], "ci_high": c.ci[1], "omega": c.omega, "target": c.target,
                    "not_refuted": c.not_refuted, "mean_cost": mean_cost, "plan_cost": p.cost, "actions": actions,
                    "exit_code": code})
    con.print("guarantee: " + ("not refuted" if c.not_refuted else "refuted") + f"; exit {code}", markup=False)
    raise typer.Exit(code)
