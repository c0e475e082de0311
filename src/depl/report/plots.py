"""plot_* functions over finished results; each returns the matplotlib Figure."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..plan import Plan  # noqa: E402
from ..simulate import Band  # noqa: E402


def plot_loss_band(bands: Sequence[tuple[str, Band]], *, target: float | None = None,
                   switches: Sequence[Sequence[int]] = (), title: str = "", ax=None):
    """Expected loss (line) and 1st–99th percentile (shaded) per epoch — paper Fig. 9 style."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for i, (label, band) in enumerate(bands):
        k = range(band.mean.size)
        line, = ax.plot(k, band.mean, label=f"{label}: expected", lw=1.8)
        ax.fill_between(k, band.low, band.high, color=line.get_color(), alpha=0.25,
                        label=f"{label}: 1st–99th pct")
        for sw in (switches[i] if i < len(switches) else ()):
            ax.axvline(sw, color=line.get_color(), ls=":", lw=0.8)
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1.0, label=f"target ℓmax = {target:g}")
    ax.set_xlabel("epoch k")
    ax.set_ylabel("test loss ℓ(k)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return fig or ax.figure


def switch_epochs(plan: Plan) -> list[int]:
    """Epochs after which the plan switches version (where Fig. 9's peaks are)."""
    s = plan.schedule
    return [k for k in range(1, len(s)) if s[k] != s[k - 1]]


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
