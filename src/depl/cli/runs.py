"""`depl runs show`: the runs of a store as a table (or --json), the closed loop's decisions, and with --png their
measured bands.  The workflow: depl.workflows.runs (`depl runs models`: depl.cli.models)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .console import choice, console, fail, json_option, print_json, refusals
from ..workflows.runs import show_runs


class Kind(str, Enum):
    """The kinds of run in a store."""

    plan = "plan"
    profile = "profile"


STORE_ARG = typer.Argument(None, metavar="[STORE]", help="the store to read: SQLite path or sqlite:/// URL "
                           "(or --store) [default: OUT/runs.sqlite]")
STORE = typer.Option(None, "--store", help="the store to read, as STORE")
OUT = typer.Option(Path("depl-runs"), "--out", help="the run folder whose store to read (without STORE)")
PNG = typer.Option(None, "--png", help="draw the loss bands (mean, 1st–99th percentile) here")
KIND = typer.Option(None, "--kind", **choice(Kind, "--kind"), help="only runs of this kind: plan or profile")
RUNS_JSON = json_option("print {store, runs: [...]} on stdout as one JSON object (nothing else there)")


def runs_show(
    store_arg: Optional[str] = STORE_ARG, store: Optional[str] = STORE, out: Path = OUT, png: Optional[Path] = PNG,
    kind: Optional[str] = KIND, as_json: bool = RUNS_JSON,
) -> None:
    """List the runs of a store; with --png, draw their measured loss bands (paper Fig. 2 style)."""
    if store_arg is not None and store is not None and store_arg != store:
        fail(f"STORE {store_arg} and --store {store}: name the store once")
    with refusals():
        shown = show_runs(store_arg or store or str(out / "runs.sqlite"), kind, png)
    if as_json:
        print_json(shown.to_json())
        return
    _runs_table(shown)
    decided = [(r.run, d) for r in shown.runs for d in r.decisions]
    if decided:
        _decisions_table(decided)
    if png is not None:
        console.print(f"wrote {png}", markup=False)


def _runs_table(shown) -> None:
    from rich.table import Table

    t = Table(title=f"runs in {escape(shown.store)}")
    for c in ("run", "kind", "what", "seeds", "diverged", "epochs", "final loss mean", "1st–99th pct", "s/epoch"):
        t.add_column(c)
    for r in shown.runs:
        gone = _diverged_text(r.diverged)
        if r.band is None:
            t.add_row(escape(r.run), escape(r.kind), escape(r.what), "0", gone, "0", "", "", "")
            continue
        epochs = f"{r.epochs_min}–{r.epochs}" if r.epochs_min < r.epochs else str(r.epochs)
        t.add_row(escape(r.run), escape(r.kind), escape(r.what), str(r.seeds), gone, epochs,
                  f"{r.final_loss_mean:.4f}", f"{r.final_loss_low:.4f} – {r.final_loss_high:.4f}",
                  f"{r.seconds_per_epoch:.3f}")
    console.print(t)


def _decisions_table(decided: list[tuple[str, dict]], limit: int = 200) -> None:
    """The closed loop's decisions: every one that changed a plan or warned, and each seed's last."""
    from rich.table import Table

    last = {(rid, d["seed"]): d["epoch"] for rid, d in decided}
    shown = [(rid, d) for rid, d in decided if d["action"] != "continue" or last[(rid, d["seed"])] == d["epoch"]]
    t = Table(title="decisions of adaptive runs (changes and each seed's last; runs show --json has all)")
    for c in ("run", "seed", "after epoch", "val loss", "P(plan)", "P(kept)", "cond. quantile", "action", "epochs left",
              "cost spent", "saved", "note"):
        t.add_column(c)
    f = lambda x: "" if x is None else f"{x:.4g}"  # noqa: E731
    for rid, d in shown[:limit]:
        t.add_row(escape(rid), str(d["seed"]), str(d["epoch"]), f(d["observed"]), f(d["p_plan"]), f(d["p_new"]),
                  f(d["quantile"]), d["action"], str(len(d.get("rest", []))), f(d.get("cost_spent")), f(d.get("saved")),
                  escape(str(d.get("note", ""))))
    console.print(t)
    if len(shown) > limit:
        console.print(f"… {len(shown) - limit} more", markup=False)


def _diverged_text(gone: dict[int, int]) -> str:
    """'2 (seed 3 @1, seed 5 @4)': how many seeds diverged, and where."""
    if not gone:
        return "0"
    where = ", ".join(f"seed {s} @{k}" for s, k in list(gone.items())[:3])
    return f"{len(gone)} ({where}{', …' if len(gone) > 3 else ''})"
