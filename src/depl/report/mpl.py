"""matplotlib, set up once: the Agg backend (files, no display) and a common `save`.

pyplot is imported on first use only, so commands that draw nothing (`depl
plan`) never import matplotlib.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def pyplot():
    """matplotlib.pyplot with the Agg backend: every figure of depl is written to a file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str | Path, dpi: float | None = None) -> Path:
    """Lay out, write (creating the folder) and close `fig`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
