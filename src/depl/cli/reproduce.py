"""`depl reproduce`: the paper's evaluation, end to end."""

from __future__ import annotations

from pathlib import Path

import typer

from .console import console, err_console, fail


def reproduce(
    out: Path = typer.Option(Path("reproduce-results"), "--out", "-o", help="folder for results.md and the PNGs"),
    quick: bool = typer.Option(False, "--quick", help="fewer targets, Monte Carlo runs and η values (< 1 min)"),
    seed: int = typer.Option(0, "--seed", min=0, help="Monte Carlo seed (same seed, same results.md but timings)"),
) -> None:
    """Reproduce the paper's Sec. VI-B evaluation (Figs. 5–9, headline numbers, planner speed)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ..experiments import Config, run
    from ..report.results_md import write

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
            results = run(cfg, progress, finish=lambda r: write(r, out))
        except OSError as e:
            fail(f"--out {out}: {e}")
    console.print(f"results.md and {len(list(out.glob('*.png')))} figures written to {out}/ "
                  f"({results.seconds:.0f} s)")
    console.print(f"  open {out / 'results.md'}")
