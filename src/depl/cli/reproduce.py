"""`depl reproduce`: the paper's evaluation, end to end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from .console import console, err_console, refusals
from ..workflows.reproduce import map_grid, reproduce as evaluate


def reproduce(
    out: Path = typer.Option(Path("reproduce-results"), "--out", "-o", help="folder for results.md and the PNGs"),
    quick: bool = typer.Option(False, "--quick", help="fewer targets, Monte Carlo runs and η values (< 1 min)"),
    seed: int = typer.Option(0, "--seed", min=0, help="Monte Carlo seed (same seed, same results.md but timings)"),
    grid: Optional[str] = typer.Option(None, "--map", help="the map's grid: tiny, medium, full or none (default: "
                                       "tiny with --quick, else medium); its plans go to OUT/map.jsonl and a rerun "
                                       "skips those already there"),
) -> None:
    """Reproduce the paper's Sec. VI-B evaluation (Figs. 5–9, both readings of best-exp × both cost models,
    a map of where the claims hold, planner speed)."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar  # depl's `Progress` is a model version's progress (A, B)

    with refusals():
        grid = map_grid(out, quick, grid)

    columns = (TextColumn("{task.description:<44}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Bar(*columns, console=err_console, transient=False, disable=not err_console.is_terminal) as bar, refusals():
        task = bar.add_task("reproduce", total=1.0)
        t0, said = time.monotonic(), [0.0]

        def progress(label: str, done: float, total: float) -> None:
            bar.update(task, description=label, completed=done, total=total)
            now = time.monotonic() - t0
            if not err_console.is_terminal and (now - said[0] >= 10 or done >= total):
                # a log file gets no live bar: a plain line every 10 s instead
                said[0] = now
                eta = now / done * (total - done) if done > 0 else float("nan")
                err_console.print(f"{100 * done / total:5.1f}%  {now / 60:6.1f} min  ETA {eta / 60:6.1f} min  {label}",
                                  highlight=False, markup=False)

        r = evaluate(out, quick, seed, grid, progress)
    console.print(f"results.md and {r.figures} figures written to {out}/ ({r.seconds:.0f} s)")
    console.print(f"  open {r.results_md}")
