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
    """Lay out, write (creating the folder) and close `fig`: at `path` exactly, as PNG unless its
    suffix names another format matplotlib writes (without one, matplotlib would append ".png" and
    the file would not be where the caller says it is)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:  # a figure made with layout="constrained" lays itself out
        fig.tight_layout()
    suffix = path.suffix[1:].lower()
    fig.savefig(path, dpi=dpi, format=suffix if suffix in fig.canvas.get_supported_filetypes() else "png")
    pyplot().close(fig)
    return path
