"""The command line: the only place that knows argv, exit codes and rich output.

Exit codes: 0 success; 1 unexpected failure; 2 bad input (a scenario, plan or
option that cannot be used); 3 the target cannot be met (infeasible).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depl: plan, run and check dependable distributed training.")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one message, one line

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
MAX_RUNS = 1_000_000  # Monte Carlo trajectories; with K epochs they take runs·(K+1)·8 bytes
MAX_CELLS = 50_000_000  # 400 MB of trajectories at most


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one clear message to stderr and exit with `code` (no traceback)."""
    # names in messages are the user's ("[/]", "[nan, 0.5]"): never parsed as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


@app.command()
def scenarios() -> None:
    """List the built-in scenarios (any command also takes a path to a TOML file)."""
    from rich.table import Table

    from .scenario import builtin_names, load_scenario

    t = Table(title="built-in scenarios")
    t.add_column("name")
    t.add_column("models")
    t.add_column("clusters")
    t.add_column("description")
    for name in builtin_names():
        s = load_scenario(name)
        t.add_row(name, str(len(s.models)), str(len(s.clusters)), s.description)
    console.print(t)


def _load(scenario: str):
    from .scenario import ScenarioError, load_scenario

    try:
        return load_scenario(scenario)
    except ScenarioError as e:
        fail(str(e))


def _summary(plan) -> None:
    """Print a plan as a person reads it."""
    from collections import Counter

    from rich.table import Table

    status = "[green]feasible[/]" if plan.feasible else "[red]infeasible[/]"
    console.print(f"[bold]{escape(plan.method)}[/] plan for [bold]{escape(plan.scenario)}[/]: {status}")
    console.print(f"  datasets: {', '.join(plan.datasets)}", markup=False)
    t = Table(title="epochs per model version and cluster", show_lines=False)
    t.add_column("epochs")
    t.add_column("model version")
    t.add_column("cluster")
    t.add_column("compute x per node", justify="right")
    groups: list[list] = []
    for e in plan.epochs:  # consecutive runs, in order
        if groups and groups[-1][1] == e.model and groups[-1][2] == e.cluster:
            groups[-1][3] = e.epoch
            groups[-1][4].append(e.compute)
        else:
            groups.append([e.epoch, e.model, e.cluster, e.epoch, [e.compute]])
    for first, model, cluster, last, xs in groups:
        span = f"{first}" if first == last else f"{first}–{last}"
        xtxt = f"{xs[0]:.4g}" if max(xs) - min(xs) < 1e-9 * max(xs) else f"{min(xs):.4g}–{max(xs):.4g}"
        t.add_row(span, escape(model), escape(cluster), xtxt)
    console.print(t)
    counts = Counter(e.model for e in plan.epochs)
    console.print("  K = " + str(len(plan.epochs)) + " epochs: " + ", ".join(f"{m} ×{n}" for m, n in counts.items()),
                  markup=False)
    lo, hi = plan.loss_quantile_bounds or (plan.loss_quantile, plan.loss_quantile)
    console.print(f"  cost            {plan.cost:.6g}")
    console.print(f"  time            {plan.time:.6g}  (deadline {plan.deadline:g})")
    console.print(f"  {plan.omega:g}-quantile of ℓ(K)  ≤ {plan.loss_quantile:.5g}  (exact bracket [{lo:.5g}, {hi:.5g}];"
                  f" target {plan.loss_target:g})")
    console.print(f"  expected ℓ(K)   {plan.loss_mean:.5g}")
    console.print(f"  solve time      {plan.solve_seconds:.3f} s")


@app.command()
def plan(
    scenario: str = typer.Argument(..., help="a built-in scenario name (see `depl scenarios`) or a TOML file"),
    method: str = typer.Option("depl", "--method", "-m", help="depl, optimal or best-exp"),
    eta: int = typer.Option(200, "--eta", min=2, max=1000,
                            help="discretisation of the expanded graph (paper: η); memory grows as η²"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the plan here (JSON, depl.plan/1)"),
) -> None:
    """Plan the cheapest training whose ω-quantile of the final loss meets the target."""
    from .planners import METHODS, Infeasible, Options, make_plan

    if method not in METHODS:
        fail(f"--method {method!r}: choose one of {', '.join(METHODS)}")
    if out is not None:  # checked before solving, so a long solve is never lost
        if not out.parent.is_dir():
            fail(f"--out {out}: the folder {out.parent} does not exist")
        if out.is_dir():
            fail(f"--out {out}: is a folder; give a file name")
        import os
        if not os.access(out.parent, os.W_OK):
            fail(f"--out {out}: the folder {out.parent} is not writable")
    s = _load(scenario)
    try:
        with console.status(f"planning {escape(s.name)} with {method} (η = {eta}) …", spinner="dots"):
            p = make_plan(s, method, Options(eta=eta))
    except Infeasible as e:
        fail(str(e), EXIT_INFEASIBLE)
    _summary(p)
    if out is not None:
        try:
            p.save(out)
        except OSError as e:
            fail(f"--out {out}: cannot write ({e.strerror or e})")
        console.print(f"  plan written to {out}", markup=False)


@app.command()
def simulate(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    runs: int = typer.Option(10_000, "--runs", "-n", min=100, max=MAX_RUNS, help="Monte Carlo trajectories"),
    seed: int = typer.Option(0, "--seed", min=0, max=2**63 - 1, help="random seed (same seed, same numbers)"),
    png: Optional[Path] = typer.Option(None, "--png", help="loss band plot (default: next to the plan)"),
) -> None:
    """Check a plan by Monte Carlo: P(ℓ(K) ≤ ℓmax), the ω-quantile with a CI, the loss band."""
    from .plan import Plan, PlanError
    from .report.plots import plot_loss_band, save, switch_epochs
    from .scenario import ScenarioError
    from .simulate import simulate_plan

    try:
        p = Plan.load(plan_file)
        p.scenario_object()  # checks the plan against its scenario before any work
        if runs * (len(p.epochs) + 1) > MAX_CELLS:
            raise PlanError(f"--runs {runs}: {runs} trajectories of {len(p.epochs) + 1} points need "
                            f"{runs * (len(p.epochs) + 1) * 8 / 2**30:.1f} GiB; use at most "
                            f"{MAX_CELLS // (len(p.epochs) + 1)} runs for this plan")
        sim = simulate_plan(p, runs=runs, seed=seed)
    except (PlanError, ScenarioError) as e:
        fail(str(e))
    lo, hi = sim.p_meet_ci
    qlo, qhi = sim.quantile_ci
    console.print(f"[bold]Monte Carlo[/] of {escape(str(plan_file))} ({escape(p.method)}, {len(p.epochs)} epochs), "
                  f"{runs} runs, seed {seed}")
    console.print(f"  P(ℓ(K) ≤ {p.loss_target:g}) = {sim.p_meet:.4f}   95% CI [{lo:.4f}, {hi:.4f}]   (ω = {p.omega:g})")
    console.print(f"  {p.omega:g}-quantile of ℓ(K) = {sim.quantile:.5g}   95% CI [{qlo:.5g}, {qhi:.5g}]"
                  f"   (plan's certified bound {p.loss_quantile:.5g})")
    console.print(f"  mean ℓ(K) = {sim.final.mean():.5g}   (plan: {p.loss_mean:.5g})")
    verdict = hi >= p.omega
    console.print("  guarantee: " + ("[green]not refuted[/]" if verdict else "[red]refuted[/] (CI below ω)"))
    png = png or plan_file.with_suffix(".png")
    fig = plot_loss_band([(p.method, sim.band)], target=p.loss_target, switches=[switch_epochs(p)],
                         title=f"{p.scenario}: loss band of the {p.method} plan ({runs} runs)")
    save(fig, png)
    console.print(f"  loss band written to {png}", markup=False)


@app.command()
def reproduce(
    out: Path = typer.Option(Path("reproduce-results"), "--out", "-o", help="folder for results.md and the PNGs"),
    quick: bool = typer.Option(False, "--quick", help="fewer targets, Monte Carlo runs and η values (< 1 min)"),
    seed: int = typer.Option(0, "--seed", min=0, help="Monte Carlo seed (same seed, same results.md but timings)"),
) -> None:
    """Reproduce the paper's Sec. VI-B evaluation (Figs. 5–9, headline numbers, planner speed)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from .report.reproduce import Config, run

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a folder")
    cfg = Config.quick(seed) if quick else Config.full(seed)
    columns = (TextColumn("{task.description:<44}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("reproduce", total=1.0)

        def progress(label: str, done: float, total: float) -> None:
            bar.update(task, description=label, completed=done, total=total)

        try:
            results = run(cfg, out, progress)
        except OSError as e:
            fail(f"--out {out}: {e}")
    console.print(f"results.md and {len(list(out.glob('*.png')))} figures written to {out}/ "
                  f"({results.seconds:.0f} s)")
    console.print(f"  open {out / 'results.md'}")


def _register_training() -> None:
    # Training commands live with the training code; their module imports no
    # torch at import time, so planning never needs the `train` extra.
    try:
        from .train import commands
    except ImportError:  # pragma: no cover - the module is part of the package
        return
    commands.register(app)
    __import__("depl.fit.commands", fromlist=["register"]).register(app)  # depl fit, depl validate


def main() -> None:
    _register_training()
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
