"""The trained models of a run folder: listed (`runs models`), loaded (`load_model`, exported as
`depl.load_model`) and exported as a deployable program (`export-model`).

`depl run` keeps each seed's final model in RUN_FOLDER/models/RUN_ID (depl.train.models says the format).
A model, a run folder or an output file that cannot be used is `BadInput`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .common import check_output_file, need_training_extra
from .errors import BadInput, as_bad_input, training_errors

if TYPE_CHECKING:
    from torch import nn

# what `runs models` shows of a model's sidecar, in order
LISTED = ("run", "seed", "version", "parameters", "epochs", "final_test_loss", "final_test_accuracy", "path")


def list_models(run_folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every model kept in `run_folder`, by run and seed: its sidecar (run, seed, version, parameters, epochs,
    final test loss and accuracy, plan, file, path, SHA-256, …)."""
    need_training_extra()
    from ..train.models import list_models as listed

    with as_bad_input(*training_errors()):
        return listed(run_folder)


def load_model(run_folder: str | os.PathLike, seed: int = 0, *, run: Optional[str] = None,
               allow_code: Optional[list[str | os.PathLike]] = None) -> "nn.Module":
    """Seed `seed`'s final model of a run folder (`depl run --out RUN_FOLDER`), a torch `nn.Module` in eval mode.

    `run`: the run's id, needed where the folder keeps the models of several runs.  A model of your own
    network (net = "MODULE:FUNCTION") imports its module only from `allow_code` folders (or $DEPL_CODE), and
    only if its files are the ones it was trained with."""
    need_training_extra()
    from ..train.models import load

    with as_bad_input(*training_errors()):
        return load(run_folder, seed, run, [Path(f) for f in allow_code or []])


@dataclass(frozen=True)
class Exported:
    """A model written as a deployable program (`export_model`)."""

    file: Path
    format: str                  # torch-export or onnx
    run: str
    seed: int
    version: str
    input_shape: list            # ["batch" or its fixed size, *the data's shape]
    dynamic_batch: bool
    final_test_loss: float

    def to_json(self) -> dict[str, Any]:
        return {"file": str(self.file), "format": self.format, "run": self.run, "seed": self.seed,
                "version": self.version, "input_shape": self.input_shape, "dynamic_batch": self.dynamic_batch,
                "final_test_loss": self.final_test_loss}


def export_model(run_folder: str | os.PathLike, seed: int, out: str | os.PathLike, *, run: Optional[str] = None,
                 fmt: str = "torch-export", allow_code: Optional[list[str | os.PathLike]] = None) -> Exported:
    """Write seed `seed`'s model as a program that runs without depl: torch.export (`torch.export.load(out)
    .module()(x)`), or ONNX where the `onnx` package is installed."""
    out = Path(out)
    check_output_file("--out", out)
    need_training_extra()
    from ..train.models import EXPORT_FORMATS, export, find, read

    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"--format {fmt!r}: choose {' or '.join(EXPORT_FORMATS)}")
    model = load_model(run_folder, seed, run=run, allow_code=allow_code)
    with as_bad_input(*training_errors()):
        side = find(run_folder, seed, run)
        spec, _ = read(side)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            done = export(model, spec, out, fmt)
        except Exception as e:  # torch.export refuses a network it cannot trace (your own, with Python control flow)
            if isinstance(e, training_errors()):
                raise
            raise BadInput(f"{side['path']}: {fmt} cannot export this network: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return Exported(out, done["format"], side["run"], int(side["seed"]), side["version"], done["input_shape"],
                    bool(done.get("dynamic_batch", True)), float(side["final_test_loss"]))
