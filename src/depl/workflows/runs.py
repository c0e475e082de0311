"""`depl runs show`: the runs of a store, read only — each with its measured band, its final losses, the seeds
that diverged and the closed loop's decisions (`show_runs`); with a PNG, their bands drawn (depl.report)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .common import check_output_file
from .errors import BadInput, as_bad_input, training_errors
from ..report.plots import plot_measured_bands
from ..runspec import run_spec
from ..store import Store
from ..train.engine.bands import band, bands, ends, run_label

KINDS = ("plan", "profile")


@dataclass(frozen=True)
class RunShown:
    """One run of a store: what it trained, its seeds and epochs (fewest and most of a seed: an adaptive run's
    seeds stop at different epochs), its final losses (mean, 1st and 99th percentile; None before any epoch),
    its seconds per epoch, the seeds that diverged {seed: epoch}, its decisions and its band (None: no epoch)."""

    run: str
    kind: str
    what: str
    created: str
    seeds: int
    epochs: int
    epochs_min: int
    final_loss_mean: Optional[float]
    final_loss_low: Optional[float]
    final_loss_high: Optional[float]
    seconds_per_epoch: float
    spec: Any
    diverged: dict
    decisions: tuple
    band: Any = None            # depl.band.Band

    def to_json(self) -> dict:
        b = self.band
        return {"run": self.run, "kind": self.kind, "what": self.what, "created": self.created, "seeds": self.seeds,
                "epochs": self.epochs, "epochs_min": self.epochs_min, "final_loss_mean": self.final_loss_mean,
                "final_loss_low": self.final_loss_low, "final_loss_high": self.final_loss_high,
                "seconds_per_epoch": self.seconds_per_epoch, "spec": self.spec,
                "diverged": [{"seed": s, "epoch": k} for s, k in self.diverged.items()],
                "decisions": list(self.decisions),
                "band": None if b is None else {"epoch": list(b.epochs), "mean": b.mean, "low": b.low,
                                                "high": b.high, "seeds": b.seeds()}}


@dataclass(frozen=True)
class RunsShown:
    """The runs of a store (of one kind, or all), and the PNG their bands were drawn in (None: not asked)."""

    store: str
    runs: tuple[RunShown, ...]
    png: Optional[Path] = None

    def to_json(self) -> dict:
        return {"store": self.store, "runs": [r.to_json() for r in self.runs]}


def show_runs(store: str | Path, kind: Optional[str] = None, png: Optional[str | Path] = None) -> RunsShown:
    """The runs of `store` (an SQLite path or sqlite:/// URL), of `kind` (plan or profile; None: all), read only:
    an absent store is refused (showing runs never creates one), and so is a run whose spec was altered; `png`:
    their measured bands drawn there (paper Fig. 2 style)."""
    if kind is not None and kind not in KINDS:
        raise BadInput(f"--kind {kind!r}: choose {' or '.join(KINDS)}")
    png = None if png is None else Path(png)
    if png is not None:
        check_output_file("--png", png)
    path = str(store)
    if not Path(path.removeprefix("sqlite:///")).is_file():
        raise BadInput(f"{path}: no such store (run `depl run` or `depl profile` first, or name the store: "
                       "`depl runs show STORE`)")
    with as_bad_input(*training_errors()):
        st = Store(path, readonly=True)  # it only reads: no write access needed, no writer locked out
        with st:
            runs = st.runs(kind)
            for r in runs:  # an altered store is refused before anything is shown
                run_spec(r, st.path)
            shown = tuple(_shown(st, r) for r in runs)
            if png is not None:
                _draw(st, kind, png)
            return RunsShown(st.path, shown, png)


def _shown(st, r: dict) -> RunShown:
    b = band(st, r)
    ds = st.decisions(r["run_id"])
    f = ({"epochs": 0, "epochs_min": 0, "final_loss_mean": None, "final_loss_low": None, "final_loss_high": None}
         if b is None else _finals(st, r, b, ds))
    return RunShown(r["run_id"], r["kind"], run_label(r), r["created"], 0 if b is None else b.runs, **f,
                    seconds_per_epoch=st.seconds_per_epoch(r["run_id"]), spec=r["spec"],
                    diverged=dict(st.diverged(r["run_id"])), decisions=tuple(ds), band=b)


def _finals(st, run: dict, b, decisions: list) -> dict:
    """A run's final losses (mean, 1st and 99th percentile) and its epochs (fewest and most of a seed): the
    band's last epoch, or for an adaptive run (its seeds end at different epochs) each seed's last loss."""
    import numpy as np

    if not decisions:
        k = len(b.epochs)
        return {"epochs": k, "epochs_min": k, "final_loss_mean": float(b.mean[-1]), "final_loss_low": float(b.low[-1]),
                "final_loss_high": float(b.high[-1])}
    last, n = ends(st, run)
    low, high = np.percentile(last, [1, 99])
    return {"epochs": int(n.max()), "epochs_min": int(n.min()), "final_loss_mean": float(last.mean()),
            "final_loss_low": float(low), "final_loss_high": float(high)}


def _draw(st, kind: Optional[str], png: Path) -> None:
    bs = bands(st, kind)
    if not bs:
        raise BadInput("no finished epochs to draw")
    plot_measured_bands(bs, png, decisions={b.run_id: st.decisions(b.run_id) for b in bs})
