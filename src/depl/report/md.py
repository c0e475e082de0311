"""Markdown cells and tables shared by the results.md writers."""

from __future__ import annotations

import math

from ..experiments.results import Outcome


def pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:+.2f}%"


def cost_cell(o: Outcome) -> str:
    return f"{o.cost:.1f}" if o.feasible else "infeasible"


def segs(o: Outcome) -> str:
    return " → ".join(f"{m}×{n}" for m, n in o.segments) if o.feasible else "—"


def tick(o: Outcome) -> str:
    return "—" if not o.feasible else ("yes" if o.meets else "**NO**")


def cell(x: str) -> str:
    return x.replace("|", "\\|")  # |M| inside a table


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return out + [""]


__all__ = ["pct", "cost_cell", "segs", "tick", "cell", "table"]
