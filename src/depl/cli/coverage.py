"""`depl coverage`: the coverage table — per task × ω × loss law, a plan run for real on held-out seeds and judged
(the workflow: depl.workflows.coverage)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .console import EXIT_OK, EXIT_REFUTED, console, epoch_progress, err_console, fail, json_option, print_json, refusals
from ..workflows.common import Training
from .training import said, trains_seeds
from .. import workflows


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in _split(text)]
    except ValueError:
        fail(f"{flag} {text!r}: give numbers separated by commas, e.g. 0.8,0.9,0.95")


@trains_seeds()
def coverage(
    tasks: str = typer.Option("mnist1d-small:1.5,digits-small,mnist1d-noniid", "--tasks",
                              help="tasks, comma-separated: a built-in scenario or TOML file, with ':LOSS' to set its "
                                   "target loss ℓmax (mnist1d-small's own target is infeasible under its fitted law)"),
    omegas: str = typer.Option("0.8,0.9,0.95", "--omegas", help="target quantiles ω, comma-separated"),
    laws: str = typer.Option("increments,level,calibrated", "--laws",
                             help="loss laws, comma-separated: increments (the paper's), level, level-memory, or "
                                  "calibrated (the scenario's own law recalibrated by its [calibration])"),
    runs: int = typer.Option(200, "--runs", min=2, max=100_000, help="held-out real runs per cell"),
    first_seed: Optional[int] = typer.Option(None, "--first-seed", min=0, max=2**31 - 1,
                                             help="the first held-out seed; seeds a task's lineage used (its fit, "
                                             "its calibration, the store's other runs of a plan) are refused "
                                             "[default: the seeds the table in OUT began with, else the tasks' "
                                             "first free seed]"),
    method: str = typer.Option("depl", "--method", help="the planner of every cell"),
    out: Path = typer.Option(Path("depl-coverage"), "--out",
                             help="folder for the store (runs.sqlite), the plans (plans/), coverage.json and coverage.md"),
    md: Optional[Path] = typer.Option(None, "--md", help="write the markdown table here [default: OUT/coverage.md]"),
    train: bool = typer.Option(True, "--train/--no-train", help="--no-train: train nothing; judge each cell on the "
                               "held-out seeds the store has finished (a partial table, its run counts per cell), "
                               "each plan the store holds judged as it was planned"),
    as_json: bool = json_option("print the table (as in OUT/coverage.json) on stdout as one "
                                 "JSON object, nothing else there"),
    training: Training = None,
) -> None:
    """The coverage table: for each task × ω × loss law, plan, run on held-out seeds, judge. Resumes.

    Writes OUT/coverage.json and the markdown table; exits 4 when a cell's guarantee is refuted (its one-sided 1 − α
    Clopper–Pearson upper bound lies below ω, α the task's; the cells are named), 0 otherwise."""
    con = err_console if as_json else console
    with refusals(), con.status("planning the cells …", spinner="dots"):
        c = workflows.prepare_coverage(_split(tasks), _floats(omegas, "--omegas"), _split(laws), runs=runs,
                                       first_seed=first_seed, method=method, out=out, md=md, train=train,
                                       training=training)
    _print_cells(c.table.cells, con)
    total, done = c.total_epochs, c.done_epochs()
    con.print(f"{len(c.table.cells)} cells, {len(c.groups)} distinct runs to train × {runs} seeds "
              f"({c.seeds[0]}..{c.seeds[-1]}): {total} epochs, {done} already in {c.store.path}", markup=False)
    with epoch_progress() as bar, refusals():
        task_bar = bar.add_task("coverage", total=total, completed=done)

        def progress(label, seed, epoch, r):
            bar.update(task_bar, advance=1, description=f"{label} · seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

        result = workflows.train_coverage(c, training, progress, said(con))
    _summary(result.table, con)
    con.print(f"written to {result.json_file} and {result.md}", markup=False)
    refuted = result.refuted
    code = EXIT_REFUTED if refuted else EXIT_OK
    if as_json:
        print_json({**result.to_json(), "exit_code": code})
    keys = [c.key for c in refuted]
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more ({result.json_file} lists them)" if len(keys) > 5 else "")
    con.print(("[red]refuted[/]: " + escape(shown) + f"; exit {code}")
              if refuted else f"no cell refuted; exit {code}", markup=True)
    raise typer.Exit(code)


def _print_cells(cells, con) -> None:
    """Each cell's plan (or why it has none), and the cells whose runs it shares."""
    for c in cells:
        what = (f"{c.schedule}, cost {c.cost:.1f}, the law's q{c.omega:g} {c.certified_quantile:.4f}"
                + (f" (runs shared with {', '.join(c.shares_with)})" if c.shares_with else "")) if c.planned \
            else f"missing: {c.missing}"
        con.print(f"  {c.key}: {what}", markup=False)


def _summary(table, con) -> None:
    from rich.table import Table as RichTable

    t = RichTable(title="coverage on held-out real runs")
    for col in ("task", "ω", "law", "plan", "cost", "law q_ω", "runs", "coverage", "one-sided bounds", "meas. q_ω",
                "meas. mean", "verdict"):
        t.add_column(col)
    for c in table.cells:
        if not c.planned:
            t.add_row(c.task, f"{c.omega:g}", c.law, "missing", "", "", "", "", "", "", "", "missing")
            continue
        t.add_row(c.task, f"{c.omega:g}", c.law, escape(c.schedule), f"{c.cost:.1f}", f"{c.certified_quantile:.4f}",
                  str(c.runs), f"{c.coverage:.3f}" if c.runs else "—",
                  f"[{c.ci_low:.3f}, {c.ci_high:.3f}]" if c.runs else "—",
                  f"{c.measured_quantile:.4f}" if c.runs else "—", f"{c.measured_mean:.4f}" if c.runs else "—",
                  f"{c.verdict} ({c.bound_words})" if c.runs else c.verdict)
    con.print(t)
