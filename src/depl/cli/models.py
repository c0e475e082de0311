"""The trained models of a run folder: `depl runs models` lists them, `depl export-model` writes one as a
program that runs without depl (torch is imported inside each command)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..workflows.common import MAX_SEED
from .console import choice, console, json_option, print_json, refusals
from .. import workflows

RUN_FOLDER = typer.Argument(..., help="a run folder (`depl run --out`): its models/ folder is read")
RUN = typer.Option(None, "--run", help="the run whose model to take, where the folder keeps several runs' models")


class ExportFormat(str, Enum):
    torch_export = "torch-export"
    onnx = "onnx"


def runs_models(
    folder: Path = RUN_FOLDER,
    as_json: bool = json_option("print {folder, models: [...]} on stdout as one JSON object (nothing else there)"),
) -> None:
    """List the trained models a run folder keeps: run, seed, version, parameters, final test loss, accuracy,
    file."""
    from rich.table import Table

    with refusals():
        models = workflows.list_models(folder)
    if as_json:
        print_json({"folder": str(folder), "models": models})
        return
    t = Table(title=f"models in {escape(str(folder))}")
    for c in ("run", "seed", "version", "params", "epochs", "final test loss", "accuracy", "file"):
        t.add_column(c)
    for m in models:
        t.add_row(escape(m["run"]), str(m["seed"]), escape(m["version"]), f"{m.get('parameters', 0):,}",
                  str(m.get("epochs", "")), f"{m['final_test_loss']:.4f}",
                  "—" if m.get("final_test_accuracy") is None else f"{m['final_test_accuracy']:.3f}", escape(m["path"]))
    console.print(t)
    if not models:
        console.print("no model kept (a run with --keep-models none, or whose seeds all diverged)", markup=False)


def export_model(
    folder: Path = RUN_FOLDER,
    seed: int = typer.Option(..., "--seed", min=0, max=MAX_SEED, help="the seed whose final model to export"),
    out: Path = typer.Option(..., "--out", help="the file to write, in a folder that exists: NAME.pt2 for "
                             "torch-export, NAME.onnx for onnx; a new file or an earlier export, never a kept model, "
                             "a store or a plan"),
    run: Optional[str] = RUN,
    fmt: str = typer.Option(ExportFormat.torch_export.value, "--format", **choice(ExportFormat, "--format"),
                            help="torch-export: a torch.export program (torch.export.load(FILE).module() runs it, "
                            "without depl); onnx: NAME.onnx and its weights NAME.onnx.data, where depl[onnx] is "
                            "installed"),
    allow: Optional[List[Path]] = typer.Option(None, "--allow-code", metavar="DIR",
                                               help="your own network's code folder (net = MODULE:FUNCTION): "
                                               "docs/security.md"),
    as_json: bool = json_option("print what was written as one JSON object on stdout (nothing else there)"),
) -> None:
    """Write one seed's trained model as a deployable program that loads without depl."""
    with refusals():
        done = workflows.export_model(folder, seed, out, run=run, fmt=fmt, allow_code=allow)
    if as_json:
        print_json(done.to_json())
        return
    shape = "×".join(str(d) for d in done.input_shape)
    wrote = escape(str(done.file))
    if done.data_file:
        wrote += f" and its weights {escape(str(done.data_file))} (keep them side by side: the model names them)"
    console.print(f"wrote {wrote} ({done.format}): run {escape(done.run)} seed {done.seed}, version "
                  f"{escape(done.version)}, final test loss {done.final_test_loss:.4f}; inputs {shape} → "
                  f"{escape(done.output)}", highlight=False)
