"""`depl reproduce`'s workflow: the paper's Sec. VI-B evaluation, end to end, written as results.md and its
figures (depl.experiments runs it, depl.report writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .common import check_folder
from .errors import BadInput
from ..experiments import Config, run
from ..experiments.map import GRIDS
from ..report.results_md import write


@dataclass(frozen=True)
class Reproduced:
    """The evaluation written into `out` (results.md, `figures` PNGs), in `seconds`."""

    out: Path
    figures: int
    seconds: float

    @property
    def results_md(self) -> Path:
        return self.out / "results.md"


def map_grid(out: Path, quick: bool = False, grid: Optional[str] = None) -> str:
    """The map's grid [default: tiny when `quick`, else medium], with the output folder checked (before any work)."""
    check_folder("--out", out)
    grid = grid or ("tiny" if quick else "medium")
    if grid not in (*GRIDS, "none"):
        raise BadInput(f"--map {grid!r}: choose {', '.join(GRIDS)} or none")
    return grid


def reproduce(out: str | Path = Path("reproduce-results"), quick: bool = False, seed: int = 0,
              grid: Optional[str] = None,
              progress: Optional[Callable[[str, float, float], None]] = None) -> Reproduced:
    """Reproduce the paper's evaluation (`depl reproduce`): Figs. 5–9, both readings of best-exp × both cost
    models, a map of where the claims hold (`grid`: tiny, medium, full or none [default: tiny when `quick`, else
    medium]; its plans go to OUT/map.jsonl and a rerun skips those already there), planner speed.
    progress(label, done, total) as it goes."""
    out = Path(out)
    grid = map_grid(out, quick, grid)
    cfg = Config.quick(seed, grid) if quick else Config.full(seed, grid)
    try:
        results = run(cfg, progress or (lambda label, done, total: None), finish=lambda r: write(r, out),
                      map_file=out / "map.jsonl")
    except OSError as e:
        raise BadInput(f"--out {out}: {e}") from None
    return Reproduced(out, len(list(out.glob("*.png"))), results.seconds)
