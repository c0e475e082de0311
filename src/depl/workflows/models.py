"""The trained models of a run folder: listed (`runs models`), loaded (`load_model`, exported as
`depl.load_model`) and exported as a deployable program (`export-model`).

`depl run` keeps each seed's final model in RUN_FOLDER/models/RUN_ID (depl.train.task.models says the format).
A run folder or an output file that cannot be used is `BadInput`; a model that cannot be loaded, `ModelError`
(a BadInput): its file is checked against the network its run recorded (depl.train.task.models.rebuild).
"""

from __future__ import annotations

import json
import operator
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .common import check_output_file
from .errors import BadInput, ModelError, as_bad_input, training_errors
from ..train.task.models import export, EXPORT_FORMATS, find, FOLDER, list_models as listed, load, read

if TYPE_CHECKING:
    from torch import nn

# what `runs models` shows of a model's sidecar, in order
LISTED = ("run", "seed", "version", "parameters", "epochs", "final_test_loss", "final_test_accuracy", "path")


def list_models(run_folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every model kept in `run_folder`, by run and seed: its sidecar (run, seed, version, parameters, epochs,
    final test loss and accuracy, plan, file, path, SHA-256, …)."""
    with as_bad_input(*training_errors()):
        return listed(run_folder)


def load_model(run_folder: str | os.PathLike, seed: int = 0, *, run: Optional[str] = None,
               allow_code: Optional[list[str | os.PathLike]] = None) -> "nn.Module":
    """Seed `seed`'s final model of a run folder (`depl run --out RUN_FOLDER`), a torch `nn.Module` in eval mode.

    `run`: the run's id, needed where the folder keeps the models of several runs.  A model of your own
    network (net = "MODULE:FUNCTION") imports its module only from `allow_code` folders (or $DEPL_CODE), and
    only if its files are the ones it was trained with.

    ModelError (one line: the file, the layer or weight, why) for a model that is not there or cannot be used:
    a file changed since it was kept, layer sizes or weights (shapes, dtypes) not those of the network its run
    recorded, a weight that is NaN or infinite, a sidecar naming another file than its own."""
    given = seed
    try:
        seed = None if isinstance(given, bool) else operator.index(given)   # numpy's integers too; not "0" or 0.0
    except TypeError:
        seed = None
    if seed is None:
        raise ModelError(f"seed = {given!r}: a whole number (int), e.g. seed=0")
    if isinstance(allow_code, (str, os.PathLike)):
        allow_code = [allow_code]
    elif allow_code is not None and not isinstance(allow_code, (list, tuple)):
        raise ModelError(f"allow_code = {allow_code!r}: a list of the folders your code may be imported from, "
                         "e.g. allow_code=['.']")
    try:
        return load(run_folder, seed, run, [Path(f) for f in allow_code or []])
    except training_errors() as e:
        raise ModelError(str(e)) from None


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
    loss: Optional[str] = None   # the loss it was trained with (None: a model kept before its sidecar said)
    outputs: int = 0             # its outputs per sample (classes, or predicted values)
    data_file: Optional[Path] = None   # ONNX: the weights beside the model (FILE.data), which FILE names

    @property
    def output(self) -> str:
        """What the program returns per sample, in the words of the loss it was trained with: class logits for a
        classifier, the prediction for a regression."""
        n, s = self.outputs, "s" * (self.outputs != 1)
        if self.loss == "cross_entropy":
            return f"class logits ({n} class{'es' * (n != 1)})"
        if self.loss in ("mse", "l1"):
            return "the prediction" if n == 1 else f"the prediction ({n} values)"
        if self.loss == "bce_with_logits":
            return f"logit{s} ({n} per sample, above 0 read as 1)"
        if self.loss:
            return f"{n} output{s} per sample, as your loss {self.loss} reads them"
        return f"{n} output{s} per sample"

    def to_json(self) -> dict[str, Any]:
        return {"file": str(self.file), "format": self.format, "run": self.run, "seed": self.seed,
                "version": self.version, "input_shape": self.input_shape, "dynamic_batch": self.dynamic_batch,
                "final_test_loss": self.final_test_loss, "loss": self.loss, "outputs": self.outputs,
                "output": self.output, "data_file": str(self.data_file) if self.data_file else None}


def export_model(run_folder: str | os.PathLike, seed: int, out: str | os.PathLike, *, run: Optional[str] = None,
                 fmt: str = "torch-export", allow_code: Optional[list[str | os.PathLike]] = None) -> Exported:
    """Write seed `seed`'s model as a program that runs without depl: torch.export (`torch.export.load(out)
    .module()(x)`, a .pt2 file), or ONNX (.onnx, with its weights in .onnx.data beside it) where `depl[onnx]` is
    installed.

    `out` is a new file or an earlier export, in a folder that exists: never a kept model (nor anything else in
    a run folder's models/), a runs store, a plan or another file depl keeps (`refuse_overwriting`), and its
    extension is its format's.  It is written whole or not at all (a temporary file beside it, renamed)."""
    out = Path(out)
    check_output_file("--out", out, make_folders=False)   # a folder made for an export that fails would be left
    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"--format {fmt!r}: choose {' or '.join(EXPORT_FORMATS)}")
    try:
        side = find(run_folder, seed, run)
    except training_errors() as e:
        raise ModelError(str(e)) from None
    refuse_overwriting(out, Path(run_folder), side, fmt)
    check_extension(out, fmt, EXPORT_FORMATS)
    model = load_model(run_folder, seed, run=run, allow_code=allow_code)
    with as_bad_input(*training_errors()):
        spec, _ = read(side)
        existed = out.exists()
        try:
            done = export(model, spec, out, fmt)
        except OSError as e:   # the target's disk full, a file-size limit, a folder we may not write after all
            left = "left as it was" if existed else "nothing written"
            raise BadInput(f"--out {out}: cannot be written ({e.strerror or type(e).__name__}); {left}") from None
        except Exception as e:  # torch.export refuses a network it cannot trace (your own, with Python control flow)
            if isinstance(e, training_errors()):
                raise
            root = e   # the ONNX exporter wraps torch.export's reason in words of its own steps: the reason
            while root.__cause__ is not None:
                root = root.__cause__
            first = next((x.strip() for x in re.sub(r"\x1b\[[0-9;]*m", "", str(root)).splitlines() if x.strip()), "")
            raise BadInput(f"{side['path']}: {fmt} cannot export this network: {type(root).__name__}: {first}") \
                from None
    return Exported(out, done["format"], side["run"], int(side["seed"]), side["version"], done["input_shape"],
                    bool(done.get("dynamic_batch", True)), float(side["final_test_loss"]), side.get("loss"),
                    spec.n_classes, Path(done["data_file"]) if done.get("data_file") else None)


# what a JSON file of depl's is, by its format's name (depl.NAME/VERSION)
DEPL_FILES = {"depl.plan": "a plan", "depl.model": "a kept model's sidecar", "depl.certificate": "a certificate",
              "depl.search": "a search's candidates", "depl.alpha": "the ledger of α spent"}


def refuse_overwriting(out: Path, run_folder: Path, side: dict[str, Any], fmt: str = "torch-export") -> None:
    """BadInput, naming `out` and why, where writing it would destroy what depl keeps or reads (`kept_file`), where
    it is no regular file (a device such as /dev/full, a pipe: the export is written beside it and renamed onto it,
    which would replace the device itself), or where it, or the weights file an ONNX export writes beside it
    (`out`.data), exists and is not an earlier export (`earlier_export`): a file of yours is never replaced."""
    why = kept_file(out, run_folder, side)
    if why:
        raise BadInput(f"--out {out}: {why}; export-model writes a new file or replaces an earlier export, never "
                       "what depl keeps")
    if out.exists() and not out.is_file():
        raise BadInput(f"--out {out}: is {_kind(out)}, not a regular file; export-model writes a file, whole or not "
                       "at all (a temporary file beside it, renamed onto it)")
    earlier = out.is_file() and earlier_export(out, fmt)
    if out.is_file() and not earlier:
        raise BadInput(f"--out {out}: exists and is not an earlier {fmt} export; export-model replaces only its own "
                       "files: give a new name, or remove it first")
    data = out.with_name(out.name + ".data")
    if fmt == "onnx" and (data.exists() or data.is_symlink()) and not earlier:
        raise BadInput(f"--out {out}: {data.name} beside it (where an ONNX export keeps its weights) is no earlier "
                       "export's: give a new name, or remove it first")


def earlier_export(path: Path, fmt: str) -> bool:
    """Whether the file at `path` is an export in `fmt` (a torch.export archive, an ONNX model), which an export
    may replace; False for anything else, or where it cannot be read as one."""
    try:
        if fmt == "onnx":
            import onnx   # the onnx extra: without it nothing is exported either

            onnx.load(str(path), load_external_data=False)
            return True
        with zipfile.ZipFile(path) as z:   # torch.export.save's archive: FOLDER/archive_format among its files
            return any(n.endswith("/archive_format") for n in z.namelist())
    except Exception:   # not a zip, not a protobuf, onnx missing: not an export this one may replace
        return False


def kept_file(out: Path, run_folder: Path, side: dict[str, Any]) -> str | None:
    """What `out` is that is not to be written over, or None: the model being exported (or its sidecar), anything
    in a run folder's models/ (where `depl run` keeps each seed's model), a runs store, a plan or another of
    depl's JSON files."""
    here, model = out.resolve(), Path(side["path"]).resolve()
    if here in (model, model.with_suffix(".json")):
        what = "kept model" if here == model else "kept model's sidecar"
        return f"is seed {side['seed']}'s {what} of run {side['run']}, the one being exported"
    models = models_folder_of(here, run_folder.resolve())
    if models is not None:
        return f"{'is a file' if out.exists() else 'lies'} in {models}, where a run keeps its seeds' models"
    if out.suffix.lower() in (".sqlite", ".sqlite3", ".db") or _starts_with(out, b"SQLite format 3\x00"):
        return "is a runs store (SQLite)"
    name = _depl_format(out)
    if name:
        return f"is {DEPL_FILES.get(name.split('/')[0], 'a file of depl')} ({name})"
    return None


def _kind(path: Path) -> str:
    """What a path that is no regular file is, in words."""
    mode = path.stat().st_mode
    for test, words in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a file"


def models_folder_of(path: Path, run_folder: Path) -> Path | None:
    """The run folder's models/ folder that `path` (resolved) lies in, or None: `run_folder`'s own, or any folder
    named models/ beside a runs store or holding a run's folder of sidecars (models/RUN_ID/seed-N.json)."""

    for folder in path.parents:
        if folder.name != FOLDER:
            continue
        if folder == run_folder / FOLDER or any(folder.parent.glob("*.sqlite")) or any(folder.glob("*/seed-*.json")):
            return folder
    return None


def _starts_with(path: Path, magic: bytes) -> bool:
    """Whether `path` is a regular file that starts with `magic` (a pipe is not opened: reading it would wait)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _depl_format(path: Path, most: int = 64 << 20) -> str | None:
    """The format a JSON file of depl's names ("depl.plan/1"), or None for any other file (or one too large to be
    depl's JSON)."""
    try:
        if not _starts_with(path, b"{") or path.stat().st_size > most:
            return None
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fmt = d.get("format") if isinstance(d, dict) else None
    return fmt if isinstance(fmt, str) and fmt.startswith("depl.") else None


def check_extension(out: Path, fmt: str, extensions: dict[str, str]) -> None:
    """BadInput unless `out` ends in the extension of format `fmt` (.pt2 for torch-export, .onnx for onnx), saying
    which one it takes: a program under another format's name is read as that format, and fails."""
    want, got = extensions[fmt], out.suffix.lower()
    if got == want:
        return
    other = next((f for f, ext in extensions.items() if ext == got), None)
    said = f"ends in {out.suffix}" if out.suffix else "has no extension"
    also = f", or --format {other} for a {got} file" if other else ""
    raise BadInput(f"--out {out}: {said}; --format {fmt} writes a {want} file: name it {out.with_suffix(want).name}"
                   f"{also}")
